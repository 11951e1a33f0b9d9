#!/usr/bin/env python3
"""An MCP host's view of a toolmesh registry: the official Python `mcp` SDK,
unmodified, against the registry's `/mcp` endpoint.

Run by `registry/tests/integration/mcp_python.rs`, which starts the registry
and the sidecars and checks what this prints: one JSON object per line, each
with a `step`. The revision to speak is `--revision`: 2026-07-28 is adopted
through `server/discover` (no handshake); the older ones through the
`initialize` handshake offering exactly that revision.

Scenarios (`--scenario`):
- `interop`: connect, list every page, call (success, a schema violation, a
  tool error, a rate limit, an unknown tool, the search tool), then wait for
  two `tools/list_changed` notifications, the test adding then removing a
  tool after each `waiting` line.
- `connect`: connect and list, and print what failed if anything did.
- `content`: call `everything.echo` and `everything.get-tiny-image` (the
  test wraps server-everything behind a sidecar) and print each content
  block as the SDK parsed it.
- `task`: through the SDK's high-level `Client` with the Tasks extension
  (`tasks_extension.py`), call `--tool`: the registry answers with a task
  handle, the extension polls `tasks/get` until it is over, and the call
  returns the tool's result. Every handle and poll is printed.
- `task-cancel`: the same call, cancelled once a poll saw it working: the
  extension sends `tasks/cancel`.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import listen
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types.version import LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

NOTIFICATION_TIMEOUT = 60.0
MAX_PAGES = 50


def emit(step: str, **fields: Any) -> None:
    print(json.dumps({"step": step, **fields}, default=str), flush=True)


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


class GetStreamOpened(logging.Handler):
    """Sets an event when the transport logs that its GET stream (where a
    handshake-era server sends notifications) is established."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.opened = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "GET SSE connection established" in record.getMessage():
            self.opened.set()


async def connect(session: ClientSession, revision: str) -> None:
    if revision in MODERN_PROTOCOL_VERSIONS:
        await session.discover()
    elif revision == LATEST_HANDSHAKE_VERSION:
        await session.initialize()
    else:
        result = await session.send_request(
            types.InitializeRequest(
                params=types.InitializeRequestParams(
                    protocol_version=revision,
                    capabilities=types.ClientCapabilities(),
                    client_info=types.Implementation(name="toolmesh-interop", version="1.0"),
                )
            ),
            types.InitializeResult,
        )
        session.adopt(result)
        await session.send_notification(types.InitializedNotification())


async def list_all(session: ClientSession) -> tuple[list[str], int, dict[str, Any]]:
    names: list[str] = []
    tools: dict[str, Any] = {}
    cursor: str | None = None
    pages = 0
    while pages < MAX_PAGES:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        pages += 1
        for tool in result.tools:
            names.append(tool.name)
            tools[tool.name] = dump(tool)
        cursor = result.next_cursor
        if not cursor:
            break
    return names, pages, tools


def summary(result: types.CallToolResult) -> dict[str, Any]:
    dumped = dump(result)
    return {
        "isError": bool(result.is_error),
        "text": "\n".join(c.get("text", "") for c in dumped.get("content", [])),
        "structured": dumped.get("structuredContent"),
        "meta": dumped.get("_meta"),
    }


async def calls(session: ClientSession) -> None:
    result = await session.call_tool("add", {"a": 2, "b": 40})
    await session.validate_tool_result("add", result)
    emit("call", **summary(result))

    emit("invalid", **summary(await session.call_tool("add", {"a": "two"})))
    emit("tool_error", **summary(await session.call_tool("add", {"a": 13, "b": 1})))

    outcomes = [summary(await session.call_tool("limited", {"a": 1, "b": 1})) for _ in range(3)]
    emit("rate_limited", outcomes=outcomes)

    try:
        await session.call_tool("nope", {})
        emit("unknown", raised=False)
    except MCPError as error:
        emit("unknown", raised=True, code=error.code, message=error.message)

    found = await session.call_tool("toolmesh.search_tools", {"query": "add two integers"})
    emit("search", **summary(found))


async def content(session: ClientSession) -> None:
    for name, arguments in (("everything.echo", {"message": "hi"}), ("everything.get-tiny-image", {})):
        result = await session.call_tool(name, arguments)
        blocks = [{"class": type(block).__name__, **dump(block)} for block in result.content]
        emit("content", tool=name, isError=bool(result.is_error), blocks=blocks)


class Changes:
    """`tools/list_changed` notifications of a handshake-era session: the
    next one after `expect()`."""

    def __init__(self) -> None:
        self.changed = anyio.Event()

    def notified(self) -> None:
        self.changed.set()

    def expect(self) -> anyio.Event:
        self.changed = anyio.Event()
        return self.changed


