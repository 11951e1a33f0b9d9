//! The GCRA script (`gcra.lua`) and how decisions reach it: alone, or in
//! batches, one per serving thread and tool.
//!
//! The first rate-limited call on a tool that a serving thread admits opens
//! a batch for the tool on the thread's lane and spawns the task that sends
//! it. The runtime runs its ready tasks first in, first out, so the calls
//! already waiting on that thread reach the limiter before the task runs,
//! and those on the same tool join the batch. Under load one script decides
//! many calls: one round trip, one `TIME`, one read and one write of each
//! bucket, where each call cost all of them. A call alone waits only for
//! the spawned task's turn.
//!
//! The batch is sent by a task of its own, not by the call that opened it,
//! so a call that goes away (its deadline, a cancelled request) strands no
//! other. Every decision runs in the script in the order the calls came, as
//! it would one script at a time; the keys of one batch share the tool's
//! hash slot, so Cluster takes it whole.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use ::redis::Script;
use tokio::sync::oneshot;

use crate::{
    catalog::descriptor::Limit,
    lanes,
    metrics::RedisOp,
    redis_pool::{RedisError, RedisPool},
};

/// Longest emission interval sent to Redis, in microseconds (about 31
/// years): far beyond any accepted rate, it keeps the script's arithmetic
/// finite whatever the limit says.
const MAX_INTERVAL_US: f64 = 1e15;

/// Most decisions in one batch; a call that finds its tool's batch full is
/// decided alone.
const MOST_PER_BATCH: usize = 256;

/// Most tools with a batch open on one lane at once; past it a call is
/// decided alone.
const MOST_OPEN: usize = 1024;

/// The buckets one decision takes a token from, in order: each bucket's
/// Redis key and limit.
pub(super) type Buckets = Vec<(String, Limit)>;

/// A decision: `None` to go ahead, or the refusing bucket's index (from 0)
/// and the wait until it has a token.
pub(super) type Verdict = Option<(usize, Duration)>;

/// A decision waiting in a batch for the script's answer.
struct Waiting {
    buckets: Buckets,
    answer: oneshot::Sender<Result<Verdict, RedisError>>,
}

/// Where a decision went.
enum Joined {
    /// Into the tool's open batch.
    Batch,
    /// Into a batch it opened, which must be sent.
    Opened,
    /// Nowhere: its tool's batch is full, or the lane has too many open.
    Alone(Buckets),
}

/// Each lane's open batches, by tool.
type Open = Mutex<HashMap<Box<str>, Vec<Waiting>>>;

/// The script, the pool it runs on, and the batches not yet sent.
pub(super) struct GcraScript {
    pool: Arc<RedisPool>,
    script: Script,
    open: Box<[Open]>,
}

impl GcraScript {
    /// The script on `pool`, with a batch map for each of the pool's lanes.
    pub(super) fn new(pool: Arc<RedisPool>) -> Arc<Self> {
        let open = (0..pool.settings().lanes.max(1))
            .map(|_| Mutex::default())
            .collect();
        Arc::new(Self {
            pool,
            script: Script::new(include_str!("gcra.lua")),
            open,
        })
    }

    /// One decision, in a script of its own.
    pub(super) async fn decide(&self, buckets: &[(String, Limit)]) -> Result<Verdict, RedisError> {
        let mut verdicts = self.run(&[buckets]).await?;
        verdicts
            .pop()
            .ok_or_else(|| RedisError::Redis("the script answered no decision".into()))
    }

    /// One decision on `tool`'s buckets, in the batch this thread's calls on
    /// `tool` make in this turn of its runtime.
    pub(super) async fn decide_in_batch(
        self: &Arc<Self>,
        tool: &str,
        buckets: Buckets,
    ) -> Result<Verdict, RedisError> {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.decide(&buckets).await;
        }
        let lane = self.lane();
        let (answer, verdict) = oneshot::channel();
        let waiting = Waiting { buckets, answer };
        let joined = {
            let mut open = self.open[lane]
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let room = open.len() < MOST_OPEN;
            match open.get_mut(tool) {
                Some(batch) if batch.len() < MOST_PER_BATCH => {
                    batch.push(waiting);
                    Joined::Batch
                }
                None if room => {
                    open.insert(tool.into(), vec![waiting]);
                    Joined::Opened
                }
                Some(_) | None => Joined::Alone(waiting.buckets),
            }
        };
        match joined {
            Joined::Batch => {}
            Joined::Opened => {
                tokio::spawn(Self::send(Unsent {
                    script: Arc::clone(self),
                    lane,
                    tool: tool.into(),
                    taken: false,
                }));
            }
            Joined::Alone(buckets) => return self.decide(&buckets).await,
        }
        verdict.await.unwrap_or_else(|_| {
            Err(RedisError::Redis(
                "the batch was dropped before Redis answered".into(),
            ))
        })
    }

    /// This thread's lane, or lane 0 for a lane the pool has no map for.
    fn lane(&self) -> usize {
        Some(lanes::current())
            .filter(|&lane| lane < self.open.len())
            .unwrap_or(0)
    }

    /// Sends the batch `unsent` names as one script and answers each of
    /// its decisions.
    async fn send(mut unsent: Unsent) {
        let Some(batch) = unsent.take() else {
            return;
        };
        let decisions: Vec<&[(String, Limit)]> =
            batch.iter().map(|w| w.buckets.as_slice()).collect();
        match unsent.script.run(&decisions).await {
            Ok(verdicts) => {
                for (waiting, verdict) in batch.into_iter().zip(verdicts) {
                    // A caller that went away no longer waits for its answer.
                    let _ = waiting.answer.send(Ok(verdict));
                }
            }
            Err(error) => {
                for waiting in batch {
                    let _ = waiting.answer.send(Err(error.clone()));
                }
            }
        }
    }

    /// Runs `decisions` in one script, in order: one verdict each.
    async fn run(&self, decisions: &[&[(String, Limit)]]) -> Result<Vec<Verdict>, RedisError> {
        let mut invocation = self.script.prepare_invoke();
        for buckets in decisions {
            invocation.arg(buckets.len());
            for (key, limit) in *buckets {
                invocation
                    .key(key)
                    .arg(interval_us(*limit))
                    .arg(limit.burst.max(1));
            }
        }
        let replies: Vec<i64> = self
            .pool
            .run(RedisOp::RateLimit, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await?;
        if replies.len() != decisions.len() {
            return Err(RedisError::Redis(format!(
                "the script answered {} decisions of {}",
                replies.len(),
                decisions.len()
            )));
        }
        Ok(replies.into_iter().map(refusal).collect())
    }
}

