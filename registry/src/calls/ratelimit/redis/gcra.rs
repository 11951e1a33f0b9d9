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
        let layout = Layout::of(decisions)?;
        let mut invocation = self.script.prepare_invoke();
        for key in &layout.keys {
            invocation.key(*key);
        }
        invocation.arg(layout.buckets.len());
        for &(key, limit) in &layout.buckets {
            invocation
                .arg(key)
                .arg(interval_us(limit))
                .arg(limit.burst.max(1));
        }
        invocation.arg(layout.decisions.as_slice());
        let reply: Vec<i64> = self
            .pool
            .run(RedisOp::RateLimit, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await?;
        verdicts(&reply, decisions.len())
    }
}

/// The script's reply read back: the decision count, then each refused
/// decision's place (from 1) and [`refusal`].
fn verdicts(reply: &[i64], decisions: usize) -> Result<Vec<Verdict>, RedisError> {
    let unreadable = || RedisError::Redis(format!("unreadable script reply {reply:?}"));
    let (&count, refused) = reply.split_first().ok_or_else(unreadable)?;
    if usize::try_from(count).ok() != Some(decisions) || refused.len() % 2 != 0 {
        return Err(RedisError::Redis(format!(
            "the script answered {count} decisions of {decisions}"
        )));
    }
    let mut verdicts = vec![None; decisions];
    for pair in refused.chunks_exact(2) {
        let place = usize::try_from(pair[0])
            .ok()
            .and_then(|place| place.checked_sub(1))
            .filter(|&index| index < decisions)
            .ok_or_else(unreadable)?;
        verdicts[place] = refusal(pair[1]);
    }
    Ok(verdicts)
}

/// A batch as the script takes it: each key and each bucket (a key under
/// one limit) once, however many decisions take from it, so that neither
/// side encodes, sends or parses a key or a limit per call.
#[derive(Debug, PartialEq)]
struct Layout<'a> {
    /// The distinct keys, in first use: the script's `KEYS`.
    keys: Vec<&'a str>,
    /// The distinct buckets, in first use: the index of its key in `keys`
    /// (from 1, as Lua counts) and its limit.
    buckets: Vec<(usize, Limit)>,
    /// Per decision its bucket count, then each bucket's index in
    /// `buckets` (from 1), each a big-endian `u16`: one argument for the
    /// whole batch.
    decisions: Vec<u8>,
}

impl<'a> Layout<'a> {
    fn of(decisions: &[&'a [(String, Limit)]]) -> Result<Self, RedisError> {
        let mut layout = Layout {
            keys: Vec::new(),
            buckets: Vec::new(),
            decisions: Vec::with_capacity(decisions.len() * 6),
        };
        let mut keys: HashMap<&str, usize> = HashMap::new();
        let mut buckets: HashMap<(usize, u64, u32), usize> = HashMap::new();
        for decision in decisions {
            layout.push(decision.len())?;
            for (key, limit) in *decision {
                let key = *keys.entry(key.as_str()).or_insert_with(|| {
                    layout.keys.push(key);
                    layout.keys.len()
                });
                let bucket = *buckets
                    .entry((key, limit.rate.to_bits(), limit.burst))
                    .or_insert_with(|| {
                        layout.buckets.push((key, *limit));
                        layout.buckets.len()
                    });
                layout.push(bucket)?;
            }
        }
        Ok(layout)
    }

    fn push(&mut self, n: usize) -> Result<(), RedisError> {
        let n = u16::try_from(n).map_err(|_| {
            RedisError::Redis(format!("{n} buckets are more than one script takes"))
        })?;
        self.decisions.extend_from_slice(&n.to_be_bytes());
        Ok(())
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
    fn a_batch_sends_each_key_and_bucket_once() {
        let tool = ("{t:rl:echo}".to_owned(), limit(5.0, 3));
        let caller = |name: &str| (format!("{{t:rl:echo}}:caller:{name}"), limit(1.0, 1));
        let a = [caller("a"), tool.clone()];
        let b = [caller("b"), tool.clone()];
        let only_tool = [tool.clone()];
        let retuned = [("{t:rl:echo}".to_owned(), limit(2.0, 3))];
        let Ok(layout) = Layout::of(&[&a, &b, &a, &only_tool, &retuned]) else {
            panic!("five decisions fit");
        };
        assert_eq!(
            layout.keys,
            [
                "{t:rl:echo}:caller:a",
                "{t:rl:echo}",
                "{t:rl:echo}:caller:b"
            ]
        );
        assert_eq!(
            layout.buckets,
            [
                (1, limit(1.0, 1)),
                (2, limit(5.0, 3)),
                (3, limit(1.0, 1)),
                (2, limit(2.0, 3)),
            ],
            "the tool's key under a new limit is a bucket of its own, on the same key"
        );
        let numbers: Vec<u16> = layout
            .decisions
            .chunks(2)
            .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
            .collect();
        assert_eq!(numbers, [2, 1, 2, 2, 3, 2, 2, 1, 2, 1, 2, 1, 4]);
    }

    #[test]
    fn a_batch_past_sixteen_bits_is_refused_not_mangled() {
        let many: Vec<(String, Limit)> = (0..=usize::from(u16::MAX))
            .map(|i| (i.to_string(), limit(1.0, 1)))
            .collect();
        assert!(Layout::of(&[&many]).is_err());
        assert!(Layout::of(&[&many[..300]]).is_ok());
    }

    #[test]
    fn a_reply_names_only_the_refused_decisions() {
        assert_eq!(verdicts(&[3], 3).ok(), Some(vec![None, None, None]));
        assert_eq!(
            verdicts(&[3, 2, 50_000 * 16 + 1], 3).ok(),
            Some(vec![None, Some((0, Duration::from_millis(50))), None])
        );
        assert!(verdicts(&[2], 3).is_err(), "a decision unanswered");
        assert!(verdicts(&[], 1).is_err());
        assert!(verdicts(&[1, 1], 1).is_err(), "half a refusal");
        assert!(verdicts(&[1, 2, 17], 1).is_err(), "a place past the batch");
        assert!(verdicts(&[1, 0, 17], 1).is_err(), "places count from 1");
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
