//! End to end: the registry and real sidecars on loopback, driven through
//! gRPC clients as an agent and a sidecar would.
#![allow(clippy::unwrap_used, missing_docs)]

#[path = "integration/agent_auth.rs"]
mod agent_auth;
#[path = "integration/approvals.rs"]
mod approvals;
#[path = "integration/attempts.rs"]
mod attempts;
#[path = "integration/call_log.rs"]
mod call_log;
mod common;
#[path = "integration/console.rs"]
mod console;
#[path = "integration/deadlines.rs"]
mod deadlines;
#[path = "integration/definition_approvals.rs"]
mod definition_approvals;
#[path = "integration/execute_grants.rs"]
mod execute_grants;
#[path = "integration/faults.rs"]
mod faults;
#[path = "integration/flags.rs"]
mod flags;
#[path = "integration/grpcurl.rs"]
mod grpcurl;
#[path = "integration/health_command.rs"]
mod health_command;
#[path = "integration/hostile.rs"]
mod hostile;
#[path = "integration/idempotency.rs"]
mod idempotency;
#[path = "integration/keys.rs"]
mod keys;
#[path = "integration/leases.rs"]
mod leases;
#[path = "integration/limits.rs"]
mod limits;
#[path = "integration/mcp.rs"]
mod mcp;
#[path = "integration/mcp_access.rs"]
mod mcp_access;
#[path = "integration/mcp_both_ways.rs"]
mod mcp_both_ways;
#[path = "integration/mcp_content.rs"]
mod mcp_content;
#[path = "integration/mcp_docs.rs"]
mod mcp_docs;
#[path = "integration/mcp_python.rs"]
mod mcp_python;
#[path = "integration/mcp_redis.rs"]
mod mcp_redis;
#[path = "integration/mcp_serving.rs"]
mod mcp_serving;
#[path = "integration/mcp_tasks.rs"]
mod mcp_tasks;
#[path = "integration/metrics.rs"]
mod metrics;
#[path = "integration/proxy.rs"]
mod proxy;
#[path = "integration/redis_invoke.rs"]
mod redis_invoke;
#[path = "integration/redis_limiter.rs"]
mod redis_limiter;
#[path = "integration/redis_outages.rs"]
mod redis_outages;
#[path = "integration/redis_replicas.rs"]
mod redis_replicas;
#[path = "integration/redis_round_trips.rs"]
mod redis_round_trips;
#[path = "integration/redis_unreachable.rs"]
mod redis_unreachable;
#[path = "integration/registrants.rs"]
mod registrants;
#[path = "integration/search.rs"]
mod search;
#[cfg(feature = "model")]
#[path = "integration/search_model.rs"]
mod search_model;
#[path = "integration/shutdown.rs"]
mod shutdown;
#[path = "integration/tasks.rs"]
mod tasks;
#[path = "integration/tls.rs"]
mod tls;
#[path = "integration/traces.rs"]
mod traces;
#[path = "integration/versions.rs"]
mod versions;
#[path = "integration/watch.rs"]
mod watch;

use std::{
    sync::{Arc, atomic::AtomicUsize},
    time::{Duration, Instant},
};

