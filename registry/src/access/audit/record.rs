//! The two kinds of audit record, and how each becomes one JSON object.
//!
//! Records are plain values built on the request path; everything that
//! costs (clipping, redaction, formatting) happens when the writer task
//! serializes them.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use tonic::Code;
use toolmesh_proto::pb::{InvokeResponse, ToolDescriptor};
use toolmesh_telemetry::shown::clip;

use super::redact::{Redactor, bounded};
use crate::error::RegistryError;

/// Most bytes kept of a caller, tool name, instance id, endpoint or peer.
pub(crate) const TEXT_MAX: usize = 256;

/// Most bytes kept of a refusal's reason.
pub(crate) const REASON_MAX: usize = 512;

/// Most tool names listed in one registration record; the rest are counted
/// in `tools_omitted`.
pub(crate) const TOOLS_MAX: usize = 64;

/// How a call or a registration change ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded.
    Ok,
    /// The tool ran and reported a failure (`InvokeResponse.is_error`).
    ToolError,
    /// The registry answered with this gRPC code.
    Failed(Code),
}

impl Outcome {
    /// The outcome of an `Invoke` that ended with `result`.
    pub fn of_invoke(result: &Result<InvokeResponse, RegistryError>) -> Self {
        match result {
            Ok(response) if response.is_error => Self::ToolError,
            Ok(_) => Self::Ok,
            Err(error) => Self::Failed(error.code()),
        }
    }

    /// `ok`, `tool_error`, or the code's name in snake case
    /// (`invalid_argument`, `resource_exhausted`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::ToolError => toolmesh_proto::code::TOOL_ERROR,
            Self::Failed(code) => toolmesh_proto::code::outcome(code),
        }
    }
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One `Invoke`, rejected ones included.
#[derive(Debug, Clone, Serialize)]
pub struct InvokeRecord {
    /// Who called: the authenticated caller, empty when anonymous.
    #[serde(serialize_with = "text")]
    pub caller: String,
    /// The tool named in the request.
    #[serde(serialize_with = "text")]
    pub tool: String,
    /// The last instance tried; absent (or empty) when none was.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub instance: Option<String>,
    /// How the call ended.
    pub outcome: Outcome,
    /// From the request's arrival to its answer.
    #[serde(rename = "latency_ms", serialize_with = "millis")]
    pub latency: Duration,
    /// Size of the request's `arguments_json`, in bytes.
    pub argument_bytes: usize,
    /// Attempts made on instances (0 when the call never reached one).
    pub attempts: u32,
    /// True if the answer was replayed from an earlier call with the same
    /// idempotency key.
    pub idempotency_replay: bool,
    /// The remote address of the agent's connection.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<SocketAddr>,
    /// The arguments, redacted; only when the tool allows it (see
    /// [`InvokeRecord::with_arguments`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arguments: Option<LoggedArguments>,
    /// The task the call started (`Tasks.StartTask`, or an MCP call that
    /// became a task); its end is a [`TaskRecord`].
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub task: Option<String>,
    /// The version of the tool the call went to; absent when unversioned,
    /// or when no tool was found.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub version: Option<String>,
    /// The digest of the definition the call went to
    /// ([`crate::catalog::descriptor::digest`]); absent when no tool was
    /// found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl InvokeRecord {
    /// Attaches `arguments` if `descriptor.audit_arguments` allows it, to be
    /// redacted by `redactor` (the tool's input schema) when written.
    #[must_use]
    pub fn with_arguments(
        mut self,
        descriptor: &ToolDescriptor,
        redactor: &std::sync::Arc<Redactor>,
        arguments: Value,
    ) -> Self {
        self.arguments = descriptor.audit_arguments.then(|| LoggedArguments {
            redactor: redactor.clone(),
            value: arguments,
        });
        self
    }
}

/// Arguments as the audit log shows them: redacted by the tool's input
/// schema, and replaced by `{"truncated": true, "bytes": N}` when the
/// redacted JSON is over [`super::redact::ARGUMENTS_MAX`] bytes.
#[derive(Debug, Clone)]
pub struct LoggedArguments {
    redactor: std::sync::Arc<Redactor>,
    value: Value,
}

impl Serialize for LoggedArguments {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        bounded(self.redactor.redact(&self.value)).serialize(serializer)
    }
}

/// What happened to an instance's registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationAction {
    /// An announce was accepted (a new lease, or a replaced one).
    Announce,
    /// The sidecar withdrew its lease.
    Withdraw,
    /// The lease ran out without a heartbeat; the registry removed it.
    Expire,
    /// An announce was refused.
    Refused,
}

