//! Following a task to its end through `Tasks.WatchTask`, across the ends
//! of streams: each stream is asked to last at most [`SEGMENT`] (every RPC
//! has a deadline), and one that ends before the task (its deadline, the
//! replica it reached gone, the connection broken) is opened again, at
//! once after a stream that ran its course, else after a backoff, for at
//! most [`RETRY`]'s tries in a row. The task lives on in the registry's
//! store, so any replica answers for it.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use toolmesh_proto::pb;

use super::show::is_over;
use crate::connect::Registry;
use crate::failure::Failure;

/// Longest one `WatchTask` stream is asked to last.
const SEGMENT: Duration = Duration::from_secs(60);

/// How long past a stream's deadline the registry may take to end it
/// before the stream is taken as lost (a connection that went silent).
const GRACE: Duration = Duration::from_secs(5);

/// When a watch that ended early is opened again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    /// The wait before the first retry.
    pub(crate) first: Duration,
    /// The longest wait between two.
    pub(crate) max: Duration,
    /// Most failed streams in a row before the wait gives up.
    pub(crate) tries: u32,
}

/// The backoff of `tasks wait`: 0.25 s doubling to 8 s, 8 tries (about
/// 24 s of retrying a registry that does not answer).
pub(crate) const RETRY: Backoff = Backoff {
    first: Duration::from_millis(250),
    max: Duration::from_secs(8),
    tries: 8,
};

impl Backoff {
    /// The wait before retry `n` (counting from 1).
    pub(crate) fn delay(&self, n: u32) -> Duration {
        let doubled = 2u32.checked_pow(n.saturating_sub(1)).unwrap_or(u32::MAX);
        self.first.saturating_mul(doubled).min(self.max)
    }
}

/// How one stream ended.
enum End {
    /// With the task over.
    Over(Box<pb::Task>),
    /// Before the task was over, with this status.
    Early {
        /// Why.
        status: tonic::Status,
        /// Whether it ran its course: ended at its deadline, having lasted.
        ran_its_course: bool,
        /// Whether it brought a change not seen before.
        news: bool,
    },
}

/// Follows task `id` until it is over, and returns it as it ended; each
/// version of it seen on the way goes to `seen`. Past `until` it no
/// longer asks, and never returns: the caller's wait owns that deadline.
pub(crate) async fn follow(
    registry: &mut Registry,
    id: &str,
    until: Option<Instant>,
    seen: &watch::Sender<Option<pb::Task>>,
) -> Result<pb::Task, Failure> {
    let mut failures = 0;
    let mut revision = 0;
    loop {
        let segment = match until {
            None => SEGMENT,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                if left < Duration::from_millis(1) {
                    return std::future::pending().await;
                }
                left.min(SEGMENT)
            }
        };
        match watch_once(registry, id, segment, &mut revision, seen).await {
            End::Over(task) => return Ok(*task),
            End::Early { status, .. } if !worth_retrying(&status) => {
                return Err(registry.failed(&status));
            }
            End::Early {
                ran_its_course: true,
                ..
            } => failures = 0,
            End::Early { status, news, .. } => {
                // A stream that brought news worked: this is the first
                // failure since.
                failures = if news { 1 } else { failures + 1 };
                if failures >= RETRY.tries {
                    return Err(super::goes_on(registry.failed(&status), id));
                }
                let retry_at = Instant::now() + RETRY.delay(failures);
                tokio::time::sleep_until(until.map_or(retry_at, |at| at.min(retry_at))).await;
            }
        }
    }
}

/// One `WatchTask` stream of at most `segment`, sending each task it
/// brings to `seen`; `revision` is the newest seen so far.
async fn watch_once(
    registry: &mut Registry,
    id: &str,
    segment: Duration,
    revision: &mut u64,
    seen: &watch::Sender<Option<pb::Task>>,
) -> End {
    let opened = Instant::now();
    let give_up = opened + segment + GRACE;
    let silent =
        || tonic::Status::unavailable("the registry went silent past the watch's deadline");
    let mut news = false;
    let request = registry.request_within(pb::WatchTaskRequest { id: id.to_owned() }, segment);
    let call = registry.tasks_raw(async |c| c.watch_task(request).await);
    let mut stream = match tokio::time::timeout_at(give_up, call).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(status)) => return early(status, opened, segment, news),
        Err(_) => return early(silent(), opened, segment, news),
    };
    loop {
        let status = match tokio::time::timeout_at(give_up, stream.message()).await {
            Ok(Ok(Some(task))) => {
                news |= task.revision > *revision;
                *revision = (*revision).max(task.revision);
                let over = is_over(&task);
                seen.send_replace(Some(task.clone()));
                if over {
                    return End::Over(Box::new(task));
                }
                continue;
            }
            Ok(Ok(None)) => tonic::Status::unavailable("the watch ended before the task did"),
            Ok(Err(status)) => status,
            Err(_) => silent(),
        };
        return early(status, opened, segment, news);
    }
}

/// A stream opened at `opened` for `segment` that ended early with
/// `status`.
fn early(status: tonic::Status, opened: Instant, segment: Duration, news: bool) -> End {
    // The registry ends a stream a little before its deadline, to answer
    // in time; one that ended at once did not run its course.
    let ran_its_course =
        status.code() == tonic::Code::DeadlineExceeded && opened.elapsed() >= segment / 2;
    End::Early {
        status,
        ran_its_course,
        news,
    }
}

/// Whether a stream that ended with `status` is worth opening again: its
/// deadline passed, the registry was unavailable, or the connection broke
/// (a status the client made, not one the registry sent).
fn worth_retrying(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::DeadlineExceeded | tonic::Code::Unavailable
    ) || std::error::Error::source(status).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_its_bound() {
        let delays: Vec<u128> = (1..=RETRY.tries)
            .map(|n| RETRY.delay(n).as_millis())
            .collect();
        assert_eq!(delays, [250, 500, 1000, 2000, 4000, 8000, 8000, 8000]);
        assert_eq!(RETRY.delay(u32::MAX), RETRY.max);
    }

    #[test]
    fn only_an_ended_deadline_an_outage_or_a_broken_connection_is_retried() {
        assert!(worth_retrying(&tonic::Status::deadline_exceeded("")));
        assert!(worth_retrying(&tonic::Status::unavailable("")));
        assert!(!worth_retrying(&tonic::Status::not_found("")));
        assert!(!worth_retrying(&tonic::Status::permission_denied("")));
        let broken = tonic::Status::from_error(Box::new(std::io::Error::from(
            std::io::ErrorKind::ConnectionReset,
        )));
        assert!(worth_retrying(&broken), "{broken:?}");
    }

    #[test]
    fn a_stream_ended_at_once_did_not_run_its_course() {
        let opened = Instant::now();
        let ended = early(tonic::Status::deadline_exceeded(""), opened, SEGMENT, false);
        assert!(matches!(
            ended,
            End::Early {
                ran_its_course: false,
                ..
            }
        ));
    }
}
