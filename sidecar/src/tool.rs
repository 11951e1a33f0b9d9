//! A tool: its descriptor and the backend that runs it, plus the backend
//! contract ([`Backend`], [`Outcome`], [`BackendError`]).

use std::sync::Arc;

use async_trait::async_trait;
use toolmesh_proto::{deadline::Deadline, pb};

use crate::context::{CallContext, InvalidCallContext, ToolSettings};

/// Default cap on the size of a tool's result, in bytes (4 MiB).
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

/// A tool this sidecar serves: what it announces, and what runs it.
#[derive(Clone)]
pub struct Tool {
    descriptor: pb::ToolDescriptor,
    backend: Arc<dyn Backend>,
    max_output_bytes: usize,
    config: ToolSettings,
}

impl Tool {
    /// A tool with the given descriptor, run by `backend`, with the default
    /// output cap ([`DEFAULT_MAX_OUTPUT_BYTES`]).
    pub fn new(descriptor: pb::ToolDescriptor, backend: Arc<dyn Backend>) -> Self {
        Self {
            descriptor,
            backend,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
            config: ToolSettings::default(),
        }
    }

    /// Sets the configuration given to the backend with every call
    /// ([`CallContext::config`]): one backend can serve several tools
    /// that differ by it. Never announced.
    #[must_use]
    pub fn with_config(mut self, config: serde_json::Map<String, serde_json::Value>) -> Self {
        self.config = Arc::new(config);
        self
    }

    /// The configuration given to the backend with every call.
    pub fn config(&self) -> &ToolSettings {
        &self.config
    }

    /// Sets the largest result (in bytes) this tool may return; larger
    /// results become an `is_error` result saying so.
    #[must_use]
    pub fn with_max_output_bytes(mut self, max_output_bytes: usize) -> Self {
        self.max_output_bytes = max_output_bytes;
        self
    }

    /// The descriptor announced to the registry.
    pub fn descriptor(&self) -> &pb::ToolDescriptor {
        &self.descriptor
    }

    /// The backend that runs the tool.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The largest result, in bytes, this tool may return.
    pub fn max_output_bytes(&self) -> usize {
        self.max_output_bytes
    }
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.descriptor.name)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish_non_exhaustive()
    }
}

/// Runs a tool.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Runs the tool for the call described by `context`; must stop its
    /// work when the future is dropped or at `deadline`.
    async fn call(
        &self,
        arguments_json: &str,
        context: &CallContext,
        deadline: Deadline,
    ) -> Result<Outcome, BackendError>;
}

/// What a tool run produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    /// The result (or, with `is_error`, the error): JSON text, or plain text
    /// that the runtime encodes as a JSON string.
    pub result_json: String,
    /// True when the tool ran and reported a failure.
    pub is_error: bool,
    /// The answer as MCP content blocks (a JSON array) when an MCP server
    /// gave more than one plain text: the blocks as it sent them, for MCP
    /// clients of the registry (`ExecuteResponse.content_json`). Empty
    /// otherwise.
    pub content_json: String,
}

impl Outcome {
    /// A successful result.
    pub fn ok(result_json: impl Into<String>) -> Self {
        Self {
            result_json: result_json.into(),
            is_error: false,
            content_json: String::new(),
        }
    }

    /// A failure the tool reported (shown to the LLM, not a transport error).
    pub fn error(result_json: impl Into<String>) -> Self {
        Self {
            result_json: result_json.into(),
            is_error: true,
            content_json: String::new(),
        }
    }

    /// A failure carrying `message` as a JSON string.
    pub fn error_message(message: &str) -> Self {
        Self::error(json_string(message))
    }
}

/// `text` encoded as a JSON string literal.
pub(crate) fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_owned()).to_string()
}

/// Why a backend could not run a tool (as opposed to the tool running and
/// failing, which is an [`Outcome`] with `is_error`).
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The deadline passed before the tool finished; its work was stopped.
    #[error("deadline exceeded")]
    DeadlineExceeded,
    /// The command could not be started.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// The program that failed to start.
        program: String,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// Talking to a running command failed.
    #[error("I/O error talking to the command: {0}")]
    Io(#[source] std::io::Error),
    /// The HTTP backend could not be reached (connection refused, DNS, TLS):
    /// the request never reached it.
    #[error("HTTP backend unreachable: {0}")]
    HttpConnect(#[source] reqwest::Error),
    /// The HTTP exchange failed after the connection was made.
    #[error("HTTP backend failed: {0}")]
    Http(#[source] reqwest::Error),
    /// The HTTP backend's event stream (`text/event-stream`) ended without
    /// its result, or ran past its bound.
    #[error("HTTP backend failed: {0}")]
    HttpStream(String),
    /// The caller or invocation id cannot be given to the tool unchanged.
    #[error(transparent)]
    InvalidContext(#[from] InvalidCallContext),
    /// The backend is down or cannot be reached now (an MCP server that
    /// exited and is being restarted, say): the call did not run.
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// Anything else that kept the backend from producing an outcome.
    #[error("backend failed: {0}")]
    Internal(String),
}

impl BackendError {
    /// The gRPC status the registry receives for this error.
    pub fn to_status(&self) -> tonic::Status {
        let message = self.to_string();
        match self {
            Self::DeadlineExceeded => tonic::Status::deadline_exceeded(message),
            Self::Spawn { .. }
            | Self::HttpConnect(_)
            | Self::Http(_)
            | Self::HttpStream(_)
            | Self::Unavailable(_) => tonic::Status::unavailable(message),
            Self::InvalidContext(_) => tonic::Status::invalid_argument(message),
            Self::Io(_) | Self::Internal(_) => tonic::Status::internal(message),
        }
    }
}

/// Why a tool name is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tool name {0:?}: use 1 to 64 characters among letters, digits, '_', '-' and '.'")]
pub struct InvalidToolName(pub String);

/// Checks the tool-name rule: 1 to 64 characters of `[A-Za-z0-9_.-]`.
pub fn validate_tool_name(name: &str) -> Result<(), InvalidToolName> {
    if toolmesh_proto::tool_name::is_valid(name) {
        Ok(())
    } else {
        Err(InvalidToolName(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_shared_rule() {
        assert!(validate_tool_name("word_count").is_ok());
        let error = validate_tool_name("has space").expect_err("invalid");
        assert!(error.to_string().contains("1 to 64 characters"), "{error}");
    }

    #[test]
    fn status_codes() {
        use tonic::Code;
        assert_eq!(
            BackendError::DeadlineExceeded.to_status().code(),
            Code::DeadlineExceeded
        );
        let spawn = BackendError::Spawn {
            program: "x".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(spawn.to_status().code(), Code::Unavailable);
        assert_eq!(
            BackendError::Internal("x".into()).to_status().code(),
            Code::Internal
        );
        let context = CallContext::new("a\nb", "inv")
            .check()
            .expect_err("not printable");
        let context = BackendError::from(context);
        assert_eq!(context.to_status().code(), Code::InvalidArgument);
    }
}
