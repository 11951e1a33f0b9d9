//! The embedded engine: catalog state in this process's memory.
//!
//! Writes take one mutex, so an announce's conflict check and its effect are
//! atomic, and changes reach the `CatalogView` in the order they happen.
//! Reads go to the view and never touch the mutex. Expired leases are swept
//! by a background task that lives as long as the store, from an index of
//! leases by expiry: a sweep costs what expires, not what is held.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use tokio::time::Instant;
use toolmesh_proto::pb::ToolDescriptor;

use crate::{
    catalog::store::model::{Announcement, Instance, Lease, ToolState, lease_tag},
    catalog::store::{CatalogStore, Resident},
    catalog::{descriptor, versions},
    error::RegistryError,
};

/// Bounds on what the network can make the store hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most live instances.
    pub max_instances: usize,
    /// Most distinct tools.
    pub max_tools: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_instances: 10_000,
            max_tools: 10_000,
        }
    }
}

struct LeaseRecord {
    instance: Arc<Instance>,
    tools: Vec<String>,
    expires: Instant,
    owner: String,
    /// When it was announced, in ms since the epoch.
    announced_ms: u64,
}

struct ToolRecord {
    descriptor: Arc<ToolDescriptor>,
    digest: Arc<str>,
    instances: BTreeMap<String, Arc<Instance>>,
    /// The registrant holding every instance of the tool.
    owner: String,
}

#[derive(Default)]
struct State {
    leases: HashMap<String, LeaseRecord>,
    /// Every lease in `leases`, by when it expires.
    expiries: BTreeSet<(Instant, String)>,
    lease_of_instance: HashMap<String, String>,
    /// Tool versions by key (`name@version`, or `name`).
    tools: HashMap<String, ToolRecord>,
    /// The keys of each name's live versions.
    versions: HashMap<String, BTreeSet<String>>,
    /// Live leases per owner.
    held: HashMap<String, usize>,
    /// Tool names per owner.
    owned: HashMap<String, usize>,
}

/// The in-memory [`CatalogStore`].
pub struct MemoryStore {
    resident: Resident,
    ttl: Duration,
    limits: Limits,
    state: Mutex<State>,
}

impl MemoryStore {
    /// A store granting leases of `ttl`, with its expiry sweeper running on
    /// the current tokio runtime until the store is dropped.
    pub fn new(ttl: Duration, limits: Limits) -> Arc<Self> {
        let store = Arc::new(Self {
            resident: Resident::default(),
            ttl,
            limits,
            state: Mutex::new(State::default()),
        });
        tokio::spawn(sweep(Arc::downgrade(&store), sweep_interval(ttl)));
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock, but a poisoned lock must
        // not take the registry down with it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Removes every lease whose time has passed; returns how many.
    pub fn expire(&self, now: Instant) -> usize {
        let mut state = self.lock();
        let mut expired = Vec::new();
        while state.expiries.first().is_some_and(|(at, _)| *at <= now) {
            if let Some((_, lease_id)) = state.expiries.pop_first() {
                expired.push(lease_id);
            }
        }
        let mut touched = BTreeSet::new();
        for lease_id in &expired {
            if let Some(record) = remove_lease(&mut state, lease_id) {
                tracing::info!(instance = %record.instance.id, lease = %lease_tag(lease_id), "lease expired");
                self.resident.expiries.expired(Some(super::expiry_record(
                    &record.owner,
                    &record.instance.id,
                    &record.instance.endpoint,
                    record.tools.clone(),
                )));
                touched.extend(record.tools);
            }
        }
        self.publish(&state, touched);
        expired.len()
    }

    /// Publishes the new state of `names` to readers and watchers. Called
    /// with the state lock held, so changes go out in the order they happen.
    fn publish(&self, state: &State, names: BTreeSet<String>) {
        for name in names {
            let after = state.tools.get(&name).map(|record| ToolState {
                descriptor: record.descriptor.clone(),
                digest: record.digest.clone(),
                instances: record.instances.values().cloned().collect(),
            });
            self.resident.view.apply(&name, after);
        }
    }
}

fn sweep_interval(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(10), Duration::from_secs(1))
}

async fn sweep(store: Weak<MemoryStore>, every: Duration) {
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(store) = store.upgrade() else { return };
        store.expire(Instant::now());
    }
}

