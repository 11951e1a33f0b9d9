//! The registry's errors, and the one place they become `tonic::Status`.

use std::time::Duration;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};
use toolmesh_telemetry::shown::{CLIPPED_MAX, Clipped, QUOTED_MAX, Quoted, clip};

/// Most violations listed in an error's message; the details carry up to
/// [`DETAILED_VIOLATIONS`].
const SUMMARIZED_VIOLATIONS: usize = 4;

/// Most field violations (or conflicting fields) in an error's details:
/// with every text in them bounded, an error stays far below a default
/// gRPC client's 8 KiB metadata limit however large the input was.
pub const DETAILED_VIOLATIONS: usize = 8;

/// Most bytes of a violation's message shown (it may quote the value).
const VIOLATION_MAX: usize = 256;

/// The google.rpc `ResourceInfo.resource_type` of a tool.
pub const TOOL_RESOURCE_TYPE: &str = "toolmesh.v1.Tool";

/// The google.rpc `ResourceInfo.resource_type` of a task.
pub const TASK_RESOURCE_TYPE: &str = "toolmesh.v1.Task";

/// The google.rpc `ErrorInfo.domain` of the registry's own reasons.
pub const ERROR_DOMAIN: &str = "toolmesh.dev";

/// One way the arguments fail the tool's input schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// JSON Pointer (RFC 6901) to the offending value; `""` is the whole
    /// argument object. For a missing required property it points at the
    /// property that should be there.
    pub pointer: String,
    /// What is wrong, in words an LLM can act on.
    pub message: String,
}

/// A call held for approval, as `ApprovalRequired` names it.
#[derive(Debug)]
pub struct HeldCall {
    /// The task the call became.
    pub task: String,
    /// The tool.
    pub tool: String,
    /// The rule that holds it.
    pub rule: String,
    /// The rule's reason.
    pub reason: String,
    /// Who may decide it, in words.
    pub approvers: String,
    /// When it expires (Unix ms).
    pub until_ms: u64,
}

/// A call bound to a definition that is no longer the tool's, as
/// `ToolChanged` names it.
#[derive(Debug)]
pub struct ToolChange {
    /// The tool.
    pub tool: String,
    /// The digest the agent was shown.
    pub shown: String,
    /// The live definition's digest.
    pub live: String,
    /// Each changed field and how, if the shown definition is known here.
    pub changes: Option<Vec<(&'static str, String)>>,
}

impl ToolChange {
    /// The changed fields, comma-separated, or `unknown`.
    fn fields(&self) -> String {
        self.changes.as_ref().map_or_else(
            || "unknown".into(),
            |changes| {
                changes
                    .iter()
                    .map(|(field, _)| *field)
                    .collect::<Vec<_>>()
                    .join(",")
            },
        )
    }
}

impl std::fmt::Display for ToolChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "tool {} is not the definition the agent was shown (digest {}, live {}): ",
            Quoted(&self.tool),
            Clipped(&self.shown),
            self.live
        )?;
        match &self.changes {
            Some(_) => write!(f, "its {} changed", self.fields())?,
            None => write!(f, "the shown definition is not one this registry served")?,
        }
        write!(f, "; nothing ran: fetch its definition again (GetTool)")
    }
}

/// Versions as an error lists them (`unversioned` for the empty one).
fn versions_text(versions: &[String]) -> String {
    let shown: Vec<&str> = versions
        .iter()
        .take(16)
        .map(|v| {
            if v.is_empty() {
                "unversioned"
            } else {
                v.as_str()
            }
        })
        .collect();
    if shown.is_empty() {
        "none".into()
    } else {
        shown.join(", ")
    }
}

