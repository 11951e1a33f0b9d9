//! Serving the assembled registry: its gRPC services, the admin port and the
//! MCP endpoint, each bound and checked before any listens, and the drain
//! when it stops.

use std::{future::Future, sync::Arc, time::Duration};

use futures::FutureExt as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolmesh_proto::{
    FILE_DESCRIPTOR_SET,
    pb::{
        self, approvals_server::ApprovalsServer, registration_server::RegistrationServer,
        tasks_server::TasksServer, tool_registry_server::ToolRegistryServer,
    },
};

use crate::{
    config::Config,
    serving::api::{ApprovalsApi, PinsApi, RegistrationApi, TasksApi, ToolRegistryApi},
    serving::first_route::FirstRoute,
    serving::mcp::{McpEndpoint, McpSettings},
    serving::readiness::Reporter,
    serving::watch::{WatchLimits, Watchers},
    serving::workers,
};

use super::{Registry, ServeError};

/// How long the server may take to return once its connections are cut.
const CUT_OFF_WAIT: Duration = Duration::from_secs(2);

/// The descriptor sets server reflection serves: the contract, gRPC health,
/// and the google.rpc status and error details with the well-known types
/// they import, so `grpcurl` decodes every error detail with no `.proto`
/// file at hand.
const REFLECTED: [&[u8]; 3] = [
    FILE_DESCRIPTOR_SET,
    tonic_health::pb::FILE_DESCRIPTOR_SET,
    tonic_types::pb::FILE_DESCRIPTOR_SET,
];

/// The services this server serves, which reflection lists: not
/// `ToolRuntime`, whose descriptor it knows but which only sidecars serve.
const SERVED: [&str; 5] = [
    tonic_health::pb::health_server::SERVICE_NAME,
    tonic_reflection::pb::v1::server_reflection_server::SERVICE_NAME,
    tonic_reflection::pb::v1alpha::server_reflection_server::SERVICE_NAME,
    pb::registration_server::SERVICE_NAME,
    pb::tool_registry_server::SERVICE_NAME,
];

