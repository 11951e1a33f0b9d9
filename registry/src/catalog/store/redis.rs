//! The distributed engine: the catalog in Redis, shared by every registry
//! replica.
//!
//! Every write is one Lua script (`redis/*.lua`) touching keys under one
//! hash tag, so it is atomic on standalone Redis and on Cluster alike, and
//! lease times come from Redis's clock. Each script publishes the names of
//! the tools it changed; every replica reloads those tools into its
//! [`CatalogView`], so reads (and `Invoke`) never wait on Redis. A full
//! resync runs on (re)subscribe and every few seconds, healing any lost
//! message.
//!
//! While Redis is away the view keeps serving; heartbeats are accepted and
//! remembered, then written back (re-creating leases Redis lost) when it
//! returns. Until this replica has written back, it neither resyncs nor
//! reloads: a Redis that came back empty would empty its view and its
//! record of the leases to write back. The write-back runs at the next
//! maintenance tick, or sooner, before the first announce, withdraw or
//! heartbeat that finds Redis answering. Leases are swept by whichever
//! replica gets there first, but not until one TTL after Redis returns, so
//! every replica has written back.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError, atomic::AtomicUsize},
    time::Duration,
};

use prost::Message as _;
use redis::Script;
use tokio::time::Instant;
use toolmesh_proto::pb::ToolDescriptor;

use crate::{
    catalog::store::model::{Announcement, Lease, lease_tag},
    catalog::store::{CatalogStore, Resident, memory::Limits},
    catalog::{descriptor, versions},
    error::RegistryError,
    metrics::RedisOp,
    redis_pool::{RedisError, RedisPool},
};

mod background;
mod records;
mod repair;

use records::{LeaseRecord, stored_address, tool_state};

const COMMON: &str = include_str!("redis/common.lua");

/// Most leases one sweep drops.
const SWEEP_BATCH: usize = 256;
/// How often the whole catalog is reloaded, to heal lost pub/sub messages.
const RESYNC_EVERY: Duration = Duration::from_secs(5);
/// Longest pause between pub/sub reconnect attempts.
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(500);

struct Scripts {
    announce: Script,
    heartbeat: Script,
    withdraw: Script,
    sweep: Script,
    restore: Script,
    presence: Script,
}

impl Scripts {
    fn new() -> Self {
        let script = |body: &str| Script::new(&format!("{COMMON}\n{body}"));
        Self {
            announce: script(include_str!("redis/announce.lua")),
            heartbeat: script(include_str!("redis/heartbeat.lua")),
            withdraw: script(include_str!("redis/withdraw.lua")),
            sweep: script(include_str!("redis/sweep.lua")),
            restore: script(include_str!("redis/restore.lua")),
            presence: script(include_str!("redis/presence.lua")),
        }
    }
}

#[derive(Default)]
struct Local {
    /// Every lease in Redis at the last resync, plus those announced here
    /// or learned by a reload since.
    leases: HashMap<String, LeaseRecord>,
    /// Leases heartbeated while Redis was away, to write back.
    /// Each with the owner that heartbeated it.
    pending: HashMap<String, String>,
    /// When Redis answered again after an outage; no sweeping for a TTL.
    recovered_at: Option<Instant>,
    /// Redis failed and this replica has not written back since.
    awaiting_write_back: bool,
}

/// Settings of the Redis catalog.
#[derive(Debug, Clone)]
pub(crate) struct RedisStoreSettings {
    /// Hash tag all catalog keys live under, e.g. `toolmesh` → `{toolmesh}:…`.
    pub prefix: String,
    /// Lease TTL.
    pub ttl: Duration,
    /// Bounds on the catalog.
    pub limits: Limits,
    /// This replica's id (for the replica count).
    pub replica_id: String,
}

/// The Redis [`CatalogStore`].
pub(crate) struct RedisStore {
    resident: Resident,
    /// `true` once a full resync succeeded.
    loaded: tokio::sync::watch::Sender<bool>,
    pool: Arc<RedisPool>,
    tag: String,
    settings: RedisStoreSettings,
    scripts: Scripts,
    local: Mutex<Local>,
    /// Held while writing back after an outage, so callers that find Redis
    /// back at the same moment recover once between them.
    recovery: tokio::sync::Mutex<()>,
    replicas: Arc<AtomicUsize>,
}

