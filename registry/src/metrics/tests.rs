use super::*;

fn exposition(metrics: &Metrics) -> String {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics.registry())
        .unwrap_or_else(|e| panic!("encode: {e}"));
    text
}

#[test]
fn every_family_is_exposed_by_its_contract_name() {
    let metrics = Metrics::new(1);
    metrics.invoked("a", "ok", Duration::from_millis(3));
    metrics.invoked("b", "ok", Duration::from_millis(3));
    metrics.redis_call(RedisOp::RateLimit, Duration::from_millis(1), false);
    let text = exposition(&metrics);
    for line in [
        "# TYPE toolmesh_invocations counter",
        r#"toolmesh_invocations_total{tool="a",outcome="ok"} 1"#,
        r#"toolmesh_invocations_total{tool="(other)",outcome="ok"} 1"#,
        "# TYPE toolmesh_invoke_duration_seconds histogram",
        r#"toolmesh_redis_errors_total{op="rate_limit"} 1"#,
        "toolmesh_tools 0",
        "# TYPE toolmesh_hedges counter",
        "toolmesh_audit_records_dropped_total 0",
        r#"toolmesh_build_info{version=""#,
        "# EOF",
    ] {
        assert!(text.contains(line), "{line:?} missing from\n{text}");
    }
}

#[test]
fn a_tools_series_record_what_the_lookups_record() {
    let outcomes = ["ok", "unavailable", "ok", "tool_error", "deadline_exceeded"];
    let looked_up = Metrics::new(1);
    let held = Arc::new(Metrics::new(1));
    for tool in ["a", "b"] {
        let series = held.series(tool);
        assert!(series.of(&held));
        assert!(!series.of(&Arc::new(Metrics::new(1))));
        for (i, outcome) in outcomes.into_iter().enumerate() {
            let latency = Duration::from_micros(300 << i);
            looked_up.invoked(tool, outcome, latency);
            looked_up.attempt(tool, outcome, latency * 2);
            series.invoked(outcome, latency);
            series.attempt(outcome, latency * 2);
        }
    }
    // A family's series come in its hash map's order: compare line sets.
    let lines = |metrics: &Metrics| {
        let mut lines: Vec<String> = exposition(metrics).lines().map(str::to_owned).collect();
        lines.sort();
        lines
    };
    assert!(lines(&held) == lines(&looked_up), "the series differ");
    assert!(
        exposition(&held).contains(r#"toolmesh_invocations_total{tool="(other)",outcome="ok"} 2"#)
    );
}
