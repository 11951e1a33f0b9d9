#![allow(clippy::unwrap_used)]

use std::time::Duration;

use async_trait::async_trait;
use pb::tool_runtime_server::ToolRuntime as _;
use toolmesh_proto::grant::{self, CallKey, Verifier};

use super::*;
use crate::context::CallContext;
use crate::runtime::RuntimeService;
use crate::tool::{Backend, BackendError, Outcome, Tool};

/// Answers `outcome` after `delay`.
struct After {
    delay: Duration,
    outcome: Outcome,
}

#[async_trait]
impl Backend for After {
    async fn call(
        &self,
        _args: &str,
        _context: &CallContext,
        _deadline: toolmesh_proto::deadline::Deadline,
    ) -> Result<Outcome, BackendError> {
        tokio::time::sleep(self.delay).await;
        Ok(self.outcome.clone())
    }
}

fn tool(name: &str, delay: Duration, outcome: Outcome) -> Tool {
    let descriptor = pb::ToolDescriptor {
        name: name.into(),
        timeout: Some(prost_types::Duration::try_from(Duration::from_secs(1)).unwrap()),
        ..Default::default()
    };
    Tool::new(descriptor, Arc::new(After { delay, outcome }))
}

/// `ok` (30 ms), `fails` (an error result), `hangs` (past its 1 s timeout).
fn service(metrics: &Metrics) -> Metered<RuntimeService> {
    let runtime = Arc::new(
        Runtime::new(vec![
            tool("ok", Duration::from_millis(30), Outcome::ok("1")),
            tool("fails", Duration::ZERO, Outcome::error("boom")),
            tool("hangs", Duration::from_secs(3600), Outcome::ok("1")),
        ])
        .unwrap(),
    );
    let grants = Verifier::new(key(), INSTANCE, grant::DEFAULT_MAX_AGE);
    Metered::new(
        RuntimeService::new(runtime.clone(), Arc::new(grants)),
        &runtime,
        metrics.clone(),
    )
}

const INSTANCE: &str = "metered";

fn key() -> CallKey {
    CallKey::from_bytes(&[3; grant::KEY_LEN]).unwrap()
}

/// A call of `tool`, signed as the registry signs it.
fn call(tool: &str) -> tonic::Request<pb::ExecuteRequest> {
    let mut request = tonic::Request::new(pb::ExecuteRequest {
        tool: tool.into(),
        arguments_json: "{}".into(),
        ..Default::default()
    });
    grant::sign(&key(), INSTANCE, &mut request);
    request
}

fn exposition(metrics: &Metrics) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics.registry()).unwrap();
    text
}

/// The value of the sample written exactly `series` (name and labels),
/// `None` when there is none.
fn value(metrics: &Metrics, series: &str) -> Option<f64> {
    exposition(metrics).lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().unwrap())
    })
}

