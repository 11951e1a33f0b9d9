//! `Invoke`: look up → validate → rate limit → pick an instance → execute
//! within the deadline → answer.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use toolmesh_proto::{
    deadline::Deadline,
    pb::{InvokeRequest, InvokeResponse},
};
use toolmesh_telemetry::{
    TraceContext,
    shown::{Clipped, QUOTED_MAX, Quoted, clip},
    spans,
};
use tracing::Instrument as _;

mod admit;

pub(crate) use admit::{Admission, Admitted, Purpose};

use crate::{
    access::audit::AuditLog,
    calls::balance::Balancer,
    calls::call_log::CallLog,
    calls::idempotency::{IdempotencyStore, StoredOutcome},
    calls::proxy::Proxy,
    calls::ratelimit::RateLimiter,
    calls::retry::Attempts,
    calls::tail::CallTail,
    catalog::{Catalog, Entry, ToolState},
    error::RegistryError,
    metrics::Metrics,
};

/// Settings of the invoke path.
#[derive(Debug, Clone)]
pub(crate) struct InvokeSettings {
    /// Timeout of tools that declare none.
    pub default_timeout: Duration,
    /// Largest `arguments_json` accepted.
    pub max_arguments_bytes: usize,
    /// Whether every call writes its [`crate::calls::call_log`] line.
    pub log_calls: bool,
}

impl Default for InvokeSettings {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(30),
            max_arguments_bytes: 1 << 20,
            log_calls: true,
        }
    }
}

/// Who makes a call, and from where.
#[derive(Debug)]
pub(crate) struct Call<'a> {
    /// The caller id (`""`: anonymous).
    pub caller: &'a str,
    /// The agent's address.
    pub peer: Option<SocketAddr>,
    /// The caller's deadline, read when the request arrived; the tool's
    /// timeout limits it once the tool is known.
    pub deadline: Deadline,
    /// The agent's trace context.
    pub trace: TraceContext,
}

/// Runs agents' calls.
pub(crate) struct Invoker {
    attempts: Attempts,
    audit: std::sync::OnceLock<AuditLog>,
    tail: std::sync::OnceLock<Arc<CallTail>>,
    idempotency: Arc<dyn IdempotencyStore>,
    catalog: Arc<Catalog>,
    limiter: Arc<dyn RateLimiter>,
    settings: InvokeSettings,
    metrics: Arc<Metrics>,
}

