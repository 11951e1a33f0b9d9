//! A task the MCP server hosts: the Tasks extension
//! (`io.modelcontextprotocol/tasks`, SEP-2663, on 2026-07-28).
//!
//! A call the registry runs as a task offers the extension on its one
//! `tools/call` when the server speaks 2026-07-28 and advertises it
//! ([`offer`]): the offer rides in that request's `_meta` capabilities,
//! never in the session's, so an interactive call never gets a task handle
//! back. A server that answers with a handle is polled with `tasks/get`
//! at its `pollIntervalMs` ([`follow`]) until the task is over, each
//! `working` poll's `statusMessage` passed on as the task's progress. A
//! call dropped while the server holds its task (the task was stopped, or
//! its deadline passed) sends `tasks/cancel` ([`cancel_later`]), never
//! `notifications/cancelled`, which the extension forbids for a task.

use std::future::Future;
use std::time::Duration;

use rmcp::model::{
    CallToolResult, CancelTaskParams, CancelTaskRequest, ClientRequest, DetailedTask,
    GetTaskParams, GetTaskRequest, JsonObject, ProtocolVersion, RequestMetaObject, ServerPeerInfo,
    ServerResult, TASKS_EXTENSION_ID, Task, TaskPayload, TaskStatus,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};

use crate::announcer::Backoff;
use crate::tool::{BackendError, Outcome};

/// Shortest wait between two polls, whatever the server suggests.
const POLL_MIN: Duration = Duration::from_millis(100);
/// Longest wait between two polls, whatever the server suggests.
const POLL_MAX: Duration = Duration::from_secs(5);
/// The wait between two polls when the server suggests none.
const POLL_DEFAULT: Duration = Duration::from_secs(1);
/// Longest one `tasks/get` may take.
const GET_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times a failed `tasks/get` is tried again before the task is
/// given up.
const GET_RETRIES: u32 = 3;
/// First delay before a failed `tasks/get` is tried again (doubling).
const RETRY_START: Duration = Duration::from_millis(250);
/// Longest delay before a failed `tasks/get` is tried again.
const RETRY_CAP: Duration = Duration::from_secs(2);
/// Longest the `tasks/cancel` of an abandoned task may take.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// The `_meta` that offers the extension on one request, if the server
/// behind `peer` hosts tasks: the session's own capabilities with the
/// extension added (rmcp stamps the session's on every request; these
/// replace them on this one).
pub(crate) fn offer(peer: &Peer<RoleClient>) -> Option<RequestMetaObject> {
    let info = peer.peer_info()?;
    hosts_tasks(&info).then(offered)
}

/// Whether the server speaks 2026-07-28 and advertised the extension in
/// its `server/discover` (or `initialize`) answer.
fn hosts_tasks(info: &ServerPeerInfo) -> bool {
    info.protocol_version == ProtocolVersion::V_2026_07_28 && info.capabilities.supports_tasks()
}

fn offered() -> RequestMetaObject {
    let mut capabilities = super::session::capabilities();
    capabilities
        .extensions
        .get_or_insert_with(Default::default)
        .insert(TASKS_EXTENSION_ID.to_owned(), JsonObject::new());
    let mut meta = RequestMetaObject::new();
    meta.set_client_capabilities(capabilities);
    meta
}

/// What a call came to, when it ran.
#[derive(Debug)]
pub(crate) enum Answer {
    /// The server's result: its answer to the `tools/call`, or its task's.
    Result(CallToolResult),
    /// The server's task ended without a result.
    Ended(Ended),
}

/// How a task the server held ended without a result.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ended {
    /// `failed`: the message of the JSON-RPC error it failed with.
    Failed(String),
    /// `cancelled` by the server, with its status message if any.
    Cancelled(Option<String>),
    /// `input_required`: the server asks for what the sidecar cannot give
    /// (it declares no sampling or elicitation); the task is cancelled.
    InputRequired,
}

impl Ended {
    /// The tool error the call answers.
    pub(crate) fn outcome(&self) -> Outcome {
        let message = match self {
            Self::Failed(message) => format!("the MCP server's task failed: {message}"),
            Self::Cancelled(None) => "the MCP server cancelled the task".to_owned(),
            Self::Cancelled(Some(why)) => format!("the MCP server cancelled the task: {why}"),
            Self::InputRequired => "the MCP server's task asked for input, which the sidecar cannot give; the task was cancelled".to_owned(),
        };
        Outcome::error_message(&message)
    }
}

/// Why a call did not come to an [`Answer`].
#[derive(Debug)]
pub(crate) enum CallError {
    /// The `tools/call` itself failed, or was refused.
    Call(ServiceError),
    /// The server's task could not be followed to its end.
    Task(Lost),
}

/// Why a task could not be followed to its end. (The server's id of the
/// task is not in the message: a server may treat it as a bearer token.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Lost {
    /// The server answered `tasks/get` with an error, every time: it no
    /// longer knows the task.
    #[error("the server no longer knows its task: {0}")]
    Unknown(String),
    /// `tasks/get` got no answer, every time.
    #[error("tasks/get: {0}")]
    Unreachable(String),
    /// The task completed with a result that is not a `tools/call` result.
    #[error("its task completed with a result that is not a tools/call result: {0}")]
    Malformed(String),
}

impl Lost {
    /// The call's error: [`BackendError::Unavailable`] when the server could
    /// not be reached, [`BackendError::Internal`] otherwise (the call ran).
    pub(crate) fn to_backend_error(&self, label: &str) -> BackendError {
        let message = format!("MCP server {label}: {self}");
        match self {
            Self::Unreachable(_) => BackendError::Unavailable(message),
            Self::Unknown(_) | Self::Malformed(_) => BackendError::Internal(message),
        }
    }

