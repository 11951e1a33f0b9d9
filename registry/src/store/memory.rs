//! The embedded engine: catalog state in this process's memory.
//!
//! Writes take one mutex, so an announce's conflict check and its effect are
//! atomic, and changes reach the [`CatalogView`] in the order they happen.
//! Reads go to the view and never touch the mutex. Expired leases are swept
//! by a background task that lives as long as the store, from an index of
//! leases by expiry: a sweep costs what expires, not what is held.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, MutexGuard, PoisonError, Weak},
    time::Duration,
};

use tokio::{sync::broadcast, time::Instant};
use toolmesh_proto::pb::ToolDescriptor;

use crate::{
    audit::AuditLog,
    descriptor,
    error::RegistryError,
    metrics::Metrics,
    store::model::{Announcement, CatalogEvent, Instance, Lease, ToolState, lease_tag},
    store::{CatalogStore, view::CatalogView},
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
}

struct ToolRecord {
    descriptor: Arc<ToolDescriptor>,
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
    tools: HashMap<String, ToolRecord>,
    /// Live leases per owner.
    held: HashMap<String, usize>,
    /// Tool names per owner.
    owned: HashMap<String, usize>,
}

/// The in-memory [`CatalogStore`].
pub struct MemoryStore {
    audit: std::sync::OnceLock<AuditLog>,
    metrics: std::sync::OnceLock<Arc<Metrics>>,
    ttl: Duration,
    limits: Limits,
    state: Mutex<State>,
    view: CatalogView,
}

