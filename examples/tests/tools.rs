//! The example tools of `examples/tools/` (Python, Node, shell), each run
//! through the real `toolmesh-sidecar` and `toolmesh-registry` binaries and
//! called as an agent calls them (`Invoke`): per language a success, a tool
//! error (`is_error`, carrying the tool's message) and a timeout
//! (`DEADLINE_EXCEEDED`, with the tool's processes gone). Every shipped
//! `sidecar.yaml` is also checked with the sidecar's own config code.
//!
//! These are the contracts `docs/tools-in-any-language.md` states: a change
//! that breaks one fails here.
//!
//! The binaries come from `TOOLMESH_BIN_DIR` (see
//! `toolmesh_test_support::process::bin_dir`); without them the tests fail
//! under the test command and say they skipped under a plain `cargo test`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;
use tonic::Code;
use tonic::transport::Channel;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_test_support::catalog;
use toolmesh_test_support::process::{SidecarProcess, binary, is_dead};
use toolmesh_test_support::registry_process::RegistryProcess;
use toolmesh_test_support::wait::{eventually, wait_until};

/// How long processes may take to start and tools to appear.
const STARTUP: Duration = Duration::from_secs(20);

/// The URL the shipped Node YAML gives `slugify_http`; the test's server
/// listens elsewhere.
const SHIPPED_HTTP_URL: &str = "http://127.0.0.1:8091";

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tools")
}

/// A `toolmesh-registry` on a loopback port of its choosing, killed when
/// dropped.
struct Registry {
    _process: RegistryProcess,
    addr: SocketAddr,
}

