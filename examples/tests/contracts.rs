//! The contracts `docs/tools-in-any-language.md` states for the `command`
//! and `http` backends, checked rule by rule through the real registry and
//! sidecar binaries: a change that breaks one fails here.
#![allow(clippy::unwrap_used)]

#[path = "common/mesh.rs"]
mod mesh;

use serde_json::{Value, json};
use tonic::Code;

use mesh::*;

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
    // sidecar's `accept`: a JSON body or a streamed answer.
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
            "accept": "application/json, text/event-stream",
            // Nothing else: no user agent; the call's id, and no caller
            // header, since this registry does not authenticate agents.
            "names": ["accept", "content-length", "content-type", "host", "x-tool-key", "x-toolmesh-invocation-id"],
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
