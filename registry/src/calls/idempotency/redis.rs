//! [`RedisIdempotency`]: idempotency keys shared by every registry replica.
//!
//! Each key is one Redis string, `{<prefix>:idem:<sha256 of caller, tool and
//! key>}` (the hash tag is the whole name, so keys spread over a Cluster's
//! slots and each script touches one), holding a JSON record: the arguments'
//! fingerprint and either the token of the claim in progress or the outcome.
//!
//! - `claim.lua`: `SET NX` of an in-progress record that expires after
//!   `hold_for` (so a crashed replica frees its keys), else the record that
//!   holds the key. A claim that finds the key in progress polls again, from
//!   25 ms doubling to 250 ms, until an outcome, a free key, or its deadline.
//! - `complete.lua`: the record becomes the outcome, kept for the retention,
//!   if the claim's token still holds the key.
//! - `release.lua`: deletes the record if the token still holds the key.
//!
//! A Redis that does not answer makes claims fail with
//! [`IdempotencyError::Unavailable`]: refusing is better than running twice.

use std::{sync::Arc, time::Duration};

use ::redis::Script;
use tokio::time::Instant;

use super::{
    Claim, Finisher, IdempotencyError, IdempotencyKey, IdempotencyStore, StoredOutcome, Ticket, hex,
};
use crate::{
    metrics::RedisOp,
    redis_pool::{Dependent, RedisError, RedisPool},
};

/// First pause of a claim waiting on a call in progress.
const FIRST_POLL: Duration = Duration::from_millis(25);
/// Longest pause between two polls.
const MAX_POLL: Duration = Duration::from_millis(250);
/// Tries at storing an outcome (a lost outcome lets the call run again).
const COMPLETE_TRIES: u32 = 3;

/// Idempotency keys in Redis, shared by every replica.
pub struct RedisIdempotency {
    shared: Arc<Shared>,
}

struct Shared {
    pool: Arc<RedisPool>,
    prefix: String,
    retention: Duration,
    claim: Script,
    complete: Script,
    release: Script,
}

/// What a key's Redis string holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    /// [`super::fingerprint`] of the first call's arguments.
    fingerprint: String,
    /// The claim in progress; absent once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<String>,
    /// The outcome, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outcome: Option<StoredOutcome>,
}

impl RedisIdempotency {
    /// A store over `pool`, its keys under `prefix`, keeping outcomes for
    /// `retention`.
    pub fn new(pool: Arc<RedisPool>, prefix: &str, retention: Duration) -> Self {
        pool.on_outage(Dependent::Idempotency, || {
            "calls with an idempotency key are refused with UNAVAILABLE, so that none runs twice"
                .into()
        });
        Self {
            shared: Arc::new(Shared {
                pool,
                prefix: prefix.to_owned(),
                retention,
                claim: Script::new(include_str!("claim.lua")),
                complete: Script::new(include_str!("complete.lua")),
                release: Script::new(include_str!("release.lua")),
            }),
        }
    }

    /// The Redis key holding `key`'s record.
    pub fn redis_key(&self, key: &IdempotencyKey) -> String {
        format!("{{{}:idem:{}}}", self.shared.prefix, hex(&key.digest()))
    }
}

/// Milliseconds for `PX`: at least 1.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

fn unavailable(error: RedisError) -> IdempotencyError {
    IdempotencyError::Unavailable(error.to_string())
}

fn encode(record: &Record) -> Result<String, IdempotencyError> {
    serde_json::to_string(record)
        .map_err(|e| IdempotencyError::Unavailable(format!("cannot encode record: {e}")))
}

