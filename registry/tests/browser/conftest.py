"""The mesh and the browser that the console's browser tests drive.

A registry (gRPC, and the console on a port of its own) and one sidecar,
both the real binaries from $TOOLMESH_BIN_DIR (default: <repo>/target/debug),
on ephemeral loopback ports, with API keys and a policy written to a
temporary folder. The browser is Debian's Chromium (/usr/bin/chromium, or
$TOOLMESH_CHROMIUM) driven by Playwright; Playwright's own browsers are
never used. Every page a test reaches is saved as
<repo>/target/console-screenshots/NAME.png.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import grpc
import pytest
from playwright.sync_api import Browser, BrowserContext, ConsoleMessage, Page, expect, sync_playwright

REPO = Path(__file__).resolve().parents[3]
BIN_DIR = Path(os.environ.get("TOOLMESH_BIN_DIR") or REPO / "target/debug").resolve()
CHROMIUM = os.environ.get("TOOLMESH_CHROMIUM", "/usr/bin/chromium")
SHOTS = REPO / "target/console-screenshots"
PROTO = REPO / "proto/proto"
VIEWPORT = {"width": 1280, "height": 800}
STARTUP_TIMEOUT = 30.0
"""Longest the mesh may take to serve every tool (a busy 2-core machine)."""
UI_TIMEOUT_MS = 30_000
"""Playwright's auto-wait, for every action and assertion."""

OPS_KEY = "ops-key-4f0c2a9e7d1b83c6"
AGENT_KEY = "agent-key-9b27e4d05a6c1f38"

POLICY = """\
rules:
  - callers: ["*"]
    tools: ["*"]
approvals:
  - name: refunds
    tools: ["refund"]
    approvers: {groups: [ops]}
    reason: Refunds need an operator
console:
  - groups: [ops]
    can: [view, invoke, approve]
  - callers: [agent]
    can: [view]
"""

HOSTILE_DESCRIPTION = 'Shows <script>window.pwned=1</script> and <img src=x onerror="window.pwned=2"> as text'

# The tools' programs: JSON arguments on stdin, the JSON result on stdout.
SCRIPTS = {
    "book_room.py": """\
import json, sys
args = json.load(sys.stdin)
print(json.dumps({
    "booked": args["room"],
    "topic": args["topic"],
    "seats": args["attendees"],
    "projector": args.get("projector"),
    "guests": args.get("guests", []),
    "organizer": args.get("organizer", {}).get("name"),
}))
""",
    "refund.py": """\
import json, sys
print(json.dumps({"refunded": json.load(sys.stdin)["amount"]}))
""",
    "word_count.py": """\
import json, sys
print(json.dumps({"words": len(json.load(sys.stdin)["text"].split())}))
""",
}


def sidecar_yaml(workdir: Path) -> str:
    py = sys.executable
    return f"""\
tools:
  - name: book_room
    title: Book a meeting room
    description: Reserve a meeting room for a team meeting, with a projector and guests if wanted.
    tags: [office, rooms]
    timeout: 10s
    input_schema:
      type: object
      required: [topic, attendees, room]
      additionalProperties: false
      properties:
        topic: {{type: string, description: What the meeting is about, minLength: 1}}
        attendees: {{type: integer, minimum: 1, maximum: 40, description: How many people come}}
        room: {{type: string, enum: [atlas, borealis, cosmos], description: Which room}}
        projector: {{type: boolean, description: Whether a projector is needed}}
        guests: {{type: array, items: {{type: string}}, description: Guests from outside, by name}}
        organizer:
          type: object
          description: Who books it
          required: [name]
          properties:
            name: {{type: string, description: The organizer's name}}
            email: {{type: string, format: email}}
    backend:
      command: ["{py}", "{workdir / 'book_room.py'}"]
  - name: refund
    title: Refund a payment
    description: Refund an amount to the customer's card.
    tags: [billing]
    timeout: 10s
    input_schema:
      type: object
      required: [amount]
      properties:
        amount: {{type: number, minimum: 0, description: The amount to refund}}
    backend:
      command: ["{py}", "{workdir / 'refund.py'}"]
  - name: word_count
    description: Count the words in a text.
    tags: [text]
    timeout: 10s
    idempotent: true
    arguments:
      - {{name: text, type: string, description: The text, required: true}}
    backend:
      command: ["{py}", "{workdir / 'word_count.py'}"]
  - name: limited
    description: Echoes its arguments, once per 100 seconds.
    rate_limit: {{rate: 0.01, burst: 1}}
    timeout: 10s
    backend:
      command: ["cat"]
  - name: always_fails
    description: A tool that always reports a failure.
    timeout: 10s
    backend:
      command: ["sh", "-c", "echo the backend is down >&2; exit 1"]
  - name: xss_probe
    description: '{HOSTILE_DESCRIPTION}'
    timeout: 10s
    backend:
      command: ["cat"]
"""


