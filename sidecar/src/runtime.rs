//! `ToolRuntime.Execute`: find the tool, compute the deadline, run the
//! backend until then, and normalize what it returns; `RunTask` and
//! `StopTask`, checked the same way, with the same run on a task of its
//! own.
//!
//! [`Runtime`] is the plain logic (tested without gRPC); [`RuntimeService`]
//! is the thin tonic service in front of it.

use std::sync::Arc;
use std::time::Duration;

use toolmesh_proto::deadline::Deadline;
use toolmesh_proto::pb;
use toolmesh_telemetry::{shown::Quoted, spans};
use tracing::Instrument as _;

use crate::context::CallContext;
use crate::tool::{BackendError, Outcome, Tool, json_string};
use crate::toolset::ToolSet;

/// Deadline used when neither the tool nor the caller set one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a task runs, whatever its timeout says: a year, beyond any the
/// registry gives (a week), and an instant the clock can always name.
const MAX_TASK_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

pub use crate::toolset::ToolSetError;
pub use service::RuntimeService;

mod service;

/// Why an execution produced no result.
#[derive(Debug, thiserror::Error)]
pub enum ExecuteError {
    /// This sidecar does not serve the tool (the name is a caller's,
    /// shown bounded).
    #[error("unknown tool {}", Quoted(.0))]
    UnknownTool(String),
    /// The backend could not run it.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// The call did not come from the registry: `what` it lacked (a grant
    /// the registry signed, its client certificate).
    #[error(
        "this sidecar takes calls from the toolmesh registry only ({what}): call the tool through the registry's Invoke"
    )]
    NotFromRegistry {
        /// What the call lacked.
        what: String,
    },
}

impl ExecuteError {
    /// The gRPC status the caller receives.
    pub fn to_status(&self) -> tonic::Status {
        match self {
            Self::UnknownTool(_) => tonic::Status::not_found(self.to_string()),
            Self::Backend(err) => err.to_status(),
            Self::NotFromRegistry { .. } => tonic::Status::unauthenticated(self.to_string()),
        }
    }
}

/// The tools of a sidecar, by name, and how to run them.
#[derive(Debug)]
pub struct Runtime {
    tools: Arc<ToolSet>,
}

impl Runtime {
    /// A runtime serving `tools`: at least one, names valid and unique.
    pub fn new(tools: Vec<Tool>) -> Result<Self, ToolSetError> {
        Ok(Self::serving(Arc::new(ToolSet::new(tools, 0)?)))
    }

    /// A runtime serving whatever `tools` holds at each call.
    pub fn serving(tools: Arc<ToolSet>) -> Self {
        Self { tools }
    }

    /// The tools served now.
    pub fn tools(&self) -> &Arc<ToolSet> {
        &self.tools
    }

    /// The descriptors to announce, sorted by name.
    pub fn descriptors(&self) -> Vec<pb::ToolDescriptor> {
        self.tools.current().descriptors()
    }

    /// Runs `tool` with `arguments_json` for the call `context` describes
    /// (refused, the tool not run, if the tool could not be given it
    /// unchanged: [`CallContext::check`]), giving up at the caller's
    /// `deadline` or the tool's timeout, whichever is sooner
    /// ([`Deadline::limited_by`]: [`DEFAULT_TIMEOUT`] when neither bounds it).
    pub async fn execute(
        &self,
        tool: &str,
        arguments_json: &str,
        context: CallContext,
        deadline: Deadline,
    ) -> Result<pb::ExecuteResponse, ExecuteError> {
        let tools = self.tools.current();
        let tool = tools
            .get(tool)
            .ok_or_else(|| ExecuteError::UnknownTool(tool.to_owned()))?;
        context.check().map_err(BackendError::from)?;
        let deadline = deadline.limited_by(tool_timeout(tool), DEFAULT_TIMEOUT);
        run(tool, arguments_json, context, deadline).await
    }

