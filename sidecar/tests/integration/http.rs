//! The HTTP backend against a real axum server on loopback.

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::extract::Path as UrlPath;
use axum::http::StatusCode;
use axum::routing::post;
use tokio::time::Instant;
use toolmesh_proto::deadline::Deadline;
use toolmesh_sidecar::CallContext;
use toolmesh_sidecar::config::SidecarConfig;
use toolmesh_sidecar::runtime::Runtime;

use crate::common::reserved_port;

/// The README's default result cap.
const FOUR_MIB: usize = 4 * 1024 * 1024;

/// A JSON string of exactly `len` bytes (`len >= 2`).
fn json_of_len(len: usize) -> String {
    format!("\"{}\"", "x".repeat(len - 2))
}

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
            "/bytes/{len}",
            post(|UrlPath(len): UrlPath<usize>| async move { json_of_len(len) }),
        )
        .route(
            "/stream/{answer}",
            post(|UrlPath(answer): UrlPath<String>| async move {
                let (status, body) = match answer.as_str() {
                    "result" => (
                        StatusCode::OK,
                        "event: progress\ndata: {\"fraction\": 0.5}\n\n: ping\n\nevent: result\ndata: {\"rows\":\ndata: 12}\n\n",
                    ),
                    "error" => (
                        StatusCode::OK,
                        "event: progress\ndata: oops\n\nevent: error\ndata: {\"message\": \"no such row\"}\n\n",
                    ),
                    "cut" => (StatusCode::OK, "event: progress\ndata: {}\n\nevent: result\ndata: 1\n"),
                    _ => (StatusCode::BAD_GATEWAY, "event: result\ndata: 1\n\n"),
                };
                (status, [("content-type", "text/event-stream; charset=utf-8")], body)
            }),
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
    let response = rt
        .execute(
            "t",
            r#"{"key":"k1"}"#,
            CallContext::default(),
            Deadline::unbounded(),
        )
        .await
        .unwrap();
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
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert!(response.is_error);
    assert_eq!(response.result_json, r#""HTTP 500: boom""#);

    let response = runtime(&format!("{base}/bad"), "")
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap();
    assert!(response.is_error);
    assert_eq!(response.result_json, r#"{"error":"bad key"}"#);
}

#[tokio::test]
async fn connection_refused_is_unavailable() {
    let port = reserved_port();
    let rt = runtime(&format!("http://127.0.0.1:{port}/x"), "");
    let err = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap_err();
    assert_eq!(err.to_status().code(), tonic::Code::Unavailable, "{err}");
}

#[tokio::test]
async fn slow_upstream_hits_the_deadline() {
    let base = upstream().await;
    let rt = runtime(&format!("{base}/slow"), "    timeout: 500ms\n");
    let start = Instant::now();
    let err = rt
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(err.to_status().code(), tonic::Code::DeadlineExceeded);
    // Not before the timeout, and long before the upstream's 30 s answer.
    assert!(
        elapsed >= Duration::from_millis(500) && elapsed < Duration::from_secs(15),
        "took {elapsed:?}"
    );
}

/// Runs the HTTP tool posting to `base/bytes/len` with `extra` tool lines.
async fn fetch_bytes(base: &str, len: usize, extra: &str) -> toolmesh_proto::pb::ExecuteResponse {
    runtime(&format!("{base}/bytes/{len}"), extra)
        .execute("t", "{}", CallContext::default(), Deadline::unbounded())
        .await
        .unwrap()
}

/// Asserts `response` is the error result for output over `cap` bytes
/// (showing only the start of a large result).
fn assert_refused(response: &toolmesh_proto::pb::ExecuteResponse, cap: usize) {
    let expected = format!("\"the tool's output exceeds the limit of {cap} bytes\"");
    assert!(
        response.is_error && response.result_json == expected,
        "is_error {}, {} bytes: {:?}",
        response.is_error,
        response.result_json.len(),
        response
            .result_json
            .get(..80)
            .unwrap_or(&response.result_json)
    );
}

#[tokio::test]
async fn max_output_bytes_caps_an_http_result() {
    let base = upstream().await;
    let cap = "    max_output_bytes: 1000\n";
    let at_cap = fetch_bytes(&base, 1000, cap).await;
    assert!(!at_cap.is_error, "{}", at_cap.result_json);
    assert_eq!(at_cap.result_json, json_of_len(1000));

    assert_refused(&fetch_bytes(&base, 1001, cap).await, 1000);
}

#[tokio::test]
async fn results_are_capped_at_4_mib_by_default() {
    let base = upstream().await;
    let at_cap = fetch_bytes(&base, FOUR_MIB, "").await;
    assert!(
        !at_cap.is_error && at_cap.result_json == json_of_len(FOUR_MIB),
        "is_error {}, {} bytes: {:?}",
        at_cap.is_error,
        at_cap.result_json.len(),
        at_cap.result_json.get(..80).unwrap_or(&at_cap.result_json)
    );

    assert_refused(&fetch_bytes(&base, FOUR_MIB + 1, "").await, FOUR_MIB);
}

#[tokio::test]
async fn a_streamed_answer_is_read_to_its_result() {
    let base = upstream().await;
    let call = |answer: &'static str| {
        let rt = runtime(&format!("{base}/stream/{answer}"), "");
        async move {
            rt.execute("t", "{}", CallContext::default(), Deadline::unbounded())
                .await
        }
    };
    let result = call("result").await.expect("a result");
    assert_eq!(
        (result.result_json.as_str(), result.is_error),
        ("{\"rows\":\n12}", false)
    );
    let error = call("error").await.expect("an error result");
    assert_eq!(
        (error.result_json.as_str(), error.is_error),
        (r#"{"message": "no such row"}"#, true)
    );
    // The last event is not ended by a blank line: no result.
    let cut = call("cut").await.expect_err("no result");
    assert_eq!(cut.to_status().code(), tonic::Code::Unavailable, "{cut}");
    assert!(
        cut.to_string().contains("ended without a result event"),
        "{cut}"
    );
    // Not 2xx: the body is an error result, as any other.
    let refused = call("refused").await.expect("an error result");
    assert!(refused.is_error);
    assert_eq!(
        refused.result_json,
        serde_json::json!("HTTP 502: event: result\ndata: 1").to_string()
    );
}
