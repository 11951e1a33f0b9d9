//! Leases in the embedded registry: kept alive by heartbeats alone, expired
//! when a sidecar dies, and recovered by re-announcing when the registry
//! restarts.

use std::{
    sync::{Arc, atomic::AtomicUsize},
    time::{Duration, Instant},
};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_sidecar_leaves_after_its_ttl() {
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(config_with_ttl(ttl)).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let sidecar = TestSidecar::start(&registry.url(), "s1", vec![add_tool(calls)]).await;
    wait_for_instances(&registry, "add", 1).await;

    // Several TTLs on heartbeats alone, without a moment's absence.
    let client = registry.client().await;
    stays(ttl * 2, "the live sidecar keeps its lease", || {
        let mut client = client.clone();
        async move { instances(&mut client, "add").await == 1 }
    })
    .await;

    sidecar.kill();
    let killed = Instant::now();
    eventually(ttl * 3, "the dead sidecar's tool leaves", || {
        let mut client = client.clone();
        async move { tool_names(&mut client).await.is_empty() }
    })
    .await;
    // Not before the lease could have expired: its last heartbeat was at
    // most a third of the TTL before the kill.
    let left = killed.elapsed();
    assert!(left >= ttl - ttl / 3, "left {left:?} after the kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_registry_gets_the_tools_back() {
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start_restartable(config_with_ttl(ttl)).await;
    let addr = registry.addr;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s1", vec![add_tool(calls)]).await;
    wait_for_instances(&registry, "add", 1).await;

    registry.stop().await;
    let registry = TestRegistry::start_at(addr, config_with_ttl(ttl)).await;
    let restarted = Instant::now();
    wait_for_instances(&registry, "add", 1).await;
    let took = restarted.elapsed();
    eprintln!(
        "tools back {took:?} after the registry restarted (heartbeat every {:?})",
        ttl / 3
    );
    // The next heartbeat finds the lease unknown and announces again: one
    // heartbeat interval plus the reconnect backoff, far less than a TTL
    // (a new sidecar would not need the old one's lease at all).
    assert!(took < ttl * 2, "{took:?}");
    let response = registry
        .client()
        .await
        .invoke(invoke("add", r#"{"a":1,"b":1}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(response.instance_id, "s1");
    assert!(!response.is_error);
}
