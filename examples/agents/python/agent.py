"""A small toolmesh agent library and CLI.

The gRPC stubs are generated from proto/ into gen/ by ./generate.sh; nothing in
this file hand-writes a protobuf message. Errors come back as typed exceptions
decoded from the google.rpc.Status the registry sends in grpc-status-details-bin.

    python3 agent.py list                                  # the live tools, one a line
    python3 agent.py list --openai                         # as OpenAI tool definitions
    python3 agent.py word_count '{"text": "a b c"}'        # only the result, on stdout
    python3 agent.py --registry http://10.0.0.5:50051 word_count '{"text": "a b c"}'
    python3 agent.py --task slow_report '{"quarter": "Q3"}'   # as a task: progress on stderr, then the result
    TOOLMESH_TOKEN_FILE=key TOOLMESH_CA_FILE=ca.pem python3 agent.py --registry https://registry:50051 list

The credential (an API key or a JWT) is sent as `authorization: Bearer ...`
on every call: `--token-file FILE`, else TOOLMESH_TOKEN or TOOLMESH_TOKEN_FILE.
An https:// registry is TLS, verified with TOOLMESH_CA_FILE (or --ca-file),
else grpc's public roots.

Exit codes of the CLI (EXIT_* below): 0 the result was printed; 1 any other
error from the registry; 2 a bad command line (one line on stderr); 3 rate
limited; 4 the tool ran and failed (is_error); 5 the arguments were refused
(INVALID_ARGUMENT); 6 unknown tool (NOT_FOUND); 7 timed out
(DEADLINE_EXCEEDED); 8 unavailable: registry unreachable or no live instance
(UNAVAILABLE); 9 no credential, or one the registry refuses (UNAUTHENTICATED).
A task's end has the exit code of the same call's Invoke (a CANCELLED task: 1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, NoReturn

_GEN_DIR = Path(__file__).resolve().parent / "gen"
try:
    import grpc
    from google.rpc import error_details_pb2, status_pb2
    from grpc_status import rpc_status

    if str(_GEN_DIR) not in sys.path:
        sys.path.insert(0, str(_GEN_DIR))
    if not (_GEN_DIR / "toolmesh" / "v1" / "toolmesh_pb2.py").is_file():
        raise ImportError(f"the toolmesh stubs are not in {_GEN_DIR}: run {_GEN_DIR.parent / 'generate.sh'} first")
    from toolmesh.v1 import toolmesh_pb2, toolmesh_pb2_grpc
except ImportError as _missing:  # pragma: no cover - only without dependencies or stubs
    if __name__ == "__main__":
        # The CLI answers in one line; a library import still raises.
        hint = "" if _missing.name is None else f" (pip install -r {_GEN_DIR.parent / 'requirements.txt'})"
        print(f"agent.py: error: {_missing}{hint}", file=sys.stderr)
        sys.exit(2)
    raise

__all__ = [
    "InvalidAddress",
    "InvalidCredential",
    "RegistryAddress",
    "registry_address",
    "registry_target",
    "token_from_env",
    "ca_file_from_env",
    "ToolSpec",
    "Task",
    "TaskProgress",
    "ToolmeshClient",
    "ToolmeshError",
    "ToolArgumentError",
    "ToolNotFound",
    "RateLimited",
    "ToolFailed",
    "ToolTimeout",
    "ToolUnavailable",
    "Unauthenticated",
    "TaskNotFound",
    "TaskCancelled",
    "ToolChanged",
]


# --------------------------------------------------------------------------- addresses


class InvalidAddress(ValueError):
    """A registry address that is not host:port, http://host:port or https://host:port."""


@dataclass(frozen=True)
class RegistryAddress:
    """Where the registry is: its gRPC target and whether to speak TLS."""

    target: str
    """host:port, as gRPC dials it."""
    tls: bool
    """True for https:// (TLS, never plaintext); False for host:port and http://."""


def registry_address(address: str) -> RegistryAddress:
    """The registry's target and transport, by the rule every toolmesh binary
    and agent shares (toolmesh_proto::endpoint in Rust): `host:port` or
    `http://host:port` (plaintext), `https://host:port` (TLS), a trailing `/`
    dropped. Raises InvalidAddress saying what to write.
    """
    given = address.strip()

    def error(problem: str) -> InvalidAddress:
        return InvalidAddress(
            f"{json.dumps(address)} is not a server address: {problem}; "
            "write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051"
        )

    scheme, sep, rest = given.partition("://")
    if not sep:
        scheme, rest = "http", given
    elif scheme not in ("http", "https"):
        raise error("the scheme must be http:// or https://")
    authority = rest[:-1] if rest.endswith("/") else rest
    if not authority:
        raise error("the host is missing")
    if any(c in authority for c in "/?#@") or any(c.isspace() for c in authority):
        raise error("only a host and a port may be given")
    host, colon, port = authority.rpartition(":")
    if not colon or (host.endswith(":") and not host.startswith("[")):
        raise error("the port is missing")
    if not host or host == "[]":
        raise error("the host is missing")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise error("an IPv6 address goes in brackets, e.g. [::1]:50051")
    if not re.fullmatch(r"\+?[0-9]+", port) or not 1 <= int(port) <= 65535:
        raise error("the port must be a number from 1 to 65535")
    return RegistryAddress(authority, scheme == "https")


