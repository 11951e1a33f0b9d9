"""A small toolmesh agent library and CLI.

The gRPC stubs are generated from proto/ into gen/ by ./generate.sh; nothing in
this file hand-writes a protobuf message. Errors come back as typed exceptions
decoded from the google.rpc.Status the registry sends in grpc-status-details-bin.

    python3 agent.py --registry 127.0.0.1:50051                # list the tools
    python3 agent.py --registry 127.0.0.1:50051 word_count '{"text": "a b c"}'
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

_GEN_DIR = Path(__file__).resolve().parent / "gen"
if str(_GEN_DIR) not in sys.path:
    sys.path.insert(0, str(_GEN_DIR))
try:
    from toolmesh.v1 import toolmesh_pb2, toolmesh_pb2_grpc
except ImportError as exc:  # pragma: no cover - only without generated stubs
    raise ImportError(
        f"toolmesh stubs not found in {_GEN_DIR}: run ./generate.sh first"
    ) from exc

__all__ = [
    "ToolSpec",
    "ToolmeshClient",
    "ToolmeshError",
    "ToolArgumentError",
    "ToolNotFound",
    "RateLimited",
    "ToolFailed",
    "ToolTimeout",
    "ToolUnavailable",
]


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


def _translate(err: grpc.RpcError, tool: str) -> ToolmeshError:
    """Maps a failed call to the typed exception an agent handles."""
    code = err.code()  # type: ignore[attr-defined]
    message = err.details() or code.name  # type: ignore[attr-defined]
    status = _rich_status(err)
    kw: dict[str, Any] = {"code": code, "status": status}
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        violations = [
            (v.field, v.description)
            for bad in _unpack(status, error_details_pb2.BadRequest)
            for v in bad.field_violations
        ]
        return ToolArgumentError(message, violations, **kw)
    if code == grpc.StatusCode.NOT_FOUND:
        names = [r.resource_name for r in _unpack(status, error_details_pb2.ResourceInfo)]
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
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return ToolTimeout(message, **kw)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ToolUnavailable(message, **kw)
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
            descriptor=d,
        )

    def as_openai_tool(self) -> dict[str, Any]:
        """This tool as an OpenAI function-calling definition."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }


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
        channel: grpc.Channel | None = None,
        default_timeout: float | None = 30.0,
    ) -> None:
        """`target` is host:port (plaintext); pass `channel` for TLS or custom options."""
        self._channel = channel if channel is not None else grpc.insecure_channel(target)
        self._stub = toolmesh_pb2_grpc.ToolRegistryStub(self._channel)
        self.default_timeout = default_timeout

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
            )
        except grpc.RpcError as err:
            raise _translate(err, "") from None
        return [ToolSpec.from_proto(t) for t in response.tools]

    def get_tool(self, name: str, timeout: float | None = None) -> ToolSpec:
        """One tool; raises ToolNotFound if it has no live instance."""
        try:
            tool = self._stub.GetTool(
                toolmesh_pb2.GetToolRequest(name=name), timeout=timeout or self.default_timeout
            )
        except grpc.RpcError as err:
            raise _translate(err, name) from None
        return ToolSpec.from_proto(tool)

    def as_openai_tools(self, tags: list[str] | None = None) -> list[dict[str, Any]]:
        """The live tools as OpenAI function-calling definitions (the `tools` parameter)."""
        return [t.as_openai_tool() for t in self.list_tools(tags)]

    def invoke(
        self,
        name: str,
        args: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Calls a tool and returns its parsed JSON result.

        Raises ToolArgumentError, ToolNotFound, RateLimited, ToolFailed,
        ToolTimeout, ToolUnavailable (all ToolmeshError).
        `timeout` (seconds) becomes the gRPC deadline; the registry applies
        min(deadline, tool timeout).
        """
        request = toolmesh_pb2.InvokeRequest(
            tool=name,
            arguments_json=json.dumps(args if args is not None else {}),
            idempotency_key=idempotency_key or "",
        )
        try:
            response = self._stub.Invoke(request, timeout=timeout or self.default_timeout)
        except grpc.RpcError as err:
            raise _translate(err, name) from None
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


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="List toolmesh tools and call one.")
    parser.add_argument("--registry", default="127.0.0.1:50051", help="registry host:port")
    parser.add_argument("--openai", action="store_true", help="print the tools as OpenAI definitions")
    parser.add_argument("tool", nargs="?", help="tool to call")
    parser.add_argument("arguments", nargs="?", default="{}", help="arguments as a JSON object")
    parser.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    opts = parser.parse_args(argv)

    with ToolmeshClient(opts.registry) as mesh:
        try:
            if opts.openai:
                print(json.dumps(mesh.as_openai_tools(), indent=2))
            else:
                for tool in mesh.list_tools():
                    limit = f", {tool.rate:g}/s burst {tool.burst}" if tool.rate else ""
                    print(f"{tool.name}: {tool.description} ({tool.instances} instance(s){limit})")
            if opts.tool:
                result = mesh.invoke(opts.tool, json.loads(opts.arguments), timeout=opts.timeout)
                print(json.dumps(result))
        except ToolArgumentError as err:
            print(f"invalid arguments: {err.message}", file=sys.stderr)
            for path, why in err.violations:
                print(f"  {path or '/'}: {why}", file=sys.stderr)
            return 2
        except RateLimited as err:
            print(f"rate limited, retry in {err.retry_after}s: {err.message}", file=sys.stderr)
            return 3
        except ToolFailed as err:
            print(f"tool failed: {err.message}", file=sys.stderr)
            return 4
        except ToolmeshError as err:
            print(f"{type(err).__name__} ({err.code.name if err.code else '-'}): {err.message}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
