"""h2load's figures for scripts/bench.sh, in rounds.

    h2load_table.py parse H2LOAD_OUTPUT PATH ROUND C M   # one JSON line on stdout
    h2load_table.py render RESULTS.jsonl docs/benchmarks.md

``render`` writes the table between the ``<!-- h2load:begin -->`` and
``<!-- h2load:end -->`` markers (added after the side-by-side table when
missing). Each path is compared with ``direct`` of the same round, and
the table gives the median and the range of the rounds, so that one lucky
round cannot stand for the run.
"""

import json
import re
import statistics
import sys

BEGIN, END = "<!-- h2load:begin -->", "<!-- h2load:end -->"
AFTER = "<!-- bench:end -->"
UNITS = {"us": 1.0, "ms": 1000.0, "s": 1_000_000.0}


def parse(text, path, round_, c, m):
    """One h2load run's throughput and mean request time (µs)."""
    rps = re.search(r"^finished in [^,]+, ([\d.]+) req/s", text, re.M)
    mean = re.search(r"^time for request:\s+\S+\s+\S+\s+([\d.]+)(us|ms|s)\b", text, re.M)
    if not rps or not mean:
        raise SystemExit(f"not h2load output: {path} round {round_}")
    return {
        "path": path,
        "round": int(round_),
        "c": int(c),
        "m": int(m),
        "calls_per_s": float(rps.group(1)),
        "mean_us": float(mean.group(1)) * UNITS[mean.group(2)],
    }


def spread(values, fmt):
    """``median (min–max)`` of ``values``."""
    values = sorted(values)
    median = statistics.median(values)
    if len(values) == 1:
        return fmt(median)
    return f"{fmt(median)} ({fmt(values[0])}–{fmt(values[-1])})"


def by_round(rows, path, c):
    return {r["round"]: r for r in rows if r["path"] == path and r["c"] == c}


def render(rows):
    """The markdown between the markers."""
    paths = list(dict.fromkeys(r["path"] for r in rows))
    rounds = len({r["round"] for r in rows})
    direct8, direct1 = by_round(rows, "direct", 8), by_round(rows, "direct", 1)
    out = [
        BEGIN,
        "",
        f"By h2load (`-t 1`, the same request bytes), {rounds} rounds; each figure is the"
        " median of the rounds and, in brackets, their range; each path is"
        " compared with `direct` of its own round.",
        "",
        "| path | calls/s, `-c 8 -m 16` | × direct | mean, `-c 1 -m 1` | added to direct |",
        "|---|---|---|---|---|",
    ]
    for path in paths:
        tput, lat = by_round(rows, path, 8), by_round(rows, path, 1)
        ratio = [r["calls_per_s"] / direct8[k]["calls_per_s"] for k, r in tput.items() if k in direct8]
        added = [r["mean_us"] - direct1[k]["mean_us"] for k, r in lat.items() if k in direct1]
        out.append(
            "| {} | {} | {} | {} | {} |".format(
                path,
                spread([r["calls_per_s"] for r in tput.values()], lambda v: f"{v:,.0f}"),
                "" if path == "direct" else spread(ratio, lambda v: f"{v:.2f}×"),
                spread([r["mean_us"] for r in lat.values()], lambda v: f"{v:.0f} µs"),
                "" if path == "direct" else spread(added, lambda v: f"{v:+.0f} µs"),
            )
        )
    redis, embedded = by_round(rows, "redis-rl", 8), by_round(rows, "registry-rl", 8)
    pairs = [redis[k]["calls_per_s"] / embedded[k]["calls_per_s"] for k in sorted(redis) if k in embedded]
    if pairs:
        out += [
            "",
            "Redis mode against embedded, a rate-limited tool, `-c 8 -m 16`, round by round: "
            + ", ".join(f"{p:.2f}×" for p in pairs)
            + f" (lowest {min(pairs):.2f}×).",
        ]
    out += ["", END]
    return "\n".join(out)


def write(doc, table):
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + table + tail
    elif AFTER in text:
        head, tail = text.split(AFTER, 1)
        text = head + AFTER + "\n\n" + table + tail
    else:
        raise SystemExit(f"{doc} has neither {BEGIN} nor {AFTER}")
    with open(doc, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv):
    if len(argv) == 7 and argv[1] == "parse":
        with open(argv[2], encoding="utf-8") as f:
            print(json.dumps(parse(f.read(), *argv[3:])))
    elif len(argv) == 4 and argv[1] == "render":
        with open(argv[2], encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        write(argv[3], render(rows))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
