//! One trace from the agent to the tool: the real registry and sidecar
//! binaries export their spans to an OTLP receiver on loopback (the
//! registry over gRPC, the sidecar over HTTP/protobuf), and an HTTP tool
//! records the `traceparent` it is sent. The agent's trace id is on every
//! span, each span's parent is the one before it, and the backend's parent
//! is the sidecar's HTTP client span. With tracing off everywhere, the
//! agent's context still reaches the tool unchanged.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, http::HeaderMap, routing::post};
use tonic::transport::Channel;
use toolmesh_proto::pb::{
    self, tasks_client::TasksClient, tool_registry_client::ToolRegistryClient,
};
use toolmesh_test_support::{
    otlp::{Collector, Span, waterfall},
    process::{self, SidecarProcess},
    registry_process::RegistryProcess,
};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const AGENT_SPAN: &str = "00f067aa0ba902b7";

/// The `traceparent` headers the backend received, in order.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// An HTTP tool on loopback: `{"fail": true}` answers 500 (a tool error),
/// anything else `{"ok": true}`.
async fn backend() -> (String, Seen) {
    let seen: Seen = Arc::default();
    let app = Router::new().route(
        "/tool",
        post({
            let seen = seen.clone();
            move |headers: HeaderMap, body: String| async move {
                let parent = headers
                    .get("traceparent")
                    .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                seen.lock().expect("not poisoned").push(parent);
                if body.contains("\"fail\":true") {
                    (
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        r#"{"error":"asked to"}"#,
                    )
                } else {
                    (axum::http::StatusCode::OK, r#"{"ok":true}"#)
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the backend");
    let url = format!("http://{}/tool", listener.local_addr().expect("bound"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, seen)
}

fn yaml(url: &str) -> String {
    format!(
        r#"
tools:
  - name: lookup
    description: an HTTP tool
    input_schema: {{type: object, properties: {{fail: {{type: boolean}}}}}}
    backend:
      http: {{url: "{url}"}}
  - name: env
    description: prints its TRACEPARENT
    backend:
      command: [sh, -c, 'cat >/dev/null; printf "\"%s\"" "$TRACEPARENT"']
"#
    )
}

struct Mesh {
    registry: RegistryProcess,
    /// Where the registry's gRPC listens.
    address: SocketAddr,
    _sidecar: SidecarProcess,
    agent: ToolRegistryClient<Channel>,
}

/// The registry logs JSON lines, its own debug lines included.
const REGISTRY_ARGS: [&str; 6] = [
    "--listen",
    "127.0.0.1:0",
    "--log-format",
    "json",
    "--log",
    "toolmesh_registry=debug,info",
];

async fn mesh(
    yaml: &str,
    registry_env: &[(&str, &str)],
    sidecar_env: &[(&str, &str)],
) -> Option<Mesh> {
    let registry_bin = process::binary("toolmesh-registry")?;
    let sidecar_bin = process::binary("toolmesh-sidecar")?;
    let (registry, addr): (RegistryProcess, SocketAddr) =
        RegistryProcess::start(&registry_bin, &REGISTRY_ARGS, registry_env).await;
    let mut sidecar = SidecarProcess::spawn(
        &sidecar_bin,
        yaml,
        &[
            "--registry",
            &format!("http://{addr}"),
            "--listen",
            "127.0.0.1:0",
            "--instance-id",
            "s1",
        ],
        sidecar_env,
    );
    sidecar.bound(Duration::from_secs(20)).await;
    let agent = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the registry");
    for tool in ["lookup", "env"] {
        toolmesh_test_support::catalog::wait_for_instances(
            &agent,
            tool,
            1,
            Duration::from_secs(20),
        )
        .await;
    }
    Some(Mesh {
        registry,
        address: addr,
        _sidecar: sidecar,
        agent,
    })
}

/// [`mesh`], the registry exporting its spans to `collector` over gRPC and
/// the sidecar (named `sidecar` by `OTEL_SERVICE_NAME`) over HTTP.
async fn exported_mesh(collector: &Collector, yaml: &str, sidecar: &str) -> Option<Mesh> {
    let (grpc, http) = (collector.grpc_endpoint(), collector.http_endpoint());
    mesh(
        yaml,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &grpc),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &http),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_BSP_SCHEDULE_DELAY", "50"),
            ("OTEL_SERVICE_NAME", sidecar),
        ],
    )
    .await
}

/// An Invoke carrying the agent's `traceparent`.
fn traced(
    tool: &str,
    arguments: &str,
    parent: &str,
) -> tonic::Request<toolmesh_proto::pb::InvokeRequest> {
    let mut request = tonic::Request::new(toolmesh_test_support::catalog::invoke(tool, arguments));
    request
        .metadata_mut()
        .insert("traceparent", parent.parse().expect("ascii"));
    request
        .metadata_mut()
        .insert("tracestate", "agent=1".parse().expect("ascii"));
    request
}

fn one<'a>(spans: &'a [Span], service: &str, name: &str) -> &'a Span {
    let found: Vec<&Span> = spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one {name:?} from {service}:\n{}",
        waterfall(spans)
    );
    found[0]
}

fn assert_child(child: &Span, parent: &Span, spans: &[Span]) {
    assert_eq!(
        child.parent_span_id,
        parent.span_id,
        "{} should be a child of {}:\n{}",
        child.name,
        parent.name,
        waterfall(spans)
    );
}

const SERVER: i32 = 2;
const CLIENT: i32 = 3;
const ERROR: i32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_from_the_agent_to_the_backend() {
    let collector = Collector::start().await;
    let (url, seen) = backend().await;
    let Some(mut mesh) = exported_mesh(&collector, &yaml(&url), "lookup-sidecar").await else {
        return;
    };

    let parent = format!("00-{TRACE_ID}-{AGENT_SPAN}-01");
    let answer = mesh
        .agent
        .invoke(traced("lookup", "{}", &parent))
        .await
        .expect("the call")
        .into_inner();
    assert!(!answer.is_error, "{}", answer.result_json);

    let spans = collector
        .trace(TRACE_ID, Duration::from_secs(30), |spans| {
            spans.len() >= 6 && spans.iter().any(|s| s.name == "POST")
        })
        .await;
    println!("{}", waterfall(&spans));

    let invoke = one(
        &spans,
        "toolmesh-registry",
        "toolmesh.v1.ToolRegistry/Invoke",
    );
    let execute_tool = one(&spans, "toolmesh-registry", "execute_tool lookup");
    let attempt = one(
        &spans,
        "toolmesh-registry",
        "toolmesh.v1.ToolRuntime/Execute",
    );
    let execute = one(&spans, "lookup-sidecar", "toolmesh.v1.ToolRuntime/Execute");
    let sidecar_tool = one(&spans, "lookup-sidecar", "execute_tool lookup");
    let post = one(&spans, "lookup-sidecar", "POST");

    assert_eq!(invoke.parent_span_id, AGENT_SPAN, "{}", waterfall(&spans));
    assert_child(execute_tool, invoke, &spans);
    assert_child(attempt, execute_tool, &spans);
    assert_child(execute, attempt, &spans);
    assert_child(sidecar_tool, execute, &spans);
    assert_child(post, sidecar_tool, &spans);

    let received = seen.lock().expect("not poisoned").clone();
    let backend_parent = received
        .first()
        .cloned()
        .flatten()
        .expect("the backend got a traceparent");
    assert_eq!(backend_parent, format!("00-{TRACE_ID}-{}-01", post.span_id));

    for (span, kind, method) in [
        (invoke, SERVER, "toolmesh.v1.ToolRegistry/Invoke"),
        (attempt, CLIENT, "toolmesh.v1.ToolRuntime/Execute"),
        (execute, SERVER, "toolmesh.v1.ToolRuntime/Execute"),
    ] {
        assert_eq!(span.kind, kind, "{span:?}");
        assert_eq!(span.attribute("rpc.system.name"), Some("grpc"), "{span:?}");
        assert_eq!(span.attribute("rpc.method"), Some(method), "{span:?}");
        assert_eq!(
            span.attribute("rpc.response.status_code"),
            Some("OK"),
            "{span:?}"
        );
        assert_eq!(span.attribute("rpc.status_code"), Some("OK"), "{span:?}");
    }
    assert_eq!(post.kind, CLIENT);
    assert_eq!(post.attribute("http.request.method"), Some("POST"));
    assert_eq!(post.attribute("http.response.status_code"), Some("200"));
    for span in [execute_tool, sidecar_tool] {
        assert_eq!(
            span.attribute("gen_ai.operation.name"),
            Some("execute_tool"),
            "{span:?}"
        );
        assert_eq!(
            span.attribute("gen_ai.tool.name"),
            Some("lookup"),
            "{span:?}"
        );
        assert_eq!(
            span.attribute("gen_ai.tool.call.id"),
            execute_tool.attribute("gen_ai.tool.call.id"),
            "the invocation id on both sides"
        );
        assert_eq!(span.attribute("error.type"), None, "{span:?}");
    }
    assert!(
        execute_tool
            .attribute("gen_ai.tool.call.id")
            .is_some_and(|id| id.len() == 36),
        "{execute_tool:?}"
    );
    assert_eq!(execute_tool.attribute("toolmesh.validation"), Some("valid"));
    assert_eq!(
        execute_tool.attribute("toolmesh.rate_limit"),
        Some("allowed")
    );
    assert_eq!(execute_tool.attribute("toolmesh.attempts"), Some("1"));
    assert_eq!(execute_tool.attribute("toolmesh.instance"), Some("s1"));
    assert_eq!(attempt.attribute("toolmesh.attempt"), Some("1"));
    assert_eq!(attempt.attribute("server.address"), Some("127.0.0.1"));
    // Arguments and results never reach a span.
    for span in &spans {
        for value in span.attributes.values() {
            assert!(!value.contains("\"ok\""), "a result in {span:?}");
        }
    }

    // A tool error: the call is OK at the RPC level, a `tool_error` in the
    // tool's spans.
    let failing_trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let answer = mesh
        .agent
        .invoke(traced(
            "lookup",
            r#"{"fail":true}"#,
            &format!("00-{failing_trace}-{AGENT_SPAN}-01"),
        ))
        .await
        .expect("the call")
        .into_inner();
    assert!(answer.is_error);
    let spans = collector
        .trace(failing_trace, Duration::from_secs(30), |spans| {
            spans.len() >= 6
        })
        .await;
    let invoke = one(
        &spans,
        "toolmesh-registry",
        "toolmesh.v1.ToolRegistry/Invoke",
    );
    assert_eq!(invoke.attribute("rpc.response.status_code"), Some("OK"));
    for service in ["toolmesh-registry", "lookup-sidecar"] {
        let tool = one(&spans, service, "execute_tool lookup");
        assert_eq!(tool.attribute("error.type"), Some("tool_error"), "{tool:?}");
        assert_eq!(tool.status, ERROR, "{tool:?}");
    }

    // Refused before any sidecar: the registry's spans say why.
    let invalid_trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    mesh.agent
        .invoke(traced(
            "lookup",
            r#"{"fail":"yes"}"#,
            &format!("00-{invalid_trace}-{AGENT_SPAN}-01"),
        ))
        .await
        .expect_err("invalid");
    let spans = collector
        .trace(invalid_trace, Duration::from_secs(30), |spans| {
            spans.len() >= 2
        })
        .await;
    let invoke = one(
        &spans,
        "toolmesh-registry",
        "toolmesh.v1.ToolRegistry/Invoke",
    );
    assert_eq!(
        invoke.attribute("rpc.response.status_code"),
        Some("INVALID_ARGUMENT")
    );
    assert_eq!(invoke.attribute("error.type"), Some("INVALID_ARGUMENT"));
    let tool = one(&spans, "toolmesh-registry", "execute_tool lookup");
    assert_eq!(tool.attribute("toolmesh.validation"), Some("invalid"));

    // Every log line written inside a span names its trace and span; each
    // call's line names its trace.
    let log = mesh.registry.log();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    let in_spans: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|line| line.get("spans").is_some())
        .collect();
    assert!(!in_spans.is_empty(), "no line logged inside a span:\n{log}");
    for line in &in_spans {
        let trace = line["trace_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no trace_id: {line}"));
        assert_eq!(trace.len(), 32, "{line}");
        assert_eq!(line["span_id"].as_str().map(str::len), Some(16), "{line}");
    }
    let call_traces: Vec<&str> = lines
        .iter()
        .filter(|line| line["message"] == "call")
        .filter_map(|line| line["trace_id"].as_str())
        .collect();
    assert_eq!(
        call_traces,
        [TRACE_ID, failing_trace, invalid_trace],
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tracing_off_the_agents_context_reaches_the_tool_unchanged() {
    let (url, seen) = backend().await;
    let Some(mut mesh) = mesh(&yaml(&url), &[], &[]).await else {
        return;
    };
    let parent = format!("00-{TRACE_ID}-{AGENT_SPAN}-01");
    let answer = mesh
        .agent
        .invoke(traced("env", "{}", &parent))
        .await
        .expect("the call")
        .into_inner();
    assert_eq!(answer.result_json, format!("\"{parent}\""));
    mesh.agent
        .invoke(traced("lookup", "{}", &parent))
        .await
        .expect("the call");
    assert_eq!(
        seen.lock().expect("not poisoned").clone(),
        vec![Some(parent)]
    );

    // The call line names the agent's trace even though nothing is exported.
    let log = mesh.registry.log();
    let call = log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["message"] == "call")
        .expect("a call line");
    assert_eq!(call["trace_id"], TRACE_ID, "{call}");

    // A malformed context is dropped, not passed on.
    let answer = mesh
        .agent
        .invoke(traced("env", "{}", "00-not-a-trace-01"))
        .await
        .expect("the call")
        .into_inner();
    assert_eq!(answer.result_json, "\"\"");
}

