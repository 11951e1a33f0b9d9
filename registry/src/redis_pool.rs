//! Connections to Redis shared by the Redis engines: a bounded pool of
//! multiplexed connections (standalone or Cluster), each serving thread
//! with its own (`lanes`), a deadline on every call, a circuit breaker
//! that stops waiting on a Redis that is down, and the one log of its
//! outages (`outage`).

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use redis::{
    Cmd, IntoConnectionInfo, Pipeline, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::ClusterClient,
    cluster_async::ClusterConnection,
};
use tokio::time::Instant;

use crate::lanes;
use crate::metrics::{Metrics, RedisOp};

pub(crate) mod outage;

use outage::OutageLog;
pub use outage::{Consequence, Dependent};

/// Why a Redis call did not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RedisError {
    /// The circuit breaker is open: Redis failed recently; not waiting on it.
    #[error("redis unavailable (circuit open)")]
    CircuitOpen,
    /// No answer within the call timeout.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// Redis or the connection failed.
    #[error("redis: {0}")]
    Redis(String),
    /// The settings are unusable (bad URL, unreadable password file).
    #[error("redis settings: {0}")]
    Config(String),
}

impl RedisError {
    /// Why, without the "redis" its message starts with.
    fn cause(&self) -> String {
        match self {
            Self::CircuitOpen => "it failed the calls before".into(),
            Self::Timeout(after) => format!("no answer within {after:?}"),
            Self::Redis(why) | Self::Config(why) => why.clone(),
        }
    }
}

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://host:port/db` or `rediss://` for TLS; for Cluster, any
    /// node (more may follow in `cluster_nodes`).
    pub url: String,
    /// Treat the URL as a Redis Cluster seed.
    pub cluster: bool,
    /// Password, read from the environment or a file (never a flag).
    pub password: Option<String>,
    /// PEM of the CA that signed the server's certificate, for `rediss://`
    /// URLs whose server is not signed by a public CA.
    pub root_ca: Option<Vec<u8>>,
    /// Multiplexed connections per lane: lane 0 for background work, and
    /// one lane per serving thread, whose calls use its connections only.
    pub pool_size: usize,
    /// Lanes to keep connections for (1 + serving threads); a thread of a
    /// lane beyond them uses lane 0's.
    pub lanes: usize,
    /// Deadline of each call.
    pub call_timeout: Duration,
    /// Consecutive failures that open the breaker.
    pub breaker_failures: u32,
    /// How long the breaker stays open before one call may probe Redis.
    pub breaker_cooldown: Duration,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            password: None,
            root_ca: None,
            pool_size: 1,
            lanes: 1,
            call_timeout: Duration::from_millis(250),
            breaker_failures: 3,
            breaker_cooldown: Duration::from_millis(500),
        }
    }
}

