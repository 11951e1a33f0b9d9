//! Deadlines end to end: a deadline that runs out anywhere on the path
//! (connecting to a sidecar, waiting for a silent one, a slow tool) is
//! DEADLINE_EXCEEDED, answered by the registry before the caller's own timer
//! fires; a connection that fails before the deadline is UNAVAILABLE.

use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tonic::Code;
use toolmesh_proto::pb;
use toolmesh_registry::Config;

use crate::common::*;

/// A caller's deadline the registry must answer within: long enough that
/// the registry's answer margin is at its largest (100 ms), so that time
/// the call spends outside the registry's timer on a busy machine (reaching
/// the handler, the answer's way back) stays inside it. With 1 s, a margin
/// of 50 ms, CI once saw the caller's own timer fire first.
const CALLER_DEADLINE: Duration = Duration::from_secs(2);

/// A listener that accepts connections and never says a word on them.
async fn silent_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    format!("http://{addr}")
}

/// A listener whose accept queue is full: a connection attempt to it hangs
/// (the kernel drops the SYN) instead of being refused. Keep the returned
/// sockets alive as long as the endpoint is used.
async fn unanswered_endpoint() -> (String, (TcpListener, TcpStream)) {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let filler = TcpStream::connect(addr).await.expect("fill the queue");
    // Prove the premise: the next connection attempt hangs.
    let attempt = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await;
    assert!(
        attempt.is_err(),
        "a full accept queue should leave connects hanging"
    );
    (format!("http://{addr}"), (listener, filler))
}

/// Announces one tool served at `endpoint`.
async fn announce(registry: &TestRegistry, name: &str, endpoint: &str, timeout: Option<Duration>) {
    registry
        .registration()
        .await
        .announce(pb::AnnounceRequest {
            instance_id: format!("{name}-instance"),
            endpoint: endpoint.to_owned(),
            tools: vec![pb::ToolDescriptor {
                name: name.into(),
                timeout: timeout.map(|t| prost_types::Duration::try_from(t).expect("duration")),
                ..Default::default()
            }],
            execute_key: Vec::new(),
        })
        .await
        .expect("announce");
}

async fn invoke_within(
    registry: &TestRegistry,
    tool: &str,
    caller_deadline: Option<Duration>,
) -> (tonic::Status, Duration) {
    let mut client = registry.client().await;
    let mut request = tonic::Request::new(invoke(tool, "{}"));
    if let Some(deadline) = caller_deadline {
        request.set_timeout(deadline);
    }
    let started = Instant::now();
    let status = client
        .invoke(request)
        .await
        .expect_err("the call cannot succeed");
    (status, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_that_never_answers_is_deadline_exceeded() {
    let registry = TestRegistry::start(Config::default()).await;
    announce(&registry, "mute", &silent_endpoint().await, None).await;

    // The caller's deadline runs out while the registry waits.
    let deadline = CALLER_DEADLINE;
    let (status, took) = invoke_within(&registry, "mute", Some(deadline)).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(took < deadline, "the registry answered after {took:?}");

    // The tool's own timeout runs out.
    announce(
        &registry,
        "mute_with_timeout",
        &silent_endpoint().await,
        Some(Duration::from_millis(500)),
    )
    .await;
    let (status, took) = invoke_within(&registry, "mute_with_timeout", None).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(took >= Duration::from_millis(500), "{took:?}");
    assert!(
        status.message().contains("deadline of 500ms exceeded"),
        "{}",
        status.message()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_that_runs_out_while_connecting_is_deadline_exceeded() {
    let registry = TestRegistry::start(Config {
        connect_timeout: Duration::from_secs(30),
        ..Config::default()
    })
    .await;
    let (endpoint, _queue) = unanswered_endpoint().await;
    announce(&registry, "far", &endpoint, None).await;
    let deadline = CALLER_DEADLINE;
    let (status, took) = invoke_within(&registry, "far", Some(deadline)).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(took < deadline, "the registry answered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_fails_before_the_deadline_is_unavailable() {
    // --connect-timeout ends the attempt well within the caller's deadline.
    let connect_timeout = Duration::from_millis(500);
    let registry = TestRegistry::start(Config {
        connect_timeout,
        ..Config::default()
    })
    .await;
    let (endpoint, _queue) = unanswered_endpoint().await;
    announce(&registry, "far", &endpoint, None).await;
    let (status, took) = invoke_within(&registry, "far", Some(Duration::from_secs(20))).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        took >= connect_timeout && took < Duration::from_secs(10),
        "gave up after {took:?}, with --connect-timeout {connect_timeout:?}"
    );

    // Refused at once: nothing listens on a reserved port.
    let refused = format!("http://127.0.0.1:{}", reserved_port());
    announce(&registry, "closed", &refused, None).await;
    let (status, took) = invoke_within(&registry, "closed", Some(Duration::from_secs(20))).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(took < connect_timeout, "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_command_is_cut_at_the_tool_timeout() {
    let registry = TestRegistry::start(Config::default()).await;
    let timeout = Duration::from_millis(500);
    let tools = command_tools(
        r#"
tools:
  - name: slow
    description: Takes far too long
    timeout: 500ms
    backend:
      command: ["sleep", "30"]
"#,
    );
    let _sidecar = TestSidecar::start(&registry.url(), "s1", tools).await;
    wait_for_instances(&registry, "slow", 1).await;
    let (status, took) = invoke_within(&registry, "slow", None).await;
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // The sidecar keeps its answer margin (a twentieth) of the time back.
    assert!(took >= timeout * 9 / 10 && took < timeout * 10, "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caller_deadline_wins_when_shorter() {
    let registry = TestRegistry::start(Config::default()).await;
    let _sidecar = TestSidecar::start(
        &registry.url(),
        "s1",
        vec![sleep_tool(Duration::from_secs(20))],
    )
    .await;
    wait_for_instances(&registry, "sleep", 1).await;
    let deadline = CALLER_DEADLINE;
    let mut request = tonic::Request::new(invoke("sleep", r#"{"millis": 10000}"#));
    request.set_timeout(deadline);
    let started = Instant::now();
    let status = registry.client().await.invoke(request).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    // Answered by the registry, before the caller's own timer, and not
    // before the registry's share of the deadline.
    assert!(took < deadline && took >= deadline * 9 / 10, "{took:?}");
}
