//! The sidecar's Prometheus metrics, served at `/metrics` on the admin
//! port (`--admin-listen`, [`toolmesh_telemetry::admin`]). Names, types
//! and labels are fixed by the metrics contract (docs: the sidecar table):
//!
//! - `toolmesh_sidecar_executions_total{tool, outcome}`: every `Execute`;
//! - `toolmesh_sidecar_execute_duration_seconds{tool, outcome}`: its time;
//! - `toolmesh_sidecar_in_flight{tool}`: executions running now;
//! - `toolmesh_sidecar_tasks_total{tool, outcome}`: every task
//!   (`RunTask`) once its work ended (`cancelled`: stopped, by `StopTask`
//!   or the registry);
//! - `toolmesh_sidecar_tasks_running{tool}`: tasks whose work runs now;
//! - `toolmesh_sidecar_announces_total{result}` and
//!   `toolmesh_sidecar_heartbeats_total{result}`: the registry's answers,
//!   `accepted` or the gRPC code name;
//! - `toolmesh_sidecar_registered`: 1 while it holds a lease;
//! - `toolmesh_sidecar_mcp_up{server}`, `toolmesh_sidecar_mcp_tools{server}`
//!   and `toolmesh_sidecar_mcp_restarts_total{server}`: each MCP server
//!   ([`crate::mcp`]): connected and listed, its tools published, the
//!   times it was lost and tried again;
//! - `toolmesh_sidecar_build_info{version}`: always 1.
//!
//! `tool` is a tool this sidecar serves (its config bounds them), or
//! [`UNKNOWN_TOOL`] for any other name a caller sent. `outcome` is the gRPC
//! code as an outcome (`ok`, `deadline_exceeded`, ...: the spelling of the
//! registry's logs, metrics and audit log) or [`TOOL_ERROR`] for a result
//! with `is_error`; a call its caller abandoned is `cancelled`.
//!
//! [`Metered`] records executions in front of the `ToolRuntime` service;
//! the task table records tasks;
//! the announcer records announces, heartbeats and the lease.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::time::Instant;
use tonic::Code;
use toolmesh_proto::pb;
use toolmesh_telemetry::families::{Always, latency};

use crate::runtime::Runtime;
use crate::toolset::ToolSet;

/// The `tool` label of a call to a tool this sidecar does not serve: the
/// name is the caller's, so it never becomes a label value. Tool names
/// cannot contain parentheses, so it never collides with one.
pub const UNKNOWN_TOOL: &str = "(unknown)";

/// The `outcome` of an execution whose result has `is_error` set.
pub const TOOL_ERROR: &str = toolmesh_proto::code::TOOL_ERROR;

