"""Runs the Python agent against the real toolmesh-registry and toolmesh-sidecar.

The binaries come from $TOOLMESH_BIN_DIR (default: ../../../target/debug).
Run: ./generate.sh && python3 -m pytest -q test_agent.py
"""

from __future__ import annotations

import json
import os
import shutil
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
    InvalidAddress,
    RateLimited,
    ToolArgumentError,
    ToolFailed,
    ToolmeshClient,
    ToolNotFound,
    ToolTimeout,
    ToolUnavailable,
    registry_target,
)

HERE = Path(__file__).resolve().parent
BIN_DIR = Path(os.environ.get("TOOLMESH_BIN_DIR") or HERE / "../../../target/debug").resolve()
AGENT = HERE / "agent.py"
REPO_PROTO = (HERE / "../../../proto/proto").resolve()
WORD_COUNT = (HERE / "../testdata/word_count.py").resolve()
TOOLS = {"word_count", "always_fails", "slow", "echo", "limited"}
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


# --------------------------------------------------------------------------- addresses


def test_registry_takes_host_port_and_http_urls_alike() -> None:
    for given in ["127.0.0.1:50051", "http://127.0.0.1:50051", "http://127.0.0.1:50051/", " 127.0.0.1:50051\n"]:
        assert registry_target(given) == "127.0.0.1:50051", given
    assert registry_target("registry.svc:7000") == "registry.svc:7000"
    assert registry_target("[::1]:50051") == "[::1]:50051"


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
        ("https://127.0.0.1:50051", "https:// needs TLS, which toolmesh does not support yet"),
        ("grpc://127.0.0.1:50051", "the scheme must be http://"),
        ("http://127.0.0.1:50051/v1", "only a host and a port"),
        ("::1:50051", "an IPv6 address goes in brackets"),
    ]:
        with pytest.raises(InvalidAddress) as info:
            registry_target(given)
        message = str(info.value)
        assert message.startswith(f"{json.dumps(given)} is not a server address: "), message
        assert problem in message, (given, message)
        assert message.endswith("write host:port or http://host:port, e.g. 127.0.0.1:50051"), message


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
    (["--timeout", "soon", "echo"], "argument --timeout: 'soon' is not a number of seconds > 0"),
    (["--registry", "https://127.0.0.1:50051", "list"], '--registry "https://127.0.0.1:50051" is not a server address: https:// needs TLS, which toolmesh does not support yet'),
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
