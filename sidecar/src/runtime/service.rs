//! [`RuntimeService`]: the tonic `ToolRuntime` service. Each RPC checks
//! that the registry signed it, decodes, and hands the call to
//! [`Runtime`] (and a task to the task table).

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use toolmesh_proto::deadline::Deadline;
use toolmesh_proto::grant::{self, Verifier};
use toolmesh_proto::pb;
use toolmesh_telemetry::{
    TraceContext,
    shown::{QUOTED_MAX, clip},
    spans,
    throttle::Throttle,
};

use super::{ExecuteError, Runtime};
use crate::context::CallContext;
use crate::progress::Progress;
use crate::tasks::{NewTask, Tasks};

/// The tonic `ToolRuntime` service: checks the call's grant, decodes,
/// delegates to [`Runtime`] (and the task table), encodes.
#[derive(Debug, Clone)]
pub struct RuntimeService {
    runtime: Arc<Runtime>,
    grants: Arc<Verifier>,
    identity: Option<String>,
    tasks: Option<Arc<Tasks>>,
    /// Refusals are logged at most once per [`REFUSALS_LOGGED_EVERY`]:
    /// anyone who reaches the port can cause them.
    refusals: Arc<Throttle>,
}

/// How often a refused call is logged, at most.
const REFUSALS_LOGGED_EVERY: Duration = Duration::from_secs(10);

impl RuntimeService {
    /// The service in front of `runtime`, taking only calls whose grant
    /// `grants` admits (see [`toolmesh_proto::grant`]); others are
    /// `UNAUTHENTICATED`. It runs no tasks: `RunTask` is
    /// `FAILED_PRECONDITION` ([`crate::server::serve`] serves one that
    /// does).
    pub fn new(runtime: Arc<Runtime>, grants: Arc<Verifier>) -> Self {
        Self {
            runtime,
            grants,
            identity: None,
            tasks: None,
            refusals: Arc::new(Throttle::new(REFUSALS_LOGGED_EVERY)),
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

    /// Runs tasks in `tasks`.
    #[must_use]
    pub(crate) fn with_tasks(mut self, tasks: Arc<Tasks>) -> Self {
        self.tasks = Some(tasks);
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

    async fn run_task(
        &self,
        request: tonic::Request<pb::RunTaskRequest>,
    ) -> Result<tonic::Response<pb::RunTaskResponse>, tonic::Status> {
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let (tool, caller, task) = request.get_ref().call.as_ref().map_or(("", "", ""), |c| {
            (c.tool.as_str(), c.caller.as_str(), c.invocation_id.as_str())
        });
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.ToolRuntime/RunTask",
            otel.kind = "server",
            tool = %clip(tool, QUOTED_MAX),
            caller = %clip(caller, QUOTED_MAX),
            task = %clip(task, QUOTED_MAX),
        );
        spans::serve(
            span,
            &trace,
            RUN_TASK,
            self.run_task_traced(request, trace.clone()),
        )
        .await
    }

    async fn stop_task(
        &self,
        request: tonic::Request<pb::StopTaskRequest>,
    ) -> Result<tonic::Response<pb::StopTaskResponse>, tonic::Status> {
        let trace = TraceContext::from_metadata(request.metadata()).decide();
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.ToolRuntime/StopTask",
            otel.kind = "server",
            tool = %clip(&request.get_ref().tool, QUOTED_MAX),
            caller = %clip(&request.get_ref().caller, QUOTED_MAX),
            task = %clip(&request.get_ref().task_id, QUOTED_MAX),
        );
        spans::serve(span, &trace, STOP_TASK, async { self.stop(&request) }).await
    }
}

/// `ToolRuntime.Execute`'s fully qualified name, as its spans name it.
const EXECUTE: &str = "toolmesh.v1.ToolRuntime/Execute";
/// `ToolRuntime.RunTask`'s.
const RUN_TASK: &str = "toolmesh.v1.ToolRuntime/RunTask";
/// `ToolRuntime.StopTask`'s.
const STOP_TASK: &str = "toolmesh.v1.ToolRuntime/StopTask";

/// The tool a `StopTask` grant is minted for: `stop ` and the task's tool.
/// No tool name has a space, so no stop grant admits an `Execute` or a
/// `RunTask`.
pub(crate) fn stop_grant_tool(tool: &str) -> String {
    format!("stop {tool}")
}

/// What a grant is checked against: the call the registry signed.
struct Signed<'a> {
    /// Which RPC, for the log.
    rpc: &'static str,
    tool: &'a str,
    invocation: &'a str,
    caller: &'a str,
    arguments_json: &'a str,
}

