//! The `toolmesh-sidecar` binary's admin port: `/metrics` counts what the
//! real registry sends it, `/readyz` follows the announce and the withdraw.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use nix::sys::signal::Signal;
use prometheus_parse::{Scrape, Value};
use tonic::Code;
use toolmesh_proto::pb;

use crate::common::{SidecarProcess, TestRegistry, binary, eventually, reserved_port, wait_until};

/// Short, so that heartbeats come every few hundred milliseconds.
const TTL: Duration = Duration::from_secs(1);
/// How long anything awaited may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// `echo` answers its arguments, `fails` is an error result, `slow`
/// outlives its 300 ms timeout.
const TOOLS: &str = r#"tools:
  - name: echo
    description: Echo
    backend: {command: [cat]}
  - name: fails
    description: Fails
    backend: {command: [sh, -c, 'echo boom >&2; exit 1']}
  - name: slow
    description: Too slow
    timeout: 300ms
    backend: {command: [sleep, '30']}
"#;

/// The address of the sidecar's `admin listening address=…` log line.
pub(crate) async fn admin_address(process: &SidecarProcess) -> SocketAddr {
    let find = || {
        process.log().lines().find_map(|line| {
            line.contains("admin listening")
                .then(|| {
                    line.split_whitespace()
                        .find_map(|w| w.strip_prefix("address="))
                })
                .flatten()
                .and_then(|addr| addr.parse().ok())
        })
    };
    wait_until(PATIENCE, "the admin port to be bound", || find().is_some()).await;
    find().unwrap()
}

/// `GET path` on the admin port: the status and the body.
pub(crate) async fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{admin}{path}")).await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// A scrape of `/metrics`, parsed.
struct Metrics(Scrape);

impl Metrics {
    async fn scrape(admin: SocketAddr) -> Self {
        let (status, body) = get(admin, "/metrics").await;
        assert_eq!(status, 200, "{body}");
        // OpenMetrics ends with `# EOF`, which prometheus-parse skips as a
        // comment.
        assert!(body.ends_with("# EOF\n"), "{body}");
        Self(Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap())
    }

