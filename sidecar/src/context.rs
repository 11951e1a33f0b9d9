//! [`CallContext`]: what a tool learns about a call besides its arguments:
//! who made it, and which call it is.
//!
//! Every backend passes it on: HTTP tools get headers
//! ([`CALLER_HEADER`], [`INVOCATION_ID_HEADER`], [`CONFIG_HEADER`], and W3C
//! `traceparent` and `tracestate`), commands get environment variables
//! ([`CALLER_ENV`], [`INVOCATION_ID_ENV`], [`CONFIG_ENV`] and
//! [`config_env`]'s, `TRACEPARENT`, `TRACESTATE`), Rust tools get the
//! struct ([`crate::sdk::tool_with_context`]) and run inside the call's
//! `execute_tool` span, so their own spans join the trace. A call run as
//! a task carries a [`Progress`] handle ([`CallContext::report_progress`];
//! a command writes progress lines to stderr instead, see
//! [`crate::progress`]). The tool's
//! `config` goes to its backend only: the registry and the LLM never see
//! it.

use toolmesh_telemetry::shown::Quoted;

use crate::progress::Progress;

/// The HTTP header naming the caller (left out for an anonymous call).
pub const CALLER_HEADER: &str = "x-toolmesh-caller";
/// The HTTP header carrying the invocation id (left out when there is none).
pub const INVOCATION_ID_HEADER: &str = "x-toolmesh-invocation-id";
/// The environment variable naming the caller (empty for an anonymous call).
pub const CALLER_ENV: &str = "TOOLMESH_CALLER";
/// The environment variable carrying the invocation id (empty when there is
/// none).
pub const INVOCATION_ID_ENV: &str = "TOOLMESH_INVOCATION_ID";

/// The HTTP header carrying the tool's `config` (compact JSON, every
/// non-ASCII character escaped as `\uXXXX`; left out when it is empty).
pub const CONFIG_HEADER: &str = "x-toolmesh-config";
/// The environment variable carrying the tool's `config` as a JSON object
/// (`{}` when it is empty); each scalar entry also comes as
/// `TOOLMESH_CONFIG_<KEY>` ([`config_env`]).
pub const CONFIG_ENV: &str = "TOOLMESH_CONFIG";

/// The tool's configuration as a backend gets it: the `config` of its entry
/// in the sidecar YAML (or [`crate::sdk::ToolBuilder::config`]), the same on
/// every call, never shown to the LLM.
pub type ToolSettings = std::sync::Arc<serde_json::Map<String, serde_json::Value>>;

/// The environment variables a command backend gets for `config`: the whole
/// object as [`CONFIG_ENV`], and each string, number or boolean entry as
/// `TOOLMESH_CONFIG_<KEY>` (the key upper-cased; strings as they are,
/// numbers and booleans as JSON).
pub fn config_env(config: &serde_json::Map<String, serde_json::Value>) -> Vec<(String, String)> {
    let mut env = vec![(
        CONFIG_ENV.to_owned(),
        serde_json::Value::Object(config.clone()).to_string(),
    )];
    for (key, value) in config {
        let text = match value {
            serde_json::Value::String(text) => text.clone(),
            serde_json::Value::Number(_) | serde_json::Value::Bool(_) => value.to_string(),
            _ => continue,
        };
        env.push((format!("{CONFIG_ENV}_{}", key.to_ascii_uppercase()), text));
    }
    env
}

/// `config` as the value of [`CONFIG_HEADER`]: compact JSON with every
/// non-ASCII character escaped, so any header parser takes it unchanged.
pub fn config_header(config: &serde_json::Map<String, serde_json::Value>) -> String {
    let json = serde_json::Value::Object(config.clone()).to_string();
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0_u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
    }
    out
}

/// Longest caller or invocation id a tool is given, in bytes.
pub const MAX_ID_BYTES: usize = 1024;

/// Who made a call and which call it is, as the registry sent them in
/// `ExecuteRequest`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallContext {
    /// Who the registry authenticated as making the call (the caller id of
    /// the agent's API key or JWT); empty when the registry does not
    /// authenticate agents.
    pub caller: String,
    /// The registry's id of this invocation, the same on every attempt of a
    /// retried call: for logs, and for tools that deduplicate. Empty when
    /// `Execute` was called without one.
    pub invocation_id: String,
    /// The call's W3C trace context, to pass on to the backend: the
    /// sidecar's span's when traces are exported, else the registry's.
    pub trace: toolmesh_telemetry::TraceContext,
    /// The tool's configuration (its `config` in the sidecar YAML), the
    /// same on every call; empty when it has none.
    pub config: ToolSettings,
    /// Where a task reports its progress; `None` for a call an agent
    /// waits on (`Execute`).
    progress: Option<Progress>,
}

