//! One `info` line per Invoke, rejections included: the tool, how the call
//! ended, its latency, the instance that answered, how many attempts it
//! took, and whether it was an idempotency replay. Never the arguments,
//! the result, or an error message (those may quote the arguments). Names
//! the agent or a sidecar chose (tool, instance) are quoted and escaped.
//!
//! ```text
//! INFO toolmesh_registry::call_log: call tool="add" outcome=ok latency_ms=1.42 instance="s1" attempts=1
//! INFO toolmesh_registry::call_log: call tool="add" outcome=INVALID_ARGUMENT latency_ms=0.08 attempts=0
//! INFO toolmesh_registry::call_log: call tool="add" outcome=ok latency_ms=1.63 instance="s1" attempts=1 trace_id="4bf92f3577b34da6a3ce929d0e0e4736"
//! ```
//!
//! The line is written outside the call's spans, so it names the call's
//! trace once, in its own `trace_id`, and no span.
//!
//! The same call's [`crate::access::audit`] record is written at the same moment,
//! when the audit log is on, and its [`crate::metrics`] recorded (the
//! outcome `ok` is `OK` there, as the metrics name every gRPC code).

use std::{net::SocketAddr, sync::Arc};

use tokio::time::Instant;
use tonic::Code;
use toolmesh_proto::pb::InvokeResponse;
use toolmesh_telemetry::shown::{QUOTED_MAX, clip};

use crate::{
    access::audit::{AuditLog, InvokeRecord, Outcome, Redactor},
    calls::tail::{CallRecord, CallTail},
    catalog::Entry,
    error::RegistryError,
    metrics::{Metrics, ToolSeries},
};

/// The call log's target, named for the stream rather than the file, so
/// that `--log` filters and log readers keep working when code moves.
pub(crate) const TARGET: &str = "toolmesh_registry::call_log";

/// A call in progress. Writes the call's line (and audit record) when
/// dropped, so a call the agent abandons mid-way is logged too (as
/// `CANCELLED`).
#[derive(Debug)]
pub(crate) struct CallLog {
    tool: String,
    started: Instant,
    enabled: bool,
    outcome: &'static str,
    instance: Option<String>,
    attempts: u32,
    replayed: bool,
    trace_id: Option<String>,
    /// The task the call started, if it started one.
    task: Option<String>,
    /// The version and digest of the definition the call went to.
    definition: Option<(String, Arc<str>)>,
    audit: Option<Audited>,
    metrics: Option<Arc<Metrics>>,
    /// The tool's series in `metrics`, once the call found it.
    series: Option<Arc<ToolSeries>>,
    /// The console's tail, and the caller it shows.
    tail: Option<(Arc<CallTail>, Arc<str>)>,
}

/// What the audit record adds to the line.
#[derive(Debug)]
struct Audited {
    log: AuditLog,
    caller: String,
    peer: Option<SocketAddr>,
    argument_bytes: usize,
    outcome: Outcome,
    arguments: Option<(
        Arc<toolmesh_proto::pb::ToolDescriptor>,
        Arc<Redactor>,
        serde_json::Value,
    )>,
}

impl CallLog {
    /// A call to `tool` starting now; `enabled: false` writes nothing.
    pub(crate) fn start(tool: &str, enabled: bool) -> Self {
        Self::started_at(tool, enabled, Instant::now())
    }

    /// A call to `tool` that started at `started` (its arrival, as its
    /// deadline counts it: one reading of the clock for both).
    pub(crate) fn started_at(tool: &str, enabled: bool, started: Instant) -> Self {
        Self {
            tool: tool.to_owned(),
            started,
            enabled,
            outcome: toolmesh_proto::code::outcome(Code::Cancelled),
            instance: None,
            attempts: 0,
            replayed: false,
            trace_id: None,
            task: None,
            definition: None,
            audit: None,
            metrics: None,
            series: None,
            tail: None,
        }
    }

    /// Names the call's trace on its line: the trace its span belongs to
    /// when traces are exported, else `incoming`, the agent's.
    #[must_use]
    pub(crate) fn traced(mut self, incoming: Option<&str>) -> Self {
        self.trace_id = toolmesh_telemetry::format::current_ids()
            .map(|(trace, _)| trace)
            .or_else(|| incoming.map(str::to_owned));
        self
    }