    /// Whether the server may still hold the task, so that `tasks/cancel`
    /// is worth sending.
    pub(crate) fn may_be_held(&self) -> bool {
        matches!(self, Self::Unreachable(_))
    }
}

/// The wait before the next poll, as the server suggests it
/// (`pollIntervalMs`), between [`POLL_MIN`] and [`POLL_MAX`].
fn poll_interval(suggested_ms: Option<u64>) -> Duration {
    suggested_ms.map_or(POLL_DEFAULT, |ms| {
        Duration::from_millis(ms).clamp(POLL_MIN, POLL_MAX)
    })
}

/// Follows the task the server began with `seed` to its end: `get` is
/// its `tasks/get` (each within [`GET_TIMEOUT`], a failed one tried again
/// [`GET_RETRIES`] times with backoff), and `report` is given the status
/// message of each `working` state that says something new. Runs until
/// the task is over: the caller bounds it by the call's deadline.
pub(crate) async fn follow<G, F>(
    seed: Task,
    mut get: G,
    mut report: impl FnMut(&str),
) -> Result<Answer, Lost>
where
    G: FnMut(String) -> F,
    F: Future<Output = Result<DetailedTask, ServiceError>>,
{
    let id = seed.task_id.clone();
    let mut said: Option<String> = None;
    let mut current = seed;
    loop {
        if current.status == TaskStatus::Working
            && let Some(message) = current.status_message.as_deref().filter(|m| !m.is_empty())
            && said.as_deref() != Some(message)
        {
            report(message);
            said = Some(message.to_owned());
        }
        if !current.status.is_terminal() {
            tokio::time::sleep(poll_interval(current.poll_interval_ms)).await;
        }
        let task = get_retried(&mut get, &id).await?;
        let message = task.task.status_message.clone();
        match task.payload {
            TaskPayload::Completed { result } => {
                return serde_json::from_value(serde_json::Value::Object(result))
                    .map(Answer::Result)
                    .map_err(|error| Lost::Malformed(error.to_string()));
            }
            TaskPayload::Failed { error } => {
                return Ok(Answer::Ended(Ended::Failed(failure(&error, message))));
            }
            TaskPayload::Cancelled => return Ok(Answer::Ended(Ended::Cancelled(message))),
            TaskPayload::InputRequired { .. } => return Ok(Answer::Ended(Ended::InputRequired)),
            // Working, or a state this sidecar does not know: poll on.
            _ => current = task.task,
        }
    }
}

/// The message of a failed task's JSON-RPC `error`, else its status
/// message.
fn failure(error: &JsonObject, status_message: Option<String>) -> String {
    error
        .get("message")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
        .or(status_message)
        .unwrap_or_else(|| "the task failed".to_owned())
}

/// One `tasks/get` of the task `id`, tried again on failure.
async fn get_retried<G, F>(get: &mut G, id: &str) -> Result<DetailedTask, Lost>
where
    G: FnMut(String) -> F,
    F: Future<Output = Result<DetailedTask, ServiceError>>,
{
    let mut delays = Backoff::between(RETRY_START, RETRY_CAP);
    let mut retries = 0;
    loop {
        let lost = match tokio::time::timeout(GET_TIMEOUT, get(id.to_owned())).await {
            Ok(Ok(task)) => return Ok(task),
            Ok(Err(ServiceError::McpError(error))) => Lost::Unknown(error.message.into_owned()),
            Ok(Err(error)) => Lost::Unreachable(error.to_string()),
            Err(_) => Lost::Unreachable(format!("no answer within {GET_TIMEOUT:?}")),
        };
        if retries == GET_RETRIES {
            return Err(lost);
        }
        retries += 1;
        tracing::debug!(error = %lost, retries, "tasks/get failed; trying again");
        tokio::time::sleep(delays.next_delay()).await;
    }
}

/// `tasks/get` of the task `task_id` on `peer`, offering the extension
/// with `meta` (a server refuses a task request from a client that does
/// not declare it).
pub(crate) async fn get(
    peer: &Peer<RoleClient>,
    task_id: String,
    meta: &RequestMetaObject,
) -> Result<DetailedTask, ServiceError> {
    let request = ClientRequest::GetTaskRequest(GetTaskRequest::new(GetTaskParams::new(task_id)));
    let options = PeerRequestOptions::no_options().with_meta(meta.clone());
    match peer
        .send_request_with_option(request, options)
        .await?
        .await_response()
        .await?
    {
        ServerResult::GetTaskResult(result) => Ok(result.task),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// Sends `tasks/cancel` of the task `task_id` on `peer` (offering the
/// extension with `meta`) on a task of its own, within
/// [`CANCEL_TIMEOUT`]: the call that held the task is being dropped.
pub(crate) fn cancel_later(peer: Peer<RoleClient>, task_id: String, meta: RequestMetaObject) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let request = ClientRequest::CancelTaskRequest(CancelTaskRequest::new(
            CancelTaskParams::new(task_id),
        ));
        let options = PeerRequestOptions::no_options().with_meta(meta);
        let sent = tokio::time::timeout(CANCEL_TIMEOUT, async {
            peer.send_request_with_option(request, options)
                .await?
                .await_response()
                .await
        });
        match sent.await {
            Ok(Ok(_)) => tracing::debug!("tasks/cancel acknowledged"),
            Ok(Err(error)) => tracing::debug!(%error, "tasks/cancel not acknowledged"),
            Err(_) => tracing::debug!("tasks/cancel not acknowledged in time"),
        }
    });
}

#[cfg(test)]
mod tests;
