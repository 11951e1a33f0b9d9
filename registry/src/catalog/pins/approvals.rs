//! Held definitions as approvals (`toolmesh.v1.Approvals`, kind
//! `DEFINITION`): each definition the pins hold is pending, for the pins
//! file's approvers, until one approves it (it is pinned, and served on
//! every replica), denies it (it stays held, and is no longer pending) or
//! it is withdrawn (its instances left, or announced another).
//!
//! An approval's id names the tool version and the digest held,
//! `definition:<key>:<digest>`: every replica gives the same definition
//! the same id, and a decision applies to the definition shown and no
//! other.

use std::sync::Arc;

use toolmesh_proto::pb;

use super::{Pins, store::Denial};
use crate::{
    access::{audit::PinEventRecord, auth::Caller},
    catalog::{Catalog, ToolState, descriptor, versions},
    error::RegistryError,
    tasks::model::{now_ms, timestamp},
};

const PREFIX: &str = "definition:";

/// Whether `id` names a definition's approval.
pub(crate) fn is_definition(id: &str) -> bool {
    id.starts_with(PREFIX)
}

/// The approval id of `key`'s definition `digest`.
pub(crate) fn id(key: &str, digest: &str) -> String {
    format!("{PREFIX}{key}:{digest}")
}

/// The key and digest `id` names.
fn parse(id: &str) -> Option<(&str, &str)> {
    let (key, digest) = id.strip_prefix(PREFIX)?.rsplit_once(':')?;
    let named = versions::Reference::parse(key, "", "tool")
        .is_ok_and(|r| descriptor::is_valid_name(r.name));
    (descriptor::is_digest(digest) && named).then_some((key, digest))
}

/// What became of a definition's approval.
enum Outcome {
    Pending,
    Approved {
        by: String,
        at_ms: u64,
        comment: String,
    },
    Denied(Denial),
}

impl Catalog {
    /// The pending definition approvals `caller` may decide, by tool;
    /// none without pins, or for a caller the pins file does not name.
    pub(crate) fn pending_definitions(&self, caller: &Caller) -> Vec<pb::Approval> {
        let Ok(pins) = self.pins_for(caller) else {
            return Vec::new();
        };
        self.held()
            .iter()
            .filter(|tool| !denied(pins, &tool.key(), &tool.digest))
            .map(|tool| {
                self.definition_wire(
                    pins,
                    &tool.key(),
                    &tool.digest,
                    Some(tool),
                    Outcome::Pending,
                )
            })
            .collect()
    }