use common::*;
use tonic::Code;
use tonic_types::StatusExt;
use toolmesh_proto::pb;
use toolmesh_registry::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_path_lists_and_invokes() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s1", vec![add_tool(calls.clone())]).await;
    wait_for_instances(&registry, "add", 1).await;

    let mut client = registry.client().await;
    let tools = client
        .list_tools(pb::ListToolsRequest::default())
        .await
        .unwrap()
        .into_inner()
        .tools;
    assert_eq!(tools.len(), 1);
    let descriptor = tools[0].descriptor.clone().unwrap();
    let schema: serde_json::Value = serde_json::from_str(&descriptor.input_schema_json).unwrap();
    assert_eq!(schema["properties"]["a"]["type"], "integer");
    assert!(descriptor.idempotent);

    let response = client
        .invoke(invoke("add", r#"{"a": 2, "b": 40}"#))
        .await
        .unwrap()
        .into_inner();
    assert!(!response.is_error);
    assert_eq!(response.instance_id, "s1");
    assert_eq!(response.attempts, 1);
    let result: serde_json::Value = serde_json::from_str(&response.result_json).unwrap();
    assert_eq!(result["sum"], 42);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_name_every_field() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s1", vec![add_tool(calls.clone())]).await;
    wait_for_instances(&registry, "add", 1).await;
    let mut client = registry.client().await;

    let status = client
        .invoke(invoke("add", r#"{"a": "two"}"#))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let details = status.get_error_details();
    let mut fields: Vec<_> = details
        .bad_request()
        .expect("BadRequest details")
        .field_violations
        .iter()
        .map(|v| v.field.clone())
        .collect();
    fields.sort();
    assert_eq!(fields, ["/a", "/b"]);

    let status = client
        .invoke(invoke("add", "{\"a\": 1,\n \"b\": }"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let details = status.get_error_details();
    let violation = &details.bad_request().unwrap().field_violations[0];
    assert_eq!(violation.field, "arguments_json");
    assert_eq!(
        violation.description,
        "not valid JSON: expected value at line 2 column 7"
    );

    assert_eq!(
        calls.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "invalid calls never reach the tool"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_tool_is_not_found_with_resource_info() {
    let registry = TestRegistry::start(Config::default()).await;
    let mut client = registry.client().await;
    let status = client.invoke(invoke("nope", "{}")).await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let details = status.get_error_details();
    let info = details.resource_info().expect("ResourceInfo");
    assert_eq!(info.resource_name, "nope");
    assert_eq!(info.resource_type, "toolmesh.v1.Tool");
    let status = client
        .get_tool(pb::GetToolRequest {
            name: "nope".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_with_the_real_retry_delay() {
    let registry = TestRegistry::start(Config::default()).await;
    let tool =
        toolmesh_sidecar::sdk::tool("limited", "Rate limited echo", |args: AddArgs| async move {
            Ok(AddResult {
                sum: args.a + args.b,
                calls: 0,
            })
        })
        .rate_limit(0.2, 2)
        .build();
    let _sidecar = TestSidecar::start(&registry.url(), "s1", vec![tool]).await;
    wait_for_instances(&registry, "limited", 1).await;
    let mut client = registry.client().await;

    // Burst 2, then one token every 5 s, counted from the first call.
    let first = Instant::now();
    for _ in 0..2 {
        client
            .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
            .await
            .unwrap();
    }
    let status = client
        .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
        .await
        .unwrap_err();
    let since_first = first.elapsed();
    assert_eq!(status.code(), Code::ResourceExhausted);
    let details = status.get_error_details();
    let delay = details
        .retry_info()
        .expect("RetryInfo")
        .retry_delay
        .expect("a delay");
    let period = Duration::from_secs(5);
    assert!(
        delay <= period && delay + since_first >= period,
        "retry in {delay:?}, {since_first:?} after the first call"
    );
    let quota = details.quota_failure().expect("QuotaFailure");
    assert_eq!(quota.violations.len(), 1);
    assert_eq!(quota.violations[0].subject, "tool:limited");
    assert!(
        quota.violations[0]
            .description
            .contains("0.2 calls/s with burst 2"),
        "{}",
        quota.violations[0].description
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_error_is_a_result_not_a_status() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s1", vec![add_tool(calls)]).await;
    wait_for_instances(&registry, "add", 1).await;
    let response = registry
        .client()
        .await
        .invoke(invoke("add", r#"{"a": 13, "b": 1}"#))
        .await
        .unwrap()
        .into_inner();
    assert!(response.is_error);
    let message: String = serde_json::from_str(&response.result_json).unwrap();
    assert_eq!(message, "13 is unlucky");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_tools_run_and_fail_as_results() {
    let registry = TestRegistry::start(Config::default()).await;
    let tools = command_tools(
        r#"
tools:
  - name: echo
    description: Echo the arguments
    arguments:
      - {name: text, type: string, description: Anything, required: true}
    backend:
      command: ["cat"]
  - name: broken
    description: Always fails
    backend:
      command: ["sh", "-c", "echo boom >&2; exit 3"]
"#,
    );
    let _sidecar = TestSidecar::start(&registry.url(), "s1", tools).await;
    wait_for_instances(&registry, "broken", 1).await;
    let mut client = registry.client().await;

    let echoed = client
        .invoke(invoke("echo", r#"{"text":"hello"}"#))
        .await
        .unwrap()
        .into_inner();
    assert!(!echoed.is_error);
    let value: serde_json::Value = serde_json::from_str(&echoed.result_json).unwrap();
    assert_eq!(value["text"], "hello");

    let status = client
        .invoke(invoke("echo", r#"{"text":"x","extra":1}"#))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    let failed = client
        .invoke(invoke("broken", "{}"))
        .await
        .unwrap()
        .into_inner();
    assert!(failed.is_error);
    assert!(
        failed.result_json.contains("boom"),
        "{}",
        failed.result_json
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_share_the_calls() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _a = TestSidecar::start(&registry.url(), "a", vec![add_tool(calls.clone())]).await;
    let _b = TestSidecar::start(&registry.url(), "b", vec![add_tool(calls.clone())]).await;
    wait_for_instances(&registry, "add", 2).await;
    let mut client = registry.client().await;
    let mut seen = std::collections::BTreeMap::<String, usize>::new();
    for _ in 0..40 {
        let response = client
            .invoke(invoke("add", r#"{"a":1,"b":2}"#))
            .await
            .unwrap()
            .into_inner();
        *seen.entry(response.instance_id).or_default() += 1;
    }
    assert_eq!(seen.keys().collect::<Vec<_>>(), ["a", "b"], "{seen:?}");
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_and_invalid_descriptors_are_refused() {
    let registry = TestRegistry::start(Config::default()).await;
    let mut registration = registry.registration().await;
    let descriptor = |version: &str, schema: &str| pb::ToolDescriptor {
        name: "t".into(),
        version: version.into(),
        input_schema_json: schema.into(),
        ..Default::default()
    };
    let announce = |id: &str, d: pb::ToolDescriptor| pb::AnnounceRequest {
        instance_id: id.into(),
        endpoint: "http://127.0.0.1:9".into(),
        tools: vec![d],
        execute_key: Vec::new(),
    };
    registration
        .announce(announce("a", descriptor("1.0.0", r#"{"type":"object"}"#)))
        .await
        .unwrap();

    // The same schema written differently is no conflict.
    registration
        .announce(announce(
            "same",
            descriptor("1.0.0", r#"{ "type" : "object" }"#),
        ))
        .await
        .unwrap();

    // Every differing field is named, each in its own violation.
    let mut conflicting = descriptor("1.0.0", r#"{"type":"object","required":["x"]}"#);
    conflicting.description = "another".into();
    conflicting.idempotent = true;
    conflicting.rate_limit = Some(pb::RateLimit {
        rate: 5.0,
        burst: 1,
    });
    let status = registration
        .announce(announce("b", conflicting))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    for field in [
        "description",
        "input_schema_json",
        "idempotent",
        "rate_limit",
    ] {
        assert!(status.message().contains(field), "{}", status.message());
    }
    let details = status.get_error_details();
    let failure = details.precondition_failure().expect("PreconditionFailure");
    let mut named: Vec<&str> = failure
        .violations
        .iter()
        .map(|v| {
            assert_eq!(v.r#type, "DESCRIPTOR_CONFLICT");
            assert_eq!(v.subject, "tool:t");
            v.description.split(':').next().unwrap_or_default()
        })
        .collect();
    named.sort_unstable();
    assert_eq!(
        named,
        [
            "description",
            "idempotent",
            "input_schema_json",
            "rate_limit"
        ]
    );

    // Another version is no conflict: it serves beside this one.
    registration
        .announce(announce("v2", descriptor("2.0.0", r#"{"type":"object"}"#)))
        .await
        .unwrap();
    // A version that is not semver is refused by its field.
    let status = registration
        .announce(announce("v", descriptor("2", r#"{"type":"object"}"#)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(
        status
            .get_error_details()
            .bad_request()
            .unwrap()
            .field_violations[0]
            .field,
        "tools[0].version"
    );

    let status = registration
        .announce(announce("c", descriptor("1.0.0", r#"{"type":"nonsense"}"#)))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let details = status.get_error_details();
    assert_eq!(
        details.bad_request().unwrap().field_violations[0].field,
        "tools[0].input_schema_json"
    );

    let status = registration
        .announce(announce(
            "d",
            descriptor("1.0.0", r##"{"$ref":"https://example.invalid/s.json#"}"##),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        Code::InvalidArgument,
        "remote refs are refused, not fetched"
    );

    let mut bad_name = descriptor("1.0.0", "");
    bad_name.name = "no spaces allowed".into();
    let status = registration
        .announce(announce("e", bad_name))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    let t = registry
        .client()
        .await
        .get_tool(pb::GetToolRequest {
            name: "t@1.0.0".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let t = t.into_inner();
    assert_eq!(t.instances, 2, "refused announces change nothing");
    assert_eq!(t.versions, ["2.0.0", "1.0.0"]);
    assert_eq!(t.descriptor.unwrap().version, "1.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_reflection_are_served() {
    let registry = TestRegistry::start(Config::default()).await;
    let channel = tonic::transport::Channel::from_shared(registry.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let response = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "toolmesh.v1.ToolRegistry".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        response.status(),
        tonic_health::pb::health_check_response::ServingStatus::Serving
    );

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut reflection = ServerReflectionClient::new(channel);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::once(request))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "toolmesh.v1.ToolRegistry",
        "toolmesh.v1.Registration",
        "grpc.health.v1.Health",
    ] {
        assert!(names.contains(&expected), "{names:?}");
    }
}
