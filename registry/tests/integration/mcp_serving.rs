//! The MCP endpoint as a server: sessions bounded, TLS with the
//! registry's certificate, refusals at start, subscriptions closed
//! gracefully on shutdown, and the binary configured from its environment.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::json;
use toolmesh_registry::Config;
use toolmesh_test_support::{server::loopback_listener, wait::eventually};

use crate::mcp::{
    HANDSHAKE, MODERN, McpRegistry, REPLY_WITHIN, Rpc, config, first_response, initialize,
    logged_mcp_address, modern_request, standard_sidecar,
};

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
    assert_eq!(closed.status(), 204, "a DELETE that ended the session");
    toolmesh_test_support::wait::eventually(Duration::from_secs(10), "a session again", || async {
        rpc.post(&initialize(HANDSHAKE[0]), &[]).await.status == 200
    })
    .await;
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
    let pki = toolmesh_test_support::tls::Pki::new();
    let (cert, key) = pki.issue("registry", &["127.0.0.1", "localhost"]);
    let (cert, key) = (
        std::path::PathBuf::from(cert),
        std::path::PathBuf::from(key),
    );
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
    let root = reqwest::Certificate::from_pem(pki.ca().pem().as_bytes()).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_mcp_from_its_environment_and_stops_on_sigterm() {
    use toolmesh_test_support::{process, registry_process::RegistryProcess};
    let Some(binary) = process::binary("toolmesh-registry") else {
        return;
    };
    let (registry, _grpc) = RegistryProcess::start(
        &binary,
        &["--listen", "127.0.0.1:0"],
        &[
            ("TOOLMESH_MCP_LISTEN", "127.0.0.1:0"),
            ("TOOLMESH_MCP_PAGE_SIZE", "1"),
        ],
    )
    .await;
    let url = format!("http://{}/mcp", logged_mcp_address(&registry).await);
    let reply = Rpc::new(&url).modern(1, "tools/list", json!({})).await;
    let result = reply.message.expect("an answer")["result"].clone();
    assert_eq!(
        result["tools"][0]["name"], "toolmesh.search_tools",
        "{result}"
    );

    let pid = registry.pid();
    process::send(pid, nix::sys::signal::Signal::SIGTERM);
    eventually(Duration::from_secs(20), "the registry exits", || {
        std::future::ready(process::is_dead(pid))
    })
    .await;
    assert!(
        registry.log().contains("toolmesh registry stopped"),
        "{}",
        registry.log()
    );
}
