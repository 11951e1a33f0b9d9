//! Keeps one MCP server's tools published: connect, list, publish, list
//! again on `notifications/tools/list_changed` and every relist interval;
//! when the server exits or stops answering, withdraw its tools and try
//! again with backoff. [`Sources`] runs one such loop per server.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use toolmesh_telemetry::shown::{Clipped, Quoted};

use super::McpServer;
use super::convert::{self, Skipped};
use super::progress::Routes;
use super::session::{self, Handler, McpBackend, SessionError};
use super::watch::Watch;
use crate::announcer::Backoff;
use crate::metrics::Metrics;
use crate::tool::Tool;
use crate::toolset::ToolSet;

/// First delay before a server is started or reached again.
const RESTART_START: Duration = Duration::from_millis(250);
/// Longest delay between two attempts.
const RESTART_CAP: Duration = Duration::from_secs(30);
/// A server up this long has its backoff start over.
const STABLE: Duration = Duration::from_secs(60);
/// How often a connected server is pinged: a failed ping withdraws its
/// tools and reconnects.
const PING_INTERVAL: Duration = Duration::from_secs(5);
/// Longest a server is given to stop at shutdown.
const STOP_TIMEOUT: Duration = Duration::from_secs(2);

/// Every MCP server's loop, stopped together.
#[derive(Debug)]
pub(crate) struct Sources {
    stop: CancellationToken,
    tasks: JoinSet<()>,
}

impl Sources {
    /// Starts one loop per server; server `i` publishes share `i` of
    /// `tools`.
    /// Each server's state is recorded in `metrics`.
    pub(crate) fn start(servers: &[McpServer], tools: &Arc<ToolSet>, metrics: &Metrics) -> Self {
        let stop = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for (index, server) in servers.iter().enumerate() {
            tasks.spawn(supervise(
                index,
                server.clone(),
                tools.clone(),
                metrics.clone(),
                stop.child_token(),
            ));
        }
        Self { stop, tasks }
    }

    /// Stops every server (a stdio server gets its stdin closed, then is
    /// killed) and waits for their loops, at most [`STOP_TIMEOUT`] and a
    /// little.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        let all = async { while self.tasks.join_next().await.is_some() {} };
        if tokio::time::timeout(STOP_TIMEOUT * 2, all).await.is_err() {
            self.tasks.abort_all();
        }
    }
}

/// Why a connected server's loop woke, when nothing failed.
enum Wake {
    Relist,
    Stop,
}

/// How a connection ended.
enum Ended {
    Stopped,
    Failed(SessionError),
}

