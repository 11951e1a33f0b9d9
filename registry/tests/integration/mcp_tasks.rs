//! The Tasks extension on `/mcp` (`io.modelcontextprotocol/tasks`,
//! 2026-07-28): a long tool called by a client that offers the extension
//! answers with a task handle; `tasks/get` shows it working, with its
//! progress, then its result; `tasks/cancel` stops it; the task is the
//! one `toolmesh.v1.Tasks` shows, only to its caller, and any replica
//! answers for it in Redis mode.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolmesh_proto::pb::{self, tasks_client::TasksClient};
use toolmesh_registry::Config;

use crate::common::redis_server::RedisServer;
use crate::common::{TestSidecar, command_tools};
use crate::mcp::{MODERN, McpRegistry, Rpc, config, modern_request};
use crate::mcp_access::write_keys;
use crate::redis_replicas::replica_config;
use crate::tasks::long_tool_yaml;

const TASKS: &str = "io.modelcontextprotocol/tasks";

/// Per-request capabilities offering the extension, or none.
fn capabilities(offer: bool) -> Value {
    if offer {
        json!({"extensions": {TASKS: {}}})
    } else {
        json!({})
    }
}

/// A 2026-07-28 request of `method` with `params`, offering the
/// extension or not, named (`Mcp-Name`) by `name`: its JSON-RPC answer.
async fn request(
    rpc: &Rpc,
    id: u64,
    method: &str,
    params: Value,
    name: &str,
    offer: bool,
) -> Value {
    let mut body = modern_request(id, method, params);
    body["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = capabilities(offer);
    let headers = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", method),
        ("mcp-name", name),
    ];
    let reply = rpc.post(&body, &headers).await;
    reply
        .message
        .unwrap_or_else(|| panic!("a JSON-RPC answer: {} {}", reply.status, reply.body))
}

async fn call(rpc: &Rpc, id: u64, tool: &str, offer: bool) -> Value {
    let params = json!({"name": tool, "arguments": {}});
    request(rpc, id, "tools/call", params, tool, offer).await
}

async fn task_request(rpc: &Rpc, id: u64, method: &str, task: &str, offer: bool) -> Value {
    request(rpc, id, method, json!({"taskId": task}), task, offer).await
}

