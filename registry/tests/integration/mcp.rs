//! The MCP endpoint end to end over plain HTTP: a registry serving
//! `--mcp-listen` on loopback, real sidecars, and JSON-RPC posted as MCP
//! clients post it. The official Python SDK's view is `mcp_python.rs`;
//! this file holds the harness both use and the edges an SDK client does
//! not reach (401s, bounds, origins, refusals at start).

use std::{path::Path, sync::Arc, sync::atomic::AtomicUsize, time::Duration};

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_registry::{Config, Registry};
use toolmesh_test_support::{
    catalog,
    server::{LoopbackServer, loopback_listener, sidecar},
    tools::{add_tool, adder, sleep_tool},
    wait::eventually,
};

/// The newest revision, and the handshake revisions still in use.
pub(crate) const MODERN: &str = "2026-07-28";
pub(crate) const HANDSHAKE: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// Most a reply may take to arrive.
const REPLY_WITHIN: Duration = Duration::from_secs(30);

/// A registry (the library's server) with its MCP endpoint, on loopback.
pub(crate) struct McpRegistry {
    /// `http://127.0.0.1:<port>` of the gRPC listener.
    pub(crate) grpc: String,
    /// `http://127.0.0.1:<port>/mcp`.
    pub(crate) mcp: String,
    server: LoopbackServer,
}

impl McpRegistry {
    /// `config`, with the MCP endpoint on a port the kernel chose.
    pub(crate) async fn start(config: Config) -> Self {
        let mcp = loopback_listener().await;
        let mcp_url = format!("http://{}/mcp", mcp.local_addr().unwrap());
        Self::start_with(config, mcp, mcp_url).await
    }

    async fn start_with(config: Config, mcp: TcpListener, mcp_url: String) -> Self {
        let server = LoopbackServer::spawn(
            loopback_listener().await,
            move |listener, shutdown| async move {
                Registry::from_config(config)?
                    .with_mcp(mcp)
                    .serve(listener, shutdown)
                    .await
            },
        );
        Self {
            grpc: server.url(),
            mcp: mcp_url,
            server,
        }
    }

    /// Waits (up to 20 s) until `tool` has `count` live instances.
    pub(crate) async fn wait_for(&self, tool: &str, count: u32) {
        let client = ToolRegistryClient::connect(self.grpc.clone())
            .await
            .unwrap();
        catalog::wait_for_instances(&client, tool, count, Duration::from_secs(20)).await;
    }

    /// Graceful stop; panics if the registry fails or hangs.
    pub(crate) async fn stop(self) {
        self.server.stop().await;
    }
}

/// The settings the tests share: two tools per page.
pub(crate) fn config() -> Config {
    Config {
        mcp_page_size: 2,
        shutdown_grace: Duration::from_secs(3),
        ..Config::default()
    }
}

/// The sidecar most tests use, listed to `rpc`'s caller: `add`
/// (idempotent, 13 is a tool error) and `limited` (burst 2, then one call
/// per 100 s).
pub(crate) async fn standard_sidecar(registry: &McpRegistry, rpc: &Rpc) -> LoopbackServer {
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = vec![
        add_tool(calls.clone()),
        adder("limited", calls).rate_limit(0.01, 2).build(),
    ];
    let sidecar = sidecar(&registry.grpc, "s1", tools).await;
    rpc.wait_listed("add", true).await;
    sidecar
}

/// One answer to a POST: the status, the headers, and the JSON-RPC
/// response in it (JSON or the first response event of an SSE stream).
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) version: reqwest::Version,
    pub(crate) headers: HeaderMap,
    pub(crate) message: Option<Value>,
    pub(crate) body: String,
}

/// An HTTP client posting JSON-RPC to `/mcp`.
pub(crate) struct Rpc {
    http: reqwest::Client,
    url: String,
    headers: Vec<(String, String)>,
}

impl Rpc {
    pub(crate) fn new(url: &str) -> Self {
        Self::over(url, reqwest::Client::builder())
    }

    /// Posting to `url` with the client `builder` makes.
    pub(crate) fn over(url: &str, builder: reqwest::ClientBuilder) -> Self {
        Self {
            http: builder.timeout(REPLY_WITHIN).build().unwrap(),
            url: url.to_owned(),
            headers: Vec::new(),
        }
    }

