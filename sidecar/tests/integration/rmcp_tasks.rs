//! The Rust MCP SDK (rmcp, unmodified) as a client of the registry's
//! `/mcp`, with the Tasks extension (`io.modelcontextprotocol/tasks`,
//! 2026-07-28): a long tool's `tools/call` answers with a task handle,
//! `tasks/get` follows it to its result, `tasks/cancel` stops another.

use std::time::{Duration, Instant};

use rmcp::model::ProtocolVersion;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt as _, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;

use crate::common::{LoopbackServer, loopback_listener, sidecar, tools_from_yaml};

const PATIENCE: Duration = Duration::from_secs(30);

/// A registry with its MCP endpoint, and a sidecar serving `long` (a
/// command that reports progress, takes `seconds`, then answers; its
/// interactive timeout 1 s): the registry's gRPC server, the sidecar, and
/// the `/mcp` URL, and the directory its tools run in.
async fn mesh(seconds: u32) -> (LoopbackServer, LoopbackServer, String, tempfile::TempDir) {
    let mcp = loopback_listener().await;
    let url = format!("http://{}/mcp", mcp.local_addr().expect("bound"));
    let registry = LoopbackServer::spawn(
        loopback_listener().await,
        move |listener, shutdown| async move {
            toolmesh_registry::Registry::from_config(toolmesh_registry::Config::default())?
                .with_mcp(mcp)
                .serve(listener, shutdown)
                .await
        },
    );
    let yaml = format!(
        r#"tools:
  - name: long
    description: Takes a while, then says it is done
    timeout: 1s
    task_timeout: 60s
    backend:
      command: ["sh", "-c", "echo 'toolmesh-progress {{\"message\": \"started\"}}' >&2; sleep {seconds}; echo '{{\"done\": true}}'"]
"#
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    let sidecar = sidecar(&registry.url(), "s", tools_from_yaml(&yaml, dir.path())).await;
    let client =
        toolmesh_proto::pb::tool_registry_client::ToolRegistryClient::connect(registry.url())
            .await
            .expect("connect");
    toolmesh_test_support::catalog::wait_for_instances(&client, "long", 1, PATIENCE).await;
    (registry, sidecar, url, dir)
}

/// An rmcp client of `url` at 2026-07-28, declaring the Tasks extension.
async fn client(url: &str) -> RunningService<RoleClient, ClientConfig> {
    toolmesh_proto::tls::install_default_provider();
    let info = ClientConfig::new(
        ClientCapabilities::builder().enable_tasks().build(),
        Implementation::new("toolmesh-rmcp-test", "1"),
    );
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    info.serve_with_lifecycle(StreamableHttpClientTransport::from_uri(url), lifecycle)
        .await
        .expect("connect to /mcp")
}

async fn start(client: &RunningService<RoleClient, ClientConfig>) -> String {
    match client
        .call_tool_once(CallToolRequestParams::new("long").with_arguments(Default::default()))
        .await
        .expect("tools/call")
    {
        CallToolResponse::Task(created) => {
            assert_eq!(created.task.status, TaskStatus::Working, "{created:?}");
            created.task.task_id
        }
        other => panic!("a task handle, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_runs_a_task_through_the_registrys_mcp_endpoint() {
    let (_registry, _sidecar, url, _dir) = mesh(2).await;
    let client = client(&url).await;

    let id = start(&client).await;
    let deadline = Instant::now() + PATIENCE;
    let mut messages = Vec::new();
    let result = loop {
        let got = client
            .get_task(GetTaskParams::new(id.clone()))
            .await
            .expect("tasks/get");
        messages.extend(got.task.task.status_message.clone());
        match got.task.payload {
            TaskPayload::Working => {}
            TaskPayload::Completed { result } => break result,
            other => panic!("completed, not {other:?}"),
        }
        assert!(Instant::now() < deadline, "not over in {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let result = serde_json::Value::Object(result);
    assert_eq!(
        result["structuredContent"],
        serde_json::json!({"done": true}),
        "{result}"
    );
    assert_eq!(result["isError"], false, "{result}");
    assert!(messages.iter().any(|m| m == "started"), "{messages:?}");

    // Another task, cancelled: acknowledged, then cancelled.
    let second = start(&client).await;
    client
        .cancel_task(CancelTaskParams::new(second.clone()))
        .await
        .expect("tasks/cancel");
    let got = client
        .get_task(GetTaskParams::new(second))
        .await
        .expect("tasks/get");
    assert_eq!(got.task.status(), TaskStatus::Cancelled, "{got:?}");

    // An unknown task is an error.
    let unknown = client.get_task(GetTaskParams::new("no-such-task")).await;
    assert!(unknown.is_err(), "{unknown:?}");
    let _ = client.cancel().await;
}
