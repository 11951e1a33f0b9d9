//! One connection to an MCP server: start it (stdio) or reach it
//! (streamable HTTP), shake hands, list its tools page by page, and call
//! them.
//!
//! The sidecar speaks the current revision, 2026-07-28, to a server that
//! answers its `server/discover`, and falls back to the `initialize`
//! handshake (offering 2025-11-25, taking what the server answers:
//! 2025-06-18, 2025-03-26, 2024-11-05) with one that does not.
//!
//! A call the registry runs as a task, to a 2026-07-28 server that hosts
//! tasks, may become the server's own task ([`super::tasks`]); every
//! other call is one `tools/call`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ErrorCode, Implementation, MetaObject,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, RequestMetaObject,
    SubscriptionFilter, Tool as McpTool,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt as _, NotificationContext, Peer, RoleClient,
    RunningService, ServiceError, Subscription,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use tokio::sync::Notify;
use toolmesh_proto::deadline::Deadline;
use tracing::Instrument as _;

use super::McpTransport;
use super::convert;
use super::environment::environment;
use super::progress;
use super::tasks::{Answer, CallError, Lost};
use crate::context::CallContext;
use crate::tool::{Backend, BackendError, Outcome};

/// Longest the start and handshake may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest one `tools/list` page may take.
pub(crate) const LIST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an idle connection to an HTTP server is kept for the next
/// call (rmcp's own client keeps none: a TCP connection per call).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most pages of one listing: a server whose cursor never ends is broken.
const MAX_PAGES: usize = 100;
/// Most tools one server may list.
pub(crate) const MAX_TOOLS: usize = 10_000;

/// What the sidecar does with a server's notifications: a changed tool
/// list wakes the loop that lists again; progress goes to the task whose
/// call it is about.
pub(crate) struct Handler {
    pub(crate) tools_changed: Arc<Notify>,
    pub(crate) progress: Arc<progress::Routes>,
}

impl rmcp::ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.progress.deliver(&params);
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            capabilities(),
            Implementation::new("toolmesh-sidecar", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }
}

/// What the sidecar declares for the whole session: nothing (it declines
/// sampling, elicitation and roots). The Tasks extension is offered on a
/// task's request alone ([`super::tasks::offer`]), never here: an
/// interactive call must not get a task handle back.
pub(crate) fn capabilities() -> ClientCapabilities {
    ClientCapabilities::default()
}

/// A running connection.
pub(crate) type Session = RunningService<RoleClient, Handler>;

/// Why a connection could not be made or kept.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A header in the config is not one HTTP takes (checked at load; kept
    /// for a config built in code).
    #[error("header {0:?} is not valid")]
    Header(String),
    /// The handshake failed.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// A request failed.
    #[error("{what} failed: {reason}")]
    Request {
        /// Which request.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The server answered that it has no such method (`-32601`).
    #[error("{0}: the server has no such method (-32601)")]
    MethodNotFound(&'static str),
    /// The server did not answer in time.
    #[error("{0} timed out")]
    Timeout(&'static str),
    /// The server listed more than the sidecar takes.
    #[error("it listed more than {MAX_TOOLS} tools or {MAX_PAGES} pages")]
    TooMany,
}

/// Starts or reaches the server and shakes hands, within
/// [`CONNECT_TIMEOUT`].
pub(crate) async fn connect(
    transport: &McpTransport,
    label: &Arc<str>,
    handler: Handler,
) -> Result<Session, SessionError> {
    let handshake = async {
        match transport {
            McpTransport::Stdio {
                program,
                args,
                env,
                pass,
                cwd,
            } => {
                let mut command = tokio::process::Command::new(program);
                command
                    .args(args)
                    .env_clear()
                    .envs(environment(std::env::vars_os(), pass, env))
                    .kill_on_drop(true);
                if let Some(cwd) = cwd {
                    command.current_dir(cwd);
                }
                let (child, stderr) = TokioChildProcess::builder(command)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|source| SessionError::Spawn {
                        program: program.display().to_string(),
                        source,
                    })?;
                if let Some(stderr) = stderr {
                    tokio::spawn(super::stderr::forward(stderr, label.clone()));
                }
                handler
                    .serve_with_lifecycle(child, lifecycle())
                    .await
                    .map_err(|e| SessionError::Handshake(e.to_string()))
            }
            McpTransport::Http { url, headers } => {
                toolmesh_proto::tls::install_default_provider();
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let header = (
                        http::HeaderName::try_from(name.as_str()),
                        http::HeaderValue::try_from(value.as_str()),
                    );
                    let (Ok(name), Ok(value)) = header else {
                        return Err(SessionError::Header(name.clone()));
                    };
                    custom.insert(name, value);
                }
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str())
                    .custom_headers(custom);
                let client = reqwest_mcp::Client::builder()
                    .redirect(reqwest_mcp::redirect::Policy::none())
                    .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                    .build()
                    .map_err(|e| SessionError::Handshake(format!("HTTP client: {e}")))?;
                handler
                    .serve_with_lifecycle(
                        StreamableHttpClientTransport::with_client(client, config),
                        lifecycle(),
                    )
                    .await
                    .map_err(|e| SessionError::Handshake(e.to_string()))
            }
        }
    };
    tokio::time::timeout(CONNECT_TIMEOUT, handshake)
        .await
        .map_err(|_| SessionError::Timeout("the start and handshake"))?
}

