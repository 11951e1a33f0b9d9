//! The registry binary's admin port, scraped as Prometheus scrapes it:
//! every counter and histogram moves by exactly the calls made, tool labels
//! stop at `--metrics-max-tools`, readiness gates start-up and drain, and
//! every metric the Grafana dashboard queries is one the binaries export.

use std::{
    collections::{BTreeSet, HashMap},
    net::SocketAddr,
    path::Path,
    sync::{Arc, atomic::AtomicUsize},
    time::Duration,
};

use nix::sys::signal::Signal;
use tonic::{Code, Request, transport::Channel};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};
use toolmesh_test_support::{
    process::{self, SidecarProcess, binary},
    registry_process::RegistryProcess,
};

use crate::common::*;

const CALLER: &str = "metrics-caller-5150";
const KEY: &str = "metrics-test-key-9b1f2c";

/// The address in an `admin listening address=…` log line, text or JSON.
pub(crate) fn admin_address(log: &str) -> Option<SocketAddr> {
    log.lines().find_map(|line| {
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
            return (json["message"] == "admin listening")
                .then(|| json["address"].as_str()?.parse().ok())?;
        }
        if !line.contains(" admin listening ") {
            return None;
        }
        line.split_whitespace()
            .find_map(|word| word.strip_prefix("address="))
            .and_then(|addr| addr.parse().ok())
    })
}

/// `GET http://{admin}{path}`: status and body.
async fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(format!("http://{admin}{path}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {admin}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// One scrape, parsed whole.
struct Scrape {
    text: String,
    samples: Vec<prometheus_parse::Sample>,
}

impl Scrape {
    async fn of(admin: SocketAddr) -> Self {
        let (status, text) = get(admin, "/metrics").await;
        assert_eq!(status, 200, "{text}");
        assert!(
            text.ends_with("# EOF\n"),
            "OpenMetrics ends with # EOF:\n{text}"
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                matches!(
                    prometheus_parse::LineInfo::parse(line),
                    prometheus_parse::LineInfo::Sample { .. }
                ),
                "not a sample: {line:?}"
            );
        }
        // The parser skips `# EOF` (neither HELP nor TYPE nor a sample).
        let samples = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
            .unwrap()
            .samples;
        assert!(!samples.is_empty(), "{text}");
        Self { text, samples }
    }

    /// The sample `name` with exactly `labels`; 0 when absent. Counters
    /// (`_total`) and histograms' `_count` parse as untyped: the parser
    /// knows only the Prometheus format's names.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.metric == name && s.labels.len() == labels.len())
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => panic!("{name} is not a single value"),
            })
            .collect();
        assert!(found.len() <= 1, "{name} {labels:?} twice:\n{}", self.text);
        found.first().copied().unwrap_or(0.0)
    }

    /// Every value the label `label` takes on samples of `name`.
    fn label_values(&self, name: &str, label: &str) -> BTreeSet<String> {
        self.samples
            .iter()
            .filter(|s| s.metric == name)
            .filter_map(|s| s.labels.get(label).map(str::to_owned))
            .collect()
    }

    /// Every name a sample may have, from the `# TYPE` lines.
    fn exported_names(&self) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for line in self.text.lines() {
            let Some(rest) = line.strip_prefix("# TYPE ") else {
                continue;
            };
            let mut words = rest.split_whitespace();
            let (Some(name), Some(kind)) = (words.next(), words.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["", "_bucket", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
        }
        names
    }
}

/// Moves of (name, labels) between two scrapes.
fn delta(before: &Scrape, after: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    after.value(name, labels) - before.value(name, labels)
}

