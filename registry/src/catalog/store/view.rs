//! The local, read-optimized view of the catalog every engine serves reads
//! from, and the change events it derives.
//!
//! Engines decide what a tool version looks like now and hand it to
//! [`CatalogView::apply`], by its key (`name` or `name@version`); the view
//! compares it with what it held, updates its maps (each version, and each
//! name's [`Family`] of versions) and broadcasts `Added` / `Updated` /
//! `Removed`, for the version and, when it moved, for the name's default
//! ([`Scope`]). Applying and subscribing take the same lock, so
//! [`CatalogView::watch`] hands out a snapshot and a receiver with no gap
//! and no overlap.

use std::collections::BTreeSet;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use arc_swap::ArcSwap;
use dashmap::DashMap;
use tokio::sync::broadcast;
use toolmesh_proto::pb;

use super::{
    model::{CatalogEvent, ChangeKind, Scope, ToolState},
    seen::Seen,
};
use crate::catalog::versions::{self, Family, policy::VersionPolicy};

/// Capacity of the change channel; a watcher further behind than this is
/// told to watch again.
pub(crate) const EVENT_BUFFER: usize = 1024;

/// What decides whether a definition is served or held back
/// ([`crate::catalog::pins`]).
pub(crate) trait Gate: Send + Sync {
    /// Whether `tool` is served.
    fn admits(&self, tool: &ToolState) -> bool;
}

/// Tool versions by key, families by name, and the channel their changes
/// go out on.
pub struct CatalogView {
    tools: DashMap<String, Arc<ToolState>>,
    /// Versions the gate holds back, by key: live, but not served.
    held: DashMap<String, Arc<ToolState>>,
    gate: std::sync::OnceLock<Arc<dyn Gate>>,
    families: DashMap<String, Arc<Family>>,
    /// The names of `families`, in order: pages are walked from here, at
    /// the cost of the page rather than of the catalog.
    ordered: RwLock<BTreeSet<Arc<str>>>,
    /// The operator's defaults.
    policy: ArcSwap<VersionPolicy>,
    /// Every definition served, by digest.
    seen: Seen,
    events: broadcast::Sender<CatalogEvent>,
    /// Bytes of every event sent so far ([`CatalogEvent::published`]).
    published: AtomicU64,
    publish: Mutex<()>,
}

impl Default for CatalogView {
    fn default() -> Self {
        Self {
            tools: DashMap::new(),
            held: DashMap::new(),
            gate: std::sync::OnceLock::new(),
            families: DashMap::new(),
            ordered: RwLock::default(),
            policy: ArcSwap::default(),
            seen: Seen::default(),
            events: broadcast::channel(EVENT_BUFFER).0,
            published: AtomicU64::new(0),
            publish: Mutex::new(()),
        }
    }
}

