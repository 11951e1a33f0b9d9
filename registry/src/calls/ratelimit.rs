//! Rate limits: GCRA per tool, behind the [`RateLimiter`] trait so the
//! registry does not know whether the decision is local or shared.
//!
//! [`LocalLimiter`] decides in this process with `governor`. Its state per
//! tool is created on the first call and dropped when the tool leaves the
//! catalog, so the map is bounded by the catalog.
//! [`redis::RedisLimiter`] decides in Redis, exactly across replicas.

#[cfg(test)]
mod conformance;
pub mod redis;

use std::{num::NonZeroU32, sync::Arc, time::Duration};

use dashmap::DashMap;
use governor::{
    Quota,
    clock::{Clock, DefaultClock, Reference},
    middleware::NoOpMiddleware,
    state::{InMemoryState, NotKeyed},
};

use crate::catalog::descriptor::Limit;

/// The answer to "may this call go ahead?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Go ahead; one token was taken.
    Allow,
    /// Not now; a token will be there after `retry_after`.
    Deny {
        /// Time until the next token.
        retry_after: Duration,
    },
}

/// A limiter that could not decide.
#[derive(Debug, thiserror::Error)]
pub enum LimiterError {
    /// The shared engine behind the limiter is unreachable.
    #[error("rate limiter unavailable: {0}")]
    Unavailable(String),
}

/// The buckets one call takes a token from: its tool's, and its caller's
/// on that tool.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits<'a> {
    /// The tool (its bucket's key).
    pub tool: &'a str,
    /// The tool's limit across every caller, if any.
    pub limit: Option<Limit>,
    /// The caller's id and its limit on the tool, if any.
    pub caller: Option<(&'a str, Limit)>,
}

/// Which bucket refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The tool's limit.
    Tool,
    /// The caller's limit on the tool.
    Caller,
}

/// The answer to "may this call go ahead?" for a call's buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallDecision {
    /// Go ahead; a token was taken from each bucket.
    Allow,
    /// Not now.
    Deny {
        /// Time until the refusing bucket has a token.
        retry_after: Duration,
        /// The bucket that refused.
        by: Refused,
    },
}

/// The key of `caller`'s bucket on `tool`: the tool's key, a unit
/// separator (which no tool name or caller id contains), the caller.
pub fn caller_key(tool: &str, caller: &str) -> String {
    format!("{tool}{CALLER_SEPARATOR}{caller}")
}

const CALLER_SEPARATOR: char = '\u{1f}';

/// Decides whether a call within a limit may go ahead, taking a token if so.
#[async_trait::async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Takes one token from `key`'s bucket under `limit`.
    async fn acquire(&self, key: &str, limit: Limit) -> Result<Decision, LimiterError>;

    /// Takes a token for one call: first from the caller's bucket, then
    /// from the tool's. A call the caller's limit refuses spends nothing of
    /// the tool's, so a throttled caller cannot drain it for the others; a
    /// call the tool's limit refuses has spent its caller's token.
    async fn acquire_call(&self, call: CallLimits<'_>) -> Result<CallDecision, LimiterError> {
        if let Some((caller, limit)) = call.caller
            && let Decision::Deny { retry_after } =
                self.acquire(&caller_key(call.tool, caller), limit).await?
        {
            return Ok(CallDecision::Deny {
                retry_after,
                by: Refused::Caller,
            });
        }
        if let Some(limit) = call.limit
            && let Decision::Deny { retry_after } = self.acquire(call.tool, limit).await?
        {
            return Ok(CallDecision::Deny {
                retry_after,
                by: Refused::Tool,
            });
        }
        Ok(CallDecision::Allow)
    }

    /// Drops the state of `key` (its tool left the catalog), and of its
    /// callers' buckets.
    fn forget(&self, key: &str);
}

/// Most callers' buckets a [`LocalLimiter`] keeps; past it they are all
/// dropped (and start full again), so distinct callers cannot grow memory
/// without bound.
pub const MAX_CALLER_BUCKETS: usize = 100_000;

