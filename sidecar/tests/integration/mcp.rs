//! MCP servers wrapped by the `toolmesh-sidecar` binary, as published:
//! `@modelcontextprotocol/server-everything` over stdio, and a server
//! written with the official Python SDK over streamable HTTP. Their tools
//! are listed and invoked through the real registry's `Invoke`.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use tonic::Code;
use tonic_types::StatusExt as _;
use toolmesh_test_support::mcp::{everything_server, python_with_sdk};

use crate::common::{
    SidecarProcess, TestRegistry, binary, eventually, reserved_port, send, wait_until,
};
use crate::metrics::{admin_address, get};

/// Registry lease: longer than any wait here, so a tool that leaves the
/// catalog was withdrawn, not expired.
pub(crate) const TTL: Duration = Duration::from_secs(30);
/// How long a server may take to start and list its tools on a busy
/// machine (Node and Python start in seconds).
const PATIENCE: Duration = Duration::from_secs(60);

/// The server-everything tools the test calls.
const EVERYTHING_TOOLS: [&str; 4] = [
    "everything.echo",
    "everything.get-structured-content",
    "everything.get-sum",
    "everything.gzip-file-as-resource",
];
/// The Python server's tools the test calls.
const PYTHON_TOOLS: [&str; 4] = ["py.add", "py.add_tool", "py.divide", "py.whoami"];

/// The sidecar binary serving `yaml` on a loopback port, announcing to
/// `registry` as `instance`, with `extra` flags and `envs` added to its
/// environment.
pub(crate) fn spawn(
    bin: &Path,
    yaml: &str,
    registry: &TestRegistry,
    instance: &str,
    extra: &[&str],
    envs: &[(&str, &str)],
) -> SidecarProcess {
    let url = registry.url();
    let mut args = vec![
        "--registry",
        &url,
        "--listen",
        "127.0.0.1:0",
        "--instance-id",
        instance,
    ];
    args.extend_from_slice(extra);
    SidecarProcess::spawn(bin, yaml, &args, envs)
}

/// Waits until each of `tools` has a live instance: the registry's reads
/// take an announce's tools one by one, so one tool listed does not mean
/// all are.
pub(crate) async fn wait_for_all(registry: &TestRegistry, tools: &[&str]) {
    for tool in tools {
        registry.wait_for_instances(tool, 1, PATIENCE).await;
    }
}

/// The result of a call that ran, as JSON.
pub(crate) fn ran(response: &toolmesh_proto::pb::InvokeResponse) -> Value {
    serde_json::from_str(&response.result_json).expect("the result is JSON")
}

/// The result of calling `tool` with `arguments`, which ran and failed
/// (the tool's own error, not the registry's refusal).
pub(crate) async fn tool_error(registry: &TestRegistry, tool: &str, arguments: &Value) -> String {
    let answer = registry
        .invoke(tool, &arguments.to_string())
        .await
        .expect("ran");
    assert!(answer.is_error, "{}", answer.result_json);
    answer.result_json
}

/// The field the registry's `BadRequest` names first when it refuses
/// `arguments` for `tool` (the server never sees the call).
pub(crate) async fn violated(registry: &TestRegistry, tool: &str, arguments: &str) -> String {
    let refused = registry.invoke(tool, arguments).await.expect_err("refused");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    let violations = refused
        .get_details_bad_request()
        .expect("a BadRequest")
        .field_violations;
    violations
        .first()
        .map(|v| v.field.clone())
        .unwrap_or_default()
}

