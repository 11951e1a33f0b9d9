//! The `toolmesh` binary against a real registry and a real sidecar (the
//! library servers on loopback): every command, its text and JSON output,
//! and its exit code.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "cli/approvals.rs"]
mod approvals;
#[path = "cli/pins.rs"]
mod pins;
#[path = "cli/pipes.rs"]
mod pipes;
#[path = "cli/readiness.rs"]
mod readiness;
#[path = "cli/tasks.rs"]
mod tasks;

use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use toolmesh_registry::Config;
use toolmesh_test_support::server::{LoopbackServer, loopback_listener, sidecar};
use toolmesh_test_support::wait::eventually;

const TOOLS: &str = r#"
tools:
  - name: forecast
    title: Weather forecast
    description: Forecast of temperature and rain for a city over the next days
    tags: [weather]
    read_only: true
    arguments:
      - {name: city, type: string, description: City name, required: true}
      - {name: days, type: integer, description: How many days}
    backend: {command: [cat]}
  - name: limited
    description: Echoes its arguments, once every ten seconds
    rate_limit: {rate: 0.1, burst: 1}
    backend: {command: [cat]}
  - name: broken
    description: Always fails
    backend: {command: [sh, -c, 'echo "it broke" >&2; exit 3']}
  - name: stamp
    description: Answers with the id of the invocation that ran it
    backend: {command: [sh, -c, 'printf "\"%s\"" "$TOOLMESH_INVOCATION_ID"']}
"#;

struct Mesh {
    registry: LoopbackServer,
    sidecar: Option<LoopbackServer>,
}

impl Mesh {
    async fn start() -> Self {
        Self::serving(TOOLS).await
    }

    /// A registry, and a sidecar serving the tools of `yaml` to it, once
    /// they are all live.
    async fn serving(yaml: &str) -> Self {
        let config = Config {
            shutdown_grace: Duration::from_secs(1),
            ..Config::default()
        };
        let registry = toolmesh_test_support::server::registry(loopback_listener().await, config);
        let tools = toolmesh_sidecar::config::SidecarConfig::from_yaml_str(yaml)
            .unwrap()
            .build_tools(std::path::Path::new("."))
            .unwrap();
        let count = tools.len();
        let sidecar = sidecar(&registry.url(), "cli-test", tools).await;
        let mesh = Self {
            registry,
            sidecar: Some(sidecar),
        };
        eventually(Duration::from_secs(20), "the tools are live", || async {
            mesh.run(&["tools", "list", "-o", "json"])
                .await
                .status
                .success()
                && json_of(&mesh.run(&["tools", "list", "-o", "json"]).await)
                    .as_array()
                    .is_some_and(|a| a.len() == count)
        })
        .await;
        mesh
    }

    /// Runs `toolmesh args...` against this registry.
    async fn run(&self, args: &[&str]) -> Output {
        toolmesh(&self.registry.url())
            .args(args)
            .output()
            .await
            .unwrap()
    }
}

/// The `toolmesh` binary aimed at `registry`, with no credential or CA
/// from the environment the tests run in.
fn toolmesh(registry: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolmesh"));
    command
        .env("TOOLMESH_REGISTRY", registry)
        .env_remove("TOOLMESH_TOKEN")
        .env_remove("TOOLMESH_TOKEN_FILE")
        .env_remove("TOOLMESH_CA_FILE");
    command
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn json_of(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).unwrap_or(Value::Null)
}

