//! Engines under the catalog. The registry's logic talks to a
//! [`CatalogStore`] and never knows which one it runs on.
//!
//! - [`memory`]: one process, state in memory (the embedded default).
//! - `redis`: the catalog in Redis, shared by every replica.
//! - `view`: the local copy of the catalog every engine serves reads from.

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use tokio::sync::broadcast;

use crate::{
    access::audit::{AuditLog, Outcome, RegistrationAction, RegistrationRecord},
    catalog::store::model::{Announcement, CatalogEvent, Lease, ToolState},
    error::RegistryError,
    metrics::Metrics,
};

#[cfg(test)]
mod conformance;
pub mod memory;
pub(crate) mod model;
pub(crate) mod redis;
pub(crate) mod seen;
pub(crate) mod view;

pub use view::CatalogView;

/// Where descriptors, instances and leases live.
///
/// Reads (`get`, `list`, `watch`) are synchronous: they serve the hot path
/// from local memory on every engine. Writes are async and atomic: an
/// announce that conflicts with live instances changes nothing.
#[async_trait::async_trait]
pub trait CatalogStore: Send + Sync + 'static {
    /// Registers an instance and its tools under a new lease, replacing any
    /// earlier lease of the same instance id. `PermissionDenied` if another
    /// owner holds one of the tools or the instance id, or the owner holds
    /// its most instances.
    async fn announce(&self, announcement: Announcement) -> Result<Lease, RegistryError>;
    /// Extends a lease by the TTL; `LeaseNotFound` if it is unknown,
    /// `PermissionDenied` if another owner holds it.
    async fn heartbeat(&self, lease_id: &str, owner: &str) -> Result<Duration, RegistryError>;
    /// Ends a lease; an unknown lease is not an error, another owner's is
    /// `PermissionDenied`.
    async fn withdraw(&self, lease_id: &str, owner: &str) -> Result<(), RegistryError>;
    /// What this engine keeps in this process.
    fn resident(&self) -> &Resident;
    /// One tool version by key (`name@version`, or `name` when
    /// unversioned), if it has a live instance.
    fn get(&self, key: &str) -> Option<Arc<ToolState>> {
        self.resident().view.get(key)
    }
    /// The live versions of `name`.
    fn family(&self, name: &str) -> Option<Arc<crate::catalog::versions::Family>> {
        self.resident().view.family(name)
    }
    /// A definition this process served, by its digest.
    fn definition(&self, digest: &str) -> Option<Arc<toolmesh_proto::pb::ToolDescriptor>> {
        self.resident().view.definition(digest)
    }
    /// Each tool's default version, sorted by name.
    fn list(&self) -> Vec<Arc<ToolState>> {
        self.resident().view.list()
    }
    /// Every live version of every tool, sorted by key.
    fn list_all(&self) -> Vec<Arc<ToolState>> {
        self.resident().view.list_all()
    }
    /// A page of tools' defaults, walked in name order
    /// ([`view::CatalogView::walk`]).
    fn walk(
        &self,
        from: view::Walk<'_>,
        limit: usize,
        keep: &mut dyn FnMut(&ToolState) -> view::Step,
    ) -> (Vec<Arc<ToolState>>, bool) {
        self.resident().view.walk(from, limit, keep)
    }
    /// Each tool's family, in name order from `from`, until `visit` breaks
    /// ([`view::CatalogView::each_family`]).
    fn each_family(
        &self,
        from: view::Walk<'_>,
        visit: &mut dyn FnMut(&Arc<crate::catalog::versions::Family>) -> std::ops::ControlFlow<()>,
    ) {
        self.resident().view.each_family(from, visit);
    }
    /// How many tool versions are live.
    fn version_count(&self) -> usize {
        self.resident().view.version_count()
    }
    /// How many tools (names) are live.
    fn tool_count(&self) -> usize {
        self.resident().view.len()
    }
    /// The current tools (each default, or every version) and a receiver
    /// of every later change, taken atomically.
    fn watch(
        &self,
        all_versions: bool,
    ) -> (Vec<Arc<ToolState>>, broadcast::Receiver<CatalogEvent>) {
        self.resident().view.watch(all_versions)
    }
    /// Bytes of every change event published so far.
    fn published_bytes(&self) -> u64 {
        self.resident().view.published_bytes()
    }
    /// Records every lease that expires to `audit` from now on (only the
    /// first log given is kept).
    fn audit_expiries(&self, audit: AuditLog) {
        let _ = self.resident().expiries.audit.set(audit);
    }
    /// Counts every lease that expires in `metrics` from now on (only the
    /// first given is kept).
    fn count_expiries(&self, metrics: Arc<Metrics>) {
        let _ = self.resident().expiries.metrics.set(metrics);
    }
    /// Live leases as this engine knows them (in Redis mode, as of the
    /// last resync plus the changes seen since).
    fn lease_count(&self) -> usize;
    /// Every live instance with its registrant, tools and lease (in Redis
    /// mode, the leases this replica knows, with their expiries read from
    /// Redis).
    async fn instances(&self) -> Result<Vec<model::InstanceLease>, RegistryError>;
    /// Completes once the catalog has been loaded from its engine: at once
    /// in memory; in Redis mode after the first full resync.
    async fn loaded(&self);
}

