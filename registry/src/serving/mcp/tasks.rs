//! The Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663, on the
//! 2026-07-28 revision) over the registry's own tasks: a `tools/call`
//! answered with a task handle, `tasks/get` showing it, `tasks/cancel`
//! stopping it. A task is the same one `toolmesh.v1.Tasks` shows, kept
//! where the registry keeps tasks (Redis when it has one), so that any
//! replica answers for it.
//!
//! The server decides which calls become tasks (the extension says it
//! is the sole decider): a call of a tool that declares a `task_timeout`,
//! from a request that offers the extension in its per-request
//! capabilities. Every other call is answered at once, as before.

use rmcp::model::{
    CreateTaskResult, DetailedTask, ErrorData, GetTaskResult, JsonObject, Task as McpTask,
    TaskPayload, TaskStatus,
};
use serde_json::{Value, json};
use toolmesh_proto::pb;

use super::{content, results};
use crate::tasks::model::{State, Task};

/// How often a client is asked to poll `tasks/get`, in milliseconds.
pub(crate) const POLL_INTERVAL_MS: u64 = 1_000;

/// `_meta` key of a task's latest progress report:
/// `{"fraction": <0 to 1, when the tool says>, "message": <text>}`.
pub(crate) const PROGRESS_KEY: &str = "toolmesh/progress";

/// `_meta` key of a task: its revision, bumped by every change.
pub(crate) const REVISION_KEY: &str = "toolmesh/revision";

/// Whether a call of `descriptor` runs as a task: it declares how long it
/// may run as one, and the request `offered` the extension.
pub(crate) fn runs_as_task(descriptor: &pb::ToolDescriptor, offered: bool) -> bool {
    offered && descriptor.task_timeout.is_some()
}

/// The handle `tools/call` answers with.
pub(crate) fn created(task: &Task) -> CreateTaskResult {
    CreateTaskResult::new(DetailedTask::new(base(task), payload(task)).task)
}

/// What `tasks/get` answers: the task with its result or error inlined.
pub(crate) fn detailed(task: &Task) -> GetTaskResult {
    let mut result = GetTaskResult::new(DetailedTask::new(base(task), payload(task)));
    let mut meta = rmcp::model::MetaObject::new();
    meta.insert(REVISION_KEY.into(), task.revision.into());
    if let Some(progress) = &task.progress {
        meta.insert(
            PROGRESS_KEY.into(),
            json!({ "fraction": progress.fraction, "message": progress.message }),
        );
    }
    result.meta = Some(meta);
    result
}

/// The JSON-RPC error for a task id that is unknown, expired, or another
/// caller's (the three are told apart by no one).
pub(crate) fn unknown_task(id: &str) -> ErrorData {
    let shown = toolmesh_telemetry::shown::clip(id, toolmesh_telemetry::shown::QUOTED_MAX);
    ErrorData::invalid_params(
        format!("Unknown task: {shown} (no such task, it expired, or it is not yours)"),
        Some(json!({ "taskId": shown })),
    )
}

/// The fields every shape of a task shares.
fn base(task: &Task) -> McpTask {
    let mut seed = McpTask::new(
        task.id.clone(),
        TaskStatus::Working,
        rfc3339(task.created_ms),
        rfc3339(task.updated_ms),
    )
    .with_ttl_ms(ttl_ms(task))
    .with_poll_interval_ms(POLL_INTERVAL_MS);
    let message = match (&task.progress, task.status_message.is_empty()) {
        (Some(progress), true) if !task.state.is_terminal() => progress.message.clone(),
        _ => task.status_message.clone(),
    };
    if !message.is_empty() {
        seed = seed.with_status_message(message);
    }
    seed
}

/// How long after its creation the task may be forgotten: while it runs,
/// the end of its timeout and then its retention; once over, when it is
/// forgotten.
fn ttl_ms(task: &Task) -> u64 {
    let until = if task.state.is_terminal() {
        task.expires_ms
    } else {
        task.expires_ms.saturating_add(task.retention_ms)
    };
    until.saturating_sub(task.created_ms)
}

/// The status-specific part, which decides the status. A task waiting
/// for input shows as working: the extension's `input_required` carries
/// the requests to answer, and no tool asks for input through the
/// registry yet. A call that failed is what `tools/call`
/// would have answered: most failures are an `isError` result (so the
/// task completed, as the extension says of tool errors), a fault of the
/// registry's own a JSON-RPC error (so it failed).
fn payload(task: &Task) -> TaskPayload {
    use pb::task::Outcome as Wire;
    if task.state == State::Cancelled {
        return TaskPayload::Cancelled;
    }
    let answered = match task.to_proto().outcome {
        None => return TaskPayload::Working,
        Some(Wire::Response(response)) => Ok(content::from_response(&response)),
        Some(Wire::Error(error)) => {
            results::from_task_error(tonic::Code::from_i32(error.code), &error.message)
        }
    };
    match answered {
        Ok(result) => TaskPayload::Completed {
            result: object(serde_json::to_value(result)),
        },
        Err(error) => TaskPayload::Failed {
            error: object(serde_json::to_value(error)),
        },
    }
}

fn object(value: Result<Value, serde_json::Error>) -> JsonObject {
    match value {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

fn rfc3339(unix_ms: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(unix_ms);
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests;