    /// The value of the series `name{labels}` (exactly those labels), 0
    /// when it is not there. prometheus-parse reads OpenMetrics counters
    /// (`# TYPE x counter`, sample `x_total`) and histograms' `_count` as
    /// untyped samples: the value is the same.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let wanted: HashMap<&str, &str> = labels.iter().copied().collect();
        let found: Vec<f64> = self
            .0
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| {
                s.labels.len() == wanted.len()
                    && wanted.iter().all(|(k, v)| s.labels.get(k) == Some(v))
            })
            .map(|s| match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                ref other => panic!("{name}: not a single value: {other:?}"),
            })
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?}: {found:?}");
        found.first().copied().unwrap_or(0.0)
    }

    fn executions(&self, tool: &str, outcome: &str) -> f64 {
        let labels = [("tool", tool), ("outcome", outcome)];
        self.value("toolmesh_sidecar_executions_total", &labels)
    }

    /// The histogram's `_count`, and its `+Inf` bucket, which must agree.
    fn timed(&self, tool: &str, outcome: &str) -> f64 {
        let labels = [("tool", tool), ("outcome", outcome)];
        let count = self.value("toolmesh_sidecar_execute_duration_seconds_count", &labels);
        let inf = self
            .0
            .samples
            .iter()
            .filter(|s| s.metric == "toolmesh_sidecar_execute_duration_seconds")
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .find_map(|s| match &s.value {
                Value::Histogram(buckets) => buckets
                    .iter()
                    .find(|b| b.less_than.is_infinite())
                    .map(|b| b.count),
                _ => None,
            })
            .unwrap_or(0.0);
        assert_eq!(count, inf, "{tool} {outcome}: _count and le=+Inf differ");
        count
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_counts_every_execution_and_follows_the_lease() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let mut process = SidecarProcess::spawn(
        &bin,
        TOOLS,
        &[
            "--registry",
            &registry.url(),
            "--listen",
            "127.0.0.1:0",
            "--instance-id",
            "metered",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    let sidecar = process.bound(PATIENCE).await;
    let admin = admin_address(&process).await;
    assert_ne!(admin, sidecar);
    assert_eq!(get(admin, "/livez").await.0, 200);

    eventually(
        PATIENCE,
        "/readyz to say ready after the announce",
        || async { get(admin, "/readyz").await.0 == 200 },
    )
    .await;
    registry.wait_for_instances("echo", 1, PATIENCE).await;
    eventually(PATIENCE, "a heartbeat", || async {
        let metrics = Metrics::scrape(admin).await;
        metrics.value(
            "toolmesh_sidecar_heartbeats_total",
            &[("result", "accepted")],
        ) >= 1.0
    })
    .await;

    let before = Metrics::scrape(admin).await;
    assert_eq!(before.value("toolmesh_sidecar_registered", &[]), 1.0);
    assert!(
        before.value(
            "toolmesh_sidecar_announces_total",
            &[("result", "accepted")]
        ) >= 1.0
    );
    assert_eq!(
        before.value(
            "toolmesh_sidecar_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );

    let (ok, tool_errors, timeouts, unknown) = (5, 3, 2, 4);
    for n in 0..ok {
        let response = registry
            .invoke("echo", &format!(r#"{{"n": {n}}}"#))
            .await
            .unwrap();
        assert!(!response.is_error, "{response:?}");
    }
    for _ in 0..tool_errors {
        let response = registry.invoke("fails", "{}").await.unwrap();
        assert!(response.is_error, "{response:?}");
    }
    for _ in 0..timeouts {
        let status = registry.invoke("slow", "{}").await.unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    }
    // Calls that do not come from the registry are refused and counted:
    // ask the sidecar directly, without a grant.
    let mut direct =
        pb::tool_runtime_client::ToolRuntimeClient::connect(format!("http://{sidecar}"))
            .await
            .unwrap();
    for n in 0..unknown {
        let status = direct
            .execute(pb::ExecuteRequest {
                tool: format!("nope_{n}"),
                arguments_json: "{}".into(),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated);
    }

    let after = Metrics::scrape(admin).await;
    for (tool, outcome, count) in [
        ("echo", "ok", ok),
        ("fails", "tool_error", tool_errors),
        ("slow", "deadline_exceeded", timeouts),
        ("(unknown)", "unauthenticated", unknown),
    ] {
        let count = f64::from(count);
        assert_eq!(
            after.executions(tool, outcome) - before.executions(tool, outcome),
            count,
            "executions of {tool} with {outcome}"
        );
        assert_eq!(
            after.timed(tool, outcome) - before.timed(tool, outcome),
            count,
            "timed executions of {tool} with {outcome}"
        );
    }
    let total = |m: &Metrics| -> f64 {
        m.0.samples
            .iter()
            .filter(|s| s.metric == "toolmesh_sidecar_executions_total")
            .map(|s| match s.value {
                Value::Counter(v) | Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    assert_eq!(
        total(&after) - total(&before),
        f64::from(ok + tool_errors + timeouts + unknown),
        "nothing else was counted"
    );
    for tool in ["echo", "fails", "slow"] {
        assert_eq!(
            after.value("toolmesh_sidecar_in_flight", &[("tool", tool)]),
            0.0
        );
    }
    let body = get(admin, "/metrics").await.1;
    assert!(
        !body.contains("nope_"),
        "a caller's tool name became a label:\n{body}"
    );

    // Withdrawn (SIGUSR1), it still serves, and is no longer ready.
    process.signal(Signal::SIGUSR1);
    eventually(
        PATIENCE,
        "/readyz to say unready after the withdraw",
        || async { get(admin, "/readyz").await.0 == 503 },
    )
    .await;
    let (_, reason) = get(admin, "/readyz").await;
    assert!(reason.contains("withdr"), "{reason}");
    assert_eq!(get(admin, "/livez").await.0, 200);
    eventually(PATIENCE, "the lease to be released", || async {
        Metrics::scrape(admin)
            .await
            .value("toolmesh_sidecar_registered", &[])
            == 0.0
    })
    .await;

    process.signal(Signal::SIGTERM);
    let status = process.exited(PATIENCE).await;
    assert!(status.success(), "{status}\n{}", process.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_is_refused_on_the_grpc_address() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let listen = format!("127.0.0.1:{}", reserved_port());
    let mut process = SidecarProcess::spawn(
        &bin,
        TOOLS,
        &["--listen", &listen],
        &[("TOOLMESH_ADMIN_LISTEN", &listen)],
    );
    let status = process.exited(PATIENCE).await;
    assert_eq!(status.code(), Some(1), "{}", process.log());
    let log = process.log();
    assert!(
        log.contains(&format!(
            "error: TOOLMESH_ADMIN_LISTEN: {listen} is where ToolRuntime listens"
        )),
        "{log}"
    );
}
