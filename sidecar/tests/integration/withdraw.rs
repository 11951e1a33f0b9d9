//! `toolmesh-sidecar withdraw` (Kubernetes' `preStop` hook) against real
//! `toolmesh-sidecar` processes and the real registry: the tool leaves at
//! once, the call in flight completes, SIGTERM then ends the sidecar; and
//! each way it can fail is one line and exit code 1.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use toolmesh_sidecar::server::DRAIN_GRACE;

use crate::common::{
    HealthWatch, SLOW_TOOL, ServingStatus, SidecarProcess, SlowCall, TestRegistry, binary,
    fake_registry, health_check, is_dead, reserved_port, sidecar, stays,
};

/// How long anything awaited may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(20);

fn noop() -> toolmesh_sidecar::Tool {
    toolmesh_sidecar::sdk::tool("noop", "Does nothing", |_: serde_json::Value| async {
        Ok::<_, toolmesh_sidecar::sdk::ToolError>(())
    })
    .build()
}

/// Runs `toolmesh-sidecar withdraw ARGS` with `envs`, within [`PATIENCE`].
async fn withdraw(bin: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = tokio::process::Command::new(bin);
    command
        .arg("withdraw")
        .args(args)
        .env_remove("TOOLMESH_SIDECAR_LISTEN")
        .env_remove("TOOLMESH_SIDECAR_CONFIG")
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .kill_on_drop(true);
    tokio::time::timeout(PATIENCE, command.output())
        .await
        .expect("withdraw returns")
        .expect("withdraw runs")
}

/// Exit code 1, nothing on stdout, and exactly `line` on stderr.
fn fails_with(output: &Output, line: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    assert_eq!(stderr, format!("{line}\n"));
}

