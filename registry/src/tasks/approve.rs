//! Calls held for a person (docs/approvals.md): the hold, the decision, the
//! expiry.
//!
//! A call an approval rule holds goes through `Invoke`'s front door as any
//! other (validated, its idempotency key claimed, its rate limits' tokens
//! taken), then becomes a task in `input_required` with no instance, its
//! [`Approval`] bound to the call's digest. An approval is one
//! compare-and-set from `input_required` to `working`: the replica whose
//! write stands hands the call to an instance, once; every other decision
//! finds it closed. Before that write the call is checked again: the
//! tool's descriptor must be the one it was held under (else the approval
//! is void), its arguments must still pass, its rate limits must have a
//! token.

use std::time::Duration;

use serde_json::{Value, json};
use toolmesh_proto::{deadline::Deadline, pb};
use toolmesh_telemetry::TraceContext;

use super::{
    Sees, Tasks, Viewer,
    approval::{Approval, Verdict, call_digest},
    forgotten,
    model::{Outcome, Rerun, RunOn, State, Task, now_ms, report_digest},
    start::{HANDOVER_TIMEOUT, MAX_HANDOVERS, holder, millis},
    store::StoreError,
    store_error,
};
use crate::{
    access::{
        audit::ApprovalRecord,
        auth::{Caller, Policy, approval_rules::ApprovalRule},
    },
    calls::{
        idempotency::StoredOutcome,
        invoke::{Admission, Admitted, Call, Purpose},
    },
    catalog::{descriptor, versions},
    error::RegistryError,
};

/// A call an approval rule holds: the rule as it was when the call came.
pub(crate) struct Hold {
    rule: String,
    reason: String,
    approvers: crate::access::auth::approval_rules::Approvers,
    self_approval: bool,
    expires_after: Duration,
    webhook: Option<String>,
    reveal_arguments: bool,
}

impl Hold {
    fn of(rule: &ApprovalRule) -> Self {
        Self {
            rule: rule.name.clone(),
            reason: rule.reason.clone(),
            approvers: rule.approvers.clone(),
            self_approval: rule.self_approval,
            expires_after: rule.expires_after,
            webhook: rule.webhook.as_ref().map(ToString::to_string),
            reveal_arguments: rule.reveal_arguments,
        }
    }
}

/// What an approver decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decide {
    /// The call runs.
    Approve,
    /// The call fails with the comment.
    Deny,
}

impl Tasks {
    /// The rule of `policy` that holds `request` from `caller`, if any.
    /// Cheap when no rule may hold the tool: the arguments are parsed only
    /// for a rule with conditions.
    pub(crate) fn held_by(
        &self,
        policy: Option<&Policy>,
        caller: &Caller,
        request: &pb::InvokeRequest,
    ) -> Option<Hold> {
        let rules = policy?.approvals();
        if rules.is_empty() {
            return None;
        }
        let tool = self.invoker.catalog().get(&request.tool)?;
        let max = self.invoker.settings().max_arguments_bytes;
        rules
            .holding(caller, &tool.descriptor, || {
                if toolmesh_proto::rules::no_arguments(&request.arguments_json) {
                    Some(json!({}))
                } else if request.arguments_json.len() <= max {
                    serde_json::from_str(&request.arguments_json).ok()
                } else {
                    None
                }
            })
            .map(Hold::of)
    }