    /// Sends `name: value` with every request.
    pub(crate) fn with(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub(crate) async fn post(&self, body: &Value, headers: &[(&str, &str)]) -> Reply {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (name, value) in self
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .chain(headers.iter().copied())
        {
            request = request.header(name, value);
        }
        let mut response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let version = response.version();
        let headers = response.headers().clone();
        let mut body = String::new();
        let deadline = tokio::time::Instant::now() + REPLY_WITHIN;
        loop {
            if let Some(message) = first_response(&body, &headers) {
                return Reply {
                    status,
                    version,
                    headers,
                    message: Some(message),
                    body,
                };
            }
            match tokio::time::timeout_at(deadline, response.chunk()).await {
                Ok(Ok(Some(chunk))) => body.push_str(&String::from_utf8_lossy(&chunk)),
                Ok(Ok(None)) | Ok(Err(_)) => break,
                Err(_) => panic!("no reply within {REPLY_WITHIN:?}: {body}"),
            }
        }
        let message = first_response(&body, &headers);
        Reply {
            status,
            version,
            headers,
            message,
            body,
        }
    }

    /// Every tool `tools/list` shows, page after page (2026-07-28).
    pub(crate) async fn names(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0..100 {
            let params = cursor
                .as_ref()
                .map_or_else(|| json!({}), |c| json!({"cursor": c}));
            let reply = self.modern(page, "tools/list", params).await;
            let result = reply.message.expect("a tools/list answer")["result"].clone();
            names.extend(
                result["tools"]
                    .as_array()
                    .expect("tools")
                    .iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned)),
            );
            match result["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        names
    }

    /// Waits (up to 20 s) until `tools/list` shows `tool`, or no longer
    /// does.
    pub(crate) async fn wait_listed(&self, tool: &str, listed: bool) {
        let what = format!("{tool} listed: {listed}");
        eventually(Duration::from_secs(20), &what, || async {
            self.names().await.iter().any(|n| n == tool) == listed
        })
        .await;
    }

    /// A 2026-07-28 request: the per-request envelope and headers.
    pub(crate) async fn modern(&self, id: u64, method: &str, params: Value) -> Reply {
        let name = params["name"].as_str().map(str::to_owned);
        let mut headers = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
        if let Some(name) = name.as_deref() {
            headers.push(("mcp-name", name));
        }
        self.post(&modern_request(id, method, params), &headers)
            .await
    }
}

/// A JSON-RPC request carrying the 2026-07-28 `_meta` envelope.
pub(crate) fn modern_request(id: u64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "toolmesh-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// An `initialize` request offering `revision`.
pub(crate) fn initialize(revision: &str) -> Value {
    json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {
            "protocolVersion": revision,
            "capabilities": {},
            "clientInfo": {"name": "toolmesh-tests", "version": "1"},
        },
    })
}

fn first_response(body: &str, headers: &HeaderMap) -> Option<Value> {
    let is_sse = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_sse {
        return serde_json::from_str(body).ok();
    }
    body.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
}

