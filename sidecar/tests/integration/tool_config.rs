//! Per-tool configuration: one backend serves several tools that differ
//! only by their `config`, which reaches every kind of backend (a header
//! for HTTP, environment variables for a command, the context for a Rust
//! handler) and never the registry; the descriptor's title and hints do
//! reach it.

use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolmesh_proto::pb;
use toolmesh_sidecar::Tool;
use toolmesh_sidecar::sdk::{self, CallContext, ToolError};

use crate::common::{TestRegistry, runtime_client, sidecar, tools_from_yaml};

/// An HTTP server on 127.0.0.1:0 answering with the `x-toolmesh-config`
/// header it received, as text (`null` when absent); returns its URL.
async fn upstream() -> String {
    let app = Router::new().route(
        "/joke",
        post(|headers: HeaderMap| async move {
            let config = headers
                .get("x-toolmesh-config")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            json!({ "config": config }).to_string()
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/joke", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

/// One handler, two tools.
fn sdk_joke(name: &str, style: &str) -> Tool {
    sdk::tool_with_context(
        name,
        "Tells a joke",
        |_: NoArgs, context: CallContext| async move {
            Ok::<_, ToolError>(Value::Object((*context.config).clone()))
        },
    )
    .config("style", style)
    .config("max_words", 50)
    .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_backend_serves_tools_that_differ_by_config() {
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        r#"
tools:
  - name: http_pun
    description: A pun
    title: Pun
    read_only: true
    open_world: false
    config: {{style: pun, lang: café}}
    backend: {{http: {{url: "{url}"}}}}
  - name: http_plain
    description: A joke with no settings
    backend: {{http: {{url: "{url}"}}}}
  - name: cmd_knock
    description: A joke at the door
    config: {{style: knock-knock, rounds: 2, loud: true, extra: {{a: 1}}}}
    backend:
      command: ["sh", "-c", 'printf "[\"%s\", \"%s\", \"%s\", \"%s\", %s]" "$TOOLMESH_CONFIG_STYLE" "$TOOLMESH_CONFIG_ROUNDS" "$TOOLMESH_CONFIG_LOUD" "${{TOOLMESH_CONFIG_EXTRA-unset}}" "$TOOLMESH_CONFIG"']
  - name: cmd_plain
    description: A joke with no settings
    backend:
      command: ["sh", "-c", 'printf "%s" "$TOOLMESH_CONFIG"']
"#,
        url = upstream().await
    );
    let mut tools = tools_from_yaml(&yaml, dir.path());
    tools.push(sdk_joke("sdk_pun", "pun"));
    tools.push(sdk_joke("sdk_dad", "dad"));
    let sidecar = sidecar(&registry.url(), "jokes", tools).await;
    let mut client = runtime_client(sidecar.url(), "jokes").await;
    let mut run = async |tool: &str| -> Value {
        let response = client
            .execute(pb::ExecuteRequest {
                tool: tool.into(),
                arguments_json: "{}".into(),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|status| panic!("{tool}: {status:?}"))
            .into_inner();
        assert!(!response.is_error, "{tool}: {}", response.result_json);
        serde_json::from_str(&response.result_json).unwrap()
    };

    // Non-ASCII is escaped, so the header is plain ASCII and reads back
    // as the same JSON.
    let pun = run("http_pun").await;
    let header = pun["config"].as_str().unwrap();
    assert!(header.is_ascii(), "{header}");
    assert_eq!(
        serde_json::from_str::<Value>(header).unwrap(),
        json!({"style": "pun", "lang": "café"})
    );
    assert_eq!(run("http_plain").await, json!({"config": null}));

    assert_eq!(
        run("cmd_knock").await,
        json!([
            "knock-knock",
            "2",
            "true",
            "unset",
            {"style": "knock-knock", "rounds": 2, "loud": true, "extra": {"a": 1}}
        ])
    );
    assert_eq!(run("cmd_plain").await, json!({}));

    assert_eq!(
        run("sdk_pun").await,
        json!({"style": "pun", "max_words": 50})
    );
    assert_eq!(
        run("sdk_dad").await,
        json!({"style": "dad", "max_words": 50})
    );

    // The registry has the title and hints, never the config.
    registry
        .wait_for_instances("http_pun", 1, Duration::from_secs(10))
        .await;
    let descriptor = registry.tool("http_pun").await.unwrap().descriptor.unwrap();
    assert_eq!(descriptor.title, "Pun");
    assert_eq!(
        (
            descriptor.read_only,
            descriptor.destructive,
            descriptor.open_world
        ),
        (Some(true), None, Some(false))
    );
    for name in ["http_pun", "cmd_knock", "sdk_pun"] {
        let tool = registry.tool(name).await.unwrap();
        let text = format!("{tool:?}");
        for setting in ["style", "café", "knock-knock", "max_words"] {
            assert!(!text.contains(setting), "{setting} in {text}");
        }
    }
    sidecar.stop().await;
}