/// The `result` of an announce or heartbeat the registry accepted.
pub const ACCEPTED: &str = "accepted";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcome {
    tool: Arc<str>,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: Arc<str>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerLabel {
    server: Arc<str>,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

#[derive(Debug)]
struct Families {
    registry: Arc<Registry>,
    executions: Family<ToolOutcome, Counter>,
    durations: Family<ToolOutcome, Histogram, fn() -> Histogram>,
    in_flight: Family<ToolLabel, Gauge>,
    tasks: Family<ToolOutcome, Counter>,
    tasks_running: Family<ToolLabel, Gauge>,
    announces: Family<ResultLabel, Counter>,
    heartbeats: Family<ResultLabel, Counter>,
    registered: Gauge,
    mcp_up: Family<ServerLabel, Gauge>,
    mcp_tools: Family<ServerLabel, Gauge>,
    mcp_restarts: Family<ServerLabel, Counter>,
}

/// The sidecar's metrics and the registry that exposes them. Clones share
/// them.
#[derive(Debug, Clone)]
pub struct Metrics(Arc<Families>);

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every family registered, `build_info` set, nothing recorded yet.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("toolmesh_sidecar");
        let executions = Family::<ToolOutcome, Counter>::default();
        registry.register(
            "executions",
            "Execute calls, by tool and outcome (ok, tool_error, or the gRPC code in snake case)",
            Always(executions.clone()),
        );
        let durations: Family<ToolOutcome, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency);
        registry.register(
            "execute_duration_seconds",
            "Time from receiving an Execute call to answering it, by tool and outcome",
            Always(durations.clone()),
        );
        let in_flight = Family::<ToolLabel, Gauge>::default();
        registry.register(
            "in_flight",
            "Execute calls running now, by tool",
            Always(in_flight.clone()),
        );
        let tasks = Family::<ToolOutcome, Counter>::default();
        registry.register(
            "tasks",
            "Tasks (RunTask) whose work ended, by tool and outcome (ok, tool_error, or the gRPC code in snake case; cancelled: stopped)",
            Always(tasks.clone()),
        );
        let tasks_running = Family::<ToolLabel, Gauge>::default();
        registry.register(
            "tasks_running",
            "Tasks whose work runs now, by tool",
            Always(tasks_running.clone()),
        );
        let announces = Family::<ResultLabel, Counter>::default();
        registry.register(
            "announces",
            "Announces to the registry, by result (accepted, or the gRPC code name)",
            Always(announces.clone()),
        );
        let heartbeats = Family::<ResultLabel, Counter>::default();
        registry.register(
            "heartbeats",
            "Heartbeats to the registry, by result (accepted, or the gRPC code name)",
            Always(heartbeats.clone()),
        );
        let registered = Gauge::default();
        registry.register(
            "registered",
            "1 while this sidecar holds a lease from the registry",
            registered.clone(),
        );
        let mcp_up = Family::<ServerLabel, Gauge>::default();
        registry.register(
            "mcp_up",
            "1 while the MCP server is connected and its tools listed, by server (its program or URL)",
            mcp_up.clone(),
        );
        let mcp_tools = Family::<ServerLabel, Gauge>::default();
        registry.register(
            "mcp_tools",
            "Tools of the MCP server published now, by server",
            mcp_tools.clone(),
        );
        let mcp_restarts = Family::<ServerLabel, Counter>::default();
        registry.register(
            "mcp_restarts",
            "Times the MCP server was lost (exited, closed, did not answer) and tried again, by server",
            mcp_restarts.clone(),
        );
        let build_info = Family::<VersionLabel, Gauge>::default();
        build_info
            .get_or_create(&VersionLabel {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        registry.register("build_info", "The sidecar's version; always 1", build_info);
        Self(Arc::new(Families {
            registry: Arc::new(registry),
            executions,
            durations,
            in_flight,
            tasks,
            tasks_running,
            announces,
            heartbeats,
            registered,
            mcp_up,
            mcp_tools,
            mcp_restarts,
        }))
    }

    /// The registry to serve ([`toolmesh_telemetry::admin::serve`]).
    pub fn registry(&self) -> Arc<Registry> {
        self.0.registry.clone()
    }

    /// An execution of the tool of `series` starts: counted in flight
    /// until the returned guard is finished or dropped.
    fn execution_started(&self, series: ToolSeries) -> Execution {
        series.in_flight.inc();
        Execution {
            metrics: self.clone(),
            series,
            start: Instant::now(),
            outcome: None,
        }
    }

    /// A task of `tool` (a served tool's name) starts: counted running
    /// until the returned record says how it ended, or is dropped
    /// (`cancelled`).
    pub(crate) fn task_started(&self, tool: Arc<str>) -> TaskRecord {
        self.0
            .tasks_running
            .get_or_create(&ToolLabel { tool: tool.clone() })
            .inc();
        TaskRecord {
            metrics: self.clone(),
            tool,
            ended: false,
        }
    }

    /// The registry answered an announce: `Ok` holds a lease from then on.
    pub(crate) fn announce_answered(&self, answer: Result<(), Code>) {
        self.0
            .announces
            .get_or_create(&ResultLabel {
                result: result(answer),
            })
            .inc();
        if answer.is_ok() {
            self.0.registered.set(1);
        }
    }

    /// The registry answered a heartbeat: `NOT_FOUND` means the lease is
    /// gone.
    pub(crate) fn heartbeat_answered(&self, answer: Result<(), Code>) {
        self.0
            .heartbeats
            .get_or_create(&ResultLabel {
                result: result(answer),
            })
            .inc();
        if answer == Err(Code::NotFound) {
            self.0.registered.set(0);
        }
    }

    /// The MCP server `server` is listed: `tools` of its tools published.
    pub(crate) fn mcp_listed(&self, server: &Arc<str>, tools: usize) {
        let label = ServerLabel {
            server: server.clone(),
        };
        self.0.mcp_up.get_or_create(&label).set(1);
        self.0
            .mcp_tools
            .get_or_create(&label)
            .set(i64::try_from(tools).unwrap_or(i64::MAX));
    }

    /// The MCP server `server` is gone, its tools withdrawn; `retried`: it
    /// is tried again (not the sidecar stopping).
    pub(crate) fn mcp_lost(&self, server: &Arc<str>, retried: bool) {
        let label = ServerLabel {
            server: server.clone(),
        };
        self.0.mcp_up.get_or_create(&label).set(0);
        self.0.mcp_tools.get_or_create(&label).set(0);
        if retried {
            self.0.mcp_restarts.get_or_create(&label).inc();
        }
    }

    /// The lease is given up (withdrawn, or the withdraw given up on).
    pub(crate) fn lease_released(&self) {
        self.0.registered.set(0);
    }
}

fn result(answer: Result<(), Code>) -> &'static str {
    match answer {
        Ok(()) => ACCEPTED,
        Err(code) => toolmesh_proto::code::outcome(code),
    }
}

