//! The calls this replica answered lately, for the console: the last
//! [`TAIL_LEN`] calls one by one (the live tail), and per tool the counts
//! and latencies of the last ten minutes in ten-second buckets (its
//! plots). Fed by each call's [`crate::calls::call_log::CallLog`] when it
//! ends; kept only when the console is on.
//!
//! In Redis mode the calls are also shared ([`shared`]), so that every
//! replica's console shows every replica's calls.
//!
//! Bounded whatever the network sends: the tail is a ring, and series are
//! kept for at most [`MAX_SERIES`] tools, only for calls that reached a
//! tool of the catalog (a name nobody serves makes no series).

pub(crate) mod shared;

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant, SystemTime},
};

/// Calls kept in the tail.
pub(crate) const TAIL_LEN: usize = 2000;
/// Tools whose series are kept.
pub(crate) const MAX_SERIES: usize = 4096;
/// Width of one bucket of a series.
pub(crate) const BUCKET: Duration = Duration::from_secs(10);
/// Buckets in a series: ten minutes.
pub(crate) const BUCKETS: usize = 60;

/// One call, as the tail shows it.
#[derive(Debug, Clone)]
pub(crate) struct CallRecord {
    /// When it ended.
    pub at: SystemTime,
    /// The tool asked for.
    pub tool: Arc<str>,
    /// The caller id (`""`: anonymous).
    pub caller: Arc<str>,
    /// `ok`, `tool_error`, `approval_required`, or a gRPC code's name.
    pub outcome: &'static str,
    /// From the request to the answer.
    pub latency: Duration,
    /// The instance that answered last, if one was tried.
    pub instance: Option<String>,
    /// The task it started or was held as.
    pub task: Option<String>,
}

/// What one bucket counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bucket {
    /// Index of the bucket since the tail began; a slot holding an older
    /// index is empty.
    epoch: u64,
    /// Answered by the tool.
    pub ok: u32,
    /// The tool ran and reported a failure (`is_error`).
    pub tool_error: u32,
    /// Refused by a rate limit.
    pub limited: u32,
    /// Refused before any tool ran by the caller's own doing: bad
    /// arguments, an unknown tool, a held call.
    pub refused: u32,
    /// Failed for any other reason (unavailable, deadline, internal).
    pub failed: u32,
    /// Sum of the latencies, in microseconds.
    pub latency_sum_us: u64,
    /// Largest latency, in microseconds.
    pub latency_max_us: u32,
}

impl Bucket {
    /// Every call it counts.
    pub(crate) fn calls(&self) -> u32 {
        self.ok + self.tool_error + self.limited + self.refused + self.failed
    }

    /// Mean latency, if it counts a call.
    pub(crate) fn mean_latency(&self) -> Option<Duration> {
        let calls = u64::from(self.calls());
        (calls > 0).then(|| Duration::from_micros(self.latency_sum_us / calls))
    }
}

/// The tail and the series.
#[derive(Debug)]
pub(crate) struct CallTail {
    began: Instant,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    tail: VecDeque<CallRecord>,
    /// Calls not yet shared with the other replicas ([`shared`]); `None`
    /// when nothing shares them.
    outbox: Option<Vec<CallRecord>>,
    series: HashMap<Arc<str>, Box<[Bucket; BUCKETS]>>,
    /// The epoch of the last sweep of idle series (at most one a bucket).
    swept: Option<u64>,
}

impl Default for CallTail {
    fn default() -> Self {
        Self::new(Instant::now())
    }
}

