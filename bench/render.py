"""Renders scripts/bench.sh's results: the side-by-side table between the
``<!-- bench:begin -->`` and ``<!-- bench:end -->`` markers of
docs/benchmarks.md, and a bar chart of calls/s as SVG (no dependencies).

    python3 bench/render.py RESULTS.jsonl docs/benchmarks.md docs/bench.svg
"""

from __future__ import annotations

import datetime
import json
import platform
import sys
from pathlib import Path

PATHS = ["direct", "nginx", "registry", "registry-1t", "registry-rl", "redis-rl"]
COLOURS = {
    "direct": "#4c78a8",
    "nginx": "#f58518",
    "registry": "#54a24b",
    "registry-1t": "#2f6b29",
    "registry-rl": "#88d27a",
    "redis-rl": "#e45756",
}
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def load(path: str) -> dict[tuple[int, int, int, str], dict]:
    rows = {}
    for line in Path(path).read_text().splitlines():
        row = json.loads(line)
        rows[(row["payload"], row["connections"], row["streams"], row["label"])] = row
    return rows


def loads(rows) -> list[tuple[int, int, int]]:
    return sorted({key[:3] for key in rows}, key=lambda k: (k[0], k[1] * k[2]))


def ratio(rows, load, a: str, b: str) -> str:
    x, y = rows.get((*load, a)), rows.get((*load, b))
    if not x or not y or not y["calls_per_s"]:
        return "–"
    return f"{x['calls_per_s'] / y['calls_per_s']:.2f}×"


def table(rows) -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import os

    out = [
        BEGIN,
        "",
        f"Measured {datetime.date.today().isoformat()} by `scripts/bench.sh` on "
        f"{os.cpu_count()} × {cpu}, Linux {platform.release()}. Load generator, "
        "servers and Redis share the machine.",
        "",
        "| arguments | in flight | path | calls/s | p50 | p99 | mean |",
        "|---|---|---|---|---|---|---|",
    ]
    for load in loads(rows):
        payload, c, m = load
        for name in PATHS:
            row = rows.get((*load, name))
            if not row:
                continue
            size = "100 B" if payload < 1024 else f"{payload // 1024} KiB"
            out.append(
                f"| {size} | {c * m} (`-c {c} -m {m}`) | {name} | {row['calls_per_s']:,.0f} "
                f"| {row['p50_us']:.0f} µs | {row['p99_us']:.0f} µs | {row['mean_us']:.0f} µs |"
            )
    out += [
        "",
        "| arguments | in flight | registry / direct | registry / nginx | registry-1t / direct | redis-rl / registry-rl | registry mean − direct mean | registry-1t mean − direct mean |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for load in loads(rows):
        payload, c, m = load
        size = "100 B" if payload < 1024 else f"{payload // 1024} KiB"
        direct = rows.get((*load, "direct"))

        def added(name: str) -> str:
            path = rows.get((*load, name))
            return f"{path['mean_us'] - direct['mean_us']:+.0f} µs" if direct and path else "–"

        out.append(
            f"| {size} | {c * m} | {ratio(rows, load, 'registry', 'direct')} "
            f"| {ratio(rows, load, 'registry', 'nginx')} "
            f"| {ratio(rows, load, 'registry-1t', 'direct')} "
            f"| {ratio(rows, load, 'redis-rl', 'registry-rl')} | {added('registry')} "
            f"| {added('registry-1t')} |"
        )
    out += ["", "![calls/s by path](bench.svg)", "", END]
    return "\n".join(out)


def svg(rows) -> str:
    groups = loads(rows)
    top = max((r["calls_per_s"] for r in rows.values()), default=1) * 1.1
    bar, gap, left, height, plot = 14, 18, 60, 320, 260
    width = left + len(groups) * (len(PATHS) * bar + gap) + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 60}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13">calls/s by path (scripts/bench.sh)</text>',
    ]
    for i in range(5):
        value = top * i / 4
        y = 30 + plot - plot * i / 4
        parts.append(f'<line x1="{left}" x2="{width - 10}" y1="{y}" y2="{y}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4}" text-anchor="end">{value / 1000:.0f}k</text>')
    for g, load in enumerate(groups):
        payload, c, m = load
        x0 = left + 10 + g * (len(PATHS) * bar + gap)
        for p, name in enumerate(PATHS):
            row = rows.get((*load, name))
            if not row:
                continue
            h = plot * row["calls_per_s"] / top
            parts.append(
                f'<rect x="{x0 + p * bar}" y="{30 + plot - h:.1f}" width="{bar - 2}" '
                f'height="{h:.1f}" fill="{COLOURS[name]}"><title>{name}: '
                f'{row["calls_per_s"]:,.0f} calls/s</title></rect>'
            )
        size = "100 B" if payload < 1024 else f"{payload // 1024} KiB"
        parts.append(
            f'<text x="{x0 + len(PATHS) * bar / 2}" y="{30 + plot + 16}" text-anchor="middle">'
            f"{size}, {c * m}</text>"
        )
    for p, name in enumerate(PATHS):
        x = left + p * 110
        parts.append(f'<rect x="{x}" y="{height + 30}" width="10" height="10" fill="{COLOURS[name]}"/>')
        parts.append(f'<text x="{x + 14}" y="{height + 39}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def main() -> None:
    results, doc, chart = sys.argv[1:4]
    rows = load(results)
    text = Path(doc).read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + table(rows) + tail
    else:
        text = text.rstrip("\n") + "\n\n## Side by side (`scripts/bench.sh`)\n\n" + table(rows) + "\n"
    Path(doc).write_text(text)
    Path(chart).write_text(svg(rows) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
