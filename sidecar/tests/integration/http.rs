//! The HTTP backend against a real axum server on loopback.

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use tokio::time::Instant;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_sidecar::runtime::Runtime;

/// An axum server on 127.0.0.1:0; returns its base URL.
async fn upstream() -> String {
    let app = Router::new()
        .route(
            "/echo",
            post(|headers: axum::http::HeaderMap, body: String| async move {
                let content_type = headers
                    .get("content-type")
                    .map(|v| v.to_str().unwrap().to_owned());
                let token = headers
                    .get("x-token")
                    .map(|v| v.to_str().unwrap().to_owned());
                let args: serde_json::Value = serde_json::from_str(&body).unwrap();
                serde_json::json!({"args": args, "content_type": content_type, "token": token})
                    .to_string()
            }),
        )
        .route(
            "/boom",
            post(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "boom") }),
        )
        .route(
            "/bad",
            post(|| async { (StatusCode::BAD_REQUEST, r#"{"error":"bad key"}"#) }),
        )
        .route(
            "/slow",
            post(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "late"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A runtime with one HTTP tool `t` posting to `url`.
fn runtime(url: &str, extra: &str) -> Runtime {
    let yaml = format!(
        "tools:\n  - name: t\n    description: d\n{extra}    backend:\n      http: {{url: '{url}', headers: {{x-token: secret}}}}\n"
    );
    let tools = SidecarConfig::from_yaml_str(&yaml)
        .unwrap()
        .build_tools(Path::new("."))
        .unwrap();
    Runtime::new(tools).unwrap()
}

#[tokio::test]
async fn success_body_is_the_result() {
    let base = upstream().await;
    let rt = runtime(&format!("{base}/echo"), "");
    let response = rt.execute("t", r#"{"key":"k1"}"#, None).await.unwrap();
    assert!(!response.is_error);
    let result: serde_json::Value = serde_json::from_str(&response.result_json).unwrap();
    assert_eq!(
        result,
        serde_json::json!({"args": {"key": "k1"}, "content_type": "application/json", "token": "secret"})
    );
}

#[tokio::test]
async fn error_status_is_an_error_result() {
    let base = upstream().await;
    let response = runtime(&format!("{base}/boom"), "")
        .execute("t", "{}", None)
        .await
        .unwrap();
    assert!(response.is_error);
    assert_eq!(response.result_json, r#""HTTP 500: boom""#);

    let response = runtime(&format!("{base}/bad"), "")
        .execute("t", "{}", None)
        .await
        .unwrap();
    assert!(response.is_error);
    assert_eq!(response.result_json, r#"{"error":"bad key"}"#);
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let rt = runtime(&format!("http://{addr}/x"), "");
    let err = rt.execute("t", "{}", None).await.unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::Unavailable, "{err}");
}

#[tokio::test]
async fn slow_upstream_hits_the_deadline() {
    let base = upstream().await;
    let rt = runtime(&format!("{base}/slow"), "    timeout: 500ms\n");
    let start = Instant::now();
    let err = rt.execute("t", "{}", None).await.unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::DeadlineExceeded);
    assert!(start.elapsed() < Duration::from_secs(10));
}
