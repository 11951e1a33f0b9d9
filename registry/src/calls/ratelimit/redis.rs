//! [`RedisLimiter`]: GCRA shared by every registry replica, exact across
//! them.
//!
//! Decisions are made by a Lua script (`gcra.lua`, loaded once and called
//! by its SHA) that reads and writes the tool's key, `{<prefix>:rl:<tool>}`
//! (and its callers' keys, in the same hash slot), and takes the time from
//! Redis (`TIME`), so no replica's clock can skew the answer. The calls one
//! serving thread admits on one tool at once share one script ([`gcra`]).
//! The hash tag puts each tool in its own Cluster slot. A key expires once
//! its bucket is full again, so idle tools leave nothing behind.
//!
//! When Redis does not answer (including while the pool's breaker is open,
//! which answers at once), the [`OutagePolicy`] decides: refuse the call, or
//! decide in this process with this replica's share of the limit.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering},
};

use super::{CallDecision, CallLimits, Decision, LimiterError, LocalLimiter, RateLimiter, Refused};
use crate::{
    catalog::descriptor::Limit,
    redis_pool::{Dependent, RedisError, RedisPool},
};

mod gcra;

use gcra::GcraScript;

/// What the limiter does while Redis is unavailable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutagePolicy {
    /// Refuse rate-limited calls (the registry answers `UNAVAILABLE`): no
    /// limit is ever exceeded.
    #[default]
    #[value(name = "fail-closed")]
    FailClosed,
    /// Decide in each replica with its share of the limit (rate and burst
    /// divided by the live replica count): calls go on, and the sum over the
    /// replicas stays close to the limit.
    #[value(name = "degrade")]
    Degrade,
}

impl std::fmt::Display for OutagePolicy {
    /// The flag's own spelling: `fail-closed`, `degrade`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum as _;
        match self.to_possible_value() {
            Some(value) => f.write_str(value.get_name()),
            None => Ok(()),
        }
    }
}

/// What rate-limited calls get while Redis is away under `policy`, with
/// `replicas` live replicas last seen, as the pool's outage reports say it.
fn outage_consequence(policy: OutagePolicy, replicas: usize) -> String {
    match policy {
        OutagePolicy::FailClosed => format!(
            "calls to rate-limited tools are refused with UNAVAILABLE (--redis-outage {policy})"
        ),
        OutagePolicy::Degrade => format!(
            "rate limits are enforced by each replica alone, with 1/{replicas} of each limit (--redis-outage {policy}, {replicas} replicas last seen)"
        ),
    }
}

/// GCRA in Redis, one key per limit key, shared by every replica.
pub struct RedisLimiter {
    prefix: String,
    policy: OutagePolicy,
    replicas: Arc<AtomicUsize>,
    script: Arc<GcraScript>,
    /// Buckets for decisions taken here while Redis is away (`Degrade`).
    local: LocalLimiter,
    /// Whether the last decision found Redis unavailable (logs transitions).
    outage: AtomicBool,
}

impl RedisLimiter {
    /// A limiter over `pool`, its keys under `prefix`, applying `policy`
    /// when Redis is unavailable. `replicas` is the live replica count (as
    /// the catalog store last saw it) that `Degrade` divides limits by.
    pub fn new(
        pool: Arc<RedisPool>,
        prefix: &str,
        policy: OutagePolicy,
        replicas: Arc<AtomicUsize>,
    ) -> Self {
        pool.on_outage(Dependent::RateLimits, {
            let replicas = replicas.clone();
            move || outage_consequence(policy, replicas.load(Ordering::Relaxed).max(1))
        });
        Self {
            script: GcraScript::new(pool),
            prefix: prefix.to_owned(),
            policy,
            replicas,
            local: LocalLimiter::new(),
            outage: AtomicBool::new(false),
        }
    }