    /// Also records the call in `metrics`.
    #[must_use]
    pub(crate) fn metered(mut self, metrics: &Arc<Metrics>) -> Self {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Also shows the call in `tail`, as `caller`'s.
    #[must_use]
    pub(crate) fn tailed(mut self, tail: Option<&Arc<CallTail>>, caller: &str) -> Self {
        self.tail = tail.map(|tail| (tail.clone(), caller.into()));
        self
    }

    /// Also writes the call's record to `audit`, when it is on.
    #[must_use]
    pub(crate) fn audited(
        mut self,
        audit: &AuditLog,
        caller: &str,
        peer: Option<SocketAddr>,
        argument_bytes: usize,
    ) -> Self {
        if audit.is_enabled() {
            self.audit = Some(Audited {
                log: audit.clone(),
                caller: caller.to_owned(),
                peer,
                argument_bytes,
                outcome: Outcome::Failed(Code::Cancelled),
                arguments: None,
            });
        }
        self
    }

    /// Whether the call's arguments could go in its audit record.
    pub(crate) fn wants_arguments(&self, descriptor: &toolmesh_proto::pb::ToolDescriptor) -> bool {
        self.audit.is_some() && descriptor.audit_arguments
    }

    /// The call's validated arguments, for its audit record: kept only if
    /// the tool's descriptor allows, redacted by `redactor` when written.
    pub(crate) fn arguments(
        &mut self,
        descriptor: &Arc<toolmesh_proto::pb::ToolDescriptor>,
        redactor: Arc<Redactor>,
        arguments: serde_json::Value,
    ) {
        if let Some(audit) = &mut self.audit
            && descriptor.audit_arguments
        {
            audit.arguments = Some((descriptor.clone(), redactor, arguments));
        }
    }

    /// The call's attempts ended on `instance` (the last one tried).
    pub(crate) fn attempted(&mut self, instance: Option<&str>, attempts: u32) {
        self.instance = instance.map(str::to_owned);
        self.attempts = attempts;
    }

    /// The call was answered from its idempotency key's first run.
    pub(crate) fn replayed(&mut self) {
        self.replayed = true;
    }

    /// The call was refused with `error` before it was looked at; its
    /// line is written now.
    pub(crate) fn refused(mut self, error: &RegistryError) {
        self.outcome = toolmesh_proto::code::outcome(error.code());
        if let Some(audit) = &mut self.audit {
            audit.outcome = Outcome::Failed(error.code());
        }
    }

    /// The call was started as a task on `instance`; its line is written
    /// now (the task's end writes one of its own).
    pub(crate) fn started_task(mut self, task: &str, instance: Option<&str>) {
        self.outcome = TASK_STARTED;
        self.task = Some(task.to_owned());
        if let Some(audit) = &mut self.audit {
            audit.outcome = Outcome::Ok;
        }
        self.attempted(instance, u32::from(instance.is_some()));
    }

    /// The call went to `entry`'s definition.
    pub(crate) fn resolved(&mut self, entry: &Entry) {
        let tool = entry.tool();
        self.definition = Some((tool.descriptor.version.clone(), tool.digest.clone()));
        // The series are the tool's name's; a call that named a version
        // keeps the label its own name gives.
        if let Some(metrics) = &self.metrics
            && tool.name() == self.tool
        {
            self.series = Some(entry.series(metrics));
        }
    }

    /// The call was held for approval as task `task`.
    pub(crate) fn held(mut self, task: &str) {
        self.outcome = APPROVAL_REQUIRED;
        self.task = Some(task.to_owned());
        if let Some(audit) = &mut self.audit {
            audit.outcome = Outcome::Ok;
        }
    }

    /// The call ends with `result`; its line is written now.
    pub(crate) fn finish(mut self, result: &Result<InvokeResponse, RegistryError>) {
        self.outcome = outcome(result);
        if let Some(audit) = &mut self.audit {
            audit.outcome = Outcome::of_invoke(result);
        }
        if let Ok(response) = result {
            self.attempted(Some(&response.instance_id), response.attempts);
        }
    }
}

impl Drop for CallLog {
    fn drop(&mut self) {
        // One reading of the clock for the metrics, the tail, the audit
        // record and the line alike.
        let latency = self.started.elapsed();
        if let Some(metrics) = &self.metrics {
            match &self.series {
                Some(series) => series.invoked(self.outcome, latency),
                None => metrics.invoked(&self.tool, self.outcome, latency),
            }
            if self.replayed {
                metrics.replayed(&self.tool);
            }
        }
        if let Some((tail, caller)) = self.tail.take() {
            let record = CallRecord {
                at: std::time::SystemTime::now(),
                tool: self.tool.as_str().into(),
                caller,
                outcome: self.outcome,
                latency,
                instance: self.instance.clone().filter(|i| !i.is_empty()),
                task: self.task.clone(),
            };
            tail.record(record, self.definition.is_some(), std::time::Instant::now());
        }
        if let Some(audit) = self.audit.take() {
            let mut record = InvokeRecord {
                caller: audit.caller,
                tool: self.tool.clone(),
                instance: self.instance.clone(),
                outcome: audit.outcome,
                latency,
                argument_bytes: audit.argument_bytes,
                attempts: self.attempts,
                idempotency_replay: self.replayed,
                peer: audit.peer,
                arguments: None,
                task: self.task.take(),
                version: self
                    .definition
                    .as_ref()
                    .map(|(version, _)| version.clone())
                    .filter(|v| !v.is_empty()),
                digest: self.definition.as_ref().map(|(_, d)| d.to_string()),
            };
            if let Some((descriptor, redactor, arguments)) = audit.arguments {
                record = record.with_arguments(&descriptor, &redactor, arguments);
            }
            audit.log.record(record);
        }
        if !self.enabled {
            return;
        }
        let micros = latency.as_micros();
        // Milliseconds with microsecond precision; exact in an f64 far past
        // any deadline.
        #[allow(clippy::cast_precision_loss)]
        let latency_ms = micros as f64 / 1000.0;
        // No parent span: the line carries the tool and the trace itself,
        // once each.
        tracing::info!(
            target: TARGET,
            parent: None,
            tool = clip(&self.tool, QUOTED_MAX).as_str(),
            outcome = %self.outcome,
            latency_ms,
            instance = self
                .instance
                .as_deref()
                .filter(|i| !i.is_empty())
                .map(|i| clip(i, QUOTED_MAX))
                .as_deref(),
            attempts = self.attempts,
            replayed = self.replayed.then_some(true),
            task = self.task.as_deref(),
            version = self
                .definition
                .as_ref()
                .map(|(v, _)| v.as_str())
                .filter(|v| !v.is_empty()),
            trace_id = self.trace_id.as_deref(),
            "call"
        );
    }
}

/// The outcome of a call started as a task.
pub(crate) const TASK_STARTED: &str = "task_started";
/// The outcome of a call held for approval: it is a task, waiting.
pub(crate) const APPROVAL_REQUIRED: &str = "approval_required";

/// `ok`, `tool_error` (the tool ran and reported a failure), or the gRPC
/// code as an outcome (`invalid_argument`, `resource_exhausted`, ...): the
/// spelling the audit log and the metrics use too.
pub(crate) fn outcome(result: &Result<InvokeResponse, RegistryError>) -> &'static str {
    match result {
        Ok(response) if response.is_error => toolmesh_proto::code::TOOL_ERROR,
        Ok(_) => "ok",
        Err(error) => toolmesh_proto::code::outcome(error.code()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_name_the_tool_error_and_the_code() {
        let response = |is_error| InvokeResponse {
            is_error,
            ..InvokeResponse::default()
        };
        assert_eq!(outcome(&Ok(response(false))), "ok");
        assert_eq!(outcome(&Ok(response(true))), "tool_error");
        let not_found = RegistryError::ToolNotFound { tool: "t".into() };
        assert_eq!(outcome(&Err(not_found)), "not_found");
    }
}