/// The current revision if the server speaks it, else the handshake.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: Some(ProtocolVersion::V_2025_11_25),
    }
}

/// Opens the stream a 2026-07-28 server sends
/// `notifications/tools/list_changed` on, within [`LIST_TIMEOUT`]; a server
/// without it is [`SessionError::MethodNotFound`].
pub(crate) async fn listen(peer: &Peer<RoleClient>) -> Result<Subscription, SessionError> {
    const WHAT: &str = "subscriptions/listen";
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    tokio::time::timeout(LIST_TIMEOUT, peer.listen(filter))
        .await
        .map_err(|_| SessionError::Timeout(WHAT))?
        .map_err(|error| request_error(WHAT, &error))
}

/// `error` of the request `what`: a `-32601` answer is
/// [`SessionError::MethodNotFound`].
fn request_error(what: &'static str, error: &ServiceError) -> SessionError {
    match error {
        ServiceError::McpError(answer) if answer.code == ErrorCode::METHOD_NOT_FOUND => {
            SessionError::MethodNotFound(what)
        }
        other => SessionError::Request {
            what,
            reason: other.to_string(),
        },
    }
}

/// Every tool the server lists, page by page, each page within
/// [`LIST_TIMEOUT`].
pub(crate) async fn list(peer: &Peer<RoleClient>) -> Result<Vec<McpTool>, SessionError> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let page = tokio::time::timeout(LIST_TIMEOUT, peer.list_tools(Some(params)))
            .await
            .map_err(|_| SessionError::Timeout("tools/list"))?
            .map_err(|e| SessionError::Request {
                what: "tools/list",
                reason: e.to_string(),
            })?;
        tools.extend(page.tools);
        if tools.len() > MAX_TOOLS {
            return Err(SessionError::TooMany);
        }
        match page.next_cursor {
            Some(next) if !next.is_empty() => cursor = Some(next),
            _ => return Ok(tools),
        }
    }
    Err(SessionError::TooMany)
}

/// Longest a `ping` may take.
pub(crate) const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether the server answers a `ping` within [`PING_TIMEOUT`]: a server
/// reached over HTTP can go away without closing anything the client
/// holds.
pub(crate) async fn ping(peer: &Peer<RoleClient>) -> Result<(), SessionError> {
    let request = rmcp::model::PingRequest {
        method: Default::default(),
        extensions: Default::default(),
    };
    tokio::time::timeout(PING_TIMEOUT, peer.send_request(request.into()))
        .await
        .map_err(|_| SessionError::Timeout("ping"))?
        .map(drop)
        .map_err(|e| SessionError::Request {
            what: "ping",
            reason: e.to_string(),
        })
}

/// The `_meta` key naming the caller the registry authenticated (left out
/// for an anonymous call).
pub const CALLER_META: &str = "io.toolmesh/caller";
/// The `_meta` key carrying the invocation id (left out when there is
/// none).
pub const INVOCATION_ID_META: &str = "io.toolmesh/invocationId";