    /// The Redis key holding `key`'s bucket: `{<prefix>:rl:<key>}`.
    pub fn redis_key(&self, key: &str) -> String {
        self.key_with(key, &[])
    }

    /// The Redis key of `caller`'s bucket on `tool`: in the tool's hash
    /// slot, so one script takes both on Redis Cluster.
    pub fn caller_redis_key(&self, tool: &str, caller: &str) -> String {
        self.key_with(tool, &[":caller:", caller])
    }

    /// `key`'s Redis key followed by `rest`, written into one allocation:
    /// one is made for every rate-limited call.
    fn key_with(&self, key: &str, rest: &[&str]) -> String {
        let length =
            self.prefix.len() + key.len() + 6 + rest.iter().map(|r| r.len()).sum::<usize>();
        let mut redis_key = String::with_capacity(length);
        for part in ["{", &self.prefix, ":rl:", key, "}"].iter().chain(rest) {
            redis_key.push_str(part);
        }
        redis_key
    }

    /// Whether the last decision found Redis unavailable.
    pub fn in_outage(&self) -> bool {
        self.outage.load(Ordering::Relaxed)
    }

    /// Notes that Redis failed. The pool reports the outage, and what this
    /// limiter does meanwhile ([`outage_consequence`]).
    fn enter_outage(&self, key: &str, error: &RedisError) {
        if !self.outage.swap(true, Ordering::Relaxed) {
            tracing::debug!(%key, %error, policy = %self.policy, "rate limits follow the outage policy");
        }
    }

    /// Notes that Redis answered.
    fn leave_outage(&self) {
        if self.outage.swap(false, Ordering::Relaxed) {
            tracing::debug!("rate limits are global again");
        }
    }

    fn replica_count(&self) -> usize {
        self.replicas.load(Ordering::Relaxed).max(1)
    }
}

#[async_trait::async_trait]
impl RateLimiter for RedisLimiter {
    async fn acquire(&self, key: &str, limit: Limit) -> Result<Decision, LimiterError> {
        match self.script.decide(&[(self.redis_key(key), limit)]).await {
            Ok(decision) => {
                self.leave_outage();
                Ok(
                    decision.map_or(Decision::Allow, |(_, retry_after)| Decision::Deny {
                        retry_after,
                    }),
                )
            }
            Err(error) => {
                self.enter_outage(key, &error);
                match self.policy {
                    OutagePolicy::FailClosed => Err(LimiterError::Unavailable(error.to_string())),
                    OutagePolicy::Degrade => {
                        Ok(self.local.check(key, share(limit, self.replica_count())))
                    }
                }
            }
        }
    }

    /// Both buckets in one script, with the other calls this thread admits
    /// on the tool at once: at most one Redis round trip per call.
    async fn acquire_call(&self, call: CallLimits<'_>) -> Result<CallDecision, LimiterError> {
        let mut buckets = Vec::with_capacity(2);
        let mut refusers = Vec::with_capacity(2);
        if let Some((caller, limit)) = call.caller {
            buckets.push((self.caller_redis_key(call.tool, caller), limit));
            refusers.push(Refused::Caller);
        }
        if let Some(limit) = call.limit {
            buckets.push((self.redis_key(call.tool), limit));
            refusers.push(Refused::Tool);
        }
        if buckets.is_empty() {
            return Ok(CallDecision::Allow);
        }
        match self.script.decide_in_batch(call.tool, buckets).await {
            Ok(decision) => {
                self.leave_outage();
                Ok(match decision {
                    None => CallDecision::Allow,
                    Some((index, retry_after)) => CallDecision::Deny {
                        retry_after,
                        by: refusers.get(index).copied().unwrap_or(Refused::Tool),
                    },
                })
            }
            Err(error) => {
                self.enter_outage(call.tool, &error);
                match self.policy {
                    OutagePolicy::FailClosed => Err(LimiterError::Unavailable(error.to_string())),
                    OutagePolicy::Degrade => {
                        let replicas = self.replica_count();
                        let shared = CallLimits {
                            limit: call.limit.map(|l| share(l, replicas)),
                            caller: call.caller.map(|(c, l)| (c, share(l, replicas))),
                            ..call
                        };
                        self.local.acquire_call(shared).await
                    }
                }
            }
        }
    }

