"""Runs the Python agent against the real toolmesh-registry and toolmesh-sidecar.

The binaries come from $TOOLMESH_BIN_DIR (default: ../../../target/debug).
Run: ./generate.sh && python3 -m pytest -q test_agent.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Iterator

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from agent import (
    InvalidAddress,
    InvalidCredential,
    RateLimited,
    TaskCancelled,
    TaskNotFound,
    ToolArgumentError,
    ToolChanged,
    ToolFailed,
    ToolmeshClient,
    ToolmeshError,
    ToolNotFound,
    ToolTimeout,
    ToolUnavailable,
    Unauthenticated,
    registry_address,
    registry_target,
    token_from_env,
    _typed_error,
)
from toolmesh.v1 import toolmesh_pb2, toolmesh_pb2_grpc

HERE = Path(__file__).resolve().parent
BIN_DIR = Path(os.environ.get("TOOLMESH_BIN_DIR") or HERE / "../../../target/debug").resolve()
AGENT = HERE / "agent.py"
REPO_PROTO = (HERE / "../../../proto/proto").resolve()
WORD_COUNT = (HERE / "../testdata/word_count.py").resolve()
SLOW_REPORT = (HERE / "../../demo/slow_report.py").resolve()
TOOLS = {"word_count", "always_fails", "slow", "echo", "limited", "slow_report"}
REPORT = {"quarter": "Q3", "report": "all good"}
TASK_WAIT = 60.0
"""Longest a test waits for slow_report's task (5 s of work) on a busy machine."""
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
  - name: echo
    description: Returns its arguments
    timeout: 2s
    backend:
      command: ["cat"]
  - name: limited
    description: Returns its arguments, once per 100 seconds
    rate_limit: {{rate: 0.01, burst: 1}}
    timeout: 2s
    backend:
      command: ["cat"]
  - name: slow_report
    description: Build the quarterly report (5 s; 1 s as a call, 30 s as a task)
    arguments:
      - {{name: quarter, type: string, enum: [Q1, Q2, Q3, Q4], required: true}}
    timeout: 1s
    task_timeout: 30s
    backend:
      command: ["{sys.executable}", "{SLOW_REPORT}"]
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
    """A registry and one sidecar on ephemeral loopback ports.

    `registry_args` are added to the registry's command line (credentials,
    policy, TLS); `sidecar_args` to the sidecar's; `scheme` is how the
    sidecar reaches the registry (https:// when it serves TLS).
    """

    def __init__(
        self,
        workdir: Path,
        yaml: str = SIDECAR_YAML,
        registry_args: list[str] | None = None,
        sidecar_args: list[str] | None = None,
        scheme: str = "http://",
    ) -> None:
        self.workdir = workdir
        self.yaml = yaml
        self.registry_args = registry_args or []
        self.sidecar_args = sidecar_args or []
        self.scheme = scheme
        self.registry_addr = ""
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []

    def start(self) -> None:
        for binary in ("toolmesh-registry", "toolmesh-sidecar"):
            if not (BIN_DIR / binary).is_file():
                pytest.fail(f"{BIN_DIR / binary} missing: run cargo build --workspace --bins")
        self.registry_addr = f"127.0.0.1:{free_port()}"
        sidecar_addr = f"127.0.0.1:{free_port()}"
        config = self.workdir / "sidecar.yaml"
        config.write_text(self.yaml)
        self._spawn(
            "registry",
            [
                str(BIN_DIR / "toolmesh-registry"),
                "--listen", self.registry_addr,
                "--lease-ttl", "3s",
                *self.registry_args,
            ],
        )
        self._spawn(
            "sidecar",
            [
                str(BIN_DIR / "toolmesh-sidecar"),
                "--config", str(config),
                "--registry", f"{self.scheme}{self.registry_addr}",
                "--listen", sidecar_addr,
                *self.sidecar_args,
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
    assert set(wc["function"]) == {"name", "description", "parameters", "strict"}
    assert wc["function"]["strict"] is False
    assert wc["function"]["description"] == "Count the words in a text"
    assert wc["function"]["parameters"]["properties"]["text"]["type"] == "string"
    assert rendered["always_fails"]["function"]["parameters"]["type"] == "object"


def test_export_formats(client: ToolmeshClient) -> None:
    anthropic = client.export_tools("anthropic", names=["word_count"])
    assert [t["name"] for t in anthropic.tools] == ["word_count"]
    assert anthropic.tools[0]["input_schema"]["properties"]["text"]["type"] == "string"
    gemini = client.export_tools("gemini", names=["word_count", "no_such_tool"])
    assert [d["name"] for d in gemini.tools[0]["functionDeclarations"]] == ["word_count"]
    assert ("no_such_tool", True, "no live tool of this name matches the request") in gemini.issues
    mcp = client.export_tools("mcp")
    assert "word_count" in {t["name"] for t in mcp.tools}
    with pytest.raises(ValueError):
        client.export_tools("cohere")


def test_agent_loop_repairs_its_call_from_the_violations(client: ToolmeshClient) -> None:
    import agent_loop

    model = agent_loop.ScriptedModel()
    transcript = agent_loop.run(client, 'How many words are in "the quick brown fox jumps"?', model)
    kinds = [step.kind for step in transcript if step.kind != "limited"]
    assert kinds == ["search", "call", "refused", "call", "result"], transcript
    assert transcript[0].detail[0] == "word_count", transcript[0]
    refused = dict(next(step.detail for step in transcript if step.kind == "refused"))
    assert refused["/input"].startswith('unexpected property "input"'), refused
    assert "/text" in refused, refused
    calls = [step.detail for step in transcript if step.kind == "call"]
    assert calls[0] == ("word_count", {"input": "the quick brown fox jumps"})
    assert calls[-1] == ("word_count", {"text": "the quick brown fox jumps"})
    assert transcript[-1].detail == {"words": 5}


def test_invoke_ok(client: ToolmeshClient) -> None:
    assert invoke_waiting(client, "word_count", {"text": "the quick brown fox"}) == {"words": 4}


def test_invalid_argument(client: ToolmeshClient) -> None:
    with pytest.raises(ToolArgumentError) as info:
        client.invoke("word_count", {"text": 42})
    paths = [path for path, _ in info.value.violations]
    assert "/text" in paths, info.value.violations
    assert info.value.code.name == "INVALID_ARGUMENT"


def test_the_registry_refuses_a_digest_it_did_not_show(client: ToolmeshClient) -> None:
    echo = client.get_tool("echo")
    assert len(echo.digest) == 64 and all(c in "0123456789abcdef" for c in echo.digest), echo.digest
    assert client.invoke("echo", {"a": 1}, tool_digest=echo.digest) == {"a": 1}
    stale = "0" * 64
    with pytest.raises(ToolChanged) as info:
        client.invoke("echo", {"a": 1}, tool_digest=stale)
    assert (info.value.tool, info.value.shown_digest, info.value.live_digest) == ("echo", stale, echo.digest)
    assert info.value.changed, info.value.message
    with pytest.raises(ToolChanged):
        client.start_task("echo", {"a": 1}, tool_digest=stale)
    with pytest.raises(ToolArgumentError) as bad:
        client.invoke("echo", {"a": 1}, tool_digest="not-a-digest")
    assert [path for path, _ in bad.value.violations] == ["tool_digest"], bad.value.violations


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


# --------------------------------------------------------------------------- tasks


def test_a_long_call_times_out_but_completes_as_a_task(client: ToolmeshClient) -> None:
    # slow_report needs 5 s: as a call (timeout 1 s) it is cut off...
    started = time.monotonic()
    with pytest.raises(ToolTimeout):
        client.invoke("slow_report", {"quarter": "Q3"})
    assert time.monotonic() - started < 4.5
    # ...as a task (task_timeout 30 s) it runs to its end, reporting its progress.
    started = time.monotonic()
    task = client.start_task("slow_report", {"quarter": "Q3"})
    assert (task.tool, task.state) == ("slow_report", "WORKING"), task
    seen: list = []
    ended = client.wait_task(task.id, timeout=TASK_WAIT, on_change=seen.append)
    assert ended.state == "COMPLETED", ended
    assert ended.result() == REPORT
    assert time.monotonic() - started >= 4
    progress = [t.progress for t in seen if t.progress is not None]
    assert progress, f"no progress seen in {seen}"
    for report in progress:
        assert report.fraction is not None and 0 <= report.fraction < 1, report
        assert report.message.startswith("counting Q3: step "), report
    assert str(progress[0]).endswith(progress[0].message) and "%" in str(progress[0])
    assert ended.revision > task.revision
    assert client.get_task(task.id).result() == REPORT


def test_a_task_is_cancelled(client: ToolmeshClient) -> None:
    task = client.start_task("slow_report", {"quarter": "Q4"})
    cancelled = client.cancel_task(task.id)
    assert cancelled.state == "CANCELLED", cancelled
    with pytest.raises(TaskCancelled) as info:
        cancelled.result()
    assert info.value.code.name == "CANCELLED"
    assert client.get_task(task.id).state == "CANCELLED"
    # Cancelling a task that is over returns it as it is.
    assert client.cancel_task(task.id).state == "CANCELLED"
    listed, _ = client.list_tasks()
    assert {"id": task.id, "state": "CANCELLED"} in [{"id": t.id, "state": t.state} for t in listed]


def test_a_task_ends_as_invoke_would_have(client: ToolmeshClient) -> None:
    # Refused at the start, as invoke is: no task is made.
    with pytest.raises(ToolArgumentError) as refused:
        client.start_task("slow_report", {"quarter": "Q5"})
    assert "/quarter" in [path for path, _ in refused.value.violations]
    # The tool ran and failed: COMPLETED, its result a ToolFailed.
    failed = client.wait_task(client.start_task("always_fails").id, timeout=TASK_WAIT)
    assert failed.state == "COMPLETED"
    with pytest.raises(ToolFailed, match="boom"):
        failed.result()
    # Past its task timeout (slow has none: its timeout, 500 ms): FAILED, DEADLINE_EXCEEDED.
    late = client.wait_task(client.start_task("slow").id, timeout=TASK_WAIT)
    assert late.state == "FAILED", late
    with pytest.raises(ToolTimeout):
        late.result()


def test_an_unknown_task_is_task_not_found(client: ToolmeshClient) -> None:
    with pytest.raises(TaskNotFound) as info:
        client.get_task("no-such-task")
    assert info.value.task_id == "no-such-task"
    assert info.value.code.name == "NOT_FOUND"
    with pytest.raises(TaskNotFound):
        client.wait_task("no-such-task", timeout=5)


def test_unreachable_registry() -> None:
    with ToolmeshClient(f"127.0.0.1:{free_port()}") as nowhere:
        with pytest.raises(ToolUnavailable):
            nowhere.list_tools(timeout=2)


# --------------------------------------------------------------------------- addresses


def test_registry_takes_host_port_and_http_urls_alike() -> None:
    for given in ["127.0.0.1:50051", "http://127.0.0.1:50051", "http://127.0.0.1:50051/", " 127.0.0.1:50051\n"]:
        assert registry_target(given) == "127.0.0.1:50051", given
        assert not registry_address(given).tls, given
    assert registry_target("registry.svc:7000") == "registry.svc:7000"
    assert registry_target("[::1]:50051") == "[::1]:50051"


def test_https_is_tls() -> None:
    # The same as toolmesh_proto::endpoint: https:// stays https, never plaintext.
    assert registry_address("https://registry.svc:7000/") == registry_address("https://registry.svc:7000")
    address = registry_address("https://registry.svc:7000")
    assert (address.target, address.tls) == ("registry.svc:7000", True)


def test_every_address_mistake_says_what_to_write() -> None:
    # The same table as toolmesh_proto::endpoint's tests.
    for given, problem in [
        ("", "the host is missing"),
        ("http://", "the host is missing"),
        (":50051", "the host is missing"),
        ("127.0.0.1", "the port is missing"),
        ("127.0.0.1:", "the port must be a number"),
        ("127.0.0.1:http", "the port must be a number"),
        ("127.0.0.1:70000", "the port must be a number"),
        ("127.0.0.1:0", "the port must be a number"),
        ("https://", "the host is missing"),
        ("grpc://127.0.0.1:50051", "the scheme must be http:// or https://"),
        ("http://127.0.0.1:50051/v1", "only a host and a port"),
        ("::1:50051", "an IPv6 address goes in brackets"),
    ]:
        with pytest.raises(InvalidAddress) as info:
            registry_target(given)
        message = str(info.value)
        assert message.startswith(f"{json.dumps(given)} is not a server address: "), message
        assert problem in message, (given, message)
        assert message.endswith("write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051"), message


def test_client_takes_an_http_url(mesh: tuple[Mesh, ToolmeshClient]) -> None:
    with ToolmeshClient(f"http://{mesh[0].registry_addr}") as by_url:
        assert by_url.invoke("echo", {"n": 1}) == {"n": 1}


# --------------------------------------------------------------------------- CLI


def run_cli(
    *args: str,
    cwd: Path | None = None,
    stdin: str | None = None,
    agent: Path = AGENT,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python3 agent.py ARGS` from another working directory (a temp dir by default)."""
    with tempfile.TemporaryDirectory(prefix="toolmesh-py-cwd-") as elsewhere:
        return subprocess.run(
            [sys.executable, str(agent), *args],
            cwd=cwd or elsewhere,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, **(env or {})},
        )


def assert_exit(done: subprocess.CompletedProcess[str], code: int) -> None:
    assert done.returncode == code, f"exit {done.returncode}, wanted {code}\nstdout: {done.stdout}\nstderr: {done.stderr}"


@pytest.fixture
def registry(mesh: tuple[Mesh, ToolmeshClient]) -> str:
    return mesh[0].registry_addr


@pytest.mark.parametrize("scheme", ["", "http://"])
def test_cli_prints_only_the_result(registry: str, scheme: str) -> None:
    done = run_cli("--registry", scheme + registry, "echo", '{"text": "a b c", "n": [1, 2]}')
    assert_exit(done, 0)
    assert done.stdout == '{"text": "a b c", "n": [1, 2]}\n'
    assert done.stderr == ""


def test_cli_result_pipes_into_another_program(registry: str) -> None:
    agent = subprocess.Popen(
        [sys.executable, str(AGENT), "--registry", registry, "echo", '{"piped": true}'],
        stdout=subprocess.PIPE,
    )
    reader = subprocess.run(
        [sys.executable, "-c", "import json, sys; print(json.load(sys.stdin)['piped'])"],
        stdin=agent.stdout,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert agent.stdout is not None
    agent.stdout.close()
    assert agent.wait(timeout=30) == 0
    assert reader.stdout == "True\n", reader.stderr


def test_cli_reads_the_arguments_from_stdin(registry: str) -> None:
    done = run_cli("--registry", registry, "call", "echo", "-", stdin='{"from": "stdin"}')
    assert_exit(done, 0)
    assert json.loads(done.stdout) == {"from": "stdin"}


def test_cli_defaults_the_arguments_and_takes_the_registry_from_the_environment(registry: str) -> None:
    done = run_cli("echo", env={"TOOLMESH_REGISTRY": f"http://{registry}"})
    assert_exit(done, 0)
    assert done.stdout == "{}\n"


def test_cli_lists_only_with_list(registry: str) -> None:
    done = run_cli("--registry", registry, "list")
    assert_exit(done, 0)
    lines = done.stdout.splitlines()
    assert "word_count: Count the words in a text (1 instance(s), 1/s burst 3)" in lines, lines
    assert {line.split(":")[0] for line in lines} >= TOOLS
    openai = run_cli("--registry", registry, "list", "--openai")
    assert_exit(openai, 0)
    assert {t["function"]["name"] for t in json.loads(openai.stdout)} >= TOOLS


@pytest.mark.parametrize(
    ("args", "code", "stderr"),
    [
        (["always_fails"], 4, "tool failed: command failed (exit code 1): boom\n"),
        (["word_count", '{"text": 42}'], 5, "invalid arguments: "),
        (["no_such_tool"], 6, "ToolNotFound (NOT_FOUND): "),
        (["slow"], 7, "ToolTimeout (DEADLINE_EXCEEDED): "),
    ],
)
def test_cli_failures_have_their_own_exit_codes(registry: str, args: list[str], code: int, stderr: str) -> None:
    done = run_cli("--registry", registry, *args)
    assert_exit(done, code)
    assert done.stdout == ""
    assert done.stderr.startswith(stderr), done.stderr
    assert "Traceback" not in done.stderr


def test_cli_runs_a_long_call_as_a_task(registry: str) -> None:
    args = ["--registry", registry, "slow_report", '{"quarter": "Q3"}']
    # A call: cut off at the tool's 1 s timeout.
    called = run_cli(*args)
    assert_exit(called, 7)
    assert called.stderr.startswith("ToolTimeout (DEADLINE_EXCEEDED): "), called.stderr
    # A task: the progress on stderr, only the result on stdout.
    done = run_cli("--task", *args)
    assert_exit(done, 0)
    assert done.stdout == json.dumps(REPORT) + "\n"
    lines = done.stderr.splitlines()
    assert lines[0].startswith("task ") and lines[0].endswith(" started: slow_report WORKING"), done.stderr
    assert any(line.startswith("progress: ") and "counting Q3: step " in line for line in lines), done.stderr
    # A wait shorter than the task: timed out, the task going on.
    short = run_cli("--task", "--timeout", "1", *args)
    assert_exit(short, 7)
    assert short.stdout == ""
    assert "did not end within 1s; it goes on" in short.stderr, short.stderr
    # A task ends with the exit code of the same call.
    assert_exit(run_cli("--task", "--registry", registry, "always_fails"), 4)


def test_cli_invalid_arguments_name_the_path(registry: str) -> None:
    done = run_cli("--registry", registry, "word_count", '{"text": 42}')
    assert_exit(done, 5)
    assert "  /text: " in done.stderr, done.stderr


def test_cli_rate_limited_exit_code(registry: str) -> None:
    # rate 0.01/s, burst 1: the second call within 100 s is refused.
    codes = [run_cli("--registry", registry, "limited", "{}") for _ in range(2)]
    assert codes[-1].returncode == 3, codes[-1]
    assert codes[-1].stderr.startswith("rate limited, retry in "), codes[-1].stderr


def test_cli_unreachable_registry() -> None:
    done = run_cli("--registry", f"http://127.0.0.1:{free_port()}", "--timeout", "5", "echo", "{}")
    assert_exit(done, 8)
    assert done.stderr.startswith("ToolUnavailable (UNAVAILABLE): "), done.stderr
    assert done.stdout == ""


USAGE_ERRORS = [
    ([], "name a tool to call, or list to see them"),
    (["call"], "name the tool to call after call"),
    (["--bogus", "echo"], "unknown option --bogus"),
    (["echo", "{not json"], "the arguments are not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (["echo", "[1, 2]"], "the arguments must be a JSON object, not array"),
    (["echo", "{}", "extra"], "too many arguments after echo"),
    (["list", "echo"], "list takes no arguments, got 'echo'"),
    (["--openai", "echo"], "--openai only goes with list"),
    (["--task", "list"], "--task goes with a call, not with list"),
    (["--timeout", "soon", "echo"], "argument --timeout: 'soon' is not a number of seconds > 0"),
    (["--registry", "grpc://127.0.0.1:50051", "list"], '--registry "grpc://127.0.0.1:50051" is not a server address: the scheme must be http:// or https://'),
    (["--ca-file", "/dev/null", "list"], '--ca-file is set but the registry "127.0.0.1:50051" is plaintext: write https://127.0.0.1:50051 for TLS'),
    (["--registry", "https://127.0.0.1:50051", "--ca-file", "/no/such/ca.pem", "list"], "--ca-file /no/such/ca.pem: No such file or directory"),
    (["--token-file", "/no/such/token", "list"], "--token-file /no/such/token: No such file or directory"),
    (["--registry", "127.0.0.1", "list"], '--registry "127.0.0.1" is not a server address: the port is missing'),
]


@pytest.mark.parametrize(("args", "message"), USAGE_ERRORS)
def test_cli_bad_input_is_one_line_and_exit_code_2(args: list[str], message: str) -> None:
    done = run_cli(*args)
    assert_exit(done, 2)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"agent.py: error: {message}"), done.stderr
    assert done.stderr.endswith(" (see --help)\n"), done.stderr


def test_cli_help_documents_the_exit_codes() -> None:
    done = run_cli("--help")
    assert_exit(done, 0)
    assert "exit codes: 0 result printed" in done.stdout


# --------------------------------------------------------------------------- outside the repository


def test_generate_refuses_a_folder_without_the_contract(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(HERE / "generate.sh"), "--proto-dir", "no-such-dir"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_exit(done, 2)
    assert done.stderr == (
        f"generate.sh: error: no toolmesh/v1/toolmesh.proto in 'no-such-dir': pass --proto-dir DIR or set "
        "TOOLMESH_PROTO_DIR to the folder holding it (the toolmesh repository's proto/proto)\n"
    )


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_agent_copied_out_of_the_repository(registry: str, tmp_path: Path, how: str) -> None:
    """The agent and its generate step, copied elsewhere, each run from yet another folder."""
    home = tmp_path / "my-agent"
    home.mkdir()
    for name in ("agent.py", "generate.sh"):
        shutil.copy2(HERE / name, home / name)
    contract = tmp_path / "contract"
    shutil.copytree(REPO_PROTO, contract)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    # Without a proto folder, the copy cannot guess the repository's.
    lost = subprocess.run(["bash", str(home / "generate.sh")], cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert_exit(lost, 2)
    assert "pass --proto-dir DIR or set TOOLMESH_PROTO_DIR" in lost.stderr
    # Without stubs, the agent says what to run, in one line.
    unstubbed = run_cli("list", agent=home / "agent.py", cwd=elsewhere)
    assert_exit(unstubbed, 2)
    assert unstubbed.stderr == (
        f"agent.py: error: the toolmesh stubs are not in {home / 'gen'}: run {home / 'generate.sh'} first\n"
    )

    args, env = (["--proto-dir", "../contract"], {}) if how == "flag" else ([], {"TOOLMESH_PROTO_DIR": "../contract"})
    generated = subprocess.run(
        ["bash", str(home / "generate.sh"), *args],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHON": sys.executable, **env},
    )
    assert_exit(generated, 0)
    assert (home / "gen/toolmesh/v1/toolmesh_pb2.py").is_file()

    done = run_cli("--registry", registry, "echo", '{"copied": true}', agent=home / "agent.py")
    assert_exit(done, 0)
    assert done.stdout == '{"copied": true}\n'


# --------------------------------------------------------------------------- credentials and TLS

# Test keys: long enough to look like real ones; only their SHA-256 goes to the registry.
KEY_A = "agent-a-key-0123456789abcdef0123456789abcdef"
KEY_B = "agent-b-key-fedcba9876543210fedcba9876543210"
WRONG_KEY = "not-a-key-the-registry-knows-0123456789"
ADD_CODE = "import json, sys; a = json.load(sys.stdin); print(json.dumps({'sum': a['a'] + a['b']}))"
SECURED_YAML = f"""\
tools:
  - name: add
    description: Adds a and b
    timeout: 2s
    backend:
      command: [{json.dumps(sys.executable)}, "-c", {json.dumps(ADD_CODE)}]
  - name: echo
    description: Returns its arguments
    timeout: 2s
    backend:
      command: ["cat"]
"""
SECURED_TOOLS = {"add", "echo"}


def write_auth_files(workdir: Path) -> list[str]:
    """The registry's --api-keys-file (SHA-256 of KEY_A and KEY_B) and
    --policy-file (agent-a may call add only; agent-b anything)."""
    keys = workdir / "api-keys.yaml"
    keys.write_text(
        "keys:\n"
        f"  - {{caller: agent-a, sha256: {hashlib.sha256(KEY_A.encode()).hexdigest()}}}\n"
        f"  - {{caller: agent-b, sha256: {hashlib.sha256(KEY_B.encode()).hexdigest()}}}\n"
    )
    policy = workdir / "policy.yaml"
    policy.write_text('rules:\n  - {callers: [agent-a], tools: ["add"]}\n  - {callers: [agent-b], tools: ["*"]}\n')
    return ["--api-keys-file", str(keys), "--policy-file", str(policy)]


def make_certificates(workdir: Path) -> tuple[Path, Path, Path]:
    """A CA made for this run and a server certificate it signs for
    127.0.0.1 and localhost, with openssl: (ca.pem, server.pem, server.key)."""
    ca_key, ca, key, csr, cert = (workdir / n for n in ("ca.key", "ca.pem", "server.key", "server.csr", "server.pem"))
    ext = workdir / "server.ext"
    ext.write_text(
        "subjectAltName = IP:127.0.0.1, DNS:localhost\n"
        "basicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        "extendedKeyUsage = serverAuth\n"
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for argv in (
        ["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=toolmesh test CA"],
        ["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1"],
        ["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-set_serial", "2",
         "-days", "2", "-extfile", ext, "-out", cert],
    ):
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{' '.join(map(str, argv))}: {done.stderr}"
    return ca, cert, key


@pytest.fixture(scope="module")
def secured() -> Iterator[Mesh]:
    """A registry that authenticates agents (API keys) and has a policy."""
    with tempfile.TemporaryDirectory(prefix="toolmesh-py-auth-") as tmp:
        workdir = Path(tmp)
        m = Mesh(workdir, SECURED_YAML, registry_args=write_auth_files(workdir))
        try:
            m.start()
            with ToolmeshClient(m.registry_addr, token=KEY_B, default_timeout=10) as admin:
                m.wait_for_tools(admin, SECURED_TOOLS)
            yield m
        finally:
            m.stop()


@pytest.fixture(scope="module")
def tls_mesh() -> Iterator[tuple[Mesh, Path]]:
    """A registry serving TLS with a certificate of a CA made for the test,
    and authenticating agents; the sidecar reaches it over https:// too."""
    with tempfile.TemporaryDirectory(prefix="toolmesh-py-tls-") as tmp:
        workdir = Path(tmp)
        ca, cert, key = make_certificates(workdir)
        m = Mesh(
            workdir,
            SECURED_YAML,
            registry_args=[*write_auth_files(workdir), "--tls-cert-file", str(cert), "--tls-key-file", str(key)],
            sidecar_args=["--registry-ca-file", str(ca)],
            scheme="https://",
        )
        try:
            m.start()
            with ToolmeshClient(f"https://{m.registry_addr}", token=KEY_B, ca_file=str(ca), default_timeout=10) as admin:
                m.wait_for_tools(admin, SECURED_TOOLS)
            yield m, ca
        finally:
            m.stop()


NO_TOKEN = {"TOOLMESH_TOKEN": "", "TOOLMESH_TOKEN_FILE": "", "TOOLMESH_CA_FILE": ""}


def test_without_a_token_the_registry_wants_a_credential(secured: Mesh) -> None:
    with ToolmeshClient(secured.registry_addr) as anonymous:
        with pytest.raises(Unauthenticated) as info:
            anonymous.list_tools()
    err = info.value
    assert not err.had_credential and err.code.name == "UNAUTHENTICATED"
    assert err.message.startswith("the registry wants a credential: set TOOLMESH_TOKEN"), err.message
    done = run_cli("--registry", secured.registry_addr, "list", env=NO_TOKEN)
    assert_exit(done, 9)
    assert done.stdout == ""
    assert done.stderr.startswith(
        "the registry wants a credential: set TOOLMESH_TOKEN to the agent's API key or JWT, "
        "or TOOLMESH_TOKEN_FILE (or --token-file) to a file holding it ("
    ), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_a_wrong_token_is_refused_and_never_shown(secured: Mesh) -> None:
    with ToolmeshClient(secured.registry_addr, token=WRONG_KEY) as wrong:
        with pytest.raises(Unauthenticated) as info:
            wrong.invoke("add", {"a": 1, "b": 2})
    assert info.value.had_credential
    assert WRONG_KEY not in str(info.value) and WRONG_KEY not in repr(wrong)
    done = run_cli("--registry", secured.registry_addr, "list", env={**NO_TOKEN, "TOOLMESH_TOKEN": WRONG_KEY})
    assert_exit(done, 9)
    assert done.stderr.startswith("the registry refused the credential from TOOLMESH_TOKEN ("), done.stderr
    assert WRONG_KEY not in done.stderr + done.stdout


def test_with_the_key_the_agent_lists_and_invokes(secured: Mesh, tmp_path: Path) -> None:
    with ToolmeshClient(secured.registry_addr, token=KEY_B) as mesh:
        assert {t.name for t in mesh.list_tools()} == SECURED_TOOLS
        assert mesh.get_tool("add").name == "add"
        assert mesh.invoke("add", {"a": 2, "b": 3}) == {"sum": 5}
    token_file = tmp_path / "token"
    token_file.write_text(KEY_B + "\r\n")
    for args, env in [
        ([], {**NO_TOKEN, "TOOLMESH_TOKEN": KEY_B}),
        ([], {**NO_TOKEN, "TOOLMESH_TOKEN_FILE": str(token_file)}),
        (["--token-file", str(token_file)], NO_TOKEN),
    ]:
        listed = run_cli("--registry", secured.registry_addr, *args, "list", env=env)
        assert_exit(listed, 0)
        assert {line.split(":")[0] for line in listed.stdout.splitlines()} == SECURED_TOOLS, listed.stdout
        called = run_cli("--registry", secured.registry_addr, *args, "add", '{"a": 40, "b": 2}', env=env)
        assert_exit(called, 0)
        assert called.stdout == '{"sum": 42}\n'
        assert KEY_B not in listed.stderr + called.stderr


def test_the_policy_shows_a_caller_only_its_tools(secured: Mesh) -> None:
    with ToolmeshClient(secured.registry_addr, token=KEY_A) as agent_a:
        assert [t.name for t in agent_a.list_tools()] == ["add"]
        assert agent_a.invoke("add", {"a": 1, "b": 1}) == {"sum": 2}
        with pytest.raises(ToolNotFound):
            agent_a.invoke("echo", {})
        with pytest.raises(ToolNotFound):
            agent_a.get_tool("echo")
    env = {**NO_TOKEN, "TOOLMESH_TOKEN": KEY_A}
    listed = run_cli("--registry", secured.registry_addr, "list", env=env)
    assert_exit(listed, 0)
    assert [line.split(":")[0] for line in listed.stdout.splitlines()] == ["add"]
    hidden = run_cli("--registry", secured.registry_addr, "echo", "{}", env=env)
    assert_exit(hidden, 6)


def test_tls_with_the_ca_file(tls_mesh: tuple[Mesh, Path]) -> None:
    m, ca = tls_mesh
    with ToolmeshClient(f"https://{m.registry_addr}", token=KEY_A, ca_file=str(ca)) as mesh:
        assert [t.name for t in mesh.list_tools()] == ["add"]
        assert mesh.invoke("add", {"a": 1, "b": 2}) == {"sum": 3}
    env = {**NO_TOKEN, "TOOLMESH_TOKEN": KEY_B, "TOOLMESH_CA_FILE": str(ca)}
    done = run_cli("--registry", f"https://{m.registry_addr}", "add", '{"a": 20, "b": 22}', env=env)
    assert_exit(done, 0)
    assert done.stdout == '{"sum": 42}\n'
    by_flag = run_cli("--registry", f"https://{m.registry_addr}", "--ca-file", str(ca), "list", env={**env, "TOOLMESH_CA_FILE": ""})
    assert_exit(by_flag, 0)
    assert {line.split(":")[0] for line in by_flag.stdout.splitlines()} == SECURED_TOOLS


def test_tls_is_verified_and_never_plaintext(tls_mesh: tuple[Mesh, Path]) -> None:
    m, _ = tls_mesh
    env = {**NO_TOKEN, "TOOLMESH_TOKEN": KEY_B}
    # Without the CA the certificate is not trusted (public roots only).
    untrusted = run_cli("--registry", f"https://{m.registry_addr}", "--timeout", "5", "list", env=env)
    assert_exit(untrusted, 8)
    # http:// is plaintext, which a TLS registry does not speak.
    plaintext = run_cli("--registry", f"http://{m.registry_addr}", "--timeout", "5", "list", env=env)
    assert_exit(plaintext, 8)
    assert KEY_B not in untrusted.stderr + plaintext.stderr


def test_token_settings(tmp_path: Path) -> None:
    assert token_from_env(env={}) is None
    assert token_from_env(env={"TOOLMESH_TOKEN": KEY_A}) == KEY_A
    token_file = tmp_path / "token"
    token_file.write_text(KEY_A + "\n")
    assert token_from_env(env={"TOOLMESH_TOKEN_FILE": str(token_file)}) == KEY_A
    assert token_from_env(str(token_file), env={"TOOLMESH_TOKEN": KEY_B}) == KEY_A
    bad = "has a space " + KEY_B
    for env, message in [
        ({"TOOLMESH_TOKEN": KEY_A, "TOOLMESH_TOKEN_FILE": str(token_file)}, "TOOLMESH_TOKEN and TOOLMESH_TOKEN_FILE are both set"),
        ({"TOOLMESH_TOKEN": bad}, "TOOLMESH_TOKEN is not a usable token: a token is one line of visible ASCII"),
    ]:
        with pytest.raises(InvalidCredential) as info:
            token_from_env(env=env)
        assert str(info.value).startswith(message), str(info.value)
        assert KEY_A not in str(info.value) and bad not in str(info.value)
    token_file.write_text("two\nlines\n")
    with pytest.raises(InvalidCredential, match=f"TOOLMESH_TOKEN_FILE {token_file} is not a usable token"):
        token_from_env(env={"TOOLMESH_TOKEN_FILE": str(token_file)})
    done = run_cli("list", env={**NO_TOKEN, "TOOLMESH_TOKEN": bad})
    assert_exit(done, 2)
    assert done.stderr.startswith("agent.py: error: TOOLMESH_TOKEN is not a usable token"), done.stderr
    assert bad not in done.stderr


# --------------------------------------------------------------------------- tool digests

SHOWN = "a" * 64
LIVE = "b" * 64


def digest_mismatch(reason: str = "TOOL_DIGEST_MISMATCH", tool: str = "word_count") -> status_pb2.Status:
    """A refused call's google.rpc.Status as the registry builds it for a
    stale tool_digest (RegistryError::ToolChanged)."""
    info = error_details_pb2.ErrorInfo(
        reason=reason,
        domain="toolmesh.dev",
        metadata={"tool": tool, "shown_digest": SHOWN, "live_digest": LIVE, "changed": "description,input_schema_json"},
    )
    failure = error_details_pb2.PreconditionFailure(
        violations=[
            error_details_pb2.PreconditionFailure.Violation(
                type="TOOL_CHANGED",
                subject=f"tool:{tool}",
                description='description: shown "Count words" != live "Count the words in a text"',
            ),
            error_details_pb2.PreconditionFailure.Violation(
                type="TOOL_CHANGED", subject=f"tool:{tool}", description="input_schema_json: shown {} != live {...}"
            ),
        ]
    )
    details = []
    for message in (info, failure):
        packed = any_pb2.Any()
        packed.Pack(message)
        details.append(packed)
    return status_pb2.Status(
        code=code_pb2.FAILED_PRECONDITION,
        message=f'tool "{tool}" is not the definition the agent was shown',
        details=details,
    )


def test_a_digest_mismatch_is_tool_changed() -> None:
    status = digest_mismatch()
    err = _typed_error(grpc.StatusCode.FAILED_PRECONDITION, status.message, status, "word_count")
    assert isinstance(err, ToolChanged) and isinstance(err, ToolmeshError)
    assert (err.tool, err.shown_digest, err.live_digest) == ("word_count", SHOWN, LIVE)
    assert err.changed == ["description", "input_schema_json"]
    assert len(err.differences) == 2 and err.differences[0].startswith("description: shown"), err.differences
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION and err.status is status


def test_another_failed_precondition_is_not_tool_changed() -> None:
    status = digest_mismatch(reason="APPROVAL_REQUIRED")
    err = _typed_error(grpc.StatusCode.FAILED_PRECONDITION, status.message, status, "word_count")
    assert type(err) is ToolmeshError
    assert type(_typed_error(grpc.StatusCode.FAILED_PRECONDITION, "no details", None, "t")) is ToolmeshError


class FakeRegistry(toolmesh_pb2_grpc.ToolRegistryServicer, toolmesh_pb2_grpc.TasksServicer):
    """A registry on a loopback port whose word_count is at digest LIVE:
    it records every call's InvokeRequest and refuses one bound to another
    digest as the real registry does, with the rich status in the trailers."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.description = "Count words"
        self.digest = SHOWN
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        toolmesh_pb2_grpc.add_ToolRegistryServicer_to_server(self, self.server)
        toolmesh_pb2_grpc.add_TasksServicer_to_server(self, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"

    def tool(self) -> Any:
        schema = '{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}'
        descriptor = toolmesh_pb2.ToolDescriptor(name="word_count", description=self.description, input_schema_json=schema)
        return toolmesh_pb2.Tool(descriptor=descriptor, instances=1, digest=self.digest)

    def ListTools(self, request: Any, context: Any) -> Any:
        return toolmesh_pb2.ListToolsResponse(tools=[self.tool()])

    def GetTool(self, request: Any, context: Any) -> Any:
        return self.tool()

    def SearchTools(self, request: Any, context: Any) -> Any:
        return toolmesh_pb2.SearchToolsResponse(matches=[toolmesh_pb2.ToolMatch(tool=self.tool(), score=1.0)])

    def ExportTools(self, request: Any, context: Any) -> Any:
        function = {"name": "word_count", "description": self.description, "parameters": {"type": "object"}}
        return toolmesh_pb2.ExportToolsResponse(tools_json=json.dumps([{"type": "function", "function": function}]))

    def _check(self, call: Any, context: Any) -> None:
        self.calls.append(call)
        if call.tool_digest and call.tool_digest != self.digest:
            context.abort_with_status(rpc_status.to_status(digest_mismatch()))

    def Invoke(self, request: Any, context: Any) -> Any:
        self._check(request, context)
        words = len(json.loads(request.arguments_json).get("text", "").split())
        return toolmesh_pb2.InvokeResponse(result_json=json.dumps({"words": words}), instance_id="fake", attempts=1)

    def StartTask(self, request: Any, context: Any) -> Any:
        self._check(request.call, context)
        return toolmesh_pb2.Task(id="t1", tool=request.call.tool, state=toolmesh_pb2.TASK_STATE_WORKING)


@pytest.fixture
def fake() -> Iterator[FakeRegistry]:
    registry = FakeRegistry()
    registry.server.start()
    try:
        yield registry
    finally:
        registry.server.stop(grace=None)


def test_the_digest_shown_is_sent_and_a_stale_one_raises_tool_changed(fake: FakeRegistry) -> None:
    with ToolmeshClient(fake.address, default_timeout=10) as client:
        [listed] = client.list_tools()
        assert listed.digest == SHOWN and client.get_tool("word_count").digest == SHOWN
        assert client.search_tools("count words")[0][0].digest == SHOWN
        assert client.invoke("word_count", {"text": "a b"}, tool_digest=listed.digest) == {"words": 2}
        assert client.start_task("word_count", {"text": "a b"}, tool_digest=listed.digest).id == "t1"
        assert client.invoke("word_count", {"text": "a b"}) == {"words": 2}
        assert [c.tool_digest for c in fake.calls] == [SHOWN, SHOWN, ""]

        fake.digest = LIVE  # the tool changed after it was listed
        with pytest.raises(ToolChanged) as info:
            client.invoke("word_count", {"text": "a b"}, tool_digest=listed.digest)
        assert (info.value.shown_digest, info.value.live_digest) == (SHOWN, LIVE)
        assert info.value.changed == ["description", "input_schema_json"]
        with pytest.raises(ToolChanged) as info:
            client.start_task("word_count", {"text": "a b"}, tool_digest=listed.digest)
        assert info.value.tool == "word_count"
        assert [c.tool_digest for c in fake.calls[3:]] == [SHOWN, SHOWN]


def test_agent_loop_refreshes_the_definitions_when_the_tool_changed(fake: FakeRegistry) -> None:
    import agent_loop

    class ChangingModel(agent_loop.ScriptedModel):
        """Its first call comes after the tool changed."""

        def first_call(self, task: str, tools: list[dict[str, Any]]) -> agent_loop.Call:
            fake.digest, fake.description = LIVE, "Count the words in a text"
            return super().first_call(task, tools)

    with ToolmeshClient(fake.address, default_timeout=10) as client:
        transcript = agent_loop.run(client, 'How many words are in "a b c"?', ChangingModel(slip="text"))
    kinds = [step.kind for step in transcript]
    assert kinds == ["search", "call", "changed", "search", "call", "result"], transcript
    assert transcript[2].detail == {"tool": "word_count", "fields": ["description", "input_schema_json"]}
    assert [c.tool_digest for c in fake.calls] == [SHOWN, LIVE]
    assert transcript[-1].detail == {"words": 3}
