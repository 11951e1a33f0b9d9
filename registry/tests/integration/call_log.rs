//! The registry binary's log, as an operator reads it from a file: one
//! `info` line per call (text or JSON), no colour codes, lease ids never
//! written out.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, atomic::AtomicUsize},
    time::Duration,
};

use tonic::transport::Channel;
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};
use toolmesh_registry::catalog::lease_tag;

use toolmesh_test_support::{process::binary, registry_process::*};

use crate::common::*;

/// One call line's fields, from text or JSON, quotes removed.
type Fields = BTreeMap<String, String>;

/// The call lines in `log`, in order.
fn call_lines(log: &str) -> Vec<Fields> {
    log.lines().filter_map(call_fields).collect()
}

fn call_fields(line: &str) -> Option<Fields> {
    if let Ok(serde_json::Value::Object(json)) = serde_json::from_str(line) {
        if json.get("target")? != "toolmesh_registry::call_log" {
            return None;
        }
        assert_eq!(json["level"], "INFO", "{line}");
        assert_eq!(json["message"], "call", "{line}");
        return Some(
            json.into_iter()
                .filter(|(key, _)| {
                    !["timestamp", "level", "target", "message", "spans"].contains(&key.as_str())
                })
                .map(|(key, value)| match value {
                    serde_json::Value::String(text) => (key, text),
                    other => (key, other.to_string()),
                })
                .collect(),
        );
    }
    let (head, fields) = line.split_once(" toolmesh_registry::call_log: call ")?;
    let head: Vec<&str> = head.split_whitespace().collect();
    assert_eq!(
        head.get(1..),
        Some(&["INFO"][..]),
        "at info, no span: {line}"
    );
    Some(
        fields
            .split(' ')
            .map(|pair| {
                let (key, value) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{pair:?} in {line}"));
                (key.to_owned(), value.trim_matches('"').to_owned())
            })
            .collect(),
    )
}

/// A sidecar serving `add`, `limited` (one call per 10 s) and `sleep`
/// to the registry at `addr`.
async fn sidecar(addr: SocketAddr) -> (TestSidecar, ToolRegistryClient<Channel>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = vec![
        add_tool(calls.clone()),
        adder("limited", calls).rate_limit(0.1, 1).build(),
        sleep_tool(Duration::from_secs(10)),
    ];
    let sidecar = TestSidecar::start(&format!("http://{addr}"), "s1", tools).await;
    let client = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    for tool in ["add", "limited", "sleep"] {
        catalog::wait_for_instances(&client, tool, 1, Duration::from_secs(20)).await;
    }
    (sidecar, client)
}