/// A call the sampler leaves out exports no span in either process, and
/// says so downstream: the agent's unsampled context reaches the tool
/// unchanged, and a call with no context gets a fresh one with the sampled
/// flag clear (so the sidecar does not start a trace of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsampled_call_exports_nothing_and_says_so_downstream() {
    let collector = Collector::start().await;
    let (url, seen) = backend().await;
    let endpoint = collector.grpc_endpoint();
    let otlp = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let mut registry_env = otlp.to_vec();
    registry_env.push(("OTEL_TRACES_SAMPLER", "parentbased_always_off"));
    let Some(mut mesh) = mesh(&yaml(&url), &registry_env, &otlp).await else {
        return;
    };

    let unsampled = format!("00-{TRACE_ID}-{AGENT_SPAN}-00");
    mesh.agent
        .invoke(traced("lookup", "{}", &unsampled))
        .await
        .expect("the call");
    mesh.agent
        .invoke(toolmesh_test_support::catalog::invoke("lookup", "{}"))
        .await
        .expect("the call");
    // A sampled call after them: once its spans are in, theirs would be.
    let sampled_trace = "7bf92f3577b34da6a3ce929d0e0e4736";
    mesh.agent
        .invoke(traced(
            "lookup",
            "{}",
            &format!("00-{sampled_trace}-{AGENT_SPAN}-01"),
        ))
        .await
        .expect("the call");
    collector
        .trace(sampled_trace, Duration::from_secs(30), |spans| {
            spans.iter().any(|s| s.name == "POST")
        })
        .await;

    let received: Vec<String> = seen
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|p| p.clone().expect("every call carries a traceparent"))
        .collect();
    assert_eq!(received[0], unsampled);
    assert!(received[1].ends_with("-00"), "{}", received[1]);
    assert_ne!(&received[1][3..35], TRACE_ID);
    let exported: Vec<Span> = collector.spans();
    for parent in &received[..2] {
        let trace = &parent[3..35];
        assert!(
            exported.iter().all(|s| s.trace_id != trace),
            "an unsampled call was exported:\n{}",
            waterfall(&exported)
        );
    }
}

