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

pub(crate) mod file;
pub(crate) mod follow;
mod review;
pub mod store;

use std::{
    collections::{BTreeMap, HashSet},
    sync::{Arc, Mutex, PoisonError},
};

use arc_swap::ArcSwap;
use toolmesh_proto::pb;

pub use file::{Mode, PinRules};
use store::{PinRecord, PinStore};

use crate::{
    catalog::{ToolState, descriptor},
    error::RegistryError,
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
    /// Definitions already flagged (`warn`), so each is logged once.
    flagged: Mutex<HashSet<String>>,
}

impl Pins {
    /// Pins over `store`, under `rules`.
    pub fn new(rules: PinRules, store: Arc<dyn PinStore>) -> Self {
        Self {
            rules: ArcSwap::from_pointee(rules),
            store,
            cache: ArcSwap::default(),
            flagged: Mutex::new(HashSet::new()),
        }
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
        let now = self.store.all().await?;
        let changed = **self.cache.load() != now;
        if changed {
            self.cache.store(Arc::new(now));
        }
        Ok(changed)
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
                let first = self
                    .flagged
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(format!("{key} {}", tool.digest));
                if first {
                    tracing::warn!(tool = %key, digest = %tool.digest, pinned = ?pinned, "a tool's definition is not the pinned one (pins mode warn: served)");
                }
                Standing::Flagged
            }
            Mode::Enforce | Mode::TrustOnFirstUse => Standing::Held,
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
            trusted |= self.store.put_first(&key, &record).await?;
        }
        if trusted {
            self.refresh().await?;
        }
        Ok(())
    }

    /// Pins `key` to `record` (an operator's approval).
    pub(crate) async fn approve(&self, key: &str, record: PinRecord) -> Result<(), RegistryError> {
        self.store.put(key, &record).await?;
        self.refresh().await.map(|_| ())
    }

    /// Removes the store's pin of `key`; whether there was one.
    pub(crate) async fn revoke(&self, key: &str) -> Result<bool, RegistryError> {
        let removed = self.store.remove(key).await?;
        self.refresh().await?;
        Ok(removed)
    }
}

impl crate::catalog::store::view::Gate for Pins {
    fn admits(&self, tool: &ToolState) -> bool {
        self.standing(tool) != Standing::Held
    }
}