/// A served tool's execution series, resolved once: the gauge and the `ok`
/// counter and histogram every call of the tool records (the other
/// outcomes are looked up by label when they happen).
#[derive(Debug, Clone)]
struct ToolSeries {
    tool: Arc<str>,
    in_flight: Gauge,
    ok: Counter,
    ok_durations: Histogram,
}

impl ToolSeries {
    fn of(metrics: &Metrics, tool: Arc<str>) -> Self {
        let families = &metrics.0;
        let ok = ToolOutcome {
            tool: tool.clone(),
            outcome: toolmesh_proto::code::outcome(Code::Ok),
        };
        Self {
            in_flight: families
                .in_flight
                .get_or_create(&ToolLabel { tool: tool.clone() })
                .clone(),
            ok: families.executions.get_or_create(&ok).clone(),
            ok_durations: families.durations.get_or_create(&ok).clone(),
            tool,
        }
    }
}

/// One execution being timed. Dropped before [`Execution::finished`] (the
/// caller went away and the call was abandoned), it counts as `CANCELLED`.
struct Execution {
    metrics: Metrics,
    series: ToolSeries,
    start: Instant,
    outcome: Option<&'static str>,
}

impl Execution {
    /// It ended with `outcome`.
    fn finished(mut self, outcome: &'static str) {
        self.outcome = Some(outcome);
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        let series = &self.series;
        series.in_flight.dec();
        let seconds = self.start.elapsed().as_secs_f64();
        let outcome = self
            .outcome
            .unwrap_or_else(|| toolmesh_proto::code::outcome(Code::Cancelled));
        if outcome == toolmesh_proto::code::outcome(Code::Ok) {
            series.ok.inc();
            series.ok_durations.observe(seconds);
            return;
        }
        let families = &self.metrics.0;
        let labels = ToolOutcome {
            tool: series.tool.clone(),
            outcome,
        };
        families.executions.get_or_create(&labels).inc();
        families.durations.get_or_create(&labels).observe(seconds);
    }
}

