//! Sessions of the handshake revisions (before 2026-07-28, which has
//! none): rmcp's in-memory sessions, at most `--mcp-max-sessions` at once,
//! each closed after `--mcp-session-idle-timeout` without a request.
//!
//! The bound holds in [`BoundedSessions::create_session`]; the HTTP layer
//! ([`refuse_when_full`]) answers a new handshake beyond it with 503 and
//! `Retry-After` first, where the transport could only say 500.
//!
//! A client ends its session with a DELETE; the session is closed and the
//! answer is 204 ([`no_content_when_ended`]: the transport says 202, which
//! clients read as a failure, the Python SDK warning "Session termination
//! failed: 202").

use std::{sync::Arc, time::Duration};

use axum::{
    body::Body,
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use futures::Stream;
use http::{HeaderValue, Method, StatusCode, header};
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::{
        WorkerTransport,
        streamable_http_server::session::{
            ServerSseMessage, SessionId, SessionManager,
            local::{
                LocalSessionManager, LocalSessionManagerError, LocalSessionWorker, SessionConfig,
            },
        },
    },
};

/// The header a session's requests carry.
const SESSION_HEADER: &str = "mcp-session-id";

/// What a client is told to wait before opening a session again, in
/// seconds.
const RETRY_AFTER_SECONDS: &str = "5";

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// rmcp's session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// As many sessions are open as `--mcp-max-sessions` allows.
    #[error("too many MCP sessions open (--mcp-max-sessions {0})")]
    Full(usize),
}

/// rmcp's in-memory sessions, bounded in number and idle time.
pub(crate) struct BoundedSessions {
    inner: LocalSessionManager,
    max: usize,
    /// Held from the count to the insertion, so the bound is exact.
    creating: tokio::sync::Mutex<()>,
}

impl BoundedSessions {
    /// At most `max` sessions, each closed after `idle` without a request.
    pub(crate) fn new(max: usize, idle: Duration) -> Self {
        let mut config = SessionConfig::default();
        config.keep_alive = Some(idle);
        let mut inner = LocalSessionManager::default();
        inner.session_config = config;
        Self {
            inner,
            max,
            creating: tokio::sync::Mutex::new(()),
        }
    }

    /// Sessions open now.
    pub(crate) async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// Whether a new session would be refused.
    pub(crate) async fn is_full(&self) -> bool {
        self.open().await >= self.max
    }

    /// Closes every session, which ends its streams.
    pub(crate) async fn close_all(&self) {
        let open: Vec<SessionId> = self.inner.sessions.read().await.keys().cloned().collect();
        for id in open {
            if let Err(error) = self.inner.close_session(&id).await {
                tracing::debug!(%error, "closing an MCP session");
            }
        }
    }
}

impl SessionManager for BoundedSessions {
    type Error = SessionError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let _creating = self.creating.lock().await;
        if self.is_full().await {
            tracing::warn!(
                max = self.max,
                "MCP session refused: --mcp-max-sessions reached"
            );
            return Err(SessionError::Full(self.max));
        }
        Ok(self.inner.create_session().await?)
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }
}

/// Axum middleware: while the sessions are full, a POST that opens one
/// (an `initialize` request, without a session id) is answered 503 with
/// `Retry-After`. Only then is the body read here (bounded by
/// `max_body_bytes`, as the transport bounds it).
pub(crate) async fn refuse_when_full(
    State((sessions, max_body_bytes)): State<(Arc<BoundedSessions>, usize)>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST
        || request.headers().contains_key(SESSION_HEADER)
        || !sessions.is_full().await
    {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, max_body_bytes).await else {
        return status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "the request body is too large",
        );
    };
    if opens_a_session(&bytes) {
        let mut response = status(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many MCP sessions are open; retry later",
        );
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
        return response;
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Axum middleware: a DELETE the transport accepted (202, the session
/// closed) is answered 204 No Content, what clients expect of a DELETE
/// that succeeded. Any other answer passes as it is.
pub(crate) async fn no_content_when_ended(request: Request, next: Next) -> Response {
    let delete = request.method() == Method::DELETE;
    let mut response = next.run(request).await;
    if delete && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
        *response.body_mut() = Body::empty();
        response.headers_mut().remove(header::CONTENT_LENGTH);
    }
    response
}

/// Whether `body` is an `initialize` request.
fn opens_a_session(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Method<'a> {
        #[serde(borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Method<'_>>(body)
        .ok()
        .and_then(|m| m.method)
        .is_some_and(|m| m == "initialize")
}

fn status(code: StatusCode, message: &'static str) -> Response {
    let mut response = Response::new(Body::from(message));
    *response.status_mut() = code;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_initialize_opens_a_session() {
        assert!(opens_a_session(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#
        ));
        for other in [
            &br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#[..],
            br#"[{"method":"initialize"}]"#,
            b"not json",
            b"",
        ] {
            assert!(
                !opens_a_session(other),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[tokio::test]
    async fn close_all_makes_room() {
        let sessions = BoundedSessions::new(2, Duration::from_secs(60));
        let _first = sessions.create_session().await.expect("the first");
        let _second = sessions.create_session().await.expect("the second");
        assert!(sessions.is_full().await);
        sessions.close_all().await;
        assert_eq!(sessions.open().await, 0);
    }

    #[tokio::test]
    async fn sessions_beyond_the_bound_are_refused() {
        let sessions = BoundedSessions::new(1, Duration::from_secs(60));
        let (_first, _transport) = sessions.create_session().await.expect("the first");
        assert!(sessions.is_full().await);
        assert!(matches!(
            sessions.create_session().await,
            Err(SessionError::Full(1))
        ));
    }
}
