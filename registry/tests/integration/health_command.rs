//! `toolmesh-registry health` (the chart's `helm test` hook) against the
//! real registry binary: exit 0 only when every service asked about is
//! SERVING, one `error:` line and exit 1 otherwise.

use std::time::Duration;

use nix::sys::signal::Signal;
use toolmesh_test_support::{process, registry_process::*};

const ALL: [&str; 6] = [
    "--service",
    "",
    "--service",
    "toolmesh.v1.ToolRegistry",
    "--service",
    "toolmesh.v1.Registration",
];

async fn health(bin: &std::path::Path, args: &[&str], envs: &[(&str, &str)]) -> Finished {
    let mut all = vec!["health"];
    all.extend_from_slice(args);
    run_to_exit(bin, &all, envs).await
}

fn fails_with(finished: &Finished, expected: &str) {
    assert_eq!(finished.status.code(), Some(1), "{}", finished.stderr);
    assert_eq!(finished.stderr, format!("error: {expected}\n"));
    assert_eq!(finished.stdout, "");
}

#[tokio::test]
async fn a_serving_registry_passes_for_every_service() {
    let Some(bin) = process::binary("toolmesh-registry") else {
        return;
    };
    // The registry's own variables (as in its container) do not get in
    // the way of the health command.
    let (_registry, addr) = RegistryProcess::start(&bin, &["--listen", "127.0.0.1:0"], &[]).await;
    let address = addr.to_string();
    let mut args = vec!["--address", address.as_str()];
    args.extend_from_slice(&ALL);
    let finished = health(
        &bin,
        &args,
        &[
            ("TOOLMESH_LISTEN", "0.0.0.0:9"),
            ("TOOLMESH_LEASE_TTL", "3s"),
        ],
    )
    .await;
    assert!(finished.status.success(), "{}", finished.stderr);
    assert_eq!(
        finished.stdout,
        format!(
            "{address}: SERVING (\"\", \"toolmesh.v1.ToolRegistry\", \"toolmesh.v1.Registration\")\n"
        )
    );

    let url = format!("http://{address}/");
    let finished = health(&bin, &["--address", &url], &[]).await;
    assert!(finished.status.success(), "{}", finished.stderr);
}

/// Each check is a new process and a new connection, which the registry
/// must still accept during its shutdown delay (it did not: the server was
/// not polled then, and new connections hung until the client's timeout).
#[tokio::test]
async fn a_draining_registry_fails() {
    let Some(bin) = process::binary("toolmesh-registry") else {
        return;
    };
    let (registry, addr) = RegistryProcess::start(
        &bin,
        &["--listen", "127.0.0.1:0", "--shutdown-delay", "30s"],
        &[],
    )
    .await;
    let address = addr.to_string();
    let args = [
        "--address",
        &address,
        "--service",
        "toolmesh.v1.ToolRegistry",
    ];
    assert!(health(&bin, &args, &[]).await.status.success());
    process::send(registry.pid(), Signal::SIGTERM);
    // It reports NOT_SERVING a moment after it logs "shutting down".
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let finished = loop {
        let finished = health(&bin, &args, &[]).await;
        if !finished.status.success() || tokio::time::Instant::now() > deadline {
            break finished;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        registry.log().contains("shutting down"),
        "{}",
        registry.log()
    );
    fails_with(
        &finished,
        &format!("{address}: the service \"toolmesh.v1.ToolRegistry\" is NOT_SERVING"),
    );
}

#[tokio::test]
async fn unknown_services_unreachable_registries_and_bad_addresses_fail_in_one_line() {
    let Some(bin) = process::binary("toolmesh-registry") else {
        return;
    };
    let (_registry, addr) = RegistryProcess::start(&bin, &["--listen", "127.0.0.1:0"], &[]).await;
    let address = addr.to_string();
    let finished = health(
        &bin,
        &["--address", &address, "--service", "toolmesh.v1.Nope"],
        &[],
    )
    .await;
    fails_with(
        &finished,
        &format!("{address} has no health status for the service \"toolmesh.v1.Nope\""),
    );

    // A port nothing listens on.
    let closed = toolmesh_test_support::ports::reserved_port();
    let address = format!("127.0.0.1:{closed}");
    let finished = health(&bin, &["--address", &address, "--timeout", "2s"], &[]).await;
    assert_eq!(finished.status.code(), Some(1), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .starts_with(&format!("error: cannot reach {address}: "))
            && finished.stderr.contains("Connection refused")
            && finished.stderr.lines().count() == 1,
        "{}",
        finished.stderr
    );

    let finished = health(&bin, &["--address", "grpc://127.0.0.1:50051"], &[]).await;
    fails_with(
        &finished,
        "\"grpc://127.0.0.1:50051\" is not a server address: the scheme must be http:// or https://; write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051",
    );
}

#[tokio::test]
async fn registry_flags_and_the_health_command_do_not_mix() {
    let Some(bin) = process::binary("toolmesh-registry") else {
        return;
    };
    let finished = run_to_exit(&bin, &["--listen", "127.0.0.1:0", "health"], &[]).await;
    assert_eq!(finished.status.code(), Some(2));
    assert!(
        finished
            .stderr
            .starts_with("error: the subcommand 'health' cannot be used with '--listen <LISTEN>'"),
        "{}",
        finished.stderr
    );
}