/// Everything that can go wrong in the registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// No live instance serves a tool of this name.
    #[error("tool {} not found", Quoted(.tool))]
    ToolNotFound {
        /// The requested tool name.
        tool: String,
    },
    /// The tool is live, but not at this version.
    #[error("tool {} has no live version {}; its live versions: {}", Quoted(.tool), Quoted(.version), versions_text(.live))]
    VersionNotFound {
        /// The tool.
        tool: String,
        /// The version asked for.
        version: String,
        /// Its live versions, the default first.
        live: Vec<String>,
    },
    /// `arguments_json` is not JSON.
    #[error("arguments are not valid JSON: {} at line {line} column {column}", Clipped(.message))]
    ArgumentsNotJson {
        /// The parser's message, without the position.
        message: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
    },
    /// An object in `arguments_json` has a key twice.
    #[error("arguments have the key {} twice in the object at {}: a key may appear once in a JSON object", Quoted(.key), Quoted(.pointer))]
    ArgumentsDuplicateKey {
        /// JSON Pointer to the object (`""`: the arguments themselves).
        pointer: String,
        /// The repeated key.
        key: String,
    },
    /// `arguments_json` is larger than the registry accepts.
    #[error("arguments are {size} bytes, more than the limit of {limit}")]
    ArgumentsTooLarge {
        /// Size of the arguments in bytes.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The arguments fail the tool's input schema.
    #[error("arguments do not match the input schema of {}: {}", Quoted(.tool), summarize(.violations))]
    ArgumentsInvalid {
        /// The tool.
        tool: String,
        /// Every violation found (capped).
        violations: Vec<Violation>,
    },
    /// The tool's rate limit, or its caller's on it, has no token left
    /// for this call.
    #[error("{}rate limit of {} exceeded ({rate}/s, burst {burst}); retry in {}", caller_part(.caller.as_deref()), Quoted(.tool), rounded(*.retry_after))]
    RateLimited {
        /// The tool.
        tool: String,
        /// The caller, when it was the caller's own limit on the tool.
        caller: Option<String>,
        /// Time until the next token.
        retry_after: Duration,
        /// The limit's rate per second.
        rate: f64,
        /// The limit's burst.
        burst: u32,
    },
    /// Every instance was tried, or none is live.
    #[error("no healthy instance of {} ({})", Quoted(.tool), Clipped(.detail))]
    NoHealthyInstance {
        /// The tool.
        tool: String,
        /// What happened on the last attempt.
        detail: String,
    },
    /// The call's deadline passed before the tool answered.
    #[error("deadline of {} exceeded calling {}", rounded(*.deadline), Quoted(.tool))]
    DeadlineExceeded {
        /// The tool.
        tool: String,
        /// The deadline the call had.
        deadline: Duration,
    },
    /// The agent went away before the tool answered.
    #[error("call to {} cancelled", Quoted(.tool))]
    Cancelled {
        /// The tool.
        tool: String,
    },
    /// The sidecar answered with a status the registry passes through as-is
    /// (e.g. INTERNAL from a failing sidecar).
    #[error("instance {} of {} failed: {}", Quoted(.instance), Quoted(.tool), Clipped(.message))]
    Upstream {
        /// The tool.
        tool: String,
        /// The instance that answered.
        instance: String,
        /// The sidecar's status code.
        code: Code,
        /// The sidecar's message.
        message: String,
    },
    /// An announce carried a descriptor that breaks the rules (name, limits).
    #[error("descriptor of {} is invalid: {}", Quoted(.tool), Clipped(.reason))]
    InvalidDescriptor {
        /// The tool.
        tool: String,
        /// The field the problem is in (e.g. `tools[0].name`).
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// An announce carried a JSON Schema that does not compile.
    #[error("{} of {} is not a usable JSON Schema: {}", Clipped(.field), Quoted(.tool), Clipped(.reason))]
    InvalidSchema {
        /// The tool.
        tool: String,
        /// `input_schema_json` or `output_schema_json`, with its index.
        field: String,
        /// The compiler's message.
        reason: String,
    },
    /// An announce's descriptor differs from the one live instances serve.
    #[error("descriptor of {} conflicts with the one its live instances announced: {}", Quoted(.tool), listed(.differences))]
    DescriptorConflict {
        /// The tool.
        tool: String,
        /// One line per differing field, e.g. `version: "1.0" != "2.0"`.
        differences: Vec<String>,
    },
    /// A malformed request (missing id, bad endpoint URL, ...).
    #[error("{}: {}", Clipped(.field), Clipped(.reason))]
    InvalidRequest {
        /// The offending field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A heartbeat or withdraw named a lease the registry does not hold.
    #[error("lease {} not found; announce again", Quoted(.lease))]
    LeaseNotFound {
        /// The lease id.
        lease: String,
    },
    /// A bound on the catalog's size was reached.
    #[error("catalog full: {}", Clipped(.0))]
    CatalogFull(String),
    /// The shared catalog (Redis) could not be reached; try again.
    #[error("catalog store unavailable: {}", Clipped(.reason))]
    StoreUnavailable {
        /// Why.
        reason: String,
    },
    /// An idempotency key was used again with different arguments.
    #[error("idempotency key {} was used for {} with other arguments", Quoted(.key), Quoted(.tool))]
    IdempotencyKeyReused {
        /// The tool.
        tool: String,
        /// The key.
        key: String,
    },
    /// As many watch streams are open as the registry allows.
    #[error("too many watch streams: {reason}")]
    TooManyWatchers {
        /// Which limit, and its flag.
        reason: String,
    },
    /// A watch stream ended because the registry cannot go on feeding it
    /// (it is shutting down, its catalog closed): watch again, elsewhere.
    #[error("{reason}; watch again")]
    WatchInterrupted {
        /// Why.
        reason: &'static str,
    },
    /// A watch stream ended because what it shows no longer holds (the
    /// watcher fell behind, the call policy changed): watch again, and the
    /// new stream starts from what is true now.
    #[error("{reason}; watch again ({again})")]
    WatchOutdated {
        /// Why.
        reason: String,
        /// What the new stream starts with.
        again: &'static str,
    },
    /// The idempotency store holds as many calls in progress as it may.
    #[error("too many calls with idempotency keys in progress")]
    IdempotencyFull,
    /// No such task for this caller: unknown, forgotten after its
    /// retention, or another caller's (which is not told apart).
    #[error("task {} not found: unknown, expired, or not the caller's", Quoted(.id))]
    TaskNotFound {
        /// The task id asked for.
        id: String,
    },
    /// A limit on live tasks is reached.
    #[error(
        "{whose} already runs {limit} tasks, the most allowed (--{flag}); wait for one to end or cancel one"
    )]
    TasksFull {
        /// `the caller` or `the registry`.
        whose: &'static str,
        /// The limit.
        limit: usize,
        /// The flag that sets it.
        flag: &'static str,
    },
    /// A task report that does not come from the task's instance.
    #[error("the report token is not task {}'s: only the instance the task was given to reports it", Quoted(.id))]
    TaskReportRefused {
        /// The task reported.
        id: String,
    },
    /// A repeat of a call whose first run ended with this status.
    #[error("{}", Clipped(.message))]
    Replayed {
        /// The first run's status code.
        code: Code,
        /// The first run's status message.
        message: String,
    },
    /// The request carries no credential the registry accepts.
    #[error("unauthenticated: {}", Clipped(.reason))]
    Unauthenticated {
        /// What is missing or wrong (never the credential itself).
        reason: String,
    },
    /// The credential is known but may not do this.
    #[error("permission denied: {}", Clipped(.reason))]
    PermissionDenied {
        /// What was refused, and which rule refuses it.
        reason: String,
    },
    /// A pins operation on a registry started without `--pins-file`.
    #[error("this registry pins no definitions: start it with --pins-file (docs/versions.md)")]
    PinsOff,
    /// The call carried the digest of a definition the tool no longer has.
    #[error("{0}")]
    ToolChanged(Box<ToolChange>),
    /// The call waits for a person: it is a task, in `input_required`.
    #[error("the call to {} waits for approval by {} until {} (rule {}{}); it is task {}: watch it (Tasks.WatchTask) for its result", Quoted(&.0.tool), Clipped(&.0.approvers), rfc3339(.0.until_ms), Quoted(&.0.rule), reason_part(&.0.reason), .0.task)]
    ApprovalRequired(Box<HeldCall>),
    /// An approver denied the call.
    #[error("the call to {} was denied by {}: {}", Quoted(.tool), Quoted(.by), Clipped(.comment))]
    ApprovalDenied {
        /// The tool.
        tool: String,
        /// The approver.
        by: String,
        /// Their comment.
        comment: String,
    },
    /// No one decided the call in time.
    #[error("the call to {} expired at {} waiting for approval by {} (rule {}); nothing ran", Quoted(.tool), rfc3339(*.at_ms), Clipped(.approvers), Quoted(.rule))]
    ApprovalExpired {
        /// The tool.
        tool: String,
        /// The rule that held it.
        rule: String,
        /// Who could have decided it.
        approvers: String,
        /// When it expired (Unix ms).
        at_ms: u64,
    },
    /// The tool changed (or left) while the call waited: the approval is void.
    #[error("the approval of the call to {} is void: {}; nothing ran, call again", Quoted(.tool), Clipped(.why))]
    ApprovalVoid {
        /// The tool.
        tool: String,
        /// What changed.
        why: String,
    },
    /// A decision on an approval that is not pending.
    #[error("approval {} is {state}{}: it can no longer be decided", Quoted(.id), closed_part(.by))]
    ApprovalClosed {
        /// The approval (task) id.
        id: String,
        /// `approved`, `denied`, `expired`, `void`, `cancelled`.
        state: &'static str,
        /// Who decided it, if anyone.
        by: String,
    },
    /// A decision that names another call than the approval's.
    #[error("approval {}'s call digest is not {}: the call is not the one shown", Quoted(.id), Quoted(.digest))]
    ApprovalDigestMismatch {
        /// The approval (task) id.
        id: String,
        /// The digest the decision carried.
        digest: String,
    },
    /// The rate limiter could not decide, and the outage policy is to refuse
    /// calls to rate-limited tools.
    #[error("rate limiter unavailable for {}: {}", Quoted(.tool), Clipped(.reason))]
    LimiterUnavailable {
        /// The tool.
        tool: String,
        /// Why.
        reason: String,
    },
}

