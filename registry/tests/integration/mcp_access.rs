//! Who may use the MCP endpoint: the `Authorization` header as over gRPC
//! (401 with a challenge, before anything MCP is read, audited as a refused
//! `Invoke` is), the call policy (hidden tools are unknown tools), sessions
//! bound to their caller, and browser origins.

use std::{
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_registry::Config;
use toolmesh_test_support::{catalog::invoke, wait::eventually};

use crate::mcp::{
    HANDSHAKE, MODERN, McpRegistry, Rpc, config, initialize, modern_request, standard_sidecar,
};

pub(crate) fn write_keys(dir: &Path, keys: &[(&str, &str)]) -> std::path::PathBuf {
    let keys: Vec<_> = keys
        .iter()
        .map(|&(caller, key)| (caller, key, &[][..]))
        .collect();
    toolmesh_test_support::keys::api_keys_file(dir, &keys)
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

/// A JWT for `sub` that expired an hour ago, signed by a key the registry
/// trusts (whose public PEM is the second value).
fn expired_jwt(sub: &str) -> (String, String) {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let token = jsonwebtoken::encode(
        &Header::new(Algorithm::ES256),
        &json!({"sub": sub, "exp": now - 3600}),
        &EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap(),
    )
    .unwrap();
    (token, pair.public_key_pem())
}

/// The `invoke` records of the audit log at `path` refused as
/// unauthenticated.
fn unauthenticated_records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["kind"] == "invoke" && r["outcome"] == "unauthenticated")
        .collect()
}

/// A record's fields, without the ones that differ from call to call.
fn fields(record: &Value) -> (Vec<String>, Value) {
    let object = record.as_object().unwrap();
    let names = object.keys().cloned().collect();
    let mut same = object.clone();
    for varying in ["ts", "latency_ms", "peer", "argument_bytes"] {
        same.remove(varying);
    }
    (names, Value::Object(same))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_401_is_audited_as_a_refused_grpc_call_is() {
    let dir = tempfile::tempdir().unwrap();
    let keys = write_keys(dir.path(), &[("mcp-agent", "mcp-key-0123456789")]);
    let (expired, public) = expired_jwt("mcp-agent");
    let jwt_keys = dir.path().join("jwt.pem");
    std::fs::write(&jwt_keys, public).unwrap();
    let audit = dir.path().join("audit.jsonl");
    let registry = McpRegistry::start(Config {
        api_keys_file: Some(keys),
        jwt_keys_file: Some(jwt_keys),
        audit_log: Some(audit.to_str().unwrap().to_owned()),
        ..config()
    })
    .await;
    let known = Rpc::new(&registry.mcp).with("authorization", "Bearer mcp-key-0123456789");
    let _sidecar = standard_sidecar(&registry, &known).await;
    let wrong_key = "Bearer wrong-key-SPRAYED-1".to_owned();
    let expired = format!("Bearer {expired}");
    let refused: [Option<&str>; 3] = [Some(&wrong_key), None, Some(&expired)];

    let mut grpc = ToolRegistryClient::connect(registry.grpc.clone())
        .await
        .unwrap();
    for credential in refused {
        let mut request = tonic::Request::new(invoke("add", r#"{"a":1,"b":2}"#));
        if let Some(credential) = credential {
            request
                .metadata_mut()
                .insert("authorization", credential.parse().unwrap());
        }
        let status = grpc.invoke(request).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated);
    }
    eventually(Duration::from_secs(10), "three gRPC records", || {
        std::future::ready(unauthenticated_records(&audit).len() == 3)
    })
    .await;
    let over_grpc = unauthenticated_records(&audit);

    let call = json!({"name": "add", "arguments": {"a": 1, "b": 2}});
    for (id, credential) in (1..).zip(refused) {
        let rpc = match credential {
            Some(credential) => Rpc::new(&registry.mcp).with("authorization", credential),
            None => Rpc::new(&registry.mcp),
        };
        let reply = rpc.modern(id, "tools/call", call.clone()).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
    }
    eventually(Duration::from_secs(10), "three MCP records", || {
        std::future::ready(unauthenticated_records(&audit).len() == 6)
    })
    .await;
    let over_mcp = unauthenticated_records(&audit)[3..].to_vec();
    for (grpc, mcp) in over_grpc.iter().zip(&over_mcp) {
        assert_eq!(fields(mcp), fields(grpc), "{mcp} beside {grpc}");
        assert_eq!(mcp["caller"], "");
        assert_eq!(mcp["tool"], "add", "the call's Mcp-Name");
        assert_eq!(mcp["argument_bytes"], 0, "the body is not read: {mcp}");
        let peer: std::net::SocketAddr = mcp["peer"].as_str().unwrap().parse().unwrap();
        assert!(peer.ip().is_loopback(), "{mcp}");
    }

    // Any request refused: a list, a handshake (no tool named).
    let sprayed = Rpc::new(&registry.mcp).with("authorization", &wrong_key);
    assert_eq!(sprayed.modern(4, "tools/list", json!({})).await.status, 401);
    assert_eq!(
        sprayed.post(&initialize(HANDSHAKE[0]), &[]).await.status,
        401
    );
    eventually(Duration::from_secs(10), "every 401 audited", || {
        std::future::ready(unauthenticated_records(&audit).len() == 8)
    })
    .await;
    for record in &unauthenticated_records(&audit)[6..] {
        assert_eq!(record["tool"], "", "{record}");
    }
    let written = std::fs::read_to_string(&audit).unwrap();
    assert!(!written.contains("SPRAYED"), "{written}");
    assert!(!written.contains(&expired[7..]), "{written}");
    registry.stop().await;
}