fn write_keys(dir: &Path, keys: &[(&str, &str)]) -> std::path::PathBuf {
    let mut yaml = String::from("keys:\n");
    for (caller, key) in keys {
        yaml.push_str(&format!(
            "  - caller: {caller}\n    sha256: {}\n",
            toolmesh_registry::auth::api_keys::hash_key(key)
        ));
    }
    let path = dir.join("keys.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_speaks_2026_and_the_handshake_negotiates_down() {
    let registry = McpRegistry::start(config()).await;
    let rpc = Rpc::new(&registry.mcp);

    let discovered = rpc.modern(1, "server/discover", json!({})).await;
    assert_eq!(discovered.status, 200, "{}", discovered.body);
    let result = &discovered.message.as_ref().unwrap()["result"];
    let versions: Vec<&str> = result["supportedVersions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for revision in [MODERN, HANDSHAKE[0], HANDSHAKE[1]] {
        assert!(versions.contains(&revision), "{versions:?}");
    }
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert!(
        discovered.headers.get("mcp-session-id").is_none(),
        "2026-07-28 has no sessions"
    );

    for (offered, agreed) in [
        (HANDSHAKE[0], HANDSHAKE[0]),
        (HANDSHAKE[1], HANDSHAKE[1]),
        ("2025-03-26", "2025-03-26"),
        ("2024-01-01", HANDSHAKE[0]),
    ] {
        let reply = rpc.post(&initialize(offered), &[]).await;
        assert_eq!(reply.status, 200, "{}", reply.body);
        let result = &reply.message.as_ref().unwrap()["result"];
        assert_eq!(result["protocolVersion"], agreed, "offered {offered}");
        assert_eq!(result["serverInfo"]["name"], "toolmesh-registry");
        assert!(
            reply.headers.get("mcp-session-id").is_some(),
            "a session for {offered}"
        );
    }
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_in_name_order_by_cursor_with_the_search_tool() {
    let registry = McpRegistry::start(config()).await;
    let rpc = Rpc::new(&registry.mcp);
    let _sidecar = standard_sidecar(&registry, &rpc).await;

    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let params = cursor
            .as_ref()
            .map_or_else(|| json!({}), |c| json!({"cursor": c}));
        let reply = rpc.modern(pages, "tools/list", params).await;
        let result = reply.message.unwrap()["result"].clone();
        assert_eq!(result["resultType"], "complete");
        assert_eq!(
            result["cacheScope"], "private",
            "lists depend on the caller"
        );
        let tools = result["tools"].as_array().unwrap();
        assert!(tools.len() <= 2);
        names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        pages += 1;
        match result["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(names, ["add", "limited", "toolmesh.search_tools"]);
    assert_eq!(pages, 2);

    let reply = rpc
        .modern(9, "tools/list", json!({"cursor": "forged"}))
        .await;
    let error = &reply.message.unwrap()["error"];
    assert_eq!(error["code"], -32602, "{error}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_requests_get_401_with_a_challenge() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[("mcp-agent", "mcp-key-0123456789")]);
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        ..config()
    })
    .await;
    let known = Rpc::new(&registry.mcp).with("authorization", "Bearer mcp-key-0123456789");
    let _sidecar = standard_sidecar(&registry, &known).await;
    let anonymous = Rpc::new(&registry.mcp);

    let reply = anonymous.modern(1, "tools/list", json!({})).await;
    assert_eq!(reply.status, 401);
    assert_eq!(
        reply.headers["www-authenticate"],
        "Bearer realm=\"toolmesh\""
    );
    let error = &reply.message.as_ref().expect("a JSON-RPC error")["error"];
    assert_eq!(error["code"], -32001, "{}", reply.body);
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("unauthenticated: no credential"),
        "{error}"
    );
    let reply = anonymous.post(&initialize(HANDSHAKE[0]), &[]).await;
    assert_eq!(reply.status, 401);
    assert!(reply.headers.get("mcp-session-id").is_none(), "no session");

    let wrong = Rpc::new(&registry.mcp).with("authorization", "Bearer not-a-key");
    let reply = wrong.modern(1, "tools/list", json!({})).await;
    assert_eq!(reply.status, 401);
    let challenge = reply.headers["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with(
            "Bearer realm=\"toolmesh\", error=\"invalid_token\", error_description=\""
        ),
        "{challenge}"
    );

    let reply = known
        .modern(
            1,
            "tools/call",
            json!({"name": "add", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.message.unwrap()["result"]["structuredContent"]["sum"],
        3
    );
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_hides_tools_as_if_they_did_not_exist() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[("adder", "adder-key-0123456789")]);
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, "rules:\n  - callers: [adder]\n    tools: [add]\n").unwrap();
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        policy_file: Some(policy),
        ..config()
    })
    .await;
    let rpc = Rpc::new(&registry.mcp).with("authorization", "Bearer adder-key-0123456789");
    let _sidecar = standard_sidecar(&registry, &rpc).await;

    let reply = rpc.modern(1, "tools/list", json!({})).await;
    let tools = reply.message.unwrap()["result"]["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["add", "toolmesh.search_tools"]);

    let hidden = rpc
        .modern(
            2,
            "tools/call",
            json!({"name": "limited", "arguments": {"a": 1, "b": 1}}),
        )
        .await;
    let missing = rpc
        .modern(3, "tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    let hidden = hidden.message.unwrap()["error"].clone();
    let missing = missing.message.unwrap()["error"].clone();
    assert_eq!(hidden["code"], -32602);
    assert_eq!(hidden["message"], "Unknown tool: limited");
    assert_eq!(missing["message"], "Unknown tool: nope");

    let found = rpc
        .modern(4, "tools/call", json!({"name": "toolmesh.search_tools", "arguments": {"query": "add integers limited"}}))
        .await;
    let found = found.message.unwrap()["result"]["structuredContent"]["tools"].clone();
    let found: Vec<&str> = found
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(found, ["add"], "search shows only what the caller may see");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_bound_to_its_caller() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(
        dir.path(),
        &[("a", "key-a-0123456789"), ("b", "key-b-0123456789")],
    );
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        ..config()
    })
    .await;
    let a = Rpc::new(&registry.mcp).with("authorization", "Bearer key-a-0123456789");
    let b = Rpc::new(&registry.mcp).with("authorization", "Bearer key-b-0123456789");
    let _sidecar = standard_sidecar(&registry, &a).await;
    let opened = a.post(&initialize(HANDSHAKE[0]), &[]).await;
    let session = opened.headers["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let session_headers = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", HANDSHAKE[0]),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(a.post(&initialized, &session_headers).await.status, 202);

    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let own = a.post(&list, &session_headers).await;
    assert!(own.message.unwrap()["result"]["tools"].is_array());
    let other = b.post(&list, &session_headers).await;
    let error = other.message.unwrap()["error"].clone();
    assert_eq!(error["code"], -32600, "{error}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_and_refused_with_503() {
    let registry = McpRegistry::start(Config {
        mcp_max_sessions: 1,
        ..config()
    })
    .await;
    let rpc = Rpc::new(&registry.mcp);
    let first = rpc.post(&initialize(HANDSHAKE[0]), &[]).await;
    assert_eq!(first.status, 200);
    let session = first.headers["mcp-session-id"].to_str().unwrap().to_owned();

    let refused = rpc.post(&initialize(HANDSHAKE[1]), &[]).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.headers["retry-after"], "5");
    // 2026-07-28 requests need no session, and still pass.
    let modern = rpc.modern(1, "tools/list", json!({})).await;
    assert_eq!(modern.status, 200, "{}", modern.body);

    let closed = reqwest::Client::new()
        .delete(&registry.mcp)
        .header("mcp-session-id", &session)
        .header("mcp-protocol-version", HANDSHAKE[0])
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    toolmesh_test_support::wait::eventually(Duration::from_secs(10), "a session again", || async {
        rpc.post(&initialize(HANDSHAKE[0]), &[]).await.status == 200
    })
    .await;
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browser_origins_are_refused_unless_allowed() {
    let registry = McpRegistry::start(Config {
        mcp_allowed_origins: vec!["https://app.example:443".into()],
        ..config()
    })
    .await;
    let rpc = Rpc::new(&registry.mcp);
    let evil = rpc
        .post(
            &modern_request(1, "server/discover", json!({})),
            &[
                ("origin", "https://evil.example"),
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!(evil.status, 403, "{}", evil.body);
    let allowed = rpc
        .post(
            &modern_request(1, "server/discover", json!({})),
            &[
                ("origin", "https://app.example"),
                ("mcp-protocol-version", MODERN),
                ("mcp-method", "server/discover"),
            ],
        )
        .await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_tool_named_like_the_search_tool_takes_its_place() {
    let registry = McpRegistry::start(config()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = sidecar(
        &registry.grpc,
        "s1",
        vec![adder("toolmesh.search_tools", calls.clone()).build()],
    )
    .await;
    registry.wait_for("toolmesh.search_tools", 1).await;
    let rpc = Rpc::new(&registry.mcp);

    let reply = rpc.modern(1, "tools/list", json!({})).await;
    let tools = reply.message.unwrap()["result"]["tools"].clone();
    let tools = tools.as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(
        tools[0]["description"], "Add two integers",
        "the catalog's tool"
    );

    let reply = rpc
        .modern(
            2,
            "tools/call",
            json!({"name": "toolmesh.search_tools", "arguments": {"a": 40, "b": 2}}),
        )
        .await;
    let result = reply.message.unwrap()["result"].clone();
    assert_eq!(result["structuredContent"]["sum"], 42, "{result}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_search_tool_can_be_turned_off() {
    let registry = McpRegistry::start(Config {
        mcp_search_tool: false,
        ..config()
    })
    .await;
    let rpc = Rpc::new(&registry.mcp);
    let reply = rpc.modern(1, "tools/list", json!({})).await;
    assert_eq!(reply.message.unwrap()["result"]["tools"], json!([]));
    let reply = rpc
        .modern(
            2,
            "tools/call",
            json!({"name": "toolmesh.search_tools", "arguments": {"query": "x"}}),
        )
        .await;
    assert_eq!(reply.message.unwrap()["error"]["code"], -32602);
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_get_the_mcp_deadline_and_outages_are_results() {
    let registry = McpRegistry::start(Config {
        mcp_call_timeout: Duration::from_secs(1),
        ..config()
    })
    .await;
    let sidecar = sidecar(
        &registry.grpc,
        "s1",
        vec![sleep_tool(Duration::from_secs(30))],
    )
    .await;
    registry.wait_for("sleep", 1).await;
    let rpc = Rpc::new(&registry.mcp);

    let started = std::time::Instant::now();
    let reply = rpc
        .modern(
            1,
            "tools/call",
            json!({"name": "sleep", "arguments": {"millis": 10_000}}),
        )
        .await;
    let took = started.elapsed();
    let result = reply.message.unwrap()["result"].clone();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["_meta"]["toolmesh/code"], "DEADLINE_EXCEEDED",
        "{result}"
    );
    assert!(took < Duration::from_secs(8), "answered after {took:?}");

    // The sidecar dies without withdrawing: its lease still lists the tool.
    sidecar.abort();
    let reply = rpc
        .modern(
            2,
            "tools/call",
            json!({"name": "sleep", "arguments": {"millis": 1}}),
        )
        .await;
    let result = reply.message.unwrap()["result"].clone();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["_meta"]["toolmesh/code"], "UNAVAILABLE", "{result}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_ends_gracefully_when_the_registry_stops() {
    let registry = McpRegistry::start(config()).await;
    let request = modern_request(
        7,
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true}}),
    );
    let mut response = reqwest::Client::new()
        .post(&registry.mcp)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(request.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = String::new();
    while !body.contains("notifications/subscriptions/acknowledged") {
        let chunk = tokio::time::timeout(REPLY_WITHIN, response.chunk())
            .await
            .expect("the acknowledgment")
            .unwrap()
            .expect("more of the stream");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let _sidecar = standard_sidecar(&registry, &Rpc::new(&registry.mcp)).await;
    while !body.contains("notifications/tools/list_changed") {
        let chunk = tokio::time::timeout(REPLY_WITHIN, response.chunk())
            .await
            .expect("a notification")
            .unwrap()
            .expect("more of the stream");
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let stopping = tokio::spawn(registry.stop());
    while let Ok(Some(chunk)) = tokio::time::timeout(REPLY_WITHIN, response.chunk())
        .await
        .expect("the end")
    {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    let closing = first_response(
        &body,
        &HeaderMap::from_iter([(
            reqwest::header::CONTENT_TYPE,
            "text/event-stream".parse().unwrap(),
        )]),
    )
    .expect("the subscription's final result");
    assert_eq!(closing["id"], 7);
    assert_eq!(closing["result"]["resultType"], "complete", "{closing}");
    stopping.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exposed_or_shared_address_is_refused_at_start() {
    let grpc = loopback_listener().await;
    let taken = grpc.local_addr().unwrap().to_string();
    let shared = Config {
        mcp_listen: Some(taken.parse().unwrap()),
        ..config()
    };
    let error = toolmesh_registry::run(grpc, shared, std::future::pending())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("--mcp-listen"), "{error}");
    assert!(error.to_string().contains("its own"), "{error}");

    let exposed = Config {
        mcp_listen: Some("0.0.0.0:0".parse().unwrap()),
        ..config()
    };
    let error = toolmesh_registry::run(loopback_listener().await, exposed, std::future::pending())
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("beyond loopback, and agents are not authenticated"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_the_registrys_certificate_over_http1_and_http2() {
    let dir = tempfile::tempdir().unwrap();
    let ca = toolmesh_test_support::tls::Ca::new("mcp test CA");
    let issued = ca.issue(&["127.0.0.1", "localhost"]);
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, &issued.cert).unwrap();
    std::fs::write(&key, &issued.key).unwrap();
    let listener = loopback_listener().await;
    let url = format!("https://{}/mcp", listener.local_addr().unwrap());
    let registry = McpRegistry::start_with(
        Config {
            tls_cert_file: Some(cert),
            tls_key_file: Some(key),
            ..config()
        },
        listener,
        url.clone(),
    )
    .await;
    let root = reqwest::Certificate::from_pem(ca.pem().as_bytes()).unwrap();
    for http1 in [true, false] {
        let mut builder = reqwest::Client::builder()
            .add_root_certificate(root.clone())
            .tls_built_in_root_certs(false);
        if http1 {
            builder = builder.http1_only();
        }
        let reply = Rpc::over(&url, builder)
            .modern(1, "server/discover", json!({}))
            .await;
        assert_eq!(reply.status, 200, "http1 only: {http1}: {}", reply.body);
        let expected = if http1 {
            reqwest::Version::HTTP_11
        } else {
            reqwest::Version::HTTP_2
        };
        assert_eq!(reply.version, expected, "negotiated by ALPN");
        let result = &reply.message.unwrap()["result"];
        assert!(result["supportedVersions"].is_array(), "{result}");
    }
    let plaintext = reqwest::Client::new()
        .post(url.replace("https://", "http://"))
        .body("{}")
        .send()
        .await;
    assert!(
        plaintext.map_or(true, |r| !r.status().is_success()),
        "no plaintext on a TLS port"
    );
    registry.stop().await;
}
