//! Tasks: calls that outlive one request (docs/tasks.md).
//!
//! A task enters through `Invoke`'s front door ([`Invoker::admit`]), is
//! given to one instance's sidecar (`ToolRuntime.RunTask`), which runs it
//! with no request open and reports its progress and end to any replica
//! (`Registration.ReportTask`). Its state lives in a [`TaskStore`]: memory
//! when embedded, Redis when replicas share one, so that any replica
//! answers for it. The janitor ends the tasks whose instance left, or whose
//! timeout passed with no word from it.
//!
//! - `model`: the task and the only ways it changes.
//! - `store`: the engines.
//! - `start`: the front door, the instance, the hand-over.
//! - `janitor`: what no sidecar will report.
//! - `approval`, `approve`, `pending`, `webhook`: calls held for a person
//!   (docs/approvals.md): the approval a held task carries, its hold and
//!   decision, the approvers' listing, the rules' webhooks.
//! - `inbox`: those calls and the definitions the pins hold, as one
//!   `Approvals` service shows them.

pub(crate) mod approval;
pub(crate) mod model;
pub(crate) mod store;

mod approve;
mod inbox;
mod janitor;
mod pending;
mod start;
mod webhook;

use std::{sync::Arc, time::Duration};

use tokio::sync::broadcast;
use toolmesh_proto::{deadline::Deadline, pb};
use toolmesh_telemetry::TraceContext;

use crate::{
    access::{
        audit::{Outcome as AuditOutcome, TaskRecord},
        auth::{Caller, Policy},
        sees_task,
    },
    calls::{balance::Balancer, invoke::Invoker, proxy::Proxy},
    error::RegistryError,
    metrics::Metrics,
};
pub(crate) use approve::{Decide, answer_of_held};
use model::{Outcome, Progress, Task, now_ms};
use store::{Cursor, StoreError, TaskStore};

/// The limits and times of tasks.
#[derive(Debug, Clone)]
pub(crate) struct TaskSettings {
    /// How long a task is kept once over.
    pub retention: Duration,
    /// Most live tasks in all.
    pub max_live: usize,
    /// Most live tasks of one caller.
    pub max_live_per_caller: usize,
    /// How often a watch reads the store again for changes other replicas
    /// made (those this replica makes wake it at once).
    pub poll: Duration,
    /// How long the janitor waits, once a task's instance is missing from
    /// the catalog, before it fails the task (a replica's view of the
    /// catalog may lag another's by this much).
    pub orphan_grace: Duration,
}

impl Default for TaskSettings {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(3600),
            max_live: 1000,
            max_live_per_caller: 100,
            poll: Duration::from_millis(500),
            orphan_grace: Duration::from_secs(1),
        }
    }
}

/// Most tasks (or approvals) one page of a listing holds, and when the
/// request says none.
const MAX_PAGE: usize = 500;
const DEFAULT_PAGE: usize = 50;

/// The tasks of this registry.
pub(crate) struct Tasks {
    store: Arc<dyn TaskStore>,
    invoker: Arc<Invoker>,
    balancer: Arc<Balancer>,
    proxy: Arc<Proxy>,
    settings: TaskSettings,
    /// The id of every task this replica changes, for its watchers.
    changes: broadcast::Sender<Arc<str>>,
    orphans: janitor::Orphans,
    metrics: Arc<Metrics>,
    webhooks: webhook::Webhooks,
}

