//! `ToolRuntime.Execute`: find the tool, compute the deadline, run the
//! backend until then, and normalize what it returns.
//!
//! [`Runtime`] is the plain logic (tested without gRPC); [`RuntimeService`]
//! is the thin tonic service in front of it.

use std::sync::Arc;
use std::time::Duration;

use toolmesh_proto::deadline::Deadline;
use toolmesh_proto::grant::{self, Verifier};
use toolmesh_proto::pb;
use toolmesh_telemetry::{
    TraceContext,
    shown::{QUOTED_MAX, Quoted, clip},
    spans,
};
use tracing::Instrument as _;

use crate::context::CallContext;
use crate::tool::{BackendError, Outcome, Tool, json_string};
use crate::toolset::ToolSet;

/// Deadline used when neither the tool nor the caller set one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

pub use crate::toolset::ToolSetError;

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
        let outcome =
            match tokio::time::timeout_at(deadline.at(), call.instrument(span.clone())).await {
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
}

fn tool_timeout(tool: &Tool) -> Option<Duration> {
    let timeout = tool.descriptor().timeout?;
    let secs = u64::try_from(timeout.seconds).ok()?;
    let nanos = u32::try_from(timeout.nanos).ok()?;
    Some(Duration::new(secs, nanos)).filter(|d| !d.is_zero())
}

/// Makes `outcome.result_json` valid JSON within `max_bytes` (its content
/// blocks, if any, counted too): JSON output is kept (trimmed), other text
/// becomes a JSON string, and output over the cap becomes an error result
/// saying so.
pub fn normalize(outcome: Outcome, max_bytes: usize) -> Outcome {
    let blocks = outcome.content_json.len();
    if outcome.result_json.len().saturating_add(blocks) > max_bytes {
        return Outcome::error_message(&format!(
            "the tool's output exceeds the limit of {max_bytes} bytes"
        ));
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

/// The tonic `ToolRuntime` service: checks the call's grant, decodes,
/// delegates to [`Runtime`], encodes.
#[derive(Debug, Clone)]
pub struct RuntimeService {
    runtime: Arc<Runtime>,
    grants: Arc<Verifier>,
    identity: Option<String>,
}

impl RuntimeService {
    /// The service in front of `runtime`, taking only calls whose grant
    /// `grants` admits (see [`toolmesh_proto::grant`]); others are
    /// `UNAUTHENTICATED`.
    pub fn new(runtime: Arc<Runtime>, grants: Arc<Verifier>) -> Self {
        Self {
            runtime,
            grants,
            identity: None,
        }
    }

    /// Takes only calls over a connection whose verified client
    /// certificate carries `identity` (a URI or DNS SAN); others are
    /// `UNAUTHENTICATED`.
    #[must_use]
    pub fn with_identity(mut self, identity: Option<String>) -> Self {
        self.identity = identity;
        self
    }
}

#[tonic::async_trait]
impl pb::tool_runtime_server::ToolRuntime for RuntimeService {
    async fn execute(
        &self,
        request: tonic::Request<pb::ExecuteRequest>,
    ) -> Result<tonic::Response<pb::ExecuteResponse>, tonic::Status> {
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.ToolRuntime/Execute",
            otel.kind = "server",
            tool = %clip(&request.get_ref().tool, QUOTED_MAX),
            caller = %clip(&request.get_ref().caller, QUOTED_MAX),
            invocation = %clip(&request.get_ref().invocation_id, QUOTED_MAX),
        );
        spans::serve(
            span,
            &trace,
            EXECUTE,
            self.execute_traced(request, trace.clone()),
        )
        .await
    }
}

/// `ToolRuntime.Execute`'s fully qualified name, as its spans name it.
const EXECUTE: &str = "toolmesh.v1.ToolRuntime/Execute";

impl RuntimeService {
    /// `Execute` inside its server span; `trace` is the registry's context.
    async fn execute_traced(
        &self,
        request: tonic::Request<pb::ExecuteRequest>,
        trace: TraceContext,
    ) -> Result<tonic::Response<pb::ExecuteResponse>, tonic::Status> {
        let call = request.get_ref();
        if let Err(refusal) = self.grants.check(
            request.metadata(),
            &call.tool,
            &call.invocation_id,
            &call.caller,
            &call.arguments_json,
            grant::now_ms(),
        ) {
            tracing::warn!(%refusal, "Execute refused: not a call the registry signed");
            return Err(ExecuteError::NotFromRegistry {
                what: refusal.to_string(),
            }
            .to_status());
        }
        if let Some(identity) = &self.identity
            && !toolmesh_proto::tls::peer(&request).has_identity(identity)
        {
            tracing::warn!("Execute without the registry's client certificate refused");
            return Err(ExecuteError::NotFromRegistry {
                what: "a client certificate with its identity".to_owned(),
            }
            .to_status());
        }
        let deadline = Deadline::of(&request);
        let req = request.into_inner();
        let context = CallContext::new(req.caller, req.invocation_id).in_trace(trace);
        match self
            .runtime
            .execute(&req.tool, &req.arguments_json, context, deadline)
            .await
        {
            Ok(response) => {
                tracing::debug!(is_error = response.is_error, "tool ran");
                Ok(tonic::Response::new(response))
            }
            Err(err) => {
                tracing::warn!(error = %err, "tool did not run");
                Err(err.to_status())
            }
        }
    }
}

#[cfg(test)]
mod tests;