impl Invoker {
    /// An invoker over its parts, recording every call in `metrics`.
    pub(crate) fn new(
        catalog: Arc<Catalog>,
        limiter: Arc<dyn RateLimiter>,
        balancer: Arc<Balancer>,
        proxy: Arc<Proxy>,
        idempotency: Arc<dyn IdempotencyStore>,
        settings: InvokeSettings,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            attempts: Attempts::new(balancer, proxy, metrics.clone()),
            audit: std::sync::OnceLock::new(),
            tail: std::sync::OnceLock::new(),
            idempotency,
            catalog,
            limiter,
            settings,
            metrics,
        }
    }

    /// Writes a record of every call to `audit` from now on; only the
    /// first log given is kept.
    pub(crate) fn audit_to(&self, audit: AuditLog) {
        let _ = self.audit.set(audit);
    }

    /// Shows every call in `tail` from now on (the console's); only the
    /// first tail given is kept.
    pub(crate) fn tail_to(&self, tail: Arc<CallTail>) {
        let _ = self.tail.set(tail);
    }

    pub(crate) fn audit(&self) -> &AuditLog {
        static DISABLED: std::sync::LazyLock<AuditLog> =
            std::sync::LazyLock::new(AuditLog::disabled);
        self.audit.get().unwrap_or(&DISABLED)
    }

    /// Logs, meters and audits a call the policy refused as
    /// `PERMISSION_DENIED`, what it was: only the agent is answered
    /// `NOT_FOUND` (the caller's answer is not this record's).
    pub(crate) fn denied(&self, request: &InvokeRequest, caller: &str, peer: Option<SocketAddr>) {
        let reason = "the call policy gives the caller no rule for this tool".into();
        self.refused(
            request,
            caller,
            peer,
            &RegistryError::PermissionDenied { reason },
        );
    }

    /// Logs (and audits) a call refused before it reached the invoke path:
    /// its caller could not be authenticated, or may not call the tool.
    pub(crate) fn refused(
        &self,
        request: &InvokeRequest,
        caller: &str,
        peer: Option<SocketAddr>,
        error: &RegistryError,
    ) {
        CallLog::start(&request.tool, self.settings.log_calls)
            .traced(None)
            .metered(&self.metrics)
            .audited(self.audit(), caller, peer, request.arguments_json.len())
            .tailed(self.tail.get(), caller)
            .refused(error);
    }

    /// The log line (and audit record, and metrics) of one call.
    pub(crate) fn call_log(&self, request: &InvokeRequest, call: &Call<'_>) -> CallLog {
        CallLog::started_at(
            &request.tool,
            self.settings.log_calls,
            call.deadline.arrived(),
        )
        .traced(call.trace.trace_id())
        .metered(&self.metrics)
        .audited(
            self.audit(),
            call.caller,
            call.peer,
            request.arguments_json.len(),
        )
        .tailed(self.tail.get(), call.caller)
    }

    /// The output schema's verdict on a task's result, as [`Invoker::invoke`]
    /// gives it.
    pub(crate) fn conformed(&self, entry: &Entry, response: InvokeResponse) -> InvokeResponse {
        if response.is_error {
            response
        } else {
            self.conform(entry, response)
        }
    }

    /// The catalog the calls are looked up in.
    pub(crate) fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The settings of the invoke path.
    pub(crate) fn settings(&self) -> &InvokeSettings {
        &self.settings
    }

    /// Runs one call, and logs it in one line (and one audit record), in
    /// an `execute_tool` span.
    pub(crate) async fn invoke(
        &self,
        request: InvokeRequest,
        call: Call<'_>,
    ) -> Result<InvokeResponse, RegistryError> {
        let invocation_id = uuid::Uuid::new_v4().to_string();
        let span = toolmesh_telemetry::call_span!(
            call.trace.is_traced(),
            "execute_tool",
            otel.name = %format_args!("execute_tool {}", clip(&request.tool, QUOTED_MAX)),
        );
        if call.trace.is_traced() {
            spans::set(&span, "gen_ai.operation.name", "execute_tool");
            spans::set(&span, "gen_ai.tool.name", clip(&request.tool, QUOTED_MAX));
            spans::set(&span, "gen_ai.tool.call.id", invocation_id.clone());
        }
        let mut log = self.call_log(&request, &call);
        let result = self
            .run(request, &call, invocation_id, &mut log)
            .instrument(span.clone())
            .await;
        match &result {
            Ok(response) if response.is_error => spans::failed(&span, "tool_error"),
            Ok(_) => {}
            Err(error) => spans::failed(&span, toolmesh_proto::code::name(error.code())),
        }
        log.finish(&result);
        result
    }

    async fn run(
        &self,
        request: InvokeRequest,
        call: &Call<'_>,
        invocation_id: String,
        log: &mut CallLog,
    ) -> Result<InvokeResponse, RegistryError> {
        let span = tracing::Span::current();
        let Admitted {
            entry,
            execute,
            deadline,
            ticket,
        } = match self
            .admit(request, call, invocation_id, log, Purpose::Invoke)
            .await?
        {
            Admission::Admitted(admitted) => admitted,
            Admission::Replay(outcome) => return replay(outcome),
        };
        let tool = entry.tool();
        let attempted = self
            .attempts
            .run(
                tool,
                &entry.series(&self.metrics),
                execute,
                deadline,
                &call.trace,
            )
            .await;
        log.attempted(attempted.last_instance.as_deref(), attempted.attempts);
        spans::set(&span, "toolmesh.attempts", i64::from(attempted.attempts));
        if let Some(instance) = &attempted.last_instance {
            spans::set(&span, "toolmesh.instance", instance.clone());
        }
        let result = match attempted.result {
            Ok(response) if !response.is_error => Ok(self.conform(&entry, response)),
            other => other,
        }
        .map(|response| self.versioned(tool, call.caller, response));
        if let Some(ticket) = ticket {
            if attempted.reached {
                ticket.complete(stored(&result)).await;
            } else {
                // Provably never ran: a repeat may run it.
                ticket.release().await;
            }
        }
        result
    }

    /// `response` naming the version that ran it, and its deprecation
    /// notice (counted, and logged with the caller) if it has one.
    fn versioned(
        &self,
        tool: &ToolState,
        caller: &str,
        mut response: InvokeResponse,
    ) -> InvokeResponse {
        response.version.clone_from(&tool.descriptor.version);
        if let Some(notice) = self.catalog.deprecation(tool) {
            self.metrics
                .deprecated_call(tool.name(), &tool.descriptor.version);
            tracing::info!(
                tool = %Quoted(tool.name()),
                version = %Quoted(&tool.descriptor.version),
                caller = %Quoted(caller),
                "a call went to a deprecated version"
            );
            response.deprecation = notice;
        }
        response
    }

    /// `response` if its result matches the tool's output schema (or the
    /// tool declares none); else an error result naming each mismatch, so
    /// that a result breaking its contract never reaches the agent as if
    /// it were valid.
    fn conform(&self, entry: &Entry, response: InvokeResponse) -> InvokeResponse {
        let Some(validator) = entry.output_validator() else {
            return response;
        };
        let tool = entry.tool();
        let violations = match serde_json::from_str(&response.result_json) {
            Ok(result) => match validator.check(&result) {
                Ok(()) => return response,
                Err(violations) => violations,
            },
            Err(error) => vec![crate::error::Violation {
                pointer: String::new(),
                message: format!("not JSON: {error}"),
            }],
        };
        self.metrics.nonconforming(tool.name());
        tracing::warn!(
            tool = %Quoted(tool.name()),
            instance = %Quoted(&response.instance_id),
            violations = violations.len(),
            first = %Clipped(violations.first().map_or("", |v| v.message.as_str())),
            "a result does not match the tool's output schema; the agent gets an error result"
        );
        let error = serde_json::json!({
            "error": format!("the tool's result does not match its output schema, so it is withheld ({} violations)", violations.len()),
            "violations": violations
                .iter()
                .map(|v| serde_json::json!({"field": v.pointer, "description": v.message}))
                .collect::<Vec<_>>(),
        });
        // The blocks would carry what is withheld.
        InvokeResponse {
            result_json: error.to_string(),
            is_error: true,
            content_json: String::new(),
            ..response
        }
    }
}

