//! `Invoke`: look up → validate → rate limit → pick an instance → execute
//! within the deadline → answer.

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use toolmesh_proto::pb::{ExecuteRequest, InvokeRequest, InvokeResponse};

use crate::{
    balance::Balancer,
    catalog::{Catalog, ToolState},
    descriptor::{self, Limit},
    error::RegistryError,
    proxy::Proxy,
    ratelimit::{Decision, RateLimiter},
    retry::Attempts,
    validate,
};

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
    attempts: Attempts,
    catalog: Arc<Catalog>,
    limiter: Arc<dyn RateLimiter>,
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
            attempts: Attempts::new(balancer, proxy),
            catalog,
            limiter,
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
        self.attempts
            .run(&tool, execute, started + budget, budget)
            .await
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
}