/// One change to the instances in the catalog, or a refused announce.
#[derive(Debug, Clone)]
pub struct RegistrationRecord {
    /// The sidecar's credential name; empty when there is none (and for
    /// expiries, which no one asked for).
    pub caller: String,
    /// What happened.
    pub action: RegistrationAction,
    /// The instance id.
    pub instance: String,
    /// The instance's announced endpoint; empty when not known.
    pub endpoint: String,
    /// The names of the tools the instance serves (or announced).
    pub tools: Vec<String>,
    /// `ok`, or the code the registry answered with.
    pub outcome: Outcome,
    /// Why an announce was refused.
    pub reason: Option<String>,
    /// The remote address of the sidecar's connection.
    pub peer: Option<SocketAddr>,
}

impl Serialize for RegistrationRecord {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("caller", &clip(&self.caller, TEXT_MAX))?;
        map.serialize_entry("action", &self.action)?;
        map.serialize_entry("instance", &clip(&self.instance, TEXT_MAX))?;
        map.serialize_entry("endpoint", &clip(&self.endpoint, TEXT_MAX))?;
        let shown: Vec<String> = self
            .tools
            .iter()
            .take(TOOLS_MAX)
            .map(|tool| clip(tool, TEXT_MAX))
            .collect();
        map.serialize_entry("tools", &shown)?;
        if self.tools.len() > TOOLS_MAX {
            map.serialize_entry("tools_omitted", &(self.tools.len() - TOOLS_MAX))?;
        }
        map.serialize_entry("outcome", &self.outcome)?;
        if let Some(reason) = &self.reason {
            map.serialize_entry("reason", &clip(reason, REASON_MAX))?;
        }
        if let Some(peer) = &self.peer {
            map.serialize_entry("peer", peer)?;
        }
        map.end()
    }
}

/// The end of a task: written once, by the replica that ended it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRecord {
    /// Who started it.
    #[serde(serialize_with = "text")]
    pub caller: String,
    /// The tool.
    #[serde(serialize_with = "text")]
    pub tool: String,
    /// The task's id (the start's `invoke` record names it too).
    #[serde(serialize_with = "text")]
    pub task: String,
    /// The instance that held it last; absent when none did.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub instance: Option<String>,
    /// `completed`, `failed` or `cancelled`.
    pub state: &'static str,
    /// How the call ended: `ok`, `tool_error`, or the code it failed with
    /// (`cancelled` for a cancelled task).
    pub outcome: Outcome,
    /// What ended it: `instance` (its report), `cancel` (`CancelTask` or
    /// `tasks/cancel`), `janitor` (its instance was lost, or its timeout
    /// passed unreported), `start` (no instance took it).
    pub ended_by: &'static str,
    /// From its start to its end.
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
}

/// A call held for approval, and its decision: one record when it is held
/// (`event: requested`), one when it is closed.
#[derive(Debug, Clone, Serialize)]
pub struct ApprovalRecord {
    /// `requested`, `approved`, `denied`, `expired` or `void`.
    pub event: &'static str,
    /// Who made the call.
    #[serde(serialize_with = "text")]
    pub caller: String,
    /// The tool.
    #[serde(serialize_with = "text")]
    pub tool: String,
    /// The task the call is.
    #[serde(serialize_with = "text")]
    pub task: String,
    /// The rule that held it.
    #[serde(serialize_with = "text")]
    pub rule: String,
    /// The call's digest, which the decision is bound to.
    #[serde(serialize_with = "text")]
    pub digest: String,
    /// Who decided it; absent for a request, an expiry or a void.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub by: Option<String>,
    /// The decider's comment, or why it was closed.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub comment: Option<String>,
    /// From the request to the decision (zero for the request).
    #[serde(rename = "waited_ms", serialize_with = "millis")]
    pub waited: Duration,
}

impl From<ApprovalRecord> for Record {
    fn from(record: ApprovalRecord) -> Self {
        Self::Approval(record)
    }
}

/// A pinned definition's event: pinned on first use, held, flagged,
/// approved or revoked.
#[derive(Debug, Clone, Serialize)]
pub struct PinEventRecord {
    /// `trusted`, `held`, `flagged`, `approved`, `denied` or `revoked`.
    pub event: &'static str,
    /// The tool version (`name@version`, or the name).
    #[serde(serialize_with = "text")]
    pub tool: String,
    /// The definition's digest (for `revoked`, the pin's).
    #[serde(serialize_with = "text")]
    pub digest: String,
    /// The digest it is pinned to, when another.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub pinned: Option<String>,
    /// Who approved, denied or revoked it.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub by: Option<String>,
    /// Their comment, when they decided through `Approvals`.
    #[serde(serialize_with = "optional_text", skip_serializing_if = "absent")]
    pub comment: Option<String>,
}

