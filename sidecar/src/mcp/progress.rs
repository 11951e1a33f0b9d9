//! A task's `tools/call`: the server's `notifications/progress` for it
//! passed on to the task's [`Progress`], and `notifications/cancelled`
//! sent when the call's future is dropped before the answer (the task was
//! stopped, or its deadline passed), as rmcp's own `call_tool` does.
//!
//! A server that hosts tasks is offered the Tasks extension on the
//! request; one that answers with a task handle is followed to the task's
//! end ([`super::tasks`]), its progress still routed here, and sent
//! `tasks/cancel` instead when the call is dropped while it holds the task.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientRequest, ProgressNotificationParam, ProgressToken, RequestId,
    RequestMetaObject, ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};

use super::tasks::{self, Answer, CallError, Ended};
use crate::progress::Progress;

/// Longest the cancellation of an abandoned call may take to send.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where each task call in flight on one connection reports its
/// progress, by the progress token of its request: one entry per call in
/// flight, removed when the call ends or is dropped.
#[derive(Default)]
pub(crate) struct Routes(Mutex<HashMap<ProgressToken, Route>>);

struct Route {
    progress: Progress,
    /// The highest `progress` value seen: notifications are handled on
    /// tasks of their own, so an older one may come after a newer one.
    last: f64,
    /// The fraction the latest notification reported, kept when a task's
    /// status message is reported.
    fraction: Option<f64>,
}

impl Route {
    fn new(progress: Progress) -> Self {
        Self {
            progress,
            last: f64::NEG_INFINITY,
            fraction: None,
        }
    }
}

impl Routes {
    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<ProgressToken, Route>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Passes the server's `notifications/progress` on to the call it is
    /// about, if a task call of this connection: `progress / total` as the
    /// fraction when the server sends a total, its message as the
    /// message.
    pub(crate) fn deliver(&self, params: &ProgressNotificationParam) {
        let mut routes = self.routes();
        let Some(route) = routes.get_mut(&params.progress_token) else {
            return;
        };
        if params.progress < route.last {
            return;
        }
        route.last = params.progress;
        route.fraction = params
            .total
            .filter(|total| *total > 0.0)
            .map(|total| params.progress / total);
        route
            .progress
            .report(route.fraction, params.message.clone().unwrap_or_default());
    }

    /// Passes the status message of the server's task for the call of
    /// `token` on, with the fraction its latest notification reported.
    fn status(&self, token: &ProgressToken, message: &str) {
        if let Some(route) = self.routes().get(token) {
            route.progress.report(route.fraction, message);
        }
    }
}

/// The call in flight: routed until dropped; cancelled when dropped
/// while unanswered, or while the server holds its task.
struct InFlight {
    routes: Arc<Routes>,
    token: ProgressToken,
    peer: Peer<RoleClient>,
    held: Held,
}

/// What a dropped call cancels.
enum Held {
    /// The request, not yet answered: `notifications/cancelled`.
    Request(RequestId),
    /// The server's task, not yet over: `tasks/cancel`, offering the
    /// extension with `meta`.
    Task { id: String, meta: RequestMetaObject },
    /// Nothing: the call is over.
    Nothing,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.routes.routes().remove(&self.token);
        let id = match std::mem::replace(&mut self.held, Held::Nothing) {
            Held::Request(id) => id,
            Held::Task { id, meta } => {
                tasks::cancel_later(self.peer.clone(), id, meta);
                return;
            }
            Held::Nothing => return,
        };
        let notification = CancelledNotification::new(CancelledNotificationParam::new(
            Some(id),
            Some("request abandoned by the caller".to_owned()),
        ));
        let peer = self.peer.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let sent = tokio::time::timeout(
                    CANCEL_TIMEOUT,
                    peer.send_notification(notification.into()),
                );
                if !matches!(sent.await, Ok(Ok(()))) {
                    tracing::debug!("notifications/cancelled not sent");
                }
            });
        }
    }
}

/// `tools/call` with `params`, its progress reported to `progress`
/// (through `routes`, which the connection's handler delivers to),
/// offering the Tasks extension to a server that hosts tasks, and
/// following the task it answers with to its end.
pub(crate) async fn call_tool(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    routes: &Arc<Routes>,
    progress: &Progress,
) -> Result<Answer, CallError> {
    let offer = tasks::offer(peer);
    let mut options = PeerRequestOptions::no_options();
    options.meta.clone_from(&offer);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_cancellable_request(request, options)
        .await
        .map_err(CallError::Call)?;
    let token = handle.progress_token.clone();
    routes
        .routes()
        .insert(token.clone(), Route::new(progress.clone()));
    let mut in_flight = InFlight {
        routes: routes.clone(),
        token: token.clone(),
        peer: peer.clone(),
        held: Held::Request(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    in_flight.held = Held::Nothing;
    let created = match answer.map_err(CallError::Call)? {
        ServerResult::CallToolResult(result) => return Ok(Answer::Result(result)),
        ServerResult::EmptyResult(_) => return Ok(Answer::Result(CallToolResult::default())),
        ServerResult::CreateTaskResult(created) => created,
        _ => return Err(CallError::Call(ServiceError::UnexpectedResponse)),
    };
    // A task handle the request did not offer to take is not an answer.
    let Some(meta) = offer else {
        return Err(CallError::Call(ServiceError::UnexpectedResponse));
    };
    tracing::debug!("the MCP server runs the call as a task");
    in_flight.held = Held::Task {
        id: created.task.task_id.clone(),
        meta: meta.clone(),
    };
    let followed = tasks::follow(
        created.task,
        |task_id| tasks::get(peer, task_id, &meta),
        |message| routes.status(&token, message),
    )
    .await;
    // A task the server may still hold is cancelled as `in_flight` drops.
    let abandoned = match &followed {
        Ok(Answer::Ended(Ended::InputRequired)) => true,
        Ok(_) => false,
        Err(lost) => lost.may_be_held(),
    };
    if !abandoned {
        in_flight.held = Held::Nothing;
    }
    followed.map_err(CallError::Task)
}

#[cfg(test)]
mod tests;
