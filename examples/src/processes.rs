//! Child processes of the demo: each one's stdout and stderr go to
//! `<log dir>/<name>.log`; they stop with SIGTERM, then SIGKILL after a
//! grace period; and none outlives the [`Supervisor`], even on an error or a
//! panic (its `Drop` stops what is left, and every child is spawned with
//! `kill_on_drop`).
//!
//! A pid is only ever signalled while the child is unreaped (`try_wait`
//! says it is still running), so a recycled pid is never hit.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

/// How long `Drop` waits after SIGTERM before SIGKILL.
const DROP_GRACE: Duration = Duration::from_secs(3);

/// Lines of a child's log shown when it fails.
const LOG_TAIL_LINES: usize = 15;

struct Managed {
    name: String,
    pid: u32,
    child: Child,
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It had exited before it was asked to.
    AlreadyExited,
    /// It exited after SIGTERM, within the grace period.
    Terminated,
    /// It ignored SIGTERM for the grace period and was killed.
    Killed,
}

/// One stopped child.
#[derive(Debug)]
pub struct Stopped {
    /// The name it was spawned with.
    pub name: String,
    /// Its pid.
    pub pid: u32,
    /// How it ended.
    pub ending: Ending,
    /// Its exit status, if it could be collected.
    pub status: Option<ExitStatus>,
}

/// Owns the demo's child processes.
pub struct Supervisor {
    log_dir: PathBuf,
    children: Vec<Managed>,
}

impl Supervisor {
    /// A supervisor writing child logs to `log_dir`.
    pub fn new(log_dir: impl Into<PathBuf>) -> Self {
        Self {
            log_dir: log_dir.into(),
            children: Vec::new(),
        }
    }

