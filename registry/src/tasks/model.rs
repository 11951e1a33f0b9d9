//! A task as every engine stores it, and the only ways it may change:
//! [`Task::hand_to`], [`Task::progress`], [`Task::finish`], [`Task::cancel`]. Each returns
//! whether it changed the task (a task that is over never changes again),
//! and each change bumps the revision, so that a store can write it by
//! compare-and-set.

use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use toolmesh_proto::pb;

use super::approval::{Approval, Verdict};
use crate::calls::idempotency::hex;

/// Where a task is (MCP's task states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum State {
    /// The call runs on its instance.
    Working,
    /// The call waits for input before it can run on.
    InputRequired,
    /// The tool answered.
    Completed,
    /// The call failed.
    Failed,
    /// Its caller cancelled it.
    Cancelled,
}

impl State {
    /// Whether the task is over: it never changes again.
    pub(crate) fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }

    /// The wire form.
    pub(crate) fn to_proto(self) -> pb::TaskState {
        match self {
            Self::Working => pb::TaskState::Working,
            Self::InputRequired => pb::TaskState::InputRequired,
            Self::Completed => pb::TaskState::Completed,
            Self::Failed => pb::TaskState::Failed,
            Self::Cancelled => pb::TaskState::Cancelled,
        }
    }

    /// How metrics and logs name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }
}

/// How far a task has come, as its tool says.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Progress {
    /// Done so far, in `0..=1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f64>,
    /// What the tool is doing.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Longest progress message kept, in bytes.
pub(crate) const MAX_PROGRESS_MESSAGE: usize = 1024;

impl Progress {
    /// A sidecar's report, bounded: the fraction clamped to `0..=1` (or
    /// dropped when not a number), the message cut at a character
    /// boundary within [`MAX_PROGRESS_MESSAGE`].
    pub(crate) fn from_report(report: &pb::TaskProgress) -> Self {
        let fraction = report
            .fraction
            .filter(|f| f.is_finite())
            .map(|f| f.clamp(0.0, 1.0));
        let mut end = report.message.len().min(MAX_PROGRESS_MESSAGE);
        while !report.message.is_char_boundary(end) {
            end -= 1;
        }
        Self {
            fraction,
            message: report.message[..end].to_owned(),
        }
    }
}

/// How a task ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    /// The tool answered: what `Invoke` would have answered.
    Response {
        /// `InvokeResponse.result_json`.
        result_json: String,
        /// `InvokeResponse.is_error`.
        #[serde(default)]
        is_error: bool,
        /// The instance that ran it.
        instance_id: String,
        /// `InvokeResponse.content_json`.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        content_json: String,
    },
    /// The call failed with this status.
    Error {
        /// The gRPC code, as its number.
        code: i32,
        /// The status message.
        message: String,
        /// The encoded `google.rpc.Status` details, in base64.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        details: String,
    },
}

impl Outcome {
    /// The failure `status` is.
    pub(crate) fn of_status(status: &tonic::Status) -> Self {
        Self::Error {
            code: status.code() as i32,
            message: status.message().to_owned(),
            details: BASE64.encode(status.details()),
        }
    }

    /// A failure reported on the wire.
    pub(crate) fn of_error(error: &pb::TaskError) -> Self {
        Self::Error {
            code: error.code,
            message: error.message.clone(),
            details: BASE64.encode(&error.details),
        }
    }

    /// About how many bytes it holds.
    pub(crate) fn size(&self) -> usize {
        match self {
            Self::Response {
                result_json,
                instance_id,
                content_json,
                ..
            } => result_json.len() + instance_id.len() + content_json.len(),
            Self::Error {
                message, details, ..
            } => message.len() + details.len(),
        }
    }

    /// The gRPC code of a failure; `None` for a response.
    pub(crate) fn code(&self) -> Option<tonic::Code> {
        match self {
            Self::Response { .. } => None,
            Self::Error { code, .. } => Some(tonic::Code::from_i32(*code)),
        }
    }
}

/// The instance a task was given to, as the catalog knew it then.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Holder {
    /// Its instance id.
    pub instance: String,
    /// Where its `ToolRuntime` answers.
    pub endpoint: String,
    /// A digest of the execute key it announced (each sidecar process
    /// makes a new one): a different key under the same id is a sidecar
    /// that restarted, and lost the task.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key_tag: String,
}

impl Holder {
    /// The tag of `key`: the first 8 bytes of its SHA-256, as hex.
    pub(crate) fn key_tag(key: Option<&toolmesh_proto::grant::CallKey>) -> String {
        key.map(|key| hex(&Sha256::digest(key.as_bytes())[..8]))
            .unwrap_or_default()
    }
}