/// One task's work, counted running until it ends.
pub(crate) struct TaskRecord {
    metrics: Metrics,
    tool: Arc<str>,
    ended: bool,
}

impl TaskRecord {
    /// Its work ended with `outcome` (only the first call counts).
    pub(crate) fn ended(&mut self, outcome: &'static str) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let families = &self.metrics.0;
        families
            .tasks_running
            .get_or_create(&ToolLabel {
                tool: self.tool.clone(),
            })
            .dec();
        families
            .tasks
            .get_or_create(&ToolOutcome {
                tool: self.tool.clone(),
                outcome,
            })
            .inc();
    }
}

impl Drop for TaskRecord {
    fn drop(&mut self) {
        self.ended(toolmesh_proto::code::outcome(Code::Cancelled));
    }
}

/// The outcome label of an `Execute` answer.
fn outcome(answer: &Result<tonic::Response<pb::ExecuteResponse>, tonic::Status>) -> &'static str {
    match answer {
        Ok(response) if response.get_ref().is_error => TOOL_ERROR,
        Ok(_) => toolmesh_proto::code::outcome(Code::Ok),
        Err(status) => toolmesh_proto::code::outcome(status.code()),
    }
}

/// A `ToolRuntime` service that records each `Execute` of the service it
/// wraps in [`Metrics`].
#[derive(Debug, Clone)]
pub struct Metered<S> {
    inner: S,
    metrics: Metrics,
    /// The series of the tools served from the start.
    served: Arc<HashMap<Arc<str>, ToolSeries>>,
    tools: Arc<ToolSet>,
    unknown: Arc<str>,
}

impl<S> Metered<S> {
    /// `inner`, serving the tools of `runtime`, recorded in `metrics`. Each
    /// served tool shows 0 in flight from the start.
    pub fn new(inner: S, runtime: &Runtime, metrics: Metrics) -> Self {
        let served = runtime
            .descriptors()
            .into_iter()
            .map(|d| {
                let tool: Arc<str> = Arc::from(d.name);
                (tool.clone(), ToolSeries::of(&metrics, tool))
            })
            .collect();
        Self {
            inner,
            metrics,
            served: Arc::new(served),
            tools: runtime.tools().clone(),
            unknown: Arc::from(UNKNOWN_TOOL),
        }
    }

    /// The series of a call naming `tool`: its own if it is served (from
    /// the start, or since, by an MCP server), else [`UNKNOWN_TOOL`]'s.
    fn series(&self, tool: &str) -> ToolSeries {
        if let Some(series) = self.served.get(tool) {
            return series.clone();
        }
        let label = if self.tools.current().get(tool).is_some() {
            Arc::from(tool)
        } else {
            self.unknown.clone()
        };
        ToolSeries::of(&self.metrics, label)
    }
}

#[tonic::async_trait]
impl<S> pb::tool_runtime_server::ToolRuntime for Metered<S>
where
    S: pb::tool_runtime_server::ToolRuntime,
{
    async fn execute(
        &self,
        request: tonic::Request<pb::ExecuteRequest>,
    ) -> Result<tonic::Response<pb::ExecuteResponse>, tonic::Status> {
        let execution = self
            .metrics
            .execution_started(self.series(&request.get_ref().tool));
        let answer = self.inner.execute(request).await;
        execution.finished(outcome(&answer));
        answer
    }

    /// Forwarded: a task is recorded by the table that runs it, from its
    /// start to the end of its work.
    async fn run_task(
        &self,
        request: tonic::Request<pb::RunTaskRequest>,
    ) -> Result<tonic::Response<pb::RunTaskResponse>, tonic::Status> {
        self.inner.run_task(request).await
    }

    async fn stop_task(
        &self,
        request: tonic::Request<pb::StopTaskRequest>,
    ) -> Result<tonic::Response<pb::StopTaskResponse>, tonic::Status> {
        self.inner.stop_task(request).await
    }
}

#[cfg(test)]
mod tests;
