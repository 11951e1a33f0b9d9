#!/usr/bin/env python3
"""Sums a dhat heap profile's live bytes at its end by owner.

    python3 bench/heap_sites.py target/dhat-heap.json [--top 25] [--depth N]

Each allocation site is charged to the innermost frame of toolmesh's own
code that led to it (its function), and to the first frame outside the
allocator and the standard library (the crate that asked), so that a
catalog's memory reads as: descriptors, compiled validators, the search
index, the lease maps, each with the crate whose structures hold it.
"""
import json
import re
import sys
from collections import defaultdict

PLUMBING = re.compile(
    r"^(alloc::|core::|std::|<alloc::|<core::|<std::|hashbrown::|dhat::|__rust|<dhat|"
    r"<hashbrown|\[root\]|<T as alloc|<\[T\] as alloc|<str as alloc)"
)


def function(frame: str) -> str:
    # "0x5f...: toolmesh_registry::catalog::Catalog::announce (registry/src/catalog.rs:120:9)"
    text = frame.split(": ", 1)[-1]
    return re.sub(r" \(.*\)$", "", text)


def main() -> None:
    args = sys.argv[1:]
    path = args[0]
    top = int(args[args.index("--top") + 1]) if "--top" in args else 25
    profile = json.load(open(path))
    frames = profile["ftbl"]
    ours = defaultdict(int)
    asker = defaultdict(int)
    total = 0
    for pp in profile["pps"]:
        live = pp.get("eb", 0)
        if not live:
            continue
        total += live
        names = [function(frames[i]) for i in pp["fs"]]
        own = next((n for n in names if n.startswith(("toolmesh_", "<toolmesh_"))), "(not ours)")
        ours[re.sub(r"::\{\{closure\}\}", "", own)] += live
        first = next((n for n in names if not PLUMBING.match(n)), "(allocator)")
        asker[first.split("::")[0].lstrip("<")] += live
    mib = lambda b: b / 1048576
    print(f"live at the end: {mib(total):.1f} MiB")
    print("\nby toolmesh function that led to it:")
    for name, live in sorted(ours.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {mib(live):7.2f} MiB  {live * 100 / total:5.1f} %  {name}")
    print("\nby the crate that asked:")
    for name, live in sorted(asker.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {mib(live):7.2f} MiB  {live * 100 / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
