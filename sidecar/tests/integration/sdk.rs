//! Rust tools through the SDK, served by an embedded sidecar.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolmesh_proto::pb;
use toolmesh_sidecar::sdk::{self, ToolError};

use crate::common::{LoopbackServer, TestRegistry, runtime_client};

#[derive(Debug, Deserialize, JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

#[derive(Debug, Serialize, JsonSchema)]
struct AddResult {
    sum: i64,
}

fn add_tool() -> toolmesh_sidecar::Tool {
    sdk::tool("add", "Add two integers", |args: AddArgs| async move {
        if args.a < 0 {
            return Err(ToolError::new("a must not be negative"));
        }
        Ok::<_, ToolError>(AddResult {
            sum: args.a + args.b,
        })
    })
    .rate_limit(5.0, 10)
    .per_caller_rate_limit(0.5, 2)
    .timeout(Duration::from_secs(2))
    .idempotent(true)
    .audit_arguments(true)
    .tags(["math"])
    .version("1.0.0")
    .build()
}

#[test]
fn descriptor_has_derived_schemas() {
    let tool = add_tool();
    let d = tool.descriptor();
    assert_eq!(d.name, "add");
    assert_eq!(
        d.rate_limit,
        Some(pb::RateLimit {
            rate: 5.0,
            burst: 10
        })
    );
    assert_eq!(
        d.timeout,
        Some(prost_types::Duration {
            seconds: 2,
            nanos: 0
        })
    );
    assert_eq!(
        d.per_caller_rate_limit,
        Some(pb::RateLimit {
            rate: 0.5,
            burst: 2
        })
    );
    assert!(d.idempotent);
    assert!(d.audit_arguments);
    assert_eq!(d.tags, ["math"]);
    assert_eq!(d.version, "1.0.0");
    let input: serde_json::Value = serde_json::from_str(&d.input_schema_json).unwrap();
    let validator = jsonschema::validator_for(&input).unwrap();
    assert!(validator.is_valid(&serde_json::json!({"a": 1, "b": 2})));
    assert!(!validator.is_valid(&serde_json::json!({"a": 1})));
    let output: serde_json::Value = serde_json::from_str(&d.output_schema_json).unwrap();
    assert!(jsonschema::is_valid(
        &output,
        &serde_json::json!({"sum": 3})
    ));
}

#[test]
fn a_plain_tool_announces_no_per_caller_limit_and_no_audit() {
    let tool = sdk::tool("plain", "d", |args: AddArgs| async move {
        Ok::<_, ToolError>(AddResult {
            sum: args.a + args.b,
        })
    })
    .build();
    let d = tool.descriptor();
    assert_eq!((d.per_caller_rate_limit, d.audit_arguments), (None, false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_through_an_embedded_sidecar() {
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = registry.url();
    let sidecar = LoopbackServer::spawn(listener, |listener, shutdown| {
        sdk::Sidecar::new(url)
            .instance_id("sdk-1")
            .execute_key(toolmesh_test_support::grants::key())
            .tool(add_tool())
            .serve(listener, shutdown)
    });

    registry
        .wait_for_instances("add", 1, Duration::from_secs(20))
        .await;
    assert_eq!(
        registry.descriptor("add").await.unwrap(),
        add_tool().descriptor().clone()
    );
    // Through the registry: it dialled the endpoint the SDK advertised.
    let through = registry.invoke("add", r#"{"a": 2, "b": 3}"#).await.unwrap();
    assert_eq!(
        (
            through.result_json.as_str(),
            through.is_error,
            through.instance_id.as_str()
        ),
        (r#"{"sum":5}"#, false, "sdk-1")
    );

    // Straight to the sidecar, for what the registry would stop first.
    let mut client = runtime_client(sidecar.url(), "sdk-1").await;
    let call = |args: &str| pb::ExecuteRequest {
        tool: "add".into(),
        arguments_json: args.into(),
        invocation_id: "inv".into(),
        ..Default::default()
    };
    let refused = client
        .execute(call(r#"{"a": -1, "b": 3}"#))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (refused.result_json.as_str(), refused.is_error),
        (r#""a must not be negative""#, true)
    );

    let bad = client
        .execute(call(r#"{"a": "x"}"#))
        .await
        .unwrap()
        .into_inner();
    assert!(bad.is_error);
    assert!(
        bad.result_json.contains("invalid arguments"),
        "{}",
        bad.result_json
    );

    sidecar.stop().await;
    assert_eq!(registry.tool("add").await, None, "withdrawn on stop");
}
