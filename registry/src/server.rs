//! Assembles the registry and serves it: `ToolRegistry`, `Registration`,
//! gRPC health and server reflection on one listener, in TLS when
//! `--tls-cert-file` is set; and the MCP endpoint on its own
//! (`--mcp-listen`, [`crate::mcp`]).

use std::{collections::HashSet, future::Future, sync::Arc, time::Duration};

use futures::FutureExt as _;
use tokio::{net::TcpListener, sync::broadcast::error::RecvError};
use tokio_util::sync::{CancellationToken, DropGuard};
use toolmesh_proto::{
    FILE_DESCRIPTOR_SET,
    pb::{self, registration_server::RegistrationServer, tool_registry_server::ToolRegistryServer},
};
use toolmesh_telemetry::admin::Readiness;

use crate::search::ToolSearch;
use crate::{
    access::Access,
    api::{RegistrationApi, ToolRegistryApi},
    audit::{AuditLog, AuditOptions, AuditTarget},
    balance::Balancer,
    catalog::{AnnounceLimits, Catalog, ChangeKind},
    config::Config,
    connections,
    endpoint_policy::EndpointPolicy,
    idempotency::{IdempotencyStore, MemoryIdempotency, RedisIdempotency},
    invoke::{InvokeSettings, Invoker},
    mcp::{McpEndpoint, McpSettings},
    metrics::Metrics,
    proxy::Proxy,
    ratelimit::{LocalLimiter, RateLimiter, redis::RedisLimiter},
    readiness::Reporter,
    redis_pool::{RedisPool, RedisSettings},
    store::{
        CatalogStore,
        memory::{Limits, MemoryStore},
        redis::{RedisStore, RedisStoreSettings},
    },
    watch::{WatchLimits, Watchers},
};

/// How long the server may take to return once its connections are cut.
const CUT_OFF_WAIT: Duration = Duration::from_secs(2);

/// Why serving stopped. Each message carries its causes, so it prints once
/// however it is printed (there is no separate `source`).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The reflection service could not be built from the descriptors.
    #[error("reflection: {0}")]
    Reflection(String),
    /// The gRPC server failed.
    #[error("server: {0}")]
    Transport(String),
    /// The settings are unusable.
    #[error("config: {0}")]
    Config(String),
}

impl From<tonic_reflection::server::Error> for ServeError {
    fn from(error: tonic_reflection::server::Error) -> Self {
        Self::Reflection(toolmesh_telemetry::causes(&error))
    }
}

impl From<tonic::transport::Error> for ServeError {
    fn from(error: tonic::transport::Error) -> Self {
        Self::Transport(toolmesh_telemetry::causes(&error))
    }
}

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

/// The registry's parts, wired together.
pub struct Registry {
    catalog: Arc<Catalog>,
    access: Arc<Access>,
    audit: AuditLog,
    proxy: Arc<Proxy>,
    invoker: Arc<Invoker>,
    config: Config,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    admin: Option<TcpListener>,
    /// The MCP endpoint's listener, when bound by the embedding program.
    mcp: Option<TcpListener>,
    /// `SearchTools`' index, kept equal to the catalog.
    search: Arc<ToolSearch>,
    _janitor: DropGuard,
}

impl Registry {
    /// The embedded registry: in-memory catalog, local limiter. Must be
    /// called inside a tokio runtime (it starts the lease sweeper and the
    /// janitor that forgets what left the catalog).
    pub fn embedded(config: Config) -> Self {
        let store: Arc<dyn CatalogStore> = MemoryStore::new(
            config.lease_ttl,
            Limits {
                max_instances: config.max_instances,
                max_tools: config.max_tools,
            },
        );
        let idempotency = Arc::new(MemoryIdempotency::new(
            config.idempotency_retention,
            config.idempotency_capacity,
        ));
        let metrics = Arc::new(Metrics::new(config.metrics_max_tools));
        Self::new(
            store,
            Arc::new(LocalLimiter::new()),
            idempotency,
            config,
            metrics,
        )
    }