/// One multiplexed connection, to a standalone server or a cluster.
#[derive(Clone)]
pub enum RedisConn {
    /// Standalone (or a managed Redis endpoint); reconnects by itself.
    Single(ConnectionManager),
    /// Redis Cluster; routes each command by its key's slot.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BreakerState {
    Closed { failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

/// Closed → (n failures) → Open → (cooldown) → HalfOpen: one probe call;
/// success closes, failure opens again. A failure of a call that started
/// before the latest success is not counted: it is news from before Redis
/// came back (a call still waiting on the old connection), not about now.
#[derive(Debug)]
pub struct Breaker {
    state: Mutex<(BreakerState, Option<Instant>)>,
    failures: u32,
    cooldown: Duration,
}

impl Breaker {
    /// A closed breaker that opens after `failures` in a row.
    pub fn new(failures: u32, cooldown: Duration) -> Self {
        Self {
            state: Mutex::new((BreakerState::Closed { failures: 0 }, None)),
            failures: failures.max(1),
            cooldown,
        }
    }

    /// Whether a call may go ahead now.
    pub fn allow(&self) -> bool {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let state = &mut guard.0;
        match *state {
            BreakerState::Closed { .. } => true,
            BreakerState::Open { until } if Instant::now() >= until => {
                *state = BreakerState::HalfOpen;
                true
            }
            BreakerState::Open { .. } | BreakerState::HalfOpen => false,
        }
    }

    /// Records the outcome of a call that started at `started`; `false`
    /// if it is not counted (a failure older than the latest success).
    pub fn record(&self, ok: bool, started: Instant) -> bool {
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (state, last_success) = &mut *guard;
        if ok {
            *last_success = Some(last_success.map_or(started, |at| at.max(started)));
        } else if last_success.is_some_and(|at| started < at) {
            return false;
        }
        *state = match (*state, ok) {
            (_, true) => BreakerState::Closed { failures: 0 },
            (BreakerState::Closed { failures }, false) if failures + 1 < self.failures => {
                BreakerState::Closed {
                    failures: failures + 1,
                }
            }
            (_, false) => BreakerState::Open {
                until: Instant::now() + self.cooldown,
            },
        };
        true
    }

    /// Whether Redis is currently considered down.
    pub fn is_open(&self) -> bool {
        matches!(
            self.state.lock().unwrap_or_else(PoisonError::into_inner).0,
            BreakerState::Open { .. } | BreakerState::HalfOpen
        )
    }
}

type Slot = tokio::sync::Mutex<Option<(u64, RedisConn)>>;

#[allow(clippy::large_enum_variant)] // one per pool, never moved around
enum Connector {
    Single(redis::Client),
    Cluster(ClusterClient),
}

/// A bounded set of multiplexed connections, opened lazily (a Redis that is
/// down at start is not an error), used round robin, behind one breaker.
pub struct RedisPool {
    info: redis::ConnectionInfo,
    certificates: Option<redis::TlsCertificates>,
    connector: Connector,
    /// Each lane's slots, and each slot's connection with the generation
    /// it was opened in. A connection's driver runs on the runtime that
    /// opened it: the lane's own thread.
    slots: Box<[Box<[Slot]>]>,
    generation: AtomicU64,
    next: AtomicUsize,
    settings: RedisSettings,
    breaker: Breaker,
    outages: OutageLog,
    metrics: Arc<Metrics>,
}

impl RedisPool {
    /// A pool for `settings`; connects on first use.
    pub fn new(settings: RedisSettings) -> Result<Arc<Self>, RedisError> {
        Self::metered(settings, Arc::default())
    }

    /// A pool for `settings` that times every call, and counts failures
    /// and the breaker's state, in `metrics`.
    pub fn metered(
        settings: RedisSettings,
        metrics: Arc<Metrics>,
    ) -> Result<Arc<Self>, RedisError> {
        let mut info = settings
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| RedisError::Config(format!("{}: {e}", settings.url)))?;
        if let Some(password) = &settings.password {
            let redis = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(redis);
        }
        let certificates = settings.root_ca.clone().map(|pem| redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        });
        let connector = if settings.cluster {
            let mut builder = ClusterClient::builder([info.clone()]);
            if let Some(certificates) = certificates.clone() {
                builder = builder.certs(certificates);
            }
            let client = builder
                .connection_timeout(settings.call_timeout * 4)
                .response_timeout(settings.call_timeout)
                .build()
                .map_err(|e| RedisError::Config(e.to_string()))?;
            Connector::Cluster(client)
        } else {
            Connector::Single(open_client(info.clone(), certificates.as_ref())?)
        };
        let slots = (0..settings.lanes.max(1))
            .map(|_| {
                (0..settings.pool_size.max(1))
                    .map(|_| tokio::sync::Mutex::new(None))
                    .collect()
            })
            .collect();
        Ok(Arc::new(Self {
            info,
            certificates,
            connector,
            slots,
            next: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            breaker: Breaker::new(settings.breaker_failures, settings.breaker_cooldown),
            outages: OutageLog::new(&settings.url),
            settings,
            metrics,
        }))
    }

    /// A client for connections the pool does not manage (pub/sub), with
    /// the same address, TLS and credentials. On Cluster it reaches the seed
    /// node, which is enough for pub/sub: messages reach every node.
    pub fn standalone_client(&self) -> Result<redis::Client, RedisError> {
        open_client(self.info.clone(), self.certificates.as_ref())
    }

    /// The settings the pool was made with.
    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// The breaker in front of Redis.
    pub fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// Says, in every report of an outage, what `dependent` does while
    /// Redis is away (each engine registers its own once).
    pub fn on_outage(
        &self,
        dependent: Dependent,
        consequence: impl Fn() -> String + Send + Sync + 'static,
    ) {
        self.outages.on_outage(dependent, Box::new(consequence));
    }

    /// Where Redis is, as reports name it (any password masked).
    pub fn address(&self) -> &str {
        self.outages.redis()
    }