/// Takes a lease out of `state`, detaching its instance from its tools.
fn remove_lease(state: &mut State, lease_id: &str) -> Option<LeaseRecord> {
    let record = state.leases.remove(lease_id)?;
    state
        .expiries
        .remove(&(record.expires, lease_id.to_owned()));
    release(&mut state.held, &record.owner);
    if state
        .lease_of_instance
        .get(&record.instance.id)
        .map(String::as_str)
        == Some(lease_id)
    {
        state.lease_of_instance.remove(&record.instance.id);
    }
    for key in &record.tools {
        if let Some(tool) = state.tools.get_mut(key) {
            tool.instances.remove(&record.instance.id);
            if tool.instances.is_empty()
                && let Some(gone) = state.tools.remove(key)
            {
                release(&mut state.owned, &gone.owner);
                let name = gone.descriptor.name.clone();
                if let Some(keys) = state.versions.get_mut(&name) {
                    keys.remove(key);
                    if keys.is_empty() {
                        state.versions.remove(&name);
                    }
                }
            }
        }
    }
    Some(record)
}

/// One fewer of what `owner` holds in `counts`, forgetting it at zero.
fn release(counts: &mut HashMap<String, usize>, owner: &str) {
    if let Some(count) = counts.get_mut(owner) {
        *count -= 1;
        if *count == 0 {
            counts.remove(owner);
        }
    }
}

/// Refuses an announce whose descriptors differ from live ones, or that would
/// grow the catalog past its limits. Instances of `instance_id` itself do not
/// count: an instance may change its own tools.
fn check_fits(state: &State, limits: Limits, a: &Announcement) -> Result<(), RegistryError> {
    let old = state
        .lease_of_instance
        .get(&a.instance_id)
        .and_then(|lease| state.leases.get(lease));
    if old.is_some_and(|lease| lease.owner != a.owner.name) {
        return Err(super::instance_held_by_another(&a.instance_id));
    }
    for tool in &a.tools {
        let held_by_another = state.versions.get(&tool.name).is_some_and(|keys| {
            keys.iter()
                .filter_map(|key| state.tools.get(key))
                .any(|version| version.owner != a.owner.name)
        });
        if held_by_another {
            return Err(super::tool_held_by_another(&tool.name));
        }
        let Some(live) = state.tools.get(&versions::key(tool)) else {
            continue;
        };
        let others = live.instances.keys().any(|id| *id != a.instance_id);
        if others {
            let differences = descriptor::differences(&live.descriptor, tool);
            if !differences.is_empty() {
                return Err(RegistryError::DescriptorConflict {
                    tool: tool.name.clone(),
                    differences,
                });
            }
        }
    }
    let replacing = old.is_some();
    if let Some(max) = a.owner.max_instances
        && !replacing
        && state.held.get(&a.owner.name).copied().unwrap_or(0) >= max
    {
        return Err(super::owner_full(&a.owner.name, max));
    }
    if !replacing && state.leases.len() >= limits.max_instances {
        return Err(RegistryError::CatalogFull(format!(
            "{} live instances is the limit",
            limits.max_instances
        )));
    }
    // Tools only this instance serves go away with its old lease.
    // Those are among its old lease's tools: counting them, not every tool,
    // keeps an announce's cost independent of the catalog's size.
    let kept = |record: &ToolRecord| record.instances.keys().any(|id| *id != a.instance_id);
    let only_here = old.map_or(0, |lease| {
        lease
            .tools
            .iter()
            .filter(|name| state.tools.get(*name).is_some_and(|r| !kept(r)))
            .count()
    });
    let remaining = state.tools.len().saturating_sub(only_here);
    let added = a
        .tools
        .iter()
        .filter(|t| !state.tools.get(&versions::key(t)).is_some_and(kept))
        .count();
    if let Some(max) = a.owner.max_tools {
        let held = state.owned.get(&a.owner.name).copied().unwrap_or(0);
        if held.saturating_sub(only_here) + added > max {
            return Err(super::owner_tools_full(&a.owner.name, max));
        }
    }
    if remaining + added > limits.max_tools {
        return Err(RegistryError::CatalogFull(format!(
            "{} tools is the limit",
            limits.max_tools
        )));
    }
    Ok(())
}

