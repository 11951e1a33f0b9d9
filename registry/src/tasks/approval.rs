//! A held call's approval, as its task stores it, and the call's digest it
//! is bound to. It is decided only through its task (`Task::approve`,
//! `Task::close_approval` in `model`): each a change of the task, written
//! by compare-and-set, so that of two replicas that decide at once exactly
//! one decision stands.

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

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

impl Approval {
    /// Records `verdict` by `by` at `now_ms`, unless it is decided already.
    pub(crate) fn decide(
        &mut self,
        verdict: Verdict,
        by: &str,
        comment: &str,
        now_ms: u64,
    ) -> bool {
        if self.decision.is_some() {
            return false;
        }
        self.decision = Some(Decision {
            verdict,
            by: by.to_owned(),
            comment: clip(comment),
            at_ms: now_ms,
        });
        true
    }
}

/// `comment`, cut at a character boundary within [`MAX_COMMENT`].
pub(crate) fn clip(comment: &str) -> String {
    let mut end = comment.len().min(MAX_COMMENT);
    while !comment.is_char_boundary(end) {
        end -= 1;
    }
    comment[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_decision_is_made_once_and_its_comment_bounded() {
        let mut approval = Approval {
            rule: "r".into(),
            reason: String::new(),
            approvers: Approvers::default(),
            self_approval: false,
            until_ms: 10,
            arguments_json: "{}".into(),
            shown_arguments: "{}".into(),
            redacted: false,
            descriptor_digest: "d".into(),
            digest: "x".into(),
            webhook: None,
            decision: None,
        };
        let long = "é".repeat(MAX_COMMENT);
        assert!(approval.decide(Verdict::Denied, "alice", &long, 5));
        assert!(!approval.decide(Verdict::Approved, "bob", "", 6));
        let kept = approval.decision.expect("a decision");
        assert_eq!((kept.verdict, kept.by.as_str()), (Verdict::Denied, "alice"));
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
