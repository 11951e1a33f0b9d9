"""The docs' blocks that need the Python agent, run as written.

Every block marked `<!-- test: examples/agents/python/test_docs.py -->` in
docs/tools-in-any-language.md and docs/observability.md (the Rust test
examples/tests/docs.rs holds each runnable block of those docs to a
marker):

- the guide's shell session: the registry and the sidecar it starts in the
  background, then each agent command, which must print the `# ` lines
  under it;
- observability's `stub.Invoke(request, metadata=[("traceparent", ...)])`,
  given a stub and a request: the registry's call line names that trace.

The commands run from the repository root as written, `target/debug/`
read as $TOOLMESH_BIN_DIR; their ports come from the environment
(TOOLMESH_LISTEN, TOOLMESH_SIDECAR_LISTEN, TOOLMESH_REGISTRY), so the
session runs beside anything on the default ones.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from agent import ToolmeshClient
from test_agent import BIN_DIR, STARTUP_TIMEOUT, free_port, stop
from toolmesh.v1 import toolmesh_pb2, toolmesh_pb2_grpc

REPO = Path(__file__).resolve().parents[3]
MARKER = "<!-- test: examples/agents/python/test_docs.py -->"
GUIDE = "docs/tools-in-any-language.md"
OBSERVABILITY = "docs/observability.md"


def marked_blocks(doc: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block of `doc` under this file's marker."""
    lines = (REPO / doc).read_text().splitlines()
    found = []
    for n, line in enumerate(lines):
        if line.startswith("```") and n > 0 and lines[n - 1].strip() == MARKER:
            end = next(i for i in range(n + 1, len(lines)) if lines[i].startswith("```"))
            found.append((line[3:].strip(), "".join(f"{body}\n" for body in lines[n + 1 : end])))
    return found


@dataclass
class Command:
    line: str
    expected: list[str] = field(default_factory=list)


def session(block: str) -> tuple[list[str], list[Command]]:
    """The background servers (`... &`) and the commands, each with the
    `# ` lines under it, of a shell block."""
    servers: list[str] = []
    commands: list[Command] = []
    for line in block.splitlines():
        if line.startswith("# "):
            commands[-1].expected.append(line[2:])
        elif line.endswith(" &"):
            servers.append(line[:-2])
        elif line.strip():
            commands.append(Command(line))
    return servers, commands


@dataclass
class Session:
    env: dict[str, str]
    registry: str
    commands: list[Command]
    log: Path


@pytest.fixture(scope="module")
def guide() -> Iterator[Session]:
    [(language, block)] = marked_blocks(GUIDE)
    assert language == "sh"
    servers, commands = session(block)
    assert [s.split()[0] for s in servers] == ["target/debug/toolmesh-registry", "target/debug/toolmesh-sidecar"]
    registry = f"127.0.0.1:{free_port()}"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TOOLMESH_LISTEN": registry,
        "TOOLMESH_SIDECAR_LISTEN": f"127.0.0.1:{free_port()}",
        "TOOLMESH_REGISTRY": registry,
        "NO_COLOR": "1",
    }
    env.pop("RUST_LOG", None)
    with tempfile.TemporaryDirectory(prefix="toolmesh-docs-") as tmp:
        procs = []
        try:
            for n, server in enumerate(servers):
                with open(Path(tmp) / f"server-{n}.log", "wb") as log:
                    command = server.replace("target/debug/", f"{BIN_DIR}/", 1)
                    procs.append(subprocess.Popen(["sh", "-c", f"exec {command}"], cwd=REPO, env=env,
                                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT))
            logs = lambda: "\n".join((Path(tmp) / f"server-{n}.log").read_text() for n in range(len(procs)))
            client = ToolmeshClient(registry, default_timeout=10)
            deadline = time.monotonic() + STARTUP_TIMEOUT
            while "word_stats" not in {t.name for t in listed(client)}:
                assert time.monotonic() < deadline, f"no word_stats after {STARTUP_TIMEOUT}s:\n{logs()}"
                assert all(p.poll() is None for p in procs), f"a server exited:\n{logs()}"
                time.sleep(0.1)
            client.close()
            yield Session(env, registry, commands, Path(tmp) / "server-0.log")
        finally:
            for proc in reversed(procs):
                stop(proc)


def listed(client: ToolmeshClient) -> list:
    try:
        return client.list_tools(timeout=1)
    except Exception:
        return []


def test_the_guides_session_prints_what_it_shows(guide: Session) -> None:
    assert len(guide.commands) == 2, guide.commands
    for command in guide.commands:
        done = subprocess.run(["sh", "-c", command.line], cwd=REPO, env=guide.env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
        assert done.stdout.splitlines() == command.expected, command.line


def test_a_traceparent_by_hand_reaches_the_registry(guide: Session) -> None:
    [(language, block)] = marked_blocks(OBSERVABILITY)
    assert language == "python"
    trace = re.search(r'"00-([0-9a-f]{32})-[0-9a-f]{16}-01"', block).group(1)
    with grpc.insecure_channel(guide.registry) as channel:
        stub = toolmesh_pb2_grpc.ToolRegistryStub(channel)
        request = toolmesh_pb2.InvokeRequest(tool="word_stats", arguments_json='{"text": "traced words"}')
        exec(block, {"stub": stub, "request": request})
    # Tracing is off: the call line names the agent's trace, once.
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        calls = [line for line in guide.log.read_text().splitlines() if f'trace_id="{trace}"' in line]
        if calls or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert len(calls) == 1, guide.log.read_text()
    assert 'call tool="word_stats" outcome=ok' in calls[0], calls[0]
    assert calls[0].count("trace_id=") == 1, calls[0]