async def interop(session: ClientSession, revision: str, opened: GetStreamOpened, changes: Changes) -> None:
    names, pages, tools = await list_all(session)
    emit("list", names=names, pages=pages, tools=tools)
    await calls(session)
    if revision in MODERN_PROTOCOL_VERSIONS:
        async with listen(session, tools_list_changed=True) as subscription:
            emit("subscribed", honored=dump(subscription.honored))
            for label in ("joined", "left"):
                emit("waiting", label=label)
                with anyio.fail_after(NOTIFICATION_TIMEOUT):
                    event = await subscription.__anext__()
                names, _, _ = await list_all(session)
                emit("list_changed", label=label, names=names, event=type(event).__name__)
    else:
        with anyio.fail_after(NOTIFICATION_TIMEOUT):
            await opened.opened.wait()
        for label in ("joined", "left"):
            changed = changes.expect()
            emit("waiting", label=label)
            with anyio.fail_after(NOTIFICATION_TIMEOUT):
                await changed.wait()
            names, _, _ = await list_all(session)
            emit("list_changed", label=label, names=names)


async def tasks(url: str, scenario: str, tool: str) -> None:
    from tasks_extension import TasksExtension

    working = anyio.Event()
    task_id: list[str] = []

    def observe(kind: str, value: Any) -> None:
        fields = dump(value)
        emit("observed", kind=kind, **fields)
        if kind == "created":
            task_id.append(value.task_id)
        if kind == "polled" and value.status == "working":
            working.set()

    client = Client(
        url,
        extensions=[TasksExtension(observe)],
        read_timeout_seconds=60.0,
        client_info=types.Implementation(name="toolmesh-interop", version="1.0"),
    )
    async with client:
        emit("connected", protocolVersion=client.protocol_version)
        if scenario == "task":
            result = await client.call_tool(tool, {})
            emit("task", **summary(result))
            return
        async with anyio.create_task_group() as group:
            group.start_soon(client.call_tool, tool, {})
            with anyio.fail_after(NOTIFICATION_TIMEOUT):
                await working.wait()
            group.cancel_scope.cancel()
        emit("task_cancelled", taskId=task_id[0] if task_id else None)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--token")
    parser.add_argument(
        "--scenario", default="interop", choices=["interop", "connect", "content", "task", "task-cancel"]
    )
    parser.add_argument("--tool", default="long")
    args = parser.parse_args()
    if args.scenario.startswith("task"):
        try:
            await tasks(args.url, args.scenario, args.tool)
        except BaseException as error:  # noqa: BLE001 - the test reads what failed
            emit("failed", error=repr(error), type=type(error).__name__)
            return 1
        emit("done")
        return 0

    # The SDK's warnings on stderr, where the test looks for them (the
    # transport's logger gets a handler below, so Python's last resort
    # would not print them).
    warnings = logging.StreamHandler(sys.stderr)
    warnings.setLevel(logging.WARNING)
    logging.getLogger().addHandler(warnings)

    opened = GetStreamOpened()
    transport_log = logging.getLogger("mcp.client.streamable_http")
    transport_log.setLevel(logging.DEBUG)
    transport_log.addHandler(opened)

    changes = Changes()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            emit("notification", method="notifications/tools/list_changed")
            changes.notified()
        elif isinstance(message, Exception):
            emit("transport_error", error=repr(message))

    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    timeout = httpx2.Timeout(30.0, read=120.0)
    try:
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
            async with streamable_http_client(args.url, http_client=http) as (read, write):
                dispatcher = JSONRPCDispatcher(read, write)
                async with ClientSession(
                    dispatcher=dispatcher,
                    message_handler=on_message,
                    read_timeout_seconds=60.0,
                    client_info=types.Implementation(name="toolmesh-interop", version="1.0"),
                ) as session:
                    await connect(session, args.revision)
                    info = session.server_info
                    emit(
                        "connected",
                        protocolVersion=session.protocol_version,
                        server=info.name if info else None,
                        listChanged=bool(
                            session.server_capabilities
                            and session.server_capabilities.tools
                            and session.server_capabilities.tools.list_changed
                        ),
                    )
                    if args.scenario == "connect":
                        names, pages, _ = await list_all(session)
                        emit("list", names=names, pages=pages)
                    elif args.scenario == "content":
                        await content(session)
                    else:
                        await interop(session, args.revision, opened, changes)
    except BaseException as error:  # noqa: BLE001 - the test reads what failed
        emit("failed", error=repr(error), type=type(error).__name__)
        return 1
    emit("done")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
