//! `ToolRuntime.Execute` through a real tonic client against `serve()`.

use std::time::Duration;

use tokio::time::Instant;
use toolmesh_proto::pb;

use crate::common::{TestRegistry, runtime_client, sidecar, tools_from_yaml};

const TOOLS: &str = r#"
tools:
  - name: echo
    description: Echo the arguments
    backend: {command: [cat]}
  - name: slow
    description: Sleep
    timeout: 20s
    backend: {command: [sleep, "30"]}
"#;

fn request(tool: &str, timeout: Option<Duration>) -> tonic::Request<pb::ExecuteRequest> {
    let mut request = tonic::Request::new(pb::ExecuteRequest {
        tool: tool.into(),
        arguments_json: r#"{"x": 1}"#.into(),
        invocation_id: "inv-1".into(),
        ..Default::default()
    });
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn execute_over_grpc() {
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let dir = tempfile::tempdir().unwrap();
    let sidecar = sidecar(
        &registry.url(),
        "test-instance",
        tools_from_yaml(TOOLS, dir.path()),
    )
    .await;
    let mut client = runtime_client(sidecar.url(), "test-instance").await;

    let ok = client
        .execute(request("echo", Some(Duration::from_secs(10))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (ok.result_json.as_str(), ok.is_error),
        (r#"{"x": 1}"#, false)
    );

    let missing = client.execute(request("nope", None)).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    // The caller's deadline (2 s) is shorter than the tool's (20 s). The
    // sidecar answers DEADLINE_EXCEEDED itself, a margin before the
    // caller's deadline (tonic's own timeout would say CANCELLED).
    let start = Instant::now();
    let late = client
        .execute(request("slow", Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(
        (late.code(), late.message()),
        (tonic::Code::DeadlineExceeded, "deadline exceeded"),
        "{late:?}"
    );
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");

    sidecar.stop().await;
}
