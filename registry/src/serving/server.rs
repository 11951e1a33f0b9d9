//! Assembles the registry and serves it: `ToolRegistry`, `Registration`,
//! gRPC health and server reflection on one listener, in TLS when
//! `--tls-cert-file` is set; and the MCP endpoint on its own
//! (`--mcp-listen`, [`crate::serving::mcp`]).
//!
//! This file builds the parts from [`Config`] and wires them; `listen.rs`
//! binds the flags' addresses; `serve.rs` serves and drains; `janitor.rs` forgets what left the catalog.

mod janitor;
mod listen;
mod search_model;
mod serve;

use std::{sync::Arc, time::Duration};

use tokio::net::TcpListener;
use tokio_util::sync::{CancellationToken, DropGuard};
use toolmesh_telemetry::admin::Readiness;

use crate::{
    access::Access,
    access::audit::{AuditLog, AuditOptions, AuditTarget},
    access::auth::AuthSettings,
    access::endpoint_policy::EndpointPolicy,
    calls::balance::Balancer,
    calls::idempotency::{IdempotencyStore, MemoryIdempotency, RedisIdempotency},
    calls::invoke::{InvokeSettings, Invoker},
    calls::proxy::Proxy,
    calls::ratelimit::{LocalLimiter, RateLimiter, redis::RedisLimiter},
    catalog::store::{
        CatalogStore,
        memory::{Limits, MemoryStore},
        redis::{RedisStore, RedisStoreSettings},
    },
    catalog::{AnnounceLimits, Catalog},
    config::Config,
    metrics::Metrics,
    redis_pool::{RedisPool, RedisSettings},
};
use janitor::janitor;
use search_model::{SearchModel, search_index};

use crate::catalog::search::ToolSearch;

use crate::tasks::{TaskSettings, Tasks};

/// How often the task janitor looks for tasks no sidecar will end.
const TASK_SWEEP: Duration = Duration::from_millis(500);
pub use listen::listen_and_serve;
pub use serve::run;

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
    /// A port could not be bound (the message says what to do about it).
    #[error("{0}")]
    Listen(String),
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

/// The registry's parts, wired together.
pub struct Registry {
    catalog: Arc<Catalog>,
    access: Arc<Access>,
    audit: AuditLog,
    proxy: Arc<Proxy>,
    invoker: Arc<Invoker>,
    tasks: Arc<Tasks>,
    config: Config,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    admin: Option<TcpListener>,
    /// The MCP endpoint's listener, when bound by the embedding program.
    mcp: Option<TcpListener>,
    /// The console's listener, when bound by the embedding program.
    console: Option<TcpListener>,
    /// `SearchTools`' index, kept equal to the catalog.
    search: Arc<ToolSearch>,
    /// Re-reads the versions file while the registry lives.
    versions: Option<crate::access::auth::reload::ReloadTask>,
    /// The Redis pool and key prefix, in Redis mode.
    redis: Option<(Arc<RedisPool>, String)>,
    /// Keeps the pins current while the registry lives.
    pins: Option<crate::catalog::pins::follow::PinsTask>,
    _janitor: DropGuard,
}

impl Registry {
    /// The embedded registry: in-memory catalog, local limiter. Must be
    /// called inside a tokio runtime (it starts the lease sweeper and the
    /// janitor that forgets what left the catalog).
    pub fn embedded(config: Config) -> Self {
        Self::embedded_with(config, None)
    }

    /// The embedded registry, searching with `model` if given.
    fn embedded_with(config: Config, model: Option<SearchModel>) -> Self {
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
        let tasks = crate::tasks::store::open(None, Default::default());
        Self::assemble(
            store,
            Arc::new(LocalLimiter::new()),
            idempotency,
            tasks,
            config,
            metrics,
            model,
        )
    }

