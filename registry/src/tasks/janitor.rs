//! What no sidecar will report: a task whose instance left the catalog (its
//! lease ended: the sidecar died, or was stopped) or restarted (a new
//! execute key under the same id), and a task whose timeout passed with no
//! end reported. Every replica's janitor runs the same pass; the store's
//! compare-and-set ends each task once.

use std::{
    collections::{HashMap, HashSet},
    sync::Mutex,
    time::{Duration, Instant},
};

use toolmesh_telemetry::TraceContext;

use super::{
    Tasks,
    model::{Holder, Outcome, State, Task, now_ms},
    start::Moved,
};

/// Most live tasks one pass looks at (the soonest to time out first).
const PASS: usize = 1000;
/// How long past its timeout a task waits for its instance's own
/// DEADLINE_EXCEEDED before the janitor writes one.
const TIMEOUT_GRACE: Duration = Duration::from_secs(5);

/// Tasks whose instance this replica found missing, and since when.
#[derive(Default)]
pub(super) struct Orphans(Mutex<HashMap<String, Instant>>);

impl Orphans {
    /// Whether `id` has been missing its instance for `grace`, counting
    /// from the first pass that found it so.
    fn missing_for(&self, id: &str, grace: Duration) -> bool {
        let mut seen = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let since = *seen.entry(id.to_owned()).or_insert_with(Instant::now);
        since.elapsed() >= grace
    }

    /// Forgets every task but those in `live`.
    fn keep(&self, live: &HashSet<&str>) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|id, _| live.contains(id.as_str()));
    }

    fn clear(&self, id: &str) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }
}

/// How a live task must end, or move.
#[derive(Debug)]
enum Verdict {
    /// Its timeout passed with no end reported.
    TimedOut(tonic::Status),
    /// Its instance cannot report any more.
    Lost(tonic::Status),
}

/// Why a live task cannot end by its instance's report.
#[derive(Debug, PartialEq, Eq)]
enum Lost {
    /// Its instance is not in the catalog.
    Left,
    /// Its instance's id is back with another key: a new process.
    Restarted,
}

impl Tasks {
    /// One pass of the janitor.
    pub(crate) async fn sweep(&self) {
        let now = now_ms();
        let live = match self.store.live(PASS).await {
            Ok(live) => live,
            Err(error) => {
                tracing::debug!(%error, "the task janitor skips a pass");
                return;
            }
        };
        for task in &live {
            if task.pending_approval().is_some_and(|a| now >= a.until_ms) {
                self.expire(task).await;
                continue;
            }
            match self.verdict(task, now) {
                Some(Verdict::TimedOut(status)) => self.fail(task, &status).await,
                Some(Verdict::Lost(status)) => self.lost_instance(task, status).await,
                None => {}
            }
        }
        self.orphans
            .keep(&live.iter().map(|t| t.id.as_str()).collect());
        self.count_pending().await;
        if let Err(error) = self.store.sweep(now).await {
            tracing::debug!(%error, "ended tasks stay until the next pass");
        }
    }

    /// A task whose instance was lost: run again elsewhere when its tool
    /// is idempotent, else (or when no instance takes it) failed with
    /// `status`.
    async fn lost_instance(&self, task: &Task, status: tonic::Status) {
        let lost = task
            .holder
            .as_ref()
            .map(|h| h.instance.clone())
            .unwrap_or_default();
        match self.rerun(task).await {
            Moved::Not => self.fail(task, &status).await,
            Moved::Elsewhere => {}
            Moved::To(instance) => {
                self.orphans.clear(&task.id);
                tracing::warn!(task = %task.id, tool = %task.tool, lost = %lost, %instance, "task's instance was lost; the idempotent task runs again on another");
            }
            Moved::Refused(error) => {
                let status = tonic::Status::unavailable(format!(
                    "{}; no other instance took the task: {error}",
                    status.message()
                ));
                self.fail(task, &status).await;
            }
        }
    }

    /// How `task` must end now, if it must.
    fn verdict(&self, task: &Task, now: u64) -> Option<Verdict> {
        let grace = u64::try_from(TIMEOUT_GRACE.as_millis()).unwrap_or(u64::MAX);
        if now > task.expires_ms.saturating_add(grace) {
            return Some(Verdict::TimedOut(tonic::Status::deadline_exceeded(
                format!(
                    "the task's timeout passed with no end reported by {}",
                    task.holder
                        .as_ref()
                        .map_or("any instance".to_owned(), |h| format!(
                            "instance {}",
                            h.instance
                        ))
                ),
            )));
        }
        let holder = task
            .holder
            .as_ref()
            .filter(|_| task.state == State::Working)?;
        let Some(lost) = self.lost(&task.tool, holder) else {
            self.orphans.clear(&task.id);
            return None;
        };
        if !self
            .orphans
            .missing_for(&task.id, self.settings.orphan_grace)
        {
            return None;
        }
        Some(Verdict::Lost(tonic::Status::unavailable(match lost {
            Lost::Left => format!(
                "instance {} left the catalog (its lease ended) while the task ran; the task's result is lost",
                holder.instance
            ),
            Lost::Restarted => format!(
                "instance {} restarted while the task ran; the task's result is lost",
                holder.instance
            ),
        })))
    }

    /// Whether `holder` can still report on a task of `tool`.
    fn lost(&self, tool: &str, holder: &Holder) -> Option<Lost> {
        let tool = self.invoker.catalog().get(tool);
        let instance = tool
            .as_ref()
            .and_then(|t| t.instances.iter().find(|i| i.id == holder.instance));
        match instance {
            None => Some(Lost::Left),
            Some(i) if Holder::key_tag(i.execute_key.as_ref()) != holder.key_tag => {
                Some(Lost::Restarted)
            }
            Some(_) => None,
        }
    }

    async fn fail(&self, task: &Task, status: &tonic::Status) {
        let now = now_ms();
        let outcome = Outcome::of_status(status);
        match self
            .change(&task.id, &move |t: &mut Task| {
                t.finish(outcome.clone(), now)
            })
            .await
        {
            Ok(Some((ended, true))) => {
                tracing::warn!(task = %ended.id, tool = %ended.tool, reason = status.message(), "task failed");
                self.ended(&ended, "janitor");
                // A sidecar still at work (a timeout it missed) is told.
                self.stop_on_instance(&ended, &TraceContext::default())
                    .await;
            }
            Ok(_) => {}
            Err(error) => tracing::debug!(%error, "the task janitor could not end a task"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_orphan_fails_only_after_the_grace() {
        let orphans = Orphans::default();
        assert!(!orphans.missing_for("t", Duration::from_secs(60)));
        assert!(orphans.missing_for("t", Duration::ZERO));
        orphans.keep(&HashSet::new());
        assert!(
            !orphans.missing_for("t", Duration::from_secs(60)),
            "forgotten once not live"
        );
    }
}
