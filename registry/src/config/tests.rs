use super::*;

#[test]
fn defaults_match_the_flags() {
    let parsed = Config::try_parse_from(["toolmesh-registry"]).expect("no flags needed");
    let default = Config::default();
    assert_eq!(parsed.listen, default.listen);
    assert_eq!(parsed.lease_ttl, default.lease_ttl);
    assert_eq!(parsed.default_timeout, default.default_timeout);
    assert_eq!(parsed.max_message_bytes, default.max_message_bytes);
    assert_eq!(parsed.shutdown_grace, default.shutdown_grace);
    assert_eq!(parsed.log_calls, default.log_calls);
    assert_eq!(parsed.mcp_listen, default.mcp_listen);
    assert_eq!(parsed.mcp_call_timeout, default.mcp_call_timeout);
    assert_eq!(parsed.mcp_max_sessions, default.mcp_max_sessions);
    assert_eq!(
        parsed.mcp_session_idle_timeout,
        default.mcp_session_idle_timeout
    );
    assert_eq!(parsed.mcp_page_size, default.mcp_page_size);
    assert_eq!(parsed.mcp_search_tool, default.mcp_search_tool);
}

#[test]
fn mcp_flags_parse() {
    let parsed = Config::try_parse_from([
        "r",
        "--mcp-listen",
        "127.0.0.1:0",
        "--mcp-call-timeout",
        "5s",
        "--mcp-search-tool",
        "false",
        "--mcp-allowed-hosts",
        "registry.example,registry.example:8443",
    ])
    .expect("valid");
    assert_eq!(
        parsed.mcp_listen.map(|l| l.to_string()).as_deref(),
        Some("127.0.0.1:0")
    );
    assert_eq!(parsed.mcp_call_timeout, Duration::from_secs(5));
    assert!(!parsed.mcp_search_tool);
    assert_eq!(
        parsed.mcp_allowed_hosts,
        ["registry.example", "registry.example:8443"]
    );
    assert!(Config::try_parse_from(["r", "--mcp-page-size", "0"]).is_err());
}

#[test]
fn call_lines_turn_off_with_false() {
    let parsed = Config::try_parse_from(["r", "--log-calls", "false"]).expect("valid");
    assert!(!parsed.log_calls);
    assert!(Config::try_parse_from(["r", "--log-calls", "off"]).is_err());
}

#[test]
fn redis_passwords_stay_off_the_command_line() {
    let config =
        Config::try_parse_from(["r", "--redis", "redis://:secret@127.0.0.1:6379"]).expect("parses");
    assert!(config.redis_password().is_err());

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("password");
    std::fs::write(&file, "s3cret\n").expect("write");
    let config = Config::try_parse_from([
        "r",
        "--redis",
        "redis://127.0.0.1:6379",
        "--redis-password-file",
        file.to_str().expect("utf-8 path"),
    ])
    .expect("parses");
    assert_eq!(config.redis_password(), Ok(Some("s3cret".into())));
}

#[test]
fn durations_read_as_humans_write_them() {
    let parsed = Config::try_parse_from(["r", "--lease-ttl", "1m 30s", "--listen", "0.0.0.0:9"])
        .expect("valid");
    assert_eq!(parsed.lease_ttl, Duration::from_secs(90));
    assert_eq!(parsed.listen.to_string(), "0.0.0.0:9");
    let error = Config::try_parse_from(["r", "--lease-ttl", "10"]).expect_err("no unit");
    assert!(
            error.to_string().starts_with("error: --lease-ttl: \"10\" is not a duration: the unit is missing; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"),
            "{error}"
        );
}
