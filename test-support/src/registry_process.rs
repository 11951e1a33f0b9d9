//! The `toolmesh-registry` binary as a process: its output in a file (so
//! it is not a terminal), its address read from its "listening" line.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::Duration,
};

use tokio::process::{Child, Command};

/// Variables the registry reads that the test's own environment must not
/// leak into it.
const CLEARED_ENV: [&str; 27] = [
    "RUST_LOG",
    "NO_COLOR",
    "TOOLMESH_LOG_FORMAT",
    "TOOLMESH_LOG_CALLS",
    "TOOLMESH_LISTEN",
    "TOOLMESH_SEARCH_MODEL",
    "TOOLMESH_SEARCH_THREADS",
    "TOOLMESH_MCP_DISCOVERY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SERVICE_NAME",
    "TOOLMESH_ADMIN_LISTEN",
    "TOOLMESH_METRICS_MAX_TOOLS",
    "TOOLMESH_MCP_LISTEN",
    "TOOLMESH_CONSOLE_LISTEN",
    "TOOLMESH_CONSOLE_SESSION_TTL",
    "TOOLMESH_MCP_CALL_TIMEOUT",
    "TOOLMESH_MCP_MAX_SESSIONS",
    "TOOLMESH_MCP_SESSION_IDLE_TIMEOUT",
    "TOOLMESH_MCP_PAGE_SIZE",
    "TOOLMESH_MCP_SEARCH_TOOL",
    "TOOLMESH_MCP_ALLOWED_HOSTS",
    "TOOLMESH_MCP_ALLOWED_ORIGINS",
    "TOOLMESH_WORKER_THREADS",
];

/// A `toolmesh-registry` process with stdout and stderr in `registry.log`
/// in a temporary directory. Killed when dropped.
pub struct RegistryProcess {
    child: Child,
    dir: tempfile::TempDir,
}

impl RegistryProcess {
    /// Starts `binary` with `args` and `envs` (nothing else from the
    /// registry's own variables) and waits for its "listening" line.
    pub async fn start(binary: &Path, args: &[&str], envs: &[(&str, &str)]) -> (Self, SocketAddr) {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("create the log");
        let log_too = log.try_clone().expect("share the log");
        let mut command = command(binary, args, envs);
        command.stdout(log).stderr(log_too).kill_on_drop(true);
        let child = command.spawn().expect("start toolmesh-registry");
        let mut process = Self { child, dir };
        let addr = process.listening(Duration::from_secs(20)).await;
        (process, addr)
    }

    /// Its process id (for signals).
    pub fn pid(&self) -> u32 {
        self.child.id().expect("toolmesh-registry still runs")
    }

    /// Everything it printed so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("registry.log")
    }

    async fn listening(&mut self, within: Duration) -> SocketAddr {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(addr) = self.log().lines().find_map(listening_address) {
                return addr;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "toolmesh-registry exited ({status}) before listening:\n{}",
                    self.log()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "toolmesh-registry did not listen within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// What a run that ended printed.
pub struct Finished {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `binary` with `args` and `envs` until it exits (at most 20 s).
pub async fn run_to_exit(binary: &Path, args: &[&str], envs: &[(&str, &str)]) -> Finished {
    let mut command = command(binary, args, envs);
    command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(20), command.output())
        .await
        .unwrap_or_else(|_| panic!("toolmesh-registry {args:?} still runs after 20 s"))
        .expect("run toolmesh-registry");
    Finished {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn command(binary: &Path, args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut command = Command::new(binary);
    command.args(args).stdin(Stdio::null());
    for key in CLEARED_ENV {
        command.env_remove(key);
    }
    command.envs(envs.iter().copied());
    command
}

/// The address in the "toolmesh registry listening" line, text or JSON.
pub fn listening_address(line: &str) -> Option<SocketAddr> {
    if !line.contains("toolmesh registry listening") {
        return None;
    }
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(line) {
        return json["address"].as_str()?.parse().ok();
    }
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("address="))
        .and_then(|addr| addr.parse().ok())
}