/// Where a [`CatalogView::walk`] starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk<'a> {
    /// At this name (or the first after it).
    From(&'a str),
    /// Just after this name.
    After(&'a str),
    /// Just before this name, backwards.
    Before(&'a str),
}

/// What a [`CatalogView::walk`] does with the tool it reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Puts it on the page.
    Take,
    /// Passes it by.
    Skip,
    /// Ends the walk: nothing further can match.
    Stop,
}

/// A change to one state: what happened and the state after it (for
/// `Removed`, before).
type Change = (ChangeKind, Arc<ToolState>);

impl CatalogView {
    /// Sets the state of the version keyed `key` (`None`: it has no live
    /// instance) and broadcasts the change, if there is one. Returns the
    /// change to the version.
    pub(crate) fn apply(&self, key: &str, after: Option<ToolState>) -> Option<ChangeKind> {
        let _publishing = self.publish.lock().unwrap_or_else(PoisonError::into_inner);
        self.apply_locked(key, after.map(Arc::new))
    }

    /// Holds back from now on what `gate` does not admit (set once).
    pub(crate) fn gate_with(&self, gate: Arc<dyn Gate>) {
        let _ = self.gate.set(gate);
        self.regate();
    }

    /// Asks the gate again about every live version (its rules or pins
    /// changed): a held one it now admits is served, a served one it now
    /// refuses is held.
    pub(crate) fn regate(&self) {
        let _publishing = self.publish.lock().unwrap_or_else(PoisonError::into_inner);
        let live: Vec<(String, Arc<ToolState>)> = self
            .tools
            .iter()
            .chain(self.held.iter())
            .map(|t| (t.key().clone(), t.value().clone()))
            .collect();
        for (key, tool) in live {
            self.apply_locked(&key, Some(tool));
        }
    }

    /// Whether the version keyed `key` is held back.
    pub(crate) fn is_held(&self, key: &str) -> bool {
        self.held.contains_key(key)
    }

    /// The versions held back, sorted by key.
    pub(crate) fn held(&self) -> Vec<Arc<ToolState>> {
        by_key(&self.held)
    }

    fn apply_locked(&self, key: &str, after: Option<Arc<ToolState>>) -> Option<ChangeKind> {
        let after = after.filter(|t| !t.instances.is_empty());
        if let Some(after) = &after {
            self.seen.saw(after);
        }
        let after = match (after, self.gate.get()) {
            (Some(after), Some(gate)) if !gate.admits(&after) => {
                self.held.insert(key.to_owned(), after);
                None
            }
            (after, _) => {
                self.held.remove(key);
                after
            }
        };
        let before = self.tools.get(key).map(|t| t.clone());
        let change = match (before, after) {
            (None, None) => return None,
            (None, Some(after)) => {
                self.tools.insert(key.to_owned(), after.clone());
                (ChangeKind::Added, after)
            }
            (Some(before), None) => {
                self.tools.remove(key);
                (ChangeKind::Removed, before)
            }
            (Some(before), Some(after)) => {
                if before == after {
                    return None;
                }
                self.tools.insert(key.to_owned(), after.clone());
                (ChangeKind::Updated, after)
            }
        };
        let name = change.1.name().to_owned();
        let family = self.refamily(&name, Some((key, &change)));
        let kind = change.0;
        self.send(change, family);
        Some(kind)
    }

    /// Rebuilds the family of `name` after `changed` (a version's key and
    /// its change; `None`: only the policy changed), and returns the change
    /// to its default, if it moved or changed.
    fn refamily(&self, name: &str, changed: Option<(&str, &Change)>) -> Option<Change> {
        let before = self.families.get(name).map(|f| f.clone());
        let mut versions: Vec<Arc<ToolState>> = before
            .as_ref()
            .map(|f| f.versions().to_vec())
            .unwrap_or_default();
        if let Some((key, (kind, tool))) = changed {
            versions.retain(|t| versions::key(&t.descriptor) != key);
            if *kind != ChangeKind::Removed {
                versions.push(tool.clone());
            }
        }
        let policy = self.policy.load();
        let after = Family::new(versions, policy.default_of(name)).map(Arc::new);
        let (old, new) = (
            before.as_ref().map(|f| f.default().clone()),
            after.as_ref().map(|f| f.default().clone()),
        );
        match &after {
            Some(family) => {
                if self
                    .families
                    .insert(name.to_owned(), family.clone())
                    .is_none()
                {
                    self.ordered
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(name.into());
                }
            }
            None => {
                if self.families.remove(name).is_some() {
                    self.ordered
                        .write()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(name);
                }
            }
        }
        match (old, new) {
            (None, None) => None,
            (None, Some(new)) => Some((ChangeKind::Added, new)),
            (Some(old), None) => Some((ChangeKind::Removed, old)),
            (Some(old), Some(new)) => (old != new).then_some((ChangeKind::Updated, new)),
        }
    }

    /// Broadcasts a version's change and its family default's: as one
    /// event when they are the same change.
    fn send(&self, version: Change, default: Option<Change>) {
        match default {
            Some(default) if default.0 == version.0 && Arc::ptr_eq(&default.1, &version.1) => {
                self.emit(version, Scope::Both);
            }
            Some(default) => {
                self.emit(version, Scope::Version);
                self.emit(default, Scope::Default);
            }
            None => self.emit(version, Scope::Version),
        }
    }

    fn emit(&self, (kind, tool): Change, scope: Scope) {
        let size = tool.size();
        let published = self.published.fetch_add(size, Ordering::Relaxed) + size;
        // No receiver is not an error: nobody is watching.
        let _ = self.events.send(CatalogEvent {
            kind,
            tool,
            published,
            scope,
        });
    }

    /// Puts the operator's version policy in force, moving each family's
    /// default as it says (and telling watchers).
    pub(crate) fn set_policy(&self, policy: Arc<VersionPolicy>) {
        let _publishing = self.publish.lock().unwrap_or_else(PoisonError::into_inner);
        self.policy.store(policy);
        let names: Vec<String> = self.families.iter().map(|f| f.key().clone()).collect();
        for name in names {
            if let Some(default) = self.refamily(&name, None) {
                self.emit(default, Scope::Default);
            }
        }
    }

    /// The operator's version policy in force, read without touching its
    /// reference count (every call by name reads it).
    pub(crate) fn policy(&self) -> arc_swap::Guard<Arc<VersionPolicy>> {
        self.policy.load()
    }

    /// Bytes of every event sent so far: a watcher whose last event has a
    /// [`CatalogEvent::published`] this far behind is that far behind.
    pub(crate) fn published_bytes(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Keys of every version the view holds.
    pub(crate) fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.key().clone()).collect()
    }

    /// One version, by key (`name` for an unversioned tool).
    pub(crate) fn get(&self, key: &str) -> Option<Arc<ToolState>> {
        self.tools.get(key).map(|t| t.clone())
    }

    /// The live versions of `name`.
    pub(crate) fn family(&self, name: &str) -> Option<Arc<Family>> {
        self.families.get(name).map(|f| f.clone())
    }

    /// A definition this view served, by its digest.
    pub(crate) fn definition(&self, digest: &str) -> Option<Arc<pb::ToolDescriptor>> {
        self.seen.get(digest)
    }

    /// Each tool's default version, sorted by name.
    pub(crate) fn list(&self) -> Vec<Arc<ToolState>> {
        let mut tools: Vec<_> = self
            .families
            .iter()
            .map(|f| f.value().default().clone())
            .collect();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools
    }

    /// Up to `limit` tools' defaults that `keep` takes, in name order from
    /// `from` on (or, backwards, before it), until `keep` says stop: what
    /// a page costs is what it walks, not what the catalog holds. Also
    /// says whether names were left when it ended.
    pub(crate) fn walk(
        &self,
        from: Walk<'_>,
        limit: usize,
        keep: &mut dyn FnMut(&ToolState) -> Step,
    ) -> (Vec<Arc<ToolState>>, bool) {
        let mut found = Vec::new();
        let mut more = false;
        self.each_family(from, &mut |family| {
            if found.len() == limit {
                more = true;
                return ControlFlow::Break(());
            }
            match keep(family.default()) {
                Step::Take => found.push(family.default().clone()),
                Step::Skip => {}
                Step::Stop => return ControlFlow::Break(()),
            }
            ControlFlow::Continue(())
        });
        (found, more)
    }

    /// Passes each tool's family to `visit`, in name order from `from`
    /// (or, backwards, before it), until `visit` breaks: the cost is the
    /// names visited, not the catalog.
    pub(crate) fn each_family(
        &self,
        from: Walk<'_>,
        visit: &mut dyn FnMut(&Arc<Family>) -> ControlFlow<()>,
    ) {
        let ordered = self.ordered.read().unwrap_or_else(PoisonError::into_inner);
        let range =
            |after: Bound<&str>, before: Bound<&str>| ordered.range::<str, _>((after, before));
        let names: Box<dyn Iterator<Item = &Arc<str>>> = match from {
            Walk::From(start) => Box::new(range(Bound::Included(start), Bound::Unbounded)),
            Walk::After(name) => Box::new(range(Bound::Excluded(name), Bound::Unbounded)),
            Walk::Before(name) => Box::new(range(Bound::Unbounded, Bound::Excluded(name)).rev()),
        };
        for name in names {
            // The map's guard is let go before `visit` runs.
            let Some(family) = self.families.get(&**name).map(|f| f.clone()) else {
                continue;
            };
            if visit(&family).is_break() {
                return;
            }
        }
    }

    /// How many tool versions the view serves.
    pub(crate) fn version_count(&self) -> usize {
        self.tools.len()
    }

    /// How many tools (names) the view holds.
    pub(crate) fn len(&self) -> usize {
        self.families.len()
    }

    /// Every version, sorted by key.
    pub(crate) fn list_all(&self) -> Vec<Arc<ToolState>> {
        by_key(&self.tools)
    }

    /// The current defaults (or, `all_versions`, every version) and a
    /// receiver of every later change.
    pub(crate) fn watch(
        &self,
        all_versions: bool,
    ) -> (Vec<Arc<ToolState>>, broadcast::Receiver<CatalogEvent>) {
        let _publishing = self.publish.lock().unwrap_or_else(PoisonError::into_inner);
        let snapshot = if all_versions {
            self.list_all()
        } else {
            self.list()
        };
        (snapshot, self.events.subscribe())
    }
}