impl RuntimeService {
    /// Whether `request` comes from the registry: it carries a grant for
    /// the call `signed` (taken once: the replay guard is shared by every
    /// RPC) and, when an identity is required, its client certificate.
    fn admit<T>(
        &self,
        request: &tonic::Request<T>,
        signed: &Signed<'_>,
    ) -> Result<(), ExecuteError> {
        let rpc = signed.rpc;
        if let Err(refusal) = self.grants.check(
            request.metadata(),
            signed.tool,
            signed.invocation,
            signed.caller,
            signed.arguments_json,
            grant::now_ms(),
        ) {
            if let Some(left_out) = self.refusals.admit(Instant::now()) {
                tracing::warn!(%refusal, left_out, "{rpc} refused: not a call the registry signed");
            }
            return Err(ExecuteError::NotFromRegistry {
                what: refusal.to_string(),
            });
        }
        if let Some(identity) = &self.identity
            && !toolmesh_proto::tls::peer(request).has_identity(identity)
        {
            if let Some(left_out) = self.refusals.admit(Instant::now()) {
                tracing::warn!(
                    left_out,
                    "{rpc} without the registry's client certificate refused"
                );
            }
            return Err(ExecuteError::NotFromRegistry {
                what: "a client certificate with its identity".to_owned(),
            });
        }
        Ok(())
    }

    /// `Execute` inside its server span; `trace` is the registry's context.
    async fn execute_traced(
        &self,
        request: tonic::Request<pb::ExecuteRequest>,
        trace: TraceContext,
    ) -> Result<tonic::Response<pb::ExecuteResponse>, tonic::Status> {
        let call = request.get_ref();
        self.admit(
            &request,
            &Signed {
                rpc: "Execute",
                tool: &call.tool,
                invocation: &call.invocation_id,
                caller: &call.caller,
                arguments_json: &call.arguments_json,
            },
        )
        .map_err(|e| e.to_status())?;
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

    /// `RunTask` inside its server span: checked as `Execute` is, then
    /// started on a task of its own.
    async fn run_task_traced(
        &self,
        request: tonic::Request<pb::RunTaskRequest>,
        trace: TraceContext,
    ) -> Result<tonic::Response<pb::RunTaskResponse>, tonic::Status> {
        let Some(call) = request.get_ref().call.as_ref() else {
            return Err(tonic::Status::invalid_argument("RunTask needs its call"));
        };
        self.admit(
            &request,
            &Signed {
                rpc: "RunTask",
                tool: &call.tool,
                invocation: &call.invocation_id,
                caller: &call.caller,
                arguments_json: &call.arguments_json,
            },
        )
        .map_err(|e| e.to_status())?;
        let Some(tasks) = &self.tasks else {
            return Err(tonic::Status::failed_precondition(
                "this sidecar runs no tasks: it has no registry to report them to",
            ));
        };
        let req = request.into_inner();
        let call = req.call.unwrap_or_default();
        if call.invocation_id.is_empty() {
            return Err(tonic::Status::invalid_argument(
                "a task needs an id: the call's invocation_id",
            ));
        }
        let (progress, updates) = Progress::channel();
        let context = CallContext::new(call.caller.clone(), call.invocation_id.clone())
            .in_trace(trace.clone())
            .with_progress(progress);
        let timeout = toolmesh_proto::rules::duration(req.timeout);
        let (tool, work) = self
            .runtime
            .task(&call.tool, call.arguments_json, context, timeout)
            .map_err(|err| {
                tracing::warn!(error = %err, "task not started");
                err.to_status()
            })?;
        let task = NewTask {
            id: call.invocation_id,
            tool,
            caller: call.caller,
            report_token: req.report_token,
            trace,
        };
        tasks.start(task, work, updates).map_err(|err| {
            tracing::warn!(error = %err, retryable = err.is_retryable(), "task not started");
            err.to_status()
        })?;
        tracing::debug!("task started");
        Ok(tonic::Response::new(pb::RunTaskResponse {}))
    }

    /// `StopTask`: its grant is for `stop <tool>`, the task and its caller,
    /// with no arguments.
    fn stop(
        &self,
        request: &tonic::Request<pb::StopTaskRequest>,
    ) -> Result<tonic::Response<pb::StopTaskResponse>, tonic::Status> {
        let stop = request.get_ref();
        self.admit(
            request,
            &Signed {
                rpc: "StopTask",
                tool: &stop_grant_tool(&stop.tool),
                invocation: &stop.task_id,
                caller: &stop.caller,
                arguments_json: "",
            },
        )
        .map_err(|e| e.to_status())?;
        let stopped = self
            .tasks
            .as_ref()
            .is_some_and(|tasks| tasks.stop(&stop.task_id, &stop.tool, &stop.caller));
        tracing::info!(stopped, "StopTask");
        Ok(tonic::Response::new(pb::StopTaskResponse {}))
    }
}
