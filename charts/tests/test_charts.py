"""The Helm charts, checked without a cluster: `helm lint --strict`,
rendering with the defaults and with every ``ci/*.yaml`` (and the
``kube-play/`` values), every rendered object validated strictly against
Kubernetes' own schemas (``kubernetes-validate``) at the oldest version the
chart supports and the newest known, the restricted security context,
probes and resources of every container, what the values schema refuses,
the combinations the chart refuses, and the values documentation.

Helm runs in-process through the ``helm-python-sdk`` package (the Helm v4
SDK); the charts are rendered from a copy (``prepared_charts``) so that
``helm dependency update`` never writes the work tree.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import helm_python as helm

import values_doc
from chartlib import (
    CHARTS,
    DASHBOARD,
    EXAMPLE,
    KUBE_PLAY_VALUES,
    FakeCluster,
    REGISTRY,
    REPO,
    SIDECAR,
    ChartInfo,
    Rendered,
    dashboard_exprs,
    dashboard_metric_names,
    dashboard_panels,
    is_hook,
    kn,
    load_values,
    merged,
    prepared,
    promql_metric_names,
    render,
    without_origin,
    workloads,
)

pytestmark = pytest.mark.timeout(120)

DIGEST_ = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
WORKSPACE_VERSION = tomllib.loads((REPO / "Cargo.toml").read_text())["workspace"]["package"]["version"]
LATEST_KUBERNETES = kubernetes_validate.utils.latest_version()

#: Charts that render objects.
APPLICATIONS = [c for c in CHARTS.values() if not c.library]


def values_cases(with_defaults: bool = True) -> list[Any]:
    """(chart, values file or None for the defaults) for every application
    chart: defaults, each ci/*.yaml, its kube-play values."""
    cases = []
    for chart in APPLICATIONS:
        files: list[Path | None] = [None] if with_defaults else []
        files += chart.ci_values()
        kube_play = KUBE_PLAY_VALUES / f"{chart.name}.yaml"
        if kube_play.is_file():
            files.append(kube_play)
        for f in files:
            label = "defaults" if f is None else f.relative_to(REPO).as_posix()
            cases.append(pytest.param(chart, f, id=f"{chart.name}:{label}"))
    return cases


@pytest.fixture(scope="session")
def prepared_charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every chart copied to a temporary folder, dependencies updated."""
    return prepared(tmp_path_factory.mktemp("charts"))


def render_registry(prepared_charts: dict[str, Path], values: dict[str, Any] | None = None, **kwargs: Any) -> Rendered:
    """The registry chart rendered with ``values`` over its defaults (which
    generate the credentials: see test_defaults_install_authenticated)."""
    return render(prepared_charts["toolmesh"], values, **kwargs)


def render_case(prepared_charts: dict[str, Path], chart: ChartInfo, values_file: Path | None) -> Rendered:
    values = load_values(values_file) if values_file else {}
    return render(prepared_charts[chart.name], values, name="toolmesh", namespace="toolmesh")


def min_kubernetes(chart_dir: Path) -> str:
    """The oldest Kubernetes a chart supports (its `kubeVersion: >=X.Y`)."""
    metadata = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    match = re.match(r"^>=\s*(\d+\.\d+)", metadata["kubeVersion"])
    assert match, f"{chart_dir.name}: kubeVersion {metadata['kubeVersion']!r} is not `>=X.Y...`"
    return match[1]


# --- lint -------------------------------------------------------------------


@pytest.mark.parametrize("chart", list(CHARTS.values()), ids=lambda c: c.name)
def test_lint_strict_with_defaults(prepared_charts, chart):
    report = helm.lint(str(prepared_charts[chart.name]), {}, strict=True, quiet=False)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, f"helm lint --strict {chart.path}: {report}"


@pytest.mark.parametrize(("chart", "values_file"), values_cases(with_defaults=False))
def test_lint_strict_with_values(prepared_charts, chart, values_file):
    report = helm.lint(str(prepared_charts[chart.name]), load_values(values_file), strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, f"helm lint --strict -f {values_file}: {report}"


# --- render and validate ----------------------------------------------------

#: Custom resources the charts may render (optional objects of operators
#: installed beside them). Kubernetes' own schemas, hence kubernetes-validate,
#: know none of them: they are left out of the schema validation here, on
#: purpose and by name, and their shape is asserted by tests of their own
#: (test_service_monitor). Any other unknown kind still fails.
CUSTOM_RESOURCES = {("monitoring.coreos.com/v1", "ServiceMonitor")}


@pytest.mark.parametrize(("chart", "values_file"), values_cases())
def test_renders_valid_kubernetes_objects(prepared_charts, chart, values_file):
    rendered = render_case(prepared_charts, chart, values_file)
    assert rendered.objects, "nothing rendered"
    versions = sorted({min_kubernetes(prepared_charts[chart.name]), LATEST_KUBERNETES})
    failures = []
    for obj in rendered.objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_RESOURCES:
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(without_origin(obj), version, strict=True)
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                failures.append(f"{kn(obj)} on Kubernetes {version}: {path}: {e.message}")
            except kubernetes_validate.SchemaNotFoundError as e:
                failures.append(f"{kn(obj)}: no schema on Kubernetes {version}: {e.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("chart", "values_file"), values_cases())
def test_objects_have_standard_labels(prepared_charts, chart, values_file):
    rendered = render_case(prepared_charts, chart, values_file)
    for obj in rendered.objects:
        labels = obj["metadata"].get("labels") or {}
        for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by"):
            assert labels.get(key), f"{kn(obj)} has no {key} label: {labels}"
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            template_labels = obj["spec"]["template"]["metadata"]["labels"]
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selector.items() <= template_labels.items(), f"{kn(obj)}: selector {selector} not in pod labels"


RESTRICTED = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
}


def container_problems(obj: dict[str, Any], pod: dict[str, Any]) -> list[str]:
    """What a workload's containers lack: probes (long-running workloads),
    resources, the restricted security context."""
    problems = []
    pod_security = pod.get("securityContext") or {}
    long_running = obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet") and not is_hook(obj)
    if pod.get("automountServiceAccountToken") is not False:
        problems.append(f"{kn(obj)}: automountServiceAccountToken is not false")
    for container in pod.get("initContainers", []) + pod["containers"]:
        where = f"{kn(obj)} container {container['name']}"
        security = container.get("securityContext") or {}

        def effective(key: str, security=security) -> Any:
            return security.get(key, pod_security.get(key))

        for key, wanted in RESTRICTED.items():
            value = security.get(key) if key != "runAsNonRoot" else effective(key)
            if value is not wanted:
                problems.append(f"{where}: {key} is {value!r}, not {wanted!r}")
        seccomp = (effective("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            problems.append(f"{where}: seccompProfile.type is {seccomp!r}, not 'RuntimeDefault'")
        if effective("runAsUser") == 0:
            problems.append(f"{where}: runs as uid 0")
        drop = (security.get("capabilities") or {}).get("drop") or []
        if "ALL" not in drop:
            problems.append(f"{where}: capabilities.drop is {drop}, without ALL")
        if (security.get("capabilities") or {}).get("add"):
            problems.append(f"{where}: adds capabilities {security['capabilities']['add']}")
        if security.get("privileged"):
            problems.append(f"{where}: is privileged")
        resources = container.get("resources") or {}
        for kind, names in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
            for name in names:
                if not (resources.get(kind) or {}).get(name):
                    problems.append(f"{where}: no resources.{kind}.{name}")
        if long_running:
            for probe in ("livenessProbe", "readinessProbe"):
                if not container.get(probe):
                    problems.append(f"{where}: no {probe}")
    return problems


@pytest.mark.parametrize(("chart", "values_file"), values_cases())
def test_workloads_have_probes_resources_and_restricted_security(prepared_charts, chart, values_file):
    rendered = render_case(prepared_charts, chart, values_file)
    found = list(workloads(rendered.objects))
    assert found, "no workload rendered"
    problems = [p for obj, pod in found for p in container_problems(obj, pod)]
    assert not problems, "\n".join(problems)


#: The registry's probes on the admin port: startup and liveness wait for
#: the process to answer, readiness gates the Service.
ADMIN_PROBE_PATHS = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"}


def test_registry_probes_ask_the_admin_port(prepared_charts):
    rendered = render_registry(prepared_charts)
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    for probe, path in ADMIN_PROBE_PATHS.items():
        assert container[probe]["httpGet"] == {"path": path, "port": "admin", "scheme": "HTTP"}, probe
        assert not {"grpc", "exec", "tcpSocket"} & set(container[probe]), probe
    assert container["ports"] == [{"name": "grpc", "containerPort": 50051, "protocol": "TCP"},
                                  {"name": "admin", "containerPort": 9090, "protocol": "TCP"}]
    env = env_of(container)
    assert env["TOOLMESH_ADMIN_LISTEN"] == "0.0.0.0:9090"
    assert env["TOOLMESH_METRICS_MAX_TOOLS"] == "100"
    assert "hostAliases" not in pod
    # The admin port has a ClusterIP Service of its own, never the main
    # Service's type: a LoadBalancer publishes gRPC, not the metrics.
    published = render_registry(prepared_charts, {"service": {"type": "LoadBalancer"}})
    assert [p["name"] for p in published.one("Service", "toolmesh")["spec"]["ports"]] == ["grpc"]
    admin = published.one("Service", "toolmesh-admin")
    assert admin["spec"]["type"] == "ClusterIP"
    assert admin["spec"]["ports"] == [{"name": "admin", "port": 9090, "targetPort": "admin", "protocol": "TCP"}]
    assert admin["spec"]["selector"] == published.one("Deployment")["spec"]["selector"]["matchLabels"]


def test_registry_admin_port_settings(prepared_charts):
    rendered = render_registry(prepared_charts, {"admin": {"port": 9100, "listenHost": "[::]", "metricsMaxTools": 7},
                                             "config": {"port": 6000}})
    container = registry_pod(rendered)["containers"][0]
    env = env_of(container)
    assert (env["TOOLMESH_ADMIN_LISTEN"], env["TOOLMESH_METRICS_MAX_TOOLS"]) == ("[::]:9100", "7")
    assert {"name": "admin", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    assert "host" not in container["readinessProbe"]["httpGet"]
    assert rendered.one("Service", "toolmesh-admin")["spec"]["ports"][0]["port"] == 9100
    with pytest.raises(helm.HelmRenderError, match=r"admin.port and config.port are both 6000"):
        render_registry(prepared_charts, {"admin": {"port": 6000}, "config": {"port": 6000}})
    # On the pod's loopback, the kubelet's probes could not reach it; on the
    # node's (host networking), they ask it there.
    with pytest.raises(helm.HelmRenderError, match=r"the admin port binds 127.0.0.1, a loopback address"):
        render_registry(prepared_charts, {"admin": {"listenHost": "127.0.0.1"}})
    container = registry_pod(render_registry(prepared_charts, {"admin": {"listenHost": "[::1]"}, "hostNetwork": True}))[
        "containers"][0]
    assert env_of(container)["TOOLMESH_ADMIN_LISTEN"] == "[::1]:9090"
    assert container["livenessProbe"]["httpGet"]["host"] == "::1"


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_registry_probes_fall_back_to_grpc_health_without_the_admin_port(prepared_charts, tls):
    values: dict[str, Any] = {"admin": {"enabled": False}}
    if tls:
        values["tls"] = {"existingSecret": "toolmesh-tls"}
    rendered = render_registry(prepared_charts, values)
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    for probe in ADMIN_PROBE_PATHS:
        if tls:
            assert container[probe]["exec"]["command"][:2] == ["/usr/local/bin/toolmesh-registry", "health"], probe
        else:
            assert container[probe]["grpc"] == {"port": 50051}, probe
    assert ("hostAliases" in pod) is tls
    assert [p["name"] for p in container["ports"]] == ["grpc"]
    env = env_of(container)
    assert "TOOLMESH_ADMIN_LISTEN" not in env and "TOOLMESH_METRICS_MAX_TOOLS" not in env
    assert [s["metadata"]["name"] for s in rendered.of_kind("Service")] == ["toolmesh"]
    with pytest.raises(helm.HelmRenderError, match=r"serviceMonitor.enabled needs admin.enabled"):
        render_registry(prepared_charts, merged(values, {"serviceMonitor": {"enabled": True}}))


@pytest.mark.parametrize("chart", APPLICATIONS, ids=lambda c: c.name)
def test_kube_play_probes_reach_the_admin_port_on_loopback(prepared_charts, chart):
    """With the kube-play values (host networking, everything on the node's
    loopback), each admin port binds loopback and each probe asks it there:
    what test_kube_play.py asks from the host once the pods run."""
    rendered = render(prepared_charts[chart.name], load_values(KUBE_PLAY_VALUES / f"{chart.name}.yaml"))
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    checked = 0
    for container in pod["containers"]:
        admin_listen = env_of(container).get("TOOLMESH_ADMIN_LISTEN")
        if admin_listen is None:
            continue
        host, port = admin_listen.rsplit(":", 1)
        assert host == "127.0.0.1", admin_listen
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe not in container:
                continue
            handler = container[probe]["httpGet"]
            named = next(p for p in container["ports"] if p["name"] == handler["port"])
            assert (handler["host"], named["containerPort"]) == ("127.0.0.1", int(port)), f"{container['name']} {probe}"
            checked += 1
    assert checked >= 2, "no probe on an admin port"


# --- the values schema --------------------------------------------------------


@pytest.mark.parametrize(
    ("chart", "values", "named"),
    [
        pytest.param(REGISTRY, {"replicas": "three"}, "replicas", id="toolmesh:replicas-as-text"),
        pytest.param(REGISTRY, {"config": {"leaseTtl": 10}}, "leaseTtl", id="toolmesh:duration-as-number"),
        pytest.param(REGISTRY, {"config": {"leaseTtl": "10"}}, "leaseTtl", id="toolmesh:duration-without-unit"),
        pytest.param(REGISTRY, {"config": {"logCalls": "yes"}}, "logCalls", id="toolmesh:bool-as-text"),
        pytest.param(REGISTRY, {"redis": {"outage": "open"}}, "outage", id="toolmesh:enum"),
        pytest.param(REGISTRY, {"replica": 3}, "replica", id="toolmesh:unknown-key"),
        pytest.param(REGISTRY, {"config": {"leaseTTL": "5s"}}, "leaseTTL", id="toolmesh:unknown-nested-key"),
        pytest.param(REGISTRY, {"redis": {"internal": {"enable": True}}}, "enable", id="toolmesh:unknown-deep-key"),
        pytest.param(EXAMPLE, {"port": "8080"}, "port", id="inventory-tool:port-as-text"),
        pytest.param(EXAMPLE, {"replica": 1}, "replica", id="inventory-tool:unknown-key"),
        pytest.param(REGISTRY, {"insecure": "yes"}, "insecure", id="toolmesh:insecure-as-text"),
        pytest.param(REGISTRY, {"registrants": {"inline": [{"name": "x", "token_sha256": "abc", "tools": ["t"]}]}},
                     "token_sha256", id="toolmesh:registrant-digest"),
        pytest.param(REGISTRY, {"auth": {"apiKeys": {"inline": [{"caller": "a", "sha256": DIGEST_, "group": []}]}}},
                     "group", id="toolmesh:api-key-unknown-field"),
        pytest.param(REGISTRY, {"auth": {"policy": {"rules": [{"callers": ["a"]}]}}}, "tools", id="toolmesh:rule-without-tools"),
        pytest.param(REGISTRY, {"auth": {"policy": {"approvals": [{"tools": ["x"]}]}}}, "approvers",
                     id="toolmesh:approval-without-approvers"),
        pytest.param(REGISTRY, {"auth": {"policy": {"approvals": [{"approvers": {"groups": ["g"]}, "when": ["amount 5"]}]}}},
                     "when", id="toolmesh:approval-condition"),
        pytest.param(REGISTRY, {"versions": {"tools": {"w": {"split": {"1.0.0": 150}}}}}, "split",
                     id="toolmesh:versions-weight-over-100"),
        pytest.param(REGISTRY, {"pins": {"rules": [{"tools": ["*"], "mode": "strict"}]}}, "mode",
                     id="toolmesh:pins-unknown-mode"),
        pytest.param(REGISTRY, {"pins": {"approved": {"w@1.0.0": "abc"}}}, "approved",
                     id="toolmesh:pins-malformed-digest"),
        pytest.param(REGISTRY, {"tls": {"existingSecret": "t", "requireClientCert": "true"}}, "requireClientCert",
                     id="toolmesh:tls-bool-as-text"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"insecure": 1}}, "insecure", id="toolmesh-sidecar:insecure-as-number"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"tls": {"secret": "x"}}}, "secret", id="toolmesh-sidecar:unknown-tls-key"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"port": "x"}}, "port", id="toolmesh-sidecar:port-as-text"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"registy": "r:1"}}, "registy", id="toolmesh-sidecar:unknown-key"),
        pytest.param(REGISTRY, {"credentials": {"generated": True}}, "generated", id="toolmesh:credentials-unknown-key"),
        pytest.param(REGISTRY, {"credentials": {"registrant": {"maxInstances": 0}}}, "maxInstances",
                     id="toolmesh:credentials-max-instances-zero"),
        pytest.param(REGISTRY, {"credentials": {"registrant": {"tools": []}}}, "tools", id="toolmesh:credentials-no-tools"),
        pytest.param(REGISTRY, {"podDisruptionBudget": {"enabled": "auto"}}, "enabled", id="toolmesh:pdb-enabled-as-text"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"registrationToken": {"registrySecret": "Not_A_Name"}}},
                     "registrySecret", id="toolmesh-sidecar:registry-secret-not-a-name"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"registrationToken": {"enabled": "no"}}}, "enabled",
                     id="toolmesh-sidecar:registration-token-enabled-as-text"),
        pytest.param(REGISTRY, {"admin": {"port": "9090"}}, "port", id="toolmesh:admin-port-as-text"),
        pytest.param(REGISTRY, {"admin": {"path": "/metrics"}}, "path", id="toolmesh:admin-unknown-key"),
        pytest.param(REGISTRY, {"tracing": {"protocol": "http"}}, "protocol", id="toolmesh:tracing-protocol"),
        pytest.param(REGISTRY, {"tracing": {"sampler": "ratio"}}, "sampler", id="toolmesh:tracing-sampler"),
        pytest.param(REGISTRY, {"tracing": {"samplerArg": "10%"}}, "samplerArg", id="toolmesh:sampler-arg-text"),
        pytest.param(REGISTRY, {"tracing": {"samplerArg": 2}}, "samplerArg", id="toolmesh:sampler-arg-above-1"),
        pytest.param(REGISTRY, {"tracing": {"otlpEndpoint": "collector:4317"}}, "otlpEndpoint",
                     id="toolmesh:otlp-endpoint-without-scheme"),
        pytest.param(REGISTRY, {"tracing": {"resourceAttributes": {"a": "b,c"}}}, "resourceAttributes",
                     id="toolmesh:resource-attribute-with-comma"),
        pytest.param(REGISTRY, {"serviceMonitor": {"interval": "30"}}, "interval", id="toolmesh:scrape-interval-unitless"),
        pytest.param(REGISTRY, {"serviceMonitor": {"enable": True}}, "enable", id="toolmesh:service-monitor-unknown-key"),
        pytest.param(REGISTRY, {"grafanaDashboard": {"labelValue": 1}}, "labelValue",
                     id="toolmesh:dashboard-label-value-as-number"),
        pytest.param(REGISTRY, {"networkPolicy": {"adminFrom": "monitoring"}}, "adminFrom", id="toolmesh:admin-from-as-text"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"admin": {"port": 0}}}, "port", id="toolmesh-sidecar:admin-port-zero"),
        pytest.param(EXAMPLE, {"toolmesh-sidecar": {"tracing": {"endpoint": "http://c:4317"}}}, "endpoint",
                     id="toolmesh-sidecar:tracing-unknown-key"),
        pytest.param(
            EXAMPLE,
            {"toolmesh-sidecar": {"tools": [{"name": "t", "backend": {"http": {"url": "x"}}, "timout": "2s"}]}},
            "timout",
            id="toolmesh-sidecar:unknown-tool-key",
        ),
        pytest.param(
            EXAMPLE,
            {"toolmesh-sidecar": {"tools": [{"description": "d", "backend": {"command": ["x"]}}]}},
            "name",
            id="toolmesh-sidecar:tool-without-name",
        ),
        pytest.param(
            EXAMPLE,
            {"toolmesh-sidecar": {"tools": [{"backend": {"mcp": {"command": ["x"], "relist": "5s"}}}]}},
            "relist",
            id="toolmesh-sidecar:unknown-mcp-key",
        ),
    ],
)
def test_schema_refuses(prepared_charts, chart, values, named):
    with pytest.raises(helm.HelmValuesError) as refused:
        render(prepared_charts[chart.name], values)
    assert named in str(refused.value), f"the error does not name {named!r}: {refused.value}"


@pytest.mark.parametrize("chart", list(CHARTS.values()), ids=lambda c: c.name)
def test_schema_closes_every_object_of_its_own(chart):
    """`additionalProperties: false` on the values' top level and on every
    map of the chart's own (Kubernetes' own types, left open, are
    validated after rendering)."""
    schema = json.loads((chart.source / "values.schema.json").read_text())
    assert schema.get("additionalProperties") is False
    defaults = yaml.safe_load((chart.source / "values.yaml").read_text())

    def walk(node: dict[str, Any], values: Any, path: str) -> None:
        for key, sub in node.get("properties", {}).items():
            if sub.get("type") == "object" and "properties" in sub:
                assert sub.get("additionalProperties") is False, f"{chart.name}: {path}{key} is open"
                walk(sub, (values or {}).get(key), f"{path}{key}.")

    walk(schema, defaults, "")
    # Every default value is one the schema knows.
    with helm.Chart.load(str(chart.source)) as loaded:
        loaded.validate_schema(defaults)


# --- what the chart refuses ---------------------------------------------------


def test_replicas_without_redis_fail_with_a_clear_message(prepared_charts):
    with pytest.raises(helm.HelmRenderError) as refused:
        render_registry(prepared_charts, {"replicas": 3})
    message = str(refused.value)
    assert "replicas: 3 needs Redis" in message
    assert "redis.url" in message and "redis.internal.enabled" in message
    assert message in (REPO / "docs" / "kubernetes.md").read_text(), "docs/kubernetes.md quotes another message"


def test_autoscaling_without_redis_fails(prepared_charts):
    with pytest.raises(helm.HelmRenderError, match="autoscaling.enabled needs Redis"):
        render_registry(prepared_charts, {"autoscaling": {"enabled": True}})


@pytest.mark.parametrize(
    "redis", [{"url": "redis://redis:6379/0"}, {"internal": {"enabled": True}}], ids=["external", "internal"]
)
def test_replicas_with_redis_render(prepared_charts, redis):
    deployment = render_registry(prepared_charts, {"replicas": 3, "redis": redis}).one("Deployment", "toolmesh")
    assert deployment["spec"]["replicas"] == 3


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"redis": {"url": "redis://:hunter2@redis:6379"}}, "redis.url carries a password"),
        ({"redis": {"url": "redis://redis:6379", "internal": {"enabled": True}}}, "not both"),
        ({"redis": {"url": "rediss://r:6380", "internal": {"enabled": False}}, "terminationGracePeriodSeconds": 10},
         "terminationGracePeriodSeconds (10) is shorter"),
        ({"redis": {"url": "redis://r"}, "autoscaling": {"enabled": True, "minReplicas": 5, "maxReplicas": 2}},
         "minReplicas (5) is above"),
    ],
    ids=["password-in-url", "two-redis", "grace-too-short", "min-above-max"],
)
def test_refused_combinations(prepared_charts, values, message):
    with pytest.raises(helm.HelmRenderError, match=re.escape(message)):
        render_registry(prepared_charts, values)


def test_sidecar_without_tools_fails(prepared_charts):
    with pytest.raises(helm.HelmRenderError, match=r"toolmesh-sidecar.tools is empty"):
        render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"tools": []}})


# --- the registry chart, point by point ---------------------------------------


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def registry_flags_envs() -> set[str]:
    """Every environment variable of README's registry flag tables."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Registry flags", 1)[1].split("\nDurations are written", 1)[0]
    return set(re.findall(r"^\| `--[a-z-]+[^|]*\| `([A-Z_]+)` \|", section, re.MULTILINE))


def test_every_registry_flag_is_reachable_from_values(prepared_charts):
    envs = registry_flags_envs()
    assert len(envs) >= 20, f"README's flag tables not found: {envs}"
    everything = {
        "redis": {"url": "rediss://redis:6380/1", "cluster": True, "existingSecret": "s", "caSecret": "ca"},
        "config": {"endpointAllow": ["10.0.0.0/8", "*.svc.cluster.local"], "auditLog": "-", "workerThreads": 2},
        "insecure": True,
        "tls": {"existingSecret": "tls", "clientCaSecret": "client-ca", "requireClientCert": True},
        "sidecarTls": {"caSecret": "sidecar-ca", "clientCertSecret": "registry-client"},
        "registrants": {"existingSecret": "registrants"},
        "auth": {
            "apiKeys": {"existingSecret": "api-keys"},
            "jwt": {"existingSecret": "jwks", "issuer": "https://issuer.example", "audience": "toolmesh"},
            "policy": {"existingConfigMap": "policy"},
        },
        "mcp": {"enabled": True, "allowedHosts": ["h"], "allowedOrigins": ["https://o:443"], "discovery": "progressive"},
        "search": {"model": {"volume": {"persistentVolumeClaim": {"claimName": "model"}}}, "threads": 2},
        "console": {"enabled": True},
        "versions": {"existingConfigMap": "versions"},
        "pins": {"existingConfigMap": "pins"},
    }
    container = render_registry(prepared_charts, everything).one("Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    set_ = set(env_of(container))
    # The password goes in a file (TOOLMESH_REDIS_PASSWORD_FILE), never in
    # the environment: TOOLMESH_REDIS_PASSWORD is deliberately not used; the
    # execute token is deprecated, the chart no longer passes it (see
    # test_deprecated_execute_token_is_accepted_and_ignored).
    missing = envs - set_ - {"TOOLMESH_REDIS_PASSWORD", "TOOLMESH_EXECUTE_TOKEN_FILE"}
    assert not missing, f"registry flags with no value in the chart: {sorted(missing)}"


def test_registry_settings_reach_the_environment(prepared_charts):
    values = {
        "config": {"leaseTtl": "1m 30s", "maxTools": 7, "logCalls": False, "port": 6000, "listenHost": "[::]"},
        "redis": {"url": "redis://r:6379", "outage": "degrade", "poolSize": 9},
    }
    rendered = render_registry(prepared_charts, values)
    container = rendered.one("Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    assert env["TOOLMESH_LEASE_TTL"] == "1m 30s"
    assert env["TOOLMESH_MAX_TOOLS"] == "7"
    assert env["TOOLMESH_LOG_CALLS"] == "false"
    assert env["TOOLMESH_LISTEN"] == "[::]:6000"
    assert env["TOOLMESH_REDIS_OUTAGE"] == "degrade"
    assert env["TOOLMESH_REDIS_POOL_SIZE"] == "9"
    assert "TOOLMESH_ENDPOINT_ALLOW" not in env, "empty: any host"
    allowed = render_registry(prepared_charts, {"config": {"endpointAllow": ["10.0.0.0/8", "*.svc.cluster.local"]}})
    allowed_env = env_of(allowed.one("Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert allowed_env["TOOLMESH_ENDPOINT_ALLOW"] == "10.0.0.0/8,*.svc.cluster.local"
    assert {"name": "grpc", "containerPort": 6000, "protocol": "TCP"} in container["ports"]
    service = rendered.one("Service", "toolmesh")
    assert service["spec"]["ports"][0]["targetPort"] == "grpc"


@pytest.mark.parametrize(
    ("delay", "grace", "explicit", "expected"),
    [(5, 10, None, 20), (0, 30, None, 35), (10, 20, 60, 60)],
)
def test_shutdown_delay_is_tied_to_the_grace_period(prepared_charts, delay, grace, explicit, expected):
    values: dict[str, Any] = {"config": {"shutdownDelaySeconds": delay, "shutdownGraceSeconds": grace}}
    if explicit is not None:
        values["terminationGracePeriodSeconds"] = explicit
    pod = render_registry(prepared_charts, values).one("Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == expected
    env = env_of(pod["containers"][0])
    assert env["TOOLMESH_SHUTDOWN_DELAY"] == f"{delay}s"
    assert env["TOOLMESH_SHUTDOWN_GRACE"] == f"{grace}s"


def test_service_account_token_is_never_mounted(prepared_charts):
    rendered = render_registry(prepared_charts)
    assert rendered.one("ServiceAccount")["automountServiceAccountToken"] is False
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == "toolmesh"


def test_external_redis_password_comes_from_a_secret_file(prepared_charts):
    for redis, secret, key in [
        ({"url": "redis://r:6379", "existingSecret": "mine", "existingSecretPasswordKey": "pw"}, "mine", "pw"),
        ({"url": "redis://r:6379", "password": "hunter2"}, "toolmesh-redis", "redis-password"),
    ]:
        rendered = render_registry(prepared_charts, {"redis": redis})
        pod = rendered.one("Deployment")["spec"]["template"]["spec"]
        env = env_of(pod["containers"][0])
        assert env["TOOLMESH_REDIS_PASSWORD_FILE"] == "/var/run/secrets/toolmesh/redis/password"
        assert "TOOLMESH_REDIS_PASSWORD" not in env
        volume = next(v for v in pod["volumes"] if v["name"] == "redis-password")
        assert volume["secret"]["secretName"] == secret
        assert volume["secret"]["items"] == [{"key": key, "path": "password"}]
        text = yaml.safe_dump_all([without_origin(o) for o in rendered.objects if o["kind"] != "Secret"])
        assert "hunter2" not in text, "the password shows outside its Secret"
        if "password" in redis:
            data = rendered.one("Secret", "toolmesh-redis")["data"]
            assert base64.b64decode(data["redis-password"]).decode() == "hunter2"


def test_internal_redis(prepared_charts):
    rendered = render_registry(prepared_charts, {"replicas": 2, "redis": {"internal": {"enabled": True}}})
    secret = rendered.one("Secret", "toolmesh-redis")
    password = base64.b64decode(secret["data"]["redis-password"]).decode()
    assert len(password) == 32, "a random password is generated"
    conf = base64.b64decode(secret["data"]["redis.conf"]).decode()
    assert f'requirepass "{password}"' in conf and "maxmemory-policy noeviction" in conf
    redis = rendered.one("Deployment", "toolmesh-redis")
    redis_pod = redis["spec"]["template"]["spec"]
    assert redis["spec"]["replicas"] == 1 and redis["spec"]["strategy"]["type"] == "Recreate"
    assert redis_pod["containers"][0]["command"] == ["redis-server", "/etc/redis/redis.conf"]
    assert rendered.one("Service", "toolmesh-redis")["spec"]["ports"][0]["port"] == 6379
    registry = env_of(rendered.one("Deployment", "toolmesh")["spec"]["template"]["spec"]["containers"][0])
    assert registry["TOOLMESH_REDIS_URL"] == "redis://toolmesh-redis:6379/0"
    assert registry["TOOLMESH_REDIS_PASSWORD_FILE"] == "/var/run/secrets/toolmesh/redis/password"
    for obj in rendered.objects:
        if obj["kind"] != "Secret":
            assert password not in json.dumps(obj), f"{kn(obj)} holds the Redis password"


def test_internal_redis_config_runs_on_redis_server(prepared_charts, tmp_path):
    """The internal Redis's redis.conf, as rendered, read by a real
    redis-server (Debian's; on a loopback port, not the conf's), with a
    password that needs quoting: it takes the password and only it."""
    redis_server, redis_cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if not (redis_server and redis_cli):
        message = "needs redis-server and redis-cli (scripts/test.sh installs them)"
        if os.environ.get("TOOLMESH_FULL_SUITE") == "1":
            pytest.fail(message)
        pytest.skip(message)
    password = 'p a"s\\s $(x)'
    rendered = render_registry(prepared_charts, {"redis": {"internal": {"enabled": True, "password": password}}})
    secret = rendered.one("Secret", "toolmesh-redis")
    assert base64.b64decode(secret["data"]["redis-password"]).decode() == password
    conf = tmp_path / "redis.conf"
    text = base64.b64decode(secret["data"]["redis.conf"]).decode()
    # The pod mounts an emptyDir at /data; here, a folder of the test's.
    assert "\ndir /data\n" in text
    conf.write_text(text.replace("\ndir /data\n", f"\ndir {tmp_path}\n"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Command-line directives win over the file's: loopback, a free port.
    server = subprocess.Popen(
        [redis_server, str(conf), "--port", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        def cli(*args: str, auth: str | None) -> str:
            env = {k: v for k, v in os.environ.items() if k != "REDISCLI_AUTH"}
            if auth is not None:
                env["REDISCLI_AUTH"] = auth
            return subprocess.run([redis_cli, "-p", str(port), *args], capture_output=True, text=True,
                                  timeout=5, env=env).stdout.strip()

        deadline = time.monotonic() + 10
        while cli("ping", auth=password) != "PONG":
            assert server.poll() is None, f"redis-server refused the rendered redis.conf:\n{server.communicate()[0]}"
            assert time.monotonic() < deadline, "redis-server did not answer"
            time.sleep(0.1)
        assert "NOAUTH" in cli("ping", auth=None)
        assert cli("config", "get", "maxmemory-policy", auth=password).splitlines() == ["maxmemory-policy", "noeviction"]
        assert cli("config", "get", "maxmemory", auth=password).splitlines() == ["maxmemory", str(200 * 1024 * 1024)]
        assert cli("config", "get", "save", auth=password) == "save", "no snapshots (an empty `save`)"
        assert cli("config", "get", "appendonly", auth=password).splitlines() == ["appendonly", "no"]
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_pdb_hpa_spread(prepared_charts):
    rendered = render_registry(prepared_charts, load_values(REGISTRY.source / "ci" / "redis-ha-values.yaml"))
    deployment = rendered.one("Deployment")
    assert "replicas" not in deployment["spec"], "the HPA owns replicas"
    hpa = rendered.one("HorizontalPodAutoscaler")
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 6)
    assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    pdb = rendered.one("PodDisruptionBudget")
    assert pdb["spec"] == {"minAvailable": 2, "selector": deployment["spec"]["selector"]}
    spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["topology.kubernetes.io/zone", "kubernetes.io/hostname"]
    for constraint in spread:
        assert constraint["labelSelector"] == deployment["spec"]["selector"]


def test_optional_objects_are_off_by_default(prepared_charts):
    rendered = render_registry(prepared_charts)
    kinds = {o["kind"] for o in rendered.objects}
    assert kinds == {"Deployment", "Service", "ServiceAccount", "Pod", "Secret"}, kinds
    # The one Secret: the generated credentials.
    assert [o["metadata"]["name"] for o in rendered.of_kind("Secret")] == ["toolmesh-credentials"]


def test_network_policies(prepared_charts):
    values = load_values(REGISTRY.source / "ci" / "networkpolicy-values.yaml")
    values["redis"]["url"] = "redis://10.20.0.5:6390/2"
    policy = render_registry(prepared_charts, values).one("NetworkPolicy")
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    ingress, console, admin = spec["ingress"]
    assert ingress["ports"] == [{"port": 50051, "protocol": "TCP"}]
    assert {"podSelector": {"matchLabels": {
        "app.kubernetes.io/name": "toolmesh", "app.kubernetes.io/instance": "toolmesh",
        "app.kubernetes.io/component": "test"}}} in ingress["from"], "the helm test pod is let in"
    # The ingress controller, from where consoleFrom says, on the console port only.
    assert console == {"ports": [{"port": 8090, "protocol": "TCP"}], "from": values["networkPolicy"]["consoleFrom"]}
    # Prometheus, from where adminFrom says, on the admin port only.
    assert admin == {"ports": [{"port": 9090, "protocol": "TCP"}], "from": values["networkPolicy"]["adminFrom"]}
    egress_ports = [sorted(p["port"] for p in rule["ports"]) for rule in spec["egress"]]
    assert egress_ports == [[53, 53], [50061, 50062], [6390], [4317]]

    # adminFrom empty: anyone, on the admin port only; no admin port: no rule.
    open_admin = render_registry(prepared_charts, {"networkPolicy": {"enabled": True}}).one("NetworkPolicy")
    assert open_admin["spec"]["ingress"][1] == {"ports": [{"port": 9090, "protocol": "TCP"}]}
    closed = render_registry(prepared_charts, {"networkPolicy": {"enabled": True}, "admin": {"enabled": False}})
    assert len(closed.one("NetworkPolicy")["spec"]["ingress"]) == 1

    internal = render_registry(prepared_charts, load_values(REGISTRY.source / "ci" / "redis-internal-values.yaml"))
    redis_policy = internal.one("NetworkPolicy", "toolmesh-redis")["spec"]
    assert redis_policy["egress"] == [] and redis_policy["policyTypes"] == ["Ingress", "Egress"]
    assert redis_policy["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "registry"


def test_network_policy_console_rule(prepared_charts):
    """The console port gets its own ingress rule with `console.enabled`:
    from `consoleFrom`, else from `ingressFrom` (without the test pod),
    else from anyone; none without the console."""

    def rules(values: dict[str, Any]) -> list[dict[str, Any]]:
        values = merged({"networkPolicy": {"enabled": True}}, values)
        return render_registry(prepared_charts, values).one("NetworkPolicy")["spec"]["ingress"]

    def console_rules(values: dict[str, Any], port: int = 8090) -> list[dict[str, Any]]:
        return [r for r in rules(values) if {"port": port, "protocol": "TCP"} in r["ports"]]

    agents = [{"namespaceSelector": {"matchLabels": {"toolmesh.io/agents": "true"}}}]
    ingress_controller = [{
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}},
    }]
    on = {"console": {"enabled": True}}

    given = console_rules(merged(on, {"networkPolicy": {"ingressFrom": agents, "consoleFrom": ingress_controller}}))
    assert given == [{"ports": [{"port": 8090, "protocol": "TCP"}], "from": ingress_controller}]
    # consoleFrom empty: the peers of ingressFrom.
    fallback = console_rules(merged(on, {"networkPolicy": {"ingressFrom": agents}}))
    assert fallback == [{"ports": [{"port": 8090, "protocol": "TCP"}], "from": agents}]
    # Both empty: anyone, on the console port only.
    assert console_rules(on) == [{"ports": [{"port": 8090, "protocol": "TCP"}]}]
    # The rule follows console.port.
    moved = console_rules(merged(on, {"console": {"port": 8443}}), port=8443)
    assert moved == [{"ports": [{"port": 8443, "protocol": "TCP"}]}]

    # No console: no rule on its port, whatever consoleFrom says.
    off = {"networkPolicy": {"ingressFrom": agents, "consoleFrom": ingress_controller}}
    assert console_rules(off) == []
    assert all(r.get("from") != ingress_controller for r in rules(off))
    assert [r["ports"][0]["port"] for r in rules(off)] == [50051, 9090]


def test_helm_test_hook_checks_health_through_the_service(prepared_charts):
    rendered = render_registry(prepared_charts, name="tm", namespace="tools")
    [hook] = rendered.hooks()
    assert hook["kind"] == "Pod" and hook["metadata"]["annotations"]["helm.sh/hook"] == "test"
    container = hook["spec"]["containers"][0]
    assert "command" not in container, "the image's entrypoint (toolmesh-registry) runs the check"
    assert container["args"][:3] == ["health", "--address", "tm-toolmesh.tools.svc:50051"]
    services = [container["args"][i + 1] for i, a in enumerate(container["args"]) if a == "--service"]
    assert services == ["", "toolmesh.v1.ToolRegistry", "toolmesh.v1.Registration"]
    assert hook["spec"]["restartPolicy"] == "Never"
    assert not render_registry(prepared_charts, {"tests": {"enabled": False}}).hooks()


def test_notes(prepared_charts):
    notes = render_registry(prepared_charts, name="tm", namespace="tools").notes
    assert "tm-toolmesh.tools.svc:50051" in notes and "embedded" in notes
    notes = render_registry(prepared_charts, {"replicas": 3, "redis": {"internal": {"enabled": True}}}).notes
    assert "not for production" in notes and "Replicas: 3" in notes


# --- observability: metrics, ServiceMonitor, dashboard, tracing -------------------


def test_service_monitor(prepared_charts):
    """Off by default; on, it scrapes /metrics on the port named `admin` of
    the admin Service, which it alone selects. (kubernetes-validate has no
    schema for it: see CUSTOM_RESOURCES.)"""
    assert not render_registry(prepared_charts).of_kind("ServiceMonitor")
    values = {"serviceMonitor": {"enabled": True, "interval": "15s", "scrapeTimeout": "5s",
                                 "labels": {"release": "kube-prometheus-stack"},
                                 "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}]}}
    rendered = render_registry(prepared_charts, values, name="tm", namespace="tools")
    monitor = rendered.one("ServiceMonitor")
    assert (monitor["apiVersion"], monitor["metadata"]["name"], monitor["metadata"]["namespace"]) == (
        "monitoring.coreos.com/v1", "tm-toolmesh", "tools")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == "tm"
    spec = monitor["spec"]
    assert set(spec) == {"selector", "namespaceSelector", "endpoints"}
    assert spec["namespaceSelector"] == {"matchNames": ["tools"]}
    assert spec["endpoints"] == [{"port": "admin", "path": "/metrics", "scheme": "http", "interval": "15s",
                                  "scrapeTimeout": "5s", "metricRelabelings": values["serviceMonitor"]["metricRelabelings"]}]
    # Its selector picks the admin Service, and only it; that Service's port
    # `admin` leads to the registry container's port `admin`.
    selector = spec["selector"]["matchLabels"]
    selected = [s for s in rendered.of_kind("Service") if selector.items() <= s["metadata"]["labels"].items()]
    assert [s["metadata"]["name"] for s in selected] == ["tm-toolmesh-admin"]
    [port] = [p for p in selected[0]["spec"]["ports"] if p["name"] == "admin"]
    assert selected[0]["spec"]["selector"] == rendered.one("Deployment")["spec"]["selector"]["matchLabels"]
    container = registry_pod(rendered)["containers"][0]
    assert {"name": "admin", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    assert port["targetPort"] == "admin"
    # The defaults: every 30 s, 10 s at most, no relabelings.
    [endpoint] = render_registry(prepared_charts, {"serviceMonitor": {"enabled": True}}).one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint == {"port": "admin", "path": "/metrics", "scheme": "http", "interval": "30s", "scrapeTimeout": "10s"}


def test_grafana_dashboard_configmap(prepared_charts):
    assert not render_registry(prepared_charts).of_kind("ConfigMap")
    rendered = render_registry(prepared_charts, {"grafanaDashboard": {"enabled": True}}, name="tm", namespace="tools")
    configmap = rendered.one("ConfigMap")
    assert configmap["metadata"]["name"] == "tm-toolmesh-dashboard"
    assert configmap["metadata"]["namespace"] == "tools"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert list(configmap["data"]) == ["toolmesh.json"]
    shipped = json.loads(configmap["data"]["toolmesh.json"])
    assert shipped == json.loads(DASHBOARD.read_text()), "the ConfigMap holds the chart's dashboard, as it is"
    # Another sidecar's label, Grafana's namespace, a folder.
    custom = render_registry(prepared_charts, {"grafanaDashboard": {
        "enabled": True, "label": "dashboards", "labelValue": "grafana", "namespace": "monitoring",
        "annotations": {"grafana_folder": "toolmesh"}}}).one("ConfigMap")
    assert custom["metadata"]["labels"]["dashboards"] == "grafana"
    assert "grafana_dashboard" not in custom["metadata"]["labels"]
    assert custom["metadata"]["namespace"] == "monitoring"
    assert custom["metadata"]["annotations"] == {"grafana_folder": "toolmesh"}


def test_dashboard_json():
    """The dashboard parses, takes its data source from a variable, filters
    by tool, and every panel queries something. (Which metrics exist is the
    binaries' business: a Rust test checks dashboard_metric_names against a
    running registry's /metrics.)"""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "toolmesh" and dashboard["title"] == "toolmesh"
    assert dashboard["schemaVersion"] >= 39
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    tool = variables["tool"]
    assert tool["type"] == "query" and tool["query"] == "label_values(toolmesh_invocations_total, tool)"
    assert tool["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert tool["includeAll"] and tool["multi"] and tool["allValue"] == ".*"
    panels = list(dashboard_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    queried = [p for p in panels if p["type"] != "row"]
    assert len(queried) >= 20
    for panel in queried:
        where = f"panel {panel.get('title')!r}"
        assert panel.get("title") and panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
        assert panel["targets"], f"{where} has no target"
        for target in panel["targets"]:
            assert isinstance(target.get("expr"), str) and target["expr"].strip(), f"{where}: empty expr"
            assert target["datasource"] == panel["datasource"], where
            assert promql_metric_names(target["expr"]), f"{where}: {target['expr']!r} reads no metric"
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] >= 1 and grid["x"] + grid["w"] <= 24, where
    names = dashboard_metric_names(DASHBOARD)
    assert names and all(n.startswith("toolmesh_") for n in names), sorted(names)
    # Every `tool`-labelled query follows the variable.
    for where, expr in dashboard_exprs(dashboard):
        if "by (tool" in expr:
            assert 'tool=~"$tool"' in expr, f"{where}: {expr}"


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("sum(rate(toolmesh_invocations_total[5m]))", {"toolmesh_invocations_total"}),
        ('histogram_quantile(0.99, sum by (le, tool) (rate(a_seconds_bucket{tool=~"$tool", outcome!="ok"}'
         '[$__rate_interval])))', {"a_seconds_bucket"}),
        ("sum(rate(x_total[5m])) by (tool) / on (tool) group_left (version) y offset 1h", {"x_total", "y"}),
        ('max without (instance) (up{job="by(x)"}) > bool 1e3 and z', {"up", "z"}),
        ("topk($k, m) or vector(0) unless count(n) * Inf", {"m", "n"}),
        ('{__name__="named", job="a"} + max_over_time(w[1h:5m])', {"named", "w"}),
        ("label_replace(a, 'dst', '$1', 'src', '(.*)')", {"a"}),
        ("time() - 0x1F", set()),
    ],
)
def test_promql_metric_names(expr, names):
    assert promql_metric_names(expr) == names


def test_dashboard_metric_names(tmp_path):
    dashboard = {
        "panels": [
            {"type": "timeseries", "targets": [{"expr": "sum(rate(a_total[5m]))"}, {"expr": "b / c_count"}]},
            {"type": "row", "collapsed": True, "panels": [{"type": "stat", "targets": [{"expr": "max(d)"}]}]},
            {"type": "text"},
        ],
        "templating": {"list": [
            {"type": "query", "name": "tool", "query": "label_values(e_total{job=\"x\"}, tool)"},
            {"type": "query", "name": "q", "query": {"query": "query_result(topk(5, f))"}},
            {"type": "query", "name": "l", "query": "label_values(tool)"},
            {"type": "datasource", "name": "datasource", "query": "prometheus"},
        ]},
    }
    path = tmp_path / "dashboard.json"
    path.write_text(json.dumps(dashboard))
    assert dashboard_metric_names(path) == {"a_total", "b", "c_count", "d", "e_total", "f"}
    assert dashboard_metric_names(str(path)) == dashboard_metric_names(path)


def test_tracing_env(prepared_charts):
    """Tracing is off until an endpoint is set: no OTEL_* variable at all;
    then the OpenTelemetry SDK's variables, in the registry and in a tool's
    sidecar alike."""
    def otel(container: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in env_of(container).items() if k.startswith("OTEL_") or k == "K8S_POD_NAME"}

    assert not otel(registry_pod(render_registry(prepared_charts))["containers"][0])
    assert not otel(sidecar_of(render(prepared_charts["inventory-tool"]))[1])
    tracing = {"otlpEndpoint": "http://otel-collector.observability.svc:4318", "protocol": "http/protobuf",
               "sampler": "parentbased_traceidratio", "samplerArg": 0.25,
               "resourceAttributes": {"deployment.environment.name": "production"}}
    registry = otel(registry_pod(render_registry(prepared_charts, {"tracing": tracing}, name="tm", namespace="tools"))[
        "containers"][0])
    _, sidecar = sidecar_of(render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {
        "tracing": tracing, "registry": "toolmesh.tools.svc:50051"}}, name="inventory", namespace="tools"))
    for variables, service in ((registry, "tm-toolmesh"), (otel(sidecar), "inventory-inventory-tool-toolmesh-sidecar")):
        assert variables == {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability.svc:4318",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_SERVICE_NAME": service,
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.25",
            "K8S_POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
            "OTEL_RESOURCE_ATTRIBUTES":
                "k8s.namespace.name=tools,k8s.pod.name=$(K8S_POD_NAME),deployment.environment.name=production",
        }
    # $(K8S_POD_NAME) is defined before the variable that uses it.
    names = [e["name"] for e in sidecar["env"]]
    assert names.index("K8S_POD_NAME") < names.index("OTEL_RESOURCE_ATTRIBUTES")
    # The defaults: the SDK's sampler, no argument, the release's name.
    plain = otel(registry_pod(render_registry(prepared_charts, {"tracing": {"otlpEndpoint": "http://c:4317"},
                                                             "fullnameOverride": "registry"}))["containers"][0])
    assert (plain["OTEL_EXPORTER_OTLP_PROTOCOL"], plain["OTEL_TRACES_SAMPLER"], plain["OTEL_SERVICE_NAME"]) == (
        "grpc", "parentbased_always_on", "registry")
    assert "OTEL_TRACES_SAMPLER_ARG" not in plain
    named = otel(registry_pod(render_registry(prepared_charts, {"tracing": {"otlpEndpoint": "http://c:4317",
                                                                         "serviceName": "mesh"}}))["containers"][0])
    assert named["OTEL_SERVICE_NAME"] == "mesh"


# --- security: authentication, TLS, the audit log --------------------------------

DIGEST = "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae"
AUTH = {
    "registrants": {"inline": [{"name": "inventory", "token_sha256": DIGEST, "tools": ["lookup"], "max_instances": 4}]},
    "auth": {"apiKeys": {"inline": [{"caller": "agent-1", "sha256": DIGEST, "groups": ["ops"]}]}},
}


def registry_pod(rendered: Rendered) -> dict[str, Any]:
    return rendered.one("Deployment")["spec"]["template"]["spec"]


def file_source(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The volume a file path of the container comes from, and its mount."""
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    return volume, mount


JWKS = '{"keys": []}'
CREDENTIALS = "toolmesh-credentials"


def sha256(text: str) -> str:
    """What `toolmesh-registry hash-key` prints for ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


def generated(rendered: Rendered, name: str = CREDENTIALS) -> dict[str, str]:
    """The data of the Secret of generated credentials, decoded."""
    return {k: base64.b64decode(v).decode() for k, v in rendered.one("Secret", name)["data"].items()}


def test_defaults_install_authenticated(prepared_charts):
    """With no values at all, the chart generates an agent API key and a
    registration token into `<fullname>-credentials`, and the registry reads
    the files made of their digests from that Secret, and nothing else of it."""
    rendered = render_registry(prepared_charts)
    data = generated(rendered)
    assert set(data) == {"agent-api-key", "api-keys.yaml", "registration-token", "registrants.yaml"}
    key, token = data["agent-api-key"], data["registration-token"]
    assert re.fullmatch(r"[A-Za-z0-9]{48}", key) and re.fullmatch(r"[A-Za-z0-9]{48}", token) and key != token
    assert yaml.safe_load(data["api-keys.yaml"]) == {"keys": [{"caller": "agent", "sha256": sha256(key)}]}
    assert yaml.safe_load(data["registrants.yaml"]) == {"registrants": [
        {"name": "sidecars", "token_sha256": sha256(token), "tools": ["*"], "max_instances": 100}]}
    secret = rendered.one("Secret", CREDENTIALS)
    assert secret["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    assert "TOOLMESH_INSECURE" not in env
    for variable, file in [("TOOLMESH_API_KEYS_FILE", "api-keys.yaml"), ("TOOLMESH_REGISTRANTS_FILE", "registrants.yaml")]:
        assert env[variable] == f"/var/run/secrets/toolmesh/{file.removesuffix('.yaml')}/{file}"
        volume, mount = file_source(pod, container, env[variable])
        assert mount["readOnly"] is True and "subPath" not in mount, "a whole volume: the kubelet's updates reach it"
        # The digests' file only: the plain-text credential stays out of the pod.
        assert volume["secret"] == {"secretName": CREDENTIALS, "defaultMode": 0o444, "items": [{"key": file, "path": file}]}
    for obj in rendered.objects:
        if obj is not secret:
            assert key not in json.dumps(obj) and token not in json.dumps(obj), f"{kn(obj)} holds a credential"
    assert key not in rendered.notes and token not in rendered.notes


def test_template_makes_new_credentials_each_time(prepared_charts):
    """`helm template` and `--dry-run` cannot read the cluster (`lookup`
    finds nothing): each render is valid, with credentials of its own."""
    first, second = generated(render_registry(prepared_charts)), generated(render_registry(prepared_charts))
    assert first["agent-api-key"] != second["agent-api-key"]
    assert first["registration-token"] != second["registration-token"]


def test_upgrade_keeps_the_generated_credentials(prepared_charts):
    """Rendered against a cluster (a Kubernetes API on loopback that
    `lookup` asks, as during `helm install` and `helm upgrade`): the
    credentials already in the release's Secret are kept, and only a
    missing one is generated."""
    chart = prepared_charts["toolmesh"]
    with FakeCluster() as cluster:
        installed = generated(cluster.render(chart))
        assert f"/api/v1/namespaces/toolmesh/secrets/{CREDENTIALS}" in cluster.requests, "lookup never asked"
        cluster.secrets[("toolmesh", CREDENTIALS)] = installed
        assert generated(cluster.render(chart)) == installed
        # Another release's or namespace's Secret is not taken.
        assert generated(cluster.render(chart, namespace="other"))["agent-api-key"] != installed["agent-api-key"]
        assert generated(cluster.render(chart, name="tm"), "tm-toolmesh-credentials")["agent-api-key"] != installed[
            "agent-api-key"]
        # A credential missing from the Secret is generated; the other is kept.
        cluster.secrets[("toolmesh", CREDENTIALS)] = {"registration-token": installed["registration-token"]}
        partial = generated(cluster.render(chart))
        assert partial["registration-token"] == installed["registration-token"]
        assert partial["registrants.yaml"] == installed["registrants.yaml"]
        assert partial["agent-api-key"] != installed["agent-api-key"]
        assert yaml.safe_load(partial["api-keys.yaml"])["keys"][0]["sha256"] == sha256(partial["agent-api-key"])
        # The internal Redis's password is kept the same way.
        cluster.secrets[("toolmesh", "toolmesh-redis")] = {"redis-password": "kept-password"}
        internal = cluster.render(chart, {"replicas": 2, "redis": {"internal": {"enabled": True}}})
        assert generated(internal, "toolmesh-redis")["redis-password"] == "kept-password"


@pytest.mark.parametrize(
    ("values", "generated_keys"),
    [
        ({"auth": AUTH["auth"]}, {"registration-token", "registrants.yaml"}),
        ({"auth": {"jwt": {"keys": JWKS}}}, {"registration-token", "registrants.yaml"}),
        ({"registrants": AUTH["registrants"]}, {"agent-api-key", "api-keys.yaml"}),
        ({"registrants": {"existingSecret": "regs"}, "auth": {"apiKeys": {"existingSecret": "keys"}}}, set()),
        (AUTH, set()),
        ({"insecure": True}, set()),
        ({"credentials": {"generate": False}, "registrants": AUTH["registrants"], "insecure": True}, set()),
    ],
    ids=["api-keys", "jwt", "registrants", "existing-secrets", "inline", "insecure", "generation-off"],
)
def test_only_what_is_not_configured_is_generated(prepared_charts, values, generated_keys):
    rendered = render_registry(prepared_charts, values)
    secrets = [o for o in rendered.of_kind("Secret") if o["metadata"]["name"] == CREDENTIALS]
    assert (set(secrets[0]["data"]) if secrets else set()) == generated_keys
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    for variable, file in [("TOOLMESH_API_KEYS_FILE", "api-keys.yaml"), ("TOOLMESH_REGISTRANTS_FILE", "registrants.yaml")]:
        if variable in env:
            volume, _ = file_source(pod, container, env[variable])
            assert (volume["secret"]["secretName"] == CREDENTIALS) == (file in generated_keys), variable
        else:
            assert file not in generated_keys, f"{file} generated and not read"
    notes = " ".join(rendered.notes.split())
    assert ("{.data.agent-api-key}" in notes) == ("agent-api-key" in generated_keys)
    assert ("{.data.registration-token}" in notes) == ("registration-token" in generated_keys)


def test_generated_credentials_settings_and_notes(prepared_charts):
    values = {"credentials": {"keep": False, "agent": {"caller": "ops-agent", "groups": ["ops"]},
                              "registrant": {"name": "tools", "tools": ["inventory.*", "lookup"], "maxInstances": 7}}}
    rendered = render_registry(prepared_charts, values, name="tm", namespace="tools")
    secret = rendered.one("Secret", "tm-toolmesh-credentials")
    assert "annotations" not in secret["metadata"], "credentials.keep off: no resource policy"
    data = generated(rendered, "tm-toolmesh-credentials")
    assert yaml.safe_load(data["api-keys.yaml"]) == {"keys": [
        {"caller": "ops-agent", "sha256": sha256(data["agent-api-key"]), "groups": ["ops"]}]}
    assert yaml.safe_load(data["registrants.yaml"]) == {"registrants": [
        {"name": "tools", "token_sha256": sha256(data["registration-token"]), "tools": ["inventory.*", "lookup"],
         "max_instances": 7}]}
    notes = " ".join(rendered.notes.split())
    read = "kubectl -n tools get secret tm-toolmesh-credentials -o jsonpath="
    assert f"KEY=$({read}'{{.data.agent-api-key}}' | base64 -d)" in notes
    assert "-H \"authorization: Bearer $KEY\"" in notes
    assert f"{read}'{{.data.registration-token}}' | base64 -d > registration-token" in notes
    assert 'caller "ops-agent"' in notes and 'registrant "tools": tools inventory.*, lookup, at most 7 instances' in notes
    assert "kept by `helm uninstall`" not in notes
    assert "kept by `helm uninstall`" in " ".join(render_registry(prepared_charts).notes.split())


def test_refuses_an_open_registry_when_generation_is_off(prepared_charts):
    off = {"credentials": {"generate": False}}
    with pytest.raises(helm.HelmRenderError) as refused:
        render_registry(prepared_charts, off)
    message = str(refused.value)
    assert "refuses to listen beyond loopback (config.listenHost 0.0.0.0)" in message
    assert ("agents (set auth.apiKeys or auth.jwt) and registration (set registrants) unauthenticated, "
            "and credentials.generate is off") in message
    assert "leave credentials.generate on" in message and "insecure=true" in message
    assert message in (REPO / "docs" / "kubernetes.md").read_text(), "docs/kubernetes.md quotes another message"
    # Half the authentication is not enough: the message names the other half.
    with pytest.raises(helm.HelmRenderError, match=r"with registration \(set registrants\) unauthenticated"):
        render_registry(prepared_charts, merged(off, {"auth": AUTH["auth"]}))
    with pytest.raises(helm.HelmRenderError, match=r"with agents \(set auth.apiKeys or auth.jwt\) unauthenticated"):
        render_registry(prepared_charts, merged(off, {"registrants": AUTH["registrants"]}))
    # On loopback the registry starts without any (as it does); insecure runs it open.
    render_registry(prepared_charts, merged(off, {"config": {"listenHost": "127.0.0.1"}, "hostNetwork": True}))
    render_registry(prepared_charts, merged(off, {"insecure": True}))


def test_notes_say_how_to_build_and_push_the_default_image(prepared_charts):
    """`toolmesh:<appVersion>` is published nowhere: the notes of both
    charts say so while the repository is the default, and how to build,
    push and set it."""
    notes = " ".join(render_registry(prepared_charts).notes.split())
    assert "The image toolmesh:0.1.0 (image.repository's default) is published nowhere" in notes
    for step in ("scripts/image.sh --tag 0.1.0", "podman push registry.example.com/toolmesh:0.1.0",
                 "--set image.repository=registry.example.com/toolmesh"):
        assert step in notes, step
    assert "published nowhere" not in render_registry(prepared_charts, {"image": {"repository": "r.example/toolmesh"}}).notes
    tool = " ".join(render(prepared_charts["inventory-tool"]).notes.split())
    assert "The sidecar's image toolmesh:0.1.0 (toolmesh-sidecar.image.repository's default) is published nowhere" in tool
    moved = render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"image": {"repository": "r.example/toolmesh"}}})
    assert "published nowhere" not in moved.notes


REDIS = {"url": "redis://redis:6379/0"}


@pytest.mark.parametrize(
    ("values", "budget"),
    [
        ({}, None),
        ({"replicas": 3, "redis": REDIS}, {"maxUnavailable": 1}),
        ({"autoscaling": {"enabled": True}, "redis": REDIS}, {"maxUnavailable": 1}),
        ({"replicas": 3, "redis": REDIS, "podDisruptionBudget": {"minAvailable": 2}}, {"minAvailable": 2}),
        ({"replicas": 3, "redis": REDIS, "podDisruptionBudget": {"enabled": False}}, None),
        ({"podDisruptionBudget": {"enabled": True}}, {"maxUnavailable": 1}),
    ],
    ids=["one-replica", "three-replicas", "autoscaling", "min-available", "switched-off", "forced-on-one-replica"],
)
def test_pod_disruption_budget_whenever_more_than_one_replica(prepared_charts, values, budget):
    rendered = render_registry(prepared_charts, values)
    budgets = rendered.of_kind("PodDisruptionBudget")
    if budget is None:
        assert not budgets
    else:
        [pdb] = budgets
        assert pdb["spec"] == {**budget, "selector": rendered.one("Deployment")["spec"]["selector"]}
    warned = "a PodDisruptionBudget with a single replica" in " ".join(rendered.notes.split())
    assert warned == (values.get("podDisruptionBudget", {}).get("enabled") is True)


@pytest.mark.parametrize(
    "agents",
    [AUTH["auth"], {"jwt": {"keys": "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA\n-----END PUBLIC KEY-----\n"}}],
    ids=["api-keys", "jwt"],
)
def test_authenticated_registry_renders_without_insecure(prepared_charts, agents):
    rendered = render(prepared_charts["toolmesh"], {"registrants": AUTH["registrants"], "auth": agents})
    env = env_of(registry_pod(rendered)["containers"][0])
    assert "TOOLMESH_INSECURE" not in env
    assert "WARNING: insecure" not in rendered.notes


def test_insecure_sets_the_flag_and_warns(prepared_charts):
    rendered = render_registry(prepared_charts, {"insecure": True})
    assert env_of(registry_pod(rendered)["containers"][0])["TOOLMESH_INSECURE"] == "true"
    notes = " ".join(rendered.notes.split())
    assert "WARNING: insecure=true. Agents are not authenticated" in notes
    assert "Registration is open" in notes
    assert "tool charts register without a token (toolmesh-sidecar.registrationToken.enabled=false)" in notes
    # insecure asks for what is not configured to be open: nothing generated.
    assert not rendered.of_kind("Secret")
    assert not {"TOOLMESH_API_KEYS_FILE", "TOOLMESH_REGISTRANTS_FILE"} & set(env_of(registry_pod(rendered)["containers"][0]))


def test_inline_registrants_and_api_keys_go_in_a_secret(prepared_charts):
    rendered = render(prepared_charts["toolmesh"], AUTH)
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    for variable, name, key, wanted in [
        ("TOOLMESH_REGISTRANTS_FILE", "toolmesh-registrants", "registrants.yaml",
         {"registrants": AUTH["registrants"]["inline"]}),
        ("TOOLMESH_API_KEYS_FILE", "toolmesh-api-keys", "api-keys.yaml", {"keys": AUTH["auth"]["apiKeys"]["inline"]}),
    ]:
        secret = rendered.one("Secret", name)
        path = env[variable]
        assert path.startswith("/var/run/secrets/toolmesh/") and path.endswith("/" + key)
        volume, mount = file_source(pod, container, path)
        assert mount["readOnly"] is True and "subPath" not in mount, "a whole volume: the kubelet's updates reach it"
        assert volume["secret"]["secretName"] == name
        assert volume["secret"]["items"] == [{"key": key, "path": key}]
        assert yaml.safe_load(base64.b64decode(secret["data"][key])) == wanted
    # No checksum annotation: the registry reloads the files, no restart.
    annotations = rendered.one("Deployment")["spec"]["template"]["metadata"].get("annotations") or {}
    assert not [a for a in annotations if a.startswith("checksum/")]


def test_existing_secrets_win_over_inline_values(prepared_charts):
    values = merged(AUTH, {
        "registrants": {"existingSecret": "regs", "existingSecretKey": "r.yaml"},
        "auth": {"apiKeys": {"existingSecret": "keys", "existingSecretKey": "k.yaml"}},
    })
    rendered = render(prepared_charts["toolmesh"], values)
    assert not rendered.of_kind("Secret"), "nothing of the chart's own"
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    for variable, secret, key in [("TOOLMESH_REGISTRANTS_FILE", "regs", "r.yaml"),
                                  ("TOOLMESH_API_KEYS_FILE", "keys", "k.yaml")]:
        volume, _ = file_source(pod, container, env[variable])
        assert volume["secret"]["secretName"] == secret
        assert volume["secret"]["items"] == [{"key": key, "path": env[variable].rsplit("/", 1)[1]}]


def test_inline_policy_and_jwt_keys_go_in_a_configmap(prepared_charts):
    rules = [{"callers": ["agent-1"], "tools": ["lookup", "invoice.*"]}, {"groups": ["ops"], "tools": ["*"]}]
    jwks = '{"keys": []}'
    values = merged(AUTH, {"auth": {"policy": {"rules": rules}, "jwt": {
        "keys": jwks, "issuer": "https://issuer.example", "audience": "toolmesh", "leeway": "30s",
        "callerClaim": "email", "groupsClaim": "roles"}}})
    rendered = render(prepared_charts["toolmesh"], values)
    assert yaml.safe_load(rendered.one("ConfigMap", "toolmesh-policy")["data"]["policy.yaml"]) == {"rules": rules}
    assert rendered.one("ConfigMap", "toolmesh-jwt-keys")["data"]["jwt-keys"].strip() == jwks
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    assert env["TOOLMESH_POLICY_FILE"] == "/etc/toolmesh/policy/policy.yaml"
    volume, _ = file_source(pod, container, env["TOOLMESH_POLICY_FILE"])
    assert volume["configMap"] == {"name": "toolmesh-policy", "defaultMode": 0o444,
                                   "items": [{"key": "policy.yaml", "path": "policy.yaml"}]}
    volume, _ = file_source(pod, container, env["TOOLMESH_JWT_KEYS_FILE"])
    assert volume["configMap"]["items"] == [{"key": "jwt-keys", "path": "keys"}]
    assert (env["TOOLMESH_JWT_ISSUER"], env["TOOLMESH_JWT_AUDIENCE"], env["TOOLMESH_JWT_LEEWAY"]) == (
        "https://issuer.example", "toolmesh", "30s")
    assert (env["TOOLMESH_JWT_CALLER_CLAIM"], env["TOOLMESH_JWT_GROUPS_CLAIM"]) == ("email", "roles")
    # An existing ConfigMap instead, under a key of its own.
    existing = render(prepared_charts["toolmesh"], merged(AUTH, {"auth": {"policy": {
        "existingConfigMap": "team-policy", "existingConfigMapKey": "rules.yaml", "rules": rules}}}))
    assert not existing.of_kind("ConfigMap")
    pod = registry_pod(existing)
    volume, _ = file_source(pod, pod["containers"][0], "/etc/toolmesh/policy/policy.yaml")
    assert volume["configMap"]["name"] == "team-policy"
    assert volume["configMap"]["items"] == [{"key": "rules.yaml", "path": "policy.yaml"}]


def test_versions_and_pins_go_in_configmaps_the_registry_reads(prepared_charts):
    tools = {"weather": {"default": "1.4.2", "split": {"1.4.2": 90, "2.0.0": 10}, "deprecated": {"1.3.0": "use 1.4"}}}
    rules = [{"tools": ["billing.*"], "mode": "enforce"}, {"tools": ["*"], "mode": "trust-on-first-use"}]
    approved = {"billing.refund@2.1.0": "3f" * 32}
    rendered = render(prepared_charts["toolmesh"], {
        "versions": {"tools": tools},
        "pins": {"rules": rules, "approved": approved, "approvers": {"groups": ["platform"]}}})
    assert yaml.safe_load(rendered.one("ConfigMap", "toolmesh-versions")["data"]["versions.yaml"]) == {"tools": tools}
    assert yaml.safe_load(rendered.one("ConfigMap", "toolmesh-pins")["data"]["pins.yaml"]) == {
        "rules": rules, "pins": approved, "approvers": {"groups": ["platform"]}}
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    for file in ("versions", "pins"):
        variable = f"TOOLMESH_{file.upper()}_FILE"
        assert env[variable] == f"/etc/toolmesh/{file}/{file}.yaml"
        volume, _ = file_source(pod, container, env[variable])
        assert volume["configMap"] == {"name": f"toolmesh-{file}", "defaultMode": 0o444,
                                       "items": [{"key": f"{file}.yaml", "path": f"{file}.yaml"}]}
    # Neither by default; an existing ConfigMap instead, under a key of its own.
    plain = env_of(registry_pod(render(prepared_charts["toolmesh"], {}))["containers"][0])
    assert "TOOLMESH_VERSIONS_FILE" not in plain and "TOOLMESH_PINS_FILE" not in plain
    existing = render(prepared_charts["toolmesh"], {"pins": {"existingConfigMap": "team-pins", "existingConfigMapKey": "p.yaml"}})
    pod = registry_pod(existing)
    volume, _ = file_source(pod, pod["containers"][0], "/etc/toolmesh/pins/pins.yaml")
    assert volume["configMap"]["name"] == "team-pins"
    assert volume["configMap"]["items"] == [{"key": "p.yaml", "path": "pins.yaml"}]


def test_search_model_comes_from_a_volume_mounted_read_only(prepared_charts):
    image = {"image": {"reference": "registry.example.com/models/all-minilm-l6-v2:0.1.2", "pullPolicy": "IfNotPresent"}}
    rendered = render_registry(prepared_charts, {"search": {"model": {"volume": image, "path": "/all-MiniLM-L6-v2/"},
                                                            "threads": 3}})
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    assert env["TOOLMESH_SEARCH_MODEL"] == "/var/lib/toolmesh/search-model/all-MiniLM-L6-v2"
    assert env["TOOLMESH_SEARCH_THREADS"] == "3"
    [volume] = [v for v in pod["volumes"] if v["name"] == "search-model"]
    assert volume == {"name": "search-model", **image}
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "search-model"]
    assert mount == {"name": "search-model", "mountPath": "/var/lib/toolmesh/search-model", "readOnly": True}
    # The volume's root when no path is given.
    env = env_of(registry_pod(render_registry(prepared_charts, {"search": {"model": {"volume": image}}}))["containers"][0])
    assert env["TOOLMESH_SEARCH_MODEL"] == "/var/lib/toolmesh/search-model"
    # No model by default: BM25 alone, nothing mounted.
    pod = registry_pod(render_registry(prepared_charts, {}))
    assert "TOOLMESH_SEARCH_MODEL" not in env_of(pod["containers"][0])
    assert all(v["name"] != "search-model" for v in pod.get("volumes", []))


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"search": {"model": {"path": "../etc"}}}, "path"),
        ({"search": {"model": {"path": "models/../../etc"}}}, "path"),
        ({"search": {"model": {"volume": {"name": "x", "emptyDir": {}}}}}, "volume"),
        ({"search": {"threads": 0}}, "threads"),
        ({"mcp": {"discovery": "lazy"}}, "discovery"),
    ],
    ids=["path-up", "path-up-inside", "volume-with-a-name", "no-threads", "unknown-discovery"],
)
def test_search_values_the_schema_refuses(prepared_charts, values, named):
    with pytest.raises(helm.HelmValuesError) as refused:
        render_registry(prepared_charts, values)
    assert named in str(refused.value), f"the error does not name {named!r}: {refused.value}"


def test_approvals_alone_keep_every_tool_callable(prepared_charts):
    approvals = [{"name": "refunds", "tools": ["billing.refund"], "when": ["/amount > 100"],
                  "approvers": {"groups": ["finance"]}, "expires_after": "30m"}]
    rendered = render(prepared_charts["toolmesh"], merged(AUTH, {"auth": {"policy": {"approvals": approvals}}}))
    policy = yaml.safe_load(rendered.one("ConfigMap", "toolmesh-policy")["data"]["policy.yaml"])
    assert policy == {"rules": [{"callers": ["*"], "tools": ["*"]}], "approvals": approvals}
    assert env_of(registry_pod(rendered)["containers"][0])["TOOLMESH_POLICY_FILE"] == "/etc/toolmesh/policy/policy.yaml"


def test_policy_without_authenticated_agents_fails(prepared_charts):
    policy = {"auth": {"policy": {"rules": [{"callers": ["*"], "tools": ["*"]}]}}}
    for unauthenticated in ({"insecure": True}, {"credentials": {"generate": False}, "config": {"listenHost": "127.0.0.1"},
                                                 "hostNetwork": True}):
        with pytest.raises(helm.HelmRenderError, match="auth.policy needs authenticated agents"):
            render_registry(prepared_charts, merged(policy, unauthenticated))
    # The generated API key authenticates agents: the policy applies to its caller.
    env = env_of(registry_pod(render_registry(prepared_charts, policy))["containers"][0])
    assert {"TOOLMESH_POLICY_FILE", "TOOLMESH_API_KEYS_FILE"} <= set(env)


def test_audit_log(prepared_charts):
    env = env_of(registry_pod(render_registry(prepared_charts, {"config": {"auditLog": "-"}}))["containers"][0])
    assert env["TOOLMESH_AUDIT_LOG"] == "-"
    assert "TOOLMESH_AUDIT_LOG" not in env_of(registry_pod(render_registry(prepared_charts))["containers"][0])


def test_tls_keeps_the_probes_on_the_plain_http_admin_port(prepared_charts):
    values = merged(AUTH, {"tls": {"existingSecret": "toolmesh-tls", "requireClientCert": True,
                                   "clientCaSecret": "client-ca"}})
    pod = registry_pod(render(prepared_charts["toolmesh"], values, name="tm", namespace="tools"))
    container = pod["containers"][0]
    for probe, path in ADMIN_PROBE_PATHS.items():
        assert container[probe]["httpGet"] == {"path": path, "port": "admin", "scheme": "HTTP"}, probe
    assert "hostAliases" not in pod, "no TLS probe dials the certificate's name"


def test_tls_mounts_the_secret_and_switches_probes_to_exec(prepared_charts):
    """With TLS and without the admin port, the probes are an exec of the
    registry's health over TLS."""
    values = merged(AUTH, {"tls": {"existingSecret": "toolmesh-tls", "clientCaSecret": "client-ca"},
                           "sidecarTls": {"caSecret": "sidecars-ca", "caSecretKey": "root.pem",
                                          "clientCertSecret": "registry-client"},
                           "admin": {"enabled": False}})
    rendered = render(prepared_charts["toolmesh"], values, name="tm", namespace="tools")
    pod = registry_pod(rendered)
    container = pod["containers"][0]
    env = env_of(container)
    assert env["TOOLMESH_TLS_CERT_FILE"] == "/var/run/secrets/toolmesh/tls/tls.crt"
    assert env["TOOLMESH_TLS_KEY_FILE"] == "/var/run/secrets/toolmesh/tls/tls.key"
    volume, mount = file_source(pod, container, env["TOOLMESH_TLS_CERT_FILE"])
    assert volume["secret"]["secretName"] == "toolmesh-tls" and "subPath" not in mount
    assert volume["secret"]["items"] == [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"},
                                         {"key": "ca.crt", "path": "ca.crt"}]
    for variable, secret, items in [
        ("TOOLMESH_TLS_CLIENT_CA_FILE", "client-ca", [{"key": "ca.crt", "path": "ca.crt"}]),
        ("TOOLMESH_SIDECAR_CA_FILE", "sidecars-ca", [{"key": "root.pem", "path": "ca.crt"}]),
        ("TOOLMESH_SIDECAR_CERT_FILE", "registry-client",
         [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]),
    ]:
        volume, _ = file_source(pod, container, env[variable])
        assert (volume["secret"]["secretName"], volume["secret"]["items"]) == (secret, items), variable
    assert env["TOOLMESH_SIDECAR_KEY_FILE"] == "/var/run/secrets/toolmesh/sidecar-client/tls.key"
    assert "TOOLMESH_TLS_REQUIRE_CLIENT_CERT" not in env
    # Probes: exec of the registry's health over TLS, on the pod's loopback
    # under the Service's name (hostAliases), which the certificate names.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        handler = container[probe]
        assert "grpc" not in handler, probe
        command = handler["exec"]["command"]
        assert command[:4] == ["/usr/local/bin/toolmesh-registry", "health", "--address", "https://tm-toolmesh.tools.svc:50051"]
        assert command[4:6] == ["--ca-file", "/var/run/secrets/toolmesh/tls/ca.crt"]
        assert "--cert-file" not in command
    assert pod["hostAliases"] == [{"ip": "127.0.0.1", "hostnames": ["tm-toolmesh.tools.svc"]}]
    # The helm test pod: the same over the Service, trusting the same CA.
    [hook] = rendered.hooks()
    args = hook["spec"]["containers"][0]["args"]
    assert args[:5] == ["health", "--address", "https://tm-toolmesh.tools.svc:50051", "--ca-file",
                        "/var/run/secrets/toolmesh/tls/ca.crt"]
    assert hook["spec"]["volumes"][0]["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]
    assert "-cacert ca.crt" in rendered.notes and "-plaintext" not in rendered.notes


def test_tls_with_required_client_certificates(prepared_charts):
    values = merged(AUTH, {"tls": {"existingSecret": "toolmesh-tls", "clientCaSecret": "toolmesh-tls",
                                   "requireClientCert": True, "probeHost": "registry.example.com", "caKey": ""},
                           "admin": {"enabled": False}})
    rendered = render(prepared_charts["toolmesh"], values)
    container = registry_pod(rendered)["containers"][0]
    assert env_of(container)["TOOLMESH_TLS_REQUIRE_CLIENT_CERT"] == "true"
    command = container["livenessProbe"]["exec"]["command"]
    assert command[3] == "https://registry.example.com:50051"
    assert "--ca-file" not in command, "caKey empty: the public roots"
    assert command[4:8] == ["--cert-file", "/var/run/secrets/toolmesh/tls/tls.crt",
                            "--key-file", "/var/run/secrets/toolmesh/tls/tls.key"]
    assert registry_pod(rendered)["hostAliases"][0]["hostnames"] == ["registry.example.com"]
    [hook] = rendered.hooks()
    assert "--cert-file" in hook["spec"]["containers"][0]["args"]
    with pytest.raises(helm.HelmRenderError, match="tls.requireClientCert needs tls.clientCaSecret"):
        render_registry(prepared_charts, {"tls": {"existingSecret": "t", "requireClientCert": True}})
    with pytest.raises(helm.HelmRenderError, match="need TLS: set tls.existingSecret"):
        render_registry(prepared_charts, {"tls": {"clientCaSecret": "ca"}})


# --- the sidecar library and the example tool chart -----------------------------


def test_sidecar_container(prepared_charts):
    rendered = render(prepared_charts["inventory-tool"], name="inventory", namespace="toolmesh")
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"inventory", "toolmesh-sidecar"}
    sidecar = containers["toolmesh-sidecar"]
    assert sidecar["command"] == ["/usr/local/bin/toolmesh-sidecar"]
    env = env_of(sidecar)
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert env["TOOLMESH_ADVERTISE"] == "http://$(POD_IP):50061"
    names = [e["name"] for e in sidecar["env"]]
    assert names.index("POD_IP") < names.index("TOOLMESH_ADVERTISE"), "$(POD_IP) must be defined first"
    assert env["TOOLMESH_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["TOOLMESH_SIDECAR_LISTEN"] == "0.0.0.0:50061"
    assert env["TOOLMESH_REGISTRY"] == "toolmesh.toolmesh.svc:50051"
    assert env["TOOLMESH_SIDECAR_CONFIG"] == "/etc/toolmesh-sidecar/tools.yaml"
    assert sidecar["lifecycle"]["preStop"]["exec"]["command"] == [
        "/usr/local/bin/toolmesh-sidecar", "withdraw", "--timeout", "5s"]
    # Probes on the admin port: ready while registered, alive while it answers.
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "toolmesh-admin", "scheme": "HTTP"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "toolmesh-admin", "scheme": "HTTP"}
    assert sidecar["ports"] == [{"name": "toolmesh", "containerPort": 50061, "protocol": "TCP"},
                                {"name": "toolmesh-admin", "containerPort": 9091, "protocol": "TCP"}]
    assert env["TOOLMESH_ADMIN_LISTEN"] == "0.0.0.0:9091"
    # Without it: gRPC health (readiness) and TCP (liveness) on its port.
    _, plain = sidecar_of(render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"admin": {"enabled": False}}}))
    assert plain["readinessProbe"]["grpc"] == {"port": 50061}
    assert plain["livenessProbe"]["tcpSocket"] == {"port": 50061}
    assert [p["name"] for p in plain["ports"]] == ["toolmesh"] and "TOOLMESH_ADMIN_LISTEN" not in env_of(plain)
    with pytest.raises(helm.HelmRenderError, match=r"toolmesh-sidecar.admin.port and toolmesh-sidecar.port are both 9091"):
        render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"port": 9091}})
    # The sidecar's own security context is complete, whatever the pod's.
    assert container_problems({"kind": "Deployment", "metadata": {"name": "x"}},
                              {"containers": [sidecar], "automountServiceAccountToken": False}) == []
    # Its YAML: the tools, rendered with tpl, mounted from the ConfigMap.
    configmap = rendered.one("ConfigMap")
    volume = next(v for v in pod["volumes"] if v["name"] == "toolmesh-sidecar")
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert {"name": "toolmesh-sidecar", "mountPath": "/etc/toolmesh-sidecar", "readOnly": True} in sidecar[
        "volumeMounts"]
    tools = yaml.safe_load(configmap["data"]["tools.yaml"])["tools"]
    assert [t["name"] for t in tools] == ["lookup"]
    assert tools[0]["backend"]["http"]["url"] == "http://127.0.0.1:8080/lookup"
    # The grace period holds the withdraw (5 s) and the sidecar's drain (10 s).
    assert pod["terminationGracePeriodSeconds"] >= 15


def test_deprecated_execute_token_is_accepted_and_ignored(prepared_charts):
    """Old values (executeToken on both sides, the sidecar's insecure) still
    render, to exactly what they render without them, and the notes ask to
    remove them."""
    old = {"existingSecret": "toolmesh-execute-token", "existingSecretKey": "t"}
    cases = [
        (render_registry(prepared_charts, {"executeToken": old}), render_registry(prepared_charts), "registry"),
        (render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"executeToken": old, "insecure": True}}),
         render(prepared_charts["inventory-tool"]), "toolmesh-sidecar"),
    ]
    for rendered, plain, container_name in cases:
        deployment = rendered.one("Deployment")
        assert without_origin(deployment) == without_origin(plain.one("Deployment")), "they render nothing"
        container = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == container_name)
        assert not {"TOOLMESH_EXECUTE_TOKEN_FILE", "TOOLMESH_SIDECAR_INSECURE"} & set(env_of(container))
        notes = " ".join(rendered.notes.split())
        assert "executeToken is deprecated and ignored" in notes and "toolmesh-execute-token is no longer read" in notes
        assert "deprecated" not in plain.notes
    assert "toolmesh-sidecar.insecure is deprecated and ignored" in " ".join(cases[1][0].notes.split())


def sidecar_of(rendered: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = rendered.one("Deployment")["spec"]["template"]["spec"]
    return pod, next(c for c in pod["containers"] if c["name"] == "toolmesh-sidecar")


def test_example_is_secure_by_default(prepared_charts):
    """The example tool chart with its defaults, in the registry's namespace:
    it registers with the token the registry chart generated, and listens
    on the pod's IP with nothing more (the registry's per-call grants
    authenticate every Execute): no execute token, insecure or identity."""
    rendered = render(prepared_charts["inventory-tool"])
    pod, sidecar = sidecar_of(rendered)
    env = env_of(sidecar)
    assert env["TOOLMESH_SIDECAR_LISTEN"] == "0.0.0.0:50061"
    assert not {"TOOLMESH_EXECUTE_TOKEN_FILE", "TOOLMESH_SIDECAR_INSECURE", "TOOLMESH_REGISTRY_IDENTITY"} & set(env)
    volume, mount = file_source(pod, sidecar, env["TOOLMESH_REGISTRATION_TOKEN_FILE"])
    assert volume["secret"]["secretName"] == CREDENTIALS and mount["readOnly"] is True
    assert volume["secret"]["items"] == [{"key": "registration-token", "path": "token"}]
    assert "It registers with the token in the Secret toolmesh-credentials (key registration-token)." in rendered.notes
    # registryIdentity, an extra on top, still needs TLS with client certificates.
    with pytest.raises(helm.HelmRenderError, match="registryIdentity needs TLS with client certificates"):
        render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"registryIdentity": "spiffe://x"}})


@pytest.mark.parametrize(
    ("release", "namespace"),
    [("toolmesh", "toolmesh"), ("tm", "tools"), ("registry-of-the-platform-team-in-the-shared-cluster-1", "ai")],
    ids=["defaults", "another-release", "longest-release-name"],
)
def test_sidecar_reads_the_token_the_registry_chart_generated(prepared_charts, release, namespace):
    """Given only the registry's address (its Service, in the tool's
    namespace, in any of the forms DNS resolves there), the sidecar mounts
    the registration token from the very Secret and key the registry chart
    generated, whatever the release's name (names truncated alike)."""
    registry = render_registry(prepared_charts, name=release, namespace=namespace)
    [service] = [s for s in registry.of_kind("Service") if [p["name"] for p in s["spec"]["ports"]] == ["grpc"]]
    name, port = service["metadata"]["name"], service["spec"]["ports"][0]["port"]
    [secret] = [s for s in registry.of_kind("Secret") if "registration-token" in s["data"]]
    for address in (f"{name}.{namespace}.svc:{port}", f"{name}:{port}", f"{name}.{namespace}:{port}",
                    f"http://{name}.{namespace}.svc.cluster.local:{port}"):
        pod, sidecar = sidecar_of(render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"registry": address}},
                                         name="inventory", namespace=namespace))
        volume, _ = file_source(pod, sidecar, env_of(sidecar)["TOOLMESH_REGISTRATION_TOKEN_FILE"])
        assert volume["secret"]["secretName"] == secret["metadata"]["name"], address
        assert volume["secret"]["items"] == [{"key": "registration-token", "path": "token"}], address


def test_sidecar_token_from_another_namespace_or_none(prepared_charts):
    chart = prepared_charts["inventory-tool"]

    def token_volume(values: dict[str, Any], namespace: str = "tools") -> dict[str, Any] | None:
        pod, sidecar = sidecar_of(render(chart, {"toolmesh-sidecar": values}, name="inventory", namespace=namespace))
        path = env_of(sidecar).get("TOOLMESH_REGISTRATION_TOKEN_FILE")
        return file_source(pod, sidecar, path)[0]["secret"] if path else None

    # A registry elsewhere: its Secret cannot be mounted here; refused, with the ways out.
    for address in ("toolmesh.toolmesh.svc:50051", "toolmesh.toolmesh:50051", "toolmesh.tools.cluster:50051",
                    "10.0.0.7:50051", "https://registry.example.com:443"):
        with pytest.raises(helm.HelmRenderError) as refused:
            token_volume({"registry": address})
        message = str(refused.value)
        assert f"toolmesh-sidecar.registry ({address}) names no registry Service of this release's namespace (tools)" in message
        for way in ("registrationToken.existingSecret", "registrationToken.registrySecret", "registrationToken.enabled=false"):
            assert way in message, way
        if address == "toolmesh.toolmesh.svc:50051":
            assert message in (REPO / "docs" / "kubernetes.md").read_text(), "docs/kubernetes.md quotes another message"
    # A copy of the token, in a Secret of this namespace.
    copy = {"existingSecret": "inventory-registration-token", "existingSecretKey": "t"}
    assert token_volume({"registrationToken": copy})["secretName"] == "inventory-registration-token"
    assert token_volume({"registrationToken": copy})["items"] == [{"key": "t", "path": "token"}]
    # The registry chart's Secret, named (a registry reached by an address that names no Service).
    named = token_volume({"registry": "10.0.0.7:50051", "registrationToken": {"registrySecret": "mesh-credentials"}})
    assert named["secretName"] == "mesh-credentials" and named["items"] == [{"key": "registration-token", "path": "token"}]
    assert token_volume({"registrationToken": {**copy, "registrySecret": "mesh-credentials"}})["secretName"] == copy["existingSecret"]
    # None: a sidecar the registry knows by its client certificate.
    assert token_volume({"registrationToken": {"enabled": False}}) is None
    pod, _ = sidecar_of(render(chart, {"toolmesh-sidecar": {"registrationToken": {"enabled": False}}}, namespace="tools"))
    assert not [v for v in pod["volumes"] if "registration-token" in v["name"]]


def test_sidecar_tls_and_registry_identity(prepared_charts):
    values = {"toolmesh-sidecar": {
        "tls": {"existingSecret": "inventory-tls", "clientCaSecret": "mesh-ca", "clientCaSecretKey": "root.pem"},
        "registryIdentity": "spiffe://example.org/ns/toolmesh/sa/toolmesh",
        "registry": "https://toolmesh.toolmesh.svc:50051",
        "registryTls": {"caSecret": "mesh-ca", "clientCertSecret": "inventory-client"},
    }}
    pod, sidecar = sidecar_of(render(prepared_charts["inventory-tool"], values))
    env = env_of(sidecar)
    assert env["TOOLMESH_REGISTRY"] == "https://toolmesh.toolmesh.svc:50051"
    assert env["TOOLMESH_ADVERTISE"] == "https://$(POD_IP):50061"
    assert env["TOOLMESH_REGISTRY_IDENTITY"] == "spiffe://example.org/ns/toolmesh/sa/toolmesh"
    assert "TOOLMESH_EXECUTE_TOKEN_FILE" not in env and "TOOLMESH_SIDECAR_INSECURE" not in env
    for variable, secret, key, path in [
        ("TOOLMESH_SIDECAR_TLS_CERT_FILE", "inventory-tls", "tls.crt", "tls.crt"),
        ("TOOLMESH_SIDECAR_TLS_KEY_FILE", "inventory-tls", "tls.key", "tls.key"),
        ("TOOLMESH_SIDECAR_TLS_CLIENT_CA_FILE", "mesh-ca", "root.pem", "ca.crt"),
        ("TOOLMESH_REGISTRY_CA_FILE", "mesh-ca", "ca.crt", "ca.crt"),
        ("TOOLMESH_REGISTRY_CERT_FILE", "inventory-client", "tls.crt", "tls.crt"),
        ("TOOLMESH_REGISTRY_KEY_FILE", "inventory-client", "tls.key", "tls.key"),
    ]:
        assert env[variable].startswith("/var/run/secrets/toolmesh-sidecar/") and env[variable].endswith("/" + path)
        volume, mount = file_source(pod, sidecar, env[variable])
        assert volume["secret"]["secretName"] == secret and mount["readOnly"] is True, variable
        assert {"key": key, "path": path} in volume["secret"]["items"], variable
    # The admin port is plain HTTP whatever the sidecar's port speaks.
    assert sidecar["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert sidecar["livenessProbe"]["httpGet"]["path"] == "/livez"
    # Without it: gRPC probes cannot speak TLS, both probes check the port.
    _, no_admin = sidecar_of(render(prepared_charts["inventory-tool"],
                                    merged(values, {"toolmesh-sidecar": {"admin": {"enabled": False}}})))
    assert no_admin["readinessProbe"]["tcpSocket"] == {"port": 50061} and "grpc" not in no_admin["readinessProbe"]
    assert no_admin["livenessProbe"]["tcpSocket"] == {"port": 50061}
    # The preStop withdraw reaches the TLS health through the same variable.
    assert sidecar["lifecycle"]["preStop"]["exec"]["command"][:2] == ["/usr/local/bin/toolmesh-sidecar", "withdraw"]


def test_sidecar_explicit_addresses_and_tools_rollout(prepared_charts):
    values = {"port": 9000, "toolmesh-sidecar": {"advertise": "http://10.1.2.3:50061", "instanceId": "inv-1"}}
    rendered = render(prepared_charts["inventory-tool"], values)
    pod = rendered.one("Deployment")["spec"]["template"]
    sidecar = next(c for c in pod["spec"]["containers"] if c["name"] == "toolmesh-sidecar")
    env = env_of(sidecar)
    assert "POD_IP" not in env
    assert env["TOOLMESH_ADVERTISE"] == "http://10.1.2.3:50061"
    assert env["TOOLMESH_INSTANCE_ID"] == "inv-1"
    tools = yaml.safe_load(rendered.one("ConfigMap")["data"]["tools.yaml"])["tools"]
    assert tools[0]["backend"]["http"]["url"] == "http://127.0.0.1:9000/lookup"
    # A change to the tools changes the pods' checksum: they roll.
    default = render(prepared_charts["inventory-tool"]).one("Deployment")["spec"]["template"]
    key = "checksum/toolmesh-sidecar"
    assert pod["metadata"]["annotations"][key] != default["metadata"]["annotations"][key]


def test_sidecar_takes_an_mcp_server_entry(prepared_charts):
    entry = {"backend": {"mcp": {"command": ["mcp-server-everything"], "prefix": "everything.", "deny": ["get-env"]}},
             "tags": ["mcp"]}
    rendered = render(prepared_charts["inventory-tool"], {"toolmesh-sidecar": {"tools": [entry]}})
    tools = yaml.safe_load(rendered.one("ConfigMap")["data"]["tools.yaml"])["tools"]
    assert tools == [entry]


def test_sidecar_schema_knows_every_tool_key():
    """The library's schema takes exactly the tool keys the sidecar takes
    (sidecar/src/config/allowed.rs)."""
    allowed = (REPO / "sidecar" / "src" / "config" / "allowed.rs").read_text()
    sidecar_keys = set(re.findall(r'"tools\[\]\.([a-z_]+)"', allowed))
    schema = json.loads((SIDECAR.source / "values.schema.json").read_text())
    tool = schema["properties"]["tools"]["items"]
    assert set(tool["properties"]) == sidecar_keys
    backend_keys = set(re.findall(r'"tools\[\]\.backend\.([a-z_]+)"', allowed))
    assert set(tool["properties"]["backend"]["properties"]) == backend_keys


def test_example_readme_shows_the_lines_a_team_adds():
    readme = (EXAMPLE.source / "README.md").read_text()
    deployment = (EXAMPLE.source / "templates" / "deployment.yaml").read_text()
    sidecar_file = (EXAMPLE.source / "templates" / "toolmesh-sidecar.yaml").read_text()
    for line in re.findall(r'^\s*(\{\{.*include "toolmesh-sidecar\.[a-zA-Z]+".*\}\})\s*$', readme, re.MULTILINE):
        assert line in deployment or line in sidecar_file, f"README line not in the chart: {line}"
    for template in ("container", "volume", "podAnnotations", "configmap"):
        assert f'include "toolmesh-sidecar.{template}"' in readme


# --- versions, documentation ----------------------------------------------------


def test_versions_match_the_workspace():
    for chart in CHARTS.values():
        metadata = yaml.safe_load((chart.source / "Chart.yaml").read_text())
        assert metadata["appVersion"] == WORKSPACE_VERSION, chart.name
    assert load_values(SIDECAR.source / "values.yaml")["image"]["tag"] == WORKSPACE_VERSION
    example = yaml.safe_load((EXAMPLE.source / "Chart.yaml").read_text())
    sidecar = yaml.safe_load((SIDECAR.source / "Chart.yaml").read_text())
    [dependency] = example["dependencies"]
    assert dependency["version"] == sidecar["version"]
    assert (EXAMPLE.source / dependency["repository"].removeprefix("file://")).resolve() == SIDECAR.source


@pytest.mark.parametrize("chart", list(CHARTS.values()), ids=lambda c: c.name)
def test_every_value_is_documented(chart):
    missing = values_doc.undocumented(chart.source / "values.yaml")
    assert not missing, f"{chart.path}/values.yaml: values without a `# --` comment: {missing}"


def test_docs_values_tables_are_current():
    doc = values_doc.DOC.read_text()
    assert sorted(values_doc.tables_in(doc)) == sorted(f"{c.path}/values.yaml" for c in CHARTS.values())
    assert values_doc.updated(doc) == doc, "docs/kubernetes.md is stale: run python3 charts/tests/values_doc.py"
