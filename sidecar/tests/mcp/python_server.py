"""A small MCP server written with the official Python SDK (`mcp`), served
over streamable HTTP on 127.0.0.1: the peer the sidecar's interop tests wrap.

    python3 python_server.py PORT

Its tools: `add` (structured output), `echo`, `divide` (fails on b = 0: an isError
result), `whoami` (the request's `_meta`), and `add_tool`, which adds a tool at run time and tells connected
clients with notifications/tools/list_changed.
"""

import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

server = MCPServer("toolmesh-interop", log_level="WARNING")


@server.tool(title="Add", annotations=ToolAnnotations(readOnlyHint=True, idempotentHint=True))
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Returns the text it is given (the MCP benchmark's tool)."""
    return text


@server.tool()
def divide(a: float, b: float) -> float:
    """Divides a by b."""
    if b == 0:
        raise ToolError("cannot divide by zero")
    return a / b


@server.tool()
def whoami(ctx: Context) -> dict:
    """The request's _meta: trace context, caller, invocation id."""
    meta = ctx.request_context.meta
    if meta is None:
        return {}
    if hasattr(meta, "model_dump"):
        return meta.model_dump(by_alias=True, exclude_none=True)
    return dict(meta)


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool called `name` that greets, and says the list changed."""

    def greet() -> str:
        return f"hello from {name}"

    server.add_tool(greet, name=name, description="A tool added at run time")
    # Clients on 2026-07-28 listen on subscriptions/listen; clients on the
    # handshake revisions get the notification on their session.
    await ctx.notify_tools_changed()
    try:
        await ctx.session.send_tool_list_changed()
    except Exception:  # a 2026-07-28 request has no session to send on
        pass
    return "added"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