fn reflection() -> tonic_reflection::server::Builder<'static> {
    let builder = REFLECTED.iter().fold(
        tonic_reflection::server::Builder::configure(),
        |builder, set| builder.register_encoded_file_descriptor_set(set),
    );
    SERVED
        .iter()
        .fold(builder, |builder, name| builder.with_service_name(*name))
}
impl Registry {
    /// Serves on `listener` until `shutdown` completes, reporting
    /// NOT_SERVING until the catalog is loaded (`crate::serving::readiness`); then
    /// reports NOT_SERVING, keeps serving for the shutdown delay, ends watch
    /// streams, stops accepting, lets in-flight calls finish for up to the
    /// grace period, and cuts off every connection still open after it.
    pub async fn serve(
        mut self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        if let Ok(own) = listener.local_addr() {
            self.catalog.endpoints().set_own_address(own);
            check_exposure(&self.config, own)?;
        }
        let mcp_listener = self.mcp_listener(&listener).await?;
        let console_listener = self
            .console_listener(&listener, mcp_listener.as_ref())
            .await?;
        if let Some(admin) = self.admin.as_ref().and_then(|a| a.local_addr().ok()) {
            tracing::info!(address = %admin, "admin listening");
        }
        if let Ok(own) = listener.local_addr() {
            tracing::info!(address = %own, lease_ttl = ?self.config.lease_ttl, "toolmesh registry listening");
        }
        let (health, health_service) = tonic_health::server::health_reporter();
        let reason = if self.config.redis.is_some() {
            "the catalog is not loaded from redis yet"
        } else {
            "starting"
        };
        let reporter = Arc::new(
            Reporter::new(health, self.readiness.clone(), self.metrics.clone(), reason).await,
        );
        let cut = CancellationToken::new();
        let mcp_drain = CancellationToken::new();
        let mut mcp = McpTask(mcp_listener.map(|listener| {
            let endpoint = McpEndpoint::new(
                self.catalog.clone(),
                self.access.clone(),
                self.invoker.clone(),
                self.tasks.clone(),
                self.search.clone(),
                McpSettings::from_config(&self.config),
            );
            tokio::spawn(endpoint.serve(
                listener,
                self.config.tls.clone(),
                mcp_drain.clone(),
                cut.clone(),
                self.config.shutdown_grace,
            ))
        }));
        let console_drain = CancellationToken::new();
        let _console = console_listener.map(|listener| {
            let mut console = self.console(crate::serving::console::session::Sealer::random());
            let redis = self.redis_pool();
            let (tls, drain, cut) = (self.config.tls.clone(), console_drain.clone(), cut.clone());
            if let Some(shared) = console.shared_tail.clone() {
                tokio::spawn(shared.publish(console.tail.clone(), drain.clone()));
            }
            let task = tokio::spawn(async move {
                // Connections wait in the listener's backlog meanwhile.
                if let Some((pool, prefix)) = redis {
                    console.sealer =
                        crate::serving::console::shared_key::sealer(&pool, &prefix).await;
                }
                console.serve(listener, tls, drain, cut).await
            });
            AbortOnDrop(tokio::spawn(async move {
                match task.await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => tracing::error!(%error, "console failed"),
                    Err(error) => tracing::error!(%error, "console task failed"),
                }
            }))
        });
        let stop_admin = CancellationToken::new();
        let _stop_admin = stop_admin.clone().drop_guard();
        if let Some(admin) = self.admin.take() {
            let (registry, readiness) = (self.metrics.registry(), self.readiness.clone());
            tokio::spawn(async move {
                let stopped = stop_admin.cancelled_owned();
                if let Err(error) =
                    toolmesh_telemetry::admin::serve(admin, registry, readiness, stopped).await
                {
                    tracing::error!(%error, "admin port stopped");
                }
            });
        }
        // Embedded, the catalog is loaded already: ready before the first
        // health check can be answered.
        let became_ready = if self.catalog.loaded().now_or_never().is_some() {
            reporter.ready().await;
            None
        } else {
            Some(AbortOnDrop(tokio::spawn({
                let (catalog, reporter) = (self.catalog.clone(), reporter.clone());
                async move {
                    catalog.loaded().await;
                    reporter.ready().await;
                    tracing::info!("catalog loaded; ready");
                }
            })))
        };

        let reflection_v1 = reflection().build_v1()?;
        let reflection_alpha = reflection().build_v1alpha()?;