/// Polls `tasks/get` every 100 ms until the task is over: every result.
async fn poll_until_over(rpc: &Rpc, task: &str, within: Duration) -> Vec<Value> {
    let deadline = Instant::now() + within;
    let mut seen = Vec::new();
    for id in 1_000.. {
        let answer = task_request(rpc, id, "tasks/get", task, true).await;
        let result = answer["result"].clone();
        assert_eq!(result["resultType"], "complete", "{answer}");
        let status = result["status"].as_str().map(str::to_owned);
        seen.push(result);
        if matches!(
            status.as_deref(),
            Some("completed" | "failed" | "cancelled")
        ) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not over in {within:?}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tool_answers_a_client_that_offers_tasks_with_one() {
    let registry = McpRegistry::start(config()).await;
    let rpc = Rpc::new(&registry.mcp);
    let _sidecar = TestSidecar::start(&registry.grpc, "s", command_tools(&long_tool_yaml(2))).await;
    rpc.wait_listed("long", true).await;

    let discovered = rpc.modern(1, "server/discover", json!({})).await;
    let capabilities = &discovered.message.expect("an answer")["result"]["capabilities"];
    assert_eq!(
        capabilities["extensions"][TASKS],
        json!({}),
        "{capabilities}"
    );

    // Without the extension, the call is bounded by the tool's timeout.
    let inline = call(&rpc, 2, "long", false).await;
    assert_eq!(inline["result"]["isError"], true, "{inline}");
    assert_eq!(
        inline["result"]["_meta"]["toolmesh/code"],
        "DEADLINE_EXCEEDED"
    );

    // With it, the call is a task.
    let handle = call(&rpc, 3, "long", true).await;
    let created = &handle["result"];
    assert_eq!(created["resultType"], "task", "{handle}");
    assert_eq!(created["status"], "working");
    assert!(created["pollIntervalMs"].as_u64().is_some(), "{created}");
    assert!(created["ttlMs"].as_u64().is_some_and(|ms| ms > 60_000));
    let id = created["taskId"].as_str().expect("a task id").to_owned();

    // The registry's own task, seen over gRPC too.
    let mut grpc = TasksClient::connect(registry.grpc.clone())
        .await
        .expect("connect");
    let same = grpc
        .get_task(pb::GetTaskRequest { id: id.clone() })
        .await
        .expect("the task over gRPC")
        .into_inner();
    assert_eq!(same.tool, "long");

    // `tasks/*` need the extension offered on the request itself.
    let refused = task_request(&rpc, 4, "tasks/get", &id, false).await;
    assert_eq!(refused["error"]["code"], -32021, "{refused}");

    let seen = poll_until_over(&rpc, &id, Duration::from_secs(30)).await;
    let last = seen.last().expect("the end");
    assert_eq!(last["status"], "completed", "{seen:?}");
    assert_eq!(last["result"]["isError"], false, "{last}");
    assert_eq!(last["result"]["structuredContent"], json!({"done": true}));
    assert!(
        seen.iter()
            .any(|t| t["status"] == "working" && t["statusMessage"] == "half way"),
        "the command's progress as the status message: {seen:?}"
    );

    let unknown = task_request(&rpc, 5, "tasks/get", "no-such-task", true).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let unknown = task_request(&rpc, 6, "tasks/cancel", "no-such-task", true).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");

    // A cancel is acknowledged; the task is cancelled. Once over, a cancel
    // and an update are acknowledged and change nothing.
    let second = call(&rpc, 7, "long", true).await;
    let second = second["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    let ack = task_request(&rpc, 8, "tasks/cancel", &second, true).await;
    assert_eq!(ack["result"], json!({"resultType": "complete"}), "{ack}");
    let got = task_request(&rpc, 9, "tasks/get", &second, true).await;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    let ack = task_request(&rpc, 10, "tasks/cancel", &id, true).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let params = json!({"taskId": id, "inputResponses": {"never-asked": {"action": "accept"}}});
    let ack = request(&rpc, 11, "tasks/update", params, &id, true).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let got = task_request(&rpc, 12, "tasks/get", &id, true).await;
    assert_eq!(got["result"]["status"], "completed", "{got}");

    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callers_task_is_unknown_to_another_caller_unless_the_policy_grants_it() {
    let dir = tempfile::tempdir().expect("a directory");
    let keys = write_keys(
        dir.path(),
        &[
            ("alice", "alice-key-0123456789"),
            ("bob", "bob-key-0123456789"),
            ("ops", "ops-key-0123456789"),
        ],
    );
    let policy = dir.path().join("policy.yaml");
    let rules = r#"rules:
  - callers: ["*"]
    tools: ["*"]
  - callers: [ops]
    tools: [long]
    tasks_of: ["*"]
"#;
    std::fs::write(&policy, rules).expect("write the policy");
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        policy_file: Some(policy),
        ..config()
    })
    .await;
    let alice = Rpc::new(&registry.mcp).with("authorization", "Bearer alice-key-0123456789");
    let bob = Rpc::new(&registry.mcp).with("authorization", "Bearer bob-key-0123456789");
    let ops = Rpc::new(&registry.mcp).with("authorization", "Bearer ops-key-0123456789");
    let _sidecar = TestSidecar::start(&registry.grpc, "s", command_tools(&long_tool_yaml(5))).await;
    alice.wait_listed("long", true).await;

    let handle = call(&alice, 1, "long", true).await;
    let id = handle["result"]["taskId"]
        .as_str()
        .expect("a task")
        .to_owned();
    for method in ["tasks/get", "tasks/cancel"] {
        let refused = task_request(&bob, 2, method, &id, true).await;
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
    }
    let got = task_request(&alice, 3, "tasks/get", &id, true).await;
    assert_eq!(
        got["result"]["status"], "working",
        "bob's cancel did nothing: {got}"
    );

    // `tasks_of` lets ops see and cancel anyone's tasks of `long`.
    let seen = task_request(&ops, 4, "tasks/get", &id, true).await;
    assert_eq!(seen["result"]["status"], "working", "{seen}");
    let ack = task_request(&ops, 5, "tasks/cancel", &id, true).await;
    assert_eq!(ack["result"]["resultType"], "complete", "{ack}");
    let got = task_request(&alice, 6, "tasks/get", &id, true).await;
    assert_eq!(got["result"]["status"], "cancelled", "{got}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_replica_answers_for_a_task_started_at_another() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let config = replica_config(&redis.url(), "mcp-tasks", Duration::from_secs(10));
    let first = McpRegistry::start(config.clone()).await;
    let second = McpRegistry::start(config).await;
    let (rpc_first, rpc_second) = (Rpc::new(&first.mcp), Rpc::new(&second.mcp));
    let _sidecar = TestSidecar::start(&first.grpc, "s", command_tools(&long_tool_yaml(2))).await;
    rpc_first.wait_listed("long", true).await;

    let handle = call(&rpc_first, 1, "long", true).await;
    let id = handle["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {handle}"))
        .to_owned();
    // 2026-07-28 has no sessions: the second replica answers at once.
    let seen = poll_until_over(&rpc_second, &id, Duration::from_secs(30)).await;
    let last = seen.last().expect("the end");
    assert_eq!(last["status"], "completed", "{seen:?}");
    assert_eq!(last["result"]["structuredContent"], json!({"done": true}));

    first.stop().await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_for_approval_is_a_task_to_a_client_that_offers_tasks_and_an_error_result_to_others()
 {
    let dir = tempfile::tempdir().expect("a directory");
    let keys = toolmesh_test_support::keys::api_keys_file(
        dir.path(),
        &[
            ("agent", "agent-key-0123456789", &[]),
            ("ops", "ops-key-0123456789", &["operators"]),
        ],
    );
    let policy = dir.path().join("policy.yaml");
    let rules = r#"rules:
  - callers: ["*"]
    tools: ["*"]
approvals:
  - name: long-runs
    tools: [long]
    approvers: {groups: [operators]}
    reason: long runs cost money
"#;
    std::fs::write(&policy, rules).expect("write the policy");
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        policy_file: Some(policy),
        ..config()
    })
    .await;
    let agent = Rpc::new(&registry.mcp).with("authorization", "Bearer agent-key-0123456789");
    let _sidecar = TestSidecar::start(&registry.grpc, "s", command_tools(&long_tool_yaml(1))).await;
    agent.wait_listed("long", true).await;

    // A client without the extension reads what is awaited, and the task.
    let inline = call(&agent, 1, "long", false).await;
    assert_eq!(inline["result"]["isError"], true, "{inline}");
    assert_eq!(
        inline["result"]["_meta"]["toolmesh/code"],
        "FAILED_PRECONDITION"
    );
    let text = inline["result"]["content"][0]["text"]
        .as_str()
        .expect("a text block");
    assert!(
        text.contains("waits for approval by groups operators"),
        "{text}"
    );
    assert!(text.contains("long runs cost money"), "{text}");

    // One that offers it gets the task, waiting; an approval runs it.
    let handle = call(&agent, 2, "long", true).await;
    let created = &handle["result"];
    assert_eq!(created["resultType"], "task", "{handle}");
    assert_eq!(created["status"], "working");
    assert!(
        created["statusMessage"]
            .as_str()
            .is_some_and(|m| m.starts_with("awaits approval by groups operators")),
        "{created}"
    );
    let id = created["taskId"].as_str().expect("a task id").to_owned();
    let mut approvals =
        toolmesh_proto::pb::approvals_client::ApprovalsClient::connect(registry.grpc.clone())
            .await
            .expect("connect");
    let mut approve = tonic::Request::new(pb::ApproveRequest {
        task_id: id.clone(),
        comment: "fine".into(),
        digest: String::new(),
    });
    approve.metadata_mut().insert(
        "authorization",
        "Bearer ops-key-0123456789".parse().expect("ascii"),
    );
    approvals.approve(approve).await.expect("approved");
    let seen = poll_until_over(&agent, &id, Duration::from_secs(30)).await;
    let last = seen.last().expect("the end");
    assert_eq!(last["status"], "completed", "{seen:?}");
    assert_eq!(last["result"]["structuredContent"], json!({"done": true}));
    registry.stop().await;
}