impl RedisStore {
    /// A store over `pool`, with its subscriber and maintenance tasks running
    /// on the current runtime until the store is dropped.
    pub(crate) fn new(pool: Arc<RedisPool>, settings: RedisStoreSettings) -> Arc<Self> {
        let store = Arc::new(Self {
            resident: Resident::default(),
            loaded: tokio::sync::watch::Sender::new(false),
            pool,
            tag: format!("{{{}}}", settings.prefix),
            settings,
            scripts: Scripts::new(),
            local: Mutex::new(Local::default()),
            recovery: tokio::sync::Mutex::new(()),
            replicas: Arc::new(AtomicUsize::new(1)),
        });
        tokio::spawn(background::subscribe(Arc::downgrade(&store)));
        tokio::spawn(background::maintain(Arc::downgrade(&store)));
        store
    }

    /// Live replicas as last seen in Redis (at least 1), for limiters that
    /// split a limit between replicas while Redis is away.
    pub(crate) fn replica_count(&self) -> Arc<AtomicUsize> {
        self.replicas.clone()
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether Redis failed and this replica has not written back since:
    /// what Redis holds now may lack leases only this replica knows.
    fn awaiting_write_back(&self) -> bool {
        self.local().awaiting_write_back
    }

    /// A heartbeat while Redis is away: the sidecar's lease is kept alive
    /// here and written back when Redis returns.
    fn keep_locally(
        &self,
        lease_id: &str,
        owner: &str,
        error: &RedisError,
    ) -> Result<Duration, RegistryError> {
        let mut local = self.local();
        if local.leases.get(lease_id).is_some_and(|l| l.owner != owner) {
            return Err(super::lease_held_by_another());
        }
        if local.pending.len() < self.settings.limits.max_instances {
            local.pending.insert(lease_id.to_owned(), owner.to_owned());
        }
        tracing::debug!(lease = %lease_tag(lease_id), %error, "heartbeat kept locally while redis is away");
        Ok(self.settings.ttl)
    }

    fn ttl_ms(&self) -> u64 {
        u64::try_from(self.settings.ttl.as_millis()).unwrap_or(u64::MAX)
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.tag)
    }

    /// Reloads one tool from Redis into the view, and learns the leases of
    /// the instances it did not show before: after an outage, every replica
    /// writes back the leases behind everything its view shows.
    async fn reload(&self, name: &str) -> Result<(), RedisError> {
        let (descriptor_key, instances_key) = (
            self.key(&format!("tool:{name}")),
            self.key(&format!("tool:{name}:inst")),
        );
        let (descriptor, instances): (Option<Vec<u8>>, HashMap<String, String>) = self
            .pool
            .run(RedisOp::LoadTool, async |conn| {
                redis::pipe()
                    .get(&descriptor_key)
                    .hgetall(&instances_key)
                    .query_async(conn)
                    .await
            })
            .await?;
        let shown = self.resident.view.get(name);
        let new: Vec<String> = instances
            .keys()
            .filter(|id| {
                !shown
                    .as_ref()
                    .is_some_and(|t| t.instances.iter().any(|i| &i.id == *id))
            })
            .cloned()
            .collect();
        self.resident.view.apply(
            name,
            tool_state(descriptor.as_deref(), instances, shown.as_deref()),
        );
        for instance in new {
            self.learn_lease(&instance).await?;
        }
        Ok(())
    }

    /// Records the lease `instance` holds in Redis, unless it is known.
    async fn learn_lease(&self, instance: &str) -> Result<(), RedisError> {
        let instance_key = self.key(&format!("inst:{instance}"));
        let lease: Option<String> = self
            .pool
            .run(RedisOp::InstanceLease, async |conn| {
                redis::cmd("GET").arg(&instance_key).query_async(conn).await
            })
            .await?;
        let Some(lease) = lease.filter(|l| !self.local().leases.contains_key(l)) else {
            return Ok(());
        };
        let lease_key = self.key(&format!("lease:{lease}"));
        let fields: HashMap<String, String> = self
            .pool
            .run(RedisOp::ReadLease, async |conn| {
                redis::cmd("HGETALL")
                    .arg(&lease_key)
                    .query_async(conn)
                    .await
            })
            .await?;
        if let Some(record) = LeaseRecord::from_fields(&fields) {
            self.local().leases.insert(lease, record);
        }
        Ok(())
    }

