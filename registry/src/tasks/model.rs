//! A task as every engine stores it, and the only ways it may change:
//! [`Task::hand_to`], [`Task::progress`], [`Task::finish`], [`Task::cancel`]. Each returns
//! whether it changed the task (a task that is over never changes again),
//! and each change bumps the revision, so that a store can write it by
//! compare-and-set.

use base64::{Engine as _, engine::general_purpose::STANDARD as BASE64};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use toolmesh_proto::pb;

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
    pub approval: Option<super::approval::Approval>,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str, caller: &str) -> Task {
        crate::tasks::store::conformance::task(id, caller, 0)
    }

    fn response() -> Outcome {
        Outcome::Response {
            result_json: "42".into(),
            is_error: false,
            instance_id: "s1".into(),
            content_json: String::new(),
        }
    }

    fn holder(instance: &str) -> Holder {
        Holder {
            instance: instance.into(),
            endpoint: format!("http://{instance}"),
            key_tag: String::new(),
        }
    }

    #[test]
    fn only_an_idempotent_working_task_still_held_by_the_lost_instance_moves() {
        let mut t = task("a", "c");
        t.holder = Some(holder("s1"));
        assert!(
            !t.rerun_on("s1", holder("s2"), "d2".into(), 2_000),
            "not idempotent"
        );
        t.rerun = Some(Rerun {
            arguments_json: "{}".into(),
            reruns: 0,
        });
        assert!(
            !t.rerun_on("s9", holder("s2"), "d2".into(), 2_000),
            "held by another"
        );
        let revision = t.revision;
        assert!(t.rerun_on("s1", holder("s2"), "d2".into(), 2_000));
        assert_eq!(t.holder.as_ref().map(|h| h.instance.as_str()), Some("s2"));
        assert_eq!(
            t.report_digest, "d2",
            "the lost instance's token no longer reports"
        );
        assert_eq!(t.rerun.as_ref().map(|r| r.reruns), Some(1));
        assert!(t.revision > revision);
        assert!(
            !t.rerun_on("s1", holder("s3"), "d3".into(), 3_000),
            "moved already"
        );
        assert!(t.cancel(4_000));
        assert!(!t.rerun_on("s2", holder("s3"), "d3".into(), 5_000), "over");
    }

    #[test]
    fn a_task_ends_once_and_never_changes_after() {
        let mut t = task("a", "c");
        assert!(t.progress(
            Progress {
                fraction: Some(0.5),
                message: "half".into()
            },
            2_000
        ));
        assert!(t.finish(response(), 3_000));
        assert_eq!(t.state, State::Completed);
        assert_eq!(t.expires_ms, 3_000 + 3_600_000);
        let ended = t.clone();
        assert!(!t.cancel(4_000));
        assert!(!t.finish(Outcome::of_status(&tonic::Status::internal("x")), 4_000));
        assert!(!t.progress(
            Progress {
                fraction: None,
                message: "late".into()
            },
            4_000
        ));
        assert_eq!(t, ended);
    }

    #[test]
    fn every_change_bumps_the_revision() {
        let mut t = task("a", "c");
        let p = Progress {
            fraction: Some(0.1),
            message: String::new(),
        };
        assert!(t.progress(p.clone(), 2_000));
        assert_eq!(t.revision, 2);
        assert!(!t.progress(p, 2_500), "the same progress is no change");
        assert!(t.cancel(3_000));
        assert_eq!((t.revision, t.state), (3, State::Cancelled));
        assert_eq!(
            t.outcome.as_ref().and_then(Outcome::code),
            Some(tonic::Code::Cancelled)
        );
    }

    #[test]
    fn reports_are_bounded() {
        let p = Progress::from_report(&pb::TaskProgress {
            fraction: Some(f64::NAN),
            message: "é".repeat(MAX_PROGRESS_MESSAGE),
        });
        assert_eq!(p.fraction, None);
        assert!(p.message.len() <= MAX_PROGRESS_MESSAGE);
        let p = Progress::from_report(&pb::TaskProgress {
            fraction: Some(7.0),
            message: String::new(),
        });
        assert_eq!(p.fraction, Some(1.0));
    }

    #[test]
    fn only_the_holders_token_reports() {
        let t = task("a", "c");
        assert!(t.reported_by(b"token"));
        assert!(!t.reported_by(b"other"));
        assert!(!t.reported_by(b""));
    }

    #[test]
    fn the_wire_form_carries_the_outcome_and_its_details() {
        let mut t = task("a", "c");
        let status = crate::error::RegistryError::ToolNotFound { tool: "x".into() }.to_status();
        t.finish(Outcome::of_status(&status), 2_000);
        let wire = t.to_proto();
        assert_eq!(wire.state, pb::TaskState::Failed as i32);
        let Some(pb::task::Outcome::Error(error)) = wire.outcome else {
            panic!("no error: {wire:?}");
        };
        assert_eq!(error.code, tonic::Code::NotFound as i32);
        assert_eq!(error.details.as_slice(), status.details());
        let back: Task = serde_json::from_str(&serde_json::to_string(&t).expect("round trip"))
            .expect("round trip");
        assert_eq!(back, t);
    }
}
