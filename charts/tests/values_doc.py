"""The values tables of docs/kubernetes.md, generated from the charts'
``values.yaml`` comments (helm-docs style: a ``# --`` comment, possibly
continued on the next ``#`` lines, documents the key below it; a documented
map documents everything in it).

    python3 charts/tests/values_doc.py           # rewrite the tables in docs/kubernetes.md
    python3 charts/tests/values_doc.py --check   # exit 1 if they are not current

Each table sits between ``<!-- values: PATH -->`` and ``<!-- end values -->``
in the doc. charts/tests/test_charts.py checks, through the same functions,
that every value is documented and that the tables are current.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "kubernetes.md"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/]+|\"[^\"]+\"):(?:\s+(?P<value>.*))?$")
_TABLE = re.compile(
    r"(<!-- values: (?P<path>[^ ]+) -->\n)(?P<body>.*?)(<!-- end values -->)", re.DOTALL
)


@dataclass(frozen=True)
class Documented:
    """A value with its `# --` comment."""

    path: str
    description: str
    default: Any


def documented(values_file: Path) -> list[Documented]:
    """Every key of ``values_file`` with a ``# --`` comment, in file order."""
    text = values_file.read_text()
    loaded = yaml.safe_load(text) or {}
    out: list[Documented] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] | None = None  # the `# --` block being read
    skip_deeper_than: int | None = None  # inside a list or a block scalar
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if skip_deeper_than is not None:
            if not stripped or indent > skip_deeper_than or (
                indent == skip_deeper_than and stripped.startswith("- ")
            ):
                continue
            skip_deeper_than = None
        if not stripped:
            comment = None
            continue
        if stripped.startswith("#"):
            body = stripped.lstrip("#").strip()
            if stripped.startswith("# --"):
                comment = [stripped[len("# --"):].strip()]
            elif comment is not None:
                comment.append(body)
            continue
        if stripped.startswith("- "):
            skip_deeper_than = indent
            comment = None
            continue
        match = _KEY.match(line)
        if not match:
            comment = None
            continue
        key = match["key"].strip('"')
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        path = ".".join(k for _, k in stack)
        value = (match["value"] or "").split(" #")[0].strip()
        if value in ("|", ">", "|-", ">-", "|+", ">+"):
            skip_deeper_than = indent
        if comment is not None:
            out.append(Documented(path, " ".join(comment).strip(), lookup(loaded, path)))
        comment = None
    return out


def lookup(values: Any, path: str) -> Any:
    for key in path.split("."):
        values = values[key]
    return values


def leaves(values: Any, prefix: str = "") -> list[str]:
    """Every value's path: maps are walked (an empty map is a value), lists
    and scalars are values."""
    if isinstance(values, dict) and values:
        out = []
        for key, value in values.items():
            out += leaves(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    return [prefix]


def undocumented(values_file: Path) -> list[str]:
    """Paths of the values that neither they nor a map above them documents."""
    loaded = yaml.safe_load(values_file.read_text()) or {}
    docs = {d.path for d in documented(values_file)}
    missing = []
    for leaf in leaves(loaded):
        parts = leaf.split(".")
        if not any(".".join(parts[:i]) in docs for i in range(1, len(parts) + 1)):
            missing.append(leaf)
    return missing


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _default(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if len(text) > 90:
        return "see values.yaml"
    return f"`{text.replace('|', '&#124;')}`"


_SCHEMA_TYPES = {"integer": "int", "number": "number", "string": "string", "boolean": "bool",
                 "array": "list", "object": "object", "null": "null"}


def _schema_type(schema: dict[str, Any] | None, path: str) -> str | None:
    """The type ``values.schema.json`` gives the value at ``path``, if any."""
    node: Any = schema
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node.get("properties", {}):
            return None
        node = node["properties"][key]
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    types = node.get("type")
    if types is None:
        return None
    types = types if isinstance(types, list) else [types]
    return " or ".join(_SCHEMA_TYPES.get(t, t) for t in types)


def table(values_file: Path) -> str:
    """The Markdown table of ``values_file``'s documented values (types from
    the chart's ``values.schema.json`` when it has one)."""
    schema_file = values_file.parent / "values.schema.json"
    schema = json.loads(schema_file.read_text()) if schema_file.is_file() else None
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for d in documented(values_file):
        description = d.description.replace("|", "&#124;")
        kind = _schema_type(schema, d.path) or _type(d.default)
        rows.append(f"| `{d.path}` | {kind} | {_default(d.default)} | {description} |")
    return "\n".join(rows) + "\n"


def updated(doc: str) -> str:
    """``doc`` with every values table regenerated."""

    def replace(match: re.Match[str]) -> str:
        return match[1] + table(REPO / match["path"]) + match[4]

    return _TABLE.sub(replace, doc)


def tables_in(doc: str) -> list[str]:
    """The values files ``doc`` has a table of."""
    return [m["path"] for m in _TABLE.finditer(doc)]


def main(argv: list[str]) -> int:
    current = DOC.read_text()
    new = updated(current)
    if "--check" in argv:
        if new != current:
            print(f"{DOC.relative_to(REPO)}: values tables are not current; run {Path(__file__).relative_to(REPO)}", file=sys.stderr)
            return 1
        return 0
    if new != current:
        DOC.write_text(new)
        print(f"updated {DOC.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
