//! `grpc.health.v1.Health` on the sidecar's port: NOT_SERVING until the
//! real registry knows it, SERVING after (a lost lease included), and
//! NOT_SERVING once withdrawn, on a withdraw request or on SIGTERM while a
//! call drains. Watched as streams, so each change is seen as it happens.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::sync::{Notify, mpsc};
use toolmesh_proto::pb;
use toolmesh_sidecar::Tool;
use toolmesh_sidecar::health::SERVICE_NAMES;
use toolmesh_sidecar::sdk::{self, ToolError};
use toolmesh_sidecar::server::{DRAIN_GRACE, ServeOptions, serve_with_withdraw};
use toolmesh_test_support::server::LoopbackServer;

use crate::common::{
    HealthWatch, SLOW_TOOL, ServingStatus, SidecarProcess, SlowCall, TestRegistry, binary,
    health_check, loopback_listener, reserved_port, runtime_client, sidecar,
};

/// How long anything awaited may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(20);
/// How long a status is watched for not changing.
const QUIET: Duration = Duration::from_secs(1);

fn noop() -> Tool {
    sdk::tool("noop", "Does nothing", |_: serde_json::Value| async {
        Ok::<_, ToolError>(())
    })
    .build()
}

/// `gate`: says on `started` that it runs, then waits for `release`.
fn gate(started: mpsc::UnboundedSender<()>, release: Arc<Notify>) -> Tool {
    sdk::tool(
        "gate",
        "Waits to be released",
        move |_: serde_json::Value| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                let _ = started.send(());
                release.notified().await;
                Ok::<_, ToolError>("released")
            }
        },
    )
    .timeout(Duration::from_secs(60))
    .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_serving_until_the_first_announce_then_serving() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], reserved_port()));
    let sidecar = sidecar(&format!("http://{addr}"), "early", vec![noop()]).await;
    let mut watches = Vec::new();
    for service in SERVICE_NAMES {
        let mut watch = HealthWatch::start(sidecar.addr, service).await;
        assert_eq!(watch.next(PATIENCE).await, ServingStatus::NotServing);
        watches.push(watch);
    }
    // The registry is unreachable: it retries, and stays out of rotation.
    watches[0]
        .quiet_for(QUIET, "the registry was unreachable")
        .await;

    let registry = TestRegistry::start_at(addr, Duration::from_secs(10)).await;
    for watch in &mut watches {
        assert_eq!(watch.next(PATIENCE).await, ServingStatus::Serving);
    }
    // SERVING once the registry answered: it knows the instance already.
    assert_eq!(registry.instances("noop").await, 1);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_keeps_it_serving_while_it_is_announced_again() {
    // A short lease, for the heartbeat to find it lost soon.
    let ttl = Duration::from_millis(1500);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], reserved_port()));
    let registry = TestRegistry::start_at(addr, ttl).await;
    let sidecar = sidecar(&registry.url(), "steady", vec![noop()]).await;
    let mut watch = HealthWatch::start(sidecar.addr, "").await;
    if watch.next(PATIENCE).await == ServingStatus::NotServing {
        assert_eq!(watch.next(PATIENCE).await, ServingStatus::Serving);
    }

    // Heartbeats fail while the registry is down, then find the lease
    // unknown to the new registry, and the sidecar announces again.
    registry.stop().await;
    tokio::time::sleep(ttl).await;
    let registry = TestRegistry::start_at(addr, ttl).await;
    registry.wait_for_instances("noop", 1, PATIENCE).await;
    watch
        .quiet_for(QUIET, "a lost lease is no reason to leave rotation")
        .await;
    assert_eq!(health_check(sidecar.addr, "").await, ServingStatus::Serving);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdraw_request_leaves_the_registry_and_keeps_serving_until_shutdown() {
    // Three heartbeat intervals fit in the quiet check below.
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(ttl).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let (withdraw_tx, withdraw_rx) = tokio::sync::oneshot::channel::<()>();
    let options = ServeOptions {
        registry: registry.url(),
        instance_id: Some("leaving".into()),
        execute_key: Some(toolmesh_test_support::grants::key()),
        ..ServeOptions::default()
    };
    let tools = vec![gate(started_tx, release.clone()), noop()];
    let sidecar = LoopbackServer::spawn(loopback_listener().await, move |listener, shutdown| {
        let withdraw = async {
            let _ = withdraw_rx.await;
        };
        serve_with_withdraw(listener, tools, options, withdraw, shutdown)
    });
    let mut watch = HealthWatch::start(sidecar.addr, "").await;
    if watch.next(PATIENCE).await == ServingStatus::NotServing {
        assert_eq!(watch.next(PATIENCE).await, ServingStatus::Serving);
    }

    let call = tokio::spawn({
        let mut client = registry.client();
        async move {
            client
                .invoke(toolmesh_test_support::catalog::invoke("gate", "{}"))
                .await
        }
    });
    started.recv().await.expect("the call starts");

    withdraw_tx.send(()).unwrap();
    assert_eq!(watch.next(PATIENCE).await, ServingStatus::NotServing);
    // NOT_SERVING comes once the registry answered the withdraw: the tool
    // is gone already, long before its lease would have expired.
    assert_eq!(registry.tool("gate").await, None);
    assert_eq!(registry.tool("noop").await, None);
    // It announces no more, over three heartbeat intervals...
    toolmesh_test_support::wait::stays(ttl, "the tools stay withdrawn", || async {
        registry.tool("noop").await.is_none()
    })
    .await;
    // ...and still serves: the call in flight, and new ones.
    assert!(!sidecar.is_finished());
    assert!(!call.is_finished());
    let direct = runtime_client(sidecar.url(), "leaving")
        .await
        .execute(pb::ExecuteRequest {
            tool: "noop".into(),
            arguments_json: "{}".into(),
            ..Default::default()
        })
        .await
        .expect("served after the withdraw")
        .into_inner();
    assert!(!direct.is_error, "{direct:?}");

    release.notify_one();
    let response = tokio::time::timeout(PATIENCE, call)
        .await
        .expect("the call completes")
        .unwrap()
        .expect("the call succeeds")
        .into_inner();
    assert_eq!(
        (response.result_json.as_str(), response.is_error),
        (r#""released""#, false)
    );
    drop(watch);
    sidecar.stop_within(DRAIN_GRACE / 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_is_not_serving_until_announced_and_while_it_drains() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], reserved_port()));
    let yaml = format!("tools:\n{SLOW_TOOL}");
    let mut process =
        SidecarProcess::start(&bin, &format!("http://{addr}"), "drainer", &yaml).await;
    let bound = process.bound(PATIENCE).await;
    let mut watch = HealthWatch::start(bound, "").await;
    assert_eq!(watch.next(PATIENCE).await, ServingStatus::NotServing);
    assert_eq!(
        health_check(bound, "toolmesh.v1.ToolRuntime").await,
        ServingStatus::NotServing
    );
    watch.quiet_for(QUIET, "the registry was unreachable").await;

    let registry = TestRegistry::start_at(addr, Duration::from_secs(10)).await;
    assert_eq!(watch.next(PATIENCE).await, ServingStatus::Serving);
    assert_eq!(registry.instances("slow").await, 1);

    let call = SlowCall::start(&registry, process.dir()).await;

    process.signal(Signal::SIGTERM);
    assert_eq!(watch.next(PATIENCE).await, ServingStatus::NotServing);
    assert_eq!(registry.tool("slow").await, None, "withdrawn");
    // Draining: watchers are let go (they would hold the drain open), new
    // connections are refused, the call goes on.
    watch.ends(PATIENCE).await;
    assert!(
        tokio::net::TcpStream::connect(bound).await.is_err(),
        "the drain accepts no connections"
    );
    assert!(process.is_running(), "{}", process.log());
    assert!(!call.is_finished());

    call.release().await;
    let status = process.exited(DRAIN_GRACE / 2).await;
    assert!(status.success(), "{status}\n{}", process.log());
}
