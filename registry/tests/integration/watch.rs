//! `WatchTools` in the embedded registry: the snapshot, then every change,
//! and `ABORTED` for a watcher that falls too far behind.

use std::{
    sync::{Arc, atomic::AtomicUsize},
    time::Duration,
};

use tonic::{Code, Streaming, transport::Endpoint};
use toolmesh_proto::pb::{self, tool_event::Kind, tool_registry_client::ToolRegistryClient};
use toolmesh_registry::Config;

use crate::common::*;

/// The next event's kind, tool name and instance count.
async fn next(events: &mut Streaming<pb::ToolEvent>) -> (Kind, String, u32) {
    let event = tokio::time::timeout(Duration::from_secs(20), events.message())
        .await
        .expect("an event in time")
        .expect("the stream is healthy")
        .expect("the stream goes on");
    let kind = event.kind();
    let tool = event.tool.unwrap_or_default();
    let name = tool.descriptor.map(|d| d.name).unwrap_or_default();
    (kind, name, tool.instances)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_add_update_and_remove() {
    let registry = TestRegistry::start(Config::default()).await;
    let _present = TestSidecar::start(
        &registry.url(),
        "p",
        vec![sleep_tool(Duration::from_secs(1))],
    )
    .await;
    wait_for_instances(&registry, "sleep", 1).await;

    let mut events = registry
        .client()
        .await
        .watch_tools(pb::WatchToolsRequest {
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut events).await, (Kind::Added, "sleep".into(), 1));
    assert_eq!(next(&mut events).await, (Kind::Synced, String::new(), 0));

    let calls = Arc::new(AtomicUsize::new(0));
    let a = TestSidecar::start(&registry.url(), "a", vec![add_tool(calls.clone())]).await;
    assert_eq!(next(&mut events).await, (Kind::Added, "add".into(), 1));
    let b = TestSidecar::start(&registry.url(), "b", vec![add_tool(calls)]).await;
    assert_eq!(next(&mut events).await, (Kind::Updated, "add".into(), 2));
    a.stop().await;
    assert_eq!(next(&mut events).await, (Kind::Updated, "add".into(), 1));
    b.stop().await;
    // REMOVED carries the tool as it was.
    assert_eq!(next(&mut events).await, (Kind::Removed, "add".into(), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_1024_events_behind_is_aborted() {
    let registry = TestRegistry::start(Config::default()).await;
    // Small HTTP/2 windows: a watcher that stops reading holds up the
    // registry's sends after a few events, as a slow client would.
    let channel = Endpoint::from_shared(registry.url())
        .unwrap()
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .connect()
        .await
        .unwrap();
    let mut events = ToolRegistryClient::new(channel)
        .watch_tools(pb::WatchToolsRequest {
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(next(&mut events).await.0, Kind::Synced);

    // 3000 changes while the watcher reads nothing.
    let mut registration = registry.registration().await;
    let descriptor = pb::ToolDescriptor {
        name: "churn".into(),
        description: "x".repeat(1000),
        ..Default::default()
    };
    let churns = 1500;
    for i in 0..churns {
        let lease = registration
            .announce(pb::AnnounceRequest {
                instance_id: format!("i{i}"),
                endpoint: "http://127.0.0.1:9".into(),
                tools: vec![descriptor.clone()],
                execute_key: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner()
            .lease_id;
        registration
            .withdraw(pb::WithdrawRequest { lease_id: lease })
            .await
            .unwrap();
    }

    let mut delivered = 0;
    let status = loop {
        match tokio::time::timeout(Duration::from_secs(20), events.message())
            .await
            .expect("the stream goes on or ends in time")
        {
            Ok(Some(_)) => delivered += 1,
            Ok(None) => panic!("the stream ended without ABORTED after {delivered} events"),
            Err(status) => break status,
        }
    };
    eprintln!(
        "a stalled watcher got {delivered} of {} events, then {status:?}",
        churns * 2
    );
    assert_eq!(status.code(), Code::Aborted, "{status:?}");
    assert!(
        status.message().contains("events behind; watch again"),
        "{}",
        status.message()
    );
    assert!(delivered < churns * 2);
    assert!(
        tokio::time::timeout(Duration::from_secs(5), events.message())
            .await
            .expect("the stream ends")
            .is_ok_and(|m| m.is_none()),
        "nothing follows ABORTED"
    );
}
