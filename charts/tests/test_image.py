"""The toolmesh image, built with podman and run by it on this machine.

The images come from scripts/image.sh (the ``images`` fixture, once per
session). Every container runs with host networking on loopback ports and
the restrictions of Kubernetes' "restricted" pod security that a plain
runtime can apply (read-only root filesystem, no capabilities, no privilege
escalation), so a chart that sets them runs what was tested here. gRPC calls
go through grpcurl, by the registry's reflection.

Every podman call has a timeout, each test a time limit, and every container
is removed afterwards, also on failure.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from conftest import REPO, SESSION_PREFIX, free_ports, logs, removed_after, wait_until

# Each test's own run; the session's image build (minutes when cold) has
# its own limit in the `images` fixture.
pytestmark = pytest.mark.timeout(120, func_only=True)

CARGO_TOML = tomllib.loads((REPO / "Cargo.toml").read_text())
WORKSPACE = CARGO_TOML["workspace"]["package"]
WORKSPACE_VERSION = WORKSPACE["version"]

#: What Kubernetes' restricted security context does, as podman flags.
RESTRICTED = ["--read-only", "--read-only-tmpfs=false", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges"]
#: Host networking, and the restrictions.
RUN = ["--network", "host", *RESTRICTED]

REGISTRY = "/usr/local/bin/toolmesh-registry"
SIDECAR = "/usr/local/bin/toolmesh-sidecar"
INVENTORY = "/usr/local/bin/inventory-service"

#: The image's user: distroless' "nonroot".
NONROOT = "65532"


# --- what the image is ------------------------------------------------------


def inspect(podman, image: str) -> dict:
    return json.loads(podman("image", "inspect", image).stdout)[0]


def test_image_config(podman, images):
    config = inspect(podman, images.toolmesh)["Config"]
    assert config["User"] == f"{NONROOT}:{NONROOT}"
    assert config["Entrypoint"] == [REGISTRY]
    assert not config.get("Cmd")
    assert "50051/tcp" in config["ExposedPorts"]
    assert "TOOLMESH_LISTEN=0.0.0.0:50051" in config["Env"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "toolmesh"
    assert labels["org.opencontainers.image.version"] == WORKSPACE_VERSION
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"] == WORKSPACE["repository"]
    assert labels["org.opencontainers.image.description"]
    if (REPO / ".git").exists():
        assert labels["org.opencontainers.image.revision"] != "unknown"

    inventory = inspect(podman, images.inventory)["Config"]
    assert inventory["User"] == f"{NONROOT}:{NONROOT}"
    assert inventory["Entrypoint"] == [INVENTORY]
    assert inventory["Labels"]["org.opencontainers.image.version"] == WORKSPACE_VERSION
    assert inventory["Labels"]["org.opencontainers.image.source"] == WORKSPACE["repository"]


@pytest.mark.parametrize("containerfile", ["Dockerfile", "examples/Containerfile.inventory"])
def test_containerfile_defaults_are_the_workspace_s(containerfile):
    # A plain `podman build .` (no --build-arg) labels the image with them.
    text = (REPO / containerfile).read_text()
    assert f"ARG VERSION={WORKSPACE_VERSION}\n" in text, (
        f"{containerfile}: `ARG VERSION=` must be the workspace's version, {WORKSPACE_VERSION}"
    )
    assert f'org.opencontainers.image.source="{WORKSPACE["repository"]}"' in text
    # A plain `podman build .` finds the binaries where scripts/image.sh's
    # default profile and the README's build by hand leave them.
    profile = default_image_profile()
    assert f"ARG BIN_DIR=target/static/x86_64-unknown-linux-gnu/{profile}\n" in text, (
        f"{containerfile}: `ARG BIN_DIR=` must be the folder of scripts/image.sh's default profile, {profile}"
    )
    readme = (REPO / "README.md").read_text()
    assert f"cargo build --profile {profile} --locked --target x86_64-unknown-linux-gnu" in readme


def default_image_profile() -> str:
    """The cargo profile scripts/image.sh builds without --profile."""
    [line] = [
        line for line in (REPO / "scripts" / "image.sh").read_text().splitlines()
        if line.startswith("profile=${TOOLMESH_IMAGE_PROFILE:-")
    ]
    profile = line.removeprefix("profile=${TOOLMESH_IMAGE_PROFILE:-").removesuffix("}")
    assert profile in {"release", *CARGO_TOML["profile"]}, profile
    return profile


def test_image_script_refuses_an_unknown_profile():
    env = {k: v for k, v in os.environ.items() if k != "TOOLMESH_IMAGE_PROFILE"}
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "image.sh"), "--profile", "debug"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env,
    )
    assert result.returncode == 2, result
    assert "--profile must be release, dist or suite, not debug" in result.stderr


def is_static_elf(data: bytes) -> bool:
    """An x86-64 ELF executable with no PT_INTERP (no dynamic loader)."""
    assert data[:4] == b"\x7fELF" and data[4] == 2, "not a 64-bit ELF file"
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return 3 not in types  # PT_INTERP


# The bounds catch what should never be there (debug info, a libc, a
# second copy of a binary), with room to grow: the registry carries the
# embedding model's runtime (then candle, gemm, tokenizers) for --search-model
# since the image measured 62.6 MB, past the 60 MB bound of before.
@pytest.mark.parametrize(
    ("which", "binaries", "max_mb"),
    [
        ("toolmesh", {"usr/local/bin/toolmesh-registry", "usr/local/bin/toolmesh-sidecar"}, 70),
        ("inventory", {"usr/local/bin/inventory-service"}, 15),
    ],
)
def test_image_holds_only_static_binaries(podman, images, which, binaries, max_mb):
    image = getattr(images, which)
    root = Path(podman("image", "mount", image).stdout.strip())
    try:
        files = {}
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                path = Path(dirpath, name)
                files[str(path.relative_to(root))] = path
        # Nothing but the binaries: no shell, no libraries, no /etc.
        assert set(files) == binaries
        for rel, path in files.items():
            assert is_static_elf(path.read_bytes()), f"{rel} is dynamically linked"
            mode = path.stat().st_mode
            assert path.stat().st_uid == 0 and not mode & 0o022, (
                f"{rel}: the user must not be able to change it (owner root, mode {oct(mode)})"
            )
    finally:
        podman("image", "unmount", image, check=False)
    size = inspect(podman, image)["Size"]
    assert size < max_mb * 1e6, f"{image} is {size / 1e6:.1f} MB, more than {max_mb} MB"


def test_no_shell(podman, images, prefix):
    result = podman("run", "--rm", "--name", f"{prefix}sh", *RUN, "--entrypoint", "/bin/sh",
                    images.toolmesh, "-c", "true", check=False)
    assert result.returncode != 0
    assert "/bin/sh" in result.stderr


def test_version_and_help(podman, images, prefix):
    runs = iter(range(10))

    def run(image: str, *args: str, entrypoint: str | None = None) -> str:
        # Named, so that a run podman gave up on is removed with the prefix.
        flags = ["--entrypoint", entrypoint] if entrypoint else []
        name = f"{prefix}{next(runs)}"
        return podman("run", "--rm", "--name", name, *RUN, *flags, image, *args).stdout.strip()

    assert run(images.toolmesh, "--version") == f"toolmesh-registry {WORKSPACE_VERSION}"
    help_ = run(images.toolmesh, "--help")
    for flag in ("--listen", "--redis", "--shutdown-delay", "--lease-ttl"):
        assert flag in help_
    sidecar = run(images.toolmesh, "--version", entrypoint=SIDECAR)
    assert sidecar == f"toolmesh-sidecar {WORKSPACE_VERSION}"
    assert run(images.inventory, "--version") == f"inventory-service {WORKSPACE_VERSION}"


# --- what it does -----------------------------------------------------------


def start(podman, name: str, image: str, *args: str, entrypoint: str | None = None,
          extra: tuple[str, ...] = ()) -> str:
    """Starts a detached container (not removed on exit, so its exit code
    and logs stay readable; the name's prefix removes it)."""
    flags = ["--entrypoint", entrypoint] if entrypoint else []
    podman("run", "--detach", "--name", name, *RUN, *extra, *flags, image, *args)
    return name


def serving(grpcurl, addr: str) -> bool:
    return grpcurl(addr, "grpc.health.v1.Health/Check", timeout=2).get("status") == "SERVING"


def uids(podman, name: str) -> tuple[list[str], list[str]]:
    """The container's process uids and gids (real, effective, saved, fs),
    as the host's /proc shows them."""
    pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return fields["Uid"].split(), fields["Gid"].split()


@pytest.fixture(scope="module")
def registry(podman, images, grpcurl):
    """A registry started from the image (one per module): its address."""
    with removed_after(f"{SESSION_PREFIX}image-registry-") as prefix:
        port, = free_ports(1)
        name = start(podman, f"{prefix}0", images.toolmesh, "--listen", f"127.0.0.1:{port}")
        addr = f"127.0.0.1:{port}"
        wait_until(lambda: serving(grpcurl, addr), 20, f"registry {name} SERVING",
                   explain=lambda: logs(name))
        yield addr, name


def test_registry_answers_health_as_nonroot(podman, registry, grpcurl):
    addr, name = registry
    assert grpcurl(addr, "grpc.health.v1.Health/Check") == {"status": "SERVING"}
    # Reflection too: grpcurl lists the services with no .proto file.
    assert "toolmesh.v1.ToolRegistry" in grpcurl.services(addr)
    uid, gid = uids(podman, name)
    assert uid == [NONROOT] * 4 and gid == [NONROOT] * 4


def test_invoke_reaches_a_tool_in_another_container(podman, images, registry, grpcurl,
                                                    prefix, tmp_path):
    """inventory-service in one container, a sidecar from the toolmesh image
    in another, wrapping it as the `lookup` tool; the agent (grpcurl, on the
    host) calls it through the registry's container. Host names given with
    --add-host check that the static binaries resolve names (/etc/hosts)."""
    registry_addr, _ = registry
    registry_port = registry_addr.rsplit(":", 1)[1]
    inventory_port, sidecar_port = free_ports(2)
    hosts = ("--add-host", "registry.toolmesh.test:127.0.0.1",
             "--add-host", "inventory.toolmesh.test:127.0.0.1")

    inventory = start(podman, f"{prefix}inventory", images.inventory,
                      "--listen", f"127.0.0.1:{inventory_port}")

    config = tmp_path / "sidecar.yaml"
    config.write_text(f"""\
tools:
  - name: lookup
    description: Look up how many items of a product are in stock, by product key.
    input_schema:
      type: object
      properties:
        key: {{type: string, minLength: 1}}
      required: [key]
      additionalProperties: false
    timeout: 2s
    idempotent: true
    backend:
      http:
        url: http://inventory.toolmesh.test:{inventory_port}/lookup
""")
    config.chmod(0o644)  # the sidecar reads it as uid 65532
    instance = f"{prefix}sidecar"
    sidecar = start(
        podman, instance, images.toolmesh,
        "--config", "/etc/toolmesh/sidecar.yaml",
        "--registry", f"http://registry.toolmesh.test:{registry_port}",
        "--listen", f"127.0.0.1:{sidecar_port}",
        "--instance-id", instance,
        entrypoint=SIDECAR,
        extra=(*hosts, "--volume", f"{config}:/etc/toolmesh/sidecar.yaml:ro"),
    )

    def explain() -> str:
        return "\n".join(f"--- {n}:\n{logs(n)}" for n in (sidecar, inventory))

    def lookup_instances() -> int:
        tools = grpcurl(registry_addr, "toolmesh.v1.ToolRegistry/ListTools").get("tools", [])
        return next((t.get("instances", 0) for t in tools
                     if t["descriptor"]["name"] == "lookup"), 0)

    wait_until(lambda: lookup_instances() == 1, 20, "the sidecar announces `lookup`",
               explain=explain)

    answer = grpcurl(registry_addr, "toolmesh.v1.ToolRegistry/Invoke",
                     {"tool": "lookup", "arguments_json": json.dumps({"key": "widget"})})
    assert json.loads(answer["resultJson"]) == {"key": "widget", "quantity": 42}, explain()
    assert answer["instanceId"] == instance
    assert not answer.get("isError")

    # The inventory's 404 comes back as the tool's error, for the LLM.
    missing = grpcurl(registry_addr, "toolmesh.v1.ToolRegistry/Invoke",
                      {"tool": "lookup", "arguments_json": json.dumps({"key": "nope"})})
    assert missing.get("isError") is True
    assert "widget" in json.dumps(missing)

    # SIGTERM to the sidecar (PID 1 in its container) withdraws the tool.
    stopped = time.monotonic()
    podman("stop", "--time", "10", sidecar, timeout=30)
    assert time.monotonic() - stopped < 5, "the sidecar did not stop on SIGTERM"
    assert podman("inspect", "--format", "{{.State.ExitCode}}", sidecar).stdout.strip() == "0", explain()
    wait_until(lambda: lookup_instances() == 0, 5, "`lookup` leaves ListTools", explain=explain)


def test_registry_stops_gracefully_on_sigterm(podman, images, grpcurl, prefix):
    port, = free_ports(1)
    addr = f"127.0.0.1:{port}"
    name = start(podman, f"{prefix}registry", images.toolmesh, "--listen", addr)
    wait_until(lambda: serving(grpcurl, addr), 20, "registry SERVING", explain=lambda: logs(name))
    stopped = time.monotonic()
    podman("stop", "--time", "10", name, timeout=30)
    # Within the grace period, not killed when `--time` ran out.
    assert time.monotonic() - stopped < 5
    assert podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0", logs(name)


def test_registry_refuses_to_listen_open_by_default(podman, images, prefix):
    """The image listens on 0.0.0.0 (TOOLMESH_LISTEN): with agents and
    registration unauthenticated the registry refuses to start, unless
    --insecure (TOOLMESH_INSECURE), which it warns about. The chart's
    `insecure` value sets that variable."""
    port, = free_ports(1)
    refused = podman("run", "--rm", "--name", f"{prefix}open", *RUN, "--env", f"TOOLMESH_LISTEN=0.0.0.0:{port}",
                     images.toolmesh, check=False, timeout=30)
    assert refused.returncode != 0
    assert "beyond loopback" in refused.stderr + refused.stdout and "--insecure" in refused.stderr + refused.stdout
    name = start(podman, f"{prefix}insecure", images.toolmesh,
                 extra=("--env", f"TOOLMESH_LISTEN=0.0.0.0:{port}", "--env", "TOOLMESH_INSECURE=true"))
    wait_until(lambda: "--insecure" in logs(name), 20, "the registry's warning", explain=lambda: logs(name))
    assert podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip() == "true", logs(name)
