//! The MCP endpoint end to end over plain HTTP: a registry serving
//! `--mcp-listen` on loopback, real sidecars, and JSON-RPC posted as MCP
//! clients post it. This file holds the harness the `mcp_*` files share,
//! and the protocol: revisions, pages, calls, the search tool. The
//! official Python SDK's view is `mcp_python.rs`; who may call is
//! `mcp_access.rs`; bounds, TLS, shutdown and the binary are
//! `mcp_serving.rs`.

use std::{sync::Arc, sync::atomic::AtomicUsize, time::Duration};

use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};
use toolmesh_registry::{Config, Registry};
use toolmesh_sidecar::server::ServeOptions;
use toolmesh_test_support::{
    catalog,
    server::{LoopbackServer, loopback_listener, sidecar, sidecar_with},
    tools::{add_tool, adder, sleep_tool},
    wait::eventually,
};

/// The newest revision, and the handshake revisions still in use.
pub(crate) const MODERN: &str = "2026-07-28";
pub(crate) const HANDSHAKE: [&str; 2] = ["2025-11-25", "2025-06-18"];

/// Most a reply may take to arrive.
pub(crate) const REPLY_WITHIN: Duration = Duration::from_secs(30);

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

    /// `config`, with the MCP endpoint on `mcp`, reached at `mcp_url`.
    pub(crate) async fn start_with(config: Config, mcp: TcpListener, mcp_url: String) -> Self {
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
    // Ready once its announce returned, when the registry has taken every
    // tool of it (its reads take them one by one).
    let ready = toolmesh_telemetry::admin::Readiness::not_ready("not announced");
    let sidecar = sidecar_with(
        loopback_listener().await,
        tools,
        ServeOptions {
            registry: registry.grpc.clone(),
            instance_id: Some("s1".to_owned()),
            readiness: Some(ready.clone()),
            ..ServeOptions::default()
        },
    );
    eventually(Duration::from_secs(20), "the sidecar to announce", || {
        let ready = ready.clone();
        async move { ready.is_ready() }
    })
    .await;
    rpc.wait_listed("add", true).await;
    sidecar
}