#[async_trait::async_trait]
impl CatalogStore for MemoryStore {
    async fn announce(&self, a: Announcement) -> Result<Lease, RegistryError> {
        let mut state = self.lock();
        check_fits(&state, self.limits, &a)?;

        let mut touched = BTreeSet::new();
        if let Some(old) = state.lease_of_instance.get(&a.instance_id).cloned()
            && let Some(record) = remove_lease(&mut state, &old)
        {
            touched.extend(record.tools);
        }
        let instance = Arc::new(Instance {
            id: a.instance_id.clone(),
            endpoint: a.endpoint,
            execute_key: a.execute_key,
        });
        let lease_id = uuid::Uuid::new_v4().to_string();
        let mut names = Vec::with_capacity(a.tools.len());
        for tool in a.tools {
            let key = versions::key(&tool);
            if !state.tools.contains_key(&key) {
                *state.owned.entry(a.owner.name.clone()).or_default() += 1;
            }
            state
                .versions
                .entry(tool.name.clone())
                .or_default()
                .insert(key.clone());
            let mut new = false;
            let record = state.tools.entry(key.clone()).or_insert_with(|| {
                new = true;
                ToolRecord {
                    digest: descriptor::digest(&tool).into(),
                    descriptor: Arc::new(tool.clone()),
                    instances: BTreeMap::new(),
                    owner: a.owner.name.clone(),
                }
            });
            if !new && (record.instances.is_empty() || *record.descriptor != tool) {
                // Only reachable when no other instance serves it (see check_fits).
                record.digest = descriptor::digest(&tool).into();
                record.descriptor = Arc::new(tool.clone());
            }
            record
                .instances
                .insert(instance.id.clone(), instance.clone());
            touched.insert(key.clone());
            names.push(key);
        }
        state
            .lease_of_instance
            .insert(instance.id.clone(), lease_id.clone());
        *state.held.entry(a.owner.name.clone()).or_default() += 1;
        let expires = Instant::now() + self.ttl;
        state.expiries.insert((expires, lease_id.clone()));
        state.leases.insert(
            lease_id.clone(),
            LeaseRecord {
                instance,
                tools: names,
                expires,
                owner: a.owner.name,
                announced_ms: super::model::epoch_ms(),
            },
        );
        self.publish(&state, touched);
        Ok(Lease {
            id: lease_id,
            ttl: self.ttl,
            held: Vec::new(),
        })
    }

    async fn heartbeat(&self, lease_id: &str, owner: &str) -> Result<Duration, RegistryError> {
        let mut state = self.lock();
        let lease = state
            .leases
            .get_mut(lease_id)
            .ok_or_else(|| RegistryError::LeaseNotFound {
                lease: lease_id.to_owned(),
            })?;
        if lease.owner != owner {
            return Err(super::lease_held_by_another());
        }
        let was = std::mem::replace(&mut lease.expires, Instant::now() + self.ttl);
        let expires = lease.expires;
        state.expiries.remove(&(was, lease_id.to_owned()));
        state.expiries.insert((expires, lease_id.to_owned()));
        Ok(self.ttl)
    }

    async fn withdraw(&self, lease_id: &str, owner: &str) -> Result<(), RegistryError> {
        let mut state = self.lock();
        if state.leases.get(lease_id).is_some_and(|l| l.owner != owner) {
            return Err(super::lease_held_by_another());
        }
        if let Some(record) = remove_lease(&mut state, lease_id) {
            tracing::info!(instance = %record.instance.id, lease = %lease_tag(lease_id), "lease withdrawn");
            self.publish(&state, record.tools.into_iter().collect());
        }
        Ok(())
    }

    fn resident(&self) -> &Resident {
        &self.resident
    }

    fn lease_count(&self) -> usize {
        self.lock().leases.len()
    }

    async fn instances(&self) -> Result<Vec<super::model::InstanceLease>, RegistryError> {
        let now = Instant::now();
        Ok(self
            .lock()
            .leases
            .values()
            .map(|lease| super::model::InstanceLease {
                id: lease.instance.id.clone(),
                endpoint: lease.instance.endpoint.clone(),
                owner: lease.owner.clone(),
                tools: lease.tools.clone(),
                expires_in: Some(lease.expires.saturating_duration_since(now)),
                announced_ms: Some(lease.announced_ms),
            })
            .collect())
    }

    async fn loaded(&self) {}
}

#[cfg(test)]
mod tests;
