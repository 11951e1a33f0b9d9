//! [`serve`]: the sidecar as a library: serve `ToolRuntime` and
//! `grpc.health.v1.Health` ([`crate::health`]) on a bound listener, keep
//! the registry informed, withdraw on request ([`serve_with_withdraw`]),
//! and shut down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::net::TcpListener;
use toolmesh_proto::grant::{self, CallKey, Verifier};
use toolmesh_proto::pb::tool_runtime_server::ToolRuntimeServer;
use toolmesh_proto::tls::{self, ClientTls, ServerTls};
use toolmesh_proto::token::Token;
use toolmesh_proto::{endpoint, pb};

use crate::SidecarError;
use crate::admin::Admin;
use crate::announcer::{Announcer, WITHDRAW_TIMEOUT, registry_channel};
use crate::health::Readiness;
use crate::mcp::{McpServer, Sources};
use crate::metrics::{Metered, Metrics};
use crate::refusal::AnnounceRefused;
use crate::runtime::{Runtime, RuntimeService};
use crate::tasks::{AbortOnDrop, RegistryReport, Tasks};
use crate::tool::Tool;
use crate::toolset::ToolSet;

/// How long in-flight calls may take to finish after shutdown.
pub const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Where the registry is and how this instance presents itself.
#[derive(Debug, Clone, Default)]
pub struct ServeOptions {
    /// Registry address: `host:port`, `http://host:port` or
    /// `https://host:port` (TLS with `registry_tls`), e.g.
    /// `"127.0.0.1:50051"`.
    pub registry: String,
    /// TLS settings for an `https://` registry: the CA its certificate is
    /// verified with, and this sidecar's client certificate. `None`: the
    /// public roots, no client certificate.
    pub registry_tls: Option<ClientTls>,
    /// Address the registry dials to reach this sidecar, `host:port`,
    /// `http://host:port` or `https://host:port` (with `tls` set: written
    /// without a scheme it is `https://`); default `http://<listener
    /// address>`, or `https://` with `tls` (an unspecified IP becomes
    /// 127.0.0.1).
    pub advertise: Option<String>,
    /// Serve `ToolRuntime` and health over TLS with these settings.
    pub tls: Option<ServerTls>,
    /// Take `Execute` calls only over a connection whose verified client
    /// certificate carries this identity (a URI or DNS SAN): the
    /// registry's, as `tls`'s client CA verified it; on top of the
    /// call's grant.
    pub registry_identity: Option<String>,
    /// Stable instance id; default [`default_instance_id`].
    pub instance_id: Option<String>,
    /// HTTP/2 `MAX_CONCURRENT_STREAMS` to advertise; default
    /// [`MAX_CONCURRENT_STREAMS`].
    pub max_concurrent_streams: Option<u32>,
    /// The key the registry signs this instance's `Execute` grants with
    /// ([`toolmesh_proto::grant`]), sent in the announce; `None`: a new
    /// random one, which is what a sidecar should use. Set it only to
    /// mint grants of one's own, as tests calling `Execute` directly do.
    pub execute_key: Option<CallKey>,
    /// How far from this clock a grant's issue time may be; `None`:
    /// [`grant::DEFAULT_MAX_AGE`].
    pub grant_max_age: Option<Duration>,
    /// The token this sidecar registers with (one of the registry's
    /// `--registrants-file` credentials); `None` when registration is open.
    pub registration_token: Option<Token>,
    /// Where executions, announces, heartbeats and the lease are recorded
    /// (the admin port's `/metrics`); `None`: recorded where no one reads.
    pub metrics: Option<Metrics>,
    /// Told when the sidecar is ready, as its health says (the admin
    /// port's `/readyz`, see [`crate::health`]); `None`: no one is told.
    pub readiness: Option<toolmesh_telemetry::admin::Readiness>,
    /// Where to serve the admin port (`/metrics` of `metrics`, `/livez`,
    /// `/readyz` of `readiness`), bound before the first announce and
    /// stopped once the sidecar has drained; `None`: no admin port.
    pub admin: Option<SocketAddr>,
    /// MCP servers whose tools are served beside the fixed ones, each
    /// kept running (or reached) and listed ([`crate::mcp`]).
    pub mcp_servers: Vec<McpServer>,
    /// Most tasks (`RunTask`) this instance holds at once, running or
    /// with an end the registry has not taken yet; `None`:
    /// [`DEFAULT_MAX_TASKS`].
    pub max_tasks: Option<usize>,
}

/// Most tasks an instance holds at once by default.
pub const DEFAULT_MAX_TASKS: usize = 64;

/// HTTP/2 `MAX_CONCURRENT_STREAMS` the sidecar advertises by default:
/// calls one connection may have in flight (the registry pools its
/// connections, and queues beyond this rather than fail).
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// `<hostname>-<8 random hex digits>`.
pub fn default_instance_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "sidecar".to_owned());
    format!("{host}-{:08x}", rand::rng().random::<u32>())
}