#[track_caller]
fn exits(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_and_get() {
    let mesh = Mesh::start().await;
    let list = mesh.run(&["tools", "list"]).await;
    exits(&list, 0);
    let text = stdout(&list);
    assert!(text.starts_with("NAME"), "{text}");
    assert!(
        text.contains("limited") && text.contains("0.1/s burst 1"),
        "{text}"
    );

    let tagged = json_of(
        &mesh
            .run(&["tools", "list", "--tag", "weather", "-o", "json"])
            .await,
    );
    assert_eq!(tagged.as_array().unwrap().len(), 1);
    assert_eq!(tagged[0]["name"], "forecast");
    assert_eq!(
        tagged[0]["input_schema"]["properties"]["days"]["type"],
        "integer"
    );
    let prefixed = json_of(
        &mesh
            .run(&["tools", "list", "--prefix", "bro", "-o", "json"])
            .await,
    );
    assert_eq!(prefixed[0]["name"], "broken");

    let get = mesh.run(&["tools", "get", "forecast"]).await;
    exits(&get, 0);
    let text = stdout(&get);
    assert!(
        text.contains("title:       Weather forecast") && text.contains("read only:   true"),
        "{text}"
    );
    assert!(text.contains("\"city\""), "{text}");
    let get = json_of(&mesh.run(&["tools", "get", "forecast", "-o", "json"]).await);
    assert_eq!(get["read_only"], true);
    assert_eq!(get["instances"], 1);

    let missing = mesh.run(&["tools", "get", "nope"]).await;
    exits(&missing, 6);
    assert!(
        stderr(&missing).contains("NOT_FOUND"),
        "{}",
        stderr(&missing)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_types_arguments_and_tells_failures_apart() {
    let mesh = Mesh::start().await;
    let ok = mesh
        .run(&[
            "invoke",
            "forecast",
            "--arg",
            "city=Oslo",
            "--arg",
            "days=3",
        ])
        .await;
    exits(&ok, 0);
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&ok)).unwrap(),
        json!({"city": "Oslo", "days": 3})
    );
    let ok = json_of(
        &mesh
            .run(&["invoke", "forecast", r#"{"city": "Rome"}"#, "-o", "json"])
            .await,
    );
    assert_eq!(ok["result"], json!({"city": "Rome"}));
    assert_eq!(ok["instance_id"], "cli-test");

    // Refused arguments: the field to fix, and exit 5.
    let invalid = mesh
        .run(&["invoke", "forecast", r#"{"town": "Rome"}"#])
        .await;
    exits(&invalid, 5);
    let text = stderr(&invalid);
    assert!(
        text.contains("/town: unexpected property") && text.contains("/city:"),
        "{text}"
    );
    let invalid = json_of(
        &mesh
            .run(&["invoke", "forecast", r#"{"town": "Rome"}"#, "-o", "json"])
            .await,
    );
    assert_eq!(invalid["error"]["code"], "INVALID_ARGUMENT");
    assert!(
        invalid["error"]["violations"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["field"] == "/town")
    );

    // A value the schema's type refuses never leaves the command line.
    let usage = mesh
        .run(&["invoke", "forecast", "--arg", "days=three"])
        .await;
    exits(&usage, 2);
    assert!(
        stderr(&usage).contains("days is an integer"),
        "{}",
        stderr(&usage)
    );

    // Limited: exit 3 and the wait.
    exits(&mesh.run(&["invoke", "limited", "{}"]).await, 0);
    let limited = mesh.run(&["invoke", "limited", "{}"]).await;
    exits(&limited, 3);
    assert!(
        stderr(&limited).contains("retry in"),
        "{}",
        stderr(&limited)
    );
    let limited = json_of(&mesh.run(&["invoke", "limited", "{}", "-o", "json"]).await);
    assert!(
        limited["error"]["retry_after_seconds"].as_f64().unwrap() > 0.0,
        "{limited}"
    );

    // The tool failed: exit 4, its message.
    let broken = mesh.run(&["invoke", "broken"]).await;
    exits(&broken, 4);
    assert!(stderr(&broken).contains("it broke"), "{}", stderr(&broken));

    exits(&mesh.run(&["invoke", "nope"]).await, 6);

    // Idempotency keys: a repeat gets the first call's result (the
    // invocation id that ran), a call without one runs again.
    let keyed = ["invoke", "stamp", "--idempotency-key", "k1", "-o", "json"];
    let first = json_of(&mesh.run(&keyed).await);
    assert!(
        first["result"].as_str().is_some_and(|id| !id.is_empty()),
        "{first}"
    );
    assert_eq!(json_of(&mesh.run(&keyed).await)["result"], first["result"]);
    let fresh = json_of(&mesh.run(&["invoke", "stamp", "-o", "json"]).await);
    assert_ne!(fresh["result"], first["result"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_and_export() {
    let mesh = Mesh::start().await;
    eventually(Duration::from_secs(10), "searchable", || async {
        json_of(
            &mesh
                .run(&["search", "will it rain in Paris", "-o", "json"])
                .await,
        )[0]["name"]
            == "forecast"
    })
    .await;
    let found = mesh.run(&["search", "will it rain in Paris"]).await;
    exits(&found, 0);
    assert!(stdout(&found).starts_with("SCORE") && stdout(&found).contains("forecast"));
    let nothing = mesh.run(&["search", "zzzz qqqq"]).await;
    exits(&nothing, 0);
    assert!(stderr(&nothing).contains("no tool matches"));
    exits(&mesh.run(&["search", ""]).await, 5);

    let anthropic = json_of(
        &mesh
            .run(&["export", "--format", "anthropic", "--name", "forecast"])
            .await,
    );
    assert_eq!(anthropic[0]["name"], "forecast");
    assert_eq!(anthropic[0]["input_schema"]["required"], json!(["city"]));
    let mcp = json_of(
        &mesh
            .run(&["export", "-f", "mcp", "--tag", "weather", "-o", "json"])
            .await,
    );
    assert_eq!(mcp["tools"][0]["annotations"]["readOnlyHint"], true);
    assert_eq!(mcp["issues"], json!([]));
    let openai = mesh
        .run(&[
            "export",
            "-f",
            "openai-chat",
            "--name",
            "forecast",
            "--name",
            "gone",
        ])
        .await;
    exits(&openai, 0);
    assert!(
        stderr(&openai).contains("gone left out"),
        "{}",
        stderr(&openai)
    );
    exits(&mesh.run(&["export", "-f", "cohere"]).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_the_catalog_then_each_change() {
    let mut mesh = Mesh::start().await;
    let once = mesh.run(&["watch", "--once"]).await;
    exits(&once, 0);
    assert_eq!(
        stdout(&once).lines().collect::<Vec<_>>(),
        [
            "ADDED    broken (1 instance)",
            "ADDED    forecast (1 instance)",
            "ADDED    limited (1 instance)",
            "ADDED    stamp (1 instance)",
            "SYNCED"
        ]
    );

    let mut child = toolmesh(&mesh.registry.url())
        .args(["watch", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || -> Value {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("a line in time")
            .unwrap()
            .expect("the watch goes on");
        serde_json::from_str(&line).unwrap()
    };
    for _ in 0..4 {
        assert_eq!(next().await["kind"], "ADDED");
    }
    assert_eq!(next().await["kind"], "SYNCED");
    mesh.sidecar.take().unwrap().stop().await;
    let mut removed = Vec::new();
    for _ in 0..4 {
        let event = next().await;
        assert_eq!(event["kind"], "REMOVED", "{event}");
        removed.push(event["tool"]["name"].as_str().unwrap().to_owned());
    }
    removed.sort();
    assert_eq!(removed, ["broken", "forecast", "limited", "stamp"]);
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_validates_a_sidecar_config_offline() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, TOOLS).unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "tools:\n  - name: x\n    description: y\n    timout: 2s\n    backend: {command: [cat]}\n",
    )
    .unwrap();
    let run = |args: Vec<String>| async move {
        // No registry: check never dials one.
        toolmesh("127.0.0.1:9").args(args).output().await.unwrap()
    };
    let ok = run(vec!["check".into(), good.display().to_string()]).await;
    exits(&ok, 0);
    assert!(
        stdout(&ok).contains("4 tools (forecast, limited, broken, stamp)"),
        "{}",
        stdout(&ok)
    );
    let mcp = dir.path().join("mcp.yaml");
    std::fs::write(
        &mcp,
        "tools:\n  - backend: {mcp: {url: 'http://127.0.0.1:9/mcp'}}\n  - backend: {mcp: {command: [sh, server.sh], prefix: x.}}\n",
    )
    .unwrap();
    let mcp_ok = json_of(
        &run(vec![
            "check".into(),
            mcp.display().to_string(),
            "-o".into(),
            "json".into(),
        ])
        .await,
    );
    assert_eq!(mcp_ok["ok"], true, "{mcp_ok}");
    assert_eq!(
        mcp_ok["mcp_servers"],
        serde_json::json!(["http://127.0.0.1:9/mcp", "sh server.sh"])
    );
    let refused = run(vec!["check".into(), bad.display().to_string()]).await;
    exits(&refused, 5);
    let text = stderr(&refused);
    assert!(
        text.contains("bad.yaml:4:5: tools[0].timout: unknown key, did you mean timeout?"),
        "{text}"
    );
    let refused = json_of(
        &run(vec![
            "check".into(),
            bad.display().to_string(),
            "-o".into(),
            "json".into(),
        ])
        .await,
    );
    assert_eq!(refused["ok"], false);
    exits(
        &run(vec![
            "check".into(),
            dir.path().join("missing.yaml").display().to_string(),
        ])
        .await,
        5,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_errors_unreachable_registries_and_completions() {
    let run =
        async |args: &[&str], registry: &str| toolmesh(registry).args(args).output().await.unwrap();
    exits(&run(&["tools", "frobnicate"], "127.0.0.1:9").await, 2);
    exits(&run(&["tools", "list"], "ftp://x:1").await, 2);
    let unreachable = run(&["tools", "list", "--timeout", "2"], "127.0.0.1:9").await;
    exits(&unreachable, 8);
    assert_eq!(
        stderr(&unreachable),
        "error: cannot reach the registry at http://127.0.0.1:9: connection refused\n"
    );
    let unreachable = json_of(&run(&["watch", "-o", "json"], "127.0.0.1:9").await);
    assert_eq!(unreachable["error"]["registry"], "http://127.0.0.1:9");
    // Every unit, and bare seconds as before; a deadline of nothing is refused.
    for timeout in ["5s", "250ms", "1m", "0.5"] {
        let ran = run(&["tools", "list", "--timeout", timeout], "127.0.0.1:9").await;
        exits(&ran, 8);
    }
    let from_env = toolmesh("127.0.0.1:9")
        .args(["tools", "list"])
        .env("TOOLMESH_TIMEOUT", "1m")
        .output()
        .await
        .unwrap();
    exits(&from_env, 8);
    let refused = run(&["tools", "list", "--timeout", "soon"], "127.0.0.1:9").await;
    exits(&refused, 2);
    assert!(
        stderr(&refused).contains("\"soon\" is not a duration"),
        "{}",
        stderr(&refused)
    );
    exits(
        &run(&["tools", "list", "--timeout", "0s"], "127.0.0.1:9").await,
        2,
    );
    let completions = run(&["completions", "bash"], "127.0.0.1:9").await;
    exits(&completions, 0);
    assert!(
        stdout(&completions).contains("_toolmesh()"),
        "{}",
        stdout(&completions)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_authenticates_agents_takes_the_token() {
    let dir = tempfile::tempdir().unwrap();
    let key = "cli-test-key-3f9a7c21d4e8b6";
    let keys = toolmesh_test_support::keys::api_keys_file(dir.path(), &[("cli", key, &[])]);
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{key}\n")).unwrap();
    let config = Config {
        api_keys_file: Some(keys),
        shutdown_grace: Duration::from_secs(1),
        ..Config::default()
    };
    let registry = toolmesh_test_support::server::registry(loopback_listener().await, config);
    let run = |args: Vec<&str>, token: Option<&str>| {
        let mut command = toolmesh(&registry.url());
        command.args(args);
        if let Some(token) = token {
            command.env("TOOLMESH_TOKEN", token);
        }
        async move { command.output().await.unwrap() }
    };
    let anonymous = run(vec!["tools", "list"], None).await;
    exits(&anonymous, 9);
    assert!(
        stderr(&anonymous).contains("UNAUTHENTICATED"),
        "{}",
        stderr(&anonymous)
    );
    exits(
        &run(vec!["tools", "list"], Some("wrong-key-0000000000")).await,
        9,
    );
    exits(&run(vec!["tools", "list"], Some(key)).await, 0);
    let file = token_file.display().to_string();
    exits(
        &run(vec!["tools", "list", "--token-file", &file], None).await,
        0,
    );
    exits(&run(vec!["tools", "list"], Some("two words")).await, 2);
}
