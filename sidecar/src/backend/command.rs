//! A command as a tool: the arguments JSON goes to its stdin, its stdout is
//! the result. The caller and the invocation id are in its environment
//! ([`CALLER_ENV`], [`INVOCATION_ID_ENV`]), empty when there is none, so a
//! value the sidecar itself was started with never reaches the tool; so is
//! the call's W3C trace context (`TRACEPARENT`, `TRACESTATE`, unset when
//! there is none).
//!
//! A line of stderr of the form `toolmesh-progress {"fraction": 0.5,
//! "message": "step 2 of 4"}` reports the call's progress when it runs as
//! a task ([`crate::progress`]); such lines are never part of the stderr
//! an error result carries.
//!
//! The command runs in its own process group. When the deadline passes or
//! the call is dropped, the whole group is killed (`SIGKILL`), so helpers the
//! command started do not outlive it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use crate::context::{CALLER_ENV, CallContext, INVOCATION_ID_ENV, config_env};
use crate::tool::{Backend, BackendError, Outcome};
use toolmesh_proto::deadline::Deadline;
use toolmesh_telemetry::propagation::{TRACEPARENT_ENV, TRACESTATE_ENV};

mod stderr;

/// Most stderr kept for an error message.
const MAX_STDERR_BYTES: usize = 64 * 1024;

/// How long to wait for a killed command to be reaped.
const REAP_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs a program per call.
#[derive(Debug, Clone)]
pub struct CommandBackend {
    program: PathBuf,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    max_output_bytes: usize,
}

impl CommandBackend {
    /// A backend running `program` with `args`, extra `env` variables and
    /// working directory `cwd` (the sidecar's if `None`). Paths are used as
    /// given: resolve them before (see [`crate::config`]). Stdout beyond
    /// `max_output_bytes` is discarded, which the runtime reports as too large.
    pub fn new(
        program: PathBuf,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
        max_output_bytes: usize,
    ) -> Self {
        Self {
            program,
            args,
            env,
            cwd,
            max_output_bytes,
        }
    }
}

/// Kills a process group with `SIGKILL` when dropped, unless disarmed.
struct GroupKiller(Option<Pid>);

impl GroupKiller {
    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (already gone) is fine.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Reads at most `limit + 1` bytes and discards the rest, so the writer
/// never blocks on a full pipe.
async fn read_bounded(
    mut reader: impl AsyncRead + Unpin,
    limit: usize,
) -> std::io::Result<Vec<u8>> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            return Ok(kept);
        }
        let room = (limit + 1).saturating_sub(kept.len());
        kept.extend_from_slice(&buf[..n.min(room)]);
    }
}

fn describe_exit(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "abnormal exit".to_owned(),
    }
}

#[async_trait]
impl Backend for CommandBackend {
    async fn call(
        &self,
        arguments_json: &str,
        context: &CallContext,
        deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        context.check()?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .envs(&self.env)
            .env(CALLER_ENV, &context.caller)
            .env(INVOCATION_ID_ENV, &context.invocation_id)
            .envs(config_env(&context.config))
            .env_remove(TRACEPARENT_ENV)
            .env_remove(TRACESTATE_ENV)
            .envs(context.trace.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        let mut child = command.spawn().map_err(|source| BackendError::Spawn {
            program: self.program.display().to_string(),
            source,
        })?;
        // process_group(0): the group id is the child's pid.
        let mut killer = GroupKiller(
            child
                .id()
                .and_then(|pid| i32::try_from(pid).ok())
                .map(Pid::from_raw),
        );
        let (Some(mut stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(BackendError::Internal("command pipes missing".into()));
        };

        let input = arguments_json.as_bytes().to_vec();
        let write = async move {
            // A command that ignores its input may close stdin early.
            match stdin.write_all(&input).await {
                Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e),
                _ => Ok(()),
            }
            // `stdin` dropped here: the command sees end of input.
        };
        let work = async {
            let (written, out, err) = tokio::join!(
                write,
                read_bounded(stdout, self.max_output_bytes),
                stderr::read(stderr, MAX_STDERR_BYTES, context.progress()),
            );
            written?;
            let status = child.wait().await?;
            Ok::<_, std::io::Error>((status, out?, err?))
        };
        let finished = tokio::time::timeout_at(deadline.at(), work).await;
        let Ok(result) = finished else {
            killer.kill();
            // Reap the command so no zombie is left behind.
            let _ = tokio::time::timeout(REAP_TIMEOUT, child.wait()).await;
            return Err(BackendError::DeadlineExceeded);
        };
        let (status, stdout, stderr) = result.map_err(BackendError::Io)?;
        // The command exited and was reaped: its group id may be reused.
        killer.0 = None;
        if status.success() {
            return Ok(Outcome::ok(String::from_utf8_lossy(&stdout).into_owned()));
        }
        let stderr = String::from_utf8_lossy(&stderr);
        let stdout = String::from_utf8_lossy(&stdout);
        let detail = if stderr.trim().is_empty() {
            stdout.trim()
        } else {
            stderr.trim()
        };
        let exit = describe_exit(status);
        let message = if detail.is_empty() {
            format!("command failed ({exit})")
        } else {
            format!("command failed ({exit}): {detail}")
        };
        Ok(Outcome::error_message(&message))
    }
}