    /// The registry `config` asks for: over Redis when `--redis` is set,
    /// embedded otherwise. Must be called inside a tokio runtime.
    pub fn from_config(mut config: Config) -> Result<Self, ServeError> {
        if let Some(path) = &config.execute_token_file {
            tracing::warn!(path = %path.display(), "--execute-token-file is deprecated and ignored: every Execute carries a grant signed with the key its sidecar announced (docs/security.md); remove the flag");
        }
        let access = Arc::new(Access::from_config(&config).map_err(ServeError::Config)?);
        let audit = match &config.audit_log {
            Some(target) => {
                let target: AuditTarget = target
                    .parse()
                    .map_err(|e| ServeError::Config(format!("--audit-log {e}")))?;
                AuditLog::open(&target, AuditOptions::default())
                    .map_err(|e| ServeError::Config(format!("--audit-log {e}")))?
            }
            None => AuditLog::disabled(),
        };
        if config.tls.is_none() {
            config.tls = config.load_server_tls().map_err(ServeError::Config)?;
        }
        if config.sidecar_tls.is_none() {
            config.sidecar_tls = Some(config.load_sidecar_tls().map_err(ServeError::Config)?);
        }
        let Some(url) = config.redis.clone() else {
            return Ok(Self::embedded(config).with_access(access, audit));
        };
        let settings = RedisSettings {
            url,
            cluster: config.redis_cluster,
            password: config.redis_password().map_err(ServeError::Config)?,
            root_ca: config
                .redis_ca_file
                .as_ref()
                .map(|path| {
                    std::fs::read(path).map_err(|e| {
                        ServeError::Config(format!("--redis-ca-file {}: {e}", path.display()))
                    })
                })
                .transpose()?,
            pool_size: config.redis_pool_size,
            call_timeout: config.redis_timeout,
            ..RedisSettings::default()
        };
        let metrics = Arc::new(Metrics::new(config.metrics_max_tools));
        let pool = RedisPool::metered(settings, metrics.clone())
            .map_err(|e| ServeError::Config(e.to_string()))?;
        let store = RedisStore::new(
            pool.clone(),
            RedisStoreSettings {
                prefix: config.redis_prefix.clone(),
                ttl: config.lease_ttl,
                limits: Limits {
                    max_instances: config.max_instances,
                    max_tools: config.max_tools,
                },
                replica_id: format!("{}-{}", hostname(), uuid::Uuid::new_v4().simple()),
            },
        );
        let idempotency = Arc::new(RedisIdempotency::new(
            pool.clone(),
            &config.redis_prefix,
            config.idempotency_retention,
        ));
        let limiter = RedisLimiter::new(
            pool,
            &config.redis_prefix,
            config.redis_outage,
            store.replica_count(),
        );
        tracing::info!(prefix = %config.redis_prefix, cluster = config.redis_cluster, outage = %config.redis_outage, "catalog and rate limits in redis");
        Ok(
            Self::new(store, Arc::new(limiter), idempotency, config, metrics)
                .with_access(access, audit),
        )
    }

    /// Authenticates agents and sidecars, and applies the call policy, as
    /// `access` says; writes the audit log to `audit`.
    #[must_use]
    pub fn with_access(mut self, access: Arc<Access>, audit: AuditLog) -> Self {
        self.access = access;
        self.invoker.audit_to(audit.clone());
        self.catalog.audit_expiries(audit.clone());
        self.metrics.observe_audit(&audit);
        self.audit = audit;
        self
    }

    /// Also serves the admin port (metrics, liveness, readiness) on
    /// `listener`, until the gRPC server has stopped.
    #[must_use]
    pub fn with_admin(mut self, listener: TcpListener) -> Self {
        self.admin = Some(listener);
        self
    }

    /// Also serves the MCP endpoint on `listener` (else on `--mcp-listen`,
    /// bound by [`Self::serve`], if it is set).
    #[must_use]
    pub fn with_mcp(mut self, listener: TcpListener) -> Self {
        self.mcp = Some(listener);
        self
    }

