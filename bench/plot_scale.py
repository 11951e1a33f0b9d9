"""Renders scripts/scale.sh's results: the tables between the
``<!-- scale:begin -->`` / ``<!-- scale:end -->`` and
``<!-- scale-out:begin -->`` / ``<!-- scale-out:end -->`` markers of
docs/benchmarks.md, and small multiples as SVG (docs/scale.svg,
docs/scale-out.svg), written with the standard library alone.

    python3 bench/plot_scale.py --catalog CATALOG.jsonl --scale-out SCALE_OUT.jsonl \\
        [--load-before "0.50 0.40 0.30"] [--doc docs/benchmarks.md --svg-dir docs]

Without --doc, the tables are printed only. A section whose results file is
empty is left as it is.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
from pathlib import Path

CATALOG_MARKERS = ("<!-- scale:begin -->", "<!-- scale:end -->")
SCALE_OUT_MARKERS = ("<!-- scale-out:begin -->", "<!-- scale-out:end -->")
COLOURS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2"]


def read_lines(path: str) -> list[dict]:
    text = Path(path).read_text() if path and Path(path).exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def machine(load_before: str) -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        commit = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown commit"
    load = f"; load average before the run {load_before}" if load_before else ""
    return (
        f"Measured {datetime.date.today().isoformat()} by `scripts/scale.sh` on "
        f"{os.cpu_count()} × {cpu}, Linux {platform.release()}, at {commit}{load}. "
        "The registry, the load generator, the sidecars and Redis share the machine."
    )


def mib(kib) -> str:
    return f"{kib / 1024:.1f}" if kib is not None else "–"


def ms(value) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def pair(summary: dict) -> str:
    return f"{ms(summary['p50_ms'])} / {ms(summary['p99_ms'])}"


def catalog_table(rows: list[dict], header: str) -> str:
    out = [
        CATALOG_MARKERS[0],
        "",
        header,
        "",
        "Announces, heartbeats and memory:",
        "",
        "| mode | tools | instances | announces/s | tools announced/s "
        "| registry busy after the last answer (ms) | heartbeats/s | RSS empty (MiB) "
        "| RSS announced (MiB) | per tool (KiB) | RSS after reads (MiB) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r, mode = row["result"], row["mode"]
        empty, announced = r["rss_before_kib"], r["rss_announced_kib"]
        per_tool = (
            f"{(announced - empty) / r['tools']:.1f}"
            if empty is not None and announced is not None
            else "–"
        )
        out.append(
            f"| {mode} | {r['tools']:,} | {r['instances']:,} | {r['announces_per_s']:,.0f} "
            f"| {r['tools_announced_per_s']:,.0f} | {ms(r.get('quiet_after_announces_ms'))} "
            f"| {r['heartbeats_per_s']:,.0f} | {mib(empty)} | {mib(announced)} | {per_tool} "
            f"| {mib(r['rss_read_kib'])} |"
        )
    redis_sweeps = any(r["result"]["expiry"].get("redis_sweep_ms") is not None for r in rows)
    out += [
        "",
        "The lease sweep, every lease let go at once (times from the last lease's deadline):",
        "",
        "| mode | tools | leases expired | catalog listed empty after (ms) "
        "| registry quiet after (ms) | registry CPU (ms) | per lease (µs) | per tool (µs) |"
        + (" Redis sweep scripts (ms / runs) |" if redis_sweeps else ""),
        "|---|---|---|---|---|---|---|---|" + ("---|" if redis_sweeps else ""),
    ]
    for row in rows:
        r, mode = row["result"], row["mode"]
        expiry = r["expiry"]
        cpu = expiry.get("cpu_ms")
        per = (lambda n: f"{cpu * 1000 / n:.1f}" if cpu is not None and n else "–")
        line = (
            f"| {mode} | {r['tools']:,} | {expiry['leases']:,} "
            f"| {ms(expiry['emptied_after_deadline_ms'])} | {ms(expiry.get('quiet_after_deadline_ms'))} "
            f"| {ms(cpu)} | {per(expiry['leases'])} | {per(r['tools'])} |"
        )
        if redis_sweeps:
            scripts = expiry.get("redis_sweep_ms")
            line += (
                f" {ms(scripts)} / {expiry.get('redis_sweeps')} |" if scripts is not None else " – |"
            )
        out.append(line)
    out += [
        "",
        "Reads, p50 / p99 in ms (the whole catalog: p50 / max of the walks):",
        "",
        "| mode | tools | whole catalog, pages | whole catalog | page of 100, first "
        "| page of 100, 90 % in | `GetTool`, random names | `SearchTools` | search ranking |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        r, mode = row["result"], row["mode"]
        search = r["search"]
        out.append(
            f"| {mode} | {r['tools']:,} | {r['list_pages']} "
            f"| {ms(r['list_tools_p50_ms'])} / {ms(r['list_tools_max_ms'])} "
            f"| {pair(r['page_first'])} | {pair(r['page_deep'])} | {pair(r['get_tool'])} "
            f"| {pair(search['all'])} | {search['ranking'].removeprefix('SEARCH_RANKING_').lower()} |"
        )
    out += ["", "![scale curves](scale.svg)", "", CATALOG_MARKERS[1]]
    return "\n".join(out)


def scale_out_table(lines: list[dict], header: str) -> str:
    out = [
        SCALE_OUT_MARKERS[0],
        "",
        header,
        "",
        "| replicas | `echo` calls/s, all | `echo` calls/s per replica (min–max) "
        "| `echo_limited` answered/s, all | accepted | allowed, r·T + b | error "
        "| error vs r·(elapsed) + b | refused (`RESOURCE_EXHAUSTED`) | other failures |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, (free, limited) in sorted(by_replicas(lines).items()):
        per = [r["ok_per_s"] for r in free["per_replica"]] if free else []
        limit = limited["limit"] if limited else None
        failed = sum(x["total"]["failed"] for x in (free, limited) if x)
        cells = [
            f"{n}",
            f"{free['ok_per_s']:,.0f}" if free else "–",
            f"{sum(per) / len(per):,.0f} ({min(per):,.0f}–{max(per):,.0f})" if per else "–",
            f"{limited['answered_per_s']:,.0f}" if limited else "–",
            f"{limited['total']['ok']:,}" if limited else "–",
            f"{limit['allowed']:,.0f} ({limit['rate']:,.0f}/s × {limited['seconds']:g} s + {limit['burst']})"
            if limit
            else "–",
            f"{limit['error_pct']:+.2f} %" if limit else "–",
            f"{limit['error_pct_elapsed']:+.2f} % ({limited['elapsed_s']:.3f} s)" if limit else "–",
            f"{limited['total']['limited']:,}" if limited else "–",
            f"{failed:,}",
        ]
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "![scale-out](scale-out.svg)", "", SCALE_OUT_MARKERS[1]]
    return "\n".join(out)


def by_replicas(lines: list[dict]) -> dict[int, tuple[dict | None, dict | None]]:
    runs: dict[int, list] = {}
    for line in lines:
        slot = runs.setdefault(line["replicas"], [None, None])
        slot[1 if line.get("limit") else 0] = line
    return {n: (free, limited) for n, (free, limited) in runs.items()}


# --- SVG -------------------------------------------------------------------

PANEL_W, PANEL_H = 300, 200
LEFT, RIGHT, TOP, BOTTOM = 52, 34, 40, 34


def compact(value: float) -> str:
    magnitude = abs(value)
    if magnitude >= 1e6:
        return f"{value / 1e6:.3g}M"
    if magnitude >= 1e3:
        return f"{value / 1e3:.3g}k"
    if magnitude >= 10 or magnitude == 0:
        return f"{value:.0f}"
    return f"{value:.2g}"


def nice_step(span: float, steps: int = 4) -> float:
    """The smallest of 1, 2, 2.5 or 5 × 10^k that covers `span` in `steps`."""
    raw = span / steps if span > 0 else 1.0
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)


def ticks(values: list[float]) -> list[float]:
    """Round grid values from below the lowest (or 0) to above the highest."""
    low, high = min([0.0, *values]), max([0.0, *values]) * 1.1
    step = nice_step(high - low)
    first, last = math.floor(low / step), math.ceil(high / step)
    return [i * step for i in range(first, max(last, first + 1) + 1)]


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def panel(x0: float, y0: float, title: str, xs: list[float], xlabel: str, log_base: float,
          series: list[tuple[str, str, list[float | None]]], extent: tuple[float, ...] = ()) -> list[str]:
    """One chart: `series` are (label, colour, y per x) on a log x axis; the
    y axis spans 0, every value, and `extent`."""
    parts = [f'<text x="{x0 + LEFT}" y="{y0 + 16}" font-size="12" font-weight="bold">{escape(title)}</text>']
    grid = ticks([v for _, _, ys in series for v in ys if v is not None] + list(extent))
    low, high = grid[0], grid[-1]
    plot_w, plot_h = PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM
    top = y0 + TOP

    def y_of(v: float) -> float:
        return top + plot_h - plot_h * (v - low) / (high - low)

    logs = [math.log(x, log_base) for x in xs]
    lo, hi = min(logs), max(logs)
    pad = 0.5 if hi == lo else (hi - lo) * 0.08

    def x_of(x: float) -> float:
        return x0 + LEFT + plot_w * (math.log(x, log_base) - lo + pad) / (hi - lo + 2 * pad)

    for v in grid:
        y = y_of(v)
        stroke = "#999" if v == 0 else "#e4e4e4"
        parts.append(f'<line x1="{x0 + LEFT}" x2="{x0 + LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="{stroke}"/>')
        parts.append(f'<text x="{x0 + LEFT - 5}" y="{y + 4:.1f}" text-anchor="end">{compact(v)}</text>')
    for x in xs:
        parts.append(
            f'<text x="{x_of(x):.1f}" y="{top + plot_h + 14}" text-anchor="middle">{compact(x)}</text>'
        )
    parts.append(
        f'<text x="{x0 + LEFT + plot_w / 2}" y="{top + plot_h + 28}" text-anchor="middle" fill="#555">{escape(xlabel)}</text>'
    )
    for index, (label, colour, ys) in enumerate(series):
        points = [(x_of(x), y_of(y), y) for x, y in zip(xs, ys) if y is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py, _ in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for px, py, v in points:
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{colour}"><title>{escape(label)}: {v:,.3g}</title></circle>'
            )
            # The second series' labels go below its points, so two close
            # series stay legible.
            dy = 13 if index % 2 else -5
            parts.append(
                f'<text x="{px + 4:.1f}" y="{py + dy:.1f}" fill="{colour}" font-size="10">{compact(v)}</text>'
            )
        if len(series) > 1:
            lx = x0 + LEFT + index * 110
            parts.append(f'<rect x="{lx}" y="{y0 + 22}" width="8" height="8" fill="{colour}"/>')
            parts.append(f'<text x="{lx + 11}" y="{y0 + 30}" font-size="10">{escape(label)}</text>')
    return parts


def svg(panels: list[tuple], columns: int, title: str) -> str:
    rows = math.ceil(len(panels) / columns)
    width, height = columns * PANEL_W + 10, rows * PANEL_H + 40
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="20" font-size="14">{escape(title)}</text>',
    ]
    for i, args in enumerate(panels):
        parts += panel(5 + (i % columns) * PANEL_W, 30 + (i // columns) * PANEL_H, *args)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def catalog_svg(rows: list[dict]) -> str:
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    xs = sorted({r["result"]["tools"] for r in rows})

    def series(*picks: tuple[str, callable]) -> list:
        out = []
        for mode in modes:
            results = {r["result"]["tools"]: r["result"] for r in rows if r["mode"] == mode}
            for name, pick in picks:
                label = f"{mode}, {name}" if name else mode
                out.append((label, COLOURS[len(out) % len(COLOURS)],
                            [pick(results[x]) if x in results else None for x in xs]))
        return out

    def one(pick):
        return series(("", pick))

    x = "tools (log scale)"
    panels = [
        ("announces/s (10 tools each)", xs, x, 10, one(lambda r: r["announces_per_s"])),
        ("heartbeats/s", xs, x, 10, one(lambda r: r["heartbeats_per_s"])),
        ("ListTools, page of 100, p99 (ms)", xs, x, 10,
         series(("first", lambda r: r["page_first"]["p99_ms"]), ("90 % in", lambda r: r["page_deep"]["p99_ms"]))),
        ("GetTool p99 (ms)", xs, x, 10, one(lambda r: r["get_tool"]["p99_ms"])),
        ("SearchTools p99 (ms)", xs, x, 10, one(lambda r: r["search"]["all"]["p99_ms"])),
        ("whole catalog listed, p50 (ms)", xs, x, 10, one(lambda r: r["list_tools_p50_ms"])),
        ("RSS after reads (MiB)", xs, x, 10,
         one(lambda r: r["rss_read_kib"] / 1024 if r["rss_read_kib"] is not None else None)),
        ("lease sweep CPU, every lease (ms)", xs, x, 10, one(lambda r: r["expiry"].get("cpu_ms"))),
    ]
    return svg(panels, 4, "Registry at catalog size (scripts/scale.sh)")


def scale_out_svg(lines: list[dict]) -> str:
    runs = by_replicas(lines)
    xs = sorted(runs)

    def pick(which: int, f) -> list:
        return [f(runs[n][which]) if runs[n][which] else None for n in xs]

    def mean_per_replica(line):
        per = [r["ok_per_s"] for r in line["per_replica"]]
        return sum(per) / len(per)

    x = "registry replicas (log scale)"
    panels = [
        ("echo: calls/s", xs, x, 2, [
            ("all replicas", COLOURS[0], pick(0, lambda l: l["ok_per_s"])),
            ("per replica", COLOURS[1], pick(0, mean_per_replica)),
        ]),
        ("echo_limited: accepted in the window", xs, x, 2, [
            ("accepted", COLOURS[2], pick(1, lambda l: l["total"]["ok"])),
            ("r·T + b", COLOURS[3], pick(1, lambda l: l["limit"]["allowed"])),
        ]),
        # At least ±1 %, so that a tiny error does not fill the chart.
        ("echo_limited: error vs r·T + b (%)", xs, x, 2, [
            ("error", COLOURS[3], pick(1, lambda l: l["limit"]["error_pct"])),
        ], (-1.0, 1.0 / 1.1)),
    ]
    return svg(panels, 3, "Registry replicas on a three-master Redis Cluster (scripts/scale.sh)")


def rewrite(doc: Path, markers: tuple[str, str], block: str) -> None:
    text = doc.read_text()
    begin, end = markers
    if begin not in text or end not in text:
        raise SystemExit(f"{doc} has no {begin} … {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    doc.write_text(head + block + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalog", default="")
    parser.add_argument("--scale-out", default="")
    parser.add_argument("--load-before", default="")
    parser.add_argument("--doc")
    parser.add_argument("--svg-dir")
    args = parser.parse_args()
    header = machine(args.load_before)
    catalog, scale_out = read_lines(args.catalog), read_lines(args.scale_out)
    if catalog:
        block = catalog_table(catalog, header)
        print(block)
        if args.doc:
            rewrite(Path(args.doc), CATALOG_MARKERS, block)
            Path(args.svg_dir, "scale.svg").write_text(catalog_svg(catalog))
    if scale_out:
        block = scale_out_table(scale_out, header)
        print(block)
        if args.doc:
            rewrite(Path(args.doc), SCALE_OUT_MARKERS, block)
            Path(args.svg_dir, "scale-out.svg").write_text(scale_out_svg(scale_out))


if __name__ == "__main__":
    main()
