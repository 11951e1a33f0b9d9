//! A task's start: `Invoke`'s front door, then the hand-over to one
//! instance (`ToolRuntime.RunTask`), and the stop sent when it is cancelled.
//!
//! An instance that answers RunTask with a status did not start the task:
//! another is tried (at most [`MAX_HANDOVERS`]). One whose answer is lost
//! (the connection broke, the time ran out) may have started it: the task
//! stays with it, at most once, until it reports, leaves the catalog, or
//! the task's timeout passes.

use std::time::Duration;

use toolmesh_proto::{
    deadline::Deadline,
    grant::{self, ArgumentsDigest},
    pb,
};
use toolmesh_telemetry::TraceContext;

use super::{
    Tasks,
    model::{Holder, Outcome, Rerun, State, Task, now_ms, report_digest},
};
use crate::{
    calls::{
        idempotency::StoredOutcome,
        invoke::{Admission, Admitted, Call, Purpose},
        proxy::ProxyError,
    },
    catalog::{ToolState, descriptor, versions},
    error::RegistryError,
};

/// What became of a task whose instance was lost.
pub(super) enum Moved {
    /// It cannot run elsewhere (its tool is not idempotent, it moved too
    /// often, its time is up, no other instance is live): it fails.
    Not,
    /// Another instance took it.
    To(String),
    /// Another replica moved or ended it first, or the store could not
    /// say: nothing to do this pass.
    Elsewhere,
    /// No other instance took it: it fails with this.
    Refused(RegistryError),
}

/// Most instances a task is offered to.
pub(super) const MAX_HANDOVERS: usize = 3;
/// Most times a task of an idempotent tool is given to another instance
/// after its own was lost.
const MAX_RERUNS: u32 = 2;
/// Longest a RunTask or StopTask may take.
pub(super) const HANDOVER_TIMEOUT: Duration = Duration::from_secs(5);
const RUN_TASK: &str = "/toolmesh.v1.ToolRuntime/RunTask";
const STOP_TASK: &str = "/toolmesh.v1.ToolRuntime/StopTask";