    /// The registry `config` asks for: over Redis when `--redis` is set,
    /// embedded otherwise. Must be called inside a tokio runtime.
    pub fn from_config(mut config: Config) -> Result<Self, ServeError> {
        if let Some(path) = &config.execute_token_file {
            tracing::warn!(path = %path.display(), "--execute-token-file is deprecated and ignored: every Execute carries a grant signed with the key its sidecar announced (docs/security.md); remove the flag");
        }
        let access = Arc::new(access(&config).map_err(ServeError::Config)?);
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
        let model = SearchModel::load(&config)?;
        let Some(url) = config.redis.clone() else {
            let store = Arc::new(crate::catalog::pins::store::MemoryPins::default());
            return Self::embedded_with(config, model)
                .with_access(access, audit)
                .with_versions_file()?
                .with_pins_file(store);
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
            lanes: 1 + super::workers::count(config.worker_threads),
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
            pool.clone(),
            &config.redis_prefix,
            config.redis_outage,
            store.replica_count(),
        );
        tracing::info!(prefix = %config.redis_prefix, cluster = config.redis_cluster, outage = %config.redis_outage, "catalog and rate limits in redis");
        let pins = Arc::new(crate::catalog::pins::store::RedisPins::new(
            pool.clone(),
            &config.redis_prefix,
        ));
        let model = model.map(|model| model.shared(pool.clone(), &config.redis_prefix));
        let tasks = crate::tasks::store::open(
            Some((pool.clone(), config.redis_prefix.as_str())),
            Default::default(),
        );
        let redis = Some((pool, config.redis_prefix.clone()));
        let mut registry = Self::assemble(
            store,
            Arc::new(limiter),
            idempotency,
            tasks,
            config,
            metrics,
            model,
        );
        registry.redis = redis;
        registry
            .with_access(access, audit)
            .with_versions_file()?
            .with_pins_file(pins)
    }

    /// Puts `--pins-file` in force, if set, over `store`.
    fn with_pins_file(
        mut self,
        store: Arc<dyn crate::catalog::pins::store::PinStore>,
    ) -> Result<Self, ServeError> {
        if let Some(path) = self.config.pins_file.clone() {
            let observers = (self.audit.clone(), self.metrics.clone());
            let task = crate::catalog::pins::follow::follow(path, store, &self.catalog, observers)
                .map_err(ServeError::Config)?;
            self.pins = Some(task);
        }
        Ok(self)
    }