fn reason_part(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {}", Clipped(reason))
    }
}

fn closed_part(by: &str) -> String {
    if by.is_empty() {
        String::new()
    } else {
        format!(" by {}", Quoted(by))
    }
}

/// Unix milliseconds as RFC 3339, to the second.
fn rfc3339(ms: u64) -> humantime::Rfc3339Timestamp {
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
}

fn caller_part(caller: Option<&str>) -> String {
    caller.map_or_else(String::new, |c| format!("caller {}'s ", Quoted(c)))
}

/// A duration for people: rounded up to the millisecond (`833ms`, `2s 500ms`).
fn rounded(duration: Duration) -> humantime::FormattedDuration {
    let millis = u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    humantime::format_duration(Duration::from_millis(millis))
}

/// The first [`SUMMARIZED_VIOLATIONS`] violations, bounded, and how many
/// more there are.
fn summarize(violations: &[Violation]) -> String {
    let mut shown: Vec<String> = violations
        .iter()
        .take(SUMMARIZED_VIOLATIONS)
        .map(|v| {
            let message = clip(&v.message, VIOLATION_MAX);
            if v.pointer.is_empty() {
                message
            } else {
                format!("{}: {message}", clip(&v.pointer, QUOTED_MAX))
            }
        })
        .collect();
    if violations.len() > SUMMARIZED_VIOLATIONS {
        shown.push(format!(
            "and {} more in the details",
            violations.len() - SUMMARIZED_VIOLATIONS
        ));
    }
    shown.join("; ")
}

