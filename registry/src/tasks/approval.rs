//! A held call's approval, as its task stores it, and the only ways it is
//! decided: [`Task::approve`], [`Task::close_approval`]. Each is a change
//! of the task, written by compare-and-set, so that of two replicas that
//! decide at once exactly one decision stands.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use toolmesh_proto::pb;

use super::model::{Holder, Outcome, State, Task, timestamp};
use crate::{access::auth::approval_rules::Approvers, calls::idempotency::hex};

/// What a held call waits for, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Approval {
    /// The rule that held it.
    pub rule: String,
    /// The rule's reason.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Who may decide it: the rule's, as it was when the call was held.
    pub approvers: Approvers,
    /// Whether its caller may decide it.
    #[serde(default)]
    pub self_approval: bool,
    /// When it expires (Unix ms).
    pub until_ms: u64,
    /// The call's arguments, as validated: what runs once approved.
    pub arguments_json: String,
    /// The arguments as approvers see them (redacted, unless the rule
    /// reveals them).
    pub shown_arguments: String,
    /// Whether `shown_arguments` is redacted.
    #[serde(default)]
    pub redacted: bool,
    /// The digest of the tool's descriptor when the call was held.
    pub descriptor_digest: String,
    /// The call's digest: what an approval is bound to ([`call_digest`]).
    pub digest: String,
    /// Where the rule posts it, if anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<String>,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// How an approval was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// An approver approved it: the call ran.
    Approved,
    /// An approver denied it.
    Denied,
    /// No one decided in time.
    Expired,
    /// The tool changed while it waited.
    Void,
}

impl Verdict {
    /// How metrics, records and messages name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Void => "void",
        }
    }
}

/// A decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Decision {
    /// What it was.
    pub verdict: Verdict,
    /// Who made it (empty for an expiry or a void).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    /// Their comment (or why it was closed).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub comment: String,
    /// When (Unix ms).
    pub at_ms: u64,
}

/// Longest comment kept, in bytes.
pub(crate) const MAX_COMMENT: usize = 2048;

/// An approval's digest: the SHA-256 (hex) over the tool, its descriptor's
/// digest, the canonical arguments (keys sorted, no spaces) and the caller,
/// each length-prefixed, so that no two calls share one.
pub(crate) fn call_digest(
    tool: &str,
    descriptor_digest: &str,
    arguments: &serde_json::Value,
    caller: &str,
) -> String {
    let canonical = crate::catalog::canonical::json(arguments);
    let mut hash = Sha256::new();
    hash.update(b"toolmesh approval v1\0");
    for part in [tool, descriptor_digest, canonical.as_str(), caller] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hex(&hash.finalize())
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
        approval.decision = Some(Decision {
            verdict: Verdict::Approved,
            by: by.to_owned(),
            comment: clip(comment),
            at_ms: now_ms,
        });
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
            approval.decision = Some(Decision {
                verdict,
                by: by.to_owned(),
                comment: clip(comment),
                at_ms: now_ms,
            });
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
        })
    }
}

/// `comment`, cut at a character boundary within [`MAX_COMMENT`].
fn clip(comment: &str) -> String {
    let mut end = comment.len().min(MAX_COMMENT);
    while !comment.is_char_boundary(end) {
        end -= 1;
    }
    comment[..end].to_owned()
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A call of `caller` held `created` ms after the scenarios' start
    /// until `until_ms`, for alice to decide.
    pub(crate) fn held(id: &str, caller: &str, created: u64, until_ms: u64) -> Task {
        let mut task = crate::tasks::store::conformance::task(id, caller, created);
        task.state = State::InputRequired;
        task.holder = None;
        task.approval = Some(Approval {
            rule: "r".into(),
            reason: String::new(),
            approvers: Approvers {
                callers: vec!["alice".into()],
                groups: Vec::new(),
            },
            self_approval: false,
            until_ms,
            arguments_json: "{}".into(),
            shown_arguments: "{}".into(),
            redacted: false,
            descriptor_digest: "d".into(),
            digest: "x".into(),
            webhook: None,
            decision: None,
        });
        task
    }

    fn run() -> RunOn {
        RunOn {
            holder: Holder {
                instance: "s1".into(),
                endpoint: "http://s1".into(),
                key_tag: String::new(),
            },
            report_digest: "r".into(),
            expires_ms: 99_000,
        }
    }

    fn denied() -> Outcome {
        Outcome::of_status(&tonic::Status::permission_denied("no"))
    }

    #[test]
    fn one_decision_stands() {
        let mut task = held("t", "bot", 0, 10_000);
        assert!(task.approve("alice", "ok", run(), 2_000));
        assert_eq!(task.state, State::Working);
        assert_eq!(task.expires_ms, 99_000);
        assert!(!task.approve("alice", "again", run(), 2_500), "replayed");
        assert!(!task.close_approval(Verdict::Denied, "alice", "no", denied(), 3_000));
        let wire = task.approval_to_proto().expect("an approval");
        assert_eq!(wire.state, pb::ApprovalState::Approved as i32);
        assert_eq!(
            (wire.decided_by.as_str(), wire.comment.as_str()),
            ("alice", "ok")
        );

        let mut task = held("t", "bot", 0, 10_000);
        assert!(task.close_approval(Verdict::Denied, "alice", "too much", denied(), 2_000));
        assert_eq!(task.state, State::Failed);
        assert!(!task.approve("alice", "", run(), 2_500), "denied already");
    }

    #[test]
    fn an_expired_approval_cannot_be_approved() {
        let mut task = held("t", "bot", 0, 10_000);
        assert!(!task.approve("alice", "", run(), 10_000));
        assert!(task.close_approval(Verdict::Expired, "", "", denied(), 10_000));
        assert_eq!(
            task.approval_to_proto().map(|a| a.state),
            Some(pb::ApprovalState::Expired as i32)
        );
    }

    #[test]
    fn a_cancelled_held_call_reads_as_cancelled() {
        let mut task = held("t", "bot", 0, 10_000);
        assert!(task.cancel(2_000));
        assert!(!task.approve("alice", "", run(), 2_500));
        assert_eq!(
            task.approval_to_proto().map(|a| a.state),
            Some(pb::ApprovalState::Cancelled as i32)
        );
    }

    #[test]
    fn comments_are_bounded() {
        let mut task = held("t", "bot", 0, 10_000);
        let long = "é".repeat(MAX_COMMENT);
        assert!(task.close_approval(Verdict::Denied, "alice", &long, denied(), 2_000));
        let kept = task.approval.and_then(|a| a.decision).expect("a decision");
        assert!(kept.comment.len() <= MAX_COMMENT);
    }

    #[test]
    fn the_digest_binds_every_part_and_ignores_key_order() {
        let args = json!({"a": 1, "b": [true, null]});
        let same = serde_json::from_str(r#"{ "b": [true,null], "a": 1 }"#).expect("json");
        let base = call_digest("t", "d", &args, "c");
        assert_eq!(base, call_digest("t", "d", &same, "c"));
        for other in [
            call_digest("u", "d", &args, "c"),
            call_digest("t", "e", &args, "c"),
            call_digest("t", "d", &json!({"a": 2, "b": [true, null]}), "c"),
            call_digest("t", "d", &args, "c2"),
            call_digest("td", "", &args, "c"),
        ] {
            assert_ne!(base, other);
        }
    }
}