impl From<PinEventRecord> for Record {
    fn from(record: PinEventRecord) -> Self {
        Self::Pin(record)
    }
}

/// Any audit record.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// An `Invoke`.
    Invoke(InvokeRecord),
    /// A registration change.
    Registration(RegistrationRecord),
    /// A task's end.
    Task(TaskRecord),
    /// A held call's request or decision.
    Approval(ApprovalRecord),
    /// A pinned definition's event.
    Pin(PinEventRecord),
}

impl From<TaskRecord> for Record {
    fn from(record: TaskRecord) -> Self {
        Self::Task(record)
    }
}

impl From<InvokeRecord> for Record {
    fn from(record: InvokeRecord) -> Self {
        Self::Invoke(record)
    }
}

impl From<RegistrationRecord> for Record {
    fn from(record: RegistrationRecord) -> Self {
        Self::Registration(record)
    }
}

/// A record and when it was made: one line of the log.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) at: SystemTime,
    pub(super) record: Record,
}

impl Entry {
    /// Appends the entry's JSON and a newline to `out`.
    pub(super) fn write_line(&self, out: &mut Vec<u8>) -> serde_json::Result<()> {
        #[derive(Serialize)]
        struct Line<'a> {
            ts: String,
            #[serde(flatten)]
            record: &'a Record,
        }
        let start = out.len();
        let line = Line {
            ts: humantime::format_rfc3339_millis(self.at).to_string(),
            record: &self.record,
        };
        if let Err(error) = serde_json::to_writer(&mut *out, &line) {
            out.truncate(start);
            return Err(error);
        }
        out.push(b'\n');
        Ok(())
    }
}

#[allow(clippy::ref_option)]
fn absent(text: &Option<String>) -> bool {
    text.as_deref().is_none_or(str::is_empty)
}

fn text<S: Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
    clip(text, TEXT_MAX).serialize(serializer)
}

#[allow(clippy::ref_option)]
fn optional_text<S: Serializer>(text: &Option<String>, serializer: S) -> Result<S::Ok, S::Error> {
    text.as_deref()
        .map(|t| clip(t, TEXT_MAX))
        .serialize(serializer)
}

