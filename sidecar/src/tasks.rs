//! The tasks this instance runs (`ToolRuntime.RunTask`): a bounded table
//! by task id, each task's work on a tokio task of its own, its progress
//! and end reported to the registry (`Registration.ReportTask`).
//!
//! A task leaves the table once its end was taken by the registry, or
//! refused for good, or given up on ([`report::END_WINDOW`] after it
//! ended); stopped (`StopTask`, or the registry answering that the task is
//! over), it leaves at once and reports nothing more. When the sidecar
//! stops, the work still running is dropped and reported as failed
//! `UNAVAILABLE`, within the time [`Tasks::shutdown`] is given.
//!
//! - `report`: the ReportTask RPC ([`Report`], [`RegistryReport`]), the
//!   end's retries, progress throttled to one report per 250 ms.
//! - `run`: one task from its start to its end delivered.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use toolmesh_proto::pb;
use toolmesh_telemetry::shown::Quoted;
use tracing::Instrument as _;

use crate::metrics::Metrics;
use crate::progress::Update;
use crate::runtime::ExecuteError;

mod report;
mod run;

pub(crate) use report::{RegistryReport, Report};

/// A task's work: the tool's run, to its answer or its failure.
pub(crate) type Work = BoxFuture<'static, Result<pb::ExecuteResponse, ExecuteError>>;

/// What the table knows of a task it is asked to start.
pub(crate) struct NewTask {
    /// The task's id (its call's invocation id).
    pub(crate) id: String,
    /// The tool it runs (one this sidecar serves).
    pub(crate) tool: String,
    /// Who started it.
    pub(crate) caller: String,
    /// The secret every report about it carries (never logged).
    pub(crate) report_token: Vec<u8>,
    /// The trace of the `RunTask` that started it.
    pub(crate) trace: toolmesh_telemetry::TraceContext,
}

impl std::fmt::Debug for NewTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewTask")
            .field("id", &self.id)
            .field("tool", &self.tool)
            .field("caller", &self.caller)
            .finish_non_exhaustive()
    }
}

/// Why a task was not started.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    /// The table holds a task of that id already.
    #[error("this instance already runs the task {}", Quoted(.0))]
    Duplicate(String),
    /// The table is full.
    #[error("this instance runs as many tasks as it may ({limit}, --max-tasks)")]
    Full {
        /// The table's bound.
        limit: usize,
    },
    /// The sidecar is stopping.
    #[error("this sidecar is stopping and starts no more tasks")]
    Closed,
}

impl StartError {
    /// The gRPC status RunTask answers.
    pub(crate) fn to_status(&self) -> tonic::Status {
        let message = self.to_string();
        match self {
            Self::Duplicate(_) => tonic::Status::already_exists(message),
            Self::Full { limit } => {
                let details = tonic_types::ErrorDetails::with_quota_failure_violation(
                    "tasks:instance",
                    format!("at most {limit} running tasks (--max-tasks)"),
                );
                <tonic::Status as tonic_types::StatusExt>::with_error_details(
                    tonic::Code::ResourceExhausted,
                    message,
                    details,
                )
            }
            Self::Closed => tonic::Status::unavailable(message),
        }
    }

    /// Whether the same task may start on another instance, or here later.
    pub(crate) fn is_retryable(&self) -> bool {
        match self {
            Self::Duplicate(_) => false,
            Self::Full { .. } | Self::Closed => true,
        }
    }
}

/// One task in the table.
struct Entry {
    /// Tells this entry from a later task of the same id.
    serial: u64,
    tool: String,
    caller: String,
    /// Drops the task's future: its work and its reports.
    abort: tokio::task::AbortHandle,
}

#[derive(Default)]
struct State {
    tasks: HashMap<String, Entry>,
    next_serial: u64,
    closed: bool,
}

/// What the table and its tasks share.
struct Shared {
    limit: usize,
    state: Mutex<State>,
    reporter: Arc<dyn Report>,
    metrics: Metrics,
    /// Cancelled when the sidecar stops: running work ends `UNAVAILABLE`.
    stopping: CancellationToken,
    /// Told each time a task leaves the table.
    left: Notify,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The task `id` of `serial` is over: it leaves the table (unless a
    /// stop took it out already).
    fn leave(&self, id: &str, serial: u64) {
        let mut state = self.state();
        if state
            .tasks
            .get(id)
            .is_some_and(|entry| entry.serial == serial)
        {
            state.tasks.remove(id);
        }
        drop(state);
        self.left.notify_waiters();
    }
}

/// The tasks this instance runs, at most `limit` at once.
pub(crate) struct Tasks {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Tasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tasks")
            .field("limit", &self.shared.limit)
            .field("running", &self.len())
            .finish_non_exhaustive()
    }
}