/// Makes one call of each kind; returns the fields each should log, in
/// order (latency aside).
async fn make_calls(client: &mut ToolRegistryClient<Channel>) -> Vec<Fields> {
    let fields =
        |tool: &str, outcome: &str, instance: Option<&str>, attempts: u32, replayed: bool| {
            let mut fields = Fields::new();
            fields.insert("tool".into(), tool.into());
            fields.insert("outcome".into(), outcome.into());
            if let Some(instance) = instance {
                fields.insert("instance".into(), instance.into());
            }
            fields.insert("attempts".into(), attempts.to_string());
            if replayed {
                fields.insert("replayed".into(), "true".into());
            }
            fields
        };
    let mut expected = Vec::new();

    client
        .invoke(invoke("add", r#"{"a": 2, "b": 40}"#))
        .await
        .expect("add");
    expected.push(fields("add", "ok", Some("s1"), 1, false));

    let response = client
        .invoke(invoke("add", r#"{"a": 13, "b": 1}"#))
        .await
        .expect("add");
    assert!(response.into_inner().is_error);
    expected.push(fields("add", "tool_error", Some("s1"), 1, false));

    client
        .invoke(invoke("add", r#"{"a": "SECRET-ARGUMENT"}"#))
        .await
        .expect_err("invalid");
    expected.push(fields("add", "invalid_argument", None, 0, false));

    client
        .invoke(invoke("nope", "{}"))
        .await
        .expect_err("unknown");
    expected.push(fields("nope", "not_found", None, 0, false));

    client
        .invoke(invoke("limited", r#"{"a": 1, "b": 1}"#))
        .await
        .expect("first");
    expected.push(fields("limited", "ok", Some("s1"), 1, false));
    client
        .invoke(invoke("limited", r#"{"a": 1, "b": 1}"#))
        .await
        .expect_err("limited");
    expected.push(fields("limited", "resource_exhausted", None, 0, false));

    for replayed in [false, true] {
        client
            .invoke(keyed("add", r#"{"a": 700000000, "b": 1234567}"#, "k1"))
            .await
            .expect("keyed");
        expected.push(fields("add", "ok", Some("s1"), 1, replayed));
    }

    // An agent that gives up: the registry sees the call cancelled.
    let abandoned = tokio::time::timeout(
        Duration::from_millis(300),
        client.invoke(invoke("sleep", r#"{"millis": 5000}"#)),
    )
    .await;
    assert!(abandoned.is_err(), "the call should still be running");
    expected.push(fields("sleep", "cancelled", None, 0, false));

    expected
}

/// Waits until `process` logged `count` call lines.
async fn wait_for_calls(process: &RegistryProcess, count: usize) {
    wait_until(
        Duration::from_secs(10),
        &format!("{count} call lines"),
        || call_lines(&process.log()).len() >= count,
    )
    .await;
}

fn check_lines(log: &str, expected: &[Fields]) {
    let mut lines = call_lines(log);
    assert_eq!(lines.len(), expected.len(), "one line per call:\n{log}");
    for (line, expected) in lines.iter_mut().zip(expected) {
        let latency = line
            .remove("latency_ms")
            .unwrap_or_else(|| panic!("no latency: {line:?}"));
        let latency: f64 = latency
            .parse()
            .unwrap_or_else(|_| panic!("latency {latency:?}"));
        assert!((0.0..60_000.0).contains(&latency), "{latency}");
        assert_eq!(line, expected, "\n{log}");
    }
    for secret in ["SECRET", "sum", "unlucky", "700000000"] {
        assert!(
            !log.contains(secret),
            "{secret:?} (an argument or a result) logged:\n{log}"
        );
    }
}

async fn logs_every_call(format: &str) -> Option<String> {
    let binary = binary("toolmesh-registry")?;
    let (process, addr) = RegistryProcess::start(
        &binary,
        &["--listen", "127.0.0.1:0", "--log-format", format],
        &[],
    )
    .await;
    let (_sidecar, mut client) = sidecar(addr).await;
    let expected = make_calls(&mut client).await;
    wait_for_calls(&process, expected.len()).await;
    let log = process.log();
    check_lines(&log, &expected);
    assert!(!log.contains('\u{1b}'), "colour codes in a file:\n{log}");
    Some(log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_logs_one_text_line_at_info() {
    logs_every_call("text").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_logs_one_json_line_at_info() {
    let Some(log) = logs_every_call("json").await else {
        return;
    };
    for line in log.lines() {
        let json: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: not a JSON line: {line:?}"));
        assert!(
            json["timestamp"].is_string() && json["level"].is_string(),
            "{line}"
        );
    }
}

/// With traces exported, a call's text line names its trace once: the
/// line's own `trace_id`, not that and the formatter's ` trace_id=…
/// span_id=…` of the span around it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traced_call_line_names_its_trace_once() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let collector = toolmesh_test_support::otlp::Collector::start().await;
    let endpoint = collector.http_endpoint();
    let (process, addr) = RegistryProcess::start(
        &binary,
        &["--listen", "127.0.0.1:0", "--log-format", "text"],
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
    )
    .await;
    let (_sidecar, mut client) = sidecar(addr).await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(invoke("add", r#"{"a": 2, "b": 40}"#));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{trace}-00f067aa0ba902b7-01")
            .parse()
            .expect("ascii"),
    );
    client.invoke(request).await.expect("add");
    wait_for_calls(&process, 1).await;
    let log = process.log();
    let line = log
        .lines()
        .find(|line| line.contains(" toolmesh_registry::call_log: call "))
        .unwrap_or_else(|| panic!("no call line:\n{log}"));
    assert_eq!(line.matches("trace_id=").count(), 1, "{line}");
    assert!(line.ends_with(&format!(" trace_id=\"{trace}\"")), "{line}");
    assert!(!line.contains("span_id="), "{line}");
    let announced = log
        .lines()
        .find(|line| line.contains(" announced "))
        .unwrap_or_else(|| panic!("no announce line:\n{log}"));
    assert!(
        announced.contains(" trace_id=") && announced.contains(" span_id="),
        "a line inside a span names its trace and its span: {announced}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_lines_turn_off_with_a_flag() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let (process, addr) = RegistryProcess::start(
        &binary,
        &["--listen", "127.0.0.1:0", "--log-calls", "false"],
        &[],
    )
    .await;
    let (_sidecar, mut client) = sidecar(addr).await;
    client
        .invoke(invoke("add", r#"{"a": 2, "b": 40}"#))
        .await
        .expect("add");
    client
        .invoke(invoke("nope", "{}"))
        .await
        .expect_err("unknown");
    let log = process.log();
    assert!(log.contains("announced"), "other info lines stay:\n{log}");
    assert_eq!(call_lines(&log), Vec::<Fields>::new(), "\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_logged_by_tag_never_by_id() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    leases_logged(&binary, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_in_redis_are_logged_by_tag_never_by_id() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let Some(redis) = RedisServer::start() else {
        return;
    };
    leases_logged(&binary, &["--redis", &redis.url()]).await;
}

/// Announce, withdraw and expiry each log one `info` line naming the lease
/// by its tag, and the lease id appears nowhere.
async fn leases_logged(binary: &std::path::Path, extra: &[&str]) {
    let args = [&["--listen", "127.0.0.1:0", "--lease-ttl", "1s"][..], extra].concat();
    let (process, addr) = RegistryProcess::start(binary, &args, &[]).await;
    let mut registration = RegistrationClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    let announce = |instance: &str| pb::AnnounceRequest {
        instance_id: instance.into(),
        endpoint: "http://127.0.0.1:9".into(),
        tools: vec![pb::ToolDescriptor {
            name: format!("{instance}_tool"),
            description: "Never called".into(),
            ..Default::default()
        }],
        execute_key: Vec::new(),
    };
    let withdrawn = registration
        .announce(announce("withdrawn"))
        .await
        .expect("announce")
        .into_inner()
        .lease_id;
    registration
        .withdraw(pb::WithdrawRequest {
            lease_id: withdrawn.clone(),
        })
        .await
        .expect("withdraw");
    let expired = registration
        .announce(announce("expired"))
        .await
        .expect("announce")
        .into_inner()
        .lease_id;
    wait_until(Duration::from_secs(10), "the lease to expire", || {
        process.log().contains("lease expired")
    })
    .await;

    let log = process.log();
    for (lease, event) in [(&withdrawn, "lease withdrawn"), (&expired, "lease expired")] {
        assert!(
            !log.contains(lease.as_str()),
            "lease id {lease} logged:\n{log}"
        );
        let tag = format!("lease={}", lease_tag(lease));
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&tag)).collect();
        assert_eq!(lines.len(), 2, "announce and {event} name {tag}:\n{log}");
        assert!(
            lines[0].contains(" INFO ") && lines[0].contains("announced"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].contains(" INFO ") && lines[1].contains(event),
            "{}",
            lines[1]
        );
    }
}