/// The pids of `pid`'s children.
fn children(pid: u32) -> Vec<u32> {
    let tasks = format!("/proc/{pid}/task");
    let Ok(entries) = std::fs::read_dir(tasks) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Kills `sidecar`'s one MCP server process and waits until its `tools`
/// have left the catalog and come back; returns the pid of the server
/// started again.
pub(crate) async fn killed_and_restarted(
    sidecar: &SidecarProcess,
    registry: &TestRegistry,
    tools: &[&str],
) -> u32 {
    let servers = children(sidecar.pid);
    assert_eq!(servers.len(), 1, "one MCP server process: {servers:?}");
    send(servers[0], Signal::SIGKILL);
    eventually(
        TTL / 2,
        "the killed server's tools to leave the catalog",
        || async { registry.tool(tools[0]).await.is_none() },
    )
    .await;
    wait_for_all(registry, tools).await;
    let restarted = children(sidecar.pid);
    assert!(
        restarted.len() == 1 && restarted != servers,
        "a new server process: {restarted:?}, was {servers:?}"
    );
    restarted[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_over_stdio_is_listed_invoked_and_restarted() {
    let (Some(bin), Some(everything)) = (binary("toolmesh-sidecar"), everything_server()) else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{everything}]\n        prefix: everything.\n        deny: [get-env, 'toggle-*', 'trigger-*', simulate-research-query]\n    tags: [mcp]\n    timeout: 20s\n",
        everything = everything.display()
    );
    let mut sidecar = spawn(
        &bin,
        &yaml,
        &registry,
        "everything",
        &["--admin-listen", "127.0.0.1:0"],
        &[],
    );
    sidecar.bound(PATIENCE).await;
    let admin = admin_address(&sidecar).await;
    wait_for_all(&registry, &EVERYTHING_TOOLS).await;
    let server = format!("server=\"{}\"", everything.display());
    let metrics = get(admin, "/metrics").await.1;
    assert!(
        metrics.contains(&format!("toolmesh_sidecar_mcp_up{{{server}}} 1")),
        "{metrics}"
    );
    let published = metrics
        .lines()
        .find_map(|line| line.strip_prefix(&format!("toolmesh_sidecar_mcp_tools{{{server}}} ")))
        .and_then(|count| count.parse::<u32>().ok());
    assert!(published.is_some_and(|count| count >= 6), "{metrics}");

    // Listed with its schemas, title and hints; the denied tools are not.
    let structured = registry
        .descriptor("everything.get-structured-content")
        .await
        .expect("listed");
    assert_eq!(structured.title, "Get Structured Content Tool");
    assert_eq!(structured.read_only, Some(true));
    assert_eq!(structured.tags, ["mcp"]);
    let output: Value = serde_json::from_str(&structured.output_schema_json).expect("JSON");
    assert_eq!(
        output["required"],
        json!(["temperature", "conditions", "humidity"])
    );
    assert!(registry.tool("everything.get-env").await.is_none());
    assert!(
        registry
            .tool("everything.toggle-simulated-logging")
            .await
            .is_none()
    );

    // A success, as text and as structured content.
    let sum = registry
        .invoke("everything.get-sum", r#"{"a": 1, "b": 2}"#)
        .await
        .expect("ran");
    assert!(!sum.is_error, "{}", sum.result_json);
    assert_eq!(ran(&sum), json!("The sum of 1 and 2 is 3."));
    let weather = registry
        .invoke(
            "everything.get-structured-content",
            r#"{"location": "Chicago"}"#,
        )
        .await
        .expect("ran");
    assert!(!weather.is_error, "{}", weather.result_json);
    assert!(
        ran(&weather)["temperature"].is_number(),
        "{}",
        weather.result_json
    );

    // The server's isError: it cannot fetch from a closed loopback port.
    let closed = reserved_port();
    let failed = tool_error(
        &registry,
        "everything.gzip-file-as-resource",
        &json!({"name": "x.gz", "data": format!("http://127.0.0.1:{closed}/x"), "outputType": "resource"}),
    )
    .await;
    assert!(failed.contains("fetch failed"), "{failed}");

    // A schema violation the registry catches before the server sees it:
    // the registry's BadRequest names the field.
    assert_eq!(
        violated(&registry, "everything.echo", r#"{"message": 7}"#).await,
        "/message"
    );

    // Kill the server: its tools leave the catalog (the sidecar serves
    // nothing else, so it leaves the registry), then come back once it is
    // restarted.
    let restarted = killed_and_restarted(&sidecar, &registry, &EVERYTHING_TOOLS).await;
    let echo = registry
        .invoke("everything.echo", r#"{"message": "back"}"#)
        .await
        .expect("ran");
    assert_eq!(ran(&echo), json!("Echo: back"));
    let log = sidecar.log();
    assert!(log.contains("MCP server unavailable"), "{log}");
    // server-everything speaks the handshake revisions only.
    assert!(log.contains("protocol=2025-11-25"), "{log}");
    let metrics = get(admin, "/metrics").await.1;
    assert!(
        metrics.contains(&format!(
            "toolmesh_sidecar_mcp_restarts_total{{{server}}} 1"
        )),
        "{metrics}"
    );

    sidecar.signal(Signal::SIGTERM);
    let status = sidecar.exited(PATIENCE).await;
    assert!(status.success(), "{status}\n{}", sidecar.log());
    eventually(PATIENCE, "the server to stop with the sidecar", || async {
        crate::common::is_dead(restarted)
    })
    .await;
}

/// A stdio server's environment is not the sidecar's: server-everything's
/// `get-env`, called through the registry, shows the minimal set, the
/// variable its entry passes through and the one it sets, and never a
/// secret of the sidecar's (nor the sidecar's own `RUST_LOG`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_sees_only_the_environment_its_entry_names() {
    let (Some(bin), Some(everything)) = (binary("toolmesh-sidecar"), everything_server()) else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{}]\n        allow: [get-env]\n        env_pass: [TOOLMESH_TEST_PASSED, TOOLMESH_TEST_UNSET]\n        env: {{TOOLMESH_TEST_SET: from-the-entry}}\n",
        everything.display()
    );
    let _sidecar = spawn(
        &bin,
        &yaml,
        &registry,
        "environment",
        &[],
        &[
            ("TOOLMESH_TEST_SECRET", "hunter2"),
            ("TOOLMESH_TEST_PASSED", "passed-through"),
        ],
    );
    wait_for_all(&registry, &["get-env"]).await;
    let answer = registry.invoke("get-env", "{}").await.expect("ran");
    assert!(!answer.is_error, "{}", answer.result_json);
    assert!(
        !answer.result_json.contains("hunter2"),
        "{}",
        answer.result_json
    );
    // The tool's text is the environment as JSON.
    let env: serde_json::Map<String, Value> = match ran(&answer) {
        Value::String(text) => serde_json::from_str(&text).expect("the environment as JSON"),
        Value::Object(env) => env,
        other => panic!("not an environment: {other}"),
    };
    assert_eq!(env["TOOLMESH_TEST_PASSED"], "passed-through", "{env:?}");
    assert_eq!(env["TOOLMESH_TEST_SET"], "from-the-entry", "{env:?}");
    assert!(env.contains_key("PATH"), "{env:?}");
    let named = ["TOOLMESH_TEST_PASSED", "TOOLMESH_TEST_SET"];
    let unexpected: Vec<&String> = env
        .keys()
        .filter(|name| {
            !toolmesh_sidecar::mcp::INHERITED.contains(&name.as_str())
                && !name.starts_with(toolmesh_sidecar::mcp::LOCALE_PREFIX)
                && !named.contains(&name.as_str())
        })
        .collect();
    assert!(
        unexpected.is_empty(),
        "variables the entry does not name: {unexpected:?}"
    );
}

/// The Python SDK server on `port`, killed when dropped.
struct PythonServer {
    child: tokio::process::Child,
}

impl PythonServer {
    async fn start(python: &str, port: u16) -> Self {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/python_server.py");
        let child = tokio::process::Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Python MCP server");
        eventually(PATIENCE, "the Python MCP server to listen", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Self { child }
    }
}

/// A stdio server's stderr is logged as the sidecar's own events: under
/// `--log-format json` every line the sidecar writes is still one JSON
/// object, and server-everything's greeting on its stderr is one of them,
/// naming the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_stderr_is_logged_as_the_sidecars_own_events() {
    let (Some(bin), Some(everything)) = (binary("toolmesh-sidecar"), everything_server()) else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{}]\n",
        everything.display()
    );
    let sidecar = spawn(
        &bin,
        &yaml,
        &registry,
        "stderr",
        &["--log-format", "json"],
        &[],
    );
    let label = everything.display().to_string();
    let from_server = |log: &str| -> Vec<Value> {
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|event| {
                event["target"] == "toolmesh_sidecar::mcp::stderr" && event["server"] == *label
            })
            .collect()
    };
    wait_until(PATIENCE, "server-everything's stderr in the log", || {
        !from_server(&sidecar.log()).is_empty()
    })
    .await;
    let log = sidecar.log();
    let greeting = &from_server(&log)[0];
    assert_eq!(greeting["level"], "INFO", "{greeting}");
    assert!(
        greeting["message"]
            .as_str()
            .is_some_and(|m| m.contains("STDIO")),
        "{greeting}"
    );
    for line in log.lines() {
        assert!(
            serde_json::from_str::<Value>(line).is_ok(),
            "a line that is not JSON: {line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_sdk_server_over_streamable_http_is_listed_invoked_and_followed() {
    let (Some(bin), Some(python)) = (binary("toolmesh-sidecar"), python_with_sdk()) else {
        return;
    };
    let port = reserved_port();
    let mut server = PythonServer::start(&python, port).await;
    let registry = TestRegistry::start(TTL).await;
    // Re-listing every hour: a tool that appears sooner came with the
    // server's notifications/tools/list_changed.
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        url: http://127.0.0.1:{port}/mcp\n        prefix: py.\n        relist_interval: 1h\n    rate_limit: {{rate: 100, burst: 100}}\n  - name: wc\n    description: Counts words\n    backend: {{command: [wc, -w]}}\n"
    );
    let mut sidecar = SidecarProcess::start(&bin, &registry.url(), "python", &yaml).await;
    wait_for_all(&registry, &PYTHON_TOOLS).await;

    let add = registry.descriptor("py.add").await.expect("listed");
    assert_eq!(add.title, "Add");
    assert!(add.idempotent, "idempotentHint carried over");
    assert_eq!(add.rate_limit.map(|l| l.rate), Some(100.0));
    let sum = registry
        .invoke("py.add", r#"{"a": 2, "b": 40}"#)
        .await
        .expect("ran");
    assert!(!sum.is_error, "{}", sum.result_json);
    assert_eq!(ran(&sum), json!({"result": 42}));

    let divided = registry
        .invoke("py.divide", r#"{"a": 1, "b": 0}"#)
        .await
        .expect("ran");
    assert!(divided.is_error, "{}", divided.result_json);
    assert!(
        divided.result_json.contains("cannot divide by zero"),
        "{}",
        divided.result_json
    );

    // The call's invocation id (and trace context, when traced) reach the
    // server in `_meta`.
    let whoami = registry.invoke("py.whoami", "{}").await.expect("ran");
    assert!(!whoami.is_error, "{}", whoami.result_json);
    let meta = &ran(&whoami);
    let invocation = meta[toolmesh_sidecar::mcp::INVOCATION_ID_META]
        .as_str()
        .unwrap_or_default();
    assert_eq!(invocation.len(), 36, "a UUID from the registry: {meta}");
    assert!(
        meta.get(toolmesh_sidecar::mcp::CALLER_META).is_none(),
        "anonymous: {meta}"
    );

    assert_eq!(
        violated(&registry, "py.add", r#"{"a": "two", "b": 40}"#).await,
        "/a"
    );

    // The server adds a tool and says so: the catalog follows.
    let added = registry
        .invoke("py.add_tool", r#"{"name": "late"}"#)
        .await
        .expect("ran");
    assert!(!added.is_error, "{}", added.result_json);
    registry.wait_for_instances("py.late", 1, PATIENCE).await;
    let late = registry.invoke("py.late", "{}").await.expect("ran");
    // The Python SDK speaks the current revision: the change came on its
    // subscriptions/listen stream.
    let log = sidecar.log();
    assert!(log.contains("protocol=2026-07-28"), "{log}");
    assert_eq!(ran(&late), json!({"result": "hello from late"}));

    // The server goes away: its tools leave, the sidecar's own stays.
    server.child.kill().await.expect("kill the server");
    eventually(
        PATIENCE,
        "the server's tools to leave the catalog",
        || async { registry.tool("py.add").await.is_none() },
    )
    .await;
    assert!(
        registry.tool("wc").await.is_some(),
        "the command tool stays"
    );

    // Back on the same port: its tools come back.
    let _server = PythonServer::start(&python, port).await;
    wait_for_all(&registry, &PYTHON_TOOLS).await;

    sidecar.signal(Signal::SIGTERM);
    let status = sidecar.exited(PATIENCE).await;
    assert!(status.success(), "{status}\n{}", sidecar.log());
}