impl Registry {
    async fn start(binary: &Path) -> Self {
        let (process, addr) =
            RegistryProcess::start(binary, &["--listen", "127.0.0.1:0"], &[("NO_COLOR", "1")])
                .await;
        Self {
            _process: process,
            addr,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The shipped `examples/tools/<language>/sidecar.yaml`, as the sidecar
/// would run it in place, for a sidecar whose config lives in a temp dir:
/// command programs with a `/` made absolute and every command run in the
/// example's folder (what relative paths mean in the shipped file), and
/// the HTTP URL pointed at `http_url`.
fn effective_yaml(language: &str, http_url: Option<&str>) -> String {
    let dir = tools_dir().join(language);
    let text = std::fs::read_to_string(dir.join("sidecar.yaml")).expect("read the shipped YAML");
    let mut config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("YAML");
    let dir_value = serde_yaml_ng::Value::String(dir.display().to_string());
    for tool in config["tools"].as_sequence_mut().expect("tools") {
        let backend = &mut tool["backend"];
        if let Some(command) = backend.get_mut("command") {
            let program = &mut command[0];
            let name = program.as_str().expect("program").to_owned();
            if name.contains('/') {
                *program = serde_yaml_ng::Value::String(dir.join(&name).display().to_string());
            }
            backend["cwd"] = dir_value.clone();
        }
        if let Some(url) = backend.get_mut("http").and_then(|http| http.get_mut("url")) {
            let shipped = url.as_str().expect("url").to_owned();
            let rest = shipped
                .strip_prefix(SHIPPED_HTTP_URL)
                .expect("the shipped HTTP tools point at 127.0.0.1:8091");
            let base = http_url.expect("this YAML has an HTTP tool: pass the server's URL");
            *url = serde_yaml_ng::Value::String(format!("{base}{rest}"));
        }
    }
    serde_yaml_ng::to_string(&config).expect("YAML")
}

/// A registry and a sidecar serving one example's tools, all live.
struct Mesh {
    client: ToolRegistryClient<Channel>,
    sidecar: SidecarProcess,
    _registry: Registry,
}

impl Mesh {
    /// The tools of `examples/tools/<language>/sidecar.yaml`; `None` (after
    /// saying why) when the binaries are not built.
    async fn start(language: &str, http_url: Option<&str>, tools: &[&str]) -> Option<Self> {
        Self::serve(language, &effective_yaml(language, http_url), tools).await
    }

    /// The tools of `yaml`, served by a sidecar whose config (and so whose
    /// commands' working directory) is in a temp dir.
    async fn serve(instance: &str, yaml: &str, tools: &[&str]) -> Option<Self> {
        let registry_binary = binary("toolmesh-registry")?;
        let sidecar_binary = binary("toolmesh-sidecar")?;
        let registry = Registry::start(&registry_binary).await;
        let sidecar = SidecarProcess::start(&sidecar_binary, &registry.url(), instance, yaml).await;
        let client = ToolRegistryClient::connect(registry.url())
            .await
            .expect("connect to the registry");
        for tool in tools {
            catalog::wait_for_instances(&client, tool, 1, STARTUP).await;
        }
        Some(Self {
            client,
            sidecar,
            _registry: registry,
        })
    }

    /// `Invoke` with `arguments_json` as given: `result_json` as sent, and
    /// `is_error`.
    async fn invoke_text(
        &self,
        tool: &str,
        arguments_json: &str,
    ) -> Result<(String, bool), tonic::Status> {
        let response = self
            .client
            .clone()
            .invoke(catalog::invoke(tool, arguments_json))
            .await?
            .into_inner();
        Ok((response.result_json, response.is_error))
    }

    /// `Invoke`: the result as JSON with `is_error`, or the status.
    async fn invoke(&self, tool: &str, arguments: Value) -> Result<(Value, bool), tonic::Status> {
        let response = self
            .client
            .clone()
            .invoke(catalog::invoke(tool, &arguments.to_string()))
            .await?
            .into_inner();
        let result = serde_json::from_str(&response.result_json).unwrap_or_else(|e| {
            panic!(
                "{tool}: result_json is not JSON ({e}): {:?}",
                response.result_json
            )
        });
        Ok((result, response.is_error))
    }

    async fn succeeds(&self, tool: &str, arguments: Value) -> Value {
        match self.invoke(tool, arguments).await {
            Ok((result, false)) => result,
            other => panic!(
                "{tool}: expected a result, got {other:?}\n{}",
                self.sidecar.log()
            ),
        }
    }

    async fn fails(&self, tool: &str, arguments: Value) -> Value {
        match self.invoke(tool, arguments).await {
            Ok((result, true)) => result,
            other => panic!(
                "{tool}: expected an is_error result, got {other:?}\n{}",
                self.sidecar.log()
            ),
        }
    }

    /// Calls `tool` with `arguments` that outlast its 2 s timeout: the agent
    /// gets `DEADLINE_EXCEEDED` in about that time. With `group`, the
    /// process whose command line contains `group[0]` (the tool) must be
    /// seen running, with processes of its process group containing each
    /// other name (what the tool started), and all of them must be gone
    /// after the deadline.
    async fn times_out(&self, tool: &str, arguments: Value, group: &[&str]) {
        let started = Instant::now();
        let call = tokio::spawn({
            let mut client = self.client.clone();
            let request = catalog::invoke(tool, &arguments.to_string());
            async move { client.invoke(request).await }
        });
        let mut seen = Vec::new();
        if let Some((leader, members)) = group.split_first() {
            eventually(
                Duration::from_secs(2),
                &format!("{leader:?} running with {members:?} in its process group"),
                || {
                    seen = running_group(leader, members);
                    std::future::ready(!seen.is_empty())
                },
            )
            .await;
        }
        let outcome = call.await.expect("the call's task");
        let elapsed = started.elapsed();
        match outcome {
            Err(status) if status.code() == Code::DeadlineExceeded => {}
            other => panic!("{tool}: expected DEADLINE_EXCEEDED, got {other:?}"),
        }
        assert!(
            elapsed >= Duration::from_millis(1500) && elapsed < Duration::from_secs(5),
            "{tool}: DEADLINE_EXCEEDED after {elapsed:?}, the timeout is 2s"
        );
        wait_until(
            Duration::from_secs(3),
            &format!("{tool}'s processes {seen:?} killed at the deadline"),
            || seen.iter().all(|pid| is_dead(*pid)),
        )
        .await;
    }
}

/// The live processes of the process group led by the one process whose
/// command line contains `leader`, if that group also has a process for
/// each of `members`; else empty.
fn running_group(leader: &str, members: &[&str]) -> Vec<u32> {
    let processes = live_processes();
    let leaders: Vec<u32> = processes
        .iter()
        .filter(|(_, _, cmdline)| cmdline.contains(leader))
        .map(|(pid, _, _)| *pid)
        .collect();
    let [leader] = leaders[..] else {
        return Vec::new();
    };
    let group: Vec<_> = processes
        .iter()
        .filter(|(_, pgid, _)| *pgid == leader)
        .collect();
    let complete = group.iter().any(|(pid, _, _)| *pid == leader)
        && members
            .iter()
            .all(|m| group.iter().any(|(_, _, cmdline)| cmdline.contains(m)));
    if complete {
        group.iter().map(|(pid, _, _)| *pid).collect()
    } else {
        Vec::new()
    }
}

/// (pid, process group, command line with spaces) of every live process.
fn live_processes() -> Vec<(u32, u32, String)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !is_dead(*pid))
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // After the command name: state, ppid, pgrp, ...
            let pgid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(2)?
                .parse()
                .ok()?;
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            Some((pid, pgid, cmdline))
        })
        .collect()
}