    /// The work of `tool` run as a task with `arguments_json` for the call
    /// `context` describes (refused at once, as [`Runtime::execute`]
    /// refuses it, when the tool is unknown or the context cannot be
    /// given to it): it runs for `timeout` from now, else the tool's
    /// `task_timeout`, else its `timeout`, else [`DEFAULT_TIMEOUT`] (at
    /// most a year), with no caller's deadline over it. Returns the tool's
    /// name with it.
    pub(crate) fn task(
        &self,
        tool: &str,
        arguments_json: String,
        context: CallContext,
        timeout: Option<Duration>,
    ) -> Result<(String, crate::tasks::Work), ExecuteError> {
        let tool = self
            .tools
            .current()
            .get(tool)
            .cloned()
            .ok_or_else(|| ExecuteError::UnknownTool(tool.to_owned()))?;
        context.check().map_err(BackendError::from)?;
        let budget = timeout
            .or_else(|| toolmesh_proto::rules::duration(tool.descriptor().task_timeout))
            .or_else(|| tool_timeout(&tool))
            .unwrap_or(DEFAULT_TIMEOUT)
            .min(MAX_TASK_TIMEOUT);
        let deadline = Deadline::after(budget);
        let name = tool.descriptor().name.clone();
        let work = async move { run(&tool, &arguments_json, context, deadline).await };
        Ok((name, Box::pin(work)))
    }
}

/// Runs `tool` for a checked call until `deadline`, and normalizes what
/// it returns: `Execute` and tasks alike.
async fn run(
    tool: &Tool,
    arguments_json: &str,
    context: CallContext,
    deadline: Deadline,
) -> Result<pb::ExecuteResponse, ExecuteError> {
    let name = &tool.descriptor().name;
    let span = toolmesh_telemetry::call_span!(
        context.trace.is_traced(),
        "execute_tool",
        otel.name = %format_args!("execute_tool {name}"),
    );
    spans::set(&span, "gen_ai.operation.name", "execute_tool");
    spans::set(&span, "gen_ai.tool.name", name.clone());
    spans::set(&span, "gen_ai.tool.call.id", context.invocation_id.clone());
    let trace = context.trace.onward(&span);
    let context = context.in_trace(trace).with_config(tool.config().clone());
    // Every backend gets `{}` for a call with no arguments, as the
    // registry sends it.
    let arguments_json = toolmesh_proto::rules::arguments(arguments_json);
    let call = tool.backend().call(arguments_json, &context, deadline);
    let outcome = match tokio::time::timeout_at(deadline.at(), call.instrument(span.clone())).await
    {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(error)) => {
            spans::failed(&span, toolmesh_proto::code::name(error.to_status().code()));
            return Err(error.into());
        }
        Err(_elapsed) => {
            spans::failed(&span, "DEADLINE_EXCEEDED");
            return Err(BackendError::DeadlineExceeded.into());
        }
    };
    let Outcome {
        result_json,
        is_error,
        content_json,
    } = normalize(outcome, tool.max_output_bytes());
    if is_error {
        spans::failed(&span, "tool_error");
    }
    Ok(pb::ExecuteResponse {
        result_json,
        is_error,
        content_json,
    })
}

/// The error result for output over `max_bytes`.
pub(crate) fn output_too_large(max_bytes: usize) -> Outcome {
    Outcome::error_message(&format!(
        "the tool's output exceeds the limit of {max_bytes} bytes"
    ))
}

fn tool_timeout(tool: &Tool) -> Option<Duration> {
    toolmesh_proto::rules::duration(tool.descriptor().timeout)
}

/// Makes `outcome.result_json` valid JSON within `max_bytes` (its content
/// blocks, if any, counted too): JSON output is kept (trimmed), other text
/// becomes a JSON string, and output over the cap becomes an error result
/// saying so.
pub fn normalize(outcome: Outcome, max_bytes: usize) -> Outcome {
    let blocks = outcome.content_json.len();
    if outcome.result_json.len().saturating_add(blocks) > max_bytes {
        return output_too_large(max_bytes);
    }
    let trimmed = outcome.result_json.trim();
    let result_json = if serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_ok() {
        trimmed.to_owned()
    } else {
        json_string(&outcome.result_json)
    };
    if result_json.len().saturating_add(blocks) > max_bytes {
        return Outcome::error_message(&format!(
            "the tool's output exceeds the limit of {max_bytes} bytes once encoded as JSON"
        ));
    }
    Outcome {
        result_json,
        is_error: outcome.is_error,
        content_json: outcome.content_json,
    }
}

#[cfg(test)]
mod task_tests;
#[cfg(test)]
mod tests;