/// What a repeat of this call will be answered with.
fn stored(result: &Result<InvokeResponse, RegistryError>) -> StoredOutcome {
    match result {
        Ok(response) => StoredOutcome::Response {
            result_json: response.result_json.clone(),
            is_error: response.is_error,
            instance_id: response.instance_id.clone(),
            attempts: response.attempts,
            content_json: response.content_json.clone(),
        },
        Err(error) => {
            let status = error.to_status();
            StoredOutcome::Status {
                code: status.code(),
                message: status.message().to_owned(),
            }
        }
    }
}

/// The answer a repeat gets.
fn replay(outcome: StoredOutcome) -> Result<InvokeResponse, RegistryError> {
    match outcome {
        StoredOutcome::Response {
            result_json,
            is_error,
            instance_id,
            attempts,
            content_json,
        } => Ok(InvokeResponse {
            result_json,
            is_error,
            instance_id,
            attempts,
            content_json,
            version: String::new(),
            deprecation: String::new(),
        }),
        StoredOutcome::Status { code, message } => Err(RegistryError::Replayed { code, message }),
        // Keys of tasks and of calls never meet (`Purpose`).
        StoredOutcome::Task { .. } => Err(RegistryError::Replayed {
            code: tonic::Code::Internal,
            message: "the idempotency key's first call was started as a task".into(),
        }),
    }
}