/// The states of `map`, sorted by key.
fn by_key(map: &DashMap<String, Arc<ToolState>>) -> Vec<Arc<ToolState>> {
    let mut states: Vec<_> = map
        .iter()
        .map(|t| (t.key().clone(), t.value().clone()))
        .collect();
    states.sort_by(|a, b| a.0.cmp(&b.0));
    states.into_iter().map(|(_, t)| t).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use toolmesh_proto::pb::ToolDescriptor;

    use super::*;
    use crate::catalog::store::model::Instance;

    fn state(version: &str, instances: &[&str]) -> ToolState {
        ToolState::new(
            Arc::new(ToolDescriptor {
                name: "t".into(),
                version: version.into(),
                ..Default::default()
            }),
            instances
                .iter()
                .map(|id| {
                    Arc::new(Instance {
                        id: (*id).into(),
                        endpoint: "http://x".into(),
                        execute_key: None,
                    })
                })
                .collect(),
        )
    }

    #[test]
    fn changes_become_events_and_repeats_do_not() {
        let view = CatalogView::default();
        let (snapshot, mut events) = view.watch(false);
        assert!(snapshot.is_empty());
        assert_eq!(
            view.apply("t", Some(state("1", &["a"]))),
            Some(ChangeKind::Added)
        );
        assert_eq!(view.apply("t", Some(state("1", &["a"]))), None);
        assert_eq!(
            view.apply("t", Some(state("1", &["a", "b"]))),
            Some(ChangeKind::Updated)
        );
        assert_eq!(
            view.apply("t", Some(state("1", &[]))),
            Some(ChangeKind::Removed)
        );
        assert_eq!(view.apply("t", None), None);
        let kinds: Vec<_> = std::iter::from_fn(|| events.try_recv().ok())
            .map(|e| e.kind)
            .collect();
        assert_eq!(
            kinds,
            [ChangeKind::Added, ChangeKind::Updated, ChangeKind::Removed]
        );
    }
}
