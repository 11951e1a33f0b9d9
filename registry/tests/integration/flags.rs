//! The registry binary's answer to each typical mistake on its command
//! line: the exact message, printed once, and a non-zero exit.

use std::net::SocketAddr;

use toolmesh_test_support::{process::binary, registry_process::*};

use crate::common::*;

/// What clap prints after a refused flag value.
const CLAP_TAIL: &str = "\n\nUsage: toolmesh-registry [OPTIONS]\n       toolmesh-registry <COMMAND>\n\nFor more information, try '--help'.\n";

/// A refused flag value and what the registry prints for it (before
/// clap's tail).
struct Refused {
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
    message: &'static str,
}

/// Each typical mistake.
const REFUSED: &[Refused] = &[
    Refused {
        args: &["--listen", "localhost"],
        env: &[],
        message: r#"error: --listen: "localhost" is not a listen address: the port is missing; write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051"#,
    },
    Refused {
        args: &["--listen", "http://127.0.0.1:50051"],
        env: &[],
        message: r#"error: --listen: "http://127.0.0.1:50051" is not a listen address: a listen address has no scheme; write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051"#,
    },
    Refused {
        args: &["--listen", "::1:50051"],
        env: &[],
        message: r#"error: --listen: "::1:50051" is not a listen address: an IPv6 address goes in brackets, e.g. [::1]:50051; write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051"#,
    },
    Refused {
        args: &["--listen", "127.0.0.1:70000"],
        env: &[],
        message: r#"error: --listen: "127.0.0.1:70000" is not a listen address: the port must be a number from 0 to 65535; write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051"#,
    },
    Refused {
        args: &["--lease-ttl", "10"],
        env: &[],
        message: r#"error: --lease-ttl: "10" is not a duration: the unit is missing; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"#,
    },
    Refused {
        args: &["--default-timeout", "soon"],
        env: &[],
        message: r#"error: --default-timeout: "soon" is not a duration: it is not a number followed by a unit; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"#,
    },
    Refused {
        args: &["--shutdown-grace", "10 parsecs"],
        env: &[],
        message: r#"error: --shutdown-grace: "10 parsecs" is not a duration: "parsecs" is not a unit of time; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"#,
    },
    Refused {
        args: &[],
        env: &[("TOOLMESH_LEASE_TTL", "10")],
        message: r#"error: TOOLMESH_LEASE_TTL: "10" is not a duration: the unit is missing; write a number and a unit (ms, s, m, h), e.g. 10s, 500ms or 1m 30s"#,
    },
    Refused {
        args: &[],
        env: &[("TOOLMESH_LISTEN", "localhost")],
        message: r#"error: TOOLMESH_LISTEN: "localhost" is not a listen address: the port is missing; write IP:port or host:port, e.g. 127.0.0.1:50051, 0.0.0.0:50051, [::1]:50051 or localhost:50051"#,
    },
];

#[test]
fn every_message_is_in_the_troubleshooting_doc() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/troubleshooting.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    for Refused { message, .. } in REFUSED {
        assert!(
            doc.contains(&format!("`{message}`")),
            "docs/troubleshooting.md does not show {message:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refused_flag_says_what_to_write_once() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    for Refused { args, env, message } in REFUSED {
        let run = run_to_exit(&binary, args, env).await;
        assert_eq!(
            run.status.code(),
            Some(2),
            "{args:?} {env:?}: {}",
            run.stderr
        );
        assert_eq!(
            run.stderr,
            format!("{message}{CLAP_TAIL}"),
            "{args:?} {env:?}"
        );
        assert_eq!(run.stdout, "", "{args:?} {env:?}");
    }
}

