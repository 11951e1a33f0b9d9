//! A task's `tools/call`: the server's `notifications/progress` for it
//! passed on to the task's [`Progress`], and `notifications/cancelled`
//! sent when the call's future is dropped before the answer (the task was
//! stopped, or its deadline passed), as rmcp's own `call_tool` does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotification,
    CancelledNotificationParam, ClientRequest, ProgressNotificationParam, ProgressToken, RequestId,
    ServerResult,
};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};

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
        let fraction = params
            .total
            .filter(|total| *total > 0.0)
            .map(|total| params.progress / total);
        route
            .progress
            .report(fraction, params.message.clone().unwrap_or_default());
    }
}

/// The call in flight: routed until dropped; cancelled when dropped
/// before its answer.
struct InFlight {
    routes: Arc<Routes>,
    token: ProgressToken,
    peer: Peer<RoleClient>,
    /// Cleared once answered.
    unanswered: Option<RequestId>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.routes.routes().remove(&self.token);
        let Some(id) = self.unanswered.take() else {
            return;
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
/// (through `routes`, which the connection's handler delivers to).
pub(crate) async fn call_tool(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    routes: &Arc<Routes>,
    progress: &Progress,
) -> Result<CallToolResult, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let handle = peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await?;
    routes.routes().insert(
        handle.progress_token.clone(),
        Route {
            progress: progress.clone(),
            last: f64::NEG_INFINITY,
        },
    );
    let mut in_flight = InFlight {
        routes: routes.clone(),
        token: handle.progress_token.clone(),
        peer: peer.clone(),
        unanswered: Some(handle.id.clone()),
    };
    let answer = handle.await_response().await;
    in_flight.unanswered = None;
    match answer? {
        ServerResult::CallToolResult(result) => Ok(result),
        ServerResult::EmptyResult(_) => Ok(CallToolResult::default()),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

#[cfg(test)]
mod tests;
