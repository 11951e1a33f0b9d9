//! The `toolmesh-sidecar` binary: signals, flags, and what the real
//! registry (in-process) sees of it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use toolmesh_proto::pb;
use toolmesh_sidecar::server::DRAIN_GRACE;

use crate::common::{
    SLOW_TOOL, SidecarProcess, SlowCall, TestRegistry, binary, eventually, fake_registry,
    reserved_port, send, sidecar, tools_from_yaml, wait_until,
};

/// Registry lease for tests not about expiry.
const TTL: Duration = Duration::from_secs(10);
/// How long anything awaited may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// An echo tool (`cat`) named `name`, described as `description`.
fn echo_tool(name: &str, description: &str) -> String {
    format!("  - name: {name}\n    description: {description}\n    backend: {{command: [cat]}}\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_withdraws_drains_the_call_in_flight_and_exits_0() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let yaml = format!("tools:\n{SLOW_TOOL}");
    let mut process = SidecarProcess::start(&bin, &registry.url(), "draining", &yaml).await;
    registry.wait_for_instances("slow", 1, PATIENCE).await;

    let call = SlowCall::start(&registry, process.dir()).await;

    process.signal(Signal::SIGTERM);
    // Withdrawn, not expired: gone well before the TTL, while the call is
    // still held by the test.
    eventually(TTL / 2, "the tool to be withdrawn", || async {
        registry.tool("slow").await.is_none()
    })
    .await;
    assert!(!call.is_finished(), "the call ended before its release");
    assert!(
        process.is_running(),
        "the sidecar exited with a call in flight"
    );

    let response = call.release().await;
    assert_eq!(response.instance_id, "draining");
    // Once the call is done it stops at once, not at the end of the grace.
    let status = process.exited(DRAIN_GRACE / 2).await;
    assert!(status.success(), "{status}\n{}", process.log());
    let log = process.log();
    assert!(log.contains("withdrawn from the registry"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_and_env_beat_the_yaml_which_beats_the_default() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let real = registry.url();
    // Nothing listens there, and the kernel hands it to no one: a sidecar
    // that used it would never appear.
    let nowhere = format!("http://127.0.0.1:{}", reserved_port());

    // Each sidecar's YAML sets every key to a value of its own, so a
    // wrong winner shows as a wrong port or id.
    let config = |tool: &str, registry: &str, instance: Option<&str>| {
        let port = reserved_port();
        let instance = instance.map_or(String::new(), |id| format!("instance_id: {id}\n"));
        let yaml = format!(
            "registry: {registry}\nlisten: 127.0.0.1:{port}\n{instance}tools:\n{}",
            echo_tool(tool, "Echo")
        );
        (yaml, port)
    };
    let (yaml, flag_yaml_port) = config("via_flag", &nowhere, Some("yaml-flag"));
    let flag_env_listen = format!("127.0.0.1:{}", reserved_port());
    let mut by_flag = SidecarProcess::spawn(
        &bin,
        &yaml,
        &[
            "--registry",
            &real,
            "--listen",
            "127.0.0.1:0",
            "--instance-id",
            "flag-id",
        ],
        &[
            ("TOOLMESH_REGISTRY", &nowhere),
            ("TOOLMESH_SIDECAR_LISTEN", &flag_env_listen),
            ("TOOLMESH_INSTANCE_ID", "env-id"),
        ],
    );
    let (yaml, env_yaml_port) = config("via_env", &nowhere, Some("yaml-env"));
    let mut by_env = SidecarProcess::spawn(
        &bin,
        &yaml,
        &[],
        &[
            ("TOOLMESH_REGISTRY", &real),
            ("TOOLMESH_SIDECAR_LISTEN", "127.0.0.1:0"),
            ("TOOLMESH_INSTANCE_ID", "env-id"),
        ],
    );
    let (yaml, yaml_port) = config("via_yaml", &real, Some("yaml-id"));
    let mut by_yaml = SidecarProcess::spawn(&bin, &yaml, &[], &[]);
    let (yaml, default_yaml_port) = config("via_default", &real, None);
    let mut by_default = SidecarProcess::spawn(&bin, &yaml, &["--listen", "127.0.0.1:0"], &[]);

    // Where each one listens: the YAML's port, or one the kernel chose.
    for (process, yaml_port, listen_from_yaml) in [
        (&mut by_flag, flag_yaml_port, false),
        (&mut by_env, env_yaml_port, false),
        (&mut by_yaml, yaml_port, true),
        (&mut by_default, default_yaml_port, false),
    ] {
        let bound = process.bound(PATIENCE).await;
        assert_eq!(
            bound.port() == yaml_port,
            listen_from_yaml,
            "bound {bound}, YAML port {yaml_port}"
        );
        assert_ne!(bound.to_string(), flag_env_listen, "the env beat the flag");
    }
    let mut ids = Vec::new();
    for tool in ["via_flag", "via_env", "via_yaml", "via_default"] {
        registry.wait_for_instances(tool, 1, PATIENCE).await;
        ids.push(registry.invoke(tool, "{}").await.unwrap().instance_id);
    }
    assert_eq!(ids[..3], ["flag-id", "env-id", "yaml-id"]);
    let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
    let suffix = ids[3]
        .strip_prefix(&format!("{host}-"))
        .unwrap_or_else(|| panic!("{} is not <hostname>-<hex>", ids[3]));
    assert!(
        suffix.len() == 8 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
        "{}",
        ids[3]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listening_on_0_0_0_0_advertises_127_0_0_1() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    // Fake: the registry's API does not show an instance's endpoint, and a
    // call through the real registry would succeed with `0.0.0.0` too (Linux
    // connects it to loopback): only the announce itself shows the URL.
    let (registry, server) = fake_registry(TTL).await;
    let mut process = SidecarProcess::spawn(
        &bin,
        &format!("tools:\n{}", echo_tool("echo", "Echo")),
        &[
            "--registry",
            &server.url(),
            "--listen",
            "0.0.0.0:0",
            "--instance-id",
            "everywhere",
        ],
        &[],
    );
    let bound = process.bound(PATIENCE).await;
    assert!(bound.ip().is_unspecified(), "bound {bound}");
    wait_until(PATIENCE, "the announce", || {
        !registry.announces().is_empty()
    })
    .await;
    let (_, announce, _) = registry.announces().remove(0);
    assert_eq!(
        announce.endpoint,
        format!("http://127.0.0.1:{}", bound.port())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_it_serves_and_takes_only_calls_the_registry_signed() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let (registry, server) = fake_registry(TTL).await;
    let yaml = format!("tools:\n{}", echo_tool("echo", "Echo"));
    let args = [
        "--registry",
        &server.url(),
        "--listen",
        "0.0.0.0:0",
        "--insecure",
    ];
    let mut sidecar = SidecarProcess::spawn(&bin, &yaml, &args, &[]);
    let bound = sidecar.bound(PATIENCE).await;
    wait_until(PATIENCE, "the announce", || {
        !registry.announces().is_empty()
    })
    .await;
    let (_, announce, _) = registry.announces().remove(0);
    assert_eq!(announce.execute_key.len(), toolmesh_proto::grant::KEY_LEN);
    let refused = pb::tool_runtime_client::ToolRuntimeClient::connect(format!(
        "http://127.0.0.1:{}",
        bound.port()
    ))
    .await
    .unwrap()
    .execute(pb::ExecuteRequest {
        tool: "echo".into(),
        arguments_json: "{}".into(),
        ..Default::default()
    })
    .await
    .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().contains("no execute grant"),
        "{refused:?}"
    );
    assert!(
        sidecar
            .log()
            .contains("--insecure is deprecated and ignored"),
        "{}",
        sidecar.log()
    );
}

/// A sidecar whose admin port is taken says so and exits before it logs
/// any port as bound: a "bound" line is never followed by a bind error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_admin_port_fails_before_any_port_is_reported_bound() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let (_registry, server) = fake_registry(TTL).await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let admin = taken.local_addr().unwrap().to_string();
    let yaml = format!("tools:\n{}", echo_tool("echo", "Echo"));
    let args = [
        "--registry",
        &server.url(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        &admin,
    ];
    let mut refused = SidecarProcess::spawn(&bin, &yaml, &args, &[]);
    assert!(!refused.exited(PATIENCE).await.success());
    let log = refused.log();
    assert!(
        log.contains(&format!(
            "error: cannot listen on {admin} (--admin-listen): Address already in use"
        )),
        "{log}"
    );
    for said in [" bound ", "listening", "serving"] {
        assert!(
            !log.contains(said),
            "{said:?} before the bind error:\n{log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_sidecar_exits_with_the_conflict_named_and_the_live_one_stays() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let dir = tempfile::tempdir().unwrap();
    let first = sidecar(
        &registry.url(),
        "first",
        tools_from_yaml(
            &format!("tools:\n{}", echo_tool("shared", "The first")),
            dir.path(),
        ),
    )
    .await;
    registry.wait_for_instances("shared", 1, PATIENCE).await;
    let live = registry.descriptor("shared").await.unwrap();

    let second_yaml = format!("tools:\n{}", echo_tool("shared", "The second"));
    let mut second = SidecarProcess::spawn(
        &bin,
        &second_yaml,
        &[
            "--registry",
            &registry.url(),
            "--listen",
            "127.0.0.1:0",
            "--instance-id",
            "second",
        ],
        &[],
    );
    // The registry will not take it while the first lives: it stops at
    // once, saying why, rather than retry for ever.
    let status = second.exited(PATIENCE).await;
    let log = second.log();
    assert_eq!(status.code(), Some(1), "{log}");
    let errors: Vec<_> = log.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(
        errors,
        [format!(
            "error: the registry at {} refused this sidecar's tools (FAILED_PRECONDITION): descriptor of \"shared\" conflicts with the one its live instances announced: description: live \"The first\" != announced \"The second\"",
            registry.url()
        )],
        "{log}"
    );
    assert_eq!(log.matches("announce failed").count(), 0, "{log}");

    assert_eq!(registry.descriptor("shared").await.unwrap(), live);
    assert_eq!(registry.instances("shared").await, 1);
    let response = registry.invoke("shared", "{}").await.unwrap();
    assert_eq!(response.instance_id, "first");

    // Changing a tool's descriptor: stop its live instances, then start
    // the new one.
    first.stop().await;
    let _second = SidecarProcess::start(&bin, &registry.url(), "second", &second_yaml).await;
    eventually(PATIENCE, "the second sidecar's tool", || async {
        registry
            .descriptor("shared")
            .await
            .is_some_and(|d| d.description == "The second")
    })
    .await;
    let response = registry.invoke("shared", "{}").await.unwrap();
    assert_eq!(response.instance_id, "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_names_and_addresses_without_a_scheme_work() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    let mut process = SidecarProcess::spawn(
        &bin,
        &format!("tools:\n{}", echo_tool("named", "Echo")),
        &[
            "--registry",
            &registry.addr.to_string(),
            "--listen",
            "localhost:0",
            "--advertise",
            "127.0.0.1:1",
            "--instance-id",
            "named",
        ],
        &[],
    );
    let bound = process.bound(PATIENCE).await;
    assert!(bound.ip().is_loopback(), "bound {bound}");
    let log = process.log();
    assert!(
        log.lines().any(
            |l| l.contains("host name resolved; listening on its first address")
                && l.contains(&format!("listen=localhost:0 addr={}:0", bound.ip()))
        ),
        "{log}"
    );
    // Announced (to a registry given as host:port), with the advertised
    // host:port made a URL: the registry refuses anything else.
    registry.wait_for_instances("named", 1, PATIENCE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lease_is_announced_again_when_the_sidecar_resumes() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    // About expiry: a short lease.
    let ttl = Duration::from_secs(2);
    let registry = TestRegistry::start(ttl).await;
    let mut process = SidecarProcess::start(
        &bin,
        &registry.url(),
        "sleeper",
        &format!("tools:\n{}", echo_tool("echo", "Echo")),
    )
    .await;
    registry.wait_for_instances("echo", 1, PATIENCE).await;

    // Stopped, it sends no heartbeat: the registry expires the lease.
    process.signal(Signal::SIGSTOP);
    registry.wait_for_instances("echo", 0, 5 * ttl).await;
    // Resumed, its next heartbeat is refused and it announces again.
    process.signal(Signal::SIGCONT);
    registry.wait_for_instances("echo", 1, 5 * ttl).await;
    assert!(process.is_running());
    assert_eq!(
        registry.invoke("echo", "{}").await.unwrap().instance_id,
        "sleeper"
    );
    let log = process.log();
    assert!(log.contains("the registry forgot the lease"), "{log}");
    assert_eq!(log.matches("announced to the registry").count(), 2, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_config_runs_from_the_repository_root() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let registry = TestRegistry::start(TTL).await;
    // As the README runs it: a config path relative to the working
    // directory, whose commands are relative to the config's directory.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let log_dir = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(log_dir.path().join("sidecar.log")).unwrap();
    let mut child = tokio::process::Command::new(&bin)
        .current_dir(&root)
        .args(["--config", "examples/demo/sidecar.yaml"])
        .args(["--registry", &registry.url(), "--listen", "127.0.0.1:0"])
        .args(["--instance-id", "demo"])
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(log_dir.path().join("sidecar.log")).unwrap_or_default();
    registry.wait_for_instances("word_count", 1, PATIENCE).await;

    let response = registry
        .invoke("word_count", r#"{"text": "three little words"}"#)
        .await
        .unwrap_or_else(|status| panic!("{status:?}\n{}", log()));
    assert_eq!(
        (response.result_json.as_str(), response.is_error),
        (r#"{"words": 3}"#, false),
        "{}",
        log()
    );

    send(child.id().unwrap(), Signal::SIGTERM);
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status}\n{}", log());
}

#[tokio::test]
async fn max_concurrent_streams_is_advertised() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let yaml = format!("tools:\n{}", echo_tool("echo", "Echo"));
    for (args, expected) in [(&[][..], 1024), (&["--max-concurrent-streams", "7"][..], 7)] {
        let mut all = vec!["--registry", "127.0.0.1:9", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut process = SidecarProcess::spawn(&bin, &yaml, &all, &[]);
        let bound = process.bound(PATIENCE).await;
        let advertised =
            toolmesh_test_support::http2::advertised_max_concurrent_streams(bound).await;
        assert_eq!(advertised, expected, "{args:?}");
    }
}

#[test]
fn every_flag_is_in_the_readmes_sidecar_table() {
    let Some(bin) = binary("toolmesh-sidecar") else {
        return;
    };
    let help = std::process::Command::new(bin)
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8(help.stdout).unwrap();
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let table = readme
        .split_once("\n## Sidecar\n")
        .map(|(_, rest)| rest)
        .unwrap();
    let flags: Vec<&str> = help
        .lines()
        .map(str::trim_start)
        .filter_map(|line| {
            // `--flag <VALUE>`, or `-x, --flag`; other lines are prose.
            let line = line
                .strip_prefix("-")
                .filter(|l| !l.starts_with('-'))
                .map_or(line, |l| l.get(3..).unwrap_or(""));
            line.strip_prefix("--")
        })
        .filter_map(|flag| flag.split(' ').next())
        .filter(|flag| !["help", "version"].contains(flag))
        .collect();
    assert!(flags.contains(&"admin-listen"), "{help}");
    for flag in flags {
        assert!(
            table.contains(&format!("| `--{flag} ")) || table.contains(&format!("| `--{flag}` ")),
            "--{flag} is not in README.md's sidecar flag table"
        );
    }
}
