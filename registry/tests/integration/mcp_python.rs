//! The interop acceptance point: the official Python `mcp` SDK (v2.3.0,
//! unmodified; `registry/tests/mcp/client.py` drives it) against a real
//! registry's `/mcp` and a real sidecar, at 2026-07-28 (discover, no
//! handshake), 2025-11-25 and 2025-06-18 (handshake). It lists every page,
//! calls (success, schema violation, tool error, rate limit, unknown tool,
//! search), and hears `tools/list_changed` when a sidecar joins and leaves.
//! What it prints, one JSON object per line, is checked here.

use std::{process::Stdio, sync::Arc, sync::atomic::AtomicUsize, time::Duration};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader, Lines},
    process::{Child, ChildStdout, Command},
};
use toolmesh_registry::Config;
use toolmesh_test_support::{mcp::python_with_sdk, server::sidecar, tools::adder};

use crate::mcp::{HANDSHAKE, MODERN, McpRegistry, Rpc, config, standard_sidecar};
use crate::mcp_content::everything_behind_a_sidecar;

/// Longest the client may be silent.
const LINE_WITHIN: Duration = Duration::from_secs(90);

/// The Python client, running.
struct PythonClient {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
}

impl PythonClient {
    fn spawn(python: &str, url: &str, revision: &str, token: Option<&str>, scenario: &str) -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/client.py");
        let mut command = Command::new(python);
        command
            .arg(script)
            .args(["--url", url, "--revision", revision, "--scenario", scenario])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(token) = token {
            command.args(["--token", token]);
        }
        let mut child = command.spawn().expect("start the Python client");
        let stdout = child.stdout.take().expect("stdout");
        Self {
            child,
            lines: BufReader::new(stdout).lines(),
            seen: Vec::new(),
        }
    }

    /// What it printed so far, and its stderr, for a failure message.
    async fn transcript(&mut self) -> String {
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            let _ = self.child.start_kill();
            let _ = tokio::time::timeout(Duration::from_secs(5), pipe.read_to_string(&mut stderr))
                .await;
        }
        let tail: String = stderr
            .chars()
            .rev()
            .take(4000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("stdout:\n{}\nstderr (end):\n{tail}", self.seen.join("\n"))
    }

    /// The next line that is step `name`; fails on a `failed` step, an
    /// early end, or silence.
    async fn step(&mut self, name: &str) -> Value {
        loop {
            let line = match tokio::time::timeout(LINE_WITHIN, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => line,
                Ok(Ok(None) | Err(_)) => {
                    let transcript = self.transcript().await;
                    panic!("the client ended before step {name:?}\n{transcript}");
                }
                Err(_) => {
                    let transcript = self.transcript().await;
                    panic!("no step {name:?} within {LINE_WITHIN:?}\n{transcript}");
                }
            };
            self.seen.push(line.clone());
            let Ok(value) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if value["step"] == name {
                return value;
            }
            if value["step"] == "failed" {
                let transcript = self.transcript().await;
                panic!("the client failed before step {name:?}\n{transcript}");
            }
        }
    }

    /// Waits for the client to exit, and says whether it succeeded.
    async fn succeeded(self) -> bool {
        self.finish().await.0
    }

    /// Waits for the client to exit: whether it succeeded, and what it
    /// wrote to stderr (the SDK's warnings).
    async fn finish(self) -> (bool, String) {
        let output = tokio::time::timeout(Duration::from_secs(30), self.child.wait_with_output())
            .await
            .expect("the client exits")
            .expect("its status");
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }
}