impl MemoryStore {
    /// A store granting leases of `ttl`, with its expiry sweeper running on
    /// the current tokio runtime until the store is dropped.
    pub fn new(ttl: Duration, limits: Limits) -> Arc<Self> {
        let store = Arc::new(Self {
            audit: std::sync::OnceLock::new(),
            metrics: std::sync::OnceLock::new(),
            ttl,
            limits,
            state: Mutex::new(State::default()),
            view: CatalogView::default(),
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
                if let Some(metrics) = self.metrics.get() {
                    metrics.lease_expired();
                }
                if let Some(audit) = self.audit.get() {
                    audit.record(super::expiry_record(
                        &record.owner,
                        &record.instance.id,
                        &record.instance.endpoint,
                        record.tools.clone(),
                    ));
                }
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
                instances: record.instances.values().cloned().collect(),
            });
            self.view.apply(&name, after);
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
    for name in &record.tools {
        if let Some(tool) = state.tools.get_mut(name) {
            tool.instances.remove(&record.instance.id);
            if tool.instances.is_empty()
                && let Some(gone) = state.tools.remove(name)
            {
                release(&mut state.owned, &gone.owner);
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
        let Some(live) = state.tools.get(&tool.name) else {
            continue;
        };
        if live.owner != a.owner.name {
            return Err(super::tool_held_by_another(&tool.name));
        }
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
        .filter(|t| !state.tools.get(&t.name).is_some_and(kept))
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
            if !state.tools.contains_key(&tool.name) {
                *state.owned.entry(a.owner.name.clone()).or_default() += 1;
            }
            let record = state
                .tools
                .entry(tool.name.clone())
                .or_insert_with(|| ToolRecord {
                    descriptor: Arc::new(tool.clone()),
                    instances: BTreeMap::new(),
                    owner: a.owner.name.clone(),
                });
            if record.instances.is_empty() || *record.descriptor != tool {
                // Only reachable when no other instance serves it (see check_fits).
                record.descriptor = Arc::new(tool.clone());
            }
            record
                .instances
                .insert(instance.id.clone(), instance.clone());
            touched.insert(tool.name.clone());
            names.push(tool.name);
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
            },
        );
        self.publish(&state, touched);
        Ok(Lease {
            id: lease_id,
            ttl: self.ttl,
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

    fn get(&self, name: &str) -> Option<Arc<ToolState>> {
        self.view.get(name)
    }

    fn list(&self) -> Vec<Arc<ToolState>> {
        self.view.list()
    }

    fn watch(&self) -> (Vec<Arc<ToolState>>, broadcast::Receiver<CatalogEvent>) {
        self.view.watch()
    }

    fn published_bytes(&self) -> u64 {
        self.view.published_bytes()
    }

    fn audit_expiries(&self, audit: AuditLog) {
        let _ = self.audit.set(audit);
    }

    fn count_expiries(&self, metrics: Arc<Metrics>) {
        let _ = self.metrics.set(metrics);
    }

    fn lease_count(&self) -> usize {
        self.lock().leases.len()
    }

    async fn loaded(&self) {}
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{registrants::Owner, store::model::ChangeKind};

    fn tool(name: &str, version: &str) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            version: version.into(),
            ..Default::default()
        }
    }

    fn announcement(id: &str, tools: Vec<ToolDescriptor>) -> Announcement {
        Announcement {
            instance_id: id.into(),
            endpoint: format!("http://127.0.0.1/{id}"),
            execute_key: None,
            tools,
            owner: Owner::default(),
        }
    }

    fn owned(
        id: &str,
        tools: Vec<ToolDescriptor>,
        owner: &str,
        max: Option<usize>,
    ) -> Announcement {
        Announcement {
            owner: Owner {
                name: owner.into(),
                max_instances: max,
                max_tools: None,
            },
            ..announcement(id, tools)
        }
    }

    /// An announce by `owner`, who may hold at most `max_tools` names.
    fn bounded(id: &str, names: &[&str], owner: &str, max_tools: usize) -> Announcement {
        Announcement {
            owner: Owner {
                name: owner.into(),
                max_instances: None,
                max_tools: Some(max_tools),
            },
            ..announcement(id, names.iter().map(|n| tool(n, "1")).collect())
        }
    }

    #[tokio::test]
    async fn a_registrant_at_its_tool_bound_takes_no_name_and_the_others_keep_theirs() {
        let store = MemoryStore::new(
            Duration::from_secs(10),
            Limits {
                max_instances: 100,
                max_tools: 6,
            },
        );
        store
            .announce(bounded("m1", &["m_a", "m_b", "m_c"], "mallory", 3))
            .await
            .unwrap();
        let refused = store
            .announce(bounded("m2", &["m_d"], "mallory", 3))
            .await
            .expect_err("past her bound");
        assert!(
            refused
                .to_string()
                .contains("registrant \"mallory\" would hold more than 3 tools"),
            "{refused}"
        );
        // Another instance of her own names is no new name.
        store
            .announce(bounded("m2", &["m_a"], "mallory", 3))
            .await
            .unwrap();
        // An instance may swap its names for others within the bound.
        store
            .announce(bounded("m1", &["m_a", "m_x", "m_y"], "mallory", 3))
            .await
            .unwrap();
        assert!(store.get("m_b").is_none());
        // Inventory's share is untouched: its three names fit, each time.
        let first = store
            .announce(bounded("i1", &["i_a", "i_b"], "inventory", 3))
            .await
            .unwrap();
        store.withdraw(&first.id, "inventory").await.unwrap();
        assert!(
            store
                .announce(bounded("m3", &["m_z"], "mallory", 3))
                .await
                .is_err(),
            "the freed names are not hers to take"
        );
        store
            .announce(bounded("i1", &["i_a", "i_b", "i_c"], "inventory", 3))
            .await
            .expect("inventory's re-announce and a new tool of its own");
    }

    fn denied<T: std::fmt::Debug>(result: Result<T, RegistryError>) -> bool {
        matches!(result, Err(RegistryError::PermissionDenied { .. }))
    }

    #[tokio::test]
    async fn an_expired_lease_is_an_audit_record() {
        use crate::audit::{AuditLog, AuditOptions, AuditTarget};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let audit =
            AuditLog::open(&AuditTarget::File(path.clone()), AuditOptions::default()).unwrap();
        let store = store();
        store.audit_expiries(audit.clone());
        store
            .announce(owned("a", vec![tool("t", "1")], "alice", None))
            .await
            .unwrap();
        assert_eq!(store.expire(Instant::now() + Duration::from_secs(11)), 1);
        audit.close(Duration::from_secs(5)).await.unwrap();
        let line: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(&path).unwrap().trim()).unwrap();
        assert_eq!(line["kind"], "registration");
        assert_eq!(line["action"], "expire");
        assert_eq!(line["caller"], "alice");
        assert_eq!(line["instance"], "a");
        assert_eq!(line["tools"], serde_json::json!(["t"]));
    }

    #[tokio::test]
    async fn a_tool_and_its_leases_belong_to_the_registrant_that_holds_them() {
        let store = store();
        let lease = store
            .announce(owned("a", vec![tool("t", "1")], "alice", None))
            .await
            .unwrap();
        // Another registrant can neither add an instance of the tool, nor
        // replace its descriptor, nor take over the instance id.
        assert!(denied(
            store
                .announce(owned("m", vec![tool("t", "1")], "mallory", None))
                .await
        ));
        assert!(denied(
            store
                .announce(owned("a", vec![tool("t", "2")], "mallory", None))
                .await
        ));
        assert!(denied(
            store
                .announce(owned("a", vec![tool("u", "1")], "mallory", None))
                .await
        ));
        assert!(denied(
            store
                .announce(announcement("m", vec![tool("t", "1")]))
                .await
        ));
        // Nor renew or end its lease.
        assert!(denied(store.heartbeat(&lease.id, "mallory").await));
        assert!(denied(store.withdraw(&lease.id, "mallory").await));
        assert_eq!(store.get("t").unwrap().instances.len(), 1);
        // The owner can do all of it.
        store
            .announce(owned("b", vec![tool("t", "1")], "alice", None))
            .await
            .unwrap();
        store.heartbeat(&lease.id, "alice").await.unwrap();
        store.withdraw(&lease.id, "alice").await.unwrap();
        assert_eq!(store.get("t").unwrap().instances.len(), 1);
    }

    #[tokio::test]
    async fn a_registrant_holds_at_most_its_instances_and_the_others_still_fit() {
        let store = store();
        for id in ["a", "b"] {
            store
                .announce(owned(id, vec![tool("t", "1")], "alice", Some(2)))
                .await
                .unwrap();
        }
        assert!(matches!(
            store
                .announce(owned("c", vec![tool("t", "1")], "alice", Some(2)))
                .await,
            Err(RegistryError::CatalogFull(_))
        ));
        // Re-announcing an instance it holds is no new instance.
        store
            .announce(owned("a", vec![tool("t", "1")], "alice", Some(2)))
            .await
            .unwrap();
        store
            .announce(owned("x", vec![tool("u", "1")], "bob", Some(2)))
            .await
            .unwrap();
        assert_eq!(store.lock().held.get("alice"), Some(&2));
    }

    fn store() -> Arc<MemoryStore> {
        MemoryStore::new(Duration::from_secs(10), Limits::default())
    }

    /// One step of the lease property test.
    #[derive(Debug, Clone)]
    enum Step {
        Announce(usize),
        Heartbeat(usize),
        Withdraw(usize),
        Wait(u64),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0..6usize).prop_map(Step::Announce),
            (0..6usize).prop_map(Step::Heartbeat),
            (0..6usize).prop_map(Step::Withdraw),
            (0..15_000u64).prop_map(Step::Wait),
        ]
    }

    proptest::proptest! {
        /// Whatever announces, heartbeats, withdrawals and waits happen, a
        /// sweep removes exactly the leases whose time has passed (the
        /// model: each instance's last announce or heartbeat plus the TTL).
        #[test]
        fn a_sweep_expires_exactly_the_leases_past_their_time(
            steps in proptest::collection::vec(step(), 1..60)
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async {
                let ttl = Duration::from_secs(10);
                let store = MemoryStore::new(ttl, Limits::default());
                let mut leases: HashMap<usize, String> = HashMap::new();
                let mut model: HashMap<usize, Instant> = HashMap::new();
                for step in steps {
                    match step {
                        Step::Announce(i) => {
                            let lease = store
                                .announce(announcement(&format!("i{i}"), vec![tool(&format!("t{i}"), "1")]))
                                .await
                                .unwrap();
                            leases.insert(i, lease.id);
                            model.insert(i, Instant::now() + ttl);
                        }
                        Step::Heartbeat(i) => {
                            let Some(lease) = leases.get(&i) else { continue };
                            let kept = store.heartbeat(lease, "").await.is_ok();
                            assert_eq!(kept, model.contains_key(&i));
                            if kept {
                                model.insert(i, Instant::now() + ttl);
                            }
                        }
                        Step::Withdraw(i) => {
                            if let Some(lease) = leases.get(&i) {
                                store.withdraw(lease, "").await.unwrap();
                                model.remove(&i);
                            }
                        }
                        Step::Wait(ms) => {
                            // The store's own sweeper may run meanwhile;
                            // expire() is called below either way.
                            tokio::time::advance(Duration::from_millis(ms)).await;
                        }
                    }
                    let now = Instant::now();
                    store.expire(now);
                    model.retain(|_, expires| *expires > now);
                    let state = store.lock();
                    let live: BTreeSet<String> = state.leases.values().map(|l| l.instance.id.clone()).collect();
                    let expected: BTreeSet<String> = model.keys().map(|i| format!("i{i}")).collect();
                    assert_eq!(live, expected);
                    let indexed: BTreeSet<(Instant, String)> = state
                        .leases
                        .iter()
                        .map(|(id, lease)| (lease.expires, id.clone()))
                        .collect();
                    assert_eq!(state.expiries, indexed, "the expiry index is the leases'");
                }
            });
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expires_after_ttl_without_heartbeat() {
        let store = store();
        let (_, mut events) = store.watch();
        store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        assert_eq!(events.recv().await.unwrap().kind, ChangeKind::Added);

        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(store.get("t").is_some());
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(store.get("t").is_none());
        assert_eq!(events.recv().await.unwrap().kind, ChangeKind::Removed);
    }

    #[tokio::test(start_paused = true)]
    async fn heartbeat_keeps_the_lease() {
        let store = store();
        let lease = store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_secs(3)).await;
            store.heartbeat(&lease.id, "").await.unwrap();
        }
        assert!(store.get("t").is_some());
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(matches!(
            store.heartbeat(&lease.id, "").await,
            Err(RegistryError::LeaseNotFound { .. })
        ));
    }

    #[tokio::test]
    async fn conflicting_descriptor_is_refused_and_changes_nothing() {
        let store = store();
        store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        let err = store
            .announce(announcement("b", vec![tool("u", "1"), tool("t", "2")]))
            .await
            .unwrap_err();
        assert!(matches!(err, RegistryError::DescriptorConflict { ref tool, .. } if tool == "t"));
        assert!(store.get("u").is_none());
        assert_eq!(store.get("t").unwrap().instances.len(), 1);
    }

    #[tokio::test]
    async fn sole_instance_may_change_its_descriptor() {
        let store = store();
        let (_, mut events) = store.watch();
        store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        store
            .announce(announcement("a", vec![tool("t", "2")]))
            .await
            .unwrap();
        assert_eq!(store.get("t").unwrap().descriptor.version, "2");
        assert_eq!(events.recv().await.unwrap().kind, ChangeKind::Added);
        assert_eq!(events.recv().await.unwrap().kind, ChangeKind::Updated);
    }

    #[tokio::test]
    async fn reannounce_replaces_the_old_lease() {
        let store = store();
        let first = store
            .announce(announcement("a", vec![tool("t", "1"), tool("u", "1")]))
            .await
            .unwrap();
        let second = store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        assert!(store.heartbeat(&first.id, "").await.is_err());
        assert!(store.heartbeat(&second.id, "").await.is_ok());
        assert!(store.get("u").is_none());
        assert_eq!(store.list().len(), 1);
    }

    #[tokio::test]
    async fn withdraw_removes_only_that_instance() {
        let store = store();
        let a = store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        store
            .announce(announcement("b", vec![tool("t", "1")]))
            .await
            .unwrap();
        assert_eq!(store.get("t").unwrap().instances.len(), 2);
        store.withdraw(&a.id, "").await.unwrap();
        let t = store.get("t").unwrap();
        assert_eq!(t.instances.len(), 1);
        assert_eq!(t.instances[0].id, "b");
        store.withdraw("unknown", "").await.unwrap();
    }

    #[tokio::test]
    async fn limits_bound_the_catalog() {
        let store = MemoryStore::new(
            Duration::from_secs(10),
            Limits {
                max_instances: 1,
                max_tools: 2,
            },
        );
        store
            .announce(announcement("a", vec![tool("t", "1")]))
            .await
            .unwrap();
        assert!(matches!(
            store
                .announce(announcement("b", vec![tool("t", "1")]))
                .await,
            Err(RegistryError::CatalogFull(_))
        ));
        assert!(matches!(
            store
                .announce(announcement(
                    "a",
                    vec![tool("x", "1"), tool("y", "1"), tool("z", "1")]
                ))
                .await,
            Err(RegistryError::CatalogFull(_))
        ));
        store
            .announce(announcement("a", vec![tool("x", "1"), tool("y", "1")]))
            .await
            .unwrap();
    }
}