async fn supervise(
    index: usize,
    server: McpServer,
    tools: Arc<ToolSet>,
    metrics: Metrics,
    stop: CancellationToken,
) {
    let label: Arc<str> = Arc::from(server.label.as_str());
    // Retried for as long as the sidecar runs, at most once per cap.
    let mut delays = Backoff::between(RESTART_START, RESTART_CAP);
    let mut refused_listen = false;
    loop {
        let started = Instant::now();
        let ended = connected(
            index,
            &server,
            &label,
            &tools,
            &metrics,
            &stop,
            &mut refused_listen,
        )
        .await;
        tools.publish(index, Vec::new());
        let error = match ended {
            Ended::Stopped => {
                metrics.mcp_lost(&label, false);
                return;
            }
            Ended::Failed(error) => error,
        };
        metrics.mcp_lost(&label, true);
        if started.elapsed() >= STABLE {
            delays.reset();
        }
        let delay = delays.next_delay();
        let error = error.to_string();
        tracing::warn!(server = %label, error = %Clipped(&error), ?delay, "MCP server unavailable; its tools are withdrawn until it is back");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// One connection: lists and publishes until the server goes away or the
/// sidecar stops. `refused_listen` is whether this server already refused the change
/// stream it advertises.
async fn connected(
    index: usize,
    server: &McpServer,
    label: &Arc<str>,
    tools: &ToolSet,
    metrics: &Metrics,
    stop: &CancellationToken,
    refused_listen: &mut bool,
) -> Ended {
    let tools_changed = Arc::new(Notify::new());
    let progress = Arc::new(Routes::default());
    let handler = Handler {
        tools_changed: tools_changed.clone(),
        progress: progress.clone(),
    };
    let session = tokio::select! {
        session = session::connect(&server.transport, label, handler) => session,
        () = stop.cancelled() => return Ended::Stopped,
    };
    let session = match session {
        Ok(session) => session,
        Err(error) => return Ended::Failed(error),
    };
    let peer = session.peer().clone();
    let Some(info) = peer.peer_info() else {
        return Ended::Failed(SessionError::Handshake("no server info".to_owned()));
    };
    let mut watch = match Watch::open(&peer, &info, label, refused_listen).await {
        Ok(watch) => watch,
        Err(error) => return Ended::Failed(error),
    };
    let (name, version) = info.server_info.as_ref().map_or(("", ""), |about| {
        (about.name.as_str(), about.version.as_str())
    });
    tracing::info!(
        server = %label,
        protocol = %info.protocol_version,
        name = %Quoted(name),
        version = %Quoted(version),
        follows = watch.follows(),
        relist_interval = ?server.relist_interval,
        "MCP server connected"
    );
    let cancel = session.cancellation_token();
    let closed = session.waiting();
    tokio::pin!(closed);
    // `Ok` when the sidecar stops, `Err` when the server is lost; a closed
    // connection returns at once, there being nothing left to close.
    let ended = loop {
        let listed = tokio::select! {
            listed = session::list(&peer) => listed,
            reason = &mut closed => return Ended::Failed(gone(&reason)),
            () = stop.cancelled() => break Ok(()),
        };
        let listed = match listed {
            Ok(listed) => listed,
            Err(error) => break Err(error),
        };
        let published = publishable(server, label, &listed, &peer, &tools_changed, &progress);
        let mut count = published.len();
        for name in tools.publish(index, published) {
            count -= 1;
            tracing::warn!(server = %label, tool = %name, "another backend of this sidecar already serves a tool of this name; this server's is left out (set backend.mcp.prefix)");
        }
        metrics.mcp_listed(label, count);
        tracing::info!(server = %label, listed = listed.len(), published = count, "MCP server's tools listed");
        let relist_at = Instant::now() + server.relist_interval;
        let woke = loop {
            tokio::select! {
                () = tools_changed.notified() => break Ok(Wake::Relist),
                () = tokio::time::sleep_until(relist_at) => break Ok(Wake::Relist),
                changed = watch.next_change() => break changed.map(|()| Wake::Relist),
                () = tokio::time::sleep(PING_INTERVAL), if watch.pings() => {
                    if let Err(error) = session::ping(&peer).await {
                        break Err(error);
                    }
                }
                reason = &mut closed => return Ended::Failed(gone(&reason)),
                () = stop.cancelled() => break Ok(Wake::Stop),
            }
        };
        match woke {
            Ok(Wake::Relist) => {}
            Ok(Wake::Stop) => break Ok(()),
            Err(error) => break Err(error),
        }
    };
    cancel.cancel();
    let _ = tokio::time::timeout(STOP_TIMEOUT, &mut closed).await;
    match ended {
        Ok(()) => Ended::Stopped,
        Err(error) => Ended::Failed(error),
    }
}

/// The error of a connection that closed, for `reason`.
fn gone(reason: &impl std::fmt::Debug) -> SessionError {
    SessionError::Request {
        what: "the connection",
        reason: format!("closed ({reason:?})"),
    }
}

/// The listed tools the selection keeps and the registry would take, as
/// tools calling the server; the others are logged.
fn publishable(
    server: &McpServer,
    label: &Arc<str>,
    listed: &[rmcp::model::Tool],
    peer: &rmcp::service::Peer<rmcp::service::RoleClient>,
    tools_changed: &Arc<Notify>,
    progress: &Arc<Routes>,
) -> Vec<Tool> {
    let mut published = Vec::new();
    for tool in listed {
        match convert::descriptor(tool, &server.selection, &server.defaults) {
            Ok(descriptor) => {
                let backend = McpBackend {
                    name: tool.name.to_string(),
                    label: label.clone(),
                    peer: peer.clone(),
                    tools_changed: tools_changed.clone(),
                    progress: progress.clone(),
                };
                published.push(
                    Tool::new(descriptor, Arc::new(backend))
                        .with_max_output_bytes(server.max_output_bytes),
                );
            }
            Err(Skipped::NotSelected) => {}
            Err(why) => {
                tracing::warn!(server = %label, tool = %Quoted(&tool.name), why = %Clipped(&why.to_string()), "MCP tool left out");
            }
        }
    }
    published
}
