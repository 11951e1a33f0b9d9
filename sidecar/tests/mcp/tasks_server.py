"""An MCP server written with the official Python SDK (`mcp` 2.3) that hosts
its tool `report` as a task: the Tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663, on the 2026-07-28 revision), built on the SDK's server extension
interface (`mcp.server.extension.Extension`: `intercept_tool_call` answers a
`tools/call` with a task handle, `methods()` serves `tasks/get` and
`tasks/cancel`). Served over streamable HTTP on 127.0.0.1.

    python3 tasks_server.py PORT EVENTS

`report(steps, step_seconds, fail)` works `steps` steps of `step_seconds`
each, its task's `statusMessage` saying `step i of n` as it goes, and
answers `report of n steps`; with `fail` it ends with a JSON-RPC error (the
task `failed`). A request that offers the extension gets a task (polled at
200 ms); one that does not gets a plain answer.

Each line of the file EVENTS is one JSON object the test reads:
`{"event": "task", "taskId", "tool"}` (a call that became a task), `{"event":
"call", "tool"}` (a plain call), `{"event": "get", "taskId"}`, `{"event":
"cancel", "taskId", "known"}` (`tasks/cancel`), `{"event": "stopped",
"taskId"}` (the work stopped by a cancel), `{"event": "cancelled"}` (a
`notifications/cancelled`, which no task may get).
"""

import asyncio
import contextvars
import datetime
import json
import secrets
import sys
from typing import Any

import mcp_types as types
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

IDENTIFIER = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 200
TTL_MS = 600_000
EVENTS = sys.argv[2] if len(sys.argv) > 2 else None


def record(**event: Any) -> None:
    if EVENTS is None:
        return
    with open(EVENTS, "a", encoding="utf-8") as out:
        out.write(json.dumps(event) + "\n")


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class HostedTask:
    """One task: its state as `tasks/get` answers it, and the work."""

    def __init__(self) -> None:
        self.task_id = secrets.token_urlsafe(24)
        self.status = "working"
        self.status_message: str | None = "queued"
        self.created_at = now()
        self.last_updated_at = self.created_at
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.work: asyncio.Task[None] | None = None

    def update(self, status: str | None = None, message: str | None = None) -> None:
        if self.status in ("completed", "failed", "cancelled"):
            return
        if status is not None:
            self.status = status
        if message is not None:
            self.status_message = message
        self.last_updated_at = now()

    def wire(self, result_type: str) -> dict[str, Any]:
        task: dict[str, Any] = {
            "resultType": result_type,
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }
        if self.status_message is not None:
            task["statusMessage"] = self.status_message
        if self.status == "completed":
            task["result"] = self.result
        if self.status == "failed":
            task["error"] = self.error
        return task


TASKS: dict[str, HostedTask] = {}
# The task whose work is running, for the tool to report its steps to.
CURRENT: contextvars.ContextVar[HostedTask | None] = contextvars.ContextVar("current", default=None)


class TaskIdParams(types.RequestParams):
    task_id: str


def offered(ctx: Any) -> bool:
    """Whether this request's capabilities offer the extension."""
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and IDENTIFIER in extensions


def known(task_id: str) -> HostedTask:
    task = TASKS.get(task_id)
    if task is None:
        raise MCPError(code=-32602, message="Failed to retrieve task: Task not found")
    return task


class Tasks(Extension):
    identifier = IDENTIFIER

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("tasks/get", TaskIdParams, self.get),
            MethodBinding("tasks/cancel", TaskIdParams, self.cancel),
        ]

    async def intercept_tool_call(self, params: Any, ctx: Any, call_next: Any) -> Any:
        if params.name != "report" or not offered(ctx):
            record(event="call", tool=params.name)
            return await call_next(ctx)
        task = HostedTask()
        TASKS[task.task_id] = task

        async def run() -> None:
            CURRENT.set(task)
            try:
                answer = await call_next(ctx)
            except asyncio.CancelledError:
                record(event="stopped", taskId=task.task_id)
                raise
            except MCPError as error:
                task.error = {"code": error.error.code, "message": error.error.message}
                task.update("failed", f"failed: {error.error.message}")
                return
            task.result = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
            task.update("completed", "done")

        task.work = asyncio.get_running_loop().create_task(run())
        record(event="task", taskId=task.task_id, tool=params.name)
        return task.wire("task")

    async def get(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        record(event="get", taskId=params.task_id)
        return known(params.task_id).wire("complete")

    async def cancel(self, ctx: Any, params: TaskIdParams) -> dict[str, Any]:
        task = TASKS.get(params.task_id)
        record(event="cancel", taskId=params.task_id, known=task is not None)
        if task is None:
            raise MCPError(code=-32602, message="Failed to cancel task: Task not found")
        if task.status not in ("completed", "failed", "cancelled"):
            task.update("cancelled", "cancelled by the client")
            if task.work is not None:
                task.work.cancel()
        return {"resultType": "complete"}


async def observe(ctx: Any, call_next: Any) -> Any:
    """Records every `notifications/cancelled`: a task must never get one."""
    if ctx.method == "notifications/cancelled":
        record(event="cancelled")
    return await call_next(ctx)


server = MCPServer("toolmesh-tasks", log_level="WARNING", extensions=[Tasks()], middleware=[observe])


@server.tool()
async def report(steps: int = 3, step_seconds: float = 1.0, fail: bool = False) -> str:
    """Builds a report in `steps` steps of `step_seconds` each."""
    task = CURRENT.get()
    for step in range(1, steps + 1):
        if task is not None:
            task.update(message=f"step {step} of {steps}")
        await asyncio.sleep(step_seconds)
    if fail:
        raise MCPError(code=-32603, message="the report's data source is gone")
    return f"report of {steps} steps"


if __name__ == "__main__":
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
