//! Pinned definitions (`--pins-file`): the operator approves a tool's
//! definition by its digest, and a definition that is not the approved one
//! is held in quarantine (not listed, not callable) instead of replacing
//! what agents were shown.
//!
//! The file's `rules` give a mode per tool pattern, first match wins; a
//! tool no rule matches is served as it is announced:
//!
//! - `enforce`: only a pinned digest is served; another is held.
//! - `warn`: every definition is served; one that is not pinned is
//!   counted, logged and audited.
//! - `trust-on-first-use`: the first digest seen is pinned (atomically,
//!   across replicas); a later change is held.
//!
//! Pins come from the file's `pins` (key → digest) and from the pin store
//! (`toolmesh pins approve`, and trust on first use), in memory or shared
//! by replicas in Redis. A pin names one version: `name@version`, or the
//! bare name of an unversioned tool.

pub(crate) mod approvals;
pub(crate) mod file;
pub(crate) mod follow;
mod review;
pub mod store;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex, PoisonError},
};

use arc_swap::ArcSwap;
use toolmesh_proto::pb;

pub use file::{Mode, PinRules};
use store::{Denial, PinRecord, PinStore};

use crate::{
    access::audit::{AuditLog, PinEventRecord},
    catalog::{ToolState, descriptor},
    error::RegistryError,
    metrics::Metrics,
};

/// Where a definition stands against its pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// No rule covers it, or it is the pinned one.
    Served,
    /// Served, but not pinned (`warn`).
    Flagged,
    /// Held in quarantine.
    Held,
}

/// The rules in force, the pins, and what the view holds back.
pub struct Pins {
    rules: ArcSwap<PinRules>,
    store: Arc<dyn PinStore>,
    /// The store's pins as last read, by key.
    cache: ArcSwap<BTreeMap<String, PinRecord>>,
    /// The store's denials as last read, by key.
    denials: ArcSwap<BTreeMap<String, Denial>>,
    /// Definitions already told of (held or flagged), so each is logged,
    /// counted and audited once, with when this replica first did (Unix
    /// ms).
    told: Mutex<HashMap<String, u64>>,
    audit: std::sync::OnceLock<AuditLog>,
    metrics: std::sync::OnceLock<Arc<Metrics>>,
}

/// Most definitions remembered as told of; past it, the memory starts over
/// (a definition may then be told of again).
const MAX_TOLD: usize = 10_000;

impl Pins {
    /// Pins over `store`, under `rules`.
    pub fn new(rules: PinRules, store: Arc<dyn PinStore>) -> Self {
        Self {
            rules: ArcSwap::from_pointee(rules),
            store,
            cache: ArcSwap::default(),
            denials: ArcSwap::default(),
            told: Mutex::new(HashMap::new()),
            audit: std::sync::OnceLock::new(),
            metrics: std::sync::OnceLock::new(),
        }
    }

    /// Records every pin event to `audit` and counts it in `metrics`.
    pub(crate) fn observed_by(&self, audit: AuditLog, metrics: Arc<Metrics>) {
        let _ = self.audit.set(audit);
        let _ = self.metrics.set(metrics);
    }

    /// Logs, counts and audits one event.
    pub(crate) fn event(&self, event: &'static str, record: PinEventRecord) {
        if let Some(metrics) = self.metrics.get() {
            metrics.pin_event(event);
        }
        if let Some(audit) = self.audit.get() {
            audit.record(record);
        }
    }

    /// Tells of `tool` held or flagged, once per definition.
    fn tell(&self, event: &'static str, tool: &ToolState, key: &str, pinned: Option<&str>) {
        let first = {
            let mut told = self.told.lock().unwrap_or_else(PoisonError::into_inner);
            if told.len() >= MAX_TOLD {
                told.clear();
            }
            let at = crate::tasks::model::now_ms();
            told.insert(told_key(event, key, &tool.digest), at)
                .is_none()
        };
        if !first {
            return;
        }
        tracing::warn!(tool = %key, digest = %tool.digest, pinned = ?pinned, event, "a tool's definition is not the pinned one");
        self.event(
            event,
            PinEventRecord {
                event,
                tool: key.to_owned(),
                digest: tool.digest.to_string(),
                pinned: pinned.map(str::to_owned),
                by: None,
                comment: None,
            },
        );
    }

