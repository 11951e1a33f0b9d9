//! `ToolRuntime.Execute` through a real tonic client against `serve()`.

use std::time::Duration;

use tokio::time::Instant;
use toolmesh_proto::pb;
use toolmesh_sidecar::config::SidecarConfig;

use crate::common::{registry, runtime_client, sidecar};

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
    });
    if let Some(timeout) = timeout {
        request.set_timeout(timeout);
    }
    request
}

#[tokio::test]
async fn execute_over_grpc() {
    let (_registry, url, _stop) = registry(Duration::from_secs(10)).await;
    let dir = tempfile::tempdir().unwrap();
    let tools = SidecarConfig::from_yaml_str(TOOLS)
        .unwrap()
        .build_tools(dir.path())
        .unwrap();
    let sidecar = sidecar(tools, &url).await;
    let mut client = runtime_client(sidecar.url()).await;

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

    // The caller's deadline (2 s) is shorter than the tool's (20 s).
    let start = Instant::now();
    let late = client
        .execute(request("slow", Some(Duration::from_secs(2))))
        .await
        .unwrap_err();
    assert_eq!(late.code(), tonic::Code::DeadlineExceeded, "{late:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );

    sidecar.shutdown().await.unwrap();
}