/// A call that outlives one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Task {
    /// Unguessable; the call's invocation id.
    pub id: String,
    /// The tool called.
    pub tool: String,
    /// Who started it.
    pub caller: String,
    /// Where it is.
    pub state: State,
    /// Why it is there, in words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status_message: String,
    /// Unix milliseconds.
    pub created_ms: u64,
    /// Unix milliseconds.
    pub updated_ms: u64,
    /// While it runs, when its timeout ends it; once over, when it is
    /// forgotten (Unix milliseconds).
    pub expires_ms: u64,
    /// How long it is kept once over.
    pub retention_ms: u64,
    /// The last progress reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Bumped by every change.
    pub revision: u64,
    /// How it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Who runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// The SHA-256 (hex) of the report token its holder was given.
    pub report_digest: String,
    /// What running it again on another instance takes: kept only for an
    /// idempotent tool, whose task may be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<Rerun>,
    /// For a call held for approval: what it waits for, and its decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// A task's call, kept so that another instance can run it when its own
/// is lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Rerun {
    /// The call's arguments, as validated at its start.
    pub arguments_json: String,
    /// How many times it was given to another instance after one was lost.
    #[serde(default)]
    pub reruns: u32,
}

impl Task {
    pub(super) fn changed(&mut self, now_ms: u64) {
        self.revision += 1;
        self.updated_ms = now_ms.max(self.updated_ms);
    }

    /// Records `progress`, if the task still runs.
    pub(crate) fn progress(&mut self, progress: Progress, now_ms: u64) -> bool {
        if self.state.is_terminal() || self.progress.as_ref() == Some(&progress) {
            return false;
        }
        self.progress = Some(progress);
        self.changed(now_ms);
        true
    }

    /// Gives the task to `holder` (its first instance refused it), if it
    /// still runs.
    pub(crate) fn hand_to(&mut self, holder: Holder, now_ms: u64) -> bool {
        if self.state != State::Working {
            return false;
        }
        self.holder = Some(holder);
        self.changed(now_ms);
        true
    }

    /// Gives the task to `holder` with a new report token's `digest`, after
    /// its instance `from` was lost: only a working task of an idempotent
    /// tool, still held by `from` (another replica may have moved it).
    pub(crate) fn rerun_on(
        &mut self,
        from: &str,
        holder: Holder,
        digest: String,
        now_ms: u64,
    ) -> bool {
        let held_by_from = self.holder.as_ref().is_some_and(|h| h.instance == from);
        let Some(rerun) = self.rerun.as_mut().filter(|_| held_by_from) else {
            return false;
        };
        if self.state != State::Working {
            return false;
        }
        rerun.reruns += 1;
        self.holder = Some(holder);
        self.report_digest = digest;
        self.progress = None;
        self.changed(now_ms);
        true
    }

    /// Ends the task with `outcome`, unless it is over: `Completed` for a
    /// response, else `Failed`; kept for its retention from now.
    pub(crate) fn finish(&mut self, outcome: Outcome, now_ms: u64) -> bool {
        let state = match outcome {
            Outcome::Response { .. } => State::Completed,
            Outcome::Error { .. } => State::Failed,
        };
        self.end(state, outcome, now_ms)
    }

    /// Cancels the task, unless it is over.
    pub(crate) fn cancel(&mut self, now_ms: u64) -> bool {
        let status = tonic::Status::cancelled("the task was cancelled by its caller");
        self.end(State::Cancelled, Outcome::of_status(&status), now_ms)
    }

    fn end(&mut self, state: State, outcome: Outcome, now_ms: u64) -> bool {
        if self.state.is_terminal() {
            return false;
        }
        self.state = state;
        self.status_message.clear();
        self.outcome = Some(outcome);
        self.expires_ms = now_ms.saturating_add(self.retention_ms);
        self.changed(now_ms);
        true
    }

    /// Whether `token` is the one its holder was given.
    pub(crate) fn reported_by(&self, token: &[u8]) -> bool {
        let digest = report_digest(token);
        // Both are hex of a digest of a secret: no timing to learn.
        digest == self.report_digest
    }

    /// About how many bytes it holds.
    pub(crate) fn size(&self) -> usize {
        256 + self.id.len()
            + self.tool.len()
            + self.caller.len()
            + self.status_message.len()
            + self.progress.as_ref().map_or(0, |p| p.message.len())
            + self.outcome.as_ref().map_or(0, Outcome::size)
            + self.rerun.as_ref().map_or(0, |r| r.arguments_json.len())
            + self.approval.as_ref().map_or(0, |a| {
                512 + a.arguments_json.len() + a.shown_arguments.len() + a.reason.len()
            })
    }