    fn forget(&self, key: &str) {
        // The Redis key expires by itself once its bucket is full.
        self.local.forget(key);
    }
}

/// One replica's share of `limit` when `replicas` replicas decide apart:
/// `rate / n`, and `burst / n` rounded up (at least 1), `n` at least 1.
pub fn share(limit: Limit, replicas: usize) -> Limit {
    let n = u32::try_from(replicas.max(1)).unwrap_or(u32::MAX);
    Limit {
        rate: limit.rate / f64::from(n),
        burst: limit.burst.div_ceil(n).max(1),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn limit(rate: f64, burst: u32) -> Limit {
        Limit { rate, burst }
    }

    #[test]
    fn policies_read_as_the_flag_spells_them() {
        assert_eq!(OutagePolicy::FailClosed.to_string(), "fail-closed");
        assert_eq!(OutagePolicy::Degrade.to_string(), "degrade");
        assert!(outage_consequence(OutagePolicy::Degrade, 3).contains("1/3 of each limit"));
    }

    #[test]
    fn share_divides_rate_and_rounds_burst_up() {
        assert_eq!(share(limit(30.0, 30), 3), limit(10.0, 10));
        assert_eq!(share(limit(20.0, 10), 3), limit(20.0 / 3.0, 4));
        assert_eq!(share(limit(1.0, 1), 5), limit(0.2, 1));
        assert_eq!(share(limit(0.5, 7), 2), limit(0.25, 4));
    }

    #[test]
    fn share_treats_zero_replicas_as_one() {
        assert_eq!(share(limit(20.0, 10), 0), limit(20.0, 10));
        assert_eq!(share(limit(20.0, 10), 1), limit(20.0, 10));
    }

    #[test]
    fn share_never_drops_burst_to_zero() {
        assert_eq!(share(limit(5.0, 0), 4).burst, 1);
        assert_eq!(share(limit(5.0, 3), usize::MAX).burst, 1);
    }

    #[test]
    fn keys_carry_their_own_hash_tag() {
        let pool = RedisPool::new(crate::redis_pool::RedisSettings::default());
        let Ok(pool) = pool else {
            panic!("default settings are valid");
        };
        let limiter = RedisLimiter::new(
            pool,
            "toolmesh",
            OutagePolicy::default(),
            Arc::new(AtomicUsize::new(1)),
        );
        assert_eq!(limiter.redis_key("search"), "{toolmesh:rl:search}");
        assert_eq!(
            limiter.caller_redis_key("search", "team-a"),
            "{toolmesh:rl:search}:caller:team-a"
        );
    }

    /// A port nothing listens on: bound, then released.
    fn dead_redis(policy: OutagePolicy, replicas: usize) -> RedisLimiter {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(1);
        let settings = crate::redis_pool::RedisSettings {
            url: format!("redis://127.0.0.1:{port}"),
            call_timeout: Duration::from_millis(100),
            breaker_failures: 1,
            breaker_cooldown: Duration::from_secs(60),
            ..Default::default()
        };
        let Ok(pool) = RedisPool::new(settings) else {
            panic!("settings are valid");
        };
        RedisLimiter::new(pool, "t", policy, Arc::new(AtomicUsize::new(replicas)))
    }

    #[tokio::test]
    async fn fail_closed_refuses_when_redis_is_down() {
        let limiter = dead_redis(OutagePolicy::FailClosed, 1);
        for _ in 0..3 {
            let result = limiter.acquire("k", limit(100.0, 100)).await;
            assert!(matches!(result, Err(LimiterError::Unavailable(_))));
        }
        assert!(limiter.in_outage());
    }

    #[tokio::test]
    async fn degrade_admits_this_replicas_share() {
        let limiter = dead_redis(OutagePolicy::Degrade, 4);
        let mut admitted = 0;
        for _ in 0..40 {
            let decision = limiter.acquire("k", limit(1.0, 40)).await;
            if matches!(decision, Ok(Decision::Allow)) {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 10, "burst 40 over 4 replicas");
        assert!(limiter.in_outage());
        limiter.forget("k");
        assert!(matches!(
            limiter.acquire("k", limit(1.0, 40)).await,
            Ok(Decision::Allow)
        ));
    }

    /// The scenarios every limiter runs (`conformance.rs`), on a real
    /// `redis-server`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_redis_limiter_decides_what_every_limiter_does() {
        use crate::calls::ratelimit::conformance;
        let Some(redis) = toolmesh_test_support::redis::RedisServer::start() else {
            return;
        };
        let limiter = |prefix: &str| {
            let pool = RedisPool::new(crate::redis_pool::RedisSettings {
                url: redis.url(),
                ..Default::default()
            })
            .expect("a pool");
            RedisLimiter::new(
                pool,
                prefix,
                OutagePolicy::FailClosed,
                Arc::new(AtomicUsize::new(1)),
            )
        };
        conformance::a_burst_is_admitted_then_the_next_waits(&limiter("l1")).await;
        conformance::a_callers_limit_is_its_own_and_spares_the_tools(&limiter("l2")).await;
    }

    /// `EVALSHA` calls the server has answered so far.
    async fn scripts_run(url: &str) -> u64 {
        let client = ::redis::Client::open(url).expect("a client");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let info: String = ::redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut conn)
            .await
            .expect("INFO answers");
        info.lines()
            .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
            .and_then(|rest| rest.split(',').next())
            .and_then(|calls| calls.parse().ok())
            .unwrap_or(0)
    }

    /// The calls one thread admits on one tool at once go to Redis as one
    /// script, decided in the order they came (on the thread's runtime, as
    /// a serving thread's is).
    #[tokio::test(flavor = "current_thread")]
    async fn calls_made_at_once_share_one_script_in_order() {
        use crate::calls::ratelimit::conformance;
        let Some(redis) = toolmesh_test_support::redis::RedisServer::start() else {
            return;
        };
        let pool = RedisPool::new(crate::redis_pool::RedisSettings {
            url: redis.url(),
            ..Default::default()
        })
        .expect("a pool");
        let limiter = RedisLimiter::new(
            pool,
            "together",
            OutagePolicy::FailClosed,
            Arc::new(AtomicUsize::new(1)),
        );
        // Connect and load the script first.
        assert!(matches!(
            limiter.acquire("warm-up", limit(1.0, 1)).await,
            Ok(Decision::Allow)
        ));
        let before = scripts_run(&redis.url()).await;
        conformance::calls_made_at_once_are_decided_in_order(&limiter).await;
        assert_eq!(scripts_run(&redis.url()).await - before, 1);

        let limiter = &limiter;
        let calls = (0..100).map(|i| {
            let caller = format!("caller-{i}");
            async move {
                let call = CallLimits {
                    tool: "many",
                    limit: Some(limit(0.001, 60)),
                    caller: Some((&caller, limit(0.001, 1))),
                };
                limiter.acquire_call(call).await
            }
        });
        let decisions = futures::future::join_all(calls).await;
        let admitted = decisions
            .iter()
            .filter(|d| matches!(d, Ok(CallDecision::Allow)))
            .count();
        assert_eq!(admitted, 60, "{decisions:?}");
        assert!(decisions.iter().skip(60).all(|d| matches!(
            d,
            Ok(CallDecision::Deny {
                by: Refused::Tool,
                ..
            })
        )));
        assert_eq!(scripts_run(&redis.url()).await - before, 2);
    }
}
