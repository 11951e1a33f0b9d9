//! What operators do with pins: list them and what is held (with how it
//! differs from the pinned definition), approve a live definition, revoke
//! a pin. The API over these stays thin.

use std::sync::Arc;

use toolmesh_proto::pb;

use super::{Pins, store::PinRecord};
use crate::{
    access::{audit::PinEventRecord, auth::Caller},
    catalog::{Catalog, ToolState, descriptor, versions},
    error::RegistryError,
};

impl Catalog {
    /// The pins, if `caller` may review them.
    pub(crate) fn pins_for(&self, caller: &Caller) -> Result<&Arc<Pins>, RegistryError> {
        let pins = self.pins().ok_or(RegistryError::PinsOff)?;
        if pins.rules().may_approve(caller) {
            Ok(pins)
        } else {
            Err(RegistryError::PermissionDenied {
                reason: "only the pins file's approvers may review pins".into(),
            })
        }
    }

    /// Every pin and every held definition, for `caller`.
    pub fn review_pins(&self, caller: &Caller) -> Result<pb::ListPinsResponse, RegistryError> {
        let pins = self.pins_for(caller)?;
        let rules = pins.rules();
        let mode = |key: &str| {
            rules
                .mode(versions::name_of(key))
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default()
        };
        let listed = pins
            .all()
            .into_iter()
            .map(|(key, record)| pb::PinnedDefinition {
                mode: mode(&key),
                digest: record.digest,
                by: record.by,
                pinned_at: (record.at_ms > 0).then(|| crate::tasks::model::timestamp(record.at_ms)),
                tool: key,
            })
            .collect();
        let held = self
            .held()
            .iter()
            .map(|tool| self.held_definition(pins, tool))
            .collect();
        Ok(pb::ListPinsResponse { pins: listed, held })
    }

    /// Held `tool` as operators see it: its pin, how it differs from the
    /// pinned definition (when known here), its rule's mode and denial.
    pub(crate) fn held_definition(&self, pins: &Pins, tool: &ToolState) -> pb::HeldDefinition {
        let key = tool.key();
        let pinned = pins.pinned(&key);
        let was = pinned.as_deref().and_then(|digest| {
            pins.record(&key)
                .filter(|r| r.digest == digest)
                .and_then(|r| r.definition())
                .map(Arc::new)
                .or_else(|| self.definition(digest))
        });
        let denial = pins.denial(&key).filter(|d| *d.digest == *tool.digest);
        let denied_at = denial
            .as_ref()
            .map(|d| crate::tasks::model::timestamp(d.at_ms));
        let denial = denial.unwrap_or_default();
        pb::HeldDefinition {
            tool: Some(tool.to_proto()),
            changes: was
                .map(|was| {
                    descriptor::compare(&was, &tool.descriptor, ("pinned", "held"))
                        .into_iter()
                        .map(|(_, line)| line)
                        .collect()
                })
                .unwrap_or_default(),
            pinned_digest: pinned.unwrap_or_default(),
            mode: pins
                .rules()
                .mode(versions::name_of(&key))
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default(),
            denied_by: denial.by,
            denial_comment: denial.comment,
            denied_at,
        }
    }

    /// Pins `key` to its live definition whose digest is `digest`, as
    /// `caller` approves it; the held definition is served from then on.
    pub async fn approve_pin(
        &self,
        caller: &Caller,
        key: &str,
        digest: &str,
    ) -> Result<pb::PinnedDefinition, RegistryError> {
        self.pin_definition(caller, key, digest, "").await
    }

    /// [`Self::approve_pin`], with the approver's comment kept.
    pub(crate) async fn pin_definition(
        &self,
        caller: &Caller,
        key: &str,
        digest: &str,
        comment: &str,
    ) -> Result<pb::PinnedDefinition, RegistryError> {
        let pins = self.pins_for(caller)?;
        let reference = versions::Reference::parse(key, "", "tool")?;
        if !descriptor::is_digest(digest) {
            return Err(RegistryError::InvalidRequest {
                field: "digest".into(),
                reason: "a digest is 64 lowercase hex digits, as ListPins shows it".into(),
            });
        }
        let key = versions::key_of(reference.name, reference.version.unwrap_or_default());
        let live: Option<Arc<ToolState>> = self
            .held()
            .into_iter()
            .find(|t| t.key() == key)
            .or_else(|| self.store.get(&key));
        let Some(tool) = live else {
            return Err(RegistryError::ToolNotFound { tool: key });
        };
        if *tool.digest != *digest {
            return Err(RegistryError::InvalidRequest {
                field: "digest".into(),
                reason: format!(
                    "{key}'s live definition has digest {}: approve what you reviewed (ListPins)",
                    tool.digest
                ),
            });
        }
        let mut record = PinRecord::new(digest.to_owned(), &caller.id, Some(&tool.descriptor));
        record.comment = comment.to_owned();
        pins.approve(&key, record.clone()).await?;
        pins.event(
            "approved",
            PinEventRecord {
                event: "approved",
                tool: key.clone(),
                digest: digest.to_owned(),
                pinned: None,
                by: Some(caller.id.clone()),
                comment: (!comment.is_empty()).then(|| comment.to_owned()),
            },
        );
        self.regate();
        tracing::info!(tool = %key, %digest, by = %caller.id, "pinned a definition");
        Ok(pb::PinnedDefinition {
            mode: pins
                .rules()
                .mode(reference.name)
                .map(|m| m.as_str().to_owned())
                .unwrap_or_default(),
            pinned_at: Some(crate::tasks::model::timestamp(record.at_ms)),
            digest: record.digest,
            by: record.by,
            tool: key,
        })
    }

    /// Removes the run-time pin of `key`, as `caller` asks.
    pub async fn revoke_pin(&self, caller: &Caller, key: &str) -> Result<bool, RegistryError> {
        let pins = self.pins_for(caller)?;
        let reference = versions::Reference::parse(key, "", "tool")?;
        let key = versions::key_of(reference.name, reference.version.unwrap_or_default());
        let was = pins.record(&key).map(|r| r.digest).unwrap_or_default();
        let revoked = pins.revoke(&key).await?;
        if revoked {
            pins.event(
                "revoked",
                PinEventRecord {
                    event: "revoked",
                    tool: key.clone(),
                    digest: was,
                    pinned: None,
                    by: Some(caller.id.clone()),
                    comment: None,
                },
            );
        }
        self.regate();
        tracing::info!(tool = %key, revoked, by = %caller.id, "revoked a pin");
        Ok(revoked)
    }
}