/// What a `tools/call` tells the server besides the arguments, in its
/// `_meta`: the W3C trace context (`traceparent`, `tracestate`, as
/// SEP-414 reserves them), the caller and the invocation id.
fn call_meta(context: &CallContext, trace: &toolmesh_telemetry::TraceContext) -> RequestMetaObject {
    let mut meta = serde_json::Map::new();
    let fields = [
        ("traceparent", trace.traceparent.as_deref()),
        ("tracestate", trace.tracestate.as_deref()),
        (CALLER_META, Some(context.caller.as_str())),
        (INVOCATION_ID_META, Some(context.invocation_id.as_str())),
    ];
    for (key, value) in fields {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            meta.insert(key.to_owned(), serde_json::Value::String(value.to_owned()));
        }
    }
    RequestMetaObject(MetaObject(meta))
}

/// Runs one of the server's tools through `tools/call`.
pub(crate) struct McpBackend {
    /// The server's name for the tool.
    pub(crate) name: String,
    /// The server, for logs.
    pub(crate) label: Arc<str>,
    pub(crate) peer: Peer<RoleClient>,
    /// Woken when the server refuses a call (its list may be stale) or
    /// cannot be reached (it may be gone).
    pub(crate) tools_changed: Arc<Notify>,
    /// Where the connection's handler sends a task call's progress.
    pub(crate) progress: Arc<progress::Routes>,
}

#[async_trait]
impl Backend for McpBackend {
    async fn call(
        &self,
        arguments_json: &str,
        context: &CallContext,
        deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        let arguments = match serde_json::from_str(arguments_json) {
            Ok(serde_json::Value::Object(arguments)) => arguments,
            _ => {
                return Ok(Outcome::error_message(
                    "an MCP tool takes a JSON object of arguments",
                ));
            }
        };
        let span = toolmesh_telemetry::call_span!(
            context.trace.is_traced(),
            "tools/call",
            otel.kind = "client",
            otel.name = %format_args!("tools/call {}", self.name),
        );
        toolmesh_telemetry::spans::set(&span, "mcp.method.name", "tools/call");
        let mut params =
            rmcp::model::CallToolRequestParams::new(self.name.clone()).with_arguments(arguments);
        params.meta = Some(call_meta(context, &context.trace.onward(&span)));
        // Either call sends notifications/cancelled if dropped unanswered
        // (a task's, tasks/cancel if dropped while the server holds it).
        let call = async {
            match context.progress() {
                Some(reported) => {
                    progress::call_tool(&self.peer, params, &self.progress, reported).await
                }
                None => self
                    .peer
                    .call_tool(params)
                    .await
                    .map(Answer::Result)
                    .map_err(CallError::Call),
            }
        };
        let answer = tokio::time::timeout_at(deadline.at(), call.instrument(span))
            .await
            .map_err(|_| BackendError::DeadlineExceeded)?;
        match answer {
            Ok(Answer::Result(result)) => Ok(convert::outcome(&result)),
            Ok(Answer::Ended(ended)) => Ok(ended.outcome()),
            Err(CallError::Task(lost)) => {
                if matches!(lost, Lost::Unreachable(_)) {
                    self.tools_changed.notify_one();
                }
                Err(lost.to_backend_error(&self.label))
            }
            Err(CallError::Call(ServiceError::McpError(error))) => {
                self.tools_changed.notify_one();
                Ok(Outcome::error_message(&format!(
                    "the MCP server refused the call: {}",
                    error.message
                )))
            }
            Err(CallError::Call(error)) => {
                // The loop lists again at once: a server that has gone
                // (one reached over HTTP may say so no other way) has its
                // tools withdrawn.
                self.tools_changed.notify_one();
                Err(BackendError::Unavailable(format!(
                    "MCP server {}: {error}",
                    self.label
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rmcp::ErrorData;

    use super::*;

    #[test]
    fn a_missing_method_is_told_apart_from_a_failed_request() {
        let missing = ServiceError::McpError(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            "Method not found",
            None,
        ));
        assert!(matches!(
            request_error("subscriptions/listen", &missing),
            SessionError::MethodNotFound("subscriptions/listen")
        ));
        let refused = ServiceError::McpError(ErrorData::internal_error("boom", None));
        for error in [refused, ServiceError::TransportClosed] {
            assert!(matches!(
                request_error("subscriptions/listen", &error),
                SessionError::Request { .. }
            ));
        }
    }
}