    /// A registry over the given engines, recording in `metrics`.
    pub fn new(
        store: Arc<dyn CatalogStore>,
        limiter: Arc<dyn RateLimiter>,
        idempotency: Arc<dyn IdempotencyStore>,
        config: Config,
        metrics: Arc<Metrics>,
    ) -> Self {
        let endpoints = Arc::new(EndpointPolicy::new(config.endpoint_allow.clone()));
        let catalog = Arc::new(Catalog::with_limits(
            store,
            AnnounceLimits {
                max_tool_timeout: config.max_tool_timeout,
                max_announce_bytes: config.max_announce_bytes,
            },
            endpoints.clone(),
        ));
        catalog.count_expiries(metrics.clone());
        metrics.observe_catalog(&catalog);
        let balancer = Arc::new(Balancer::default().metered(metrics.clone()));
        let proxy = Arc::new(
            Proxy::new(config.connect_timeout, config.max_message_bytes)
                .with_tls(config.sidecar_tls.clone())
                .with_endpoint_policy(endpoints),
        );
        let stop_janitor = CancellationToken::new();
        let search = Arc::new(ToolSearch::default());
        tokio::spawn({
            let (catalog, search) = (catalog.clone(), search.clone());
            let stop = stop_janitor.clone();
            async move {
                tokio::select! {
                    () = search.follow(&catalog) => {}
                    () = stop.cancelled() => {}
                }
            }
        });
        tokio::spawn({
            let (catalog, limiter, balancer, proxy) = (
                catalog.clone(),
                limiter.clone(),
                balancer.clone(),
                proxy.clone(),
            );
            let stop = stop_janitor.clone();
            async move {
                tokio::select! {
                    () = janitor(catalog, limiter, balancer, proxy) => {}
                    () = stop.cancelled() => {}
                }
            }
        });
        let settings = InvokeSettings {
            default_timeout: config.default_timeout,
            max_arguments_bytes: config.max_arguments_bytes,
            log_calls: config.log_calls,
        };
        let invoker = Arc::new(Invoker::new(
            catalog.clone(),
            limiter,
            balancer,
            proxy.clone(),
            idempotency,
            settings,
            metrics.clone(),
        ));
        Self {
            catalog,
            access: Arc::default(),
            audit: AuditLog::disabled(),
            proxy,
            invoker,
            config,
            metrics,
            readiness: Readiness::not_ready("starting"),
            admin: None,
            mcp: None,
            search,
            _janitor: stop_janitor.drop_guard(),
        }
    }

    /// The metrics, for embedding and tests.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Readiness, as `/readyz` reports it, for embedding and tests.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The catalog, for embedding and tests.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The sidecar connections, for embedding and tests.
    pub fn proxy(&self) -> &Arc<Proxy> {
        &self.proxy
    }

    /// Serves on `listener` until `shutdown` completes, reporting
    /// NOT_SERVING until the catalog is loaded ([`crate::readiness`]); then
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
            .with_search(self.search.clone()),
        )
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
        let registration = RegistrationServer::new(
            RegistrationApi::new(self.catalog.clone(), self.access.clone())
                .sharing(self.config.max_tools)
                .audit(self.audit.clone())
                .metered(self.metrics.clone()),
        )
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);

        let stop = CancellationToken::new();
        let server = tonic::transport::Server::builder()
            .max_concurrent_streams(Some(self.config.max_concurrent_streams))
            // Find dead agents and sidecars on idle connections.
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_alpha)
            .add_service(registry)
            .add_service(registration)
            .serve_with_incoming_shutdown(
                toolmesh_proto::tls::incoming(
                    connections::incoming(listener, &cut),
                    self.config.tls.clone(),
                ),
                stop.clone().cancelled_owned(),
            );
        tokio::pin!(server);

        tokio::select! {
            result = &mut server => return result.map_err(ServeError::from),
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
            result = &mut server => return result.map_err(ServeError::from),
            () = tokio::time::sleep(self.config.shutdown_delay) => {}
        }
        watchers.cancel();
        stop.cancel();
        mcp_drain.cancel();
        let grace_over = tokio::time::Instant::now() + self.config.shutdown_grace;
        let served = tokio::time::timeout_at(grace_over, &mut server)
            .await
            .ok()
            .map(|result| result.map_err(ServeError::from));
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
                Ok(result) => result.map_err(ServeError::from),
                Err(_) => Ok(()),
            },
        }
    }

    /// The MCP endpoint's listener: the one given ([`Self::with_mcp`]), or
    /// `--mcp-listen` bound, which must not be the gRPC or admin address
    /// and, beyond loopback, needs agents authenticated (or `--insecure`).
    async fn mcp_listener(
        &mut self,
        grpc: &TcpListener,
    ) -> Result<Option<TcpListener>, ServeError> {
        let taken: Vec<std::net::SocketAddr> = [Some(grpc), self.admin.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|l| l.local_addr().ok())
            .collect();
        let listener = match (self.mcp.take(), &self.config.mcp_listen) {
            (Some(listener), _) => listener,
            (None, None) => return Ok(None),
            (None, Some(listen)) => {
                let resolved = listen
                    .resolve()
                    .map_err(|e| ServeError::Config(format!("--mcp-listen {listen}: {e}")))?;
                if resolved.addr.port() != 0 && taken.contains(&resolved.addr) {
                    return Err(ServeError::Config(format!(
                        "--mcp-listen {listen} is the --listen or --admin-listen address: give the MCP endpoint its own, e.g. 127.0.0.1:8080"
                    )));
                }
                TcpListener::bind(resolved.addr).await.map_err(|e| {
                    ServeError::Config(format!(
                        "--mcp-listen {listen}: cannot listen on {}: {e}",
                        resolved.addr
                    ))
                })?
            }
        };
        let local = listener
            .local_addr()
            .map_err(|e| ServeError::Config(format!("--mcp-listen: {e}")))?;
        check_mcp_exposure(&self.config, local)?;
        tracing::info!(address = %local, path = crate::mcp::serve::PATH, tls = self.config.tls.is_some(), "MCP endpoint listening");
        Ok(Some(listener))
    }
}

