//! `Invoke`: look up → validate → rate limit → pick an instance → execute
//! within the deadline → answer.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use tonic::Code;
use toolmesh_proto::pb::{ExecuteRequest, InvokeRequest, InvokeResponse};
use tower::retry::budget::{Budget as _, TpsBudget};

use crate::{
    balance::Balancer,
    catalog::{Catalog, ToolState},
    descriptor::{self, Limit},
    error::RegistryError,
    proxy::{Proxy, ProxyError},
    ratelimit::{Decision, RateLimiter},
    validate,
};

/// Most instances one call is tried on.
pub const MAX_ATTEMPTS: usize = 3;

/// Settings of the invoke path.
#[derive(Debug, Clone)]
pub struct InvokeSettings {
    /// Timeout of tools that declare none.
    pub default_timeout: Duration,
    /// Largest `arguments_json` accepted.
    pub max_arguments_bytes: usize,
    /// Taken off the caller's gRPC deadline so the registry answers
    /// DEADLINE_EXCEEDED itself just before the caller gives up.
    pub deadline_margin: Duration,
}

impl Default for InvokeSettings {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(30),
            max_arguments_bytes: 1 << 20,
            deadline_margin: Duration::from_millis(10),
        }
    }
}

/// Runs agents' calls.
pub struct Invoker {
    retries: TpsBudget,
    catalog: Arc<Catalog>,
    limiter: Arc<dyn RateLimiter>,
    balancer: Arc<Balancer>,
    proxy: Arc<Proxy>,
    settings: InvokeSettings,
}

impl Invoker {
    /// An invoker over its parts.
    pub fn new(
        catalog: Arc<Catalog>,
        limiter: Arc<dyn RateLimiter>,
        balancer: Arc<Balancer>,
        proxy: Arc<Proxy>,
        settings: InvokeSettings,
    ) -> Self {
        Self {
            // Retries may add at most 20% to the calls of the last 10 s, plus
            // 10 a second, so a failing fleet does not see a retry storm.
            retries: TpsBudget::new(Duration::from_secs(10), 10, 0.2),
            catalog,
            limiter,
            balancer,
            proxy,
            settings,
        }
    }

    /// Runs one call. `caller_timeout` is what remained of the caller's gRPC
    /// deadline when the request arrived.
    pub async fn invoke(
        &self,
        request: InvokeRequest,
        caller_timeout: Option<Duration>,
    ) -> Result<InvokeResponse, RegistryError> {
        let started = Instant::now();
        let tool = self
            .catalog
            .get(&request.tool)
            .ok_or_else(|| RegistryError::ToolNotFound {
                tool: request.tool.clone(),
            })?;
        let arguments =
            validate::parse_arguments(&request.arguments_json, self.settings.max_arguments_bytes)?;
        self.catalog
            .validator(&tool)?
            .check(&arguments)
            .map_err(|violations| RegistryError::ArgumentsInvalid {
                tool: request.tool.clone(),
                violations,
            })?;
        if let Some(limit) = Limit::of(&tool.descriptor) {
            self.take_token(tool.name(), limit).await?;
        }
        let budget = self.budget(&tool, caller_timeout);
        let execute = ExecuteRequest {
            tool: request.tool,
            arguments_json: if request.arguments_json.trim().is_empty() {
                "{}".into()
            } else {
                request.arguments_json
            },
            invocation_id: uuid::Uuid::new_v4().to_string(),
        };
        self.execute(&tool, execute, started + budget, budget).await
    }

    async fn take_token(&self, tool: &str, limit: Limit) -> Result<(), RegistryError> {
        let decision = self.limiter.acquire(tool, limit).await.map_err(|e| {
            RegistryError::LimiterUnavailable {
                tool: tool.to_owned(),
                reason: e.to_string(),
            }
        })?;
        match decision {
            Decision::Allow => Ok(()),
            Decision::Deny { retry_after } => Err(RegistryError::RateLimited {
                tool: tool.to_owned(),
                retry_after,
                rate: limit.rate,
                burst: limit.burst,
            }),
        }
    }

