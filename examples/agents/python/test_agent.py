"""Runs the Python agent against the real toolmesh-registry and toolmesh-sidecar.

The binaries come from $TOOLMESH_BIN_DIR (default: ../../../target/debug).
Run: ./generate.sh && python3 -m pytest -q test_agent.py
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from agent import (
    RateLimited,
    ToolArgumentError,
    ToolFailed,
    ToolmeshClient,
    ToolNotFound,
    ToolTimeout,
    ToolUnavailable,
)

HERE = Path(__file__).resolve().parent
BIN_DIR = Path(os.environ.get("TOOLMESH_BIN_DIR") or HERE / "../../../target/debug").resolve()
WORD_COUNT = (HERE / "../testdata/word_count.py").resolve()
TOOLS = {"word_count", "always_fails", "slow"}
STARTUP_TIMEOUT = 20.0

SIDECAR_YAML = f"""\
tools:
  - name: word_count
    description: Count the words in a text
    arguments:
      - {{name: text, type: string, description: The text, required: true}}
    rate_limit: {{rate: 1, burst: 3}}
    timeout: 2s
    idempotent: true
    backend:
      command: ["{sys.executable}", "{WORD_COUNT}"]
  - name: always_fails
    description: A tool that always fails
    timeout: 2s
    backend:
      command: ["sh", "-c", "echo boom >&2; exit 1"]
  - name: slow
    description: A tool slower than its timeout
    timeout: 500ms
    backend:
      command: ["sleep", "10"]
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, a bounded wait, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


class Mesh:
    """A registry and one sidecar on ephemeral loopback ports."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.registry_addr = ""
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        for binary in ("toolmesh-registry", "toolmesh-sidecar"):
            if not (BIN_DIR / binary).is_file():
                pytest.fail(f"{BIN_DIR / binary} missing: run cargo build --workspace --bins")
        self.registry_addr = f"127.0.0.1:{free_port()}"
        sidecar_addr = f"127.0.0.1:{free_port()}"
        config = self.workdir / "sidecar.yaml"
        config.write_text(SIDECAR_YAML)
        self._spawn(
            "registry",
            [str(BIN_DIR / "toolmesh-registry"), "--listen", self.registry_addr, "--lease-ttl", "3s"],
        )
        self._spawn(
            "sidecar",
            [
                str(BIN_DIR / "toolmesh-sidecar"),
                "--config", str(config),
                "--registry", f"http://{self.registry_addr}",
                "--listen", sidecar_addr,
            ],
        )

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        self.procs.append((name, proc))

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} (exit {proc.poll()}) ---\n{(self.workdir / f'{name}.log').read_text(errors='replace')}"
            for name, proc in self.procs
        )

    def wait_for_tools(self, client: ToolmeshClient, names: set[str]) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        seen: set[str] = set()
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited early\n{self.logs()}")
            try:
                seen = {t.name for t in client.list_tools(timeout=1)}
            except Exception:
                seen = set()
            if names <= seen:
                return
            time.sleep(0.1)
        pytest.fail(f"tools {sorted(names - seen)} did not appear in {STARTUP_TIMEOUT}s\n{self.logs()}")

    def stop(self) -> None:
        # The sidecar first, so it withdraws while the registry still listens.
        for _, proc in reversed(self.procs):
            stop(proc)


@pytest.fixture(scope="module")
def mesh() -> Iterator[tuple[Mesh, ToolmeshClient]]:
    with tempfile.TemporaryDirectory(prefix="toolmesh-py-agent-") as tmp:
        m = Mesh(Path(tmp))
        client = None
        try:
            m.start()
            client = ToolmeshClient(m.registry_addr, default_timeout=10)
            m.wait_for_tools(client, TOOLS)
            yield m, client
        finally:
            if client is not None:
                client.close()
            m.stop()


@pytest.fixture
def client(mesh: tuple[Mesh, ToolmeshClient]) -> ToolmeshClient:
    return mesh[1]


def invoke_waiting(client: ToolmeshClient, name: str, args: dict) -> object:
    """Invoke, sleeping out rate limits (what a polite agent does)."""
    for _ in range(10):
        try:
            return client.invoke(name, args)
        except RateLimited as err:
            time.sleep(err.retry_after or 1.0)
    raise AssertionError("still rate limited after 10 attempts")


def test_list_tools_has_schemas(client: ToolmeshClient) -> None:
    tools = {t.name: t for t in client.list_tools()}
    assert TOOLS <= tools.keys()
    wc = tools["word_count"]
    assert wc.description == "Count the words in a text"
    assert wc.input_schema["type"] == "object"
    assert wc.input_schema["properties"]["text"]["type"] == "string"
    assert wc.input_schema["required"] == ["text"]
    assert wc.rate == 1 and wc.burst == 3
    assert wc.timeout == 2.0
    assert wc.idempotent
    assert wc.instances == 1
    assert client.get_tool("word_count").name == "word_count"


def test_openai_rendering(client: ToolmeshClient) -> None:
    rendered = {t["function"]["name"]: t for t in client.as_openai_tools()}
    wc = rendered["word_count"]
    assert wc["type"] == "function"
    assert set(wc["function"]) == {"name", "description", "parameters"}
    assert wc["function"]["description"] == "Count the words in a text"
    assert wc["function"]["parameters"]["properties"]["text"]["type"] == "string"
    assert rendered["always_fails"]["function"]["parameters"]["type"] == "object"


def test_invoke_ok(client: ToolmeshClient) -> None:
    assert invoke_waiting(client, "word_count", {"text": "the quick brown fox"}) == {"words": 4}


def test_invalid_argument(client: ToolmeshClient) -> None:
    with pytest.raises(ToolArgumentError) as info:
        client.invoke("word_count", {"text": 42})
    paths = [path for path, _ in info.value.violations]
    assert "/text" in paths, info.value.violations
    assert info.value.code.name == "INVALID_ARGUMENT"


def test_not_found(client: ToolmeshClient) -> None:
    with pytest.raises(ToolNotFound) as info:
        client.invoke("no_such_tool", {})
    assert info.value.tool == "no_such_tool"
    with pytest.raises(ToolNotFound):
        client.get_tool("no_such_tool")


def test_tool_failed(client: ToolmeshClient) -> None:
    with pytest.raises(ToolFailed) as info:
        client.invoke("always_fails", {})
    assert "boom" in info.value.message


def test_tool_timeout(client: ToolmeshClient) -> None:
    started = time.monotonic()
    with pytest.raises(ToolTimeout):
        client.invoke("slow", {})
    assert time.monotonic() - started < 5


def test_rate_limited(client: ToolmeshClient) -> None:
    # rate 1/s, burst 3: a burst of calls must run out of tokens.
    with pytest.raises(RateLimited) as info:
        for _ in range(20):
            client.invoke("word_count", {"text": "hammer"})
    err = info.value
    assert err.retry_after is not None and 0 < err.retry_after <= 1.5, err.retry_after
    assert err.code.name == "RESOURCE_EXHAUSTED"


def test_unreachable_registry() -> None:
    with ToolmeshClient(f"127.0.0.1:{free_port()}") as nowhere:
        with pytest.raises(ToolUnavailable):
            nowhere.list_tools(timeout=2)