/// Serves the registry `config` asks for on `listener` until `shutdown`
/// completes.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    run_with_admin(listener, None, config, shutdown).await
}

/// [`run`], with the admin port (metrics, liveness, readiness) on `admin`
/// when given.
pub async fn run_with_admin(
    listener: TcpListener,
    admin: Option<TcpListener>,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let mut registry = Registry::from_config(config)?;
    if let Some(admin) = admin {
        registry = registry.with_admin(admin);
    }
    registry.serve(listener, shutdown).await
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

/// Refuses an MCP endpoint beyond loopback with agents unauthenticated,
/// unless `--insecure`; then warns.
fn check_mcp_exposure(config: &Config, addr: std::net::SocketAddr) -> Result<(), ServeError> {
    let agents_open = config.api_keys_file.is_none() && config.jwt_keys_file.is_none();
    if addr.ip().is_loopback() || !agents_open {
        return Ok(());
    }
    if config.insecure {
        tracing::warn!(%addr, "MCP endpoint beyond loopback with agents unauthenticated (--insecure): whoever reaches this port can call every tool");
        return Ok(());
    }
    Err(ServeError::Config(format!(
        "--mcp-listen {addr} is beyond loopback, and agents are not authenticated (no --api-keys-file or --jwt-keys-file): configure them (docs/auth.md) or pass --insecure"
    )))
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "registry".into())
}

/// Forgets, in every part that keeps state per tool or instance, what left
/// the catalog, so nothing grows with churn.
async fn janitor(
    catalog: Arc<Catalog>,
    limiter: Arc<dyn RateLimiter>,
    balancer: Arc<Balancer>,
    proxy: Arc<Proxy>,
) {
    let (_, mut changes) = catalog.watch();
    let mut live: HashSet<(String, String)> = HashSet::new();
    loop {
        match changes.recv().await {
            Ok(event) => {
                if event.kind == ChangeKind::Removed {
                    catalog.forget(event.tool.name());
                    limiter.forget(event.tool.name());
                }
                if event.kind == ChangeKind::Added {
                    live.extend(
                        event
                            .tool
                            .instances
                            .iter()
                            .map(|i| (i.id.clone(), i.endpoint.clone())),
                    );
                    continue;
                }
            }
            Err(RecvError::Lagged(_)) => {}
            Err(RecvError::Closed) => return,
        }
        let now: HashSet<(String, String)> = catalog
            .list()
            .iter()
            .flat_map(|t| {
                t.instances
                    .iter()
                    .map(|i| (i.id.clone(), i.endpoint.clone()))
            })
            .collect();
        for (id, endpoint) in live.difference(&now) {
            balancer.forget(id);
            if !now.iter().any(|(_, e)| e == endpoint) {
                proxy.forget(endpoint);
            }
        }
        live = now;
    }
}