/// What every engine keeps in this process: the local copy of the catalog
/// its reads are served from, and where it tells of the leases that
/// expire.
#[derive(Default)]
pub struct Resident {
    pub(crate) view: CatalogView,
    pub(crate) expiries: Expiries,
}

/// Where an engine tells of the leases that expire: the metrics count them,
/// the audit log records them; each set once, when the registry is wired.
#[derive(Default)]
pub struct Expiries {
    audit: OnceLock<AuditLog>,
    metrics: OnceLock<Arc<Metrics>>,
}

impl Expiries {
    /// A lease expired; `record` is its audit record, when this engine
    /// knew the lease.
    pub(crate) fn expired(&self, record: Option<RegistrationRecord>) {
        if let Some(metrics) = self.metrics.get() {
            metrics.lease_expired();
        }
        if let (Some(audit), Some(record)) = (self.audit.get(), record) {
            audit.record(record);
        }
    }
}

/// The audit record of a lease that expired.
pub(crate) fn expiry_record(
    owner: &str,
    instance: &str,
    endpoint: &str,
    tools: Vec<String>,
) -> RegistrationRecord {
    RegistrationRecord {
        caller: owner.to_owned(),
        action: RegistrationAction::Expire,
        instance: instance.to_owned(),
        endpoint: endpoint.to_owned(),
        tools,
        outcome: Outcome::Ok,
        reason: None,
        peer: None,
    }
}

/// An announce naming a tool whose live instances another registrant holds.
pub(crate) fn tool_held_by_another(tool: &str) -> RegistryError {
    RegistryError::PermissionDenied {
        reason: format!(
            "tool {} is served by another registrant's instances; only that registrant may add instances or change its descriptor",
            toolmesh_telemetry::shown::Quoted(tool)
        ),
    }
}

/// An announce reusing an instance id another registrant holds.
pub(crate) fn instance_held_by_another(instance: &str) -> RegistryError {
    RegistryError::PermissionDenied {
        reason: format!(
            "instance id {} is held by another registrant",
            toolmesh_telemetry::shown::Quoted(instance)
        ),
    }
}

/// A heartbeat or withdraw of another registrant's lease.
pub(crate) fn lease_held_by_another() -> RegistryError {
    RegistryError::PermissionDenied {
        reason: "the lease is held by another registrant".into(),
    }
}

/// An announce past the registrant's own bound on tool names.
pub(crate) fn owner_tools_full(owner: &str, max: usize) -> RegistryError {
    RegistryError::CatalogFull(format!(
        "registrant {owner:?} would hold more than {max} tools, its max_tools (its own, or its share of --max-tools)"
    ))
}

/// An announce past the registrant's own instance cap.
pub(crate) fn owner_full(owner: &str, max: usize) -> RegistryError {
    RegistryError::CatalogFull(format!(
        "registrant {owner:?} holds {max} live instances, its max_instances"
    ))
}
