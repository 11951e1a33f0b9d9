//! Keeping the view and Redis in step: the write-back after an outage, the
//! resync, the lease sweep, the replicas' presence.

use std::collections::{HashMap, HashSet};

use prost::Message as _;
use tokio::time::Instant;

use super::{
    RedisStore, SWEEP_BATCH,
    records::{LeaseRecord, endpoint_of, tool_state},
};
use crate::{catalog::store::model::lease_tag, metrics::RedisOp, redis_pool::RedisError};

impl RedisStore {
    /// After an outage, once Redis answers: writes back every lease this
    /// replica knows, then resyncs. Every write goes through here first, or
    /// what it reloads from a Redis that came back empty would narrow the
    /// view (an announce) or refuse a lease about to be written back (a
    /// heartbeat). Nothing to do if it is done already.
    pub(super) async fn recover(&self) -> Result<(), RedisError> {
        let _recovering = self.recovery.lock().await;
        if !self.awaiting_write_back() {
            return Ok(());
        }
        // Redis must answer first: with no lease to write back, writing back
        // touches nothing and would pass for a recovery while it is away.
        self.presence().await?;
        self.local().recovered_at = Some(Instant::now());
        tracing::info!("redis is back; writing back leases and resyncing");
        self.write_back(true).await?;
        self.local().awaiting_write_back = false;
        if let Err(error) = self.resync().await {
            tracing::debug!(%error, "resync after the write-back failed; the periodic one heals it");
        }
        Ok(())
    }

    /// Reloads the whole catalog and every lease.
    pub(super) async fn resync(&self) -> Result<(), RedisError> {
        let (tools_key, expiry_key) = (self.key("tools"), self.key("expiry"));
        let (names, leases): (Vec<String>, Vec<String>) = self
            .pool
            .run(RedisOp::ListCatalog, async |conn| {
                redis::pipe()
                    .smembers(&tools_key)
                    .zrange(&expiry_key, 0, -1)
                    .query_async(conn)
                    .await
            })
            .await?;
        let mut tools = Vec::with_capacity(names.len());
        for name in &names {
            let (d, i) = (
                self.key(&format!("tool:{name}")),
                self.key(&format!("tool:{name}:inst")),
            );
            let state: (Option<Vec<u8>>, HashMap<String, String>) = self
                .pool
                .run(RedisOp::LoadTool, async |conn| {
                    redis::pipe().get(&d).hgetall(&i).query_async(conn).await
                })
                .await?;
            tools.push((name.clone(), state));
        }
        let mut records = HashMap::with_capacity(leases.len());
        for lease in leases {
            let key = self.key(&format!("lease:{lease}"));
            let fields: HashMap<String, String> = self
                .pool
                .run(RedisOp::ReadLease, async |conn| {
                    redis::cmd("HGETALL").arg(&key).query_async(conn).await
                })
                .await?;
            if let Some(record) = LeaseRecord::from_fields(&fields) {
                records.insert(lease, record);
            }
        }
        let present: HashSet<&String> = names.iter().collect();
        for (name, (descriptor, instances)) in tools {
            let shown = self.resident.view.get(&name);
            self.resident.view.apply(
                &name,
                tool_state(descriptor.as_deref(), instances, shown.as_deref()),
            );
        }
        for name in self.resident.view.names() {
            if !present.contains(&name) {
                self.resident.view.apply(&name, None);
            }
        }
        self.local().leases = records;
        self.loaded.send_replace(true);
        Ok(())
    }

    /// Writes back leases kept alive while Redis was away: those
    /// heartbeated here, and, right after an outage, every lease this replica
    /// knew of (Redis may have come back empty). The script only extends a
    /// lease Redis still has, and re-creates one it lost.
    pub(super) async fn write_back(&self, everything: bool) -> Result<(), RedisError> {
        let todo: Vec<(String, Option<LeaseRecord>, String)> = {
            let local = self.local();
            let mut leases: HashSet<&String> = local.pending.keys().collect();
            if everything {
                leases.extend(local.leases.keys());
            }
            leases
                .into_iter()
                .map(|l| {
                    let record = local.leases.get(l).cloned();
                    let owner = record
                        .as_ref()
                        .map(|r| r.owner.clone())
                        .or_else(|| local.pending.get(l).cloned())
                        .unwrap_or_default();
                    (l.clone(), record, owner)
                })
                .collect()
        };
        for (lease, record, owner) in todo {
            let mut invocation = self.scripts.restore.prepare_invoke();
            invocation
                .key(self.key("tools"))
                .arg(&self.tag)
                .arg(&lease)
                .arg(self.ttl_ms());
            match &record {
                Some(record) => {
                    let entries: Vec<(String, Vec<u8>)> = record
                        .tools
                        .iter()
                        .filter_map(|name| {
                            self.resident
                                .view
                                .get(name)
                                .map(|t| (name.clone(), t.descriptor.encode_to_vec()))
                        })
                        .collect();
                    invocation
                        .arg(&record.instance)
                        .arg(&record.address)
                        .arg(&record.owner)
                        .arg(entries.len());
                    for (name, bytes) in entries {
                        invocation.arg(name).arg(bytes);
                    }
                }
                None => {
                    invocation.arg("").arg("").arg(&owner).arg(0);
                }
            }
            let outcome: String = self
                .pool
                .run(RedisOp::Restore, async |conn| {
                    invocation.invoke_async(conn).await
                })
                .await?;
            if outcome != "extended" {
                tracing::info!(lease = %lease_tag(&lease), %outcome, "lease written back after a redis outage");
            }
            self.local().pending.remove(&lease);
        }
        Ok(())
    }

    /// Drops the leases whose time has passed, logging each.
    pub(super) async fn sweep(&self) -> Result<(), RedisError> {
        let invocation = {
            let mut i = self.scripts.sweep.prepare_invoke();
            i.key(self.key("tools")).arg(&self.tag).arg(SWEEP_BATCH);
            i
        };
        let expired: Vec<String> = self
            .pool
            .run(RedisOp::Sweep, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await?;
        for lease in expired {
            let record = self.local().leases.remove(&lease);
            let instance = record
                .as_ref()
                .map(|r| r.instance.clone())
                .unwrap_or_default();
            tracing::info!(%instance, lease = %lease_tag(&lease), "lease expired");
            self.resident.expiries.expired(record.map(|record| {
                crate::catalog::store::expiry_record(
                    &record.owner,
                    &record.instance,
                    endpoint_of(&record.address),
                    record.tools,
                )
            }));
        }
        Ok(())
    }

    pub(super) async fn presence(&self) -> Result<usize, RedisError> {
        let window = self.ttl_ms();
        let invocation = {
            let mut i = self.scripts.presence.prepare_invoke();
            i.key(self.key("tools"))
                .arg(&self.tag)
                .arg(&self.settings.replica_id)
                .arg(window);
            i
        };
        self.pool
            .run(RedisOp::Presence, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await
    }
}