/// The registry binary with an admin port on loopback, and its address.
async fn registry(args: &[&str]) -> Option<(RegistryProcess, SocketAddr, SocketAddr)> {
    let binary = binary("toolmesh-registry")?;
    let mut all = vec!["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let (process, addr) = RegistryProcess::start(&binary, &all, &[]).await;
    let admin = admin_address(&process.log())
        .unwrap_or_else(|| panic!("no admin listening line:\n{}", process.log()));
    Some((process, addr, admin))
}

fn authed<T>(message: T) -> Request<T> {
    toolmesh_test_support::keys::bearer(message, KEY)
}

async fn call(
    client: &mut ToolRegistryClient<Channel>,
    tool: &str,
    arguments: &str,
) -> Result<pb::InvokeResponse, tonic::Status> {
    client
        .invoke(authed(invoke(tool, arguments)))
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_moves_its_counters_by_exactly_one() {
    let dir = tempfile::tempdir().unwrap();
    let keys = toolmesh_test_support::keys::api_keys_file(dir.path(), &[(CALLER, KEY, &[])]);
    let audit = dir.path().join("audit.jsonl");
    let Some((_registry, addr, admin)) = registry(&[
        "--api-keys-file",
        keys.to_str().unwrap(),
        "--audit-log",
        audit.to_str().unwrap(),
    ])
    .await
    else {
        return;
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = vec![
        add_tool(calls.clone()),
        adder("limited", calls).rate_limit(0.01, 2).build(),
    ];
    let _sidecar = TestSidecar::start(&format!("http://{addr}"), "s1", tools).await;
    let mut client = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    for tool in ["add", "limited"] {
        eventually(Duration::from_secs(20), "the tools are live", || {
            let mut client = client.clone();
            async move {
                client
                    .get_tool(authed(pb::GetToolRequest {
                        name: tool.into(),
                        ..Default::default()
                    }))
                    .await
                    .is_ok()
            }
        })
        .await;
    }

    let before = Scrape::of(admin).await;
    const OK: usize = 3;
    const TOOL_ERRORS: usize = 2;
    const SCHEMA: usize = 2;
    const MALFORMED: usize = 1;
    const LIMITED: usize = 3;
    for _ in 0..OK {
        assert!(
            !call(&mut client, "add", r#"{"a": 1, "b": 2}"#)
                .await
                .unwrap()
                .is_error
        );
    }
    for _ in 0..TOOL_ERRORS {
        assert!(
            call(&mut client, "add", r#"{"a": 13, "b": 1}"#)
                .await
                .unwrap()
                .is_error
        );
    }
    for _ in 0..SCHEMA {
        let status = call(&mut client, "add", r#"{"a": "two"}"#)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
    }
    for _ in 0..MALFORMED {
        let status = call(&mut client, "add", r#"{"a": 1,"#).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
    }
    for _ in 0..2 {
        call(&mut client, "limited", r#"{"a": 1, "b": 1}"#)
            .await
            .unwrap();
    }
    for _ in 0..LIMITED {
        let status = call(&mut client, "limited", r#"{"a": 1, "b": 1}"#)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::ResourceExhausted);
    }
    let status = call(&mut client, "made-up-tool", "{}").await.unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let after = Scrape::of(admin).await;

    let n = |count: usize| f64::from(u32::try_from(count).unwrap());
    for (tool, outcome, count) in [
        ("add", "ok", OK),
        ("add", "tool_error", TOOL_ERRORS),
        ("add", "invalid_argument", SCHEMA + MALFORMED),
        ("limited", "ok", 2),
        ("limited", "resource_exhausted", LIMITED),
    ] {
        let labels = [("tool", tool), ("outcome", outcome)];
        for name in [
            "toolmesh_invocations_total",
            "toolmesh_invoke_duration_seconds_count",
        ] {
            assert_eq!(
                delta(&before, &after, name, &labels),
                n(count),
                "{name} {labels:?}:\n{}",
                after.text
            );
        }
    }
    for (tool, outcome, count) in [
        ("add", "ok", OK),
        ("add", "tool_error", TOOL_ERRORS),
        ("add", "invalid_argument", 0),
        ("limited", "ok", 2),
        ("limited", "resource_exhausted", 0),
    ] {
        let labels = [("tool", tool), ("outcome", outcome)];
        let name = "toolmesh_attempt_duration_seconds_count";
        assert_eq!(
            delta(&before, &after, name, &labels),
            n(count),
            "{name} {labels:?}"
        );
    }
    for (labels, count) in [
        ([("tool", "add"), ("reason", "schema")], SCHEMA),
        ([("tool", "add"), ("reason", "malformed")], MALFORMED),
    ] {
        let name = "toolmesh_validation_failures_total";
        assert_eq!(
            delta(&before, &after, name, &labels),
            n(count),
            "{labels:?}"
        );
    }
    for (labels, count) in [
        ([("tool", "limited"), ("decision", "allowed")], 2),
        ([("tool", "limited"), ("decision", "limited_tool")], LIMITED),
        ([("tool", "limited"), ("decision", "limited_caller")], 0),
    ] {
        let name = "toolmesh_rate_limit_decisions_total";
        assert_eq!(
            delta(&before, &after, name, &labels),
            n(count),
            "{labels:?}"
        );
    }
    let other = [("tool", "(other)"), ("outcome", "not_found")];
    assert_eq!(
        delta(&before, &after, "toolmesh_invocations_total", &other),
        1.0,
        "an unknown tool takes no label value of its own"
    );
    assert_eq!(
        after.label_values("toolmesh_invocations_total", "tool"),
        BTreeSet::from(["add".to_owned(), "limited".to_owned(), "(other)".to_owned()])
    );
    assert_eq!(
        after.label_values("toolmesh_rate_limit_decisions_total", "tool"),
        BTreeSet::from(["limited".to_owned()]),
        "no limit, no decision"
    );

    for (name, value) in [
        ("toolmesh_tools", 2.0),
        ("toolmesh_instances", 1.0),
        ("toolmesh_leases", 1.0),
        ("toolmesh_ready", 1.0),
        ("toolmesh_redis_circuit_open", 0.0),
        ("toolmesh_audit_records_dropped_total", 0.0),
    ] {
        assert_eq!(after.value(name, &[]), value, "{name}:\n{}", after.text);
    }
    assert_eq!(
        after.value(
            "toolmesh_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert!(after.value("toolmesh_announces_total", &[("result", "accepted")]) >= 1.0);
    for secret in [CALLER, KEY] {
        assert!(
            !after.text.contains(secret),
            "{secret} in the exposition:\n{}",
            after.text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_past_the_cap_are_counted_as_other() {
    // JSON log lines: the admin address is found in those too.
    let Some((_registry, addr, admin)) =
        registry(&["--metrics-max-tools", "2", "--log-format", "json"]).await
    else {
        return;
    };
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = ["t1", "t2", "t3"]
        .into_iter()
        .map(|name| adder(name, calls.clone()).build())
        .collect();
    let _sidecar = TestSidecar::start(&format!("http://{addr}"), "s1", tools).await;
    let mut client = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    for tool in ["t1", "t2", "t3"] {
        catalog::wait_for_instances(&client, tool, 1, Duration::from_secs(20)).await;
    }
    for tool in ["t1", "t2", "t3", "t3"] {
        client
            .invoke(invoke(tool, r#"{"a": 1, "b": 2}"#))
            .await
            .unwrap();
    }
    let scrape = Scrape::of(admin).await;
    let name = "toolmesh_invocations_total";
    assert_eq!(
        scrape.label_values(name, "tool"),
        BTreeSet::from(["t1".to_owned(), "t2".to_owned(), "(other)".to_owned()]),
        "{}",
        scrape.text
    );
    for (tool, count) in [("t1", 1.0), ("t2", 1.0), ("(other)", 2.0)] {
        assert_eq!(
            scrape.value(name, &[("tool", tool), ("outcome", "ok")]),
            count
        );
    }
}

async fn health(addr: SocketAddr, service: &str) -> ServingStatus {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut client = HealthClient::new(channel);
    client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status()
}

/// gRPC health of the server and both services, and `/readyz`, all agree
/// on `serving`; `/livez` answers 200 whatever they say.
async fn check_ready(addr: SocketAddr, admin: SocketAddr, serving: bool) -> bool {
    let expected = if serving {
        ServingStatus::Serving
    } else {
        ServingStatus::NotServing
    };
    for service in ["", "toolmesh.v1.ToolRegistry", "toolmesh.v1.Registration"] {
        if health(addr, service).await != expected {
            return false;
        }
    }
    let (readyz, body) = get(admin, "/readyz").await;
    assert_eq!(get(admin, "/livez").await.0, 200);
    let gauge = Scrape::of(admin).await.value("toolmesh_ready", &[]);
    readyz == if serving { 200 } else { 503 }
        && gauge == if serving { 1.0 } else { 0.0 }
        && (serving || body.starts_with("not ready: "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_once_redis_answered_and_not_while_draining() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    redis.kill();
    let url = redis.url();
    let Some((registry, addr, admin)) =
        registry(&["--redis", &url, "--shutdown-delay", "3s"]).await
    else {
        return;
    };
    assert!(check_ready(addr, admin, false).await, "ready with no Redis");
    let (_, reason) = get(admin, "/readyz").await;
    assert!(reason.contains("redis"), "{reason}");
    stays(
        Duration::from_millis(500),
        "not ready without Redis",
        || check_ready(addr, admin, false),
    )
    .await;

    redis.restart();
    eventually(Duration::from_secs(10), "ready once Redis answers", || {
        check_ready(addr, admin, true)
    })
    .await;

    process::send(registry.pid(), Signal::SIGTERM);
    eventually(Duration::from_secs(2), "not ready while draining", || {
        check_ready(addr, admin, false)
    })
    .await;
    let (_, reason) = get(admin, "/readyz").await;
    assert!(reason.contains("draining"), "{reason}");
    wait_until(Duration::from_secs(10), "the registry exits", || {
        process::is_dead(registry.pid())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_port_cannot_be_the_grpc_port() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let port = reserved_port().to_string();
    let addr = format!("127.0.0.1:{port}");
    let finished = toolmesh_test_support::registry_process::run_to_exit(
        &binary,
        &["--listen", &addr, "--admin-listen", &addr],
        &[],
    )
    .await;
    assert!(!finished.status.success());
    assert!(
        finished
            .stderr
            .contains(&format!("--admin-listen {addr} is the --listen address")),
        "{}",
        finished.stderr
    );
}

/// Every metric name a PromQL expression reads: identifiers that are not
/// functions, keywords, label names or Grafana variables.
fn promql_metrics(expr: &str) -> BTreeSet<String> {
    // Aggregations too: `sum by (tool) (...)` puts a grouping before the
    // parenthesis.
    const KEYWORDS: [&str; 25] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "offset",
        "and",
        "or",
        "unless",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
    ];
    const LABEL_LISTS: [&str; 6] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_until = |from: usize, close: char| {
        let mut j = from;
        let mut quote = None;
        while j < chars.len() {
            match (quote, chars[j]) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), '\\') => j += 1,
                (Some(_), _) => {}
                (None, c @ ('"' | '\'' | '`')) => quote = Some(c),
                (None, c) if c == close => return j + 1,
                _ => {}
            }
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => {
                i = skip_until(i + 1, c);
            }
            '{' => i = skip_until(i + 1, '}'),
            '[' => i = skip_until(i + 1, ']'),
            '$' => {
                i += 1;
                if chars.get(i) == Some(&'{') {
                    i = skip_until(i + 1, '}');
                } else {
                    while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                        i += 1;
                    }
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                while i < chars.len() && (chars[i].is_alphanumeric() || ".+-".contains(chars[i])) {
                    let exponent_sign = ".+-".contains(chars[i])
                        && !matches!(chars.get(i.wrapping_sub(1)), Some('e' | 'E'))
                        && chars[i] != '.';
                    if exponent_sign {
                        break;
                    }
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let called = chars.get(next) == Some(&'(');
                if LABEL_LISTS.contains(&word.as_str()) && called {
                    i = skip_until(next + 1, ')');
                } else if !called && !KEYWORDS.contains(&word.as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The metric a Grafana template query reads: `label_values(metric,
/// label)` or a plain expression; `label_values(label)` reads none.
fn template_metrics(query: &str) -> BTreeSet<String> {
    let query = query.trim();
    if let Some(args) = query
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let mut depth = 0;
        let split = args.char_indices().rev().find(|&(_, c)| {
            match c {
                '{' | '(' => depth += 1,
                '}' | ')' => depth -= 1,
                _ => {}
            }
            c == ',' && depth == 0
        });
        return match split {
            Some((at, _)) => promql_metrics(&args[..at]),
            None => BTreeSet::new(),
        };
    }
    if query.starts_with("label_names(") || query.starts_with("metrics(") {
        return BTreeSet::new();
    }
    promql_metrics(query.strip_prefix("query_result(").unwrap_or(query))
}

/// Every query in a Grafana dashboard: panels' (and rows' nested panels')
/// targets' `expr`, and the template variables' queries.
fn dashboard_queries(dashboard: &serde_json::Value) -> (Vec<String>, Vec<String>) {
    fn walk(value: &serde_json::Value, exprs: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (key, value) in map {
                    match (key.as_str(), value) {
                        ("expr", serde_json::Value::String(expr)) => exprs.push(expr.clone()),
                        ("templating", _) => {}
                        _ => walk(value, exprs),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| walk(v, exprs)),
            _ => {}
        }
    }
    let mut exprs = Vec::new();
    walk(dashboard, &mut exprs);
    let mut templates = Vec::new();
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "query")
    {
        match &variable["query"] {
            serde_json::Value::String(query) => templates.push(query.clone()),
            serde_json::Value::Object(query) => {
                if let Some(query) = query.get("query").and_then(|q| q.as_str()) {
                    templates.push(query.to_owned());
                }
            }
            _ => {}
        }
    }
    (exprs, templates)
}

#[test]
fn promql_names_are_found_and_nothing_else() {
    let expr = r#"histogram_quantile(0.99, sum by (le, tool) (rate(toolmesh_invoke_duration_seconds_bucket{tool=~"$tool", outcome!="OK"}[$__rate_interval]))) / on(tool) group_left(x) max without (instance) (toolmesh_tools) > bool 1e3 or vector(0) and up offset 5m"#;
    assert_eq!(
        promql_metrics(expr),
        BTreeSet::from([
            "toolmesh_invoke_duration_seconds_bucket".to_owned(),
            "toolmesh_tools".to_owned(),
            "up".to_owned(),
        ])
    );
    assert_eq!(
        template_metrics(r#"label_values(toolmesh_invocations_total{job="x"}, tool)"#),
        BTreeSet::from(["toolmesh_invocations_total".to_owned()])
    );
    assert!(template_metrics("label_values(tool)").is_empty());
}

/// The sidecar binary serving one command tool, with its admin port.
async fn sidecar_admin(registry: SocketAddr) -> Option<(SidecarProcess, SocketAddr)> {
    let binary = binary("toolmesh-sidecar")?;
    let yaml =
        "tools:\n  - name: echo\n    description: Echo\n    backend:\n      command: [\"cat\"]\n";
    let mut sidecar = SidecarProcess::spawn(
        &binary,
        yaml,
        &[
            "--registry",
            &format!("http://{registry}"),
            "--listen",
            "127.0.0.1:0",
            "--instance-id",
            "s1",
            "--admin-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    sidecar.bound(Duration::from_secs(20)).await;
    let mut admin = None;
    wait_until(
        Duration::from_secs(10),
        "the sidecar's admin listening line",
        || {
            admin = admin_address(&sidecar.log());
            admin.is_some()
        },
    )
    .await;
    admin.map(|admin| (sidecar, admin))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_reads_only_exported_metrics() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/toolmesh/dashboards/toolmesh.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the Grafana dashboard {} cannot be read ({e}): the chart must ship it",
            path.display()
        )
    });
    let dashboard: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let (exprs, templates) = dashboard_queries(&dashboard);
    assert!(!exprs.is_empty(), "{} has no panel queries", path.display());
    let mut used: HashMap<String, String> = HashMap::new();
    for expr in &exprs {
        for name in promql_metrics(expr) {
            used.entry(name).or_insert_with(|| expr.clone());
        }
    }
    for query in &templates {
        for name in template_metrics(query) {
            used.entry(name).or_insert_with(|| query.clone());
        }
    }

    let Some((_registry, addr, admin)) = registry(&[]).await else {
        return;
    };
    let Some((_sidecar, sidecar_admin)) = sidecar_admin(addr).await else {
        return;
    };
    let mut exported = Scrape::of(admin).await.exported_names();
    exported.extend(Scrape::of(sidecar_admin).await.exported_names());
    let mut missing: Vec<String> = used
        .iter()
        .filter(|(name, _)| !exported.contains(*name))
        .map(|(name, query)| format!("{name} (in {query:?})"))
        .collect();
    missing.sort();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics neither binary exports:\n  {}\nexported: {exported:?}",
        missing.join("\n  ")
    );
}

/// A result that breaks its tool's output schema never reaches the agent as
/// if it were valid: it gets an error result naming each mismatch at its
/// field, and the registry counts it. A conforming result passes untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_that_breaks_its_output_schema_is_withheld_and_counted() {
    let Some((_registry, addr, admin)) = registry(&[]).await else {
        return;
    };
    let tools = command_tools(
        r#"
tools:
  - name: shaped
    description: Answers with its arguments; a result needs a whole number n
    output_schema: {type: object, properties: {n: {type: integer}}, required: [n]}
    backend: {command: [cat]}
"#,
    );
    let _sidecar = TestSidecar::start(&format!("http://{addr}"), "shaper", tools).await;
    let mut client = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    eventually(Duration::from_secs(20), "the tool is live", || {
        let mut client = client.clone();
        async move {
            client
                .get_tool(pb::GetToolRequest {
                    name: "shaped".into(),
                    ..Default::default()
                })
                .await
                .is_ok()
        }
    })
    .await;
    let mut run = async |arguments: &str| {
        client
            .invoke(invoke("shaped", arguments))
            .await
            .unwrap()
            .into_inner()
    };
    let before = Scrape::of(admin).await;

    let fine = run(r#"{"n": 3}"#).await;
    assert!(!fine.is_error, "{fine:?}");
    assert_eq!(fine.result_json.trim(), r#"{"n": 3}"#);

    for (arguments, description) in [
        (r#"{"n": "three"}"#, r#""three" is not of type "integer""#),
        ("{}", r#""n" is a required property"#),
    ] {
        let withheld = run(arguments).await;
        assert!(withheld.is_error, "{withheld:?}");
        let answer: serde_json::Value = serde_json::from_str(&withheld.result_json).unwrap();
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .contains("does not match its output schema"),
            "{answer}"
        );
        assert_eq!(
            answer["violations"],
            serde_json::json!([{"field": "/n", "description": description}])
        );
    }

    let after = Scrape::of(admin).await;
    let counted = |name: &str| delta(&before, &after, name, &[("tool", "shaped")]);
    assert_eq!(counted("toolmesh_nonconforming_results_total"), 2.0);
}
