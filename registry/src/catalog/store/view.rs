//! The local, read-optimized view of the catalog every engine serves reads
//! from, and the change events it derives.
//!
//! Engines decide what a tool looks like now and hand it to
//! [`CatalogView::apply`]; the view compares it with what it held, updates
//! its map and broadcasts `Added` / `Updated` / `Removed`. Applying and
//! subscribing take the same lock, so [`CatalogView::watch`] hands out a
//! snapshot and a receiver with no gap and no overlap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use dashmap::DashMap;
use tokio::sync::broadcast;
use toolmesh_proto::pb;

use super::{
    model::{CatalogEvent, ChangeKind, ToolState},
    seen::Seen,
};

/// Capacity of the change channel; a watcher further behind than this is
/// told to watch again.
pub(crate) const EVENT_BUFFER: usize = 1024;

/// Tools by name, and the channel their changes go out on.
pub struct CatalogView {
    tools: DashMap<String, Arc<ToolState>>,
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
            seen: Seen::default(),
            events: broadcast::channel(EVENT_BUFFER).0,
            published: AtomicU64::new(0),
            publish: Mutex::new(()),
        }
    }
}

impl CatalogView {
    /// Sets the state of `name` (`None`: it has no live instance) and
    /// broadcasts the change, if there is one. Returns the change.
    pub(crate) fn apply(&self, name: &str, after: Option<ToolState>) -> Option<ChangeKind> {
        let _publishing = self.publish.lock().unwrap_or_else(PoisonError::into_inner);
        let after = after.filter(|t| !t.instances.is_empty()).map(Arc::new);
        if let Some(after) = &after {
            self.seen.saw(after);
        }
        let before = self.tools.get(name).map(|t| t.clone());
        let (kind, tool) = match (before, after) {
            (None, None) => return None,
            (None, Some(after)) => {
                self.tools.insert(name.to_owned(), after.clone());
                (ChangeKind::Added, after)
            }
            (Some(before), None) => {
                self.tools.remove(name);
                (ChangeKind::Removed, before)
            }
            (Some(before), Some(after)) => {
                if before == after {
                    return None;
                }
                self.tools.insert(name.to_owned(), after.clone());
                (ChangeKind::Updated, after)
            }
        };
        let size = tool.size();
        let published = self.published.fetch_add(size, Ordering::Relaxed) + size;
        // No receiver is not an error: nobody is watching.
        let _ = self.events.send(CatalogEvent {
            kind,
            tool,
            published,
        });
        Some(kind)
    }

    /// Bytes of every event sent so far: a watcher whose last event has a
    /// [`CatalogEvent::published`] this far behind is that far behind.
    pub(crate) fn published_bytes(&self) -> u64 {
        self.published.load(Ordering::Relaxed)
    }

    /// Names of every tool the view holds.
    pub(crate) fn names(&self) -> Vec<String> {
        self.tools.iter().map(|t| t.key().clone()).collect()
    }

    /// One tool.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<ToolState>> {
        self.tools.get(name).map(|t| t.clone())
    }

    /// A definition this view served, by its digest.
    pub(crate) fn definition(&self, digest: &str) -> Option<Arc<pb::ToolDescriptor>> {
        self.seen.get(digest)
    }

    /// Every tool, sorted by name.
    pub(crate) fn list(&self) -> Vec<Arc<ToolState>> {
        let mut tools: Vec<_> = self.tools.iter().map(|t| t.value().clone()).collect();
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        tools
    }

    /// The current tools and a receiver of every later change.
    pub(crate) fn watch(&self) -> (Vec<Arc<ToolState>>, broadcast::Receiver<CatalogEvent>) {
        let _publishing = self.publish.lock().unwrap_or_else(PoisonError::into_inner);
        (self.list(), self.events.subscribe())
    }
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
        let (snapshot, mut events) = view.watch();
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