        let watchers = CancellationToken::new();
        let max = self.config.max_message_bytes;
        let watch_limits = WatchLimits {
            max_watchers: self.config.max_watchers,
            max_per_connection: self.config.max_watchers_per_connection,
            lag_events: self.config.watch_lag_events,
            lag_bytes: self.config.watch_lag_bytes,
        };
        let registry = ToolRegistryServer::new(
            ToolRegistryApi::new(
                self.catalog.clone(),
                self.access.clone(),
                self.invoker.clone(),
                Arc::new(Watchers::new(watch_limits)),
                watchers.clone(),
            )
            .max_message_bytes(max)
            .with_search(self.search.clone())
            .holding_with(self.tasks.clone()),
        )
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
        let tasks = TasksServer::new(TasksApi::new(self.access.clone(), self.tasks.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max);
        let approvals =
            ApprovalsServer::new(ApprovalsApi::new(self.access.clone(), self.tasks.clone()))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max);
        let pins = pb::pins_server::PinsServer::new(PinsApi::new(
            self.access.clone(),
            self.catalog.clone(),
        ));
        let registration = RegistrationServer::new(
            RegistrationApi::new(self.catalog.clone(), self.access.clone())
                .reporting_to(self.tasks.clone())
                .sharing(self.config.max_tools)
                .audit(self.audit.clone())
                .metered(self.metrics.clone()),
        )
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);

        let stop = CancellationToken::new();
        let router = tonic::transport::Server::builder()
            .max_concurrent_streams(Some(self.config.max_concurrent_streams))
            // Find dead agents and sidecars on idle connections.
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .layer(FirstRoute::new(
                pb::tool_registry_server::SERVICE_NAME,
                registry.clone(),
            ))
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_alpha)
            .add_service(registry)
            .add_service(tasks)
            .add_service(approvals)
            .add_service(pins)
            .add_service(registration);
        let server = workers::serve(
            &router,
            listener,
            self.config.tls.clone(),
            workers::count(self.config.worker_threads),
            &workers::Stops {
                stop: stop.clone(),
                cut: cut.clone(),
            },
        )?;
        drop(router);
        tokio::pin!(server);

        tokio::select! {
            result = &mut server => return result,
            () = mcp.ended(), if mcp.is_running() => {
                return Err(ServeError::Transport("the MCP endpoint stopped".into()));
            }
            () = shutdown => {}
        }
        drop(became_ready);
        tracing::info!(grace = ?self.config.shutdown_grace, "shutting down");
        reporter.drain().await;
        // Still accepting: new connections (probes, agents whose balancer
        // has not heard yet) are served during the delay.
        tokio::select! {
            result = &mut server => return result,
            () = tokio::time::sleep(self.config.shutdown_delay) => {}
        }
        watchers.cancel();
        stop.cancel();
        mcp_drain.cancel();
        console_drain.cancel();
        let grace_over = tokio::time::Instant::now() + self.config.shutdown_grace;
        let served = tokio::time::timeout_at(grace_over, &mut server).await.ok();
        let mcp_ended = tokio::time::timeout_at(grace_over, mcp.ended())
            .await
            .is_ok();
        let served = match (served, mcp_ended) {
            (Some(result), true) => return result,
            (served, _) => served,
        };
        tracing::warn!("grace period over; cutting off the calls still in flight");
        cut.cancel();
        // Cut connections end their tasks at once; the servers then return.
        let _ = tokio::time::timeout(CUT_OFF_WAIT, mcp.ended()).await;
        match served {
            Some(result) => result,
            None => match tokio::time::timeout(CUT_OFF_WAIT, server).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            },
        }
    }

    /// The MCP endpoint's listener: the one given ([`Self::with_mcp`]), or
    /// `--mcp-listen` bound ([`side_listener`]).
    async fn mcp_listener(
        &mut self,
        grpc: &TcpListener,
    ) -> Result<Option<TcpListener>, ServeError> {
        let taken = bound(&[Some(grpc), self.admin.as_ref()]);
        let given = self.mcp.take();
        let listen = self.config.mcp_listen.as_ref();
        let side = side_listener(
            &self.config,
            given,
            listen,
            "--mcp-listen",
            "the MCP endpoint",
            &taken,
        );
        let Some((listener, local)) = side.await? else {
            return Ok(None);
        };
        tracing::info!(address = %local, path = crate::serving::mcp::serve::PATH, tls = self.config.tls.is_some(), "MCP endpoint listening");
        Ok(Some(listener))
    }

    /// The console's listener: the one given ([`Self::with_console`]), or
    /// `--console-listen` bound ([`side_listener`]).
    async fn console_listener(
        &mut self,
        grpc: &TcpListener,
        mcp: Option<&TcpListener>,
    ) -> Result<Option<TcpListener>, ServeError> {
        let taken = bound(&[Some(grpc), self.admin.as_ref(), mcp]);
        let given = self.console.take();
        let listen = self.config.console_listen.as_ref();
        let side = side_listener(
            &self.config,
            given,
            listen,
            "--console-listen",
            "the console",
            &taken,
        );
        let Some((listener, local)) = side.await? else {
            return Ok(None);
        };
        tracing::info!(address = %local, tls = self.config.tls.is_some(), "console listening");
        Ok(Some(listener))
    }
}

/// The addresses `listeners` are bound to.
fn bound(listeners: &[Option<&TcpListener>]) -> Vec<std::net::SocketAddr> {
    listeners
        .iter()
        .flatten()
        .filter_map(|l| l.local_addr().ok())
        .collect()
}