type Gcra<C> =
    governor::RateLimiter<NotKeyed, InMemoryState, C, NoOpMiddleware<<C as Clock>::Instant>>;

struct Bucket<C: Clock> {
    limit: Limit,
    gcra: Arc<Gcra<C>>,
}

/// GCRA in this process, one bucket per key.
pub struct LocalLimiter<C: Clock = DefaultClock> {
    clock: C,
    buckets: DashMap<String, Bucket<C>>,
}

impl LocalLimiter {
    /// A limiter on the system clock.
    pub fn new() -> Self {
        Self::with_clock(DefaultClock::default())
    }
}

impl Default for LocalLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl<C: Clock + Clone> LocalLimiter<C> {
    /// A limiter on `clock` (tests inject a fake one).
    pub fn with_clock(clock: C) -> Self {
        Self {
            clock,
            buckets: DashMap::new(),
        }
    }

    /// The same decision as [`RateLimiter::acquire`], synchronously.
    pub fn check(&self, key: &str, limit: Limit) -> Decision {
        let gcra = self.bucket(key, limit);
        match gcra.check() {
            Ok(()) => Decision::Allow,
            Err(not_until) => Decision::Deny {
                retry_after: not_until.wait_time_from(self.clock.now()),
            },
        }
    }

    fn bucket(&self, key: &str, limit: Limit) -> Arc<Gcra<C>> {
        if let Some(bucket) = self.buckets.get(key)
            && bucket.limit == limit
        {
            return bucket.gcra.clone();
        }
        if key.contains(CALLER_SEPARATOR) && self.buckets.len() >= MAX_CALLER_BUCKETS {
            self.buckets.retain(|k, _| !k.contains(CALLER_SEPARATOR));
            tracing::warn!(
                max = MAX_CALLER_BUCKETS,
                "too many callers' rate-limit buckets; all were dropped and start full again"
            );
        }
        let gcra = Arc::new(governor::RateLimiter::direct_with_clock(
            quota(limit),
            self.clock.clone(),
        ));
        self.buckets.insert(
            key.to_owned(),
            Bucket {
                limit,
                gcra: gcra.clone(),
            },
        );
        gcra
    }
}

/// The governor quota of `limit`: one token every `1/rate` seconds, `burst`
/// at once.
fn quota(limit: Limit) -> Quota {
    let burst = NonZeroU32::new(limit.burst).unwrap_or(NonZeroU32::MIN);
    let period = limit.period().max(Duration::from_nanos(1));
    Quota::with_period(period)
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
        .allow_burst(burst)
}

#[async_trait::async_trait]
impl<C> RateLimiter for LocalLimiter<C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Instant: Reference + Send + Sync,
{
    async fn acquire(&self, key: &str, limit: Limit) -> Result<Decision, LimiterError> {
        Ok(self.check(key, limit))
    }