/// The URL to advertise for a listener bound to `addr`: `http://addr`
/// (`https://addr` when it serves TLS), with an unspecified IP (0.0.0.0,
/// ::) replaced by 127.0.0.1 and a warning.
pub fn default_advertise(addr: SocketAddr, tls: bool) -> String {
    let mut addr = addr;
    if addr.ip().is_unspecified() {
        tracing::warn!(
            %addr,
            "listening on an unspecified address; advertising 127.0.0.1 (set --advertise / TOOLMESH_ADVERTISE for other hosts)"
        );
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{addr}")
}

/// Serves `tools` on `listener` and keeps them announced to the registry
/// until `shutdown` completes; then withdraws (within a few seconds), stops
/// the tasks still running (each reported failed `UNAVAILABLE`, within a
/// few seconds more), stops accepting calls, lets in-flight ones finish
/// (up to [`DRAIN_GRACE`]) and returns `Ok`.
///
/// It serves `grpc.health.v1.Health` on the same listener:
/// `NOT_SERVING` until the first announce succeeded, `SERVING` from then
/// on, `NOT_SERVING` again once withdrawn (see [`crate::health`]).
///
/// An announce the registry refuses for good (`INVALID_ARGUMENT`,
/// `FAILED_PRECONDITION`) stops it the same way, and it returns
/// [`SidecarError::Refused`] with the registry's reason; an unreachable or
/// unavailable registry is retried with backoff.
///
/// Dropping the returned future stops everything without withdrawing (the
/// lease then expires), like a crash.
pub async fn serve(
    listener: TcpListener,
    tools: Vec<Tool>,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SidecarError> {
    serve_with_withdraw(listener, tools, opts, std::future::pending(), shutdown).await
}

/// [`serve`], which also withdraws when `withdraw` completes (the
/// `toolmesh-sidecar` binary: on SIGUSR1, see
/// [`crate::shutdown::withdraw_requested`]), before `shutdown`: it leaves
/// the registry (health `NOT_SERVING` once the registry answered, within a
/// few seconds), stops announcing for good, and keeps serving calls, those
/// in flight and any the registry still sends, until `shutdown` completes;
/// then it drains and returns as [`serve`] does.
pub async fn serve_with_withdraw(
    listener: TcpListener,
    tools: Vec<Tool>,
    opts: ServeOptions,
    withdraw: impl Future<Output = ()> + Send + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SidecarError> {
    let addr = listener.local_addr().map_err(SidecarError::Io)?;
    let metrics = opts.metrics.clone().unwrap_or_default();
    let told = match (&opts.readiness, opts.admin) {
        (Some(told), _) => Some(told.clone()),
        (None, Some(_)) => Some(toolmesh_telemetry::admin::Readiness::not_ready("starting")),
        (None, None) => None,
    };
    let admin = match (opts.admin, &told) {
        (Some(addr), Some(told)) => Some(
            Admin::start(addr, metrics.clone(), told.clone())
                .await
                .map_err(|source| SidecarError::AdminListen { addr, source })?,
        ),
        _ => None,
    };
    // Every port is bound before any is said to be (the binary's log line
    // names the address that --listen's port 0 chose).
    tracing::info!(target: "toolmesh_sidecar", %addr, tools = tools.len(), "bound");
    let tools = Arc::new(ToolSet::new(tools, opts.mcp_servers.len())?);
    let runtime = Arc::new(Runtime::serving(tools.clone()));
    let registry = endpoint::url(&opts.registry).map_err(SidecarError::InvalidRegistry)?;
    let serves_tls = opts.tls.is_some();
    let endpoint = match &opts.advertise {
        Some(advertise) => advertised(advertise, serves_tls)?,
        None => default_advertise(addr, serves_tls),
    };
    if opts.registry_identity.is_some() && !serves_tls {
        return Err(SidecarError::TlsSettings(
            "a registry identity needs TLS with a client CA (--tls-cert-file, --tls-key-file, --tls-client-ca-file)",
        ));
    }
    let registry_tls = match &opts.registry_tls {
        Some(tls) => tls.clone(),
        None => ClientTls::load(tls::ClientFiles::default())?,
    };
    let instance_id = opts.instance_id.clone().unwrap_or_else(default_instance_id);
    let max_streams = opts
        .max_concurrent_streams
        .unwrap_or(MAX_CONCURRENT_STREAMS);
    let execute_key = match &opts.execute_key {
        Some(key) => key.clone(),
        None => CallKey::generate()?,
    };
    let announce = pb::AnnounceRequest {
        instance_id: instance_id.clone(),
        endpoint: endpoint.clone(),
        tools: runtime.descriptors(),
        execute_key: execute_key.as_bytes().to_vec(),
    };
    let grants = Arc::new(Verifier::new(
        execute_key,
        instance_id.clone(),
        opts.grant_max_age.unwrap_or(grant::DEFAULT_MAX_AGE),
    ));
    let (mut readiness, health) = Readiness::new(told).await;
    let channel =
        registry_channel(&registry, registry_tls).map_err(|e| SidecarError::RegistryUri {
            reason: std::error::Error::source(&e)
                .map_or_else(|| e.to_string(), ToString::to_string),
            url: registry.clone(),
        })?;
    let announcer = Announcer::new(
        &registry,
        channel.clone(),
        announce,
        tools.subscribe(),
        opts.registration_token.clone(),
        readiness.clone(),
        metrics.clone(),
    );
    let tasks = Arc::new(Tasks::new(
        opts.max_tasks.unwrap_or(DEFAULT_MAX_TASKS),
        Arc::new(RegistryReport::new(
            channel,
            opts.registration_token.clone(),
        )),
        metrics.clone(),
    ));
    let _tasks_end = AbortOnDrop(tasks.clone());
    tracing::info!(%addr, %endpoint, instance = %instance_id, %registry, "sidecar serving");

    let sources = Sources::start(&opts.mcp_servers, &tools, &metrics);
    let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
    let server = builder(max_streams)
        .add_service(health)
        .add_service(ToolRuntimeServer::new(Metered::new(
            RuntimeService::new(runtime.clone(), grants)
                .with_identity(opts.registry_identity.clone())
                .with_tasks(tasks.clone()),
            &runtime,
            metrics,
        )))
        .serve_with_incoming_shutdown(tls::incoming(incoming(listener), opts.tls.clone()), async {
            let _ = drain_rx.await;
        });
    let control = control(announcer, readiness.clone(), withdraw, shutdown);
    tokio::pin!(server, control);
    let refused = tokio::select! {
        result = &mut server => {
            // The server stopped by itself: nothing was asked to shut down.
            result?;
            return Err(SidecarError::Stopped);
        }
        outcome = &mut control => outcome.err(),
    };
    // Work no one will wait for: each task still running reports that it
    // failed, while the registry can still be told.
    tasks.shutdown(WITHDRAW_TIMEOUT).await;
    // Stop accepting, then let the health watchers go (they have seen
    // NOT_SERVING, and would hold the drain open): the server is polled
    // first, and closes its listener on that poll, so a client whose
    // watch ends finds the port closed (it found it open while the
    // watchers were ended first).
    let _ = drain_tx.send(());
    let (drained, ()) = tokio::join!(tokio::time::timeout(DRAIN_GRACE, server), async {
        tokio::task::yield_now().await;
        readiness.end_watches().await;
    });
    match drained {
        Ok(result) => result?,
        Err(_) => {
            tracing::warn!(grace = ?DRAIN_GRACE, "calls still running after the grace period; stopping anyway")
        }
    }
    sources.stop().await;
    if let Some(admin) = admin {
        admin.stop().await;
    }
    tracing::info!("sidecar stopped");
    match refused {
        Some(refused) => Err(refused.into()),
        None => Ok(()),
    }
}

/// The advertised `address` as a URL: `https://` by default when the
/// sidecar serves TLS, and refused when its scheme says otherwise than
/// how the sidecar serves.
fn advertised(address: &str, serves_tls: bool) -> Result<String, SidecarError> {
    let scheme = if serves_tls { "https" } else { "http" };
    let url = endpoint::url_or(address, scheme).map_err(SidecarError::InvalidAdvertise)?;
    if !url.starts_with(&format!("{scheme}://")) {
        return Err(SidecarError::AdvertiseScheme {
            url,
            serves: if serves_tls { "TLS" } else { "plaintext" },
        });
    }
    Ok(url)
}

/// Keeps the sidecar announced until `withdraw` or `shutdown` completes,
/// or an announce is refused for good; then withdraws and reports
/// NOT_SERVING. After a withdraw request, waits for `shutdown` too.
async fn control(
    announcer: Announcer,
    readiness: Readiness,
    withdraw: impl Future<Output = ()>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AnnounceRefused> {
    tokio::pin!(shutdown);
    let requested = announcer
        .run_until(async {
            tokio::select! {
                () = withdraw => true,
                () = &mut shutdown => false,
            }
        })
        .await;
    readiness.not_serving().await;
    if requested? {
        tracing::info!("left the registry on request; serving calls until shutdown");
        shutdown.await;
    }
    Ok(())
}

/// The sidecar's HTTP/2 server settings: `max_streams` concurrent streams
/// per connection, and a keepalive ping every 30 s answered within 10 s.
pub fn builder(max_streams: u32) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(max_streams))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
}

/// Accepted connections with `TCP_NODELAY` and keepalive set: a custom
/// incoming stream does not get the server builder's socket options.
pub fn incoming(listener: tokio::net::TcpListener) -> tonic::transport::server::TcpIncoming {
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)))
}