    /// Where the log of the child `name` goes.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.log_dir.join(format!("{name}.log"))
    }

    /// Starts `program` with `args` as the child `name`; returns its pid.
    pub fn spawn<I, S>(&mut self, name: &str, program: &Path, args: I) -> anyhow::Result<u32>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let log_path = self.log_path(name);
        let log = File::create(&log_path)
            .with_context(|| format!("cannot create {}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .context("cannot duplicate a log file handle")?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {name} ({})", program.display()))?;
        let pid = child.id().context("a just-spawned child has no pid")?;
        self.children.push(Managed {
            name: name.to_owned(),
            pid,
            child,
        });
        Ok(pid)
    }

    /// An error naming the first child that has exited (with the end of its
    /// log), if any has.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for managed in &mut self.children {
            if let Some(status) = managed.child.try_wait().context("cannot poll a child")? {
                let log = self.log_dir.join(format!("{}.log", managed.name));
                return Err(anyhow!(
                    "{} (pid {}) exited unexpectedly with {status}; end of {}:\n{}",
                    managed.name,
                    managed.pid,
                    log.display(),
                    log_tail(&log)
                ));
            }
        }
        Ok(())
    }

    /// Completes with an error (see [`Self::check_running`]) as soon as a
    /// child exits; never completes while they all run.
    pub async fn first_exit(&mut self) -> anyhow::Error {
        loop {
            if let Err(e) = self.check_running() {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops every child, the last started first: SIGTERM, up to `grace`
    /// to exit, then SIGKILL.
    pub async fn stop_all(&mut self, grace: Duration) -> Vec<Stopped> {
        let mut stopped = Vec::new();
        while let Some(mut managed) = self.children.pop() {
            let (ending, status) = stop(&mut managed, grace).await;
            stopped.push(Stopped {
                name: managed.name,
                pid: managed.pid,
                ending,
                status,
            });
        }
        stopped
    }
}

async fn stop(managed: &mut Managed, grace: Duration) -> (Ending, Option<ExitStatus>) {
    match managed.child.try_wait() {
        Ok(Some(status)) => return (Ending::AlreadyExited, Some(status)),
        Ok(None) => {}
        Err(_) => return (Ending::AlreadyExited, None),
    }
    if let Ok(pid) = i32::try_from(managed.pid) {
        // ESRCH cannot happen for an unreaped child; anything else falls
        // through to SIGKILL below.
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if let Ok(Ok(status)) = tokio::time::timeout(grace, managed.child.wait()).await {
        return (Ending::Terminated, Some(status));
    }
    let _ = managed.child.start_kill();
    let status = tokio::time::timeout(grace, managed.child.wait())
        .await
        .ok()
        .and_then(Result::ok);
    (Ending::Killed, status)
}

impl Drop for Supervisor {
    /// The error and panic path: SIGTERM to every child still running, a
    /// short grace, SIGKILL for the rest. Blocks the thread briefly.
    fn drop(&mut self) {
        if self.children.is_empty() {
            return;
        }
        for managed in &mut self.children {
            if matches!(managed.child.try_wait(), Ok(None))
                && let Ok(pid) = i32::try_from(managed.pid)
            {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + DROP_GRACE;
        while Instant::now() < deadline
            && self
                .children
                .iter_mut()
                .any(|m| matches!(m.child.try_wait(), Ok(None)))
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        for managed in &mut self.children {
            if matches!(managed.child.try_wait(), Ok(None)) {
                let _ = managed.child.start_kill();
                let deadline = Instant::now() + Duration::from_secs(1);
                while Instant::now() < deadline && matches!(managed.child.try_wait(), Ok(None)) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

/// The last lines of a log file, indented, or why it cannot be read.
pub fn log_tail(path: &Path) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(LOG_TAIL_LINES);
            lines[start..]
                .iter()
                .map(|line| format!("    | {line}"))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Err(e) => format!("    (cannot read the log: {e})"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn gone(pid: u32) -> bool {
        !Path::new(&format!("/proc/{pid}")).exists()
    }

    #[tokio::test]
    async fn sigterm_stops_a_well_behaved_child() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path());
        let pid = supervisor
            .spawn("sleeper", Path::new("sleep"), ["30"])
            .unwrap();
        supervisor.check_running().unwrap();
        let stopped = supervisor.stop_all(Duration::from_secs(5)).await;
        assert_eq!(stopped[0].ending, Ending::Terminated);
        assert!(gone(pid));
    }

    #[tokio::test]
    async fn a_child_ignoring_sigterm_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path());
        let pid = supervisor
            .spawn(
                "stubborn",
                Path::new("sh"),
                ["-c", "trap '' TERM; echo ignoring; exec sleep 30"],
            )
            .unwrap();
        // The shell says when SIGTERM is ignored (`exec` keeps it so).
        let log = supervisor.log_path("stubborn");
        toolmesh_test_support::wait::wait_until(
            Duration::from_secs(10),
            "the child to ignore SIGTERM",
            || std::fs::read_to_string(&log).is_ok_and(|text| text.contains("ignoring")),
        )
        .await;
        let stopped = supervisor.stop_all(Duration::from_millis(300)).await;
        assert_eq!(stopped[0].ending, Ending::Killed);
        assert!(gone(pid));
    }

    #[tokio::test]
    async fn an_early_exit_is_reported_with_its_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path());
        supervisor
            .spawn("failing", Path::new("sh"), ["-c", "echo boom >&2; exit 3"])
            .unwrap();
        let error = tokio::time::timeout(Duration::from_secs(5), supervisor.first_exit())
            .await
            .unwrap();
        let message = error.to_string();
        assert!(message.contains("failing"), "{message}");
        assert!(message.contains("boom"), "{message}");
    }

    #[tokio::test]
    async fn drop_stops_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let mut supervisor = Supervisor::new(dir.path());
        let pid = supervisor
            .spawn("sleeper", Path::new("sleep"), ["30"])
            .unwrap();
        drop(supervisor);
        assert!(gone(pid));
    }
}