/// Why a call's context cannot be given to a tool.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {} cannot be given to the tool: {reason}", Quoted(.value))]
pub struct InvalidCallContext {
    /// `caller` or `invocation_id`.
    pub field: &'static str,
    /// The value (shown bounded).
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl CallContext {
    /// The context of a call made by `caller` (empty: anonymous), known to
    /// the registry as `invocation_id`.
    pub fn new(caller: impl Into<String>, invocation_id: impl Into<String>) -> Self {
        Self {
            caller: caller.into(),
            invocation_id: invocation_id.into(),
            trace: toolmesh_telemetry::TraceContext::default(),
            config: ToolSettings::default(),
            progress: None,
        }
    }

    /// The same call, run as a task that reports its progress to
    /// `progress`.
    #[must_use]
    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Where the call reports its progress: `Some` when it runs as a task
    /// (`ToolRuntime.RunTask`), `None` when an agent waits on it.
    pub fn progress(&self) -> Option<&Progress> {
        self.progress.as_ref()
    }

    /// Reports how far the call has come, if it runs as a task (else does
    /// nothing): `fraction` done from 0 to 1 (clamped; a non-finite one is
    /// left out) and `message` (cut to
    /// [`MAX_MESSAGE_BYTES`](crate::progress::MAX_MESSAGE_BYTES)). The
    /// latest report wins; the registry hears at most four a second.
    pub fn report_progress(&self, fraction: Option<f64>, message: impl Into<String>) {
        if let Some(progress) = &self.progress {
            progress.report(fraction, message);
        }
    }

    /// The same call, for a tool configured with `config`.
    #[must_use]
    pub fn with_config(mut self, config: ToolSettings) -> Self {
        self.config = config;
        self
    }

    /// The same call, in the trace `trace` names.
    #[must_use]
    pub fn in_trace(mut self, trace: toolmesh_telemetry::TraceContext) -> Self {
        self.trace = trace;
        self
    }

    /// True when the registry did not say who called.
    pub fn is_anonymous(&self) -> bool {
        self.caller.is_empty()
    }

    /// Checks that both ids can reach every kind of tool unchanged, as an
    /// HTTP header value or an environment variable: at most
    /// [`MAX_ID_BYTES`] bytes of printable ASCII (space to `~`), neither
    /// starting nor ending with a space.
    pub fn check(&self) -> Result<(), InvalidCallContext> {
        check_id("caller", &self.caller)?;
        check_id("invocation_id", &self.invocation_id)
    }
}

fn check_id(field: &'static str, value: &str) -> Result<(), InvalidCallContext> {
    let reason = if value.len() > MAX_ID_BYTES {
        Some("longer than 1024 bytes")
    } else if !value.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        Some("only printable ASCII characters are allowed")
    } else if value.starts_with(' ') || value.ends_with(' ') {
        Some("it starts or ends with a space")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(InvalidCallContext {
            field,
            value: value.to_owned(),
            reason,
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn printable_ids_pass() {
        for caller in [
            "",
            "alice",
            "team:ops/bot-7",
            "a b",
            &"x".repeat(MAX_ID_BYTES),
        ] {
            assert_eq!(
                CallContext::new(caller, "inv-1").check(),
                Ok(()),
                "{caller}"
            );
        }
        assert!(CallContext::default().is_anonymous());
        assert!(!CallContext::new("alice", "").is_anonymous());
    }

    #[test]
    fn ids_a_header_or_variable_would_change_are_refused() {
        for (caller, reason) in [
            ("al\nice", "only printable ASCII characters are allowed"),
            ("al\0ice", "only printable ASCII characters are allowed"),
            ("tab\t", "only printable ASCII characters are allowed"),
            ("ünï", "only printable ASCII characters are allowed"),
            (" alice", "it starts or ends with a space"),
            ("alice ", "it starts or ends with a space"),
        ] {
            let err = CallContext::new(caller, "inv").check().unwrap_err();
            assert_eq!((err.field, err.reason), ("caller", reason), "{caller:?}");
        }
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let err = CallContext::new("", long).check().unwrap_err();
        assert_eq!(err.field, "invocation_id");
        assert_eq!(err.reason, format!("longer than {MAX_ID_BYTES} bytes"));
        assert!(err.to_string().len() < 300, "shown bounded: {err}");
    }

    #[test]
    fn the_message_names_the_field_and_the_value() {
        let err = CallContext::new("a\nb", "").check().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"caller "a\nb" cannot be given to the tool: only printable ASCII characters are allowed"#
        );
    }
}