    fn forget(&self, key: &str) {
        self.buckets.remove(key);
        let callers = caller_key(key, "");
        self.buckets.retain(|k, _| !k.starts_with(&callers));
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;
    use proptest::prelude::*;

    use super::*;

    fn limiter() -> (LocalLimiter<FakeRelativeClock>, FakeRelativeClock) {
        let clock = FakeRelativeClock::default();
        (LocalLimiter::with_clock(clock.clone()), clock)
    }

    #[tokio::test]
    async fn a_callers_limit_is_its_own_and_spares_the_tools() {
        let (limiter, _clock) = limiter();
        super::conformance::a_callers_limit_is_its_own_and_spares_the_tools(&limiter).await;
        limiter.forget("t");
        assert!(limiter.buckets.is_empty());
    }

    #[tokio::test]
    async fn calls_made_at_once_are_decided_in_order() {
        let (limiter, _clock) = limiter();
        super::conformance::calls_made_at_once_are_decided_in_order(&limiter).await;
    }

    #[tokio::test]
    async fn a_burst_is_admitted_then_the_next_waits() {
        let (limiter, _clock) = limiter();
        super::conformance::a_burst_is_admitted_then_the_next_waits(&limiter).await;
    }

    #[test]
    fn burst_then_one_per_period_with_exact_retry_delay() {
        let (limiter, clock) = limiter();
        let limit = Limit {
            rate: 2.0,
            burst: 3,
        };
        for _ in 0..3 {
            assert_eq!(limiter.check("t", limit), Decision::Allow);
        }
        assert_eq!(
            limiter.check("t", limit),
            Decision::Deny {
                retry_after: Duration::from_millis(500)
            }
        );
        clock.advance(Duration::from_millis(200));
        assert_eq!(
            limiter.check("t", limit),
            Decision::Deny {
                retry_after: Duration::from_millis(300)
            }
        );
        clock.advance(Duration::from_millis(300));
        assert_eq!(limiter.check("t", limit), Decision::Allow);
    }

    #[test]
    fn fractional_rates_work() {
        let (limiter, clock) = limiter();
        let limit = Limit {
            rate: 0.5,
            burst: 1,
        };
        assert_eq!(limiter.check("t", limit), Decision::Allow);
        assert_eq!(
            limiter.check("t", limit),
            Decision::Deny {
                retry_after: Duration::from_secs(2)
            }
        );
        clock.advance(Duration::from_secs(2));
        assert_eq!(limiter.check("t", limit), Decision::Allow);
    }

    #[test]
    fn keys_are_independent_and_a_changed_limit_starts_fresh() {
        let (limiter, _) = limiter();
        let one = Limit {
            rate: 1.0,
            burst: 1,
        };
        assert_eq!(limiter.check("a", one), Decision::Allow);
        assert_eq!(limiter.check("b", one), Decision::Allow);
        assert!(matches!(limiter.check("a", one), Decision::Deny { .. }));
        let two = Limit {
            rate: 1.0,
            burst: 2,
        };
        assert_eq!(limiter.check("a", two), Decision::Allow);
        limiter.forget("a");
        assert!(limiter.buckets.get("a").is_none());
    }

    proptest! {
        /// Hammered in steps of `step_ms` for `secs` seconds, the limiter
        /// never admits more than GCRA allows (burst + rate * T) and loses
        /// no more than the quantization of the arrivals costs.
        #[test]
        fn admits_rate_times_time_plus_burst(
            rate in 0.5f64..200.0,
            burst in 1u32..50,
            step_ms in 1u64..20,
            secs in 1u64..5,
        ) {
            let (limiter, clock) = limiter();
            let limit = Limit { rate, burst };
            let mut admitted = 0u64;
            let mut elapsed = 0u64;
            while elapsed <= secs * 1000 {
                while limiter.check("t", limit) == Decision::Allow {
                    admitted += 1;
                }
                clock.advance(Duration::from_millis(step_ms));
                elapsed += step_ms;
            }
            let t = (elapsed - step_ms) as f64 / 1000.0;
            let most = f64::from(burst) + (rate * t).floor() + 1.0;
            // Calls arrive only every step, so a token may wait up to one
            // step for its call: the effective period is at most t + step.
            let period = 1.0 / rate + step_ms as f64 / 1000.0;
            let least = f64::from(burst) + (t / period).floor() - 1.0;
            let admitted = admitted as f64;
            prop_assert!(admitted <= most && admitted >= least,
                "admitted {admitted}, expected between {least} and {most}");
        }

        /// A denied call's retry delay is never longer than one period, and
        /// waiting exactly that long is always enough.
        #[test]
        fn retry_delay_is_exact(rate in 0.5f64..100.0, burst in 1u32..10) {
            let (limiter, clock) = limiter();
            let limit = Limit { rate, burst };
            while limiter.check("t", limit) == Decision::Allow {}
            let Decision::Deny { retry_after } = limiter.check("t", limit) else {
                return Err(TestCaseError::fail("expected a denial"));
            };
            prop_assert!(retry_after <= limit.period());
            clock.advance(retry_after);
            prop_assert_eq!(limiter.check("t", limit), Decision::Allow);
        }
    }
}