/// The listener and address of an HTTP side port (`what`, bound by
/// `flag`): `given` if the embedding program bound one, else `listen`
/// bound, which must not be one of the `taken` addresses; `None` when
/// neither is set. Beyond loopback it needs agents authenticated (or
/// `--insecure`).
async fn side_listener(
    config: &Config,
    given: Option<TcpListener>,
    listen: Option<&toolmesh_proto::listen::ListenAddr>,
    flag: &str,
    what: &str,
    taken: &[std::net::SocketAddr],
) -> Result<Option<(TcpListener, std::net::SocketAddr)>, ServeError> {
    let listener = match (given, listen) {
        (Some(listener), _) => listener,
        (None, None) => return Ok(None),
        (None, Some(listen)) => {
            let resolved = listen
                .resolve()
                .map_err(|e| ServeError::Config(format!("{flag} {listen}: {e}")))?;
            if resolved.addr.port() != 0 && taken.contains(&resolved.addr) {
                return Err(ServeError::Config(format!(
                    "{flag} {listen} is the address of another of the registry's ports: give it its own, e.g. 127.0.0.1:8080"
                )));
            }
            TcpListener::bind(resolved.addr).await.map_err(|e| {
                ServeError::Config(format!(
                    "{flag} {listen}: cannot listen on {}: {e}",
                    resolved.addr
                ))
            })?
        }
    };
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Config(format!("{flag}: {e}")))?;
    check_agents_exposure(config, local, flag, what)?;
    Ok(Some((listener, local)))
}

/// Serves the registry `config` asks for on `listener` until `shutdown`
/// completes.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    Registry::from_config(config)?
        .serve(listener, shutdown)
        .await
}

/// The MCP endpoint's server task, if there is one; aborted when dropped.
struct McpTask(Option<tokio::task::JoinHandle<std::io::Result<()>>>);

impl McpTask {
    fn is_running(&self) -> bool {
        self.0.is_some()
    }

    /// Completes once the task has ended (at once if there is none), and
    /// logs a failure.
    async fn ended(&mut self) {
        let Some(task) = &mut self.0 else {
            return;
        };
        let result = task.await;
        self.0 = None;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::error!(%error, "MCP endpoint failed"),
            Err(error) => tracing::error!(%error, "MCP endpoint task failed"),
        }
    }
}

impl Drop for McpTask {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Refuses to serve beyond loopback with anything unauthenticated, unless
/// `--insecure`; then warns.
fn check_exposure(config: &Config, addr: std::net::SocketAddr) -> Result<(), ServeError> {
    let open = config.unauthenticated();
    if addr.ip().is_loopback() || open.is_empty() {
        return Ok(());
    }
    let open = open.join(" and ");
    if config.insecure {
        tracing::warn!(%addr, "listening beyond loopback with {open} unauthenticated (--insecure): whoever reaches this port can do it");
        return Ok(());
    }
    Err(ServeError::Config(format!(
        "--listen {addr} is beyond loopback, and {open} would be open to whoever reaches it; configure them (docs/security.md) or pass --insecure"
    )))
}

/// Refuses `what` (bound by `flag`) beyond loopback with agents
/// unauthenticated, unless `--insecure`; then warns.
fn check_agents_exposure(
    config: &Config,
    addr: std::net::SocketAddr,
    flag: &str,
    what: &str,
) -> Result<(), ServeError> {
    let agents_open = config.api_keys_file.is_none() && config.jwt_keys_file.is_none();
    if addr.ip().is_loopback() || !agents_open {
        return Ok(());
    }
    if config.insecure {
        tracing::warn!(%addr, "{what} beyond loopback with agents unauthenticated (--insecure): whoever reaches this port can call every tool");
        return Ok(());
    }
    Err(ServeError::Config(format!(
        "{flag} {addr} is beyond loopback, and agents are not authenticated (no --api-keys-file or --jwt-keys-file): configure them (docs/auth.md) or pass --insecure"
    )))
}
