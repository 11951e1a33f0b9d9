//! Running one call on the tool's instances: retries where they are safe,
//! hedging for idempotent tools, all within the call's deadline and a retry
//! budget. What a failure means (whether the tool may have run, whether it
//! may be retried) is [`ProxyError`]'s to say; this module schedules.
//!
//! - A call that never reached a sidecar (no connection) is retried on
//!   another instance, whatever the tool.
//! - A transport failure mid-call, or `UNAVAILABLE` from the sidecar, is
//!   retried only for idempotent tools: the sidecar may have run it.
//! - An idempotent call with no answer after half its deadline is hedged: a
//!   second attempt starts on another instance and the first answer wins, so
//!   a hung instance (SIGSTOP, a stuck pod) costs half a deadline, not the
//!   call. The attempt that lost the race counts as a failure for outlier
//!   ejection.
//! - Retries and hedges draw on a budget (20% of recent calls plus 10/s), so
//!   a failing fleet does not see a retry storm.

use std::{ops::ControlFlow, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt as _, stream::FuturesUnordered};
use tokio::time::Instant;
use tonic::{Code, metadata::AsciiMetadataValue};
use toolmesh_proto::{
    deadline::Deadline,
    grant::{self, ArgumentsDigest, CallKey},
    pb::{ExecuteRequest, ExecuteResponse, InvokeResponse},
};
use toolmesh_telemetry::{TraceContext, spans};
use tower::retry::budget::{Budget as _, TpsBudget};
use tracing::Instrument as _;

use crate::{
    calls::balance::Balancer,
    calls::proxy::{Health, Proxy, ProxyError},
    catalog::{Instance, ToolState},
    error::RegistryError,
    metrics::{Metrics, ToolSeries},
};

/// Most attempts (retries and hedges included) for one call.
pub(crate) const MAX_ATTEMPTS: usize = 3;

/// The end of a call's attempts.
#[derive(Debug)]
pub(crate) struct Attempted {
    /// The answer, or why there is none.
    pub result: Result<InvokeResponse, RegistryError>,
    /// Whether any attempt may have reached a sidecar (and so run the tool).
    /// `false` only when every attempt provably never left the registry.
    pub reached: bool,
    /// How many instances were tried.
    pub attempts: u32,
    /// The last instance tried, if any.
    pub last_instance: Option<String>,
}

/// Runs calls on instances with retries and hedging.
pub(crate) struct Attempts {
    balancer: Arc<Balancer>,
    proxy: Arc<Proxy>,
    budget: TpsBudget,
    metrics: Arc<Metrics>,
}

impl Attempts {
    /// Attempts over `balancer` and `proxy`, with the default retry
    /// budget, each timed in `metrics`.
    pub(crate) fn new(balancer: Arc<Balancer>, proxy: Arc<Proxy>, metrics: Arc<Metrics>) -> Self {
        Self {
            balancer,
            proxy,
            budget: TpsBudget::new(Duration::from_secs(10), 10, 0.2),
            metrics,
        }
    }

    /// Runs `request` on `tool`'s instances until one answers, the deadline
    /// passes, or another attempt would not be safe (or affordable).
    pub(crate) async fn run(
        &self,
        tool: &ToolState,
        series: &Arc<ToolSeries>,
        request: ExecuteRequest,
        deadline: Deadline,
        trace: &TraceContext,
    ) -> Attempted {
        let mut reached = false;
        let mut tried = Vec::new();
        let encoded = match self.proxy.encode(&request) {
            Ok(encoded) => encoded,
            Err(error) => {
                return Attempted {
                    result: Err(self.refused_request(tool, error)),
                    reached,
                    attempts: 0,
                    last_instance: None,
                };
            }
        };
        let call = Launch {
            tool,
            series,
            request: &encoded,
            sent: &request,
            arguments: ArgumentsDigest::of(&request.arguments_json),
            deadline,
            trace,
        };
        let result = self.attempt(&call, &mut reached, &mut tried).await;
        Attempted {
            result,
            reached,
            attempts: u32::try_from(tried.len()).unwrap_or(u32::MAX),
            last_instance: tried.pop(),
        }
    }