    /// Holds `request` for approval as `hold` says: through the front door
    /// as `purpose`, then a task in `input_required`. A repeated
    /// idempotency key gives the first call's task.
    pub(crate) async fn hold(
        &self,
        request: pb::InvokeRequest,
        call: Call<'_>,
        hold: Hold,
        purpose: Purpose,
    ) -> Result<Task, RegistryError> {
        let id = uuid::Uuid::new_v4().to_string();
        let mut log = self.invoker.call_log(&request, &call);
        let admitted = match self
            .invoker
            .admit(request, &call, id, &mut log, purpose)
            .await
        {
            Ok(Admission::Admitted(admitted)) => admitted,
            Ok(Admission::Replay(StoredOutcome::Task { id })) => {
                log.held(&id);
                return self.get(&id, call.caller).await;
            }
            Ok(Admission::Replay(_)) => {
                let error = RegistryError::InvalidRequest {
                    field: "idempotency_key".into(),
                    reason: "it was first used for a call that ran before the tool needed approval: use a new key".into(),
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
            ticket,
            ..
        } = admitted;
        let tool = entry.tool();
        let arguments: Value = serde_json::from_str(&execute.arguments_json).unwrap_or_default();
        let descriptor_digest = tool.digest.to_string();
        let (shown_arguments, redacted) = if hold.reveal_arguments {
            (execute.arguments_json.clone(), false)
        } else {
            let redactor = entry.redactor();
            let shown = crate::access::audit::redact::bounded(redactor.redact(&arguments));
            let cut = shown.get("truncated").is_some();
            (shown.to_string(), cut || redactor.redacts_anything())
        };
        let now = now_ms();
        let until_ms = now.saturating_add(millis(hold.expires_after));
        let approval = Approval {
            digest: call_digest(tool.name(), &descriptor_digest, &arguments, call.caller),
            rule: hold.rule,
            reason: hold.reason,
            approvers: hold.approvers,
            self_approval: hold.self_approval,
            until_ms,
            arguments_json: execute.arguments_json.clone(),
            shown_arguments,
            redacted,
            descriptor_digest,
            webhook: hold.webhook,
            decision: None,
        };
        let task = Task {
            id: execute.invocation_id.clone(),
            tool: tool.key().into_owned(),
            caller: call.caller.to_owned(),
            state: State::InputRequired,
            status_message: awaiting(&approval),
            created_ms: now,
            updated_ms: now,
            expires_ms: until_ms,
            retention_ms: millis(self.settings.retention),
            progress: None,
            revision: 1,
            outcome: None,
            holder: None,
            // No token reports a held call: none was given.
            report_digest: String::new(),
            rerun: tool.descriptor.idempotent.then(|| Rerun {
                arguments_json: execute.arguments_json.clone(),
                reruns: 0,
            }),
            approval: Some(approval),
        };
        if let Err(error) = self.create(&task).await {
            if let Some(ticket) = ticket {
                ticket.release().await;
            }
            log.refused(&error);
            return Err(error);
        }
        if let Some(ticket) = ticket {
            ticket
                .complete(StoredOutcome::Task {
                    id: task.id.clone(),
                })
                .await;
        }
        log.held(&task.id);
        let _ = self.changes.send(std::sync::Arc::from(task.id.as_str()));
        self.metrics.approval_requested(&task.tool);
        self.announce(&task, "requested");
        Ok(task)
    }

    /// `viewer`'s decision on approval `id`, bound to `digest` when it is
    /// not empty: the task after it. A denial ends the task; an approval
    /// runs the call once, as held.
    pub(crate) async fn decide(
        &self,
        id: &str,
        viewer: &Viewer,
        decide: Decide,
        comment: &str,
        digest: &str,
        trace: &TraceContext,
    ) -> Result<Task, RegistryError> {
        let task = self.approval(id, viewer).await?;
        let Some(approval) = task.approval.clone() else {
            return Err(RegistryError::TaskNotFound { id: id.to_owned() });
        };
        may_decide(&task, &approval, &viewer.caller)?;
        if !digest.is_empty() && digest != approval.digest {
            return Err(RegistryError::ApprovalDigestMismatch {
                id: id.to_owned(),
                digest: toolmesh_telemetry::shown::clip(digest, 80),
            });
        }
        if task.pending_approval().is_none() {
            return Err(closed(&task));
        }
        if now_ms() >= approval.until_ms {
            self.expire(&task).await;
            return Err(closed(&self.approval(id, viewer).await?));
        }
        let by = viewer.caller.id.as_str();
        match decide {
            Decide::Deny => {
                let denied = RegistryError::ApprovalDenied {
                    tool: task.tool.clone(),
                    by: by.to_owned(),
                    comment: if comment.is_empty() {
                        "no reason given".to_owned()
                    } else {
                        comment.to_owned()
                    },
                };
                self.close(&task, Verdict::Denied, by, comment, &denied)
                    .await
            }
            Decide::Approve => self.run_approved(task, approval, by, comment, trace).await,
        }
    }

    /// Approval `id` (pending or closed), if `viewer` is one of its
    /// approvers or may see its task.
    pub(crate) async fn approval(&self, id: &str, viewer: &Viewer) -> Result<Task, RegistryError> {
        let not_found = || RegistryError::TaskNotFound { id: id.to_owned() };
        let task = self
            .store
            .get(id)
            .await
            .map_err(store_error)?
            .filter(|t| !forgotten(t, now_ms()))
            .ok_or_else(not_found)?;
        let shown = task
            .approval
            .as_ref()
            .is_some_and(|a| a.approvers.include(&viewer.caller) || viewer.sees(&task));
        if shown { Ok(task) } else { Err(not_found()) }
    }

    /// Ends `task`'s approval as expired, if it still waits.
    pub(super) async fn expire(&self, task: &Task) {
        let Some(approval) = task.approval.as_ref() else {
            return;
        };
        let expired = RegistryError::ApprovalExpired {
            tool: task.tool.clone(),
            rule: approval.rule.clone(),
            approvers: approval.approvers.describe(),
            at_ms: approval.until_ms,
        };
        if let Err(error) = self.close(task, Verdict::Expired, "", "", &expired).await {
            tracing::debug!(%error, task = %task.id, "an expired approval closes on the next pass");
        }
    }

    /// Closes `task`'s approval as `verdict` (not an approval): the task
    /// fails with `error`. The task after it, or why it could not be closed.
    async fn close(
        &self,
        task: &Task,
        verdict: Verdict,
        by: &str,
        comment: &str,
        error: &RegistryError,
    ) -> Result<Task, RegistryError> {
        let outcome = Outcome::of_status(&error.to_status());
        let now = now_ms();
        let (after, changed) = self
            .change(&task.id, &move |t: &mut Task| {
                t.close_approval(verdict, by, comment, outcome.clone(), now)
            })
            .await?
            .ok_or_else(|| RegistryError::TaskNotFound {
                id: task.id.clone(),
            })?;
        if !changed {
            return Err(closed(&after));
        }
        self.decided(&after);
        Ok(after)
    }

    /// Runs an approved call: checked again, written as approved (the one
    /// decision that stands), handed to an instance.
    async fn run_approved(
        &self,
        task: Task,
        approval: Approval,
        by: &str,
        comment: &str,
        trace: &TraceContext,
    ) -> Result<Task, RegistryError> {
        let absent = || RegistryError::NoHealthyInstance {
            tool: task.tool.clone(),
            detail:
                "no live instance; the call still waits: approve it again once the tool is back"
                    .into(),
        };
        let entry = self
            .invoker
            .catalog()
            .entry(&task.tool)
            .ok_or_else(absent)?;
        let tool = entry.tool().clone();
        let live_digest = tool.digest.to_string();
        if live_digest != approval.descriptor_digest {
            let void = RegistryError::ApprovalVoid {
                tool: task.tool.clone(),
                why: format!(
                    "the tool's descriptor changed while the call waited (digest {} when held, {} now)",
                    short(&approval.descriptor_digest),
                    short(&live_digest)
                ),
            };
            self.close(&task, Verdict::Void, "", "", &void).await?;
            return Err(void);
        }
        let arguments: Value = serde_json::from_str(&approval.arguments_json).unwrap_or_default();
        if let Err(violations) = entry.validator()?.check(&arguments) {
            let void = RegistryError::ApprovalVoid {
                tool: task.tool.clone(),
                why: format!(
                    "the held arguments no longer pass the tool's schema ({} violations)",
                    violations.len()
                ),
            };
            self.close(&task, Verdict::Void, "", "", &void).await?;
            return Err(void);
        }
        // A refused token leaves the call waiting: approve it again later.
        self.invoker.take_token(&tool, &task.caller).await?;
        let (first, _) = self
            .balancer
            .pick(&tool.instances, &[])
            .ok_or_else(absent)?;
        let timeout =
            descriptor::task_timeout(&tool.descriptor, self.invoker.settings().default_timeout);
        let token: [u8; 32] = rand::random();
        let now = now_ms();
        let run_on = RunOn {
            holder: holder(&first),
            report_digest: report_digest(&token),
            expires_ms: now.saturating_add(millis(timeout)),
        };
        let (mut task, changed) = self
            .change(&task.id, &move |t: &mut Task| {
                t.approve(by, comment, run_on.clone(), now)
            })
            .await?
            .ok_or_else(|| RegistryError::TaskNotFound {
                id: task.id.clone(),
            })?;
        if !changed {
            return Err(closed(&task));
        }
        self.decided(&task);
        self.metrics.task_started(&task.tool);
        let run = pb::RunTaskRequest {
            call: Some(pb::ExecuteRequest {
                tool: versions::name_of(&task.tool).to_owned(),
                arguments_json: approval.arguments_json,
                invocation_id: task.id.clone(),
                caller: task.caller.clone(),
            }),
            timeout: toolmesh_proto::rules::duration_field(timeout),
            report_token: token.to_vec(),
        };
        let budget = Deadline::after(HANDOVER_TIMEOUT * u32::try_from(MAX_HANDOVERS).unwrap_or(1));
        let mut tried = Vec::new();
        let handed = self
            .hand_over(&tool, &mut task, &run, first, &mut tried, budget, trace)
            .await;
        if let Err(error) = handed {
            let outcome = Outcome::of_status(&error.to_status());
            let now = now_ms();
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
        match self.store.get(&task.id).await.map_err(store_error)? {
            Some(now) => Ok(now),
            None => Ok(task),
        }
    }

    /// Meters, audits and announces an approval just closed; a task it
    /// ended is recorded as ended too.
    fn decided(&self, task: &Task) {
        let Some(decision) = task.approval.as_ref().and_then(|a| a.decision.as_ref()) else {
            return;
        };
        let verdict = decision.verdict;
        let waited = Duration::from_millis(decision.at_ms.saturating_sub(task.created_ms));
        self.metrics
            .approval_decided(&task.tool, verdict.name(), waited);
        tracing::info!(
            task = %task.id,
            tool = %toolmesh_telemetry::shown::Quoted(&task.tool),
            decision = verdict.name(),
            by = %toolmesh_telemetry::shown::Quoted(&decision.by),
            waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            "approval closed"
        );
        self.announce(task, verdict.name());
        if task.state.is_terminal() {
            self.ended(
                task,
                match verdict {
                    Verdict::Denied => "deny",
                    Verdict::Expired => "expiry",
                    Verdict::Void | Verdict::Approved => "void",
                },
            );
        }
    }

    /// The audit record of `event` on `task`'s approval, and its webhook.
    fn announce(&self, task: &Task, event: &'static str) {
        let Some(approval) = task.approval.as_ref() else {
            return;
        };
        let decision = approval.decision.as_ref();
        let nonempty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        self.invoker.audit().record(ApprovalRecord {
            event,
            caller: task.caller.clone(),
            tool: task.tool.clone(),
            task: task.id.clone(),
            rule: approval.rule.clone(),
            digest: approval.digest.clone(),
            by: decision.and_then(|d| nonempty(&d.by)),
            comment: decision.and_then(|d| nonempty(&d.comment)),
            waited: Duration::from_millis(
                decision.map_or(0, |d| d.at_ms.saturating_sub(task.created_ms)),
            ),
        });
        let Some(url) = &approval.webhook else {
            return;
        };
        let remaining = Duration::from_millis(approval.until_ms.saturating_sub(now_ms()));
        // A decision's post gets a minute however close the expiry was.
        let until = tokio::time::Instant::now() + remaining.max(Duration::from_secs(60));
        self.webhooks
            .post(url, &super::webhook::body(task, approval, event), until);
    }

    /// Stores a new task within the live-task limits.
    pub(super) async fn create(&self, task: &Task) -> Result<(), RegistryError> {
        let limits = super::store::Limits {
            all: self.settings.max_live,
            per_caller: self.settings.max_live_per_caller,
        };
        self.store
            .create(task, limits)
            .await
            .map_err(|error| match error {
                StoreError::Full(super::store::Full::Caller) => RegistryError::TasksFull {
                    whose: "the caller",
                    limit: limits.per_caller,
                    flag: "max-tasks-per-caller",
                },
                StoreError::Full(super::store::Full::All) => RegistryError::TasksFull {
                    whose: "the registry",
                    limit: limits.all,
                    flag: "max-tasks",
                },
                other => store_error(other),
            })
    }
}

/// Whether `caller` may decide `task`'s `approval`: one of its approvers,
/// and not its own caller unless the rule allows it.
pub(super) fn may_decide(
    task: &Task,
    approval: &Approval,
    caller: &Caller,
) -> Result<(), RegistryError> {
    if !approval.approvers.include(caller) {
        return Err(RegistryError::PermissionDenied {
            reason: format!(
                "{} is not an approver of rule {}: {} decide it",
                toolmesh_telemetry::shown::Quoted(&caller.id),
                toolmesh_telemetry::shown::Quoted(&approval.rule),
                approval.approvers.describe()
            ),
        });
    }
    if caller.id == task.caller && !approval.self_approval {
        return Err(RegistryError::PermissionDenied {
            reason: format!(
                "a caller may not decide its own call: rule {} does not allow self_approval",
                toolmesh_telemetry::shown::Quoted(&approval.rule)
            ),
        });
    }
    Ok(())
}

/// The refusal of a decision on `task`, which is not pending.
fn closed(task: &Task) -> RegistryError {
    let decision = task.approval.as_ref().and_then(|a| a.decision.as_ref());
    RegistryError::ApprovalClosed {
        id: task.id.clone(),
        state: match (decision, task.state) {
            (Some(d), _) => d.verdict.name(),
            (None, State::Cancelled) => "cancelled",
            (None, _) => "closed",
        },
        by: decision.map(|d| d.by.clone()).unwrap_or_default(),
    }
}

/// A held task's status message.
pub(super) fn awaiting(approval: &Approval) -> String {
    let until = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(approval.until_ms),
    );
    let reason = if approval.reason.is_empty() {
        String::new()
    } else {
        format!(": {}", approval.reason)
    };
    format!(
        "awaits approval by {} until {until} (rule {}{reason})",
        approval.approvers.describe(),
        approval.rule
    )
}

/// The error a unary `Invoke` of a held call answers with, while it waits.
fn approval_required(task: &Task) -> RegistryError {
    let approval = task.approval.as_ref();
    RegistryError::ApprovalRequired(Box::new(crate::error::HeldCall {
        task: task.id.clone(),
        tool: task.tool.clone(),
        rule: approval.map(|a| a.rule.clone()).unwrap_or_default(),
        reason: approval.map(|a| a.reason.clone()).unwrap_or_default(),
        approvers: approval.map(|a| a.approvers.describe()).unwrap_or_default(),
        until_ms: approval.map_or(task.expires_ms, |a| a.until_ms),
    }))
}

/// What a unary `Invoke` of a held call answers: while the task waits (or
/// runs), [`approval_required`] naming it; once over (a repeat with the
/// first call's idempotency key), what the task ended with.
pub(crate) fn answer_of_held(task: &Task) -> Result<pb::InvokeResponse, tonic::Status> {
    use pb::task::Outcome as Wire;
    if !task.state.is_terminal() {
        return Err(approval_required(task).into());
    }
    match task.to_proto().outcome {
        Some(Wire::Response(response)) => Ok(response),
        Some(Wire::Error(error)) => Err(tonic::Status::with_details(
            tonic::Code::from_i32(error.code),
            error.message,
            error.details.into(),
        )),
        None => Err(approval_required(task).into()),
    }
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}