/// The MCP address the registry binary `registry` logs it listens on
/// (waited for up to 20 s).
pub(crate) async fn logged_mcp_address(
    registry: &toolmesh_test_support::registry_process::RegistryProcess,
) -> std::net::SocketAddr {
    let mut address = None;
    eventually(Duration::from_secs(20), "the MCP listening line", || {
        address = registry
            .log()
            .lines()
            .filter(|line| line.contains("MCP endpoint listening"))
            .flat_map(str::split_whitespace)
            .find_map(|word| word.strip_prefix("address="))
            .and_then(|addr| addr.parse().ok());
        std::future::ready(address.is_some())
    })
    .await;
    address.expect("an address")
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

/// A JSON-RPC request carrying the 2026-07-28 `_meta` envelope (beside
/// what `params._meta` already holds).
pub(crate) fn modern_request(id: u64, method: &str, mut params: Value) -> Value {
    let envelope = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "toolmesh-tests", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if !params["_meta"].is_object() {
        params["_meta"] = json!({});
    }
    if let (Some(meta), Some(envelope)) = (params["_meta"].as_object_mut(), envelope.as_object()) {
        meta.extend(envelope.clone());
    }
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

pub(crate) fn first_response(body: &str, headers: &HeaderMap) -> Option<Value> {
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
    let _sidecar = sidecar(
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

    // An instance that announced, then vanished: nothing listens at its
    // endpoint any more.
    let mut registration = RegistrationClient::connect(registry.grpc.clone())
        .await
        .unwrap();
    registration
        .announce(pb::AnnounceRequest {
            instance_id: "ghost".into(),
            endpoint: "http://127.0.0.1:9".into(),
            tools: vec![pb::ToolDescriptor {
                name: "ghost".into(),
                description: "Nobody runs it".into(),
                ..Default::default()
            }],
            execute_key: Vec::new(),
        })
        .await
        .unwrap();
    let reply = rpc
        .modern(2, "tools/call", json!({"name": "ghost", "arguments": {}}))
        .await;
    let result = reply.message.unwrap()["result"].clone();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["_meta"]["toolmesh/code"], "UNAVAILABLE", "{result}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_in_meta_replays_the_first_answer() {
    let registry = McpRegistry::start(config()).await;
    let rpc = Rpc::new(&registry.mcp);
    let _sidecar = standard_sidecar(&registry, &rpc).await;
    let call = |key: &'static str| {
        json!({
            "name": "add",
            "arguments": {"a": 1, "b": 2},
            "_meta": {"toolmesh/idempotencyKey": key},
        })
    };
    let mut runs = Vec::new();
    for (id, key) in [(1, "order-1"), (2, "order-1"), (3, "order-2")] {
        let reply = rpc.modern(id, "tools/call", call(key)).await;
        let result = reply.message.unwrap()["result"].clone();
        runs.push(
            result["structuredContent"]["calls"]
                .as_u64()
                .expect("calls"),
        );
    }
    assert_eq!(runs[0], runs[1], "the repeat is the first call's answer");
    assert_eq!(runs[2], runs[0] + 1, "another key runs the tool: {runs:?}");
    registry.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progressive_discovery_lists_two_tools_and_calls_through_the_tools_own_path() {
    let registry = McpRegistry::start(Config {
        mcp_discovery: toolmesh_registry::config::McpDiscovery::Progressive,
        ..config()
    })
    .await;
    let rpc = Rpc::new(&registry.mcp);
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = sidecar_with(
        loopback_listener().await,
        vec![
            add_tool(calls.clone()),
            adder("limited", calls).rate_limit(0.01, 2).build(),
        ],
        ServeOptions {
            registry: registry.grpc.clone(),
            instance_id: Some("s1".to_owned()),
            ..ServeOptions::default()
        },
    );
    registry.wait_for("limited", 1).await;
    assert_eq!(
        rpc.names().await,
        ["toolmesh.call_tool", "toolmesh.search_tools"]
    );
    // What a host reads whatever the catalog holds.
    let list = rpc
        .modern(0, "tools/list", json!({}))
        .await
        .message
        .unwrap()["result"]["tools"]
        .to_string();
    eprintln!(
        "progressive tools/list: {} bytes (~{} tokens)",
        list.len(),
        list.len() / 4
    );
    assert!(list.len() < 4096, "{list}");

    let call = |id, arguments: Value| {
        let rpc = &rpc;
        async move {
            let params = json!({"name": "toolmesh.call_tool", "arguments": arguments});
            rpc.modern(id, "tools/call", params).await.message.unwrap()["result"].clone()
        }
    };
    let ran = call(1, json!({"name": "add", "arguments": {"a": 1, "b": 2}})).await;
    assert_ne!(ran["isError"], true, "{ran}");
    // The named tool's own schema, and its own limit.
    let invalid = call(2, json!({"name": "add", "arguments": {"a": "one", "b": 2}})).await;
    assert_eq!(invalid["isError"], true, "{invalid}");
    assert_eq!(
        invalid["_meta"]["toolmesh/code"], "INVALID_ARGUMENT",
        "{invalid}"
    );
    for id in [3, 4] {
        let ok = call(
            id,
            json!({"name": "limited", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
        assert_ne!(ok["isError"], true, "{ok}");
    }
    let limited = call(5, json!({"name": "limited", "arguments": {"a": 1, "b": 2}})).await;
    assert_eq!(
        limited["_meta"]["toolmesh/code"], "RESOURCE_EXHAUSTED",
        "{limited}"
    );
    // The call tool's own arguments are checked first.
    let bad = call(6, json!({"arguments": {}})).await;
    assert_eq!(bad["isError"], true, "{bad}");
    // A catalog tool stays callable by its name.
    let direct = rpc
        .modern(
            7,
            "tools/call",
            json!({"name": "add", "arguments": {"a": 2, "b": 2}}),
        )
        .await
        .message
        .unwrap()["result"]
        .clone();
    assert_ne!(direct["isError"], true, "{direct}");
    registry.stop().await;
}
