//! The caller and the invocation id reach every kind of tool: headers for
//! an HTTP tool (a real server on loopback), environment variables for a
//! command, a `CallContext` for a Rust handler; `Execute` called on a
//! sidecar library server.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolmesh_proto::pb;
use toolmesh_sidecar::backend::CommandBackend;
use toolmesh_sidecar::sdk::{self, CallContext, ToolError};
use toolmesh_sidecar::{Backend, Tool};

use crate::common::{TestRegistry, runtime_client, sidecar, tools_from_yaml};

/// An HTTP server on 127.0.0.1:0 answering with the `x-toolmesh-*` headers
/// it received (`null` when absent); returns its URL.
async fn upstream() -> String {
    let app = Router::new().route(
        "/who",
        post(|headers: HeaderMap| async move {
            let header = |name: &str| {
                headers
                    .get(name)
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            };
            let names: Vec<&str> = headers
                .keys()
                .map(|name| name.as_str())
                .filter(|name| name.starts_with("x-toolmesh-"))
                .collect();
            json!({
                "caller": header("x-toolmesh-caller"),
                "invocation_id": header("x-toolmesh-invocation-id"),
                "names": names,
            })
            .to_string()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/who", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Serialize, JsonSchema)]
struct Who {
    caller: String,
    invocation_id: String,
    anonymous: bool,
}

fn sdk_who() -> Tool {
    sdk::tool_with_context(
        "sdk_who",
        "Who called",
        |_: NoArgs, context: CallContext| async move {
            Ok::<_, ToolError>(Who {
                anonymous: context.is_anonymous(),
                caller: context.caller,
                invocation_id: context.invocation_id,
            })
        },
    )
    .build()
}

fn execute(tool: &str, caller: &str, invocation_id: &str) -> pb::ExecuteRequest {
    pb::ExecuteRequest {
        tool: tool.into(),
        arguments_json: "{}".into(),
        invocation_id: invocation_id.into(),
        caller: caller.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_backend_learns_who_called() {
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        r#"
tools:
  - name: http_who
    description: Who called, over HTTP
    backend: {{http: {{url: "{}"}}}}
  - name: cmd_who
    description: Who called, from the environment
    backend:
      command: ["sh", "-c", 'printf "[\"%s\", \"%s\"]" "$TOOLMESH_CALLER" "$TOOLMESH_INVOCATION_ID"']
"#,
        upstream().await
    );
    let mut tools = tools_from_yaml(&yaml, dir.path());
    tools.push(sdk_who());
    let sidecar = sidecar(&registry.url(), "caller-1", tools).await;
    let mut client = runtime_client(sidecar.url(), "caller-1").await;
    let mut run = async |tool: &str, caller: &str, invocation_id: &str| -> Value {
        let response = client
            .execute(execute(tool, caller, invocation_id))
            .await
            .unwrap_or_else(|status| panic!("{tool}: {status:?}"))
            .into_inner();
        assert!(!response.is_error, "{tool}: {}", response.result_json);
        serde_json::from_str(&response.result_json).unwrap()
    };

    assert_eq!(
        run("http_who", "alice", "inv-1").await,
        json!({
            "caller": "alice",
            "invocation_id": "inv-1",
            "names": ["x-toolmesh-caller", "x-toolmesh-invocation-id"],
        })
    );
    assert_eq!(
        run("cmd_who", "team:ops/bot 7", "inv-2").await,
        json!(["team:ops/bot 7", "inv-2"])
    );
    assert_eq!(
        run("sdk_who", "alice", "inv-3").await,
        json!({"caller": "alice", "invocation_id": "inv-3", "anonymous": false})
    );

    // Anonymous: no caller header, an empty variable, an empty string.
    assert_eq!(
        run("http_who", "", "inv-4").await,
        json!({
            "caller": null,
            "invocation_id": "inv-4",
            "names": ["x-toolmesh-invocation-id"],
        })
    );
    assert_eq!(run("cmd_who", "", "inv-5").await, json!(["", "inv-5"]));
    assert_eq!(
        run("sdk_who", "", "inv-6").await,
        json!({"caller": "", "invocation_id": "inv-6", "anonymous": true})
    );
    // Without an invocation id either, neither header is sent.
    assert_eq!(
        run("http_who", "", "").await,
        json!({"caller": null, "invocation_id": null, "names": []})
    );

    // A caller no header could carry unchanged is refused before any tool runs.
    for tool in ["http_who", "cmd_who", "sdk_who"] {
        let refused = client
            .execute(execute(tool, "alice\r\nx-toolmesh-caller: root", "inv-7"))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{tool}");
        assert_eq!(
            refused.message(),
            r#"caller "alice\r\nx-toolmesh-caller: root" cannot be given to the tool: only printable ASCII characters are allowed"#
        );
    }

    sidecar.stop().await;
}

#[tokio::test]
async fn a_command_never_inherits_a_stale_caller() {
    // The sidecar's own environment is passed on to commands; a
    // TOOLMESH_CALLER in it (here given as the backend's extra env, which
    // the YAML refuses) is replaced for every call, anonymous ones included.
    let stale = BTreeMap::from([
        ("TOOLMESH_CALLER".to_owned(), "root".to_owned()),
        ("TOOLMESH_INVOCATION_ID".to_owned(), "old".to_owned()),
    ]);
    let backend = CommandBackend::new(
        PathBuf::from("sh"),
        vec![
            "-c".into(),
            r#"printf '%s|%s|%s' "${TOOLMESH_CALLER-unset}" "${TOOLMESH_INVOCATION_ID-unset}" "$GREETING""#
                .into(),
        ],
        BTreeMap::from([("GREETING".to_owned(), "hi".to_owned())])
            .into_iter()
            .chain(stale)
            .collect(),
        None,
        1024,
    );
    let backend: Arc<dyn Backend> = Arc::new(backend);
    let deadline = toolmesh_proto::deadline::Deadline::after(Duration::from_secs(10));
    let anonymous = backend
        .call("{}", &CallContext::default(), deadline)
        .await
        .unwrap();
    assert_eq!(anonymous.result_json, "||hi");
    let known = backend
        .call("{}", &CallContext::new("alice", "inv-9"), deadline)
        .await
        .unwrap();
    assert_eq!(known.result_json, "alice|inv-9|hi");
}

/// The trace context the registry sends reaches a Rust handler as
/// `CallContext::trace` (unchanged here: this test process exports no
/// spans), a command as `TRACEPARENT`/`TRACESTATE`, never a stale value
/// from the sidecar's own environment; a malformed one reaches none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_context_reaches_handlers_and_commands() {
    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = r#"
tools:
  - name: cmd_trace
    description: The trace context, from the environment
    backend:
      command: ["sh", "-c", 'printf "[\"%s\", \"%s\"]" "${TRACEPARENT-unset}" "${TRACESTATE-unset}"']
      env: {GREETING: hi}
"#;
    let mut tools = tools_from_yaml(yaml, dir.path());
    tools.push(
        sdk::tool_with_context(
            "sdk_trace",
            "The trace context, as a handler sees it",
            |_: NoArgs, context: CallContext| async move {
                Ok::<_, ToolError>(vec![
                    context.trace.traceparent.unwrap_or_default(),
                    context.trace.tracestate.unwrap_or_default(),
                ])
            },
        )
        .build(),
    );
    let sidecar = sidecar(&registry.url(), "trace-1", tools).await;
    let mut client = runtime_client(sidecar.url(), "trace-1").await;
    let mut run = async |tool: &str, parent: &str| -> Value {
        let mut request = tonic::Request::new(execute(tool, "alice", "inv-1"));
        request
            .metadata_mut()
            .insert("traceparent", parent.parse().unwrap());
        request
            .metadata_mut()
            .insert("tracestate", "vendor=x".parse().unwrap());
        let response = client.execute(request).await.unwrap().into_inner();
        assert!(!response.is_error, "{tool}: {}", response.result_json);
        serde_json::from_str(&response.result_json).unwrap()
    };
    assert_eq!(run("sdk_trace", PARENT).await, json!([PARENT, "vendor=x"]));
    assert_eq!(run("cmd_trace", PARENT).await, json!([PARENT, "vendor=x"]));
    assert_eq!(run("sdk_trace", "00-zz-01").await, json!(["", ""]));
    assert_eq!(
        run("cmd_trace", "00-zz-01").await,
        json!(["unset", "unset"])
    );
    sidecar.stop().await;
}