    /// The wire form.
    pub(crate) fn to_proto(&self) -> pb::Task {
        use pb::task::Outcome as Wire;
        let outcome = self.outcome.as_ref().map(|outcome| match outcome {
            Outcome::Response {
                result_json,
                is_error,
                instance_id,
                content_json,
            } => Wire::Response(pb::InvokeResponse {
                result_json: result_json.clone(),
                is_error: *is_error,
                instance_id: instance_id.clone(),
                attempts: 1,
                content_json: content_json.clone(),
                version: String::new(),
                deprecation: String::new(),
            }),
            Outcome::Error {
                code,
                message,
                details,
            } => Wire::Error(pb::TaskError {
                code: *code,
                message: message.clone(),
                details: BASE64.decode(details).unwrap_or_default(),
            }),
        });
        pb::Task {
            id: self.id.clone(),
            tool: self.tool.clone(),
            caller: self.caller.clone(),
            state: self.state.to_proto() as i32,
            status_message: self.status_message.clone(),
            created_at: Some(timestamp(self.created_ms)),
            updated_at: Some(timestamp(self.updated_ms)),
            expires_at: Some(timestamp(self.expires_ms)),
            progress: self.progress.as_ref().map(|p| pb::TaskProgress {
                fraction: p.fraction,
                message: p.message.clone(),
            }),
            revision: self.revision,
            outcome,
        }
    }
}

/// The SHA-256 (hex) of a report token.
pub(crate) fn report_digest(token: &[u8]) -> String {
    hex(&Sha256::digest(token))
}

/// Unix milliseconds as a protobuf timestamp.
pub(crate) fn timestamp(ms: u64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
        // Below 1e9: always fits.
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
    }
}

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    toolmesh_proto::grant::now_ms()
}

/// Where an approved call runs: its instance, its new report token's
/// digest, when its timeout ends it.
#[derive(Clone)]
pub(crate) struct RunOn {
    /// The instance.
    pub holder: Holder,
    /// The SHA-256 (hex) of the report token it is given.
    pub report_digest: String,
    /// When its timeout ends (Unix ms).
    pub expires_ms: u64,
}

impl Task {
    /// The approval, while it waits for a decision.
    pub(crate) fn pending_approval(&self) -> Option<&Approval> {
        self.approval
            .as_ref()
            .filter(|a| self.state == State::InputRequired && a.decision.is_none())
    }

    /// Approves the held call, if it still waits and has not expired at
    /// `now_ms`: it goes to work on `run`'s instance.
    pub(crate) fn approve(&mut self, by: &str, comment: &str, run: RunOn, now_ms: u64) -> bool {
        let Some(approval) = self
            .approval
            .as_mut()
            .filter(|_| self.state == State::InputRequired)
        else {
            return false;
        };
        if approval.decision.is_some() || now_ms >= approval.until_ms {
            return false;
        }
        approval.decide(Verdict::Approved, by, comment, now_ms);
        self.state = State::Working;
        self.status_message.clear();
        self.holder = Some(run.holder);
        self.report_digest = run.report_digest;
        self.expires_ms = run.expires_ms;
        self.changed(now_ms);
        true
    }

    /// Closes the held call's approval as `verdict` (not `Approved`), if it
    /// still waits: the task fails with `outcome`.
    pub(crate) fn close_approval(
        &mut self,
        verdict: Verdict,
        by: &str,
        comment: &str,
        outcome: Outcome,
        now_ms: u64,
    ) -> bool {
        if verdict == Verdict::Approved || self.pending_approval().is_none() {
            return false;
        }
        if let Some(approval) = self.approval.as_mut() {
            approval.decide(verdict, by, comment, now_ms);
        }
        self.finish(outcome, now_ms)
    }

    /// The approval's wire form, with its state.
    pub(crate) fn approval_to_proto(&self) -> Option<pb::Approval> {
        let approval = self.approval.as_ref()?;
        let state = match (&approval.decision, self.state) {
            (Some(d), _) => match d.verdict {
                Verdict::Approved => pb::ApprovalState::Approved,
                Verdict::Denied => pb::ApprovalState::Denied,
                Verdict::Expired => pb::ApprovalState::Expired,
                Verdict::Void => pb::ApprovalState::Void,
            },
            (None, State::InputRequired) => pb::ApprovalState::Pending,
            (None, _) => pb::ApprovalState::Cancelled,
        };
        let decision = approval.decision.as_ref();
        Some(pb::Approval {
            task_id: self.id.clone(),
            tool: self.tool.clone(),
            caller: self.caller.clone(),
            arguments_json: approval.shown_arguments.clone(),
            arguments_redacted: approval.redacted,
            rule: approval.rule.clone(),
            reason: approval.reason.clone(),
            approver_callers: approval.approvers.callers.clone(),
            approver_groups: approval.approvers.groups.clone(),
            self_approval: approval.self_approval,
            requested_at: Some(timestamp(self.created_ms)),
            expires_at: Some(timestamp(approval.until_ms)),
            state: state as i32,
            decided_by: decision.map(|d| d.by.clone()).unwrap_or_default(),
            comment: decision.map(|d| d.comment.clone()).unwrap_or_default(),
            decided_at: decision.map(|d| timestamp(d.at_ms)),
            digest: approval.digest.clone(),
            descriptor_digest: approval.descriptor_digest.clone(),
            kind: pb::ApprovalKind::Call as i32,
            definition: None,
        })
    }
}

#[cfg(test)]
mod tests;