fn names(value: &Value) -> Vec<&str> {
    value["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

/// The whole interop scenario at `revision`.
async fn interop_at(revision: &str) {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let registry = McpRegistry::start(config()).await;
    let rpc = Rpc::new(&registry.mcp);
    let _standard = standard_sidecar(&registry, &rpc).await;
    let mut client = PythonClient::spawn(&python, &registry.mcp, revision, None, "interop");

    let connected = client.step("connected").await;
    assert_eq!(connected["protocolVersion"], revision, "{connected}");
    assert_eq!(connected["listChanged"], true, "{connected}");
    if revision != MODERN {
        assert_eq!(connected["server"], "toolmesh-registry", "{connected}");
    }

    let list = client.step("list").await;
    assert_eq!(
        names(&list),
        ["add", "limited", "toolmesh.search_tools"],
        "{list}"
    );
    assert_eq!(list["pages"], 2, "two tools per page: {list}");
    let add = &list["tools"]["add"];
    assert_eq!(add["description"], "Add two integers");
    assert_eq!(add["inputSchema"]["type"], "object");
    assert_eq!(
        add["inputSchema"]["required"],
        serde_json::json!(["a", "b"])
    );
    assert!(
        add["outputSchema"]["properties"]["sum"].is_object(),
        "{add}"
    );
    assert_eq!(add["annotations"]["idempotentHint"], true, "{add}");
    let search = &list["tools"]["toolmesh.search_tools"];
    assert_eq!(search["annotations"]["readOnlyHint"], true, "{search}");

    let call = client.step("call").await;
    assert_eq!(call["isError"], false, "{call}");
    assert_eq!(call["structured"]["sum"], 42, "{call}");

    let invalid = client.step("invalid").await;
    assert_eq!(invalid["isError"], true, "{invalid}");
    let text = invalid["text"].as_str().unwrap_or_default();
    assert!(text.contains("- /a: "), "{text}");
    assert!(text.contains("- /b: "), "{text}");
    assert_eq!(
        invalid["meta"]["toolmesh/code"], "INVALID_ARGUMENT",
        "{invalid}"
    );

    let failed = client.step("tool_error").await;
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(failed["text"], "13 is unlucky", "{failed}");

    let limited = client.step("rate_limited").await;
    let outcomes = limited["outcomes"].as_array().expect("outcomes");
    assert_eq!(outcomes[0]["isError"], false, "{limited}");
    assert_eq!(outcomes[1]["isError"], false, "{limited}");
    let refused = &outcomes[2];
    assert_eq!(refused["isError"], true, "{limited}");
    let text = refused["text"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("Rate limit of \"limited\" reached (0.01 calls/s, burst 2). Retry in "),
        "{text}"
    );
    let delay = refused["meta"]["toolmesh/retryAfterMs"]
        .as_u64()
        .expect("retryAfterMs");
    assert!((1..=100_000).contains(&delay), "{delay}");

    let unknown = client.step("unknown").await;
    assert_eq!(unknown["raised"], true, "{unknown}");
    assert_eq!(unknown["code"], -32602, "{unknown}");
    assert_eq!(unknown["message"], "Unknown tool: nope", "{unknown}");

    let found = client.step("search").await;
    assert_eq!(found["isError"], false, "{found}");
    assert_eq!(found["structured"]["tools"][0]["name"], "add", "{found}");

    if revision == MODERN {
        let subscribed = client.step("subscribed").await;
        assert_eq!(
            subscribed["honored"]["toolsListChanged"], true,
            "{subscribed}"
        );
    }
    let waiting = client.step("waiting").await;
    assert_eq!(waiting["label"], "joined");
    let late = sidecar(
        &registry.grpc,
        "s2",
        vec![adder("late", Arc::new(AtomicUsize::new(0))).build()],
    )
    .await;
    let joined = client.step("list_changed").await;
    assert_eq!(joined["label"], "joined");
    assert!(names(&joined).contains(&"late"), "{joined}");

    let waiting = client.step("waiting").await;
    assert_eq!(waiting["label"], "left");
    late.stop().await;
    let left = client.step("list_changed").await;
    assert_eq!(left["label"], "left");
    assert!(!names(&left).contains(&"late"), "{left}");

    client.step("done").await;
    let (succeeded, stderr) = client.finish().await;
    assert!(succeeded, "{stderr}");
    // A handshake revision's session ends with a DELETE the SDK checks.
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    assert!(stderr.trim().is_empty(), "no SDK warning: {stderr}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_at_2026_07_28() {
    interop_at(MODERN).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_at_2025_11_25() {
    interop_at(HANDSHAKE[0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_at_2025_06_18() {
    interop_at(HANDSHAKE[1]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_with_and_without_a_key() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let keys =
        toolmesh_test_support::keys::api_keys_file(dir.path(), &[("py", "py-key-0123456789", &[])]);
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        ..config()
    })
    .await;
    for revision in [MODERN, HANDSHAKE[0], HANDSHAKE[1]] {
        let mut client = PythonClient::spawn(
            &python,
            &registry.mcp,
            revision,
            Some("py-key-0123456789"),
            "connect",
        );
        let list = client.step("list").await;
        assert_eq!(
            names(&list),
            ["toolmesh.search_tools"],
            "{revision}: {list}"
        );
        assert!(client.succeeded().await, "{revision}");

        let mut client = PythonClient::spawn(&python, &registry.mcp, revision, None, "connect");
        let failed = client.step("failed").await;
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("MCPError(-32001, 'unauthenticated: no credential"),
            "{revision}: {failed}"
        );
        assert!(!client.succeeded().await, "{revision}");
    }
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_gets_a_wrapped_servers_text_and_image_as_blocks() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let registry = McpRegistry::start(config()).await;
    let Some(_sidecar) = everything_behind_a_sidecar(&registry, &["echo", "get-tiny-image"]).await
    else {
        return;
    };
    for revision in [MODERN, HANDSHAKE[0]] {
        let mut client = PythonClient::spawn(&python, &registry.mcp, revision, None, "content");
        let echo = client.step("content").await;
        assert_eq!(echo["tool"], "everything.echo", "{echo}");
        assert_eq!(
            echo["blocks"],
            serde_json::json!([{"class": "TextContent", "type": "text", "text": "Echo: hi"}]),
            "{revision}"
        );
        let image = client.step("content").await;
        assert_eq!(image["isError"], false, "{image}");
        let blocks = image["blocks"].as_array().expect("blocks");
        let kinds: Vec<&str> = blocks.iter().filter_map(|b| b["class"].as_str()).collect();
        assert_eq!(
            kinds,
            ["TextContent", "ImageContent", "TextContent"],
            "{image}"
        );
        assert_eq!(blocks[1]["mimeType"], "image/png", "{image}");
        assert!(
            blocks[1]["data"].as_str().is_some_and(|d| d.len() > 100),
            "{image}"
        );
        client.step("done").await;
        let (succeeded, stderr) = client.finish().await;
        assert!(succeeded, "{revision}: {stderr}");
        assert!(stderr.trim().is_empty(), "{revision}: {stderr}");
    }
    registry.stop().await;
}

/// The registry with a sidecar serving `long` (a command tool that takes
/// `seconds`, 1 s interactive timeout, 60 s task timeout).
async fn long_tool_registry(seconds: u32) -> (McpRegistry, crate::common::TestSidecar) {
    let registry = McpRegistry::start(config()).await;
    let rpc = Rpc::new(&registry.mcp);
    let sidecar = crate::common::TestSidecar::start(
        &registry.grpc,
        "s",
        crate::common::command_tools(&crate::tasks::long_tool_yaml(seconds)),
    )
    .await;
    rpc.wait_listed("long", true).await;
    (registry, sidecar)
}

/// The lines of one step the client printed so far.
fn printed<'a>(client: &'a PythonClient, step: &'a str) -> impl Iterator<Item = Value> + 'a {
    client
        .seen
        .iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(move |value| value["step"] == step)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_runs_a_task_through_the_tasks_extension() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let (registry, _sidecar) = long_tool_registry(2).await;
    let mut client = PythonClient::spawn(&python, &registry.mcp, MODERN, None, "task");

    let connected = client.step("connected").await;
    assert_eq!(connected["protocolVersion"], MODERN, "{connected}");
    let created = client.step("observed").await;
    assert_eq!(created["kind"], "created", "{created}");
    assert_eq!(created["resultType"], "task", "{created}");
    assert_eq!(created["status"], "working", "{created}");
    let id = created["taskId"].as_str().expect("a task id").to_owned();

    let task = client.step("task").await;
    assert_eq!(task["isError"], false, "{task}");
    assert_eq!(
        task["structured"],
        serde_json::json!({"done": true}),
        "{task}"
    );
    let polls: Vec<Value> = printed(&client, "observed")
        .filter(|o| o["kind"] == "polled")
        .collect();
    let last = polls.last().expect("at least one poll");
    assert_eq!(last["status"], "completed", "{polls:?}");
    assert_eq!(last["taskId"], id.as_str(), "{polls:?}");
    assert!(client.succeeded().await);
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_cancels_a_task_it_stops_waiting_for() {
    let Some(python) = python_with_sdk() else {
        return;
    };
    let (registry, _sidecar) = long_tool_registry(30).await;
    let mut client = PythonClient::spawn(&python, &registry.mcp, MODERN, None, "task-cancel");

    let cancelled = client.step("task_cancelled").await;
    let id = cancelled["taskId"].as_str().expect("a task id").to_owned();
    assert!(
        printed(&client, "observed").any(|o| o["kind"] == "cancelled"),
        "the extension sent tasks/cancel: {:?}",
        client.seen
    );
    let mut grpc = toolmesh_proto::pb::tasks_client::TasksClient::connect(registry.grpc.clone())
        .await
        .expect("connect");
    let task = grpc
        .get_task(toolmesh_proto::pb::GetTaskRequest { id })
        .await
        .expect("the task")
        .into_inner();
    assert_eq!(
        task.state,
        toolmesh_proto::pb::TaskState::Cancelled as i32,
        "{task:?}"
    );
    assert!(client.succeeded().await);
    registry.stop().await;
}