/// Conflicting fields, bounded as [`summarize`] bounds violations.
fn listed(differences: &[String]) -> String {
    let mut shown: Vec<String> = differences
        .iter()
        .take(DETAILED_VIOLATIONS)
        .map(|d| clip(d, VIOLATION_MAX))
        .collect();
    if differences.len() > DETAILED_VIOLATIONS {
        shown.push(format!(
            "and {} more",
            differences.len() - DETAILED_VIOLATIONS
        ));
    }
    shown.join("; ")
}

impl RegistryError {
    /// The gRPC status code of this error.
    pub fn code(&self) -> Code {
        match self {
            Self::ToolNotFound { .. }
            | Self::VersionNotFound { .. }
            | Self::LeaseNotFound { .. }
            | Self::TaskNotFound { .. } => Code::NotFound,
            Self::TaskReportRefused { .. } | Self::ApprovalDenied { .. } => Code::PermissionDenied,
            Self::ApprovalRequired(_)
            | Self::PinsOff
            | Self::ToolChanged(_)
            | Self::ApprovalVoid { .. }
            | Self::ApprovalClosed { .. }
            | Self::ApprovalDigestMismatch { .. } => Code::FailedPrecondition,
            Self::ApprovalExpired { .. } => Code::DeadlineExceeded,
            Self::TasksFull { .. } => Code::ResourceExhausted,
            Self::ArgumentsNotJson { .. }
            | Self::ArgumentsDuplicateKey { .. }
            | Self::ArgumentsTooLarge { .. }
            | Self::ArgumentsInvalid { .. }
            | Self::InvalidDescriptor { .. }
            | Self::InvalidSchema { .. }
            | Self::InvalidRequest { .. } => Code::InvalidArgument,
            Self::RateLimited { .. }
            | Self::CatalogFull(_)
            | Self::IdempotencyFull
            | Self::TooManyWatchers { .. } => Code::ResourceExhausted,
            Self::NoHealthyInstance { .. }
            | Self::StoreUnavailable { .. }
            | Self::LimiterUnavailable { .. }
            | Self::WatchInterrupted { .. } => Code::Unavailable,
            Self::WatchOutdated { .. } => Code::Aborted,
            Self::DeadlineExceeded { .. } => Code::DeadlineExceeded,
            Self::Cancelled { .. } => Code::Cancelled,
            Self::Unauthenticated { .. } => Code::Unauthenticated,
            Self::PermissionDenied { .. } => Code::PermissionDenied,
            Self::DescriptorConflict { .. } | Self::IdempotencyKeyReused { .. } => {
                Code::FailedPrecondition
            }
            Self::Upstream { code, .. } | Self::Replayed { code, .. } => *code,
        }
    }