    /// min(caller's deadline less the margin, tool timeout).
    fn budget(&self, tool: &ToolState, caller_timeout: Option<Duration>) -> Duration {
        let tool_timeout =
            descriptor::timeout(&tool.descriptor).unwrap_or(self.settings.default_timeout);
        match caller_timeout {
            Some(caller) => tool_timeout.min(caller.saturating_sub(self.settings.deadline_margin)),
            None => tool_timeout,
        }
    }

    /// Tries instances until one answers, the deadline passes, or retrying
    /// would not be safe (or the retry budget is spent).
    async fn execute(
        &self,
        tool: &ToolState,
        request: ExecuteRequest,
        deadline: Instant,
        budget: Duration,
    ) -> Result<InvokeResponse, RegistryError> {
        let deadline_exceeded = || RegistryError::DeadlineExceeded {
            tool: tool.name().to_owned(),
            deadline: budget,
        };
        self.retries.deposit();
        let mut tried: Vec<String> = Vec::new();
        let mut failure = RegistryError::NoHealthyInstance {
            tool: tool.name().to_owned(),
            detail: "no live instance".into(),
        };
        while tried.len() < MAX_ATTEMPTS {
            if !tried.is_empty() && !self.retries.withdraw() {
                tracing::warn!(tool = tool.name(), "retry budget spent; not retrying");
                break;
            }
            let Some((instance, _in_flight)) = self.balancer.pick(&tool.instances, &tried) else {
                break;
            };
            tried.push(instance.id.clone());
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(deadline_exceeded());
            }
            let outcome = self
                .proxy
                .execute(&instance.endpoint, request.clone(), remaining)
                .await;
            let attempts = u32::try_from(tried.len()).unwrap_or(u32::MAX);
            let retry = match outcome {
                Ok(response) => {
                    self.balancer.record_success(&instance.id);
                    return Ok(InvokeResponse {
                        result_json: response.result_json,
                        is_error: response.is_error,
                        instance_id: instance.id.clone(),
                        attempts,
                    });
                }
                Err(ProxyError::Timeout) => return Err(deadline_exceeded()),
                Err(error @ ProxyError::NotSent { .. }) => {
                    // Never reached the sidecar: safe to retry any tool.
                    self.balancer.record_failure(&instance.id);
                    tracing::warn!(tool = tool.name(), instance = %instance.id, %error, attempts, "instance unreachable");
                    failure = no_instance(tool, &error.to_string());
                    true
                }
                Err(ProxyError::Transport(status)) => {
                    // The sidecar may have run the tool: only an idempotent
                    // one may run again.
                    self.balancer.record_failure(&instance.id);
                    tracing::warn!(tool = tool.name(), instance = %instance.id, message = status.message(), attempts, "transport failure mid-call");
                    failure = no_instance(tool, status.message());
                    tool.descriptor.idempotent
                }
                Err(ProxyError::Status(status)) => {
                    self.balancer.record_success(&instance.id);
                    match status.code() {
                        Code::DeadlineExceeded => return Err(deadline_exceeded()),
                        Code::Cancelled
                            if Instant::now() + Duration::from_millis(50) >= deadline =>
                        {
                            return Err(deadline_exceeded());
                        }
                        // The sidecar does not serve the tool (any more): it never ran.
                        Code::NotFound => {
                            failure = no_instance(
                                tool,
                                &format!("instance {} does not serve the tool", instance.id),
                            );
                            true
                        }
                        code => {
                            failure = RegistryError::Upstream {
                                tool: tool.name().to_owned(),
                                instance: instance.id.clone(),
                                code,
                                message: status.message().to_owned(),
                            };
                            code == Code::Unavailable && tool.descriptor.idempotent
                        }
                    }
                }
            };
            if !retry {
                break;
            }
        }
        Err(failure)
    }
}

fn no_instance(tool: &ToolState, detail: &str) -> RegistryError {
    RegistryError::NoHealthyInstance {
        tool: tool.name().to_owned(),
        detail: detail.to_owned(),
    }
}