impl CallTail {
    /// An empty tail whose buckets count from `began`.
    pub(crate) fn new(began: Instant) -> Self {
        Self {
            began,
            inner: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it leaves counts, never a broken invariant.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn epoch(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.began).as_millis();
        u64::try_from(elapsed / BUCKET.as_millis()).unwrap_or(u64::MAX)
    }

    /// Records `call`, ended at `now`; `in_catalog` when it reached a tool
    /// of the catalog (only those have series).
    pub(crate) fn record(&self, call: CallRecord, in_catalog: bool, now: Instant) {
        let epoch = self.epoch(now);
        let mut inner = self.lock();
        if in_catalog {
            if inner.series.len() >= MAX_SERIES && inner.swept != Some(epoch) {
                // Full: make room by dropping the series idle for ten
                // minutes (tools gone, or quiet), once a bucket at most.
                inner.swept = Some(epoch);
                let oldest = epoch.saturating_sub(BUCKETS as u64 - 1);
                inner
                    .series
                    .retain(|_, series| series.iter().any(|b| b.epoch >= oldest && b.calls() > 0));
            }
            let full = inner.series.len() >= MAX_SERIES;
            let series = match inner.series.get_mut(&call.tool) {
                Some(series) => Some(series),
                None if full => None,
                None => Some(
                    inner
                        .series
                        .entry(call.tool.clone())
                        .or_insert_with(|| Box::new([Bucket::default(); BUCKETS])),
                ),
            };
            if let Some(series) = series {
                count(series, epoch, call.outcome, call.latency);
            }
        }
        if let Some(outbox) = &mut inner.outbox
            && outbox.len() < TAIL_LEN
        {
            outbox.push(call.clone());
        }
        if inner.tail.len() == TAIL_LEN {
            inner.tail.pop_front();
        }
        inner.tail.push_back(call);
    }

    /// Keeps the calls recorded from now on for [`Self::take_outbox`]
    /// too (at most [`TAIL_LEN`] between two takes).
    pub(crate) fn share(&self) {
        self.lock().outbox.get_or_insert_with(Vec::new);
    }

    /// The calls recorded since the last take.
    pub(crate) fn take_outbox(&self) -> Vec<CallRecord> {
        self.lock()
            .outbox
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// The last calls that `keep` keeps, newest first, at most `limit`.
    pub(crate) fn recent(
        &self,
        limit: usize,
        mut keep: impl FnMut(&CallRecord) -> bool,
    ) -> Vec<CallRecord> {
        let inner = self.lock();
        inner
            .tail
            .iter()
            .rev()
            .filter(|c| keep(c))
            .take(limit)
            .cloned()
            .collect()
    }

    /// `tool`'s buckets of the last ten minutes at `now`, oldest first
    /// (empty ones included), or `None` if it has no call in them.
    pub(crate) fn series(&self, tool: &str, now: Instant) -> Option<Vec<Bucket>> {
        let current = self.epoch(now);
        let inner = self.lock();
        let series = inner.series.get(tool)?;
        // Oldest first; before the tail began, empty.
        let buckets: Vec<Bucket> = (0..BUCKETS as u64)
            .rev()
            .map(|back| match current.checked_sub(back) {
                Some(epoch) if series[slot(epoch)].epoch == epoch => series[slot(epoch)],
                _ => Bucket::default(),
            })
            .collect();
        buckets.iter().any(|b| b.calls() > 0).then_some(buckets)
    }
}

/// `outcome` as the `'static` spelling calls are recorded with, or
/// `unknown`.
pub(crate) fn outcome_named(outcome: &str) -> &'static str {
    const OTHERS: [&str; 4] = [
        "ok",
        toolmesh_proto::code::TOOL_ERROR,
        crate::calls::call_log::APPROVAL_REQUIRED,
        crate::calls::call_log::TASK_STARTED,
    ];
    OTHERS
        .into_iter()
        .chain((0..=16).map(|n| toolmesh_proto::code::outcome(tonic::Code::from_i32(n))))
        .find(|known| *known == outcome)
        .unwrap_or("unknown")
}

fn slot(epoch: u64) -> usize {
    // The remainder is below BUCKETS.
    usize::try_from(epoch % BUCKETS as u64).unwrap_or(0)
}

fn count(series: &mut [Bucket; BUCKETS], epoch: u64, outcome: &str, latency: Duration) {
    let bucket = &mut series[slot(epoch)];
    if bucket.epoch != epoch {
        *bucket = Bucket {
            epoch,
            ..Bucket::default()
        };
    }
    match outcome {
        "ok" => bucket.ok += 1,
        toolmesh_proto::code::TOOL_ERROR => bucket.tool_error += 1,
        "resource_exhausted" => bucket.limited += 1,
        "invalid_argument"
        | "failed_precondition"
        | "not_found"
        | "permission_denied"
        | "unauthenticated"
        | "approval_required" => bucket.refused += 1,
        _ => bucket.failed += 1,
    }
    let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    bucket.latency_sum_us = bucket.latency_sum_us.saturating_add(micros);
    bucket.latency_max_us = bucket
        .latency_max_us
        .max(u32::try_from(micros).unwrap_or(u32::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str, outcome: &'static str, ms: u64) -> CallRecord {
        CallRecord {
            at: SystemTime::now(),
            tool: tool.into(),
            caller: "agent".into(),
            outcome,
            latency: Duration::from_millis(ms),
            instance: None,
            task: None,
        }
    }

    #[test]
    fn the_tail_keeps_the_last_calls_newest_first() {
        let began = Instant::now();
        let tail = CallTail::new(began);
        for i in 0..TAIL_LEN + 5 {
            tail.record(call(&format!("t{i}"), "ok", 1), false, began);
        }
        let recent = tail.recent(3, |_| true);
        let names: Vec<&str> = recent.iter().map(|c| &*c.tool).collect();
        let last = TAIL_LEN + 4;
        assert_eq!(
            names,
            [
                format!("t{last}"),
                format!("t{}", last - 1),
                format!("t{}", last - 2)
            ]
        );
        assert_eq!(tail.recent(usize::MAX, |_| true).len(), TAIL_LEN);
        assert_eq!(tail.recent(10, |c| &*c.tool == "t5").len(), 1);
    }

    #[test]
    fn buckets_count_outcomes_and_latency_and_age_out() {
        let began = Instant::now();
        let tail = CallTail::new(began);
        tail.record(call("echo", "ok", 2), true, began);
        tail.record(call("echo", "tool_error", 4), true, began);
        tail.record(call("echo", "invalid_argument", 0), true, began);
        tail.record(call("echo", "unavailable", 6), true, began + BUCKET);
        let series = tail.series("echo", began + BUCKET).expect("called");
        assert_eq!(series.len(), BUCKETS);
        let (before, last) = (series[BUCKETS - 2], series[BUCKETS - 1]);
        assert_eq!(
            (before.ok, before.tool_error, before.refused, before.failed),
            (1, 1, 1, 0)
        );
        assert_eq!(before.mean_latency(), Some(Duration::from_millis(2)));
        assert_eq!(before.latency_max_us, 4000);
        assert_eq!(last.failed, 1);
        // Ten minutes on, the slots are reused and the old counts gone.
        let later = began + BUCKET * (BUCKETS as u32 + 1);
        assert_eq!(tail.series("echo", later), None);
        tail.record(call("echo", "ok", 1), true, later);
        let series = tail.series("echo", later).expect("called again");
        assert_eq!(series.iter().map(Bucket::calls).sum::<u32>(), 1);
    }

    #[test]
    fn series_are_bounded_and_only_for_catalog_tools() {
        let began = Instant::now();
        let tail = CallTail::new(began);
        tail.record(call("nobody-serves-this", "not_found", 0), false, began);
        assert_eq!(tail.series("nobody-serves-this", began), None);
        for i in 0..MAX_SERIES + 10 {
            tail.record(call(&format!("t{i}"), "ok", 0), true, began);
        }
        assert_eq!(tail.lock().series.len(), MAX_SERIES);
        assert_eq!(tail.series(&format!("t{MAX_SERIES}"), began), None);
        // Ten minutes on, idle series make room for new ones.
        let later = began + BUCKET * BUCKETS as u32;
        tail.record(call("fresh", "ok", 0), true, later);
        assert!(tail.series("fresh", later).is_some());
        assert_eq!(tail.lock().series.len(), 1);
    }
}
