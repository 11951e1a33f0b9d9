#![allow(clippy::unwrap_used)]
use super::*;
use crate::{
    access::registrants::Owner,
    catalog::store::{
        conformance::{self, BOUNDED, announcement, owned, tool},
        model::ChangeKind,
    },
};

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

#[tokio::test]
async fn an_expired_lease_is_an_audit_record() {
    use crate::access::audit::{AuditLog, AuditOptions, AuditTarget};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let audit = AuditLog::open(&AuditTarget::File(path.clone()), AuditOptions::default()).unwrap();
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
    let (_, mut events) = store.watch(false);
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

// The scenarios every engine runs (`conformance.rs`).

#[tokio::test]
async fn conflicting_descriptor_is_refused_and_changes_nothing() {
    conformance::conflicting_descriptor_is_refused_and_changes_nothing(&*store()).await;
}

#[tokio::test]
async fn sole_instance_may_change_its_descriptor() {
    conformance::sole_instance_may_change_its_descriptor(&*store()).await;
}

#[tokio::test]
async fn instances_show_registrant_tools_and_lease() {
    conformance::instances_show_registrant_tools_and_lease(&*store()).await;
}

#[tokio::test]
async fn reannounce_replaces_the_old_lease() {
    conformance::reannounce_replaces_the_old_lease(&*store()).await;
}

#[tokio::test]
async fn withdraw_removes_only_that_instance() {
    conformance::withdraw_removes_only_that_instance(&*store()).await;
}

#[tokio::test]
async fn a_tool_and_its_leases_belong_to_the_registrant_that_holds_them() {
    conformance::a_tool_and_its_leases_belong_to_the_registrant_that_holds_them(&*store()).await;
}

#[tokio::test]
async fn a_registrant_holds_at_most_its_instances_and_the_others_still_fit() {
    let store = store();
    conformance::a_registrant_holds_at_most_its_instances_and_the_others_still_fit(&*store).await;
    assert_eq!(store.lock().held.get("alice"), Some(&2));
}

#[tokio::test]
async fn limits_bound_the_catalog() {
    conformance::limits_bound_the_catalog(&*MemoryStore::new(Duration::from_secs(10), BOUNDED))
        .await;
}

#[tokio::test]
async fn versions_serve_side_by_side_under_one_registrant() {
    conformance::versions_serve_side_by_side_under_one_registrant(&*store()).await;
}
