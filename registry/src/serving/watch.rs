//! `WatchTools` streams whose memory does not depend on how fast (or
//! whether) the client reads.
//!
//! - A stream holds no copies: it pulls the next event when tonic asks for
//!   one, which tonic does only when HTTP/2 flow control lets it send. The
//!   snapshot and the change events are `Arc`s shared with the catalog and
//!   every other watcher; only the one event being sent is encoded.
//! - A watcher that falls behind by more than [`WatchLimits::lag_events`]
//!   events or [`WatchLimits::lag_bytes`] bytes of events is ended with
//!   `ABORTED` ("watch again": the new stream starts with the full list, so
//!   nothing is lost). The change channel itself keeps at most
//!   [`crate::catalog::store::view::EVENT_BUFFER`] events, shared by all watchers.
//! - [`Watchers`] caps the streams open at once, in total and per
//!   connection (`RESOURCE_EXHAUSTED` beyond).
//! - A stream shows only the tools its caller may call ([`Visibility`]),
//!   under the call policy in force when it started; when the policy
//!   changes, it ends with `ABORTED`, and the new stream shows what the new
//!   policy allows.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use futures::Stream;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio_util::sync::CancellationToken;
use tonic::Status;
use toolmesh_proto::pb;

use crate::access::auth::{Caller, Policy};
use crate::access::{Access, allows};
use crate::catalog::{Catalog, CatalogEvent, ChangeKind, ToolState};
use crate::error::RegistryError;

/// How often a stream looks for a new call policy.
const POLICY_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Which tools one watcher sees: those its caller may call, under the
/// policy in force when it started watching.
#[derive(Debug)]
pub(crate) struct Visibility {
    access: Arc<Access>,
    caller: Caller,
    policy: Option<Arc<Policy>>,
}

impl Visibility {
    /// What `caller` sees under `access`'s policy now.
    pub(crate) fn new(access: Arc<Access>, caller: Caller) -> Self {
        let policy = access.policy();
        Self {
            access,
            caller,
            policy,
        }
    }

    fn sees(&self, tool: &ToolState) -> bool {
        allows(self.policy.as_deref(), &self.caller, tool.name())
    }

    /// Whether another policy is in force now.
    fn is_stale(&self) -> bool {
        match (&self.policy, self.access.policy()) {
            (Some(then), Some(now)) => !Arc::ptr_eq(then, &now),
            (None, None) => false,
            _ => true,
        }
    }
}

/// Bounds on watch streams (the registry's flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WatchLimits {
    /// Most streams open at once.
    pub max_watchers: usize,
    /// Most streams open at once on one connection.
    pub max_per_connection: usize,
    /// A watcher this many events behind is ended.
    pub lag_events: usize,
    /// A watcher this many bytes of events behind is ended.
    pub lag_bytes: u64,
}

impl Default for WatchLimits {
    fn default() -> Self {
        Self {
            max_watchers: 1024,
            max_per_connection: 16,
            lag_events: 512,
            lag_bytes: 16 << 20,
        }
    }
}

/// The watch streams open now, by connection.
#[derive(Debug)]
pub(crate) struct Watchers {
    limits: WatchLimits,
    open: Arc<Mutex<Open>>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_peer: HashMap<Option<SocketAddr>, usize>,
}

/// One open stream's place; given back when dropped.
#[derive(Debug)]
pub(crate) struct WatchPermit {
    peer: Option<SocketAddr>,
    open: Arc<Mutex<Open>>,
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total -= 1;
        if let Some(count) = open.by_peer.get_mut(&self.peer) {
            *count -= 1;
            if *count == 0 {
                open.by_peer.remove(&self.peer);
            }
        }
    }
}

impl Watchers {
    /// No stream open yet.
    pub(crate) fn new(limits: WatchLimits) -> Self {
        Self {
            limits,
            open: Arc::default(),
        }
    }

    /// The limits streams are held to.
    pub(crate) fn limits(&self) -> WatchLimits {
        self.limits
    }

    /// A place for one more stream from `peer` (the connection's remote
    /// address; a TCP connection is one address), if the limits allow it.
    pub(crate) fn admit(&self, peer: Option<SocketAddr>) -> Result<WatchPermit, RegistryError> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.total >= self.limits.max_watchers {
            return Err(RegistryError::TooManyWatchers {
                reason: format!(
                    "the registry serves at most {} watch streams at once (--max-watchers)",
                    self.limits.max_watchers
                ),
            });
        }
        let on_peer = open.by_peer.get(&peer).copied().unwrap_or(0);
        if on_peer >= self.limits.max_per_connection {
            return Err(RegistryError::TooManyWatchers {
                reason: format!(
                    "at most {} watch streams per connection (--max-watchers-per-connection); one stream sees every change",
                    self.limits.max_per_connection
                ),
            });
        }
        open.total += 1;
        *open.by_peer.entry(peer).or_insert(0) += 1;
        Ok(WatchPermit {
            peer,
            open: self.open.clone(),
        })
    }

    /// How many streams are open.
    #[cfg(test)]
    pub(crate) fn open(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .total
    }
}

enum Phase {
    Snapshot(std::vec::IntoIter<Arc<ToolState>>),
    Synced,
    Live,
    Done,
}