/// An open batch, as the task that sends it holds it. Should the task be
/// dropped before it takes its batch out (cancelled unpolled, as when its
/// runtime shuts down), the batch is taken out then: its calls are
/// answered with an error rather than left waiting, and the tool's next
/// calls open a batch of their own rather than join one never sent.
struct Unsent {
    script: Arc<GcraScript>,
    lane: usize,
    tool: Box<str>,
    taken: bool,
}

impl Unsent {
    fn take(&mut self) -> Option<Vec<Waiting>> {
        self.taken = true;
        self.script.open[self.lane]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.tool)
    }
}

impl Drop for Unsent {
    fn drop(&mut self) {
        if !self.taken {
            drop(self.take());
        }
    }
}

/// One reply of the script read back: `None` (0) to go ahead, else the
/// refusing bucket's index, from 0, and the wait (`retry_after_us * 16 +
/// i`, `i` from 1).
fn refusal(reply: i64) -> Verdict {
    let reply = u64::try_from(reply).ok().filter(|&r| r > 0)?;
    let index = usize::try_from(reply % 16).unwrap_or(1).saturating_sub(1);
    Some((index, Duration::from_micros(reply / 16)))
}

/// GCRA's emission interval of `limit` in microseconds, as the script's
/// argument: the shortest decimal that reads back as the same double.
fn interval_us(limit: Limit) -> String {
    let interval = 1e6 / limit.rate;
    let interval = if interval.is_finite() && interval > 0.0 {
        interval.min(MAX_INTERVAL_US)
    } else {
        MAX_INTERVAL_US
    };
    interval.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(rate: f64, burst: u32) -> Limit {
        Limit { rate, burst }
    }

    #[test]
    fn a_batch_whose_task_never_ran_is_answered_and_leaves_its_lane() {
        let Ok(pool) = RedisPool::new(crate::redis_pool::RedisSettings::default()) else {
            panic!("default settings are valid");
        };
        let script = GcraScript::new(pool);
        let (answer, mut verdict) = oneshot::channel();
        let waiting = Waiting {
            buckets: vec![("{t:rl:echo}".into(), limit(1.0, 1))],
            answer,
        };
        script.open[0]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert("echo".into(), vec![waiting]);
        // The sending task, dropped before it was first polled.
        drop(GcraScript::send(Unsent {
            script: Arc::clone(&script),
            lane: 0,
            tool: "echo".into(),
            taken: false,
        }));
        assert!(
            matches!(
                verdict.try_recv(),
                Err(oneshot::error::TryRecvError::Closed)
            ),
            "the waiting call hears that its batch is gone"
        );
        assert!(script.open[0].lock().is_ok_and(|open| open.is_empty()));
    }

    #[test]
    fn the_reply_names_the_refusing_bucket_and_its_wait() {
        assert_eq!(refusal(0), None);
        assert_eq!(refusal(-5), None, "never a refusal out of nothing");
        assert_eq!(
            refusal(50_000 * 16 + 1),
            Some((0, Duration::from_millis(50)))
        );
        assert_eq!(refusal(7 * 16 + 2), Some((1, Duration::from_micros(7))));
        let longest = (1_i64 << 48) * 16 + 1;
        assert_eq!(
            refusal(longest),
            Some((0, Duration::from_micros(1 << 48))),
            "the script's cap survives the round trip"
        );
    }

    #[test]
    fn interval_is_exact_and_always_finite() {
        assert_eq!(interval_us(limit(20.0, 1)), "50000");
        assert_eq!(interval_us(limit(3.0, 1)), (1e6 / 3.0).to_string());
        assert_eq!(interval_us(limit(1e6, 1)), "1");
        assert_eq!(interval_us(limit(1.0 / 86_400.0, 1)), "86400000000");
        let huge = MAX_INTERVAL_US.to_string();
        assert_eq!(interval_us(limit(0.0, 1)), huge);
        assert_eq!(interval_us(limit(-1.0, 1)), huge);
        assert_eq!(interval_us(limit(f64::NAN, 1)), huge);
        assert!(!huge.contains('e'), "Lua reads plain decimals: {huge}");
    }
}