/// Runs the binary, which must fail at start with exactly `message` (one
/// line on stderr) and exit code 1.
async fn fails_at_start(binary: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> String {
    let run = run_to_exit(binary, args, envs).await;
    assert_eq!(
        run.status.code(),
        Some(1),
        "{args:?}: {}{}",
        run.stdout,
        run.stderr
    );
    assert_eq!(run.stderr.lines().count(), 1, "one line:\n{}", run.stderr);
    assert!(!run.stderr.contains("Caused by"), "{}", run.stderr);
    run.stderr.trim_end().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_failures_print_one_line() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };

    let unresolved = fails_at_start(
        &binary,
        &["--listen", "nosuchhost.invalid:50052"],
        &[("RUST_BACKTRACE", "1")],
    )
    .await;
    assert!(
        unresolved.starts_with(
            r#"error: cannot listen on "nosuchhost.invalid:50052": the host name does not resolve ("#
        ),
        "{unresolved}"
    );
    assert!(
        unresolved.ends_with(
            "); give an IP address (127.0.0.1, 0.0.0.0, [::1]) or a host name that resolves"
        ),
        "{unresolved}"
    );

    let taken = loopback_listener().await;
    let addr = taken.local_addr().expect("addr").to_string();
    assert_eq!(
        fails_at_start(&binary, &["--listen", &addr], &[]).await,
        format!(
            "error: cannot listen on {addr}: Address already in use (os error 98); another process listens there: stop it or choose another port with --listen"
        )
    );

    assert_eq!(
        fails_at_start(&binary, &["--log", "info,=["], &[]).await,
        r#"error: invalid log filter "info,=[" (--log / RUST_LOG): invalid filter directive; try `info` or `toolmesh_registry=debug,info`"#
    );

    assert_eq!(
        fails_at_start(&binary, &["--redis", "redis://:secret@127.0.0.1:6379"], &[]).await,
        "error: config: --redis must not carry a password; use --redis-password-file or TOOLMESH_REDIS_PASSWORD"
    );
}

/// A port taken, or a config that does not load, ends the start before
/// any "listening" line: every port is bound, and the config loaded,
/// before the registry says where it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_said_to_listen_before_every_port_is_bound() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let taken = loopback_listener().await;
    let addr = taken.local_addr().expect("addr").to_string();
    let cases: [(&[&str], String); 3] = [
        (
            &["--listen", "127.0.0.1:0", "--admin-listen", &addr],
            format!(
                "error: cannot listen on {addr}: Address already in use (os error 98); another process listens there: stop it or choose another port with --admin-listen"
            ),
        ),
        (
            &["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--mcp-listen", &addr],
            format!(
                "error: config: --mcp-listen {addr}: cannot listen on {addr}: Address already in use (os error 98)"
            ),
        ),
        (
            &["--listen", "127.0.0.1:0", "--tls-cert-file", "/nonexistent/cert.pem", "--tls-key-file", "/nonexistent/key.pem"],
            "error: config: --tls-cert-file / --tls-key-file / --tls-client-ca-file: /nonexistent/cert.pem: No such file or directory (os error 2)".to_owned(),
        ),
    ];
    for (args, error) in cases {
        let run = run_to_exit(&binary, args, &[]).await;
        assert_eq!(
            run.status.code(),
            Some(1),
            "{args:?}: {}{}",
            run.stdout,
            run.stderr
        );
        assert_eq!(run.stderr.trim_end(), error, "{args:?}");
        assert!(
            !run.stdout.contains("listening") && !run.stderr.contains("listening"),
            "{args:?}: a listening line before the error:\n{}{}",
            run.stdout,
            run.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_host_name_resolves_and_is_logged() {
    let Some(binary) = binary("toolmesh-registry") else {
        return;
    };
    let (process, addr) = RegistryProcess::start(&binary, &["--listen", "localhost:0"], &[]).await;
    assert!(addr.ip().is_loopback(), "{addr}");
    let log = process.log();
    let resolved = log
        .lines()
        .find(|l| l.contains("--listen host name resolved; binding its first address"))
        .unwrap_or_else(|| panic!("no resolution line:\n{log}"));
    let first = SocketAddr::new(addr.ip(), 0);
    assert!(resolved.contains(" INFO "), "{resolved}");
    assert!(resolved.contains("listen=localhost:0"), "{resolved}");
    assert!(resolved.contains(&format!("address={first}")), "{resolved}");
    // The registry answers there.
    let mut client = toolmesh_proto::pb::tool_registry_client::ToolRegistryClient::connect(
        format!("http://{addr}"),
    )
    .await
    .expect("connect");
    assert_eq!(tool_names(&mut client).await, Vec::<String>::new());
}

#[test]
fn every_flag_is_in_the_readme() {
    use clap::CommandFactory as _;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let missing: Vec<String> = toolmesh_registry::Config::command()
        .get_arguments()
        // Hidden flags are retired ones, kept so old command lines start.
        .filter(|arg| !arg.is_hide_set())
        .filter_map(|arg| arg.get_long())
        .filter(|long| !["help", "version"].contains(long))
        .map(|long| format!("--{long}"))
        .filter(|flag| {
            !readme.contains(&format!("| `{flag}`")) && !readme.contains(&format!("| `{flag} "))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's flag tables lack {missing:?}"
    );
}