    async fn attempt(
        &self,
        call: &Launch<'_>,
        reached: &mut bool,
        tried: &mut Vec<String>,
    ) -> Result<InvokeResponse, RegistryError> {
        let tool = call.tool;
        self.budget.deposit();
        let mut state = Settling {
            reached,
            failure: RegistryError::NoHealthyInstance {
                tool: tool.name().to_owned(),
                detail: "no live instance".to_owned(),
            },
            finished: Vec::new(),
        };
        // Halfway to the deadline, from one reading of the clock.
        let now = Instant::now();
        let hedge_at = now + call.deadline.at().saturating_duration_since(now) / 2;
        let mut hedged = false;

        let Some(first) = self.launch(call, Kind::First, tried) else {
            return Err(state.failure);
        };
        let mut running = FuturesUnordered::new();
        // The common case, one attempt and no hedge to time, is awaited
        // where it is: no task of a set, no timer.
        // Boxed: an attempt's state is large, and moving it through this
        // state machine costs more than the allocation.
        let mut alone = None;
        if may_hedge(tool, hedged, tried) {
            running.push(first);
        } else {
            alone = Some(Box::pin(first));
        }
        loop {
            let done = if let Some(first) = alone.take() {
                first.await
            } else {
                let hedge_timer = async {
                    if may_hedge(tool, hedged, tried) {
                        tokio::time::sleep_until(hedge_at).await;
                    } else {
                        std::future::pending::<()>().await;
                    }
                };
                // No deadline timer here: every attempt carries the call's
                // deadline and ends by it.
                tokio::select! {
                    done = running.next() => match done {
                        Some(done) => done,
                        None => return Err(state.failure),
                    },
                    () = hedge_timer => {
                        hedged = true;
                        if self.budget.withdraw()
                            && let Some(next) = self.launch(call, Kind::Hedge, tried) {
                                tracing::info!(tool = tool.name(), instance = %next_id(tried), "no answer after half the deadline; hedging");
                                self.metrics.hedged(tool.name());
                                running.push(next);
                            }
                        continue;
                    }
                }
            };
            let retry = match self.settle(call, done, tried, &mut state) {
                ControlFlow::Break(result) => return result,
                ControlFlow::Continue(retry) => retry,
            };
            if retry
                && tried.len() < MAX_ATTEMPTS
                && self.budget.withdraw()
                && let Some(next) = self.launch(call, Kind::Retry, tried)
            {
                self.metrics.retried(tool.name());
                running.push(next);
            }
            if running.is_empty() {
                return Err(state.failure);
            }
        }
    }

    /// Sorts an attempt's end into the call's answer or final failure
    /// (`Break`), or a failure after which another attempt may follow
    /// (`Continue(retry)`).
    fn settle(
        &self,
        call: &Launch<'_>,
        (instance, outcome): (Arc<Instance>, Result<ExecuteResponse, ProxyError>),
        tried: &[String],
        state: &mut Settling<'_>,
    ) -> ControlFlow<Result<InvokeResponse, RegistryError>, bool> {
        let tool = call.tool;
        state.finished.push(instance.id.clone());
        match outcome {
            Ok(response) => {
                *state.reached = true;
                self.balancer.record_success(&instance.id);
                // An attempt still running lost a hedged race: that
                // instance was too slow to answer.
                for loser in tried.iter().filter(|id| !state.finished.contains(id)) {
                    self.balancer.record_failure(loser);
                }
                ControlFlow::Break(Ok(InvokeResponse {
                    result_json: response.result_json,
                    is_error: response.is_error,
                    instance_id: instance.id.clone(),
                    attempts: u32::try_from(tried.len()).unwrap_or(u32::MAX),
                    content_json: response.content_json,
                    version: String::new(),
                    deprecation: String::new(),
                }))
            }
            Err(error) => {
                *state.reached |= error.reached();
                match error.health() {
                    Health::Failed => {
                        self.balancer.record_failure(&instance.id);
                    }
                    Health::Answered => self.balancer.record_success(&instance.id),
                    Health::Unknown => {}
                }
                error.log(tool.name(), &instance.id);
                if error.is_final(&call.deadline) {
                    *state.reached = true;
                    return ControlFlow::Break(Err(error.into_error(
                        tool.name(),
                        &instance.id,
                        &call.deadline,
                    )));
                }
                let retry = error.is_retryable(tool.descriptor.idempotent, &call.deadline);
                state.failure = error.into_error(tool.name(), &instance.id, &call.deadline);
                ControlFlow::Continue(retry)
            }
        }
    }

    /// The error for a request the proxy would not send: over the message
    /// limit once encoded.
    fn refused_request(&self, tool: &ToolState, error: ProxyError) -> RegistryError {
        let reason = match error {
            ProxyError::Status(status) => status.message().to_owned(),
            other => other.to_string(),
        };
        tracing::debug!(tool = tool.name(), %reason, "request not sent");
        RegistryError::InvalidRequest {
            field: "arguments_json".into(),
            reason,
        }
    }

