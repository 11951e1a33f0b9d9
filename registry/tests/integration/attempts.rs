//! Attempts on a tool's instances: at most three, retries only where safe,
//! within the retry budget; an instance that keeps failing is ejected while
//! its lease stays; connections are pooled and closed when a sidecar leaves.
//!
//! The failing instances are real `ToolRuntime` servers on loopback that
//! answer every call with one status and count the calls.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Code, Request, Response, Status};
use toolmesh_proto::pb::{
    self,
    tool_runtime_server::{ToolRuntime, ToolRuntimeServer},
};
use toolmesh_registry::Config;

use crate::common::*;

/// A `ToolRuntime` that answers every call with `code`.
#[derive(Clone)]
struct Failing {
    code: Code,
    calls: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl ToolRuntime for Failing {
    async fn execute(
        &self,
        _request: Request<pb::ExecuteRequest>,
    ) -> Result<Response<pb::ExecuteResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(Status::new(self.code, "failing on purpose"))
    }

    async fn run_task(
        &self,
        _request: Request<pb::RunTaskRequest>,
    ) -> Result<Response<pb::RunTaskResponse>, Status> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(Status::new(self.code, "failing on purpose"))
    }

    async fn stop_task(
        &self,
        _request: Request<pb::StopTaskRequest>,
    ) -> Result<Response<pb::StopTaskResponse>, Status> {
        Err(Status::new(self.code, "failing on purpose"))
    }
}

/// `count` failing instances of `tool`, announced to `registry`; all count
/// into `calls`.
async fn failing_instances(
    registry: &TestRegistry,
    tool: &str,
    idempotent: bool,
    count: usize,
    calls: &Arc<AtomicUsize>,
) -> Vec<LoopbackServer> {
    let mut servers = Vec::new();
    let mut registration = registry.registration().await;
    for i in 0..count {
        let service = ToolRuntimeServer::new(Failing {
            code: Code::Unavailable,
            calls: calls.clone(),
        });
        let server = LoopbackServer::spawn(loopback_listener().await, move |listener, shutdown| {
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        });
        registration
            .announce(pb::AnnounceRequest {
                instance_id: format!("failing-{i}"),
                endpoint: server.url(),
                tools: vec![pb::ToolDescriptor {
                    name: tool.into(),
                    idempotent,
                    ..Default::default()
                }],
                execute_key: Vec::new(),
            })
            .await
            .unwrap();
        servers.push(server);
    }
    servers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_call_gets_at_most_three_attempts() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _servers = failing_instances(&registry, "flaky", true, 5, &calls).await;
    let mut client = registry.client().await;
    for n in 1..=5 {
        let status = client.invoke(invoke("flaky", "{}")).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3 * n, "after call {n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_from_a_sidecar_is_not_retried_for_other_tools() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _servers = failing_instances(&registry, "charge", false, 3, &calls).await;
    let status = registry
        .client()
        .await
        .invoke(invoke("charge", "{}"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the sidecar may have run it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_draw_on_a_budget() {
    let registry = TestRegistry::start(Config::default()).await;
    let executions = Arc::new(AtomicUsize::new(0));
    let _servers = failing_instances(&registry, "flaky", true, 3, &executions).await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(registry.client().await);
    }
    // 500 calls, each of which would retry twice without a budget.
    let calls = 500;
    let next = Arc::new(AtomicUsize::new(0));
    let mut agents = Vec::new();
    for mut client in clients {
        let next = next.clone();
        agents.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::SeqCst) < calls {
                let status = client.invoke(invoke("flaky", "{}")).await.unwrap_err();
                assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            }
        }));
    }
    for agent in agents {
        agent.await.unwrap();
    }
    // The budget: a reserve of 10 retries/s over its 10 s window (100),
    // plus 20% of the calls made within that window.
    let retries = executions.load(Ordering::SeqCst) - calls;
    eprintln!("{calls} failing calls to an idempotent tool: {retries} retries");
    assert!(
        (100..=100 + calls / 5 + 5).contains(&retries),
        "{retries} retries for {calls} calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_instance_is_ejected_but_keeps_its_lease() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _live = TestSidecar::start(&registry.url(), "live", vec![add_tool(calls.clone())]).await;
    wait_for_instances(&registry, "add", 1).await;
    // A second instance of `add` whose port nobody listens on.
    let mut registration = registry.registration().await;
    let descriptor = registry
        .client()
        .await
        .get_tool(pb::GetToolRequest {
            name: "add".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .descriptor;
    registration
        .announce(pb::AnnounceRequest {
            instance_id: "dead".into(),
            endpoint: format!("http://127.0.0.1:{}", reserved_port()),
            tools: descriptor.into_iter().collect(),
            execute_key: Vec::new(),
        })
        .await
        .unwrap();
    wait_for_instances(&registry, "add", 2).await;

    let mut client = registry.client().await;
    let mut call = async || {
        let response = client
            .invoke(invoke("add", r#"{"a":1,"b":1}"#))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(response.instance_id, "live");
        assert!((1..=2).contains(&response.attempts), "{response:?}");
        response.attempts
    };
    // Each call that picks the dead instance first is retried on the live
    // one. Picks are random: call until it has failed three times in a row
    // (every pick of it fails)...
    let (mut retried, mut made) = (0, 0);
    while retried < 3 {
        made += 1;
        assert!(
            made <= 200,
            "the dead instance was picked {retried} times in 200 calls"
        );
        if call().await == 2 {
            retried += 1;
        }
    }
    // ...after which it is ejected: not picked again.
    for _ in 0..30 {
        assert_eq!(call().await, 1, "an ejected instance was picked again");
    }
    assert_eq!(
        instances(&mut client, "add").await,
        2,
        "ejection leaves the lease alone"
    );
    // Every call ran once, on the live instance.
    assert_eq!(calls.load(Ordering::SeqCst), made + 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_reused_and_closed_when_a_sidecar_leaves() {
    let registry = toolmesh_registry::Registry::embedded(config_with_ttl(Duration::from_secs(5)));
    let proxy = registry.proxy().clone();
    let server = LoopbackServer::spawn(loopback_listener().await, move |listener, shutdown| {
        registry.serve(listener, shutdown)
    });
    let url = server.url();

    let calls = Arc::new(AtomicUsize::new(0));
    let sidecar = TestSidecar::start(&url, "s", vec![add_tool(calls)]).await;
    let mut client = pb::tool_registry_client::ToolRegistryClient::connect(url.clone())
        .await
        .expect("connect");
    eventually(Duration::from_secs(20), "the tool is announced", || {
        let mut client = client.clone();
        async move { instances(&mut client, "add").await == 1 }
    })
    .await;
    for _ in 0..10 {
        client
            .invoke(invoke("add", r#"{"a":1,"b":1}"#))
            .await
            .expect("invoke");
    }
    assert_eq!(
        proxy.endpoints(),
        [format!("http://{}", sidecar.addr)],
        "one pooled connection, reused"
    );

    sidecar.stop().await;
    eventually(
        Duration::from_secs(10),
        "the withdrawn sidecar's connection is closed",
        || {
            let proxy = proxy.clone();
            async move { proxy.endpoints().is_empty() }
        },
    )
    .await;
    server.stop().await;
}
