//! Announce / heartbeat / re-announce / withdraw against a fake registry.
//! Timing bounds are generous: these must pass on a busy machine.

use std::time::Duration;

use tokio::net::TcpListener;
use toolmesh_sidecar::Tool;
use toolmesh_sidecar::sdk::{self, ToolError};

use crate::common::{FakeRegistry, registry, sidecar, wait_until};

const TTL: Duration = Duration::from_millis(300);
const PATIENCE: Duration = Duration::from_secs(10);

fn noop() -> Tool {
    sdk::tool("noop", "Does nothing", |_: serde_json::Value| async {
        Ok::<_, ToolError>(())
    })
    .build()
}

#[tokio::test]
async fn announces_heartbeats_and_withdraws() {
    let (registry, url, _stop) = registry(TTL).await;
    let sidecar = sidecar(vec![noop()], &url).await;

    wait_until(PATIENCE, "the announce", || registry.announces().len() == 1).await;
    let (announced_at, request, lease) = registry.announces().remove(0);
    assert_eq!(lease, "lease-1");
    assert_eq!(request.instance_id, "test-instance");
    assert_eq!(request.endpoint, sidecar.url());
    assert_eq!(request.tools.len(), 1);

    // Heartbeats every TTL/3 = 100 ms.
    wait_until(PATIENCE, "five heartbeats", || {
        registry.heartbeats().len() >= 5
    })
    .await;
    let heartbeats = registry.heartbeats();
    assert!(
        heartbeats
            .iter()
            .all(|(_, l, known)| l == "lease-1" && *known)
    );
    let first = heartbeats[0].0 - announced_at;
    assert!(
        first >= Duration::from_millis(80),
        "first heartbeat after {first:?}"
    );
    let span = heartbeats[4].0 - heartbeats[0].0;
    assert!(
        span >= Duration::from_millis(320),
        "four intervals took {span:?}"
    );
    // Not a busy loop either: at most one heartbeat per 20 ms on average.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let count = registry.heartbeats().len();
    let elapsed = registry.heartbeats()[count - 1].0 - announced_at;
    assert!(
        count as u128 <= elapsed.as_millis() / 20 + 2,
        "{count} heartbeats in {elapsed:?}"
    );

    sidecar.shutdown().await.unwrap();
    assert_eq!(registry.withdrawals(), ["lease-1"]);
    assert_eq!(registry.announces().len(), 1);
}

#[tokio::test]
async fn announces_again_when_the_registry_forgets_the_lease() {
    let (registry, url, _stop) = registry(TTL).await;
    let sidecar = sidecar(vec![noop()], &url).await;
    wait_until(PATIENCE, "a heartbeat", || {
        !registry.heartbeats().is_empty()
    })
    .await;

    registry.forget_leases();
    wait_until(PATIENCE, "the second announce", || {
        registry.announces().len() == 2
    })
    .await;
    let not_found = registry
        .heartbeats()
        .iter()
        .filter(|(_, _, known)| !known)
        .count();
    assert_eq!(
        not_found, 1,
        "exactly one NOT_FOUND heartbeat before announcing again"
    );
    wait_until(PATIENCE, "a heartbeat on the new lease", || {
        registry
            .heartbeats()
            .iter()
            .any(|(_, l, known)| l == "lease-2" && *known)
    })
    .await;

    sidecar.shutdown().await.unwrap();
    assert_eq!(registry.withdrawals(), ["lease-2"]);
}

#[tokio::test]
async fn retries_while_the_registry_is_down() {
    // Reserve a port, then free it: nothing listens there for now.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let sidecar = sidecar(vec![noop()], &format!("http://{addr}")).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !sidecar.handle.is_finished(),
        "serve must keep retrying, not fail"
    );

    let registry = FakeRegistry::new(TTL);
    let (_stop, _handle) = registry.start(TcpListener::bind(addr).await.unwrap());
    wait_until(PATIENCE, "the announce once the registry is up", || {
        registry.announces().len() == 1
    })
    .await;
    wait_until(PATIENCE, "a heartbeat", || {
        !registry.heartbeats().is_empty()
    })
    .await;

    sidecar.shutdown().await.unwrap();
    assert_eq!(registry.withdrawals(), ["lease-1"]);
}

#[tokio::test]
async fn shutdown_without_a_reachable_registry_still_returns() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let sidecar = sidecar(vec![noop()], &format!("http://{addr}")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    sidecar.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_crash_withdraws_nothing() {
    let (registry, url, _stop) = registry(TTL).await;
    let sidecar = sidecar(vec![noop()], &url).await;
    wait_until(PATIENCE, "a heartbeat", || {
        !registry.heartbeats().is_empty()
    })
    .await;

    sidecar.handle.abort();
    assert!(sidecar.handle.await.unwrap_err().is_cancelled());
    let calls = registry.calls().len();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(registry.withdrawals().is_empty());
    assert_eq!(
        registry.calls().len(),
        calls,
        "no heartbeat after the crash"
    );
}

#[tokio::test]
async fn invalid_tool_sets_and_registry_urls_are_refused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let opts = toolmesh_sidecar::server::ServeOptions {
        registry: "http://127.0.0.1:1".into(),
        ..Default::default()
    };
    let err = toolmesh_sidecar::server::serve(listener, vec![], opts, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no tools"), "{err}");

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let opts = toolmesh_sidecar::server::ServeOptions {
        registry: "not a url\n".into(),
        ..Default::default()
    };
    let err = toolmesh_sidecar::server::serve(listener, vec![noop()], opts, std::future::pending())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("invalid registry URL"), "{err}");
}