    /// Starts an attempt on an instance not yet tried, in its own client
    /// span, which the sidecar's spans are children of.
    fn launch(
        &self,
        call: &Launch<'_>,
        kind: Kind,
        tried: &mut Vec<String>,
    ) -> Option<
        impl Future<
            Output = (
                Arc<Instance>,
                Result<toolmesh_proto::pb::ExecuteResponse, ProxyError>,
            ),
        > + use<>,
    > {
        let (instance, in_flight) = self.balancer.pick(&call.tool.instances, tried)?;
        tried.push(instance.id.clone());
        let span = toolmesh_telemetry::call_span!(
            call.trace.is_traced(),
            "toolmesh.v1.ToolRuntime/Execute",
            otel.kind = "client",
            instance = %instance.id,
        );
        // Attributes only for an exported span: parsing the endpoint and
        // copying ids is work an untraced call should not pay for.
        if call.trace.is_traced() {
            spans::rpc(&span, EXECUTE);
            spans::set(&span, "toolmesh.instance", instance.id.clone());
            spans::set(
                &span,
                "toolmesh.attempt",
                i64::try_from(tried.len()).unwrap_or(i64::MAX),
            );
            spans::set(&span, "toolmesh.attempt.kind", kind.name());
            if let Some((address, port)) = server_address(&instance.endpoint) {
                spans::set(&span, "server.address", address);
                spans::set(&span, "server.port", i64::from(port));
            }
        }
        let proxy = self.proxy.clone();
        let request = call.request.clone();
        let grant = instance
            .execute_key
            .as_ref()
            .map(|key| call.grant(key, &instance.id));
        let (deadline, trace) = (call.deadline, call.trace.clone());
        let series = call.series.clone();
        Some(
            async move {
                let _in_flight = in_flight;
                let started = Instant::now();
                let onward = trace.onward(&tracing::Span::current());
                let outcome = proxy
                    .execute(&instance.endpoint, request, grant, deadline, &onward)
                    .await;
                series.attempt(attempt_outcome(&outcome), started.elapsed());
                spans::rpc_status(
                    &tracing::Span::current(),
                    toolmesh_proto::code::name(attempt_code(&outcome)),
                );
                (instance, outcome)
            }
            .instrument(span),
        )
    }
}

/// What a call's attempts have come to so far.
struct Settling<'a> {
    reached: &'a mut bool,
    /// The failure the call ends with if no attempt answers.
    failure: RegistryError,
    /// Instances whose attempt has ended.
    finished: Vec<String>,
}

/// Whether another attempt may start beside the ones running once half the
/// deadline has passed: for an idempotent tool not yet hedged, with an
/// instance not yet tried.
fn may_hedge(tool: &ToolState, hedged: bool, tried: &[String]) -> bool {
    tool.descriptor.idempotent
        && !hedged
        && tried.len() < MAX_ATTEMPTS
        && tried.len() < tool.instances.len()
}

/// `ToolRuntime.Execute`'s fully qualified name, as its spans name it.
const EXECUTE: &str = "toolmesh.v1.ToolRuntime/Execute";

/// One call's attempts share these.
struct Launch<'a> {
    tool: &'a ToolState,
    series: &'a Arc<ToolSeries>,
    /// The request, encoded.
    request: &'a Bytes,
    /// The request as it was encoded, for the grants.
    sent: &'a ExecuteRequest,
    arguments: ArgumentsDigest,
    deadline: Deadline,
    trace: &'a TraceContext,
}

impl Launch<'_> {
    /// A grant of this call for the instance `instance`, whose key is `key`.
    fn grant(&self, key: &CallKey, instance: &str) -> AsciiMetadataValue {
        grant::Call {
            instance,
            invocation: &self.sent.invocation_id,
            tool: &self.sent.tool,
            caller: &self.sent.caller,
            arguments: self.arguments,
        }
        .grant(key, rand::random())
    }
}

/// Why an attempt starts.
#[derive(Debug, Clone, Copy)]
enum Kind {
    First,
    Retry,
    Hedge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::First => "first",
            Self::Retry => "retry",
            Self::Hedge => "hedge",
        }
    }
}

/// The gRPC code an attempt ended with.
fn attempt_code(outcome: &Result<toolmesh_proto::pb::ExecuteResponse, ProxyError>) -> Code {
    outcome.as_ref().map_or_else(ProxyError::code, |_| Code::Ok)
}

/// The host and port of a sidecar's endpoint URL.
fn server_address(endpoint: &str) -> Option<(String, u16)> {
    let uri: tonic::codegen::http::Uri = endpoint.parse().ok()?;
    Some((uri.host()?.to_owned(), uri.port_u16()?))
}

/// One attempt's outcome as the metrics name it: its gRPC code
/// ([`attempt_code`]) as an outcome, or `tool_error` for an answer that
/// is one.
fn attempt_outcome(
    outcome: &Result<toolmesh_proto::pb::ExecuteResponse, ProxyError>,
) -> &'static str {
    match outcome {
        Ok(response) if response.is_error => toolmesh_proto::code::TOOL_ERROR,
        _ => toolmesh_proto::code::outcome(attempt_code(outcome)),
    }
}

fn next_id(tried: &[String]) -> &str {
    tried.last().map_or("", String::as_str)
}