    /// Definition approval `id`, pending or decided; `TaskNotFound` if
    /// unknown, withdrawn undecided, or not `caller`'s to see.
    pub(crate) fn definition_approval(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<pb::Approval, RegistryError> {
        let not_found = || RegistryError::TaskNotFound { id: id.to_owned() };
        let (key, digest) = parse(id).ok_or_else(not_found)?;
        let pins = self.pins_for(caller).map_err(|_| not_found())?;
        let held = self.held_at(key, digest);
        let outcome = self
            .outcome(pins, key, digest, held.is_some())
            .ok_or_else(not_found)?;
        Ok(self.definition_wire(pins, key, digest, held.as_ref(), outcome))
    }

    /// Approves (pins and serves) or denies (keeps held) definition
    /// approval `id`, as `caller` decides with `comment`; `digest`, when
    /// set, must be the one shown.
    pub(crate) async fn decide_definition(
        &self,
        caller: &Caller,
        id: &str,
        approve: bool,
        comment: &str,
        digest: &str,
    ) -> Result<pb::Approval, RegistryError> {
        let not_found = || RegistryError::TaskNotFound { id: id.to_owned() };
        let (key, held_digest) = parse(id).ok_or_else(not_found)?;
        let pins = self.pins_for(caller)?;
        if !digest.is_empty() && digest != held_digest {
            return Err(RegistryError::ApprovalDigestMismatch {
                id: id.to_owned(),
                digest: digest.to_owned(),
            });
        }
        let Some(tool) = self.held_at(key, held_digest) else {
            return Err(match self.outcome(pins, key, held_digest, false) {
                Some(Outcome::Approved { by, .. }) => closed(id, "approved", by),
                Some(Outcome::Denied(denial)) => closed(id, "denied", denial.by),
                _ => closed(id, "void", String::new()),
            });
        };
        if let Some(denial) = pins.denial(key).filter(|d| d.digest == held_digest) {
            return Err(closed(id, "denied", denial.by));
        }
        let comment = crate::tasks::approval::clip(comment);
        if approve {
            self.pin_definition(caller, key, held_digest, &comment)
                .await?;
        } else {
            self.deny_definition(pins, caller, &tool, &comment).await?;
        }
        let outcome = self
            .outcome(pins, key, held_digest, !approve)
            .ok_or_else(not_found)?;
        let shown = (!approve).then_some(&tool);
        Ok(self.definition_wire(pins, key, held_digest, shown, outcome))
    }

    /// Keeps `tool` held, and no longer pending: `caller` denied it.
    async fn deny_definition(
        &self,
        pins: &Arc<Pins>,
        caller: &Caller,
        tool: &ToolState,
        comment: &str,
    ) -> Result<(), RegistryError> {
        let key = tool.key();
        let denial = Denial {
            digest: tool.digest.to_string(),
            by: caller.id.clone(),
            at_ms: now_ms(),
            comment: comment.to_owned(),
        };
        pins.deny(&key, denial).await?;
        pins.event(
            "denied",
            PinEventRecord {
                event: "denied",
                tool: key.to_string(),
                digest: tool.digest.to_string(),
                pinned: pins.pinned(&key),
                by: Some(caller.id.clone()),
                comment: (!comment.is_empty()).then(|| comment.to_owned()),
            },
        );
        tracing::info!(tool = %key, digest = %tool.digest, by = %caller.id, "denied a held definition; it stays held");
        Ok(())
    }

    /// The held definition of `key` whose digest is `digest`.
    fn held_at(&self, key: &str, digest: &str) -> Option<Arc<ToolState>> {
        self.held()
            .into_iter()
            .find(|tool| tool.key() == key && *tool.digest == *digest)
    }

    /// What became of `key`'s definition `digest`, if it was decided or
    /// (`held`) still waits.
    fn outcome(&self, pins: &Pins, key: &str, digest: &str, held: bool) -> Option<Outcome> {
        if let Some(denial) = pins.denial(key).filter(|d| d.digest == digest) {
            return Some(Outcome::Denied(denial));
        }
        if held {
            return Some(Outcome::Pending);
        }
        pins.record(key)
            .filter(|record| record.digest == digest)
            .map(|record| Outcome::Approved {
                by: record.by,
                at_ms: record.at_ms,
                comment: record.comment,
            })
    }

    /// The approval of `key`'s definition `digest`, as the API shows it.
    fn definition_wire(
        &self,
        pins: &Pins,
        key: &str,
        digest: &str,
        held: Option<&Arc<ToolState>>,
        outcome: Outcome,
    ) -> pb::Approval {
        let rules = pins.rules();
        let (callers, groups) = rules.approvers();
        let mode = rules
            .mode(versions::name_of(key))
            .map(|m| m.as_str())
            .unwrap_or_default();
        let definition = match held {
            Some(tool) => self.held_definition(pins, tool),
            None => pb::HeldDefinition {
                pinned_digest: pins.pinned(key).unwrap_or_default(),
                mode: mode.to_owned(),
                ..Default::default()
            },
        };
        let reason = if definition.pinned_digest.is_empty() {
            format!("{key} is not pinned, and its rule ({mode}) serves only pinned definitions")
        } else {
            format!(
                "{key}'s definition is not the pinned one ({} field(s) differ); approving pins and serves it",
                definition.changes.len()
            )
        };
        let (state, by, at_ms, comment) = match outcome {
            Outcome::Pending => (
                pb::ApprovalState::Pending,
                String::new(),
                None,
                String::new(),
            ),
            Outcome::Approved { by, at_ms, comment } => {
                (pb::ApprovalState::Approved, by, Some(at_ms), comment)
            }
            Outcome::Denied(d) => (pb::ApprovalState::Denied, d.by, Some(d.at_ms), d.comment),
        };
        pb::Approval {
            task_id: id(key, digest),
            kind: pb::ApprovalKind::Definition as i32,
            tool: key.to_owned(),
            caller: held
                .and_then(|t| t.instances.first())
                .map(|i| i.id.clone())
                .unwrap_or_default(),
            rule: mode.to_owned(),
            reason,
            approver_callers: callers.to_vec(),
            approver_groups: groups.to_vec(),
            requested_at: pins.held_since(key, digest).map(timestamp),
            state: state as i32,
            decided_by: by,
            comment,
            decided_at: at_ms.filter(|ms| *ms > 0).map(timestamp),
            digest: digest.to_owned(),
            descriptor_digest: digest.to_owned(),
            definition: Some(definition),
            ..Default::default()
        }
    }
}

/// Whether `key`'s held `digest` was denied.
fn denied(pins: &Pins, key: &str, digest: &str) -> bool {
    pins.denial(key).is_some_and(|d| d.digest == digest)
}

fn closed(id: &str, state: &'static str, by: String) -> RegistryError {
    RegistryError::ApprovalClosed {
        id: id.to_owned(),
        state,
        by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_names_the_version_and_the_digest() {
        let digest = "a".repeat(64);
        let id = id("billing.refund@2.1.0", &digest);
        assert!(is_definition(&id));
        assert_eq!(parse(&id), Some(("billing.refund@2.1.0", digest.as_str())));
        assert_eq!(
            parse(&super::id("echo", &digest)),
            Some(("echo", digest.as_str()))
        );
    }

    #[test]
    fn an_id_that_is_not_one_is_refused() {
        let digest = "a".repeat(64);
        for bad in [
            "definition:".to_owned(),
            format!("definition:{digest}"),
            "definition:echo:abc".to_owned(),
            format!("definition:bad name:{digest}"),
            format!("definition:echo@not-semver!:{digest}"),
            format!("task:echo:{digest}"),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }
}