    async fn announce_once(
        &self,
        a: &Announcement,
        lease_id: &str,
    ) -> Result<AnnounceReply, RegistryError> {
        let mut invocation = self.scripts.announce.prepare_invoke();
        invocation
            .key(self.key("tools"))
            .arg(&self.tag)
            .arg(&a.instance_id)
            .arg(stored_address(&a.endpoint, a.execute_key.as_ref()))
            .arg(lease_id)
            .arg(self.ttl_ms())
            .arg(self.settings.limits.max_instances)
            .arg(self.settings.limits.max_tools)
            .arg(&a.owner.name)
            .arg(a.owner.max_instances.unwrap_or(0))
            .arg(a.owner.max_tools.unwrap_or(0))
            .arg(a.tools.len());
        for tool in &a.tools {
            invocation
                .arg(versions::key(tool))
                .arg(tool.encode_to_vec());
        }
        let reply: Vec<Vec<u8>> = self
            .pool
            .run(RedisOp::Announce, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await
            .map_err(unavailable)?;
        let text = |i: usize| {
            reply
                .get(i)
                .map(|b| String::from_utf8_lossy(b).into_owned())
                .unwrap_or_default()
        };
        match text(0).as_str() {
            "ok" => Ok(AnnounceReply::Ok((1..reply.len()).map(text).collect())),
            "conflict" => {
                let live = reply
                    .get(2)
                    .and_then(|b| ToolDescriptor::decode(b.as_slice()).ok())
                    .unwrap_or_default();
                Ok(AnnounceReply::Conflict(text(1), Box::new(live)))
            }
            "full" => Err(RegistryError::CatalogFull(format!(
                "the {} limit is reached",
                text(1)
            ))),
            "denied" if text(1) == "instance" => Err(super::instance_held_by_another(&text(2))),
            "denied" => Err(super::tool_held_by_another(&text(2))),
            "owner_full" => Err(super::owner_full(
                &a.owner.name,
                a.owner.max_instances.unwrap_or(0),
            )),
            "owner_tools_full" => Err(super::owner_tools_full(
                &a.owner.name,
                a.owner.max_tools.unwrap_or(0),
            )),
            other => Err(unavailable(RedisError::Redis(format!(
                "unexpected announce reply {other:?}"
            )))),
        }
    }
}

enum AnnounceReply {
    Ok(Vec<String>),
    Conflict(String, Box<ToolDescriptor>),
}

fn unavailable(error: RedisError) -> RegistryError {
    RegistryError::StoreUnavailable {
        reason: error.to_string(),
    }
}

#[async_trait::async_trait]
impl CatalogStore for RedisStore {
    async fn announce(&self, mut a: Announcement) -> Result<Lease, RegistryError> {
        self.recover().await.map_err(unavailable)?;
        let lease_id = uuid::Uuid::new_v4().to_string();
        // A conflict whose only difference is formatting is no conflict:
        // adopt the live descriptor and try again (bounded by the tool count).
        for _ in 0..=a.tools.len() {
            match self.announce_once(&a, &lease_id).await? {
                AnnounceReply::Ok(touched) => {
                    self.local().leases.insert(
                        lease_id.clone(),
                        LeaseRecord {
                            instance: a.instance_id.clone(),
                            address: stored_address(&a.endpoint, a.execute_key.as_ref()),
                            tools: a.tools.iter().map(versions::key).collect(),
                            owner: a.owner.name.clone(),
                            announced_ms: Some(super::model::epoch_ms()),
                        },
                    );
                    for name in touched {
                        // Read your own writes; the pub/sub echo is then a no-op.
                        let _ = self.reload(&name).await;
                    }
                    return Ok(Lease {
                        id: lease_id,
                        ttl: self.settings.ttl,
                        held: Vec::new(),
                    });
                }
                AnnounceReply::Conflict(key, live) => {
                    let Some(tool) = a.tools.iter_mut().find(|t| versions::key(t) == key) else {
                        break;
                    };
                    let differences = descriptor::differences(&live, tool);
                    if !differences.is_empty() {
                        return Err(RegistryError::DescriptorConflict {
                            tool: tool.name.clone(),
                            differences,
                        });
                    }
                    *tool = *live;
                }
            }
        }
        Err(unavailable(RedisError::Redis(
            "announce did not settle".into(),
        )))
    }