    /// The gRPC status for this error: [`Self::code`], the message, and
    /// google.rpc details as DESIGN.md's error model prescribes.
    pub fn to_status(&self) -> Status {
        let code = self.code();
        let message = self.to_string();
        let details = match self {
            Self::ToolNotFound { tool } => ErrorDetails::with_resource_info(
                TOOL_RESOURCE_TYPE,
                clip(tool, QUOTED_MAX),
                "",
                "no live instance serves this tool; ListTools shows what is available",
            ),
            Self::VersionNotFound { tool, version, .. } => ErrorDetails::with_resource_info(
                TOOL_RESOURCE_TYPE,
                format!("{}@{}", clip(tool, QUOTED_MAX), clip(version, QUOTED_MAX)),
                "",
                "no live instance serves this version; GetTool lists the live versions",
            ),
            Self::ArgumentsNotJson {
                message: reason,
                line,
                column,
            } => ErrorDetails::with_bad_request_violation(
                "arguments_json",
                format!(
                    "not valid JSON: {} at line {line} column {column}",
                    Clipped(reason)
                ),
            ),
            Self::ArgumentsDuplicateKey { pointer, key } => {
                ErrorDetails::with_bad_request_violation(
                    clip(
                        &format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1")),
                        QUOTED_MAX,
                    ),
                    "this key appears more than once in its object; give it once",
                )
            }
            Self::ArgumentsTooLarge { .. } => {
                ErrorDetails::with_bad_request_violation("arguments_json", message.clone())
            }
            Self::ArgumentsInvalid { violations, .. } => ErrorDetails::with_bad_request(
                violations
                    .iter()
                    .take(DETAILED_VIOLATIONS)
                    .map(|v| {
                        FieldViolation::new(
                            clip(&v.pointer, QUOTED_MAX),
                            clip(&v.message, VIOLATION_MAX),
                        )
                    })
                    .collect::<Vec<_>>(),
            ),
            Self::RateLimited {
                tool,
                caller,
                retry_after,
                rate,
                burst,
            } => {
                let mut details = ErrorDetails::with_retry_info(Some(*retry_after));
                let subject = match caller {
                    Some(caller) => format!(
                        "caller:{}/tool:{}",
                        clip(caller, QUOTED_MAX),
                        clip(tool, QUOTED_MAX)
                    ),
                    None => format!("tool:{}", clip(tool, QUOTED_MAX)),
                };
                details.add_quota_failure_violation(
                    subject,
                    format!("rate limit of {rate} calls/s with burst {burst}"),
                );
                details
            }
            Self::InvalidDescriptor { field, reason, .. }
            | Self::InvalidSchema { field, reason, .. }
            | Self::InvalidRequest { field, reason } => ErrorDetails::with_bad_request_violation(
                clip(field, QUOTED_MAX),
                clip(reason, CLIPPED_MAX),
            ),
            Self::DescriptorConflict { tool, differences } => {
                let mut details = ErrorDetails::new();
                for difference in differences.iter().take(DETAILED_VIOLATIONS) {
                    details.add_precondition_failure_violation(
                        "DESCRIPTOR_CONFLICT",
                        format!("tool:{}", clip(tool, QUOTED_MAX)),
                        clip(difference, VIOLATION_MAX),
                    );
                }
                details
            }
            Self::TaskNotFound { id } => ErrorDetails::with_resource_info(
                TASK_RESOURCE_TYPE,
                clip(id, QUOTED_MAX),
                "",
                "a task is kept for its retention once over (--task-retention), and shown only to its caller",
            ),
            Self::TasksFull { whose, limit, flag } => ErrorDetails::with_quota_failure_violation(
                format!("tasks:{}", whose.trim_start_matches("the ")),
                format!("at most {limit} live tasks (--{flag})"),
            ),
            Self::LeaseNotFound { lease } => ErrorDetails::with_resource_info(
                "toolmesh.v1.Lease",
                clip(lease, QUOTED_MAX),
                "",
                "announce again",
            ),
            Self::IdempotencyKeyReused { tool, key } => {
                ErrorDetails::with_precondition_failure_violation(
                    "IDEMPOTENCY_KEY_REUSED",
                    format!(
                        "tool:{}/idempotency_key:{}",
                        clip(tool, QUOTED_MAX),
                        clip(key, QUOTED_MAX)
                    ),
                    "a repeat must carry the same arguments as the first call",
                )
            }
            Self::ToolChanged(change) => {
                let mut details = ErrorDetails::with_error_info(
                    "TOOL_DIGEST_MISMATCH",
                    ERROR_DOMAIN,
                    [
                        ("tool".to_owned(), clip(&change.tool, QUOTED_MAX)),
                        ("shown_digest".to_owned(), clip(&change.shown, QUOTED_MAX)),
                        ("live_digest".to_owned(), change.live.clone()),
                        ("changed".to_owned(), change.fields()),
                    ]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
                );
                for (_, line) in change.changes.iter().flatten().take(DETAILED_VIOLATIONS) {
                    details.add_precondition_failure_violation(
                        "TOOL_CHANGED",
                        format!("tool:{}", clip(&change.tool, QUOTED_MAX)),
                        clip(line, VIOLATION_MAX),
                    );
                }
                details
            }
            Self::ApprovalRequired(held) => {
                let HeldCall {
                    task,
                    tool,
                    rule,
                    approvers,
                    until_ms,
                    ..
                } = held.as_ref();
                let mut details = ErrorDetails::with_error_info(
                    "APPROVAL_REQUIRED",
                    ERROR_DOMAIN,
                    [
                        ("task_id".to_owned(), task.clone()),
                        ("tool".to_owned(), clip(tool, QUOTED_MAX)),
                        ("rule".to_owned(), clip(rule, QUOTED_MAX)),
                        ("approvers".to_owned(), clip(approvers, CLIPPED_MAX)),
                        ("expires_at".to_owned(), rfc3339(*until_ms).to_string()),
                    ]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
                );
                details.set_resource_info(
                    TASK_RESOURCE_TYPE,
                    task.clone(),
                    "",
                    "the call is this task, in input_required until an approver decides it",
                );
                details
            }
            Self::ApprovalDenied { by, .. } => ErrorDetails::with_error_info(
                "APPROVAL_DENIED",
                ERROR_DOMAIN,
                [("denied_by".to_owned(), clip(by, QUOTED_MAX))]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
            ),
            Self::ApprovalExpired { rule, .. } => ErrorDetails::with_error_info(
                "APPROVAL_EXPIRED",
                ERROR_DOMAIN,
                [("rule".to_owned(), clip(rule, QUOTED_MAX))]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
            ),
            Self::ApprovalVoid { .. } => ErrorDetails::with_error_info(
                "APPROVAL_VOID",
                ERROR_DOMAIN,
                std::collections::HashMap::new(),
            ),
            Self::ApprovalClosed { id, state, .. } => ErrorDetails::with_error_info(
                "APPROVAL_CLOSED",
                ERROR_DOMAIN,
                [
                    ("task_id".to_owned(), clip(id, QUOTED_MAX)),
                    ("state".to_owned(), (*state).to_owned()),
                ]
                .into_iter()
                .collect::<std::collections::HashMap<_, _>>(),
            ),
            Self::ApprovalDigestMismatch { id, .. } => ErrorDetails::with_error_info(
                "APPROVAL_DIGEST_MISMATCH",
                ERROR_DOMAIN,
                [("task_id".to_owned(), clip(id, QUOTED_MAX))]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
            ),
            Self::NoHealthyInstance { .. }
            | Self::PinsOff
            | Self::DeadlineExceeded { .. }
            | Self::Cancelled { .. }
            | Self::Upstream { .. }
            | Self::CatalogFull(_)
            | Self::StoreUnavailable { .. }
            | Self::LimiterUnavailable { .. }
            | Self::IdempotencyFull
            | Self::TooManyWatchers { .. }
            | Self::WatchInterrupted { .. }
            | Self::WatchOutdated { .. }
            | Self::Unauthenticated { .. }
            | Self::PermissionDenied { .. }
            | Self::TaskReportRefused { .. }
            | Self::Replayed { .. } => return Status::new(code, message),
        };
        Status::with_error_details(code, message, details)
    }
}

impl From<RegistryError> for Status {
    fn from(error: RegistryError) -> Self {
        error.to_status()
    }
}

#[cfg(test)]
mod tests;