impl Tasks {
    /// Tasks in `store`, started through `invoker`'s front door and handed
    /// to instances `balancer` picks, over `proxy`.
    pub(crate) fn new(
        store: Arc<dyn TaskStore>,
        invoker: Arc<Invoker>,
        balancer: Arc<Balancer>,
        proxy: Arc<Proxy>,
        settings: TaskSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            store,
            invoker,
            balancer,
            proxy,
            settings,
            changes: broadcast::channel(1024).0,
            orphans: janitor::Orphans::default(),
            metrics,
            webhooks: webhook::Webhooks::start(),
        }
    }

    /// Task `id`, if `viewer` may see it (else, as for an unknown one,
    /// `TaskNotFound`).
    pub(crate) async fn get(
        &self,
        id: &str,
        viewer: &(impl Sees + ?Sized),
    ) -> Result<Task, RegistryError> {
        let task = self.store.get(id).await.map_err(store_error)?;
        task.filter(|t| viewer.sees(t) && !forgotten(t, now_ms()))
            .ok_or_else(|| RegistryError::TaskNotFound { id: id.to_owned() })
    }

    /// Cancels task `id`, if `viewer` may see it, and tells its instance to
    /// stop.
    pub(crate) async fn cancel(
        &self,
        id: &str,
        viewer: &(impl Sees + ?Sized),
        trace: &TraceContext,
    ) -> Result<Task, RegistryError> {
        self.get(id, viewer).await?;
        let now = now_ms();
        let (task, changed) = self
            .change(id, &move |t: &mut Task| t.cancel(now))
            .await?
            .ok_or_else(|| RegistryError::TaskNotFound { id: id.to_owned() })?;
        if changed {
            self.ended(&task, "cancel");
            self.stop_on_instance(&task, trace).await;
        }
        Ok(task)
    }

    /// A page of `caller`'s tasks, newest first.
    pub(crate) async fn list(
        &self,
        caller: &str,
        request: &pb::ListTasksRequest,
    ) -> Result<pb::ListTasksResponse, RegistryError> {
        let (size, after) = page(request.page_size, &request.page_token, "ListTasks")?;
        let now = now_ms();
        // One more than asked: whether there is a next page.
        let mut tasks = self
            .store
            .list(caller, after.as_ref(), size + 1)
            .await
            .map_err(store_error)?;
        tasks.retain(|t| !forgotten(t, now));
        let next_page_token = next_page(&mut tasks, size);
        Ok(pb::ListTasksResponse {
            tasks: tasks.iter().map(Task::to_proto).collect(),
            next_page_token,
        })
    }

    /// A sidecar's report on a task it runs: the task's state after it.
    pub(crate) async fn report(
        &self,
        request: pb::ReportTaskRequest,
    ) -> Result<pb::ReportTaskResponse, RegistryError> {
        use pb::report_task_request::Report;
        let id = request.task_id.as_str();
        let unknown = || RegistryError::TaskNotFound { id: id.to_owned() };
        let task = self
            .store
            .get(id)
            .await
            .map_err(store_error)?
            .ok_or_else(unknown)?;
        if !task.reported_by(&request.report_token) {
            return Err(RegistryError::TaskReportRefused { id: id.to_owned() });
        }
        let now = now_ms();
        let (task, changed) = match request.report {
            None => (task, false),
            Some(Report::Progress(progress)) => {
                let progress = Progress::from_report(&progress);
                self.change(id, &move |t: &mut Task| t.progress(progress.clone(), now))
                    .await?
                    .ok_or_else(unknown)?
            }
            Some(Report::Response(response)) => {
                let outcome = self.conformed(&task, response);
                self.change(id, &move |t: &mut Task| t.finish(outcome.clone(), now))
                    .await?
                    .ok_or_else(unknown)?
            }
            Some(Report::Error(error)) => {
                let outcome = Outcome::of_error(&error);
                self.change(id, &move |t: &mut Task| t.finish(outcome.clone(), now))
                    .await?
                    .ok_or_else(unknown)?
            }
        };
        if changed && task.state.is_terminal() {
            self.ended(&task, "instance");
        }
        Ok(pb::ReportTaskResponse {
            state: task.state.to_proto() as i32,
        })
    }

    /// Waits until task `id` (which `viewer` may see) has a revision past
    /// `seen`, or is over, or `deadline` passes: the task then (or `None`
    /// at the deadline).
    pub(crate) async fn next(
        &self,
        id: &str,
        viewer: &(impl Sees + ?Sized),
        seen: u64,
        deadline: Deadline,
    ) -> Result<Option<Task>, RegistryError> {
        let mut changes = self.changes.subscribe();
        loop {
            let task = self.get(id, viewer).await?;
            if task.revision > seen {
                return Ok(Some(task));
            }
            let poll = tokio::time::sleep(self.settings.poll);
            tokio::select! {
                () = tokio::time::sleep_until(deadline.at()) => return Ok(None),
                () = poll => {}
                changed = wait_for(&mut changes, id) => changed,
            }
        }
    }

    /// Every id of a task this replica changes, from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.changes.subscribe()
    }

    /// How often a watch reads the store again for other replicas' changes.
    pub(crate) fn poll_interval(&self) -> Duration {
        self.settings.poll
    }

    /// A response's outcome, checked against the tool's output schema as
    /// `Invoke` checks it (when the tool is still in the catalog).
    fn conformed(&self, task: &Task, response: pb::ExecuteResponse) -> Outcome {
        let instance_id = task
            .holder
            .as_ref()
            .map(|h| h.instance.clone())
            .unwrap_or_default();
        let mut answer = pb::InvokeResponse {
            result_json: response.result_json,
            is_error: response.is_error,
            instance_id,
            attempts: 1,
            content_json: response.content_json,
            version: String::new(),
            deprecation: String::new(),
        };
        if let Some(entry) = self.invoker.catalog().entry(&task.tool) {
            answer = self.invoker.conformed(&entry, answer);
        }
        Outcome::Response {
            result_json: answer.result_json,
            is_error: answer.is_error,
            instance_id: answer.instance_id,
            content_json: answer.content_json,
        }
    }

    /// Applies `change` to task `id`, telling this replica's watchers.
    async fn change(
        &self,
        id: &str,
        change: store::Change<'_>,
    ) -> Result<Option<(Task, bool)>, RegistryError> {
        let changed = self.store.update(id, change).await.map_err(store_error)?;
        if let Some((_, true)) = &changed {
            let _ = self.changes.send(Arc::from(id));
        }
        Ok(changed)
    }

    /// Logs, meters and audits a task that ended; `by` says what ended it
    /// (`instance`, `cancel`, `janitor`, `start`; for a held call `deny`,
    /// `expiry`, `void`).
    fn ended(&self, task: &Task, by: &'static str) {
        let outcome = match &task.outcome {
            Some(Outcome::Response { is_error: true, .. }) => AuditOutcome::ToolError,
            Some(Outcome::Response { .. }) => AuditOutcome::Ok,
            Some(outcome) => AuditOutcome::Failed(outcome.code().unwrap_or(tonic::Code::Unknown)),
            None => AuditOutcome::Failed(tonic::Code::Cancelled),
        };
        let ran = Duration::from_millis(task.updated_ms.saturating_sub(task.created_ms));
        self.metrics.task_ended(&task.tool, task.state.name(), ran);
        tracing::info!(
            target: crate::calls::call_log::TARGET,
            parent: None,
            tool = toolmesh_telemetry::shown::clip(&task.tool, toolmesh_telemetry::shown::QUOTED_MAX).as_str(),
            task = task.id.as_str(),
            state = task.state.name(),
            outcome = outcome.as_str(),
            ended_by = by,
            duration_ms = u64::try_from(ran.as_millis()).unwrap_or(u64::MAX),
            "task ended"
        );
        self.invoker.audit().record(TaskRecord {
            caller: task.caller.clone(),
            tool: task.tool.clone(),
            task: task.id.clone(),
            instance: task.holder.as_ref().map(|h| h.instance.clone()),
            state: task.state.name(),
            outcome,
            ended_by: by,
            duration: ran,
        });
    }
}