TOOLS = {"book_room", "refund", "word_count", "limited", "always_fails", "xss_probe"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, a bounded wait, then SIGKILL: this process only, by its PID."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def generate_stubs(out: Path) -> ModuleType:
    """The contract's Python stubs, generated from proto/ into `out`."""
    done = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I", str(PROTO),
         f"--python_out={out}", f"--grpc_python_out={out}", "toolmesh/v1/toolmesh.proto"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"grpc_tools.protoc failed: {done.stderr}"
    sys.path.insert(0, str(out))
    pb2 = importlib.import_module("toolmesh.v1.toolmesh_pb2")
    pb2.grpc = importlib.import_module("toolmesh.v1.toolmesh_pb2_grpc")
    return pb2


@dataclass
class Mesh:
    """A registry with its console, and one sidecar serving TOOLS."""

    workdir: Path
    pb: ModuleType
    registry_addr: str = ""
    console_url: str = ""
    procs: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    channel: grpc.Channel | None = None

    def start(self) -> None:
        for binary in ("toolmesh-registry", "toolmesh-sidecar"):
            if not (BIN_DIR / binary).is_file():
                pytest.fail(f"{BIN_DIR / binary} missing: cargo build -p toolmesh-registry -p toolmesh-sidecar --bins")
        for name, text in SCRIPTS.items():
            (self.workdir / name).write_text(text)
        keys = self.workdir / "api-keys.yaml"
        keys.write_text(
            "keys:\n"
            f"  - {{caller: ops, sha256: {hashlib.sha256(OPS_KEY.encode()).hexdigest()}, groups: [ops]}}\n"
            f"  - {{caller: agent, sha256: {hashlib.sha256(AGENT_KEY.encode()).hexdigest()}, groups: [agents]}}\n"
        )
        policy = self.workdir / "policy.yaml"
        policy.write_text(POLICY)
        config = self.workdir / "sidecar.yaml"
        config.write_text(sidecar_yaml(self.workdir))

        self.registry_addr = f"127.0.0.1:{free_port()}"
        console_addr = f"127.0.0.1:{free_port()}"
        self.console_url = f"http://{console_addr}"
        self._spawn("registry", [
            str(BIN_DIR / "toolmesh-registry"),
            "--listen", self.registry_addr,
            "--console-listen", console_addr,
            "--api-keys-file", str(keys),
            "--policy-file", str(policy),
            "--lease-ttl", "3s",
        ])
        self._spawn("sidecar", [
            str(BIN_DIR / "toolmesh-sidecar"),
            "--config", str(config),
            "--registry", f"http://{self.registry_addr}",
            "--listen", f"127.0.0.1:{free_port()}",
        ])
        self.channel = grpc.insecure_channel(self.registry_addr)
        self._wait_for_tools()

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.workdir / f"{name}.log", "wb") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((name, proc))

    def logs(self) -> str:
        return "\n".join(
            f"--- {name} (exit {proc.poll()}) ---\n{(self.workdir / f'{name}.log').read_text(errors='replace')}"
            for name, proc in self.procs
        )

    def _wait_for_tools(self) -> None:
        registry = self.pb.grpc.ToolRegistryStub(self.channel)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        seen: set[str] = set()
        while time.monotonic() < deadline:
            for name, proc in self.procs:
                if proc.poll() is not None:
                    pytest.fail(f"{name} exited early\n{self.logs()}")
            try:
                listed = registry.ListTools(self.pb.ListToolsRequest(), metadata=bearer(OPS_KEY), timeout=2)
                seen = {t.descriptor.name for t in listed.tools}
            except grpc.RpcError:
                seen = set()
            if TOOLS <= seen:
                return
            time.sleep(0.2)
        pytest.fail(f"tools {sorted(TOOLS - seen)} did not appear in {STARTUP_TIMEOUT}s\n{self.logs()}")

    def stop(self) -> None:
        if self.channel is not None:
            self.channel.close()
        # The sidecar first, so that it withdraws while the registry listens.
        for _, proc in reversed(self.procs):
            stop(proc)


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


@pytest.fixture(scope="session")
def pb() -> Iterator[ModuleType]:
    with tempfile.TemporaryDirectory(prefix="toolmesh-browser-pb-") as out:
        yield generate_stubs(Path(out))


@pytest.fixture(scope="module")
def mesh(pb: ModuleType) -> Iterator[Mesh]:
    with tempfile.TemporaryDirectory(prefix="toolmesh-browser-") as tmp:
        m = Mesh(Path(tmp), pb)
        try:
            m.start()
            yield m
        finally:
            m.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"{CHROMIUM} missing: apt-get install chromium (scripts/browser.sh does)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()


# A document answered 4xx logs this in Chromium's console; the tests check
# those statuses themselves.
_HTTP_STATUS_LOG = re.compile(r"^Failed to load resource: the server responded with a status of 4\d\d")


@pytest.fixture
def open_page(browser: Browser, mesh: Mesh) -> Iterator[Callable[[], Page]]:
    """Opens pages, each in a fresh browser context (no cookies) on the
    console. The test fails on any script error, Content-Security-Policy
    violation or console error its pages produced."""
    contexts: list[BrowserContext] = []
    problems: list[str] = []

    def watch(page: Page) -> None:
        def on_console(message: ConsoleMessage) -> None:
            text = message.text
            if "Content Security Policy" in text or (
                message.type == "error" and not _HTTP_STATUS_LOG.match(text)
            ):
                problems.append(f"console {message.type} at {page.url}: {text}")

        page.on("console", on_console)
        page.on("pageerror", lambda error: problems.append(f"script error at {page.url}: {error}"))

    def new_page() -> Page:
        context = browser.new_context(viewport=VIEWPORT, base_url=mesh.console_url)
        context.set_default_timeout(UI_TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        watch(page)
        return page

    try:
        yield new_page
    finally:
        for context in contexts:
            context.close()
    assert not problems, "\n".join(problems)


@pytest.fixture
def page(open_page: Callable[[], Page]) -> Page:
    return open_page()


expect.set_options(timeout=UI_TIMEOUT_MS)


def shot(page: Page, name: str) -> None:
    """Saves what the viewer sees (the viewport) as target/console-screenshots/NAME.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def sign_in(page: Page, key: str) -> None:
    page.goto("/login")
    page.fill("input#credential", key)
    page.locator("form.login button[type=submit]").click()
    expect(page).to_have_url(re.compile(r"/tools$"))