def registry_target(address: str) -> str:
    """The gRPC target (host:port) of a registry address; see registry_address."""
    return registry_address(address).target


# --------------------------------------------------------------------------- credentials


class InvalidCredential(ValueError):
    """A token or CA setting that cannot be used. The message names the
    variable, flag or file, never the token."""


def _usable_token(token: str, source: str) -> str:
    if not token:
        raise InvalidCredential(f"{source} is empty: it must hold the agent's API key or JWT")
    if not all("!" <= c <= "~" for c in token):
        raise InvalidCredential(
            f"{source} is not a usable token: a token is one line of visible ASCII characters, "
            "without spaces (an API key or a JWT)"
        )
    return token


def _read_token_file(path: str, source: str) -> str:
    try:
        text = Path(path).read_text(encoding="ascii", errors="replace")
    except OSError as err:
        raise InvalidCredential(f"{source} {path}: {err.strerror or err}") from None
    if text.endswith("\r\n"):
        text = text[:-2]
    elif text.endswith("\n"):
        text = text[:-1]
    return _usable_token(text, f"{source} {path}")


def token_from_env(token_file: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The agent's credential: the file `token_file` (the --token-file flag)
    if given, else TOOLMESH_TOKEN (the key or JWT itself) or
    TOOLMESH_TOKEN_FILE (a file holding it, one line; the trailing line
    break is dropped), else None. Setting both variables is an error.
    Raises InvalidCredential, which never repeats the token.
    """
    env = os.environ if env is None else env
    if token_file:
        return _read_token_file(token_file, "--token-file")
    value, path = env.get("TOOLMESH_TOKEN") or "", env.get("TOOLMESH_TOKEN_FILE") or ""
    if value and path:
        raise InvalidCredential("TOOLMESH_TOKEN and TOOLMESH_TOKEN_FILE are both set: set only one")
    if path:
        return _read_token_file(path, "TOOLMESH_TOKEN_FILE")
    if value:
        return _usable_token(value, "TOOLMESH_TOKEN")
    return None


def ca_file_from_env(ca_file: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    """The CA file an https:// registry's certificate is verified with:
    `ca_file` (the --ca-file flag), else TOOLMESH_CA_FILE, else None (public roots)."""
    env = os.environ if env is None else env
    return ca_file or env.get("TOOLMESH_CA_FILE") or None


def _read_ca(path: str, source: str) -> bytes:
    try:
        pem = Path(path).read_bytes()
    except OSError as err:
        raise InvalidCredential(f"{source} {path}: {err.strerror or err}") from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise InvalidCredential(f"{source} {path}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)")
    return pem


# --------------------------------------------------------------------------- errors


class ToolmeshError(Exception):
    """Base of every error the client raises.

    `code` is the gRPC status code (None for ToolFailed, which is not a
    transport error) and `status` the decoded google.rpc.Status, if any.
    """

    def __init__(
        self,
        message: str,
        code: grpc.StatusCode | None = None,
        status: Any | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


class ToolArgumentError(ToolmeshError):
    """INVALID_ARGUMENT: the arguments are not JSON or fail the tool's schema.

    `violations` lists (path, message) pairs; path is a JSON pointer into the
    arguments (e.g. "/text"), or a request field name such as "arguments_json".
    """

    def __init__(self, message: str, violations: list[tuple[str, str]], **kw: Any) -> None:
        super().__init__(message, **kw)
        self.violations = violations


class ToolNotFound(ToolmeshError):
    """NOT_FOUND: no live instance serves the tool."""

    def __init__(self, message: str, tool: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.tool = tool


class RateLimited(ToolmeshError):
    """RESOURCE_EXHAUSTED: the tool's rate limit is used up.

    `retry_after` is the number of seconds until the next call may succeed
    (from google.rpc.RetryInfo), or None if the registry sent none.
    `quota_violations` lists (subject, description) pairs from QuotaFailure.
    """

    def __init__(
        self,
        message: str,
        retry_after: float | None,
        quota_violations: list[tuple[str, str]],
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after
        self.quota_violations = quota_violations


class ToolFailed(ToolmeshError):
    """The tool ran and reported a failure (InvokeResponse.is_error).

    Not a transport error: show `message` to the LLM so it can re-plan.
    `result` is the tool's error as parsed JSON.
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result


class ToolTimeout(ToolmeshError):
    """DEADLINE_EXCEEDED: the call's deadline (or the tool's timeout) passed."""


class ToolUnavailable(ToolmeshError):
    """UNAVAILABLE: no healthy instance, or the registry cannot be reached."""


class Unauthenticated(ToolmeshError):
    """UNAUTHENTICATED: the registry wants a credential, or refuses the one sent.

    `had_credential` says which: False when the client sent none;
    `status_message` is the registry's reason.
    """

    def __init__(self, message: str, had_credential: bool, status_message: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.had_credential = had_credential
        self.status_message = status_message
        """What the registry said (never the credential)."""


class TaskNotFound(ToolmeshError):
    """NOT_FOUND for a task: unknown, expired (kept for its retention once
    over), or another caller's."""

    def __init__(self, message: str, task_id: str, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.task_id = task_id


class TaskCancelled(ToolmeshError):
    """CANCELLED: the task was cancelled (CancelTask) before it ended."""


class ToolChanged(ToolmeshError):
    """FAILED_PRECONDITION (ErrorInfo TOOL_DIGEST_MISMATCH): the call carried
    a `tool_digest` and the tool's live definition has another one. Nothing
    ran: fetch the definition again (get_tool, search_tools, export_tools),
    show it to the LLM, and call with its digest.

    `tool` is the tool, `shown_digest` the digest the call carried,
    `live_digest` the live definition's, `changed` the names of the fields
    that differ (e.g. ["description", "input_schema_json"]; ["unknown"] when
    the registry never served the shown definition), and `differences` one
    line per field saying how (PreconditionFailure), e.g.
    'description: shown "..." != live "..."'.
    """

    def __init__(
        self,
        message: str,
        tool: str,
        shown_digest: str,
        live_digest: str,
        changed: list[str],
        differences: list[str],
        **kw: Any,
    ) -> None:
        super().__init__(message, **kw)
        self.tool = tool
        self.shown_digest = shown_digest
        self.live_digest = live_digest
        self.changed = changed
        self.differences = differences


NO_CREDENTIAL_HINT = (
    "the registry wants a credential: set TOOLMESH_TOKEN to the agent's API key or JWT, "
    "or TOOLMESH_TOKEN_FILE (or --token-file) to a file holding it"
)


def _rich_status(err: grpc.RpcError) -> Any | None:
    """The google.rpc.Status carried in grpc-status-details-bin, if any."""
    try:
        return rpc_status.from_call(err)  # type: ignore[arg-type]
    except (ValueError, AttributeError, NotImplementedError):
        # No call object, or code/message inconsistent with the details.
        return None


def _unpack(status: Any | None, kind: type) -> Iterator[Any]:
    """Every detail of `status` of the given google.rpc message type."""
    if status is None:
        return
    for detail in status.details:
        if detail.Is(kind.DESCRIPTOR):
            message = kind()
            detail.Unpack(message)
            yield message


TASK_RESOURCE_TYPE = "toolmesh.v1.Task"
"""The ResourceInfo.resource_type of a NOT_FOUND task."""

TOOL_DIGEST_MISMATCH = "TOOL_DIGEST_MISMATCH"
"""The ErrorInfo.reason of a call whose tool_digest is not the tool's live one."""


def _translate(err: grpc.RpcError, tool: str, had_credential: bool = False) -> ToolmeshError:
    """Maps a failed call to the typed exception an agent handles."""
    code = err.code()  # type: ignore[attr-defined]
    message = err.details() or code.name  # type: ignore[attr-defined]
    return _typed_error(code, message, _rich_status(err), tool, had_credential)


def _typed_error(
    code: grpc.StatusCode, message: str, status: Any | None, tool: str, had_credential: bool = False
) -> ToolmeshError:
    """The typed exception of a status: a failed call's, or a failed task's."""
    kw: dict[str, Any] = {"code": code, "status": status}
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        violations = [
            (v.field, v.description)
            for bad in _unpack(status, error_details_pb2.BadRequest)
            for v in bad.field_violations
        ]
        return ToolArgumentError(message, violations, **kw)
    if code == grpc.StatusCode.NOT_FOUND:
        resources = list(_unpack(status, error_details_pb2.ResourceInfo))
        if resources and resources[0].resource_type == TASK_RESOURCE_TYPE:
            return TaskNotFound(message, resources[0].resource_name, **kw)
        names = [r.resource_name for r in resources]
        return ToolNotFound(message, names[0] if names and names[0] else tool, **kw)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        retry_after = None
        for info in _unpack(status, error_details_pb2.RetryInfo):
            if info.HasField("retry_delay"):
                retry_after = info.retry_delay.ToTimedelta().total_seconds()
        quota = [
            (v.subject, v.description)
            for failure in _unpack(status, error_details_pb2.QuotaFailure)
            for v in failure.violations
        ]
        return RateLimited(message, retry_after, quota, **kw)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        for info in _unpack(status, error_details_pb2.ErrorInfo):
            if info.reason == TOOL_DIGEST_MISMATCH:
                differences = [
                    v.description
                    for failure in _unpack(status, error_details_pb2.PreconditionFailure)
                    for v in failure.violations
                    if v.type == "TOOL_CHANGED"
                ]
                return ToolChanged(
                    message,
                    info.metadata.get("tool") or tool,
                    info.metadata.get("shown_digest", ""),
                    info.metadata.get("live_digest", ""),
                    [f.strip() for f in info.metadata.get("changed", "").split(",") if f.strip()],
                    differences,
                    **kw,
                )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ToolTimeout(message, **kw)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ToolUnavailable(message, **kw)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if had_credential:
            return Unauthenticated(f"the registry refused the credential ({message})", True, message, **kw)
        return Unauthenticated(f"{NO_CREDENTIAL_HINT} ({message})", False, message, **kw)
    return ToolmeshError(message, **kw)


# --------------------------------------------------------------------------- tools


@dataclass(frozen=True)
class ToolSpec:
    """A tool as an agent sees it, with its JSON Schemas parsed."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None = None
    version: str = ""
    tags: tuple[str, ...] = ()
    idempotent: bool = False
    timeout: float | None = None
    """Seconds; None means the registry's default."""
    rate: float | None = None
    """Calls per second across all instances; None means unlimited."""
    burst: int | None = None
    instances: int = 0
    digest: str = ""
    """The definition's digest (64 hex digits): pass it as invoke's
    `tool_digest` to call only the definition shown to the LLM."""
    descriptor: Any = field(default=None, repr=False, compare=False)
    """The generated toolmesh.v1.ToolDescriptor message."""

    @classmethod
    def from_proto(cls, tool: Any) -> "ToolSpec":
        d = tool.descriptor
        return cls(
            name=d.name,
            description=d.description,
            input_schema=json.loads(d.input_schema_json) if d.input_schema_json else {"type": "object"},
            output_schema=json.loads(d.output_schema_json) if d.output_schema_json else None,
            version=d.version,
            tags=tuple(d.tags),
            idempotent=d.idempotent,
            timeout=d.timeout.ToTimedelta().total_seconds() if d.HasField("timeout") else None,
            rate=d.rate_limit.rate if d.HasField("rate_limit") else None,
            burst=d.rate_limit.burst if d.HasField("rate_limit") else None,
            instances=tool.instances,
            digest=tool.digest,
            descriptor=d,
        )



EXPORT_FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini", "mcp")


@dataclass(frozen=True)
class ExportedTools:
    """What ExportTools returned: the `tools` value for the LLM API, and one
    (tool, omitted, message) per thing the format could not express."""

    tools: list[Any]
    issues: list[tuple[str, bool, str]]


def _result_of(response: Any) -> Any:
    """The parsed result of an InvokeResponse; raises ToolFailed for is_error."""
    result = json.loads(response.result_json) if response.result_json else None
    if response.is_error:
        if isinstance(result, str):
            message = result
        elif isinstance(result, dict) and isinstance(result.get("message"), str):
            message = result["message"]
        else:
            message = response.result_json or "tool failed"
        raise ToolFailed(message, result)
    return result


# --------------------------------------------------------------------------- tasks

TASK_STATES = ("WORKING", "INPUT_REQUIRED", "COMPLETED", "FAILED", "CANCELLED")
"""The states of a task (MCP's), as Task.state names them."""
_OVER = frozenset({"COMPLETED", "FAILED", "CANCELLED"})
_STATUS_CODES = {code.value[0]: code for code in grpc.StatusCode}


@dataclass(frozen=True)
class TaskProgress:
    """How far a task has come, as its tool reports it."""

    fraction: float | None
    """Done so far, from 0 to 1; None when the tool does not say."""
    message: str
    """What the tool is doing, in words; may be empty."""

    def __str__(self) -> str:
        """`40% counting Q3: step 3 of 5`, or the message alone."""
        percent = f"{min(max(self.fraction, 0.0), 1.0):.0%}" if self.fraction is not None else ""
        return " ".join(part for part in (percent, self.message.strip()) if part)


@dataclass(frozen=True)
class Task:
    """A call that outlives one request (the Tasks service), as an agent sees it.

    Started by ToolmeshClient.start_task; followed by wait_task or
    watch_task; `result()` once it is over gives what invoke would have.
    """

    id: str
    tool: str
    state: str
    """One of TASK_STATES: WORKING, INPUT_REQUIRED, COMPLETED, FAILED, CANCELLED."""
    status_message: str
    progress: TaskProgress | None
    """The last progress its tool reported; None if none."""
    revision: int
    """Every change makes it larger."""
    message: Any = field(default=None, repr=False, compare=False)
    """The generated toolmesh.v1.Task message."""

    @classmethod
    def from_proto(cls, task: Any) -> "Task":
        progress = None
        if task.HasField("progress"):
            fraction = task.progress.fraction if task.progress.HasField("fraction") else None
            progress = TaskProgress(fraction, task.progress.message)
        return cls(
            id=task.id,
            tool=task.tool,
            state=toolmesh_pb2.TaskState.Name(task.state).removeprefix("TASK_STATE_"),
            status_message=task.status_message,
            progress=progress,
            revision=task.revision,
            message=task,
        )

    @property
    def over(self) -> bool:
        """True once COMPLETED, FAILED or CANCELLED: it never changes again."""
        return self.state in _OVER

    def result(self) -> Any:
        """What invoke would have returned: the parsed result of a COMPLETED
        task. Raises what invoke would have raised: ToolFailed when the tool
        ran and failed, the typed error of a FAILED task's status
        (ToolTimeout, ToolUnavailable, ...), TaskCancelled for a CANCELLED
        one; a ToolmeshError while the task is not over."""
        outcome = self.message.WhichOneof("outcome") if self.message is not None else None
        if outcome == "response":
            return _result_of(self.message.response)
        if outcome == "error":
            error = self.message.error
            code = _STATUS_CODES.get(error.code, grpc.StatusCode.UNKNOWN)
            status = status_pb2.Status.FromString(error.details) if error.details else None
            message = error.message or code.name
            if self.state == "CANCELLED":
                raise TaskCancelled(message, code=code, status=status)
            raise _typed_error(code, message, status, self.tool)
        raise ToolmeshError(f"task {self.id} is {self.state}: it has not ended")


# --------------------------------------------------------------------------- client


class ToolmeshClient:
    """Discovers and calls tools through a toolmesh registry.

    >>> with ToolmeshClient("127.0.0.1:50051") as mesh:
    ...     tools = mesh.as_openai_tools()
    ...     result = mesh.invoke("word_count", {"text": "a b c"})
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        token: str | None = None,
        ca_file: str | None = None,
        channel: grpc.Channel | None = None,
        default_timeout: float | None = 30.0,
    ) -> None:
        """`target` is host:port or http://host:port (plaintext), or
        https://host:port (TLS; see registry_address, which raises
        InvalidAddress for anything else).

        `token` (an API key or a JWT) is sent as `authorization: Bearer
        <token>` on every call; `ca_file` (PEM) verifies an https://
        registry's certificate instead of the public roots, and is refused
        with a plaintext address. Pass `channel` for custom options.
        ToolmeshClient.from_env() reads all three from the environment.
        """
        if token is not None:
            _usable_token(token, "the token")
        self._metadata = (("authorization", f"Bearer {token}"),) if token is not None else ()
        if channel is None:
            address = registry_address(target)
            if address.tls:
                roots = _read_ca(ca_file, "the CA file") if ca_file else None
                channel = grpc.secure_channel(address.target, grpc.ssl_channel_credentials(root_certificates=roots))
            elif ca_file:
                raise InvalidCredential(
                    f"a CA file is given but {json.dumps(target)} is plaintext: write https://{address.target} for TLS"
                )
            else:
                channel = grpc.insecure_channel(address.target)
        self._channel = channel
        self._stub = toolmesh_pb2_grpc.ToolRegistryStub(self._channel)
        self._tasks = toolmesh_pb2_grpc.TasksStub(self._channel)
        self.default_timeout = default_timeout

    @classmethod
    def from_env(
        cls,
        target: str | None = None,
        *,
        token_file: str | None = None,
        ca_file: str | None = None,
        **kw: Any,
    ) -> "ToolmeshClient":
        """A client set up from the environment: the registry from
        TOOLMESH_REGISTRY (unless `target`), the credential by
        token_from_env and the CA by ca_file_from_env."""
        return cls(
            target or os.environ.get("TOOLMESH_REGISTRY") or "127.0.0.1:50051",
            token=token_from_env(token_file),
            ca_file=ca_file_from_env(ca_file),
            **kw,
        )

    def __repr__(self) -> str:
        # Never the token.
        return f"ToolmeshClient(credential={'yes' if self._metadata else 'no'})"

    def _failed(self, err: grpc.RpcError, tool: str) -> ToolmeshError:
        return _translate(err, tool, had_credential=bool(self._metadata))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "ToolmeshClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_tools(self, tags: list[str] | None = None, timeout: float | None = None) -> list[ToolSpec]:
        """The tools with at least one live instance, sorted by name."""
        try:
            response = self._stub.ListTools(
                toolmesh_pb2.ListToolsRequest(tags=tags or []),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        return [ToolSpec.from_proto(t) for t in response.tools]

    def get_tool(self, name: str, timeout: float | None = None) -> ToolSpec:
        """One tool; raises ToolNotFound if it has no live instance."""
        try:
            tool = self._stub.GetTool(
                toolmesh_pb2.GetToolRequest(name=name),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, name) from None
        return ToolSpec.from_proto(tool)

    def export_tools(
        self,
        format: str,
        tags: list[str] | None = None,
        names: list[str] | None = None,
        timeout: float | None = None,
    ) -> "ExportedTools":
        """The live tools as an LLM API takes them in its `tools` parameter,
        converted by the registry (ExportTools). `format` is one of
        openai_chat, openai_responses, anthropic, gemini, mcp; `names`
        picks tools (in that order). What the format cannot express is in
        the result's `issues`, never silently changed."""
        value = getattr(toolmesh_pb2, f"EXPORT_FORMAT_{format.upper()}", None)
        if value is None or format.upper() == "UNSPECIFIED":
            raise ValueError(f"unknown export format {format!r}: one of {', '.join(EXPORT_FORMATS)}")
        try:
            response = self._stub.ExportTools(
                toolmesh_pb2.ExportToolsRequest(format=value, tags=tags or [], names=names or []),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        return ExportedTools(
            tools=json.loads(response.tools_json),
            issues=[(i.tool, i.omitted, i.message) for i in response.issues],
        )

    def search_tools(
        self, query: str, limit: int = 5, tags: list[str] | None = None, timeout: float | None = None
    ) -> list[tuple[ToolSpec, float]]:
        """The tools most relevant to a task described in words (SearchTools),
        best first, each with its relevance score."""
        try:
            response = self._stub.SearchTools(
                toolmesh_pb2.SearchToolsRequest(query=query, limit=limit, tags=tags or []),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        return [(ToolSpec.from_proto(m.tool), m.score) for m in response.matches]

    def as_openai_tools(self, tags: list[str] | None = None) -> list[dict[str, Any]]:
        """The live tools as OpenAI Chat Completions function definitions
        (the `tools` parameter), as the registry exports them."""
        return self.export_tools("openai_chat", tags).tools

    def invoke(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        *,
        tool_digest: str | None = None,
    ) -> Any:
        """Calls a tool and returns its parsed JSON result.

        Raises ToolArgumentError, ToolNotFound, RateLimited, ToolFailed,
        ToolTimeout, ToolUnavailable, Unauthenticated, ToolChanged (all
        ToolmeshError). `timeout` (seconds) becomes the gRPC deadline; the
        registry applies min(deadline, tool timeout). `tool_digest` (a
        ToolSpec's `digest`) binds the call to the definition the LLM was
        shown: if the tool has changed since, nothing runs and ToolChanged
        is raised.
        """
        request = toolmesh_pb2.InvokeRequest(
            tool=name,
            arguments_json=json.dumps(args if args is not None else {}),
            idempotency_key=idempotency_key or "",
            tool_digest=tool_digest or "",
        )
        try:
            response = self._stub.Invoke(request, timeout=timeout or self.default_timeout, metadata=self._metadata)
        except grpc.RpcError as err:
            raise self._failed(err, name) from None
        return _result_of(response)

    def start_task(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
        *,
        tool_digest: str | None = None,
    ) -> Task:
        """Starts a call as a task (Tasks.StartTask): the tool may run for
        its task timeout, past the interactive one, with no request open.
        Returns the task once an instance has taken it (WORKING, or already
        over for a quick tool). A call invoke would refuse is refused here
        with the same exception (ToolChanged for a stale `tool_digest`
        included), and no task is made; a repeated `idempotency_key`
        returns the first call's task.
        """
        call = toolmesh_pb2.InvokeRequest(
            tool=name,
            arguments_json=json.dumps(args if args is not None else {}),
            idempotency_key=idempotency_key or "",
            tool_digest=tool_digest or "",
        )
        try:
            task = self._tasks.StartTask(
                toolmesh_pb2.StartTaskRequest(call=call),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, name) from None
        return Task.from_proto(task)

    def get_task(self, task_id: str, timeout: float | None = None) -> Task:
        """One task as it is now; raises TaskNotFound if it is unknown,
        expired or another caller's."""
        try:
            task = self._tasks.GetTask(
                toolmesh_pb2.GetTaskRequest(id=task_id),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        return Task.from_proto(task)

    def watch_task(self, task_id: str, timeout: float | None = None) -> Iterator[Task]:
        """The task as it is, then the task each time it changes (progress,
        the end), ending after it is over (Tasks.WatchTask). At the deadline
        (`timeout` seconds, else the client's default) it raises ToolTimeout;
        the task goes on."""
        stream = self._tasks.WatchTask(
            toolmesh_pb2.WatchTaskRequest(id=task_id),
            timeout=timeout or self.default_timeout,
            metadata=self._metadata,
        )
        try:
            for task in stream:
                yield Task.from_proto(task)
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        finally:
            stream.cancel()

    def wait_task(
        self,
        task_id: str,
        timeout: float | None = None,
        on_change: Callable[[Task], None] | None = None,
    ) -> Task:
        """Follows a task until it is over and returns it as it ended (call
        its result()). `on_change` is called with the task as it is and at
        each change until then (its progress, a state such as
        INPUT_REQUIRED). `timeout` (seconds) bounds the wait: ToolTimeout
        when it passes, the task going on. Without one it waits until the
        task ends, watching again whenever a watch reaches the client's
        default deadline.
        """
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                raise ToolTimeout(
                    f"task {task_id} did not end within {timeout:g}s; it goes on",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            watch = self.default_timeout if left is None else min(left, self.default_timeout or left)
            try:
                for task in self.watch_task(task_id, timeout=watch):
                    if task.over:
                        return task
                    if on_change is not None:
                        on_change(task)
            except ToolTimeout:
                continue  # that watch's deadline: watch again, or end above
            # The stream ended before the task did (it should not): read it.
            task = self.get_task(task_id)
            if task.over:
                return task

    def cancel_task(self, task_id: str, timeout: float | None = None) -> Task:
        """Cancels a task: it ends CANCELLED at once and its backend is
        stopped. A task already over is returned as it is."""
        try:
            task = self._tasks.CancelTask(
                toolmesh_pb2.CancelTaskRequest(id=task_id),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        return Task.from_proto(task)

    def list_tasks(
        self, page_size: int = 0, page_token: str = "", timeout: float | None = None
    ) -> tuple[list[Task], str]:
        """One page of the caller's tasks, newest first, and the next
        page's token ("" on the last page). `page_size` 0 means 50."""
        try:
            response = self._tasks.ListTasks(
                toolmesh_pb2.ListTasksRequest(page_size=page_size, page_token=page_token),
                timeout=timeout or self.default_timeout,
                metadata=self._metadata,
            )
        except grpc.RpcError as err:
            raise self._failed(err, "") from None
        return [Task.from_proto(t) for t in response.tasks], response.next_page_token


# --------------------------------------------------------------------------- CLI

EXIT_OK = 0
EXIT_OTHER = 1
"""Any other error from the registry (e.g. INTERNAL)."""
EXIT_USAGE = 2
"""A bad command line: unknown flag, no tool named, arguments not a JSON object, bad --registry,
an unusable token or CA setting."""
EXIT_RATE_LIMITED = 3
EXIT_TOOL_FAILED = 4
"""The tool ran and reported a failure (is_error)."""
EXIT_INVALID_ARGUMENTS = 5
EXIT_NOT_FOUND = 6
EXIT_TIMEOUT = 7
EXIT_UNAVAILABLE = 8
EXIT_UNAUTHENTICATED = 9
"""No credential, or one the registry refuses (UNAUTHENTICATED)."""

_USAGE = """\
agent.py [--registry ADDR] [--token-file FILE] [--ca-file PEM] list [--openai]
       agent.py [--registry ADDR] [--token-file FILE] [--ca-file PEM] [--timeout S] [--idempotency-key K] [--task] [call] TOOL [JSON|-]"""

_EPILOG = """\
TOOL's result is printed alone on stdout, as JSON. JSON defaults to {};
- reads it from stdin. `call` is only needed for a tool named "list" or "call".
--task starts the call as a task, which may run for the tool's task timeout:
its progress goes to stderr, its result to stdout; --timeout then bounds the
wait (the task goes on), which is otherwise as long as the task runs.

credential (sent as `authorization: Bearer ...`): --token-file FILE, else
TOOLMESH_TOKEN (the API key or JWT) or TOOLMESH_TOKEN_FILE (a file holding
it). An https:// registry is TLS, verified with --ca-file or TOOLMESH_CA_FILE
(PEM), else the public roots.

exit codes: 0 result printed, 1 other registry error, 2 bad command line,
3 rate limited, 4 the tool failed (is_error), 5 arguments refused
(INVALID_ARGUMENT), 6 unknown tool, 7 timed out, 8 registry or tool
unavailable, 9 no credential or a refused one (UNAUTHENTICATED)."""


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line in one line, exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0, e.g. 2.5")
    return value


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array"}.get(type(value), "object")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(
        prog="agent.py",
        usage=_USAGE,
        description="List the tools of a toolmesh registry, or call one.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--registry",
        metavar="ADDR",
        default=os.environ.get("TOOLMESH_REGISTRY") or "127.0.0.1:50051",
        help="registry address, host:port, http://host:port or https://host:port (TLS) "
        "(env TOOLMESH_REGISTRY; default 127.0.0.1:50051)",
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help="file holding the API key or JWT, one line (else env TOOLMESH_TOKEN or TOOLMESH_TOKEN_FILE)",
    )
    parser.add_argument(
        "--ca-file",
        metavar="PEM",
        default=None,
        help="CA certificates an https:// registry is verified with (env TOOLMESH_CA_FILE; default: public roots)",
    )
    parser.add_argument("--openai", action="store_true", help="with list: print OpenAI tool definitions")
    parser.add_argument("--timeout", type=_positive_seconds, default=None, metavar="SECONDS", help="deadline of the call, in seconds")
    parser.add_argument("--idempotency-key", default=None, metavar="KEY", help="calls with the same key run the tool once")
    parser.add_argument("--task", action="store_true", help="start the call as a task and wait for its end, showing its progress")
    parser.add_argument("words", nargs="*", metavar="list | [call] TOOL [JSON]", help=argparse.SUPPRESS)
    opts, unknown = parser.parse_known_intermixed_args(argv)
    if unknown:
        raise _UsageError(f"unknown option {unknown[0].split('=')[0]}")

    words = list(opts.words)
    opts.command, opts.tool, opts.arguments = "call", None, {}
    if words[:1] == ["list"]:
        if len(words) > 1:
            raise _UsageError(f"list takes no arguments, got {' '.join(words[1:])!r}")
        if opts.task:
            raise _UsageError("--task goes with a call, not with list")
        opts.command = "list"
        return opts
    if opts.openai:
        raise _UsageError("--openai only goes with list")
    if words[:1] == ["call"]:
        words = words[1:]
        if not words:
            raise _UsageError("name the tool to call after call")
    if not words:
        raise _UsageError("name a tool to call, or list to see them")
    if len(words) > 2:
        raise _UsageError(
            f"too many arguments after {words[0]}: pass the tool's arguments as one JSON object, "
            """e.g. '{"text": "a b c"}'"""
        )
    opts.tool = words[0]
    text = words[1] if len(words) == 2 else "{}"
    if text == "-":
        text = sys.stdin.read()
    try:
        opts.arguments = json.loads(text)
    except json.JSONDecodeError as err:
        raise _UsageError(
            f"the arguments are not JSON ({err.msg} at line {err.lineno} column {err.colno}): "
            """write one JSON object, e.g. '{"text": "a b c"}'"""
        ) from None
    if not isinstance(opts.arguments, dict):
        raise _UsageError(
            f"the arguments must be a JSON object, not {_json_kind(opts.arguments)}: "
            """e.g. '{"text": "a b c"}'"""
        )
    return opts


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _run_task(mesh: ToolmeshClient, opts: argparse.Namespace) -> Any:
    """`--task`: starts the call as a task, shows its progress on stderr
    until it ends, and returns its result (raising as invoke would)."""
    task = mesh.start_task(opts.tool, opts.arguments, idempotency_key=opts.idempotency_key)
    print(f"task {task.id} started: {task.tool} {task.state}", file=sys.stderr, flush=True)
    state, progress = task.state, None

    def show(now: Task) -> None:
        nonlocal state, progress
        if now.state != state:
            print(f"task {now.id}: {now.state} {now.status_message}".rstrip(), file=sys.stderr, flush=True)
        if now.progress is not None and now.progress != progress:
            print(f"progress: {now.progress}", file=sys.stderr, flush=True)
        state, progress = now.state, now.progress

    if not task.over:
        task = mesh.wait_task(task.id, timeout=opts.timeout, on_change=show)
    return task.result()


def main(argv: list[str] | None = None) -> int:
    """The CLI: see the module's docstring and `agent.py --help`."""
    try:
        opts = _parse(argv)
        registry = registry_address(opts.registry)
        token = token_from_env(opts.token_file)
        ca_file = ca_file_from_env(opts.ca_file)
        source = "--ca-file" if opts.ca_file else "TOOLMESH_CA_FILE"
        if ca_file and registry.tls:
            _read_ca(ca_file, source)
        if ca_file and not registry.tls:
            raise InvalidCredential(
                f"{source} is set but the registry {json.dumps(opts.registry)} is plaintext: "
                f"write https://{registry.target} for TLS"
            )
        mesh = ToolmeshClient(opts.registry, token=token, ca_file=ca_file)
    except (_UsageError, InvalidAddress, InvalidCredential) as err:
        what = "--registry " if isinstance(err, InvalidAddress) else ""
        print(f"agent.py: error: {what}{_one_line(str(err))} (see --help)", file=sys.stderr)
        return EXIT_USAGE
    if opts.token_file:
        token_source = "--token-file"
    else:
        token_source = "TOOLMESH_TOKEN_FILE" if os.environ.get("TOOLMESH_TOKEN_FILE") else "TOOLMESH_TOKEN"

    with mesh:
        try:
            if opts.command == "list":
                if opts.openai:
                    print(json.dumps(mesh.export_tools("openai_chat", timeout=opts.timeout).tools, indent=2))
                else:
                    tools = mesh.list_tools(timeout=opts.timeout)
                    for tool in tools:
                        limit = f", {tool.rate:g}/s burst {tool.burst}" if tool.rate else ""
                        print(f"{tool.name}: {tool.description} ({tool.instances} instance(s){limit})")
                return EXIT_OK
            if opts.task:
                result = _run_task(mesh, opts)
            else:
                result = mesh.invoke(
                    opts.tool, opts.arguments, idempotency_key=opts.idempotency_key, timeout=opts.timeout
                )
            print(json.dumps(result))
            return EXIT_OK
        except ToolArgumentError as err:
            print(f"invalid arguments: {err.message}", file=sys.stderr)
            for path, why in err.violations:
                print(f"  {path or '/'}: {why}", file=sys.stderr)
            return EXIT_INVALID_ARGUMENTS
        except RateLimited as err:
            print(f"rate limited, retry in {err.retry_after}s: {err.message}", file=sys.stderr)
            return EXIT_RATE_LIMITED
        except ToolFailed as err:
            print(f"tool failed: {err.message}", file=sys.stderr)
            return EXIT_TOOL_FAILED
        except Unauthenticated as err:
            if err.had_credential:
                print(f"the registry refused the credential from {token_source} ({err.status_message})", file=sys.stderr)
            else:
                print(err.message, file=sys.stderr)
            return EXIT_UNAUTHENTICATED
        except ToolmeshError as err:
            print(f"{type(err).__name__} ({err.code.name if err.code else '-'}): {err.message}", file=sys.stderr)
            if isinstance(err, (ToolNotFound, TaskNotFound)):
                return EXIT_NOT_FOUND
            if isinstance(err, ToolTimeout):
                return EXIT_TIMEOUT
            if isinstance(err, ToolUnavailable):
                return EXIT_UNAVAILABLE
            return EXIT_OTHER


if __name__ == "__main__":
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head -1`): not an error worth a traceback.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = EXIT_OK
    sys.exit(code)