#[tokio::test(start_paused = true)]
async fn executions_are_counted_and_timed_by_tool_and_outcome() {
    let metrics = Metrics::new();
    let service = service(&metrics);
    let executions = "toolmesh_sidecar_executions_total";
    let durations = "toolmesh_sidecar_execute_duration_seconds";
    // A served tool's `ok` series are there from the start, at zero.
    assert_eq!(
        value(
            &metrics,
            &format!(r#"{executions}{{tool="ok",outcome="ok"}}"#)
        ),
        Some(0.0)
    );
    for _ in 0..3 {
        service.execute(call("ok")).await.unwrap();
    }
    for _ in 0..2 {
        assert!(
            service
                .execute(call("fails"))
                .await
                .unwrap()
                .get_ref()
                .is_error
        );
    }
    let status = service.execute(call("hangs")).await.unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded);

    assert_eq!(
        value(
            &metrics,
            &format!(r#"{executions}{{tool="ok",outcome="ok"}}"#)
        ),
        Some(3.0)
    );
    assert_eq!(
        value(
            &metrics,
            &format!(r#"{executions}{{tool="fails",outcome="tool_error"}}"#)
        ),
        Some(2.0)
    );
    assert_eq!(
        value(
            &metrics,
            &format!(r#"{executions}{{tool="hangs",outcome="deadline_exceeded"}}"#)
        ),
        Some(1.0)
    );
    // Time is paused: each call to `ok` took exactly its 30 ms.
    for (le, count) in [("0.025", 0.0), ("0.05", 3.0), ("+Inf", 3.0)] {
        assert_eq!(
            value(
                &metrics,
                &format!(r#"{durations}_bucket{{le="{le}",tool="ok",outcome="ok"}}"#)
            ),
            Some(count),
            "le={le}"
        );
    }
    assert_eq!(
        value(
            &metrics,
            &format!(r#"{durations}_count{{tool="hangs",outcome="deadline_exceeded"}}"#)
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &metrics,
            &format!(r#"{durations}_sum{{tool="ok",outcome="ok"}}"#)
        )
        .map(|s| (s * 1000.0).round()),
        Some(90.0)
    );
}

#[tokio::test]
async fn an_unknown_name_is_counted_under_one_fixed_tool() {
    let metrics = Metrics::new();
    let service = service(&metrics);
    for name in ["nope", "other", "(unknown)"] {
        let status = service.execute(call(name)).await.unwrap_err();
        assert_eq!(status.code(), Code::NotFound);
    }
    assert_eq!(
        value(
            &metrics,
            r#"toolmesh_sidecar_executions_total{tool="(unknown)",outcome="not_found"}"#
        ),
        Some(3.0)
    );
    let text = exposition(&metrics);
    assert!(!text.contains("nope") && !text.contains("other"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn in_flight_counts_running_calls_and_an_abandoned_call_is_cancelled() {
    let metrics = Metrics::new();
    let service = Arc::new(service(&metrics));
    let in_flight = |tool: &str| {
        value(
            &metrics,
            &format!(r#"toolmesh_sidecar_in_flight{{tool="{tool}"}}"#),
        )
    };
    // Every served tool shows from the start.
    for tool in ["ok", "fails", "hangs"] {
        assert_eq!(in_flight(tool), Some(0.0), "{tool}");
    }
    let running = tokio::spawn({
        let service = service.clone();
        async move { service.execute(call("hangs")).await }
    });
    tokio::task::yield_now().await;
    assert_eq!(in_flight("hangs"), Some(1.0));

    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    assert_eq!(in_flight("hangs"), Some(0.0));
    assert_eq!(
        value(
            &metrics,
            r#"toolmesh_sidecar_executions_total{tool="hangs",outcome="cancelled"}"#
        ),
        Some(1.0)
    );
}

#[test]
fn announces_heartbeats_and_the_lease() {
    let metrics = Metrics::new();
    let registered = || value(&metrics, "toolmesh_sidecar_registered");
    assert_eq!(registered(), Some(0.0));

    metrics.announce_answered(Err(Code::Unavailable));
    assert_eq!(registered(), Some(0.0));
    metrics.announce_answered(Ok(()));
    assert_eq!(registered(), Some(1.0));
    metrics.heartbeat_answered(Ok(()));
    metrics.heartbeat_answered(Ok(()));
    metrics.heartbeat_answered(Err(Code::DeadlineExceeded));
    assert_eq!(
        registered(),
        Some(1.0),
        "a failed heartbeat keeps the lease"
    );
    metrics.heartbeat_answered(Err(Code::NotFound));
    assert_eq!(registered(), Some(0.0), "the registry forgot the lease");
    metrics.announce_answered(Ok(()));
    assert_eq!(registered(), Some(1.0));
    metrics.lease_released();
    assert_eq!(registered(), Some(0.0));

    for (series, expected) in [
        (
            r#"toolmesh_sidecar_announces_total{result="accepted"}"#,
            2.0,
        ),
        (
            r#"toolmesh_sidecar_announces_total{result="unavailable"}"#,
            1.0,
        ),
        (
            r#"toolmesh_sidecar_heartbeats_total{result="accepted"}"#,
            2.0,
        ),
        (
            r#"toolmesh_sidecar_heartbeats_total{result="deadline_exceeded"}"#,
            1.0,
        ),
        (
            r#"toolmesh_sidecar_heartbeats_total{result="not_found"}"#,
            1.0,
        ),
    ] {
        assert_eq!(value(&metrics, series), Some(expected), "{series}");
    }
}

#[tokio::test]
async fn names_and_types_follow_the_contract() {
    let metrics = Metrics::new();
    // A family shows once it has a series.
    service(&metrics).execute(call("fails")).await.unwrap();
    metrics.announce_answered(Ok(()));
    metrics.heartbeat_answered(Ok(()));
    let text = exposition(&metrics);
    for family in [
        "# TYPE toolmesh_sidecar_executions counter",
        "# TYPE toolmesh_sidecar_execute_duration_seconds histogram",
        "# TYPE toolmesh_sidecar_in_flight gauge",
        "# TYPE toolmesh_sidecar_announces counter",
        "# TYPE toolmesh_sidecar_heartbeats counter",
        "# TYPE toolmesh_sidecar_registered gauge",
        "# TYPE toolmesh_sidecar_build_info gauge",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    assert!(
        text.contains(&format!(
            r#"toolmesh_sidecar_build_info{{version="{}"}} 1"#,
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
}
