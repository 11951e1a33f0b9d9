//! The call tail shared by the replicas in Redis mode: each replica adds
//! the calls it answered to one capped stream, `{prefix:console}:calls`,
//! once a second in one pipeline (never on a call's path), and every
//! replica's console reads the newest from it. A batch Redis does not take
//! is dropped: the tail is a view, not a record (the audit log is).

use std::{
    sync::Arc,
    time::{Duration, UNIX_EPOCH},
};

use tokio_util::sync::CancellationToken;

use super::{CallRecord, CallTail, TAIL_LEN, outcome_named};
use crate::{metrics::RedisOp, redis_pool::RedisPool};

/// How often a replica adds its calls.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// The stream's key.
pub(crate) fn stream_key(prefix: &str) -> String {
    format!("{{{prefix}:console}}:calls")
}

/// The tail in Redis.
#[derive(Clone)]
pub(crate) struct SharedTail {
    pool: Arc<RedisPool>,
    key: String,
    /// This replica's name on the calls it adds.
    replica: String,
}

impl std::fmt::Debug for SharedTail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedTail")
            .field("key", &self.key)
            .finish()
    }
}

impl SharedTail {
    /// The stream under `prefix`, written as `replica`.
    pub(crate) fn new(pool: Arc<RedisPool>, prefix: &str, replica: String) -> Self {
        Self {
            pool,
            key: stream_key(prefix),
            replica,
        }
    }

    /// Adds `tail`'s calls to the stream every second until `stop`.
    pub(crate) async fn publish(self, tail: Arc<CallTail>, stop: CancellationToken) {
        tail.share();
        let mut every = tokio::time::interval(FLUSH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            let calls = tail.take_outbox();
            if calls.is_empty() {
                continue;
            }
            if let Err(error) = self.add(&calls).await {
                tracing::debug!(%error, dropped = calls.len(), "console: calls not shared");
            }
        }
    }

    async fn add(&self, calls: &[CallRecord]) -> Result<(), crate::redis_pool::RedisError> {
        let mut pipe = redis::pipe();
        for call in calls {
            let at = call
                .at
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            pipe.cmd("XADD")
                .arg(&self.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(TAIL_LEN)
                .arg("*")
                .arg("at")
                .arg(at.to_string())
                .arg("tool")
                .arg(&*call.tool)
                .arg("caller")
                .arg(&*call.caller)
                .arg("outcome")
                .arg(call.outcome)
                .arg("us")
                .arg(call.latency.as_micros().to_string())
                .arg("instance")
                .arg(call.instance.as_deref().unwrap_or_default())
                .arg("task")
                .arg(call.task.as_deref().unwrap_or_default())
                .arg("replica")
                .arg(&self.replica)
                .ignore();
        }
        self.pool
            .run(RedisOp::ConsoleCalls, async |conn| {
                pipe.query_async::<()>(conn).await
            })
            .await
    }

    /// The newest calls of every replica, newest first, at most
    /// [`TAIL_LEN`].
    pub(crate) async fn recent(&self) -> Result<Vec<CallRecord>, crate::redis_pool::RedisError> {
        type Entry = (String, Vec<(String, String)>);
        let entries: Vec<Entry> = self
            .pool
            .run(RedisOp::ConsoleCalls, async |conn| {
                redis::cmd("XREVRANGE")
                    .arg(&self.key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(TAIL_LEN)
                    .query_async(conn)
                    .await
            })
            .await?;
        Ok(entries
            .into_iter()
            .map(|(_, fields)| record(&fields))
            .collect())
    }
}

/// A call as the stream holds it.
fn record(fields: &[(String, String)]) -> CallRecord {
    let get = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    };
    let some = |value: &str| (!value.is_empty()).then(|| value.to_owned());
    CallRecord {
        at: UNIX_EPOCH + Duration::from_millis(get("at").parse().unwrap_or(0)),
        tool: get("tool").into(),
        caller: get("caller").into(),
        outcome: outcome_named(get("outcome")),
        latency: Duration::from_micros(get("us").parse().unwrap_or(0)),
        instance: some(get("instance")),
        task: some(get("task")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_entry_reads_back_as_the_call() {
        let fields: Vec<(String, String)> = [
            ("at", "1700000000123"),
            ("tool", "add"),
            ("caller", "ops"),
            ("outcome", "resource_exhausted"),
            ("us", "1500"),
            ("instance", ""),
            ("task", "t-1"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let call = record(&fields);
        assert_eq!(&*call.tool, "add");
        assert_eq!(call.outcome, "resource_exhausted");
        assert_eq!(call.latency, Duration::from_micros(1500));
        assert_eq!(call.instance, None);
        assert_eq!(call.task.as_deref(), Some("t-1"));
        assert_eq!(
            call.at.duration_since(UNIX_EPOCH).unwrap_or_default(),
            Duration::from_millis(1_700_000_000_123)
        );
        assert_eq!(
            record(&[]).outcome,
            "unknown",
            "never a panic on a bad entry"
        );
    }

    #[test]
    fn outcomes_read_back_as_recorded() {
        for outcome in ["ok", "tool_error", "approval_required", "unavailable"] {
            assert_eq!(outcome_named(outcome), outcome);
        }
        assert_eq!(outcome_named("<script>"), "unknown");
    }
}
