"""The client side of the MCP Tasks extension (`io.modelcontextprotocol/tasks`,
SEP-2663, on the 2026-07-28 revision), built on the official Python SDK's
extension interface (`mcp.client.extension`: a `ClientExtension` with a
`ResultClaim` for `resultType: "task"`).

The SDK (v2.3.0) ships that interface but no Tasks client; this is the
smallest faithful one: it advertises the extension on every request, and a
`tools/call` answered with a task handle is finished by polling `tasks/get`
(at the server's `pollIntervalMs`) until the task is over. A resolve that
is cancelled sends `tasks/cancel` before it gives up. Nothing here touches
the SDK's internals: requests go through `ClientSession.send_request`, which
stamps the per-request envelope and the `Mcp-Name` header.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

IDENTIFIER = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
# Polls at most this often, whatever the server suggests.
MIN_POLL_SECONDS = 0.05


class TaskFields(types.Result):
    """What every shape of a task carries."""

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class CreateTaskResult(TaskFields):
    """A task handle: the seed state of the task a `tools/call` became."""

    result_type: Literal["task"] = "task"


class GetTaskResult(TaskFields):
    """`tasks/get`: the task, with its result or error once over."""

    model_config = ConfigDict(extra="allow")

    result_type: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class AckResult(types.Result):
    """`tasks/cancel` and `tasks/update`: an empty acknowledgement."""

    result_type: str | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param = "taskId"


async def get_task(session: Any, task_id: str, timeout: float | None = None) -> GetTaskResult:
    return await session.send_request(
        GetTaskRequest(params=TaskIdParams(task_id=task_id)), GetTaskResult, request_read_timeout_seconds=timeout
    )


async def cancel_task(session: Any, task_id: str, timeout: float | None = None) -> AckResult:
    return await session.send_request(
        CancelTaskRequest(params=TaskIdParams(task_id=task_id)), AckResult, request_read_timeout_seconds=timeout
    )


class TasksExtension(ClientExtension):
    """Finishes task handles by polling; `observe` sees each handle and poll."""

    identifier = IDENTIFIER

    def __init__(self, observe: Callable[[str, types.Result], None] | None = None) -> None:
        self.observe = observe or (lambda _kind, _value: None)

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, handle: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        self.observe("created", handle)
        interval = handle.poll_interval_ms
        try:
            while True:
                await anyio.sleep(max((interval or 1000) / 1000, MIN_POLL_SECONDS))
                task = await get_task(ctx.session, handle.task_id, ctx.read_timeout_seconds)
                self.observe("polled", task)
                interval = task.poll_interval_ms or interval
                if task.status in TERMINAL:
                    return finished(task)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                self.observe("cancelled", await cancel_task(ctx.session, handle.task_id, 10))
            raise


def finished(task: GetTaskResult) -> types.CallToolResult:
    """What the `tools/call` would have answered had it not been a task."""
    if task.status == "completed" and task.result is not None:
        return types.CallToolResult.model_validate(task.result)
    if task.status == "failed" and task.error is not None:
        raise MCPError(task.error.get("code", -32603), task.error.get("message", "the task failed"), task.error.get("data"))
    message = task.status_message or f"the task was {task.status}"
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)
