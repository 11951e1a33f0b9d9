"""Helm from Python, for the chart tests: the charts, their values files,
and rendering them as `helm template` would, through the Helm SDK that the
``helm-python-sdk`` package bundles (no ``helm`` binary needed).

- :data:`CHARTS`: every chart of the repository, by name.
- :func:`prepared` copies the charts into a folder of their own, keeping
  their relative places (the example's ``file://`` dependency), and runs
  ``helm dependency update`` there, so that the work tree is never written.
- :func:`render` renders a chart to its objects, each tagged with the
  template it came from.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

import helm_python as helm

#: The repository's root.
REPO = Path(__file__).resolve().parents[2]

# Helm's Go log lines (e.g. `fail` messages while linting) would only be
# noise in the tests' output: every result is checked from the API.
helm.disable_logging()


@dataclass(frozen=True)
class ChartInfo:
    """A chart of the repository."""

    #: Its name (Chart.yaml's).
    name: str
    #: Its folder, relative to the repository's root.
    path: str
    #: Whether it is a library chart (named templates only, never rendered).
    library: bool = False

    @property
    def source(self) -> Path:
        return REPO / self.path

    def ci_values(self) -> list[Path]:
        """Its ``ci/*.yaml`` values files."""
        return sorted((self.source / "ci").glob("*.yaml"))


REGISTRY = ChartInfo("toolmesh", "charts/toolmesh")
SIDECAR = ChartInfo("toolmesh-sidecar", "charts/toolmesh-sidecar", library=True)
EXAMPLE = ChartInfo("inventory-tool", "examples/charts/inventory-tool")

#: Every chart, by name.
CHARTS = {c.name: c for c in (REGISTRY, SIDECAR, EXAMPLE)}

#: Values files for `podman kube play` (charts/tests/kube-play/<chart>.yaml).
KUBE_PLAY_VALUES = REPO / "charts" / "tests" / "kube-play"


def prepared(into: Path) -> dict[str, Path]:
    """Copies every chart under ``into`` (same relative paths), runs
    ``helm dependency update`` for the charts that have dependencies, and
    returns each chart's copy by name."""
    copies = {}
    for chart in CHARTS.values():
        target = into / chart.path
        shutil.copytree(
            chart.source, target, ignore=shutil.ignore_patterns("charts", "Chart.lock", "*.tgz")
        )
        copies[chart.name] = target
    for path in copies.values():
        metadata = yaml.safe_load((path / "Chart.yaml").read_text())
        if metadata.get("dependencies"):
            helm.dependency_update(str(path))
    return copies


def load_values(path: Path) -> dict[str, Any]:
    """A values file, as Helm reads ``-f FILE``."""
    return yaml.safe_load(path.read_text()) or {}


def merged(*layers: dict[str, Any] | None) -> dict[str, Any]:
    """Values files layered as ``-f a -f b``: maps merge, the rest is replaced."""
    out: dict[str, Any] = {}
    for layer in layers:
        if layer:
            out = _merge(out, layer)
    return out


def _merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class Rendered:
    """A chart rendered: its objects and its NOTES.txt."""

    objects: list[dict[str, Any]]
    notes: str

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [o for o in self.of_kind(kind) if name is None or o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
        return found[0]

    def hooks(self) -> list[dict[str, Any]]:
        return [o for o in self.objects if is_hook(o)]

    def installed(self) -> list[dict[str, Any]]:
        """The objects `helm install` creates (hooks left out)."""
        return [o for o in self.objects if not is_hook(o)]


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (obj.get("metadata", {}).get("annotations") or {})


def render(
    chart: Path,
    values: dict[str, Any] | None = None,
    name: str = "toolmesh",
    namespace: str = "toolmesh",
) -> Rendered:
    """Renders ``chart`` (a prepared copy) as ``helm template`` does. Raises
    ``helm_python.HelmValuesError`` for values the schema refuses and
    ``helm_python.HelmRenderError`` for a template that fails (``fail``)."""
    with helm.Chart.load(str(chart)) as loaded:
        manifests = loaded.render(values or {}, name=name, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    notes = ""
    for template, text in sorted(manifests.items()):
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            doc.setdefault("metadata", {})
            # Where it came from, for messages; removed before validation.
            doc["__template__"] = template
            objects.append(doc)
    return Rendered(objects, notes)


def without_origin(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k != "__template__"}


def workloads(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """Each workload and its pod spec."""
    for obj in objects:
        kind = obj["kind"]
        if kind == "Pod":
            yield obj, obj["spec"]
        elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]
        elif kind == "CronJob":
            yield obj, obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def kn(obj: dict[str, Any]) -> str:
    """`Kind/name (template)`, for messages."""
    return f"{obj['kind']}/{obj['metadata'].get('name')} ({obj.get('__template__', '?')})"
