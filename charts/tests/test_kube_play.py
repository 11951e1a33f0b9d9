"""The charts run by a real container runtime: `podman kube play` of the
rendered registry chart and of the rendered example tool chart, on this
machine, then an agent on the host (grpcurl, by the registry's reflection)
lists the tool and invokes it through the registry, and the tool leaves
`ListTools` within 5 s of its pod stopping. What the charts' probes ask
(``/livez`` and ``/readyz`` on the admin ports) is asked from the host,
and answers 200.

The charts are rendered with their values for this runtime
(charts/tests/kube-play/<chart>.yaml: host networking on loopback ports,
the local images, `imagePullPolicy: Never`) plus free ports. What the
test changes in the rendered YAML, because podman 4.3 cannot take it, and
nothing else:

- objects `podman kube play` does not run (Service, ServiceAccount, and the
  rest; it runs Pods, Deployments, ConfigMaps and Secrets) are left out,
  and so is the `helm test` hook, run on its own by
  ``test_helm_test_pod_passes``;
- containers' ``ports`` are removed: podman turns them into port mappings,
  which host networking refuses ("PortMappings can only be used with
  Bridge or slirp4netns networking");
- containers' probes are removed: podman runs a probe as a shell command
  inside the container (``curl -f ...`` for ``httpGet``, ``nc -z`` for
  ``tcpSocket``), which the images (no shell, no curl) cannot run, and it
  restarts the container when it fails; the test asks the same URLs from
  the host instead (``probe_status``);
- Secrets are played as ConfigMaps (decoded), and ``secret`` volumes as
  ``configMap`` volumes with the same items: podman 4.3 writes a Secret's
  base64 text into the files undecoded (and crashes on a ``secret`` volume
  without ``optional``).

The registry chart is played with no values but this runtime's (the
kube-play file, free ports, the image): so with its defaults, which
generate an agent API key and a registration token into its Secret
``<fullname>-credentials``. The test reads them from that rendered Secret,
as `kubectl get secret` would from the cluster's. An agent without the
key, or with another, is refused (``UNAUTHENTICATED``), and so is an
announce without the token; with the key, the agent lists and calls the
tool. The tool chart's sidecar mounts the token from the registry's Secret
(``toolmesh-sidecar.registrationToken.registrySecret``: the registry's
address is a loopback one, which names no Service); podman plays each file
on its own, so that Secret is played again with the tool's objects. The
sidecar listens on the node's loopback, which its binary allows without
configuration (a sidecar beyond loopback is refused by the binaries of this
tree unless given an execute token or ``--insecure``, until the per-call
grants make every ``Execute`` authenticated). The registry's audit log
(``config.auditLog: "-"``) is checked for the agent's call.

podman 4.3's ``kube down`` stops a pod with no grace period (SIGTERM, then
SIGKILL at once) and runs no ``preStop`` hook; so the stop is tested twice:
as Kubernetes stops a pod (the sidecar's ``preStop`` command, taken from
the rendered chart, run with ``podman exec``, then ``kube down``), and as a
killed pod (``kube down`` alone; the registry's short lease, 2 s in the
kube-play values, removes it).

Every podman call has a timeout and the test a time limit; every pod,
container and ConfigMap volume named with the test's prefix is removed
afterwards, also on failure.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import yaml

from chartlib import KUBE_PLAY_VALUES, Rendered, load_values, merged, prepared, render, without_origin
from conftest import SESSION_PREFIX, GrpcError, free_ports, logs, podman, removed_after, wait_until

pytestmark = pytest.mark.timeout(300, func_only=True)

#: What `podman kube play` runs; other kinds are left out.
PLAYED_KINDS = {"Pod", "Deployment", "ConfigMap", "Secret"}

#: How soon a stopped tool must leave ListTools.
LEAVES_WITHIN = 5.0


def for_podman(objects: list[dict[str, Any]]) -> str:
    """The objects podman kube play can run, as one YAML stream (see the
    module's docstring for what is changed and why)."""
    docs = []
    for obj in objects:
        if obj["kind"] not in PLAYED_KINDS:
            continue
        obj = json.loads(json.dumps(without_origin(obj)))  # a deep copy
        if obj["kind"] == "Secret":
            data = {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}
            data.update(obj.get("stringData") or {})
            obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"], "data": data}
        pod = obj["spec"]["template"]["spec"] if obj["kind"] == "Deployment" else obj.get("spec")
        if pod:
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                container.pop("ports", None)
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    container.pop(probe, None)
            for volume in pod.get("volumes", []):
                if "secret" in volume:
                    source = volume.pop("secret")
                    volume["configMap"] = {"name": source.pop("secretName"), **source}
        docs.append(obj)
    return yaml.safe_dump_all(docs, sort_keys=False)


def remove_volumes_and_secrets(prefix: str) -> None:
    """podman kube play makes a volume of each ConfigMap (and a podman
    secret of each Secret), named after it, and kube down leaves them:
    remove those named with ``prefix``."""
    assert prefix.startswith("toolmesh-test-")
    for what in ("volume", "secret"):
        names = podman(what, "ls", "--format", "{{.Name}}", check=False).stdout.split()
        names = [n for n in names if n.startswith(prefix)]
        if names:
            podman(what, "rm", *(["--force"] if what == "volume" else []), *names, check=False)


def http_get(url: str, timeout: float = 2) -> tuple[int, str]:
    """The status and body of ``GET url`` (an error status too)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def probe_url(container: dict[str, Any], probe: str) -> str:
    """The URL a rendered container's ``httpGet`` probe asks: its ``host``
    (else 127.0.0.1: host networking puts the pod on the host's loopback),
    its port (a named port resolved through the container's ports), its
    path."""
    handler = container[probe]["httpGet"]
    port = handler["port"]
    if isinstance(port, str):
        port = next(p["containerPort"] for p in container["ports"] if p["name"] == port)
    host = handler.get("host", "127.0.0.1")
    return f"{handler.get('scheme', 'HTTP').lower()}://{host}:{port}{handler.get('path', '/')}"


def probe_status(container: dict[str, Any], probe: str) -> int:
    """What the kubelet would get from a rendered container's ``probe``."""
    return http_get(probe_url(container, probe))[0]


def deployment_pod(rendered: Rendered) -> tuple[str, dict[str, Any]]:
    """The name podman gives the Deployment's (only) pod, and its spec."""
    deployment = rendered.one("Deployment")
    return f"{deployment['metadata']['name']}-pod-0", deployment["spec"]["template"]["spec"]


#: The agent's caller id: the generated API key's (credentials.agent.caller).
AGENT = "agent"


def tools_listed(grpcurl, registry: dict[str, Any]) -> dict[str, int]:
    """Tool name -> live instances, as ListTools says to the agent."""
    answer = grpcurl(registry["address"], "toolmesh.v1.ToolRegistry/ListTools", timeout=5,
                     headers=registry["agent"])
    return {t["descriptor"]["name"]: int(t.get("instances", 0)) for t in answer.get("tools", [])}


class Played:
    """A YAML file played, and `podman kube down` of it."""

    def __init__(self, path: Path, text: str):
        self.path = path
        path.write_text(text)
        self.up = False

    def play(self) -> None:
        self.up = True  # even if it fails halfway
        podman("kube", "play", str(self.path), timeout=120)

    def down(self, check: bool = True) -> None:
        """`podman kube down`; ``check=False`` in cleanups, so that their
        failure never hides the test's (the prefix's removal follows)."""
        if self.up:
            self.up = False
            podman("kube", "down", str(self.path), timeout=120, check=check)


@contextlib.contextmanager
def in_background(function: Callable[[], None]) -> Iterator[concurrent.futures.Future[None]]:
    """Runs ``function`` in a thread while the block runs; waits for it
    (at most 150 s) when the block ends. ``.result()`` re-raises its error."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        future = pool.submit(function)
        try:
            yield future
        finally:
            concurrent.futures.wait([future], timeout=150)


def image_values(image: str) -> dict[str, str]:
    """`repository` and `tag` of an image name, for a chart's values."""
    repository, tag = image.rsplit(":", 1)
    return {"repository": repository, "tag": tag}


@pytest.fixture(scope="module")
def charts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return prepared(tmp_path_factory.mktemp("kube-play-charts"))


@pytest.fixture(scope="module")
def names(podman_env) -> Iterator[str]:  # noqa: ARG001 (CONTAINERS_CONF)
    """This module's name prefix (short: Helm release names are at most 53
    characters); everything named with it is removed afterwards."""
    prefix = f"{SESSION_PREFIX}kp{int(time.time()) % 10000:04d}-"
    try:
        with removed_after(prefix):
            yield prefix
    finally:
        remove_volumes_and_secrets(prefix)


def decoded(secret: dict[str, Any]) -> dict[str, str]:
    """A Secret's data, as text."""
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


@pytest.fixture(scope="module")
def registry(names, images, charts, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The registry chart, rendered with no values but the runtime's, and
    played; its address, the Secret of the credentials it generated (as
    rendered, and decoded) and the agent's header with the generated key."""
    port, admin_port = free_ports(2)
    release = f"{names}reg"
    values = merged(
        load_values(KUBE_PLAY_VALUES / "toolmesh.yaml"),
        {"config": {"port": port}, "admin": {"port": admin_port}, "image": image_values(images.toolmesh)},
    )
    rendered = render(charts["toolmesh"], values, name=release, namespace="default")
    credentials = rendered.one("Secret", f"{release}-credentials")
    generated = decoded(credentials)
    played = Played(tmp_path_factory.mktemp("registry") / "registry.yaml", for_podman(rendered.installed()))
    pod, spec = deployment_pod(rendered)
    container = f"{pod}-{spec['containers'][0]['name']}"
    try:
        played.play()
        yield {
            "address": f"127.0.0.1:{port}",
            "container": container,
            "spec": spec["containers"][0],
            "rendered": rendered,
            "values": values,
            "release": release,
            "credentials": credentials,
            "generated": generated,
            "agent": {"authorization": f"Bearer {generated['agent-api-key']}"},
        }
    finally:
        played.down(check=False)


def test_registry_and_tool_on_kube_play(registry, names, images, charts, grpcurl, tmp_path):
    address = registry["address"]
    explain = lambda: "registry logs:\n" + logs(registry["container"])  # noqa: E731
    health = wait_until(
        lambda: grpcurl(address, "grpc.health.v1.Health/Check", {"service": ""}, timeout=3),
        timeout=30,
        what=f"the registry's health on {address}",
        explain=explain,
    )
    assert health == {"status": "SERVING"}
    # The chart's probes, asked as the kubelet would: started, alive, ready.
    registry_spec = registry["spec"]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        wait_until(lambda probe=probe: probe_status(registry_spec, probe) == 200, timeout=10,
                   what=f"the registry's {probe} ({probe_url(registry_spec, probe)}) answering 200", explain=explain)
    metrics_url = probe_url(registry_spec, "livenessProbe").rsplit("/", 1)[0] + "/metrics"
    status, metrics = http_get(metrics_url)
    assert status == 200 and "toolmesh_build_info" in metrics, f"{metrics_url}: {status}\n{metrics[:2000]}"
    # Authenticated with the chart's defaults: the generated key lists the
    # (empty) catalog; without it, or with another, agents get nothing, and
    # nothing registers without the generated token.
    assert tools_listed(grpcurl, registry) == {}
    for headers in (None, {"authorization": "Bearer " + "0" * 48}):
        with pytest.raises(GrpcError) as refused:
            grpcurl(address, "toolmesh.v1.ToolRegistry/ListTools", headers=headers)
        assert refused.value.code == "Unauthenticated", refused.value
    intruder = {"instance_id": "intruder", "endpoint": "http://127.0.0.1:9",
                "tools": [{"name": "lookup", "description": "not the inventory", "input_schema_json": "{}"}]}
    for headers in (None, registry["agent"]):
        with pytest.raises(GrpcError) as refused:
            grpcurl(address, "toolmesh.v1.Registration/Announce", intruder, headers=headers)
        assert refused.value.code == "Unauthenticated", refused.value

    # The example tool chart: the inventory service and its sidecar.
    sidecar_port, inventory_port, sidecar_admin_port = free_ports(3)
    values = merged(
        load_values(KUBE_PLAY_VALUES / "inventory-tool.yaml"),
        {
            "port": inventory_port,
            "toolmesh-sidecar": {
                "port": sidecar_port,
                "admin": {"port": sidecar_admin_port},
                "registry": address,
                "advertise": f"http://127.0.0.1:{sidecar_port}",
                "image": image_values(images.toolmesh),
            },
            "image": image_values(images.inventory),
        },
    )
    release = f"{names}inv"
    # The registry's address is a loopback one: name its chart's Secret.
    values = merged(values, {"toolmesh-sidecar": {
        "registrationToken": {"registrySecret": registry["credentials"]["metadata"]["name"]}}})
    rendered = render(charts["inventory-tool"], values, name=release, namespace="default")
    pod, spec = deployment_pod(rendered)
    sidecar = next(c for c in spec["containers"] if c["name"] == "toolmesh-sidecar")
    sidecar_container = f"{pod}-toolmesh-sidecar"
    assert "TOOLMESH_EXECUTE_TOKEN_FILE" not in {e["name"] for e in sidecar["env"]}
    # The registry's Secret of generated credentials, as the registry chart
    # rendered it, beside the tool's objects (podman plays a file on its own).
    tool = Played(tmp_path / "tool.yaml", for_podman([registry["credentials"], *rendered.installed()]))

    def explain_tool() -> str:
        return "\n".join(
            [f"{c} logs:\n{logs(c)}" for c in (f"{pod}-inventory", sidecar_container)] + [explain()]
        )

    try:
        # 1. It announces; an agent lists it and invokes it through the registry.
        tool.play()
        wait_until(
            lambda: tools_listed(grpcurl, registry).get("lookup", 0) >= 1,
            timeout=30,
            what="lookup in ListTools",
            explain=explain_tool,
        )
        answer = grpcurl(
            address,
            "toolmesh.v1.ToolRegistry/Invoke",
            {"tool": "lookup", "arguments_json": json.dumps({"key": "widget"})},
            headers=registry["agent"],
        )
        assert json.loads(answer["resultJson"]) == {"key": "widget", "quantity": 42}, answer
        assert not answer.get("isError"), answer
        assert answer["instanceId"] == pod, "the instance id is the pod's name"
        with pytest.raises(GrpcError) as refused:
            grpcurl(address, "toolmesh.v1.ToolRegistry/Invoke", {"tool": "lookup", "arguments_json": "{}"},
                    headers=registry["agent"])
        assert refused.value.code == "InvalidArgument", "the registry validates against the chart's schema"
        # The sidecar's probes, asked as the kubelet would: registered, so
        # ready; alive. Its metrics count the call.
        for probe in ("livenessProbe", "readinessProbe"):
            wait_until(lambda probe=probe: probe_status(sidecar, probe) == 200, timeout=10,
                       what=f"the sidecar's {probe} ({probe_url(sidecar, probe)}) answering 200", explain=explain_tool)
        sidecar_metrics = probe_url(sidecar, "livenessProbe").rsplit("/", 1)[0] + "/metrics"
        status, metrics = http_get(sidecar_metrics)
        assert status == 200 and "toolmesh_sidecar_build_info" in metrics, f"{sidecar_metrics}: {status}\n{metrics[:2000]}"
        # Without the API key, or with another, the agent gets nothing.
        for headers in (None, {"authorization": "Bearer " + "0" * 64}):
            with pytest.raises(GrpcError) as refused:
                grpcurl(address, "toolmesh.v1.ToolRegistry/Invoke",
                        {"tool": "lookup", "arguments_json": json.dumps({"key": "widget"})}, headers=headers)
            assert refused.value.code == "Unauthenticated", refused.value
        # The audit log (standard output) names the agent's call.
        wait_until(
            lambda: any(
                '"kind":"invoke"' in line and f'"caller":"{AGENT}"' in line and '"outcome":"ok"' in line
                for line in logs(registry["container"], tail=200).splitlines()
            ),
            timeout=10,
            what="the agent's call in the registry's audit log",
            explain=explain,
        )

        # 2. Stopped as Kubernetes stops it: the preStop hook the chart
        # renders, then the pod's end (kube down).
        pre_stop = sidecar["lifecycle"]["preStop"]["exec"]["command"]
        started = time.monotonic()
        hook = podman("exec", sidecar_container, *pre_stop, timeout=15, check=False)
        assert hook.returncode == 0, f"preStop {pre_stop} exited {hook.returncode}: {hook.stderr}\n{explain_tool()}"
        wait_until(
            lambda: "lookup" not in tools_listed(grpcurl, registry),
            timeout=LEAVES_WITHIN - (time.monotonic() - started),
            what="lookup leaving ListTools after the preStop hook",
            explain=explain_tool,
        )
        graceful = time.monotonic() - started
        tool.down()
        assert "lookup" not in tools_listed(grpcurl, registry)

        # 3. Stopped as podman 4.3's kube down alone does: killed at once.
        remove_volumes_and_secrets(f"{names}inv")
        tool.play()
        wait_until(
            lambda: tools_listed(grpcurl, registry).get("lookup", 0) >= 1,
            timeout=30,
            what="lookup back in ListTools",
            explain=explain_tool,
        )
        # kube down takes seconds to remove the pod once it killed it:
        # ListTools is watched meanwhile, from kube down's start.
        started = time.monotonic()
        with in_background(tool.down) as down:
            wait_until(
                lambda: "lookup" not in tools_listed(grpcurl, registry),
                timeout=LEAVES_WITHIN,
                what="lookup leaving ListTools after kube down",
                explain=explain,
            )
            killed = time.monotonic() - started
        down.result()
        assert killed < LEAVES_WITHIN
        print(f"lookup left ListTools {graceful:.1f} s after its preStop hook started, "
              f"{killed:.1f} s after a bare kube down")
    finally:
        tool.down(check=False)


def test_helm_test_pod_passes(registry, names, tmp_path):
    """The chart's `helm test` hook, played as a pod: it checks the
    registry's health and exits 0."""
    address = registry["address"]
    wait_until(lambda: registry_answers(address), timeout=30, what=f"the registry on {address}")
    [hook] = registry["rendered"].hooks()
    played = Played(tmp_path / "helm-test.yaml", for_podman([hook]))
    container = f"{hook['metadata']['name']}-{hook['spec']['containers'][0]['name']}"
    try:
        played.play()
        waited = podman("wait", container, timeout=60, check=False)
        output = logs(container)
        code = waited.stdout.strip()
        assert code == "0", f"the helm test pod exited {code}:\n{output}"
        assert ": SERVING (" in output, output
    finally:
        played.down(check=False)


def registry_answers(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False
