//! Real processes: the workspace's binaries, a `toolmesh-sidecar` process
//! that reports where it listens, and "is this pid dead?".

use std::{
    net::SocketAddr,
    os::unix::process::ExitStatusExt as _,
    path::{Path, PathBuf},
    process::{ExitStatus, Stdio},
    time::Duration,
};

use nix::{sys::signal::Signal, unistd::Pid};
use tokio::process::{Child, Command};

use crate::suite;

/// Where the workspace's binaries are: `TOOLMESH_BIN_DIR`, else
/// `$CARGO_TARGET_DIR/debug`, else the workspace's `target/debug`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOOLMESH_BIN_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("debug");
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug")
}

/// The workspace binary `name` (e.g. `toolmesh-sidecar`), or `None` after
/// [`suite::skip`] when it is not built.
pub fn binary(name: &str) -> Option<PathBuf> {
    let path = bin_dir().join(name);
    suite::require(
        name,
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{} is not built: cargo build --workspace --bins",
                path.display()
            ))
        },
    )
}

/// The registry and sidecar binaries, when both are built (see
/// [`binary`]).
pub fn binaries() -> Option<(PathBuf, PathBuf)> {
    Some((binary("toolmesh-registry")?, binary("toolmesh-sidecar")?))
}

/// Whether process `pid` no longer runs: gone, or a zombie its parent has
/// not reaped yet.
pub fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// A `toolmesh-sidecar` process with its config in a temporary directory
/// and its output (logs go to stdout) in `sidecar.log` beside it. Killed
/// when dropped.
pub struct SidecarProcess {
    child: Child,
    /// Its pid.
    pub pid: u32,
    dir: tempfile::TempDir,
}

impl SidecarProcess {
    /// Starts `binary` with `yaml` as its config and `args` after
    /// `--config`, logging at `info` without colour. Does not wait.
    pub fn spawn(binary: &Path, yaml: &str, args: &[&str], envs: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("sidecar.yaml");
        std::fs::write(&config, yaml).expect("write the sidecar config");
        let log = std::fs::File::create(dir.path().join("sidecar.log")).expect("create the log");
        let log_too = log.try_clone().expect("share the log");
        let mut command = Command::new(binary);
        command
            .arg("--config")
            .arg(&config)
            .args(args)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_too)
            .kill_on_drop(true);
        for (key, value) in envs {
            command.env(key, value);
        }
        let child = command.spawn().expect("start toolmesh-sidecar");
        let pid = child.id().expect("a just-spawned child has a pid");
        Self { child, pid, dir }
    }

    /// Starts `binary` serving `yaml` on a loopback port of its choosing,
    /// announcing to `registry` as `instance`, and waits until it is bound.
    pub async fn start(binary: &Path, registry: &str, instance: &str, yaml: &str) -> Self {
        let mut process = Self::spawn(
            binary,
            yaml,
            &[
                "--registry",
                registry,
                "--listen",
                "127.0.0.1:0",
                "--instance-id",
                instance,
            ],
            &[],
        );
        process.bound(Duration::from_secs(20)).await;
        process
    }

    /// The config file's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sidecar.log")).unwrap_or_default()
    }

    /// Waits for its "bound" log line and returns the address in it; panics
    /// with the log if it exits first or `within` passes.
    pub async fn bound(&mut self, within: Duration) -> SocketAddr {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(addr) = self.log().lines().find_map(bound_address) {
                return addr;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "toolmesh-sidecar exited ({status}) before binding:\n{}",
                    self.log()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "toolmesh-sidecar did not bind within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sends `signal`; panics if it cannot be delivered.
    pub fn signal(&self, signal: Signal) {
        send(self.pid, signal);
    }

    /// Waits for it to exit, for at most `within`.
    pub async fn exited(&mut self, within: Duration) -> ExitStatus {
        match tokio::time::timeout(within, self.child.wait()).await {
            Ok(Ok(status)) => status,
            Ok(Err(e)) => panic!("cannot wait for toolmesh-sidecar: {e}"),
            Err(_) => panic!(
                "toolmesh-sidecar still runs after {within:?}:\n{}",
                self.log()
            ),
        }
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL; returns once it is reaped, having checked that SIGKILL is
    /// what ended it.
    pub async fn kill(mut self) {
        self.signal(Signal::SIGCONT);
        self.signal(Signal::SIGKILL);
        let status = self.exited(Duration::from_secs(10)).await;
        assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status}");
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // A stopped process must be continued to die promptly.
            if let Ok(pid) = i32::try_from(self.pid) {
                let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGCONT);
            }
            let _ = self.child.start_kill();
        }
    }
}

/// Sends `signal` to `pid`; panics if it cannot be delivered (no such
/// process, no permission), so a fault that was not injected is noticed.
pub fn send(pid: u32, signal: Signal) {
    let raw = i32::try_from(pid).expect("pid fits in i32");
    nix::sys::signal::kill(Pid::from_raw(raw), signal)
        .unwrap_or_else(|e| panic!("cannot send {signal} to pid {pid}: {e}"));
}

/// The address in a sidecar's `bound addr=…` log line.
fn bound_address(line: &str) -> Option<SocketAddr> {
    if !line.contains(" bound ") && !line.ends_with(" bound") {
        return None;
    }
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("addr="))
        .and_then(|addr| addr.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_bound_address() {
        let line = "2026-11-30T17:00:00.000000Z  INFO toolmesh_sidecar: bound addr=127.0.0.1:41234 tools=2";
        assert_eq!(
            bound_address(line),
            Some("127.0.0.1:41234".parse().unwrap_or_else(|_| unreachable!()))
        );
        assert_eq!(bound_address("INFO sidecar serving addr=127.0.0.1:1"), None);
    }

    #[test]
    fn a_live_process_is_not_dead_and_a_reaped_one_is() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        assert!(!is_dead(pid));
        child.kill().expect("kill");
        child.wait().expect("reap");
        assert!(is_dead(pid));
    }
}