/// Which tasks a caller may see and cancel.
pub(crate) trait Sees: Sync {
    /// Whether `task` is one of them.
    fn sees(&self, task: &Task) -> bool;
}

/// A caller id sees its own tasks.
impl Sees for str {
    fn sees(&self, task: &Task) -> bool {
        task.caller == self
    }
}

/// An authenticated caller, under the call policy in force: its own tasks,
/// and those of others the policy's `tasks_of` gives it.
#[derive(Clone)]
pub(crate) struct Viewer {
    /// Who asks.
    pub caller: Caller,
    /// The policy in force when it asked.
    pub policy: Option<Arc<Policy>>,
}

impl Sees for Viewer {
    fn sees(&self, task: &Task) -> bool {
        sees_task(
            self.policy.as_deref(),
            &self.caller,
            &task.caller,
            &task.tool,
        )
    }
}

/// A listing's page size (0: [`DEFAULT_PAGE`], at most [`MAX_PAGE`]) and
/// where it resumes, from its request; `rpc` names the RPC whose tokens
/// these are.
pub(crate) fn page(
    page_size: u32,
    token: &str,
    rpc: &str,
) -> Result<(usize, Option<Cursor>), RegistryError> {
    let size = match usize::try_from(page_size).unwrap_or(MAX_PAGE) {
        0 => DEFAULT_PAGE,
        n => n.min(MAX_PAGE),
    };
    let after = match token {
        "" => None,
        token => Some(
            Cursor::parse(token).ok_or_else(|| RegistryError::InvalidRequest {
                field: "page_token".into(),
                reason: format!("not a token {rpc} gave"),
            })?,
        ),
    };
    Ok((size, after))
}

/// Cuts `tasks` (fetched one longer than `size`) to the page: the token of
/// the next page, empty on the last.
fn next_page(tasks: &mut Vec<Task>, size: usize) -> String {
    if tasks.len() <= size {
        return String::new();
    }
    tasks.truncate(size);
    tasks
        .last()
        .map(|t| Cursor::after(t).token())
        .unwrap_or_default()
}

/// Whether `task` is past its retention (an engine may not have dropped it
/// yet).
fn forgotten(task: &Task, now_ms: u64) -> bool {
    task.state.is_terminal() && task.expires_ms <= now_ms
}

/// Completes when task `id` changes on this replica (or changes were missed).
async fn wait_for(changes: &mut broadcast::Receiver<Arc<str>>, id: &str) {
    loop {
        match changes.recv().await {
            Ok(changed) if &*changed == id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

fn store_error(error: StoreError) -> RegistryError {
    match error {
        StoreError::Unavailable(reason) => RegistryError::StoreUnavailable { reason },
        // Ids are random: a clash is the store's fault, not the caller's.
        StoreError::Exists => RegistryError::StoreUnavailable {
            reason: "a task id was already taken".into(),
        },
        StoreError::Full(_) => RegistryError::StoreUnavailable {
            reason: "the task store is full".into(),
        },
    }
}
