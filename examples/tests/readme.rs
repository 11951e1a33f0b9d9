//! The README's "Running it yourself" section, run as written: its server
//! commands (the `sh` blocks) started with the real binaries, its grpcurl
//! commands (the `console` block) run through `sh -c` with the real grpcurl,
//! and their outputs compared with the ones the README shows.
//!
//! It runs twice: from the repository root (with `target/debug/` read as
//! the directory the binaries were built in, which differs under
//! `CARGO_TARGET_DIR`), and from another folder laid out like a repository
//! (`target/debug/` and `examples/` linked there), where every command runs
//! exactly as written. The section's `cargo build` is not run: the suite
//! built the same binaries already.
//!
//! The servers use the README's ports ([`PORTS`]), so this test is alone in
//! its binary, and it fails naming a port that another process holds.
#![allow(clippy::unwrap_used)]

#[path = "common/markdown.rs"]
mod markdown;
#[path = "common/mesh.rs"]
mod mesh;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use nix::sys::signal::Signal;
use tokio::process::{Child, Command};
use toolmesh_test_support::{catalog, process};

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// The ports the section's servers listen on, as the section names them:
/// the registry, the inventory service, the sidecar.
const PORTS: [u16; 3] = [50051, 8090, 50061];

/// The binaries the section starts, all in one build's directory.
const BINARIES: [&str; 3] = ["toolmesh-registry", "inventory-service", "toolmesh-sidecar"];

/// One grpcurl call from the README and the output it shows.
#[derive(Debug)]
struct Call {
    command: String,
    expected: String,
}

/// The section's text, from its heading to the next `## ` heading.
fn section(readme: &str) -> &str {
    section_named(readme, "Running it yourself")
}

/// The text of the README's section `heading`, to the next `## ` heading.
fn section_named<'a>(readme: &'a str, heading: &str) -> &'a str {
    let start = readme
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("README has a {heading:?} section"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The long-running commands: every line of the `sh` blocks but the build.
fn servers(section: &str) -> Vec<String> {
    markdown::bodies(section, "sh")
        .iter()
        .flat_map(|body| body.lines())
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("cargo build"))
        .map(str::to_owned)
        .collect()
}

/// The `$ ` commands of the `console` block, each with the lines after it.
fn calls(section: &str) -> Vec<Call> {
    let block = markdown::bodies(section, "console")
        .into_iter()
        .next()
        .expect("a console block");
    let mut calls: Vec<Call> = Vec::new();
    for line in block.lines() {
        if let Some(command) = line.strip_prefix("$ ") {
            calls.push(Call {
                command: command.to_owned(),
                expected: String::new(),
            });
        } else {
            let call = calls.last_mut().expect("output after a command");
            call.expected.push_str(line);
            call.expected.push('\n');
        }
    }
    calls
}

/// `output` with what differs from run to run masked: the instance id.
fn normalized(output: &str) -> String {
    output
        .lines()
        .map(|line| match line.find("\"instanceId\": \"") {
            Some(at) => format!("{}\"instanceId\": \"<instance>\",", &line[..at]),
            None => line.trim_end().to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A process started from one of the README's lines.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    fn start(line: &str, cwd: &Path, logs: &Path, n: usize) -> Self {
        let log = logs.join(format!("server-{n}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {line}"))
            .current_dir(cwd)
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {line:?}: {e}"));
        Self { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and a clean exit within 15 s.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            process::send(pid, Signal::SIGTERM);
        }
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("still running 15 s after SIGTERM:\n{}", self.log()))
            .unwrap();
        assert!(status.success(), "{status}:\n{}", self.log());
    }
}

/// Panics naming each of [`PORTS`] that another process listens on.
fn assert_ports_free() {
    let taken: Vec<String> = PORTS
        .iter()
        .filter(|port| std::net::TcpListener::bind(("127.0.0.1", **port)).is_err())
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    assert!(
        taken.is_empty(),
        "the README's servers listen on {PORTS:?}, and another process holds {}: stop it and run again",
        taken.join(", ")
    );
}