#[async_trait::async_trait]
impl IdempotencyStore for RedisIdempotency {
    async fn claim(
        &self,
        key: &IdempotencyKey,
        fingerprint: &str,
        hold_for: Duration,
        wait_until: Instant,
    ) -> Result<Claim, IdempotencyError> {
        let redis_key = self.redis_key(key);
        let token = uuid::Uuid::new_v4().to_string();
        let running = encode(&Record {
            fingerprint: fingerprint.to_owned(),
            token: Some(token.clone()),
            outcome: None,
        })?;
        let mut pauses = {
            use backon::BackoffBuilder as _;
            backon::ExponentialBuilder::new()
                .with_min_delay(FIRST_POLL)
                .with_max_delay(MAX_POLL)
                .without_max_times()
                .build()
        };
        loop {
            let mut invocation = self.shared.claim.prepare_invoke();
            invocation
                .key(&redis_key)
                .arg(&running)
                .arg(millis(hold_for));
            let (claimed, holder): (i64, String) = self
                .shared
                .pool
                .run(RedisOp::IdempotencyClaim, async |conn| {
                    invocation.invoke_async(conn).await
                })
                .await
                .map_err(unavailable)?;
            if claimed == 1 {
                return Ok(Claim::Run(Ticket::new(Box::new(RedisFinisher {
                    shared: self.shared.clone(),
                    key: redis_key,
                    token,
                    fingerprint: fingerprint.to_owned(),
                }))));
            }
            // Empty only if the record vanished between the two commands.
            if !holder.is_empty() {
                let record: Record = serde_json::from_str(&holder).map_err(|e| {
                    IdempotencyError::Unavailable(format!("unreadable record at {redis_key}: {e}"))
                })?;
                if record.fingerprint != fingerprint {
                    return Ok(Claim::ArgumentsDiffer);
                }
                if let Some(outcome) = record.outcome {
                    return Ok(Claim::Replay(outcome));
                }
            }
            let now = Instant::now();
            if now >= wait_until {
                return Err(IdempotencyError::WaitTimedOut);
            }
            let pause = pauses.next().unwrap_or(MAX_POLL);
            tokio::time::sleep_until(wait_until.min(now + pause)).await;
        }
    }
}

/// Finishes one claim of a [`RedisIdempotency`].
struct RedisFinisher {
    shared: Arc<Shared>,
    /// The Redis key.
    key: String,
    /// The claim's token, in the in-progress record.
    token: String,
    /// The arguments' fingerprint, kept with the outcome.
    fingerprint: String,
}

impl Shared {
    /// Runs `complete.lua`: whether the outcome was stored.
    async fn store(&self, key: &str, token: &str, done: &str) -> Result<bool, RedisError> {
        let mut invocation = self.complete.prepare_invoke();
        invocation
            .key(key)
            .arg(token)
            .arg(done)
            .arg(millis(self.retention));
        let stored: i64 = self
            .pool
            .run(RedisOp::IdempotencyComplete, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await?;
        Ok(stored == 1)
    }

    /// Runs `release.lua`, logging a failure (the key then frees itself at
    /// the end of its hold).
    async fn release(&self, key: &str, token: &str) {
        let mut invocation = self.release.prepare_invoke();
        invocation.key(key).arg(token);
        let released: Result<i64, _> = self
            .pool
            .run(RedisOp::IdempotencyRelease, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await;
        if let Err(error) = released {
            tracing::warn!(%key, %error, "idempotency key not released; it frees itself after its hold");
        }
    }
}

#[async_trait::async_trait]
impl Finisher for RedisFinisher {
    async fn complete(&self, outcome: StoredOutcome) {
        let done = Record {
            fingerprint: self.fingerprint.clone(),
            token: None,
            outcome: Some(outcome),
        };
        let record = match encode(&done) {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(key = %self.key, %error, "outcome not kept");
                return;
            }
        };
        let mut pauses = {
            use backon::BackoffBuilder as _;
            backon::ExponentialBuilder::new()
                .with_min_delay(Duration::from_millis(50))
                .without_max_delay()
                .with_max_times(COMPLETE_TRIES as usize)
                .build()
        };
        for attempt in 1..=COMPLETE_TRIES {
            match self.shared.store(&self.key, &self.token, &record).await {
                Ok(true) => return,
                Ok(false) => {
                    tracing::warn!(
                        key = %self.key,
                        "idempotency key held past its hold time: outcome not kept"
                    );
                    return;
                }
                Err(error) if attempt == COMPLETE_TRIES => {
                    tracing::warn!(
                        key = %self.key, %error,
                        "outcome not kept; the key frees itself after its hold"
                    );
                }
                Err(_) => {
                    if let Some(pause) = pauses.next() {
                        tokio::time::sleep(pause).await;
                    }
                }
            }
        }
    }

    async fn release(&self) {
        self.shared.release(&self.key, &self.token).await;
    }

    fn release_now(&self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to release from: the hold's expiry frees the key.
            return;
        };
        let shared = self.shared.clone();
        let (key, token) = (self.key.clone(), self.token.clone());
        runtime.spawn(async move { shared.release(&key, &token).await });
    }
}