#[test]
fn every_shipped_config_is_valid_and_builds() {
    for language in ["python", "node", "shell"] {
        let dir = tools_dir().join(language);
        let config = SidecarConfig::load(dir.join("sidecar.yaml"))
            .unwrap_or_else(|e| panic!("{language}/sidecar.yaml: {e}"));
        let tools = config
            .build_tools(&dir)
            .unwrap_or_else(|e| panic!("{language}/sidecar.yaml: {e}"));
        assert!(
            !tools.is_empty(),
            "{language}/sidecar.yaml declares no tool"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_word_stats() {
    let Some(mesh) = Mesh::start("python", None, &["word_stats"]).await else {
        return;
    };
    assert_eq!(
        mesh.succeeds(
            "word_stats",
            json!({"text": "The cat and the hat", "top": 1})
        )
        .await,
        json!({"words": 5, "distinct": 4, "top": [{"word": "the", "count": 2}]})
    );
    assert_eq!(
        mesh.fails("word_stats", json!({"text": " ... "})).await,
        json!(
            "command failed (exit code 1): the text has no words: give a text with at least one word"
        )
    );
    mesh.times_out(
        "word_stats",
        json!({"text": "slow", "delay": 30}),
        &["word_stats.py"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_slugify_command() {
    if node().is_none() {
        return;
    }
    let Some(mesh) = Mesh::start("node", Some("http://127.0.0.1:9"), &["slugify"]).await else {
        return;
    };
    assert_eq!(
        mesh.succeeds("slugify", json!({"text": "Héllo, World!"}))
            .await,
        json!({"slug": "hello-world"})
    );
    assert_eq!(
        mesh.succeeds("slugify", json!({"text": "a b", "separator": "_"}))
            .await,
        json!({"slug": "a_b"})
    );
    assert_eq!(
        mesh.fails("slugify", json!({"text": "!!!"})).await,
        json!(
            "command failed (exit code 1): nothing to make a slug of: the text has no letters or digits"
        )
    );
    mesh.times_out(
        "slugify",
        json!({"text": "slow", "delay": 30}),
        &["slugify.mjs"],
    )
    .await;
}

/// `node server.mjs` on a port of its choosing; killed when dropped.
struct NodeServer {
    _child: Child,
    url: String,
}

impl NodeServer {
    async fn start() -> Option<Self> {
        let mut child = Command::new(node()?)
            .arg(tools_dir().join("node/server.mjs"))
            .env("PORT", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start node server.mjs");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(STARTUP, lines.next_line())
            .await
            .expect("server.mjs did not say where it listens")
            .expect("read server.mjs's output")
            .expect("server.mjs exited before listening");
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from server.mjs: {line:?}"))
            .to_owned();
        Some(Self { _child: child, url })
    }
}

/// The `node` on `PATH`, or `None` after saying the test needs it.
fn node() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("node"))
            .find(|node| node.is_file())
    });
    toolmesh_test_support::suite::require(
        "node",
        found.ok_or_else(|| "not on PATH; install Node 20 or later".to_owned()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_slugify_over_http() {
    let Some(server) = NodeServer::start().await else {
        return;
    };
    let Some(mesh) = Mesh::start("node", Some(&server.url), &["slugify_http"]).await else {
        return;
    };
    // The x-tool-key header of the YAML reached the server (it answers 401 without).
    assert_eq!(
        mesh.succeeds("slugify_http", json!({"text": "Héllo, World!"}))
            .await,
        json!({"slug": "hello-world"})
    );
    // A 422 with a JSON body: the body is the error result, as it is.
    assert_eq!(
        mesh.fails("slugify_http", json!({"text": "!!!"})).await,
        json!({"error": "nothing to make a slug of: the text has no letters or digits"})
    );
    mesh.times_out("slugify_http", json!({"text": "slow", "delay": 30}), &[])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_disk_free_and_utc_now() {
    let Some(mesh) = Mesh::start("shell", None, &["disk_free", "utc_now"]).await else {
        return;
    };
    let free = mesh.succeeds("disk_free", json!({"path": "/"})).await;
    assert_eq!(free["path"], json!("/"), "{free}");
    for field in ["total_kb", "used_kb", "available_kb", "used_percent"] {
        assert!(free[field].is_u64(), "{field} in {free}");
    }
    let error = mesh
        .fails("disk_free", json!({"path": "/no/such/dir"}))
        .await;
    let error = error.as_str().unwrap_or_default();
    assert!(
        error.starts_with("command failed (exit code 1): df: ")
            && error.ends_with("No such file or directory"),
        "{error}"
    );
    // The schema keeps what the script cannot parse out: the registry refuses it.
    let refused = mesh
        .invoke("disk_free", json!({"path": "/tmp/\"quoted\""}))
        .await
        .expect_err("a quote in path");
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
    // Plain text output is passed on as a JSON string, newline included.
    let now = mesh.succeeds("utc_now", json!({})).await;
    let now = now.as_str().unwrap_or_default();
    assert!(
        now.len() == "2026-01-31T12:00:00Z\n".len() && now.ends_with("Z\n"),
        "{now:?}"
    );
    // The script and the `sleep` it started are killed together.
    mesh.times_out(
        "disk_free",
        json!({"path": "/", "delay": 30}),
        &["disk_free.sh", "sleep 30"],
    )
    .await;
}

/// The command backend's contract, rule by rule as
/// `docs/tools-in-any-language.md` states it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_contract_as_documented() {
    let yaml = r#"
tools:
  - {name: cat, description: Echoes its stdin, backend: {command: ["cat"]}}
  - name: plain_text
    description: Not JSON
    backend: {command: ["sh", "-c", "printf 'hello\\n'"]}
  - name: padded_json
    description: One JSON value with blanks around it
    backend: {command: ["sh", "-c", "printf '  {\"a\": 1}\\n\\n'"]}
  - name: json_lines
    description: Two JSON values are not one
    backend: {command: ["sh", "-c", "printf '1\\n2\\n'"]}
  - {name: silent, description: Prints nothing, backend: {command: ["true"]}}
  - name: noisy
    description: Writes to stderr and succeeds
    backend: {command: ["sh", "-c", "echo noise >&2; echo 42"]}
  - name: where
    description: Its working directory and an env variable
    backend:
      command: ["sh", "-c", "printf '%s|%s' \"$PWD\" \"$GREETING\""]
      env: {GREETING: hi}
  - name: fails
    description: Exit 3 with stdout and stderr
    backend: {command: ["sh", "-c", "echo out; echo err >&2; exit 3"]}
  - name: fails_on_stdout
    description: Exit 2 with stdout only
    backend: {command: ["sh", "-c", "echo only-out; exit 2"]}
  - {name: fails_silently, description: Exit 1 and nothing else, backend: {command: ["false"]}}
  - name: killed
    description: Killed by a signal
    backend: {command: ["sh", "-c", "kill -9 $$"]}
  - name: too_big
    description: 13 bytes for a cap of 10
    max_output_bytes: 10
    backend: {command: ["sh", "-c", "printf 0123456789ABC"]}
"#;
    let tools = [
        "cat",
        "plain_text",
        "padded_json",
        "json_lines",
        "silent",
        "noisy",
        "where",
        "fails",
        "fails_on_stdout",
        "fails_silently",
        "killed",
        "too_big",
    ];
    let Some(mesh) = Mesh::serve("contract", yaml, &tools).await else {
        return;
    };
    let ok = |text: &str| (text.to_owned(), false);
    let error = |message: &str| (json!(message).to_string(), true);
    let call = |tool: &'static str, arguments: &'static str| {
        let mesh = &mesh;
        async move {
            mesh.invoke_text(tool, arguments)
                .await
                .unwrap_or_else(|status| panic!("{tool}: {status:?}"))
        }
    };

    // stdin: the arguments exactly as the agent sent them; `{}` for none.
    assert_eq!(
        call("cat", r#"{ "x" : [1, 2] }"#).await,
        ok(r#"{ "x" : [1, 2] }"#)
    );
    assert_eq!(call("cat", "").await, ok("{}"));
    // stdout: one JSON value is the result (blanks trimmed); anything else a
    // JSON string of the whole output, newlines included; stderr ignored.
    assert_eq!(call("padded_json", "{}").await, ok(r#"{"a": 1}"#));
    assert_eq!(call("plain_text", "{}").await, ok(r#""hello\n""#));
    assert_eq!(call("json_lines", "{}").await, ok(r#""1\n2\n""#));
    assert_eq!(call("silent", "{}").await, ok(r#""""#));
    assert_eq!(call("noisy", "{}").await, ok("42"));
    // The working directory is the YAML's folder; `env` adds to the sidecar's.
    let (place, _) = call("where", "{}").await;
    let place: String = serde_json::from_str(&place).expect("a JSON string");
    let (cwd, greeting) = place.split_once('|').expect("cwd|greeting");
    assert_eq!(
        std::fs::canonicalize(cwd).expect("cwd"),
        std::fs::canonicalize(mesh.sidecar.dir()).expect("config dir")
    );
    assert_eq!(greeting, "hi");
    // A non-zero exit is an is_error result: stderr, else stdout, else nothing.
    assert_eq!(
        call("fails", "{}").await,
        error("command failed (exit code 3): err")
    );
    assert_eq!(
        call("fails_on_stdout", "{}").await,
        error("command failed (exit code 2): only-out")
    );
    assert_eq!(
        call("fails_silently", "{}").await,
        error("command failed (exit code 1)")
    );
    assert_eq!(
        call("killed", "{}").await,
        error("command failed (killed by signal 9)")
    );
    // More output than max_output_bytes is an error result, not a cut result.
    assert_eq!(
        call("too_big", "{}").await,
        error("the tool's output exceeds the limit of 10 bytes")
    );
}

/// The HTTP backend's contract, rule by rule as
/// `docs/tools-in-any-language.md` states it, against a real HTTP server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_contract_as_documented() {
    use axum::Router;
    use axum::http::{HeaderMap, Method, StatusCode};
    use axum::routing::any;

    async fn echo(method: Method, headers: HeaderMap, body: String) -> axum::Json<Value> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        axum::Json(json!({
            "method": method.as_str(),
            "content_type": header("content-type"),
            "x_tool_key": header("x-tool-key"),
            "accept": header("accept"),
            "names": headers.keys().map(|name| name.as_str()).collect::<std::collections::BTreeSet<_>>(),
            "body": body,
        }))
    }
    let app = Router::new()
        .route("/echo", any(echo))
        .route("/text", any(|| async { "plain words" }))
        .route(
            "/json_error",
            any(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(json!({"error": "busy"})),
                )
            }),
        )
        .route(
            "/text_error",
            any(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "it broke\n") }),
        )
        .route("/big", any(|| async { "01234567890123456789" }));
    let server = toolmesh_test_support::server::LoopbackServer::spawn(
        toolmesh_test_support::server::loopback_listener().await,
        |listener, shutdown| async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        },
    );
    let base = server.url();
    let nowhere = format!(
        "http://127.0.0.1:{}",
        toolmesh_test_support::ports::reserved_port()
    );
    let yaml = format!(
        r#"
tools:
  - name: echo
    description: Shows the request
    backend: {{http: {{url: "{base}/echo", headers: {{x-tool-key: secret}}}}}}
  - {{name: text, description: Not JSON, backend: {{http: {{url: "{base}/text"}}}}}}
  - {{name: json_error, description: 503 with a JSON body, backend: {{http: {{url: "{base}/json_error"}}}}}}
  - {{name: text_error, description: 500 with a text body, backend: {{http: {{url: "{base}/text_error"}}}}}}
  - name: big
    description: 20 bytes for a cap of 10
    max_output_bytes: 10
    backend: {{http: {{url: "{base}/big"}}}}
  - {{name: unreachable, description: Nothing listens, backend: {{http: {{url: "{nowhere}/x"}}}}}}
"#
    );
    let tools = [
        "echo",
        "text",
        "json_error",
        "text_error",
        "big",
        "unreachable",
    ];
    let Some(mesh) = Mesh::serve("http-contract", &yaml, &tools).await else {
        return;
    };

    // POST, the arguments as sent, as JSON, with the YAML's headers and the
    // client's `accept: */*`.
    let (shown, is_error) = mesh
        .invoke_text("echo", r#"{ "n" : 1 }"#)
        .await
        .expect("echo");
    assert!(!is_error);
    let shown: Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(
        shown,
        json!({
            "method": "POST",
            "content_type": "application/json",
            "x_tool_key": "secret",
            "accept": "*/*",
            // Nothing else: no user agent, nothing naming the caller or the call.
            "names": ["accept", "content-length", "content-type", "host", "x-tool-key"],
            "body": r#"{ "n" : 1 }"#,
        })
    );
    // A 2xx body that is not JSON is passed on as a JSON string.
    assert_eq!(
        mesh.invoke_text("text", "{}").await.expect("text"),
        (json!("plain words").to_string(), false)
    );
    // Any other status is an error result: a JSON body as it is...
    assert_eq!(
        mesh.invoke_text("json_error", "{}")
            .await
            .expect("json_error"),
        (r#"{"error":"busy"}"#.to_owned(), true)
    );
    // ...any other body as "HTTP <status>: <body>".
    assert_eq!(
        mesh.invoke_text("text_error", "{}")
            .await
            .expect("text_error"),
        (json!("HTTP 500: it broke").to_string(), true)
    );
    assert_eq!(
        mesh.invoke_text("big", "{}").await.expect("big"),
        (
            json!("the tool's output exceeds the limit of 10 bytes").to_string(),
            true
        )
    );
    // No connection: not a result but UNAVAILABLE.
    let status = mesh
        .invoke_text("unreachable", "{}")
        .await
        .expect_err("nothing listens there");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("HTTP backend unreachable"),
        "{status:?}"
    );
    server.stop().await;
}