/// One watch stream's state: where it is, and what it holds on to.
struct Watch {
    phase: Phase,
    changes: broadcast::Receiver<CatalogEvent>,
    catalog: Arc<Catalog>,
    limits: WatchLimits,
    shutdown: CancellationToken,
    visibility: Visibility,
    /// Every version, or each name's default.
    all_versions: bool,
    _permit: WatchPermit,
}

/// The `WatchTools` stream: `ADDED` for each current tool, `SYNCED`, then
/// every change, pulled one at a time as the client takes them.
pub(crate) fn stream(
    catalog: Arc<Catalog>,
    limits: WatchLimits,
    shutdown: CancellationToken,
    permit: WatchPermit,
    visibility: Visibility,
    all_versions: bool,
) -> impl Stream<Item = Result<pb::ToolEvent, Status>> + Send + 'static {
    let (snapshot, changes) = catalog.watch(all_versions);
    let snapshot: Vec<Arc<ToolState>> = snapshot
        .into_iter()
        .filter(|tool| visibility.sees(tool))
        .collect();
    let watch = Watch {
        phase: Phase::Snapshot(snapshot.into_iter()),
        changes,
        catalog,
        limits,
        shutdown,
        visibility,
        all_versions,
        _permit: permit,
    };
    futures::stream::unfold(watch, |mut watch| async move {
        let item = watch.next().await?;
        Some((item, watch))
    })
}

impl Watch {
    async fn next(&mut self) -> Option<Result<pb::ToolEvent, Status>> {
        match &mut self.phase {
            Phase::Snapshot(tools) => {
                if let Some(tool) = tools.next() {
                    let tool = self.catalog.describe(&tool);
                    return Some(Ok(event(ChangeKind::Added, Some(tool))));
                }
                self.phase = Phase::Synced;
                Some(Ok(pb::ToolEvent {
                    kind: pb::tool_event::Kind::Synced.into(),
                    tool: None,
                }))
            }
            Phase::Synced | Phase::Live => {
                self.phase = Phase::Live;
                let item = self.change().await;
                if item.is_err() {
                    self.phase = Phase::Done;
                }
                Some(item)
            }
            Phase::Done => None,
        }
    }

    async fn change(&mut self) -> Result<pb::ToolEvent, Status> {
        loop {
            let change = self.next_change().await?;
            let wanted = if self.all_versions {
                change.for_versions()
            } else {
                change.for_defaults()
            };
            if wanted && self.visibility.sees(&change.tool) {
                let tool = self.catalog.describe(&change.tool);
                return Ok(event(change.kind, Some(tool)));
            }
        }
    }

    async fn next_change(&mut self) -> Result<CatalogEvent, RegistryError> {
        let mut policy_check = tokio::time::interval(POLICY_CHECK);
        let next = loop {
            tokio::select! {
                () = self.shutdown.cancelled() => {
                    return Err(RegistryError::WatchInterrupted { reason: "registry shutting down" });
                }
                next = self.changes.recv() => break next,
                _ = policy_check.tick() => {
                    if self.visibility.is_stale() {
                        return Err(RegistryError::WatchOutdated {
                            reason: "the call policy changed".to_owned(),
                            again: "the new stream shows what it allows",
                        });
                    }
                }
            }
        };
        let CatalogEvent {
            kind,
            tool,
            published,
            scope,
        } = match next {
            Ok(event) => event,
            Err(RecvError::Lagged(missed)) => return Err(behind(format!("{missed} events"))),
            Err(RecvError::Closed) => {
                return Err(RegistryError::WatchInterrupted {
                    reason: "catalog closed",
                });
            }
        };
        let events_behind = self.changes.len();
        if events_behind > self.limits.lag_events {
            return Err(behind(format!("{events_behind} events")));
        }
        let bytes_behind = self.catalog.published_bytes().saturating_sub(published);
        if bytes_behind > self.limits.lag_bytes {
            return Err(behind(format!("{bytes_behind} bytes of events")));
        }
        Ok(CatalogEvent {
            kind,
            tool,
            published,
            scope,
        })
    }
}

fn behind(how_far: String) -> RegistryError {
    RegistryError::WatchOutdated {
        reason: format!("watcher fell {how_far} behind"),
        again: "the new stream starts with every tool",
    }
}

fn event(kind: ChangeKind, tool: Option<pb::Tool>) -> pb::ToolEvent {
    let kind = match kind {
        ChangeKind::Added => pb::tool_event::Kind::Added,
        ChangeKind::Updated => pb::tool_event::Kind::Updated,
        ChangeKind::Removed => pb::tool_event::Kind::Removed,
    };
    pb::ToolEvent {
        kind: kind.into(),
        tool,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], port)))
    }

    #[test]
    fn streams_are_capped_in_total_and_per_connection_and_given_back() {
        let watchers = Watchers::new(WatchLimits {
            max_watchers: 3,
            max_per_connection: 2,
            ..WatchLimits::default()
        });
        let a1 = watchers.admit(peer(1)).expect("first");
        let _a2 = watchers.admit(peer(1)).expect("second on the connection");
        assert!(matches!(
            watchers.admit(peer(1)),
            Err(RegistryError::TooManyWatchers { .. })
        ));
        let _b1 = watchers.admit(peer(2)).expect("another connection");
        assert!(matches!(
            watchers.admit(peer(3)),
            Err(RegistryError::TooManyWatchers { .. })
        ));
        drop(a1);
        assert_eq!(watchers.open(), 2);
        let _a3 = watchers.admit(peer(1)).expect("a place given back");
    }
}