    /// Puts `--versions-file` in force, if set, and follows its changes.
    fn with_versions_file(mut self) -> Result<Self, ServeError> {
        if let Some(path) = self.config.versions_file.clone() {
            let task = crate::catalog::versions::file::follow(path, &self.catalog)
                .map_err(ServeError::Config)?;
            self.versions = Some(task);
        }
        Ok(self)
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

    /// Also serves the console on `listener` (else on `--console-listen`,
    /// if set).
    #[must_use]
    pub fn with_console(mut self, listener: TcpListener) -> Self {
        self.console = Some(listener);
        self
    }

    /// The Redis pool and key prefix, in Redis mode.
    pub(crate) fn redis_pool(&self) -> Option<(Arc<RedisPool>, String)> {
        self.redis.clone()
    }

    /// The console over this registry's parts, sealing sign-ins with
    /// `sealer`; every call shows in its tail from now on.
    pub(crate) fn console(
        &self,
        sealer: crate::serving::console::session::Sealer,
    ) -> crate::serving::console::Console {
        let tail = Arc::new(crate::calls::tail::CallTail::default());
        self.invoker.tail_to(tail.clone());
        // The agents' service itself, so that the playground's calls take
        // the path agents' do; its watch streams are never opened.
        let agents = crate::serving::api::ToolRegistryApi::new(
            self.catalog.clone(),
            self.access.clone(),
            self.invoker.clone(),
            Arc::new(crate::serving::watch::Watchers::new(
                crate::serving::watch::WatchLimits::default(),
            )),
            CancellationToken::new(),
        )
        .max_message_bytes(self.config.max_message_bytes)
        .with_search(self.search.clone())
        .holding_with(self.tasks.clone());
        let shared_tail = self.redis.as_ref().map(|(pool, prefix)| {
            crate::calls::tail::shared::SharedTail::new(pool.clone(), prefix, hostname())
        });
        crate::serving::console::Console {
            shared_tail,
            catalog: self.catalog.clone(),
            access: self.access.clone(),
            search: self.search.clone(),
            sealer,
            session_ttl: self.config.console_session_ttl,
            tls: self.config.tls.is_some(),
            agents: Arc::new(agents),
            tasks: self.tasks.clone(),
            tail,
            lease_ttl: self.config.lease_ttl,
        }
    }

    /// Also serves the MCP endpoint on `listener` (else on `--mcp-listen`,
    /// bound by [`Self::serve`], if it is set).
    #[must_use]
    pub fn with_mcp(mut self, listener: TcpListener) -> Self {
        self.mcp = Some(listener);
        self
    }

    /// A registry over the given engines (tasks in memory), recording in
    /// `metrics`.
    pub fn new(
        store: Arc<dyn CatalogStore>,
        limiter: Arc<dyn RateLimiter>,
        idempotency: Arc<dyn IdempotencyStore>,
        config: Config,
        metrics: Arc<Metrics>,
    ) -> Self {
        let tasks = crate::tasks::store::open(None, Default::default());
        Self::assemble(store, limiter, idempotency, tasks, config, metrics, None)
    }

    fn assemble(
        store: Arc<dyn CatalogStore>,
        limiter: Arc<dyn RateLimiter>,
        idempotency: Arc<dyn IdempotencyStore>,
        task_store: Arc<dyn crate::tasks::store::TaskStore>,
        config: Config,
        metrics: Arc<Metrics>,
        search_model: Option<SearchModel>,
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
        let search = Arc::new(search_index(search_model, &config, &metrics));
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
            balancer.clone(),
            proxy.clone(),
            idempotency,
            settings,
            metrics.clone(),
        ));
        let tasks = Arc::new(Tasks::new(
            task_store,
            invoker.clone(),
            balancer,
            proxy.clone(),
            TaskSettings {
                retention: config.task_retention,
                max_live: config.max_tasks,
                max_live_per_caller: config.max_tasks_per_caller,
                // One process has one view of the catalog: nothing lags.
                orphan_grace: if config.redis.is_some() {
                    Duration::from_secs(1)
                } else {
                    Duration::ZERO
                },
                ..TaskSettings::default()
            },
            metrics.clone(),
        ));
        tokio::spawn({
            let tasks = tasks.clone();
            let stop = stop_janitor.clone();
            async move {
                let mut ticks = tokio::time::interval(TASK_SWEEP);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = ticks.tick() => tasks.sweep().await,
                        () = stop.cancelled() => return,
                    }
                }
            }
        });
        Self {
            catalog,
            access: Arc::default(),
            audit: AuditLog::disabled(),
            proxy,
            invoker,
            tasks,
            config,
            metrics,
            readiness: Readiness::not_ready("starting"),
            admin: None,
            mcp: None,
            console: None,
            search,
            versions: None,
            redis: None,
            pins: None,
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
}

/// Agents' authentication, the call policy and the registrants, from the
/// files `config` names.
pub(crate) fn access(config: &Config) -> Result<Access, String> {
    let auth = AuthSettings {
        api_keys_file: config.api_keys_file.clone(),
        jwt_keys_file: config.jwt_keys_file.clone(),
        jwt_issuer: config.jwt_issuer.clone(),
        jwt_audience: config.jwt_audience.clone(),
        jwt_leeway: config.jwt_leeway,
        jwt_caller_claim: config.jwt_caller_claim.clone(),
        jwt_groups_claim: config.jwt_groups_claim.clone(),
    };
    Access::open(
        &auth,
        config.policy_file.as_deref(),
        config.registrants_file.as_deref(),
    )
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "registry".into())
}