/// Runs the section's commands in `cwd`, `rewrite` applied to the server
/// lines, and checks every grpcurl output against the README's.
async fn run_as_written(section: &str, cwd: &Path, rewrite: impl Fn(&str) -> String) {
    assert_ports_free();
    let logs = tempfile::tempdir().unwrap();
    let mut servers = Vec::new();
    for (n, line) in servers_of(section).iter().enumerate() {
        servers.push(Server::start(&rewrite(line), cwd, logs.path(), n));
    }
    let client = eventually_connected().await;
    for tool in ["lookup", "slow_report", "word_count"] {
        catalog::wait_for_instances(&client, tool, 1, Duration::from_secs(20)).await;
    }
    wait_for_inventory().await;
    for call in calls(section) {
        let output = Command::new("sh")
            .arg("-c")
            .arg(&call.command)
            .current_dir(cwd)
            .output()
            .await
            .unwrap();
        let shown = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            normalized(&shown),
            normalized(&call.expected),
            "`{}` in {} printed something else than the README shows; the servers' logs:\n{}",
            call.command,
            cwd.display(),
            servers
                .iter()
                .map(Server::log)
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    while let Some(server) = servers.pop() {
        server.stop().await;
    }
}

fn servers_of(section: &str) -> Vec<String> {
    let lines = servers(section);
    assert_eq!(
        lines.len(),
        3,
        "a registry, the inventory service and a sidecar: {lines:?}"
    );
    lines
}

/// Waits until the inventory service accepts connections: the sidecar
/// announces `lookup` whether or not its backend is up yet.
async fn wait_for_inventory() {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", PORTS[1]))
        .await
        .is_err()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no inventory service on 127.0.0.1:{} after 20 s",
            PORTS[1]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn eventually_connected()
-> toolmesh_proto::pb::tool_registry_client::ToolRegistryClient<tonic::transport::Channel> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let connected = toolmesh_proto::pb::tool_registry_client::ToolRegistryClient::connect(
            "http://127.0.0.1:50051",
        )
        .await;
        match connected {
            Ok(client) => return client,
            Err(e) => assert!(
                tokio::time::Instant::now() < deadline,
                "no registry on 127.0.0.1:50051 after 20 s: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_runs_as_written_from_the_root_and_from_another_folder() {
    let Some(_) = mesh::on_path("grpcurl", "scripts/test.sh installs it") else {
        return;
    };
    let Some(binaries) = BINARIES
        .iter()
        .map(|name| process::binary(name))
        .collect::<Option<Vec<PathBuf>>>()
    else {
        return;
    };
    let repo = std::fs::canonicalize(REPO).unwrap();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let section = section(&readme);
    assert_eq!(calls(section).len(), 5, "{section}");

    // From the repository root.
    let bin_dir = process::bin_dir();
    run_as_written(section, &repo, |line| {
        line.replacen("target/debug/", &format!("{}/", bin_dir.display()), 1)
    })
    .await;

    // From another folder, every command exactly as written.
    let elsewhere = tempfile::tempdir().unwrap();
    let debug = elsewhere.path().join("target/debug");
    std::fs::create_dir_all(&debug).unwrap();
    for (name, binary) in BINARIES.iter().zip(&binaries) {
        std::os::unix::fs::symlink(binary, debug.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(repo.join("examples"), elsewhere.path().join("examples")).unwrap();
    run_as_written(section, elsewhere.path(), str::to_owned).await;
}

/// One build for the demo, this section and the guides: `demo.sh` runs
/// the section's `cargo build` as it is, in sight (not `--quiet`), and
/// every binary path the newcomer's pages give is a debug build's.
#[test]
fn the_demo_and_the_pages_use_one_debug_build() {
    let repo = Path::new(REPO);
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let build = build_line(section(&readme));
    let demo = std::fs::read_to_string(repo.join("examples/demo.sh")).unwrap();
    let demo_builds: Vec<&str> = demo
        .lines()
        .map(str::trim)
        .filter(|line| line.starts_with("cargo build"))
        .collect();
    assert_eq!(
        demo_builds,
        [build.as_str()],
        "demo.sh builds as the README does"
    );
    assert_eq!(build, "cargo build --workspace --bins");
    let mut pages = vec![
        (
            "README.md, The two commands".to_owned(),
            section_named(&readme, "The two commands").to_owned(),
        ),
        (
            "README.md, Running it yourself".to_owned(),
            section(&readme).to_owned(),
        ),
    ];
    for page in [
        "examples/README.md",
        "examples/tools/README.md",
        "examples/agents/README.md",
        "docs/tools-in-any-language.md",
    ] {
        pages.push((
            page.to_owned(),
            std::fs::read_to_string(repo.join(page)).unwrap(),
        ));
    }
    for (page, text) in pages {
        for profile in ["target/release/", "--release"] {
            assert!(
                !text.contains(profile),
                "{page} names {profile}: the newcomer's pages use the debug build"
            );
        }
        assert!(
            text.contains("target/debug/") || text.contains("in debug"),
            "{page} says which build it uses"
        );
    }
}

/// The section's one `cargo build` line.
fn build_line(section: &str) -> String {
    let builds: Vec<String> = markdown::bodies(section, "sh")
        .iter()
        .flat_map(|body| body.lines())
        .map(str::trim)
        .filter(|line| line.starts_with("cargo build"))
        .map(str::to_owned)
        .collect();
    assert_eq!(builds.len(), 1, "one build: {builds:?}");
    builds.into_iter().next().unwrap()
}

#[test]
fn the_section_parses_into_servers_and_calls() {
    let readme = std::fs::read_to_string(Path::new(REPO).join("README.md")).unwrap();
    let section = section(&readme);
    assert_eq!(
        servers(section),
        [
            "target/debug/toolmesh-registry",
            "target/debug/inventory-service",
            "target/debug/toolmesh-sidecar --config examples/demo/sidecar.yaml"
        ]
    );
    for port in PORTS {
        assert!(
            section.contains(&format!("`127.0.0.1:{port}`")),
            "the section says where each server listens: {port}"
        );
    }
    let calls = calls(section);
    assert!(
        calls
            .iter()
            .all(|c| c.command.starts_with("grpcurl -plaintext "))
    );
    assert!(calls.iter().all(|c| !c.expected.trim().is_empty()));
}
