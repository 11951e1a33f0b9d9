//! How a failed command ends: an exit code a script can tell apart, and a
//! message a person (or, with `--output json`, a program) can act on,
//! decoded from the registry's status and its google.rpc details.

use std::time::Duration;

use serde_json::{Value, json};
use tonic::Code;
use tonic_types::StatusExt as _;

/// The exit codes, the same as the example agents'.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Any other error.
    Other = 1,
    /// A bad command line.
    Usage = 2,
    /// Rate limited (`RESOURCE_EXHAUSTED`).
    Limited = 3,
    /// The tool ran and reported a failure (`is_error`).
    ToolFailed = 4,
    /// Invalid arguments (`INVALID_ARGUMENT`), or an invalid config (`check`).
    Invalid = 5,
    /// No such tool (`NOT_FOUND`).
    NotFound = 6,
    /// The deadline passed (`DEADLINE_EXCEEDED`).
    Timeout = 7,
    /// The registry or the tool is unreachable (`UNAVAILABLE`).
    Unavailable = 8,
    /// No credential, or one refused (`UNAUTHENTICATED`, `PERMISSION_DENIED`).
    Unauthenticated = 9,
    /// Interrupted (Ctrl-C) while waiting for a task, which goes on: 128 +
    /// SIGINT, as a shell shows for an interrupted command.
    Interrupted = 130,
    /// Standard output is a pipe whose reader has gone (`toolmesh watch |
    /// head -1`): 128 + SIGPIPE, the status a shell shows for `ls | head`,
    /// and nothing printed.
    BrokenPipe = 141,
}

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    /// How the process exits.
    pub(crate) exit: Exit,
    /// One line saying what failed.
    pub(crate) message: String,
    /// What the details say: each field to fix, the wait before a retry.
    pub(crate) details: Vec<String>,
    /// The same, for `--output json`.
    pub(crate) json: Value,
}

impl Failure {
    /// A failure that is not the registry's answer.
    pub(crate) fn plain(exit: Exit, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            exit,
            json: json!({"error": {"message": message}}),
            message,
            details: Vec::new(),
        }
    }

    /// Standard output's reader has gone: end quietly.
    pub(crate) fn broken_pipe() -> Self {
        Self::plain(Exit::BrokenPipe, "standard output is closed")
    }

    /// `status` from the registry at `url`: [`Self::from_status`], unless
    /// the registry was never reached, which names `url` and why.
    pub(crate) fn at(url: &str, status: &tonic::Status) -> Self {
        match unreachable(status) {
            Some(why) => {
                Self::unavailable(format!("cannot reach the registry at {url}: {why}"), url)
            }
            None => Self::from_status(status),
        }
    }

    /// The registry at `url` answers but is not ready, for `why`.
    pub(crate) fn not_ready(url: &str, why: &str) -> Self {
        Self::unavailable(format!("the registry at {url} is not ready: {why}"), url)
    }

    fn unavailable(message: String, url: &str) -> Self {
        Self {
            exit: Exit::Unavailable,
            json: json!({"error": {"code": "UNAVAILABLE", "message": message, "registry": url}}),
            message,
            details: Vec::new(),
        }
    }

    /// What the registry answered, with its details decoded.
    pub(crate) fn from_status(status: &tonic::Status) -> Self {
        let exit = match status.code() {
            Code::ResourceExhausted => Exit::Limited,
            Code::InvalidArgument => Exit::Invalid,
            Code::NotFound => Exit::NotFound,
            Code::DeadlineExceeded => Exit::Timeout,
            Code::Unavailable => Exit::Unavailable,
            Code::Unauthenticated | Code::PermissionDenied => Exit::Unauthenticated,
            _ => Exit::Other,
        };
        let details = status.get_error_details();
        let mut lines = Vec::new();
        let mut error = serde_json::Map::new();
        error.insert(
            "code".into(),
            toolmesh_proto::code::name(status.code()).into(),
        );
        error.insert("message".into(), status.message().into());
        if let Some(bad) = details.bad_request() {
            let violations: Vec<Value> = bad
                .field_violations
                .iter()
                .map(|v| json!({"field": v.field, "description": v.description}))
                .collect();
            for v in &bad.field_violations {
                let field = if v.field.is_empty() {
                    "(arguments)"
                } else {
                    &v.field
                };
                lines.push(format!("{field}: {}", v.description));
            }
            error.insert("violations".into(), violations.into());
        }
        if let Some(delay) = details.retry_info().and_then(|r| r.retry_delay) {
            lines.push(format!("retry in {}", seconds(delay)));
            error.insert("retry_after_seconds".into(), delay.as_secs_f64().into());
        }
        if let Some(quota) = details.quota_failure() {
            for v in &quota.violations {
                lines.push(format!("quota {}: {}", v.subject, v.description));
            }
        }
        if let Some(resource) = details.resource_info()
            && !resource.description.is_empty()
        {
            lines.push(resource.description.clone());
        }
        Self {
            exit,
            message: format!(
                "{}: {}",
                toolmesh_proto::code::name(status.code()),
                status.message()
            ),
            details: lines,
            json: json!({ "error": error }),
        }
    }
}

impl From<tonic::Status> for Failure {
    fn from(status: tonic::Status) -> Self {
        Self::from_status(&status)
    }
}

/// Why the registry was never reached, when `status` says so (the
/// connection failed; the registry sent nothing): the system's reason,
/// `connection refused`, or the resolver's, TLS's.
fn unreachable(status: &tonic::Status) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    let mut connecting = false;
    while let Some(error) = source {
        connecting |= error.is::<tonic::ConnectError>();
        if connecting && let Some(io) = error.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            return Some(match io.kind() {
                K::ConnectionRefused
                | K::ConnectionReset
                | K::HostUnreachable
                | K::NetworkUnreachable
                | K::TimedOut
                | K::AddrNotAvailable => io.kind().to_string(),
                _ => io.to_string(),
            });
        }
        source = error.source();
    }
    connecting.then(|| status.message().to_owned())
}

/// `delay` for people: `1.5s`, `250ms`.
fn seconds(delay: Duration) -> String {
    if delay < Duration::from_secs(1) {
        format!("{}ms", delay.as_millis().max(1))
    } else {
        format!("{:.1}s", delay.as_secs_f64())
    }
}