/// The task reports the steps sidecar sent, as its client spans.
fn reports_sent(spans: &[Span]) -> Vec<&Span> {
    spans
        .iter()
        .filter(|s| s.service == "steps-sidecar" && s.name == "toolmesh.v1.Registration/ReportTask")
        .collect()
}

/// The registry's side of a report the sidecar sent.
fn report_taken<'a>(spans: &'a [Span], report: &Span) -> Option<&'a Span> {
    spans.iter().find(|s| {
        s.service == "toolmesh-registry"
            && s.name == "toolmesh.v1.Registration/ReportTask"
            && s.parent_span_id == report.span_id
    })
}

/// A tool that reports progress, then answers after a second.
const STEPS: &str = r#"  - name: steps
    description: reports progress, then answers
    timeout: 1s
    task_timeout: 30s
    backend:
      command: ["sh", "-c", "echo 'toolmesh-progress {\"fraction\": 0.5, \"message\": \"half\"}' >&2; sleep 1; echo '{\"done\": true}'"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_one_trace_from_its_start_through_its_progress_to_its_end() {
    let collector = Collector::start().await;
    let (url, _seen) = backend().await;
    let Some(mesh) = exported_mesh(
        &collector,
        &format!("{}{STEPS}", yaml(&url)),
        "steps-sidecar",
    )
    .await
    else {
        return;
    };
    toolmesh_test_support::catalog::wait_for_instances(
        &mesh.agent,
        "steps",
        1,
        Duration::from_secs(20),
    )
    .await;
    let address = mesh.address;
    let mut tasks = TasksClient::connect(format!("http://{address}"))
        .await
        .expect("connect");
    let parent = format!("00-{TRACE_ID}-{AGENT_SPAN}-01");
    let mut start = tonic::Request::new(pb::StartTaskRequest {
        call: Some(toolmesh_test_support::catalog::invoke("steps", "{}")),
    });
    start
        .metadata_mut()
        .insert("traceparent", parent.parse().expect("ascii"));
    let task = tasks.start_task(start).await.expect("started").into_inner();
    let mut watch = tasks
        .watch_task(pb::WatchTaskRequest { id: task.id })
        .await
        .expect("watch")
        .into_inner();
    let mut last = None;
    while let Some(seen) = watch.message().await.expect("the stream") {
        last = Some(seen);
    }
    let last = last.expect("the task's end");
    assert_eq!(last.state, pb::TaskState::Completed as i32, "{last:?}");

    // The two processes export on their own schedules: wait for both sides
    // of the whole task, the sidecar's end report and its registry side
    // included, not for whichever side arrives first.
    let complete = |spans: &[Span]| {
        let has = |service: &str, name: &str| {
            spans.iter().any(|s| s.service == service && s.name == name)
        };
        let sent = reports_sent(spans);
        has("steps-sidecar", "toolmesh.v1.ToolRuntime/RunTask")
            && has("steps-sidecar", "task")
            && sent.iter().any(|s| s.attribute("report") == Some("end"))
            && sent
                .iter()
                .all(|report| report_taken(spans, report).is_some())
    };
    let spans = collector
        .trace(TRACE_ID, Duration::from_secs(30), complete)
        .await;
    println!("{}", waterfall(&spans));

    let started = one(&spans, "toolmesh-registry", "toolmesh.v1.Tasks/StartTask");
    let run = one(&spans, "steps-sidecar", "toolmesh.v1.ToolRuntime/RunTask");
    let running = one(&spans, "steps-sidecar", "task");
    assert_eq!(started.parent_span_id, AGENT_SPAN, "{}", waterfall(&spans));
    assert_eq!(started.kind, SERVER);
    assert_child(run, started, &spans);
    assert_child(running, run, &spans);
    let sent = reports_sent(&spans);
    let reports: Vec<&str> = sent.iter().filter_map(|s| s.attribute("report")).collect();
    assert!(
        reports.contains(&"progress"),
        "{reports:?}\n{}",
        waterfall(&spans)
    );
    assert!(
        reports.contains(&"end"),
        "{reports:?}\n{}",
        waterfall(&spans)
    );
    for report in &sent {
        assert_eq!(report.kind, CLIENT);
        assert_child(report, running, &spans);
        let taken = report_taken(&spans, report)
            .unwrap_or_else(|| panic!("the registry's side of {report:?}\n{}", waterfall(&spans)));
        assert_eq!(taken.kind, SERVER);
        assert_eq!(taken.attribute("rpc.response.status_code"), Some("OK"));
    }
}