impl Tasks {
    /// Starts `request` as a task for the caller `call` names: refused as
    /// `Invoke` would refuse it; a repeated idempotency key gives the
    /// first call's task.
    pub(crate) async fn start(
        &self,
        request: pb::InvokeRequest,
        call: Call<'_>,
    ) -> Result<Task, RegistryError> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut log = self.invoker.call_log(&request, &call);
        let admitted = match self
            .invoker
            .admit(request, &call, id, &mut log, Purpose::Task)
            .await
        {
            Ok(Admission::Admitted(admitted)) => admitted,
            Ok(Admission::Replay(StoredOutcome::Task { id })) => {
                log.started_task(&id, None);
                return self.get(&id, call.caller).await;
            }
            Ok(Admission::Replay(_)) => {
                let error = RegistryError::StoreUnavailable {
                    reason: "the idempotency key holds a call, not a task".into(),
                };
                log.refused(&error);
                return Err(error);
            }
            Err(error) => {
                log.refused(&error);
                return Err(error);
            }
        };
        let Admitted {
            entry,
            execute,
            deadline,
            ticket,
        } = admitted;
        let tool = entry.tool().clone();
        let timeout =
            descriptor::task_timeout(&tool.descriptor, self.invoker.settings().default_timeout);
        let token: [u8; 32] = rand::random();
        let now = now_ms();
        let mut task = Task {
            id: execute.invocation_id.clone(),
            tool: tool.key().into_owned(),
            caller: call.caller.to_owned(),
            state: State::Working,
            status_message: String::new(),
            created_ms: now,
            updated_ms: now,
            expires_ms: now.saturating_add(millis(timeout)),
            retention_ms: millis(self.settings.retention),
            progress: None,
            revision: 1,
            outcome: None,
            holder: None,
            report_digest: report_digest(&token),
            rerun: tool.descriptor.idempotent.then(|| Rerun {
                arguments_json: execute.arguments_json.clone(),
                reruns: 0,
            }),
            approval: None,
        };
        let mut tried = Vec::new();
        let Some((first, _)) = self.balancer.pick(&tool.instances, &tried) else {
            let error = RegistryError::NoHealthyInstance {
                tool: task.tool.clone(),
                detail: "no live instance".into(),
            };
            if let Some(ticket) = ticket {
                ticket.release().await;
            }
            log.refused(&error);
            return Err(error);
        };
        task.holder = Some(holder(&first));
        if let Err(error) = self.create(&task).await {
            if let Some(ticket) = ticket {
                ticket.release().await;
            }
            log.refused(&error);
            return Err(error);
        }
        self.metrics.task_started(&task.tool);
        let run = pb::RunTaskRequest {
            call: Some(execute),
            timeout: toolmesh_proto::rules::duration_field(timeout),
            report_token: token.to_vec(),
        };
        // RunTask is a child of the start's span.
        let onward = call.trace.onward(&tracing::Span::current());
        let handed = self
            .hand_over(&tool, &mut task, &run, first, &mut tried, deadline, &onward)
            .await;
        if let Some(ticket) = ticket {
            ticket
                .complete(StoredOutcome::Task {
                    id: task.id.clone(),
                })
                .await;
        }
        match handed {
            Ok(instance) => log.started_task(&task.id, Some(&instance)),
            Err(error) => {
                log.refused(&error);
                let now = now_ms();
                let outcome = Outcome::of_status(&error.to_status());
                if let Some((ended, true)) = self
                    .change(&task.id, &move |t: &mut Task| {
                        t.finish(outcome.clone(), now)
                    })
                    .await?
                {
                    self.ended(&ended, "start");
                    return Ok(ended);
                }
            }
        }
        self.get(&task.id, call.caller).await
    }

    /// Offers `run` to `first`, then to other instances while each refuses:
    /// the instance that took it (or may have), or why none did.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn hand_over(
        &self,
        tool: &ToolState,
        task: &mut Task,
        run: &pb::RunTaskRequest,
        first: std::sync::Arc<crate::catalog::store::model::Instance>,
        tried: &mut Vec<String>,
        deadline: Deadline,
        trace: &TraceContext,
    ) -> Result<String, RegistryError> {
        let call = run.call.as_ref().cloned().unwrap_or_default();
        let arguments = ArgumentsDigest::of(&call.arguments_json);
        let mut instance = first;
        loop {
            tried.push(instance.id.clone());
            let grant = instance.execute_key.as_ref().map(|key| {
                grant::Call {
                    instance: &instance.id,
                    invocation: &call.invocation_id,
                    tool: &call.tool,
                    caller: &call.caller,
                    arguments,
                }
                .grant(key, rand::random())
            });
            let budget = deadline.limited(HANDOVER_TIMEOUT);
            let answer: Result<pb::RunTaskResponse, ProxyError> = self
                .proxy
                .unary(&instance.endpoint, RUN_TASK, run, grant, budget, trace)
                .await;
            let error = match answer {
                Ok(_) => {
                    self.balancer.record_success(&instance.id);
                    return Ok(instance.id.clone());
                }
                // It may have started: the task stays with it.
                Err(ProxyError::Transport(_) | ProxyError::Timeout) => {
                    return Ok(instance.id.clone());
                }
                Err(error) => error,
            };
            error.log(&task.tool, &instance.id);
            let refusal = error.into_error(&task.tool, &instance.id, &budget);
            let next = (tried.len() < MAX_HANDOVERS && !budget.has_passed())
                .then(|| self.balancer.pick(&tool.instances, tried))
                .flatten();
            let Some((next, _)) = next else {
                return Err(refusal);
            };
            let holder = holder(&next);
            let now = now_ms();
            let moved = self
                .change(&task.id, &move |t: &mut Task| {
                    t.hand_to(holder.clone(), now)
                })
                .await?;
            match moved {
                Some((after, true)) => *task = after,
                _ => return Err(refusal),
            }
            instance = next;
        }
    }

    /// Runs `task` again on another instance after its own was lost, if
    /// its tool is idempotent and it was not moved too often already.
    pub(super) async fn rerun(&self, task: &Task) -> Moved {
        self.try_rerun(task).await.unwrap_or(Moved::Not)
    }

    /// [`Self::rerun`]; `None` when the task cannot run elsewhere.
    async fn try_rerun(&self, task: &Task) -> Option<Moved> {
        let rerun = task.rerun.as_ref().filter(|r| r.reruns < MAX_RERUNS)?;
        let lost = task.holder.as_ref()?.instance.clone();
        let tool = self.invoker.catalog().get(&task.tool)?;
        let now = now_ms();
        let remaining = task.expires_ms.checked_sub(now).filter(|ms| *ms > 0)?;
        let mut tried = vec![lost.clone()];
        let (next, _) = self.balancer.pick(&tool.instances, &tried)?;
        let token: [u8; 32] = rand::random();
        let (to, digest) = (holder(&next), report_digest(&token));
        let moved = self
            .change(&task.id, &move |t: &mut Task| {
                t.rerun_on(&lost, to.clone(), digest.clone(), now)
            })
            .await;
        let mut moved = match moved {
            Ok(Some((moved, true))) => moved,
            Ok(_) => return Some(Moved::Elsewhere),
            Err(error) => {
                tracing::debug!(%error, task = %task.id, "the lost instance's task stays until the next pass");
                return Some(Moved::Elsewhere);
            }
        };
        let run = pb::RunTaskRequest {
            call: Some(pb::ExecuteRequest {
                tool: versions::name_of(&task.tool).to_owned(),
                arguments_json: rerun.arguments_json.clone(),
                invocation_id: task.id.clone(),
                caller: task.caller.clone(),
            }),
            timeout: toolmesh_proto::rules::duration_field(Duration::from_millis(remaining)),
            report_token: token.to_vec(),
        };
        let budget = Deadline::after(HANDOVER_TIMEOUT * u32::try_from(MAX_HANDOVERS).unwrap_or(1));
        let trace = TraceContext::default();
        Some(
            match self
                .hand_over(&tool, &mut moved, &run, next, &mut tried, budget, &trace)
                .await
            {
                Ok(instance) => Moved::To(instance),
                Err(refusal) => Moved::Refused(refusal),
            },
        )
    }

    /// Tells the instance that holds `task` to stop it, best effort: the
    /// task is cancelled whatever it answers.
    pub(super) async fn stop_on_instance(&self, task: &Task, trace: &TraceContext) {
        let Some(holder) = &task.holder else {
            return;
        };
        let instance = self.invoker.catalog().get(&task.tool).and_then(|tool| {
            tool.instances
                .iter()
                .find(|i| i.id == holder.instance)
                .cloned()
        });
        let key = instance.as_ref().and_then(|i| i.execute_key.clone());
        let stop_tool = format!("stop {}", versions::name_of(&task.tool));
        let grant = key.map(|key| {
            grant::Call {
                instance: &holder.instance,
                invocation: &task.id,
                tool: &stop_tool,
                caller: &task.caller,
                arguments: ArgumentsDigest::of(""),
            }
            .grant(&key, rand::random())
        });
        let stop = pb::StopTaskRequest {
            task_id: task.id.clone(),
            tool: versions::name_of(&task.tool).to_owned(),
            caller: task.caller.clone(),
        };
        let answer: Result<pb::StopTaskResponse, ProxyError> = self
            .proxy
            .unary(
                &holder.endpoint,
                STOP_TASK,
                &stop,
                grant,
                Deadline::after(HANDOVER_TIMEOUT),
                trace,
            )
            .await;
        if let Err(error) = answer {
            tracing::warn!(
                task = %task.id,
                instance = %holder.instance,
                %error,
                "the instance was not told to stop the cancelled task; it stops when its report hears so"
            );
        }
    }
}

pub(super) fn holder(instance: &crate::catalog::store::model::Instance) -> Holder {
    Holder {
        instance: instance.id.clone(),
        endpoint: instance.endpoint.clone(),
        key_tag: Holder::key_tag(instance.execute_key.as_ref()),
    }
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