fn millis<S: Serializer>(latency: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    // Microsecond precision; exact in an f64 far past any deadline.
    #[allow(clippy::cast_precision_loss)]
    let ms = latency.as_micros() as f64 / 1000.0;
    serializer.serialize_f64(ms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn at() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123)
    }

    fn line(record: impl Into<Record>) -> String {
        let mut out = Vec::new();
        Entry {
            at: at(),
            record: record.into(),
        }
        .write_line(&mut out)
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    pub(crate) fn invoke() -> InvokeRecord {
        InvokeRecord {
            caller: "agent-7".into(),
            tool: "add".into(),
            instance: Some("s1".into()),
            outcome: Outcome::Ok,
            latency: Duration::from_micros(1420),
            argument_bytes: 13,
            attempts: 1,
            idempotency_replay: false,
            peer: Some("10.0.0.7:51234".parse().unwrap()),
            arguments: None,
            task: None,
            version: None,
            digest: None,
        }
    }

    #[test]
    fn an_invoke_record_has_these_fields() {
        let text = line(invoke());
        assert!(text.ends_with('\n') && !text[..text.len() - 1].contains('\n'));
        assert!(
            text.starts_with(r#"{"ts":"2026-01-01T00:00:00.123Z","kind":"invoke","#),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parsed,
            json!({
                "ts": "2026-01-01T00:00:00.123Z", "kind": "invoke", "caller": "agent-7",
                "tool": "add", "instance": "s1", "outcome": "ok", "latency_ms": 1.42,
                "argument_bytes": 13, "attempts": 1, "idempotency_replay": false,
                "peer": "10.0.0.7:51234"
            })
        );
    }

    #[test]
    fn absent_parts_of_an_invoke_are_left_out() {
        let record = InvokeRecord {
            instance: Some(String::new()),
            peer: None,
            outcome: Outcome::Failed(Code::InvalidArgument),
            attempts: 0,
            ..invoke()
        };
        let parsed: Value = serde_json::from_str(&line(record)).unwrap();
        let fields: Vec<&str> = parsed
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for absent in ["instance", "peer", "arguments"] {
            assert!(!fields.contains(&absent), "{parsed}");
        }
        assert_eq!(parsed["outcome"], "invalid_argument");
    }

    #[test]
    fn a_registration_record_has_these_fields() {
        let record = RegistrationRecord {
            caller: "sidecar-a".into(),
            action: RegistrationAction::Refused,
            instance: "s1".into(),
            endpoint: "http://10.0.0.9:50052".into(),
            tools: vec!["add".into(), "lookup".into()],
            outcome: Outcome::Failed(Code::FailedPrecondition),
            reason: Some("tool \"add\": descriptor differs (timeout)".into()),
            peer: Some("10.0.0.9:40000".parse().unwrap()),
        };
        let text = line(record);
        assert!(
            text.starts_with(r#"{"ts":"2026-01-01T00:00:00.123Z","kind":"registration","#),
            "{text}"
        );
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            parsed,
            json!({
                "ts": "2026-01-01T00:00:00.123Z", "kind": "registration",
                "caller": "sidecar-a", "action": "refused", "instance": "s1",
                "endpoint": "http://10.0.0.9:50052", "tools": ["add", "lookup"],
                "outcome": "failed_precondition",
                "reason": "tool \"add\": descriptor differs (timeout)",
                "peer": "10.0.0.9:40000"
            })
        );
    }

    #[test]
    fn a_task_record_has_these_fields() {
        let record = TaskRecord {
            caller: "agent-7".into(),
            tool: "report".into(),
            task: "6f1c".into(),
            instance: Some("s1".into()),
            state: "cancelled",
            outcome: Outcome::Failed(Code::Cancelled),
            ended_by: "cancel",
            duration: Duration::from_millis(1_500),
        };
        let parsed: Value = serde_json::from_str(&line(record)).unwrap();
        assert_eq!(
            parsed,
            json!({
                "ts": "2026-01-01T00:00:00.123Z", "kind": "task",
                "caller": "agent-7", "tool": "report", "task": "6f1c", "instance": "s1",
                "state": "cancelled", "outcome": "cancelled", "ended_by": "cancel",
                "duration_ms": 1500.0
            })
        );
        let started: Value = serde_json::from_str(&line(InvokeRecord {
            task: Some("6f1c".into()),
            version: None,
            digest: None,
            ..invoke()
        }))
        .unwrap();
        assert_eq!(started["task"], "6f1c");
        assert!(serde_json::from_str::<Value>(&line(invoke())).unwrap()["task"].is_null());
    }

    #[test]
    fn long_texts_and_long_tool_lists_are_bounded() {
        let long = "x".repeat(1 << 20);
        let record = RegistrationRecord {
            caller: long.clone(),
            action: RegistrationAction::Expire,
            instance: long.clone(),
            endpoint: long.clone(),
            tools: vec![long.clone(); 1000],
            outcome: Outcome::Ok,
            reason: Some(long.clone()),
            peer: None,
        };
        let text = line(record);
        assert!(text.len() < 40 * 1024, "{}", text.len());
        let parsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed["tools"].as_array().unwrap().len(), TOOLS_MAX);
        assert_eq!(parsed["tools_omitted"], 1000 - TOOLS_MAX);
        let text = line(InvokeRecord {
            tool: long.clone(),
            instance: Some(long.clone()),
            caller: long,
            ..invoke()
        });
        assert!(text.len() < 2048, "{}", text.len());
    }

    #[test]
    fn outcomes_are_snake_case() {
        let response = |is_error| InvokeResponse {
            is_error,
            ..InvokeResponse::default()
        };
        assert_eq!(Outcome::of_invoke(&Ok(response(false))).as_str(), "ok");
        assert_eq!(
            Outcome::of_invoke(&Ok(response(true))).as_str(),
            "tool_error"
        );
        let not_found = RegistryError::ToolNotFound { tool: "t".into() };
        assert_eq!(Outcome::of_invoke(&Err(not_found)).as_str(), "not_found");
        for n in 0..=16 {
            let code = Code::from_i32(n);
            let expected = toolmesh_proto::code::name(code).to_ascii_lowercase();
            assert_eq!(Outcome::Failed(code).as_str(), expected);
        }
    }

    #[test]
    fn arguments_appear_only_when_the_descriptor_allows() {
        let schema = json!({"properties": {"key": {"type": "string", "writeOnly": true}}});
        let redactor = Arc::new(Redactor::new(&schema));
        let arguments = json!({"key": "hunter2", "q": "weather"});
        let mut descriptor = ToolDescriptor::default();
        let record = invoke().with_arguments(&descriptor, &redactor, arguments.clone());
        assert!(!line(record).contains("arguments"));
        descriptor.audit_arguments = true;
        let record = invoke().with_arguments(&descriptor, &redactor, arguments);
        let parsed: Value = serde_json::from_str(&line(record)).unwrap();
        assert_eq!(
            parsed["arguments"],
            json!({"key": "[redacted]", "q": "weather"})
        );
    }
}