    /// When this replica first held `key`'s definition `digest` (Unix ms),
    /// if it remembers.
    pub(crate) fn held_since(&self, key: &str, digest: &str) -> Option<u64> {
        self.told
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&told_key("held", key, digest))
            .copied()
    }

    /// Puts new rules in force.
    pub(crate) fn set_rules(&self, rules: Arc<PinRules>) {
        self.rules.store(rules);
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<PinRules> {
        self.rules.load_full()
    }

    /// Reads the store's pins again; whether they changed.
    pub(crate) async fn refresh(&self) -> Result<bool, RegistryError> {
        let (pins, denials) = (self.store.all().await?, self.store.denials().await?);
        let changed = **self.cache.load() != pins;
        if changed {
            self.cache.store(Arc::new(pins));
        }
        if **self.denials.load() != denials {
            self.denials.store(Arc::new(denials));
        }
        Ok(changed)
    }

    /// The denial of `key`'s held definition, if one stands.
    pub fn denial(&self, key: &str) -> Option<Denial> {
        self.denials.load().get(key).cloned()
    }

    /// The digest `key` is pinned to: the store's, else the file's.
    pub fn pinned(&self, key: &str) -> Option<String> {
        self.cache
            .load()
            .get(key)
            .map(|p| p.digest.clone())
            .or_else(|| self.rules.load().pin(key).map(str::to_owned))
    }

    /// The store's record of `key`'s pin, if it has one.
    pub fn record(&self, key: &str) -> Option<PinRecord> {
        self.cache.load().get(key).cloned()
    }

    /// Every pin: the store's and the file's, by key.
    pub fn all(&self) -> BTreeMap<String, PinRecord> {
        let mut all: BTreeMap<String, PinRecord> = self
            .rules
            .load()
            .pins()
            .map(|(key, digest)| (key.to_owned(), PinRecord::from_file(digest)))
            .collect();
        all.extend(
            self.cache
                .load()
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        all
    }

    /// Where `tool`'s definition stands.
    pub fn standing(&self, tool: &ToolState) -> Standing {
        let Some(mode) = self.rules.load().mode(tool.name()) else {
            return Standing::Served;
        };
        let key = tool.key();
        let pinned = self.pinned(&key);
        if pinned.as_deref() == Some(&*tool.digest) {
            return Standing::Served;
        }
        match mode {
            Mode::Warn => {
                self.tell("flagged", tool, &key, pinned.as_deref());
                Standing::Flagged
            }
            // Not pinned yet on first use: another replica's announce
            // pinned it, and this one reads the pin within a second.
            Mode::TrustOnFirstUse if pinned.is_none() => Standing::Held,
            Mode::Enforce | Mode::TrustOnFirstUse => {
                self.tell("held", tool, &key, pinned.as_deref());
                Standing::Held
            }
        }
    }

    /// Pins the definitions of `tools` that a `trust-on-first-use` rule
    /// covers and nothing pins yet: the first digest seen wins, across
    /// replicas.
    pub(crate) async fn trust_first(
        &self,
        tools: &[pb::ToolDescriptor],
    ) -> Result<(), RegistryError> {
        let rules = self.rules.load();
        let mut trusted = false;
        for tool in tools {
            if rules.mode(&tool.name) != Some(Mode::TrustOnFirstUse) {
                continue;
            }
            let key = crate::catalog::versions::key(tool);
            if self.pinned(&key).is_some() {
                continue;
            }
            let record = PinRecord::new(descriptor::digest(tool), "trust-on-first-use", Some(tool));
            if self.store.put_first(&key, &record).await? {
                trusted = true;
                self.event(
                    "trusted",
                    PinEventRecord {
                        event: "trusted",
                        tool: key,
                        digest: record.digest,
                        pinned: None,
                        by: None,
                        comment: None,
                    },
                );
            }
        }
        if trusted {
            self.refresh().await?;
        }
        Ok(())
    }

    /// Pins `key` to `record` (an operator's approval), forgetting a
    /// denial of it.
    pub(crate) async fn approve(&self, key: &str, record: PinRecord) -> Result<(), RegistryError> {
        self.store.put(key, &record).await?;
        self.store.forget_denial(key).await?;
        self.refresh().await.map(|_| ())
    }

    /// Records `denial` of `key`'s held definition: it stays held.
    pub(crate) async fn deny(&self, key: &str, denial: Denial) -> Result<(), RegistryError> {
        self.store.deny(key, &denial).await?;
        self.refresh().await.map(|_| ())
    }

    /// Removes the store's pin of `key`; whether there was one.
    pub(crate) async fn revoke(&self, key: &str) -> Result<bool, RegistryError> {
        let removed = self.store.remove(key).await?;
        self.refresh().await?;
        Ok(removed)
    }
}

/// The memory of one told event.
fn told_key(event: &str, key: &str, digest: &str) -> String {
    format!("{event} {key} {digest}")
}

impl crate::catalog::store::view::Gate for Pins {
    fn admits(&self, tool: &ToolState) -> bool {
        self.standing(tool) != Standing::Held
    }
}