    async fn heartbeat(&self, lease_id: &str, owner: &str) -> Result<Duration, RegistryError> {
        let invocation = {
            let mut i = self.scripts.heartbeat.prepare_invoke();
            i.key(self.key("tools"))
                .arg(&self.tag)
                .arg(lease_id)
                .arg(self.ttl_ms())
                .arg(owner);
            i
        };
        let run = || {
            self.pool.run(RedisOp::Heartbeat, async |conn| {
                invocation.invoke_async::<i64>(conn).await
            })
        };
        let mut answer = run().await;
        // Redis answers but lacks the lease, and this replica has not
        // written back since an outage: the lease may be one Redis lost.
        if matches!(answer, Ok(0)) && self.awaiting_write_back() {
            answer = match self.recover().await {
                Ok(()) => run().await,
                Err(error) => Err(error),
            };
        }
        match answer {
            Ok(1) => Ok(self.settings.ttl),
            Ok(-1) => Err(super::lease_held_by_another()),
            Ok(_) => Err(RegistryError::LeaseNotFound {
                lease: lease_id.to_owned(),
            }),
            Err(error) => self.keep_locally(lease_id, owner, &error),
        }
    }

    async fn withdraw(&self, lease_id: &str, owner: &str) -> Result<(), RegistryError> {
        self.recover().await.map_err(unavailable)?;
        let invocation = {
            let mut i = self.scripts.withdraw.prepare_invoke();
            i.key(self.key("tools"))
                .arg(&self.tag)
                .arg(lease_id)
                .arg(owner);
            i
        };
        let mut reply: Vec<String> = self
            .pool
            .run(RedisOp::Withdraw, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await
            .map_err(unavailable)?;
        if reply.first().map(String::as_str) != Some("ok") {
            return Err(super::lease_held_by_another());
        }
        let touched = reply.split_off(1);
        let record = {
            let mut local = self.local();
            local.pending.remove(lease_id);
            local.leases.remove(lease_id)
        };
        if !touched.is_empty() {
            let instance = record.map(|r| r.instance).unwrap_or_default();
            tracing::info!(%instance, lease = %lease_tag(lease_id), "lease withdrawn");
        }
        for name in touched {
            let _ = self.reload(&name).await;
        }
        Ok(())
    }

    fn resident(&self) -> &Resident {
        &self.resident
    }

    fn lease_count(&self) -> usize {
        self.local().leases.len()
    }

    async fn instances(&self) -> Result<Vec<super::model::InstanceLease>, RegistryError> {
        let expiry = self.key("expiry");
        // Redis's clock and every lease's expiry on it, in one round trip.
        let ((seconds, micros), expiries): ((u64, u64), Vec<(String, f64)>) = self
            .pool
            .run(RedisOp::ReadLease, async |conn| {
                redis::pipe()
                    .cmd("TIME")
                    .cmd("ZRANGE")
                    .arg(&expiry)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(unavailable)?;
        let now_ms = seconds * 1000 + micros / 1000;
        let expiries: HashMap<String, f64> = expiries.into_iter().collect();
        Ok(self
            .local()
            .leases
            .iter()
            .map(|(lease, record)| super::model::InstanceLease {
                id: record.instance.clone(),
                endpoint: record
                    .address
                    .split_once(' ')
                    .map_or(record.address.as_str(), |(endpoint, _)| endpoint)
                    .to_owned(),
                owner: record.owner.clone(),
                tools: record.tools.clone(),
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                expires_in: expiries
                    .get(lease)
                    .map(|at| Duration::from_millis((*at as u64).saturating_sub(now_ms))),
                announced_ms: record.announced_ms,
            })
            .collect())
    }

    async fn loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        // The sender lives as long as the store, and so does `self`.
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }
}

#[cfg(test)]
mod tests;
