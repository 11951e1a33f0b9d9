//! What the catalog holds, as every engine stores it: the tools, their
//! live instances, the leases that keep them, and the changes watchers see.

use std::{sync::Arc, time::Duration};

use toolmesh_proto::{grant::CallKey, pb};

use crate::access::registrants::Owner;

/// A live sidecar instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// The id the sidecar announced with.
    pub id: String,
    /// The URL its `ToolRuntime` answers on.
    pub endpoint: String,
    /// The key its `Execute` grants are signed with (`None`: it announced
    /// none, and takes calls unsigned).
    pub execute_key: Option<CallKey>,
}

/// A tool as it is now: its descriptor and live instances (sorted by id).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolState {
    /// The descriptor every instance announced.
    pub descriptor: Arc<pb::ToolDescriptor>,
    /// Its digest ([`crate::catalog::descriptor::digest`]).
    pub digest: Arc<str>,
    /// The live instances, never empty while the tool is in the catalog.
    pub instances: Vec<Arc<Instance>>,
}

impl ToolState {
    /// The state of `descriptor`, served by `instances`, its digest
    /// computed.
    pub fn new(descriptor: Arc<pb::ToolDescriptor>, instances: Vec<Arc<Instance>>) -> Self {
        let digest = crate::catalog::descriptor::digest(&descriptor).into();
        Self {
            descriptor,
            digest,
            instances,
        }
    }

    /// The tool's name.
    pub fn name(&self) -> &str {
        &self.descriptor.name
    }

    /// Its catalog key: `name@version`, or the name if unversioned.
    pub fn key(&self) -> std::borrow::Cow<'_, str> {
        if self.descriptor.version.is_empty() {
            std::borrow::Cow::Borrowed(self.name())
        } else {
            std::borrow::Cow::Owned(crate::catalog::versions::key(&self.descriptor))
        }
    }

    /// About how many bytes its wire form takes, for bounding what a
    /// watcher may fall behind by.
    pub fn size(&self) -> u64 {
        use prost::Message as _;
        let instances = 64 * self.instances.len();
        u64::try_from(self.descriptor.encoded_len() + instances).unwrap_or(u64::MAX)
    }

    /// The wire form.
    pub fn to_proto(&self) -> pb::Tool {
        pb::Tool {
            descriptor: Some(self.descriptor.as_ref().clone()),
            instances: u32::try_from(self.instances.len()).unwrap_or(u32::MAX),
            digest: self.digest.to_string(),
            versions: Vec::new(),
            deprecation: String::new(),
        }
    }
}

/// What happened to a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// The tool got its first instance.
    Added,
    /// Its instances (or, with a single instance, its descriptor) changed.
    Updated,
    /// Its last instance left.
    Removed,
}

/// Whom a change concerns: watchers of every version, watchers of each
/// name's default version, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A version changed; its name's default did not.
    Version,
    /// A name's default moved to another version (or changed with the
    /// policy); the version's own change is a separate event.
    Default,
    /// A version changed, and it is (or was) its name's default.
    Both,
}

/// One change to the catalog.
#[derive(Debug, Clone)]
pub struct CatalogEvent {
    /// What happened.
    pub kind: ChangeKind,
    /// The tool after the change; for `Removed`, as it was.
    pub tool: Arc<ToolState>,
    /// Bytes of every event published up to and including this one
    /// ([`ToolState::size`]).
    pub published: u64,
    /// Whom it concerns.
    pub scope: Scope,
}

impl CatalogEvent {
    /// Whether watchers of every version see it.
    pub fn for_versions(&self) -> bool {
        self.scope != Scope::Default
    }

    /// Whether watchers of each name's default see it.
    pub fn for_defaults(&self) -> bool {
        self.scope != Scope::Version
    }
}

/// A validated announce.
#[derive(Debug, Clone)]
pub struct Announcement {
    /// The sidecar's instance id.
    pub instance_id: String,
    /// Where its `ToolRuntime` answers.
    pub endpoint: String,
    /// The key to sign its `Execute` grants with.
    pub execute_key: Option<CallKey>,
    /// Its tools; names are unique.
    pub tools: Vec<pb::ToolDescriptor>,
    /// Who announced it: only the same owner may add instances of its
    /// tools, reuse its instance id, renew or withdraw its lease.
    pub owner: Owner,
}

/// A granted lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The lease id to heartbeat and withdraw.
    pub id: String,
    /// How long it lasts without a heartbeat.
    pub ttl: Duration,
    /// The announced tools held in quarantine, by key.
    pub held: Vec<String>,
}

/// A live instance as the console lists it: who registered it, what it
/// serves, and how its lease stands. Never its lease id (a bearer token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceLease {
    /// The instance id.
    pub id: String,
    /// Its `ToolRuntime` URL.
    pub endpoint: String,
    /// The registrant that announced it (`""`: registration unauthenticated).
    pub owner: String,
    /// The keys of the tools it serves.
    pub tools: Vec<String>,
    /// Time left before the lease expires without a heartbeat, if known.
    pub expires_in: Option<std::time::Duration>,
    /// When it was announced, in milliseconds since the Unix epoch, if known.
    pub announced_ms: Option<u64>,
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// How logs name a lease ([`toolmesh_telemetry::shown::secret_tag`]): a
/// lease id is a bearer token, never logged whole.
pub fn lease_tag(lease_id: &str) -> String {
    toolmesh_telemetry::shown::secret_tag(lease_id)
}