    /// Runs `call`, a call of kind `op`, on a pooled connection, within the
    /// call timeout and behind the breaker.
    pub async fn run<T, F>(&self, op: RedisOp, call: F) -> Result<T, RedisError>
    where
        F: AsyncFnOnce(&mut RedisConn) -> redis::RedisResult<T>,
    {
        let started = Instant::now();
        if !self.breaker.allow() {
            self.metrics.redis_call(op, started.elapsed(), false);
            self.metrics.redis_circuit(true);
            self.outages.failed(started, None, true);
            return Err(RedisError::CircuitOpen);
        }
        let timeout = self.settings.call_timeout;
        let lane = lanes::pick(&self.slots);
        let slot = &lane[self.next.fetch_add(1, Ordering::Relaxed) % lane.len()];
        let mut broken = false;
        let mut used = None;
        let result = tokio::time::timeout(timeout, async {
            let (generation, mut conn) = self.connection(slot).await?;
            used = Some(generation);
            call(&mut conn).await.map_err(|e| {
                broken = e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout();
                RedisError::Redis(e.to_string())
            })
        })
        .await
        .unwrap_or(Err(RedisError::Timeout(timeout)));
        if broken || matches!(result, Err(RedisError::Timeout(_))) {
            // Connect afresh next time rather than wait out the connection's
            // own reconnect backoff; unless the slot already holds a newer
            // connection than the one that failed.
            if let Ok(mut slot) = slot.try_lock()
                && slot.as_ref().map(|(generation, _)| *generation) == used
            {
                *slot = None;
            }
        }
        let counted = self.breaker.record(result.is_ok(), started);
        let open = self.breaker.is_open();
        self.metrics
            .redis_call(op, started.elapsed(), result.is_ok());
        self.metrics.redis_circuit(open);
        match &result {
            Ok(_) => self.outages.answered(),
            Err(error) if counted => self.outages.failed(started, Some(error.cause()), open),
            Err(_) => {}
        }
        result
    }

    async fn connection(&self, slot: &Slot) -> Result<(u64, RedisConn), RedisError> {
        let mut slot = slot.lock().await;
        if let Some(held) = slot.as_ref() {
            return Ok(held.clone());
        }
        let conn = match &self.connector {
            Connector::Single(client) => {
                // No response timeout of its own: `run` bounds every call,
                // and a second timer per call is measurably dearer. No
                // retries of its own either: the pool's calls retry, behind
                // the breaker, and a connection that fails at once says why
                // (refused, no such host) instead of running out the call's
                // deadline in the manager's backoff.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(self.settings.call_timeout * 4))
                    .set_response_timeout(None)
                    .set_number_of_retries(0);
                RedisConn::Single(
                    client
                        .get_connection_manager_with_config(config)
                        .await
                        .map_err(|e| RedisError::Redis(e.to_string()))?,
                )
            }
            Connector::Cluster(client) => RedisConn::Cluster(
                client
                    .get_async_connection()
                    .await
                    .map_err(|e| RedisError::Redis(e.to_string()))?,
            ),
        };
        let held = (self.generation.fetch_add(1, Ordering::Relaxed), conn);
        *slot = Some(held.clone());
        Ok(held)
    }
}

/// A client for `info`, trusting `certificates`' CA when given.
fn open_client(
    info: redis::ConnectionInfo,
    certificates: Option<&redis::TlsCertificates>,
) -> Result<redis::Client, RedisError> {
    match certificates {
        Some(certificates) => redis::Client::build_with_tls(info, certificates.clone()),
        None => redis::Client::open(info),
    }
    .map_err(|e| RedisError::Config(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn breaker_opens_after_failures_and_probes_after_cooldown() {
        let breaker = Breaker::new(3, Duration::from_secs(1));
        for _ in 0..2 {
            assert!(breaker.allow());
            breaker.record(false, Instant::now());
        }
        assert!(!breaker.is_open());
        breaker.record(false, Instant::now());
        assert!(breaker.is_open());
        assert!(!breaker.allow());

        tokio::time::sleep(Duration::from_millis(1001)).await;
        assert!(breaker.allow(), "one probe after the cooldown");
        assert!(!breaker.allow(), "only one");
        breaker.record(false, Instant::now());
        assert!(!breaker.allow());

        tokio::time::sleep(Duration::from_millis(1001)).await;
        assert!(breaker.allow());
        breaker.record(true, Instant::now());
        assert!(!breaker.is_open());
        assert!(breaker.allow() && breaker.allow());
    }

    #[tokio::test(start_paused = true)]
    async fn failures_of_calls_older_than_a_success_do_not_count() {
        let breaker = Breaker::new(1, Duration::from_secs(1));
        let stale = Instant::now();
        tokio::time::sleep(Duration::from_millis(10)).await;
        breaker.record(true, Instant::now());
        breaker.record(false, stale);
        assert!(!breaker.is_open(), "sent before Redis answered again");
        tokio::time::sleep(Duration::from_millis(10)).await;
        breaker.record(false, Instant::now());
        assert!(breaker.is_open(), "a failure since the success counts");
    }
}
