//! Registry shutdown: NOT_SERVING first, calls still taken during
//! `--shutdown-delay`, watch streams ended, calls in flight finished, and
//! cut off once `--shutdown-grace` is over.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::{Code, transport::Channel};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh_proto::pb::{self, tool_event::Kind, tool_registry_client::ToolRegistryClient};
use toolmesh_sidecar::sdk;

use crate::common::*;

/// `wait`: tells `started` when it begins, then sleeps as long as asked.
fn announced_sleep(started: mpsc::UnboundedSender<u64>) -> toolmesh_sidecar::Tool {
    sdk::tool(
        "wait",
        "Sleeps, saying when it starts",
        move |args: SleepArgs| {
            let started = started.clone();
            async move {
                let _ = started.send(args.millis);
                tokio::time::sleep(Duration::from_millis(args.millis)).await;
                Ok(Slept { slept: args.millis })
            }
        },
    )
    .timeout(Duration::from_secs(60))
    .build()
}

async fn channel(registry: &TestRegistry) -> Channel {
    Channel::from_shared(registry.url())
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn sleep_for(millis: u64) -> pb::InvokeRequest {
    invoke("wait", &format!(r#"{{"millis": {millis}}}"#))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reports_not_serving_takes_calls_during_the_delay_and_drains() {
    let delay = Duration::from_millis(1500);
    let mut config = config_with_ttl(Duration::from_secs(10));
    config.shutdown_delay = delay;
    config.shutdown_grace = Duration::from_secs(20);
    let registry = TestRegistry::start(config).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let _sidecar =
        TestSidecar::start(&registry.url(), "s", vec![announced_sleep(started_tx)]).await;
    wait_for_instances(&registry, "wait", 1).await;

    let channel = channel(&registry).await;
    let mut health = HealthClient::new(channel.clone())
        .watch(HealthCheckRequest {
            service: "toolmesh.v1.ToolRegistry".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let status =
        |m: Option<tonic_health::pb::HealthCheckResponse>| m.expect("health goes on").status();
    assert_eq!(
        status(health.message().await.unwrap()),
        ServingStatus::Serving
    );
    let mut client = ToolRegistryClient::new(channel);
    let mut watch = client
        .watch_tools(pb::WatchToolsRequest {
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    while watch.message().await.unwrap().expect("snapshot").kind() != Kind::Synced {}

    // A call that outlives the delay is in flight when shutdown starts.
    let in_flight = tokio::spawn({
        let mut client = client.clone();
        async move { client.invoke(sleep_for(2500)).await }
    });
    assert_eq!(started.recv().await, Some(2500));
    let stopping = tokio::spawn(registry.stop());

    assert_eq!(
        status(health.message().await.unwrap()),
        ServingStatus::NotServing
    );
    let not_serving = Instant::now();
    // A health watcher that saw NOT_SERVING goes away; one that stayed
    // would hold the registry until the grace period cuts it off.
    drop(health);
    // Load balancers have not caught up yet: calls are still taken.
    let during_delay = client
        .invoke(sleep_for(0))
        .await
        .expect("taken during the delay");
    assert!(!during_delay.into_inner().is_error);
    assert!(
        not_serving.elapsed() < delay,
        "the test was too slow to call within the delay"
    );

    // At the end of the delay, watchers are told to watch again elsewhere.
    let ended = watch.message().await.expect_err("the watch ends");
    assert_eq!(ended.code(), Code::Unavailable, "{ended:?}");
    assert!(
        ended.message().contains("shutting down"),
        "{}",
        ended.message()
    );
    assert!(
        not_serving.elapsed() >= delay * 9 / 10,
        "{:?}",
        not_serving.elapsed()
    );

    let response = in_flight
        .await
        .unwrap()
        .expect("the call in flight completes");
    assert!(!response.into_inner().is_error);
    stopping.await.expect("the registry stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_outlive_the_grace_period_are_cut_off() {
    let grace = Duration::from_secs(1);
    let mut config = config_with_ttl(Duration::from_secs(10));
    config.shutdown_grace = grace;
    let registry = TestRegistry::start(config).await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let _sidecar =
        TestSidecar::start(&registry.url(), "s", vec![announced_sleep(started_tx)]).await;
    wait_for_instances(&registry, "wait", 1).await;

    let mut client = registry.client().await;
    let in_flight = tokio::spawn(async move { client.invoke(sleep_for(30_000)).await });
    assert_eq!(started.recv().await, Some(30_000));
    let stop_started = Instant::now();
    registry.stop().await;
    let stopped_after = stop_started.elapsed();
    assert!(
        stopped_after >= grace && stopped_after < grace * 10,
        "stopped {stopped_after:?} after the request, grace {grace:?}"
    );
    let cut = tokio::time::timeout(Duration::from_secs(10), in_flight)
        .await
        .expect("the cut-off call ends with the registry, not with the tool")
        .unwrap();
    assert!(cut.is_err(), "{cut:?}");
}
