"""Helm from Python, for the chart tests: the charts, their values files,
and rendering them as `helm template` would, through the Helm SDK that the
``helm-python-sdk`` package bundles (no ``helm`` binary needed).

- :data:`CHARTS`: every chart of the repository, by name.
- :func:`prepared` copies the charts into a folder of their own, keeping
  their relative places (the example's ``file://`` dependency), and runs
  ``helm dependency update`` there, so that the work tree is never written.
- :func:`render` renders a chart to its objects, each tagged with the
  template it came from, as `helm template` does (``lookup`` finds
  nothing); :class:`FakeCluster` renders it as `helm install` and `helm
  upgrade` do, with ``lookup`` asking a Kubernetes API on loopback that
  holds the Secrets the test gives it.
- :func:`dashboard_exprs` and :func:`dashboard_metric_names`: the PromQL of
  a Grafana dashboard (the registry chart's ``dashboards/toolmesh.json``)
  and the metric names it reads.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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

#: The registry chart's Grafana dashboard.
DASHBOARD = REGISTRY.source / "dashboards" / "toolmesh.json"


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
    return parsed(manifests)


def parsed(manifests: dict[str, str]) -> Rendered:
    """Helm's rendered templates (template path -> text) as objects."""
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


class FakeCluster:
    """A Kubernetes API on a loopback port that answers what Helm's
    ``lookup`` asks (the core group's resource list, then ``GET`` of a
    Secret), holding :attr:`secrets`; every other request is a 404, as a
    cluster answers for an object it does not have. :meth:`render` renders
    a chart connected to it, as `helm upgrade` does; :attr:`requests` lists
    the paths asked, so a test can see that ``lookup`` did ask.

    Use it as a context manager (it stops its server at the end)."""

    def __init__(self) -> None:
        #: (namespace, name) -> the Secret's data, as text.
        self.secrets: dict[tuple[str, str], dict[str, str]] = {}
        #: The paths asked, in order.
        self.requests: list[str] = []
        cluster = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server API)
                path = self.path.split("?", 1)[0]
                cluster.requests.append(path)
                status, body = cluster._answer(path.strip("/").split("/"))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _answer(self, parts: list[str]) -> tuple[int, dict[str, Any]]:
        if parts == ["api", "v1"]:
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1", "resources": [
                {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret",
                 "verbs": ["get", "list"]}]}
        if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "secrets":
            data = self.secrets.get((parts[3], parts[5]))
            if data is not None:
                return 200, {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                             "metadata": {"name": parts[5], "namespace": parts[3]},
                             "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}}
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                     "code": 404, "message": f"/{'/'.join(parts)} not found"}

    @property
    def kubeconfig(self) -> str:
        host, port = self._server.server_address[:2]
        return yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://{host}:{port}"}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        })

    def render(self, chart: Path, values: dict[str, Any] | None = None, name: str = "toolmesh",
               namespace: str = "toolmesh") -> Rendered:
        """Renders ``chart`` connected to this cluster (``lookup`` asks it),
        as `helm upgrade` does; nothing is created."""
        with helm.Config(kubeconfig_content=self.kubeconfig, namespace=namespace) as config, \
                helm.Chart.load(str(chart)) as loaded:
            manifests = config.render(loaded, values or {}, name=name, namespace=namespace, is_upgrade=True)
        return parsed(manifests)

    def __enter__(self) -> "FakeCluster":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


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


# --- Grafana dashboards ---------------------------------------------------


def dashboard_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of a dashboard, those inside collapsed rows included."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of a dashboard: every panel target's ``expr``, and
    the expression of every query variable (``label_values(EXPR, label)``,
    ``query_result(EXPR)``); ``where`` names the panel or the variable."""
    out = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            if target.get("expr"):
                out.append((f"panel {panel.get('title')!r} target {target.get('refId')}", target["expr"]))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query", "")
        match = re.fullmatch(r"\s*(?:label_values\(\s*(.+?)\s*,\s*[a-zA-Z_]\w*\s*\)|query_result\((.+)\))\s*", query or "", re.S)
        if match and (match[1] or match[2]):
            out.append((f"variable {variable.get('name')!r}", match[1] or match[2]))
    return out


#: PromQL words that are not metric names: aggregation operators, their
#: modifiers, binary operators and literals. (Functions are recognised by
#: the `(` after them.)
PROMQL_KEYWORDS = frozenset({
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "and", "or", "unless", "atan2", "inf", "nan",
})

_PROMQL_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_GRAFANA_VARIABLE = re.compile(r"\$\{[^}]*\}|\[\[[^\]]*\]\]|\$\w+")
_PROMQL_MATCHERS = re.compile(r"\{[^{}]*\}")
_PROMQL_RANGE = re.compile(r"\[[^\[\]]*\]")
_PROMQL_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.I)
_PROMQL_IDENTIFIER = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads, as written (a
    histogram's ``_bucket`` series stays ``..._bucket``): identifiers that
    are not functions, keywords, labels (in ``{...}`` or ``by (...)``),
    strings, durations or Grafana variables); and the names a selector
    gives with ``{__name__="..."}``."""
    named = set(re.findall(r'\b__name__\s*=\s*"([a-zA-Z_:][\w:]*)"', expr))
    text = _PROMQL_STRING.sub(" ", expr)
    text = re.sub(r"#[^\n]*", " ", text)
    text = _GRAFANA_VARIABLE.sub(" ", text)
    text = _PROMQL_MATCHERS.sub(" ", text)
    text = _PROMQL_RANGE.sub(" ", text)
    text = _PROMQL_LABEL_LIST.sub(" ", text)
    return named | {name for name in _PROMQL_IDENTIFIER.findall(text) if name.lower() not in PROMQL_KEYWORDS}


def dashboard_metric_names(path: Path | str) -> set[str]:
    """Every metric name the PromQL of a dashboard JSON file reads (panel
    targets and query variables), as written."""
    dashboard = json.loads(Path(path).read_text())
    names: set[str] = set()
    for _, expr in dashboard_exprs(dashboard):
        names |= promql_metric_names(expr)
    return names