impl Tasks {
    /// A table of at most `limit` tasks (at least one), reporting through
    /// `reporter`, recorded in `metrics`.
    pub(crate) fn new(limit: usize, reporter: Arc<dyn Report>, metrics: Metrics) -> Self {
        Self {
            shared: Arc::new(Shared {
                limit: limit.max(1),
                state: Mutex::new(State::default()),
                reporter,
                metrics,
                stopping: CancellationToken::new(),
                left: Notify::new(),
            }),
        }
    }

    /// Tasks in the table: running, or with an end not yet delivered.
    pub(crate) fn len(&self) -> usize {
        self.shared.state().tasks.len()
    }

    /// Starts `task` running `work` (which reports its progress to
    /// `updates`' sender) on a tokio task of its own; refused if the table
    /// holds that task, is full, or the sidecar is stopping.
    pub(crate) fn start(
        &self,
        task: NewTask,
        work: Work,
        updates: watch::Receiver<Option<Update>>,
    ) -> Result<(), StartError> {
        let mut state = self.shared.state();
        if state.closed {
            return Err(StartError::Closed);
        }
        if state.tasks.contains_key(&task.id) {
            return Err(StartError::Duplicate(task.id));
        }
        if state.tasks.len() >= self.shared.limit {
            return Err(StartError::Full {
                limit: self.shared.limit,
            });
        }
        let serial = state.next_serial;
        state.next_serial += 1;
        let span = toolmesh_telemetry::call_span!(
            task.trace.is_traced(),
            "task",
            task = %Quoted(&task.id),
            tool = %task.tool
        );
        let running = self
            .shared
            .metrics
            .task_started(Arc::from(task.tool.as_str()));
        let entry = Entry {
            serial,
            tool: task.tool.clone(),
            caller: task.caller.clone(),
            abort: tokio::spawn(
                run::Run {
                    shared: self.shared.clone(),
                    id: task.id.clone(),
                    serial,
                    report_token: task.report_token,
                    trace: task.trace,
                    running,
                }
                .drive(work, updates)
                .instrument(span),
            )
            .abort_handle(),
        };
        state.tasks.insert(task.id, entry);
        Ok(())
    }

    /// Stops the task `id` if it is `tool`'s, started by `caller`: its work
    /// is dropped (which stops the backend) and it reports nothing more.
    /// Whether there was such a task.
    pub(crate) fn stop(&self, id: &str, tool: &str, caller: &str) -> bool {
        let mut state = self.shared.state();
        let Some(entry) = state.tasks.get(id) else {
            return false;
        };
        if entry.tool != tool || entry.caller != caller {
            tracing::warn!(task = %Quoted(id), tool = %Quoted(tool), "StopTask names another tool or caller than the task's; not stopped");
            return false;
        }
        if let Some(entry) = state.tasks.remove(id) {
            entry.abort.abort();
        }
        drop(state);
        self.shared.left.notify_waiters();
        true
    }

    /// Stops taking tasks and ends those running: their work is dropped
    /// and each reports failed `UNAVAILABLE`, for at most `within`; what is
    /// left then is dropped unreported.
    pub(crate) async fn shutdown(&self, within: Duration) {
        self.shared.state().closed = true;
        self.shared.stopping.cancel();
        let emptied = async {
            loop {
                let left = self.shared.left.notified();
                if self.len() == 0 {
                    return;
                }
                left.await;
            }
        };
        if tokio::time::timeout(within, emptied).await.is_err() {
            tracing::warn!(
                tasks = self.len(),
                ?within,
                "tasks whose end the registry did not take in time; dropped"
            );
        }
        self.abort_all();
    }

    /// Drops every task at once, unreported.
    pub(crate) fn abort_all(&self) {
        let mut state = self.shared.state();
        state.closed = true;
        for (_, entry) in state.tasks.drain() {
            entry.abort.abort();
        }
    }
}

/// Drops every task of the table when dropped: the sidecar's serving
/// ended, however it ended.
pub(crate) struct AbortOnDrop(pub(crate) Arc<Tasks>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort_all();
    }
}

#[cfg(test)]
pub(crate) mod recorder;
#[cfg(test)]
mod tests;
