//! The MCP endpoint's HTTP server: `/mcp` (rmcp's Streamable HTTP
//! service) behind authentication and the session bound, on its own
//! listener, in TLS with the registry's `--tls-*` settings when they are
//! set (HTTP/1.1 and HTTP/2 by ALPN).
//!
//! On shutdown ([`McpEndpoint::serve`]'s `drain`): new connections and new
//! requests are refused, `subscriptions/listen` streams end gracefully (with
//! their final result) and notifications stop, calls in flight may finish
//! within the grace period, then sessions are closed, which ends their
//! streams. Whatever is still open when the registry cuts connections off
//! (`cut`) ends then.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    middleware::{from_fn, from_fn_with_state},
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolmesh_proto::tls::ServerTls;

use super::{
    auth,
    handler::{Limits, McpHandler, Shared},
    sessions::{self, BoundedSessions},
};
use crate::{
    access::Access,
    calls::invoke::Invoker,
    catalog::Catalog,
    catalog::search::ToolSearch,
    config::Config,
    serving::http_listener::{HttpListener, PeerAddr},
    tasks::Tasks,
};

/// The endpoint's path.
pub(crate) const PATH: &str = "/mcp";

/// The `Host` names accepted on loopback when `--mcp-allowed-hosts` is
/// empty.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The endpoint's settings, from the registry's flags.
#[derive(Debug, Clone)]
pub(crate) struct McpSettings {
    /// Longest a `tools/call` may take.
    pub call_timeout: Duration,
    /// Most sessions, and most `subscriptions/listen` streams, at once.
    pub max_sessions: usize,
    /// A session idle this long is closed.
    pub session_idle_timeout: Duration,
    /// Most tools per `tools/list` page.
    pub page_size: u32,
    /// Whether `toolmesh.search_tools` is offered.
    pub search_tool: bool,
    /// Whether `tools/list` lists only the search and call tools.
    pub progressive: bool,
    /// `Host` headers answered; empty: see [`Config::mcp_allowed_hosts`].
    pub allowed_hosts: Vec<String>,
    /// Browser origins answered.
    pub allowed_origins: Vec<String>,
    /// Largest request body, and (less a margin) largest page of tools.
    pub max_body_bytes: usize,
}

impl McpSettings {
    /// The settings `config`'s flags give.
    pub(crate) fn from_config(config: &Config) -> Self {
        Self {
            call_timeout: config.mcp_call_timeout,
            max_sessions: config.mcp_max_sessions,
            session_idle_timeout: config.mcp_session_idle_timeout,
            page_size: config.mcp_page_size,
            search_tool: config.mcp_search_tool,
            progressive: config.mcp_discovery == crate::config::McpDiscovery::Progressive,
            allowed_hosts: config.mcp_allowed_hosts.clone(),
            allowed_origins: config.mcp_allowed_origins.clone(),
            max_body_bytes: config.max_message_bytes,
        }
    }
}

/// The MCP endpoint over the registry's parts.
pub(crate) struct McpEndpoint {
    shared: Arc<Shared>,
    gate: auth::Gate,
    sessions: Arc<BoundedSessions>,
    settings: McpSettings,
}

impl McpEndpoint {
    /// The endpoint: calls go through `invoker`, lists and notifications
    /// follow `catalog`, `toolmesh.search_tools` searches `index`.
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        access: Arc<Access>,
        invoker: Arc<Invoker>,
        tasks: Arc<Tasks>,
        index: Arc<ToolSearch>,
        settings: McpSettings,
    ) -> Self {
        let limits = Limits {
            call_timeout: settings.call_timeout,
            page_size: settings.page_size,
            page_bytes: settings
                .max_body_bytes
                .saturating_sub(64 << 10)
                .max(64 << 10),
            max_subscriptions: settings.max_sessions,
        };
        let gate = auth::Gate {
            access: access.clone(),
            invoker: invoker.clone(),
        };
        let shared = Arc::new(Shared::new(
            catalog,
            access,
            invoker,
            tasks,
            index,
            super::handler::OwnTools {
                search: settings.search_tool,
                progressive: settings.progressive,
            },
            limits,
        ));
        let sessions = Arc::new(BoundedSessions::new(
            settings.max_sessions,
            settings.session_idle_timeout,
        ));
        Self {
            shared,
            gate,
            sessions,
            settings,
        }
    }

    /// The `/mcp` route with its layers, for a listener on `local`; the
    /// transport's sessions and streams end at once when `transport` is
    /// cancelled.
    pub(crate) fn router(&self, local: SocketAddr, transport: &CancellationToken) -> Router {
        let settings = &self.settings;
        let sessions = self.sessions.clone();
        let mut config = StreamableHttpServerConfig::default()
            .with_json_response(true)
            .with_cancellation_token(transport.child_token())
            .with_max_request_body_bytes(settings.max_body_bytes)
            .with_allowed_origins(settings.allowed_origins.clone())
            .enforce_origin_validation();
        config = match (settings.allowed_hosts.is_empty(), local.ip().is_loopback()) {
            (false, _) => config.with_allowed_hosts(settings.allowed_hosts.clone()),
            (true, true) => config.with_allowed_hosts(LOOPBACK_HOSTS),
            (true, false) => config.disable_allowed_hosts(),
        };
        let shared = self.shared.clone();
        let service = StreamableHttpService::new(
            move || Ok(McpHandler::new(shared.clone())),
            sessions.clone(),
            config,
        );
        Router::new()
            .route_service(PATH, service)
            .layer(from_fn(sessions::no_content_when_ended))
            .layer(from_fn_with_state(
                (sessions, settings.max_body_bytes),
                sessions::refuse_when_full,
            ))
            .layer(from_fn_with_state(self.gate.clone(), auth::authenticate))
    }

    /// Serves on `listener` (in TLS if `tls` is set) until `drain` is
    /// cancelled and the connections have closed: calls in flight get
    /// `grace` to finish; connections are closed at once when `cut` is
    /// cancelled.
    pub(crate) async fn serve(
        self,
        listener: TcpListener,
        tls: Option<ServerTls>,
        drain: CancellationToken,
        cut: CancellationToken,
        grace: Duration,
    ) -> std::io::Result<()> {
        let local = listener.local_addr()?;
        let transport = cut.child_token();
        let router = self.router(local, &transport);
        let (shared, sessions) = (self.shared.clone(), self.sessions.clone());
        let draining = drain.clone();
        let ending = tokio::spawn(async move {
            draining.cancelled().await;
            shared.drain();
            if tokio::time::timeout(grace, shared.calls_finished())
                .await
                .is_err()
            {
                tracing::warn!("MCP calls still in flight at the end of the grace period");
            }
            sessions.close_all().await;
        });
        let _ending = AbortOnDrop(ending);
        let listener = HttpListener::new(listener, tls, &cut);
        axum::serve(
            listener,
            router.into_make_service_with_connect_info::<PeerAddr>(),
        )
        .with_graceful_shutdown(drain.cancelled_owned())
        .await
    }
}

/// Aborts a task when dropped: the drain, if serving ends first.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
