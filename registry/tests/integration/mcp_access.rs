//! Who may use the MCP endpoint: the `Authorization` header as over gRPC
//! (401 with a challenge, before anything MCP is read), the call policy
//! (hidden tools are unknown tools), sessions bound to their caller, and
//! browser origins.

use std::path::Path;

use serde_json::json;
use toolmesh_registry::Config;

use crate::mcp::{
    HANDSHAKE, MODERN, McpRegistry, Rpc, config, initialize, modern_request, standard_sidecar,
};

pub(crate) fn write_keys(dir: &Path, keys: &[(&str, &str)]) -> std::path::PathBuf {
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