/// A process that ignores SIGUSR1: not a sidecar, and not killed by it.
fn deaf_process() -> tokio::process::Child {
    tokio::process::Command::new("sh")
        .args(["-c", "trap '' USR1; exec sleep 60"])
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdraw_takes_the_tools_out_at_once_and_the_call_in_flight_completes() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    // The lease outlives every check of "gone at once" below several times,
    // and three heartbeat intervals fit in the "stays gone" check.
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(ttl).await;
    // As in Kubernetes: the listen address in the config the command finds
    // through TOOLMESH_SIDECAR_CONFIG, with no --listen.
    let port = reserved_port();
    let yaml = format!(
        r#"
listen: 0.0.0.0:{port}
tools:
{SLOW_TOOL}  - name: echo
    description: Echo
    backend: {{command: [cat]}}
"#
    );
    let mut process = SidecarProcess::spawn(
        &bin,
        &yaml,
        &["--registry", &registry.url(), "--instance-id", "leaving"],
        &[],
    );
    let bound = process.bound(PATIENCE).await;
    registry.wait_for_instances("slow", 1, PATIENCE).await;
    let call = SlowCall::start(&registry, process.dir()).await;

    let config = process.dir().join("sidecar.yaml");
    let config = config.to_str().unwrap();
    let pid = process.pid.to_string();
    let asked = Instant::now();
    let output = withdraw(
        &bin,
        &["--pid", &pid],
        &[("TOOLMESH_SIDECAR_CONFIG", config)],
    )
    .await;
    let took = asked.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}\n{}", process.log());
    assert_eq!(stderr, "");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "the sidecar on 127.0.0.1:{port} (pid {pid}) withdrew from the registry; it serves calls until SIGTERM\n"
        )
    );
    // Withdrawn by the time the command returned: well within the TTL.
    assert!(took < ttl / 2, "withdraw took {took:?}");
    assert_eq!(registry.tool("slow").await, None);
    assert_eq!(registry.tool("echo").await, None);
    assert_eq!(health_check(bound, "").await, ServingStatus::NotServing);
    stays(ttl, "the tools stay withdrawn", || async {
        registry.tool("echo").await.is_none()
    })
    .await;
    assert!(process.is_running(), "{}", process.log());
    assert!(!call.is_finished());

    // Asked again (a retried hook): nothing left to do.
    let again = withdraw(&bin, &["--pid", &pid, "--listen", &bound.to_string()], &[]).await;
    assert!(again.status.success(), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("was not serving"),
        "{again:?}"
    );

    assert_eq!(call.release().await.instance_id, "leaving");
    assert!(process.is_running(), "it runs until SIGTERM");

    process.signal(Signal::SIGTERM);
    let status = process.exited(DRAIN_GRACE / 2).await;
    let log = process.log();
    assert!(status.success(), "{status}\n{log}");
    for (line, count) in [
        ("SIGUSR1: withdrawing from the registry", 1),
        ("withdrawn from the registry", 1),
        ("left the registry on request", 1),
        ("SIGTERM: shutting down", 1),
        ("announced to the registry", 1),
    ] {
        assert_eq!(log.matches(line).count(), count, "{line:?}\n{log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn withdraw_errors_are_one_line_and_exit_1() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };

    // Nothing listens: said before any signal is sent (SIGUSR1 would have
    // killed this `sleep`).
    let mut bystander = tokio::process::Command::new("sleep")
        .arg("60")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let bystander_pid = bystander.id().unwrap();
    let nowhere = format!("127.0.0.1:{}", reserved_port());
    let output = withdraw(
        &bin,
        &["--pid", &bystander_pid.to_string(), "--listen", &nowhere],
        &[],
    )
    .await;
    fails_with(
        &output,
        &format!(
            "error: cannot reach the sidecar's health service on {nowhere}: tcp connect error: Connection refused (os error 111); is the sidecar running and listening there?"
        ),
    );
    assert!(!is_dead(bystander_pid), "a signal was sent");
    bystander.kill().await.unwrap();

    // A sidecar serving (announced), and a pid that is not its.
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let live = sidecar(&registry.url(), "live", vec![noop()]).await;
    let mut watch = HealthWatch::start(live.addr, "").await;
    if watch.next(PATIENCE).await == ServingStatus::NotServing {
        assert_eq!(watch.next(PATIENCE).await, ServingStatus::Serving);
    }
    let listen = live.addr.to_string();

    // No such process: one that ran and was reaped.
    let mut gone = tokio::process::Command::new("true").spawn().unwrap();
    let gone_pid = gone.id().unwrap();
    gone.wait().await.unwrap();
    let output = withdraw(
        &bin,
        &["--pid", &gone_pid.to_string()],
        &[("TOOLMESH_SIDECAR_LISTEN", &listen)],
    )
    .await;
    fails_with(
        &output,
        &format!(
            "error: no process with pid {gone_pid} to send SIGUSR1 to; give the sidecar's pid"
        ),
    );

    // A process that is not the sidecar: the sidecar stays SERVING.
    let deaf = deaf_process();
    let deaf_pid = deaf.id().unwrap();
    let asked = Instant::now();
    let output = withdraw(
        &bin,
        &["--pid", &deaf_pid.to_string(), "--timeout", "1s"],
        &[("TOOLMESH_SIDECAR_LISTEN", &listen)],
    )
    .await;
    fails_with(
        &output,
        &format!(
            "error: sent SIGUSR1 to pid {deaf_pid}, but the sidecar on {listen} still reports SERVING after 1s; is pid {deaf_pid} that sidecar?"
        ),
    );
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(registry.instances("noop").await, 1);
    live.stop().await;

    // A gRPC server without health: not a sidecar.
    let (_fake, server) = fake_registry(Duration::from_secs(10)).await;
    let output = withdraw(
        &bin,
        &[
            "--pid",
            &deaf_pid.to_string(),
            "--listen",
            &server.addr.to_string(),
        ],
        &[],
    )
    .await;
    fails_with(
        &output,
        &format!(
            "error: {} answered grpc.health.v1.Health/Watch with UNIMPLEMENTED; is a toolmesh sidecar listening there?",
            server.addr
        ),
    );

    // The listen address named as it was given.
    let output = withdraw(&bin, &[], &[("TOOLMESH_SIDECAR_LISTEN", "127.0.0.1:0")]).await;
    fails_with(
        &output,
        "error: TOOLMESH_SIDECAR_LISTEN: 127.0.0.1:0 has port 0, so the sidecar chose its port: give the one it bound (its `bound addr=` log line)",
    );
}

#[tokio::test]
async fn help_documents_health_signals_and_the_withdraw_command() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let help = |args: &'static [&'static str]| {
        let bin = bin.clone();
        async move {
            let output = tokio::process::Command::new(bin)
                .args(args)
                .output()
                .await
                .unwrap();
            assert!(output.status.success(), "{output:?}");
            String::from_utf8(output.stdout).unwrap()
        }
    };
    let main = help(&["--help"]).await;
    for needle in [
        "toolmesh-sidecar [OPTIONS] --config <CONFIG>",
        "withdraw  Make the sidecar running in this container withdraw",
        "grpc.health.v1.Health on the --listen port",
        "SIGUSR1: withdraw, keep serving calls until SIGTERM",
    ] {
        assert!(main.contains(needle), "{needle:?} in\n{main}");
    }
    let withdraw = help(&["withdraw", "--help"]).await;
    for needle in [
        "Kubernetes' preStop hook",
        "sends SIGUSR1 to\n--pid",
        "--pid <PID>",
        "[default: 1]",
        "[env: TOOLMESH_SIDECAR_LISTEN=]",
        "[default: 5s]",
    ] {
        assert!(withdraw.contains(needle), "{needle:?} in\n{withdraw}");
    }
}
