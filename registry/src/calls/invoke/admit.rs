//! The front door every call goes through, `Invoke` and a task's start
//! alike: the tool looked up, the arguments checked, the idempotency key
//! claimed, the rate limits' tokens taken.

use std::time::Duration;

use toolmesh_proto::{
    deadline::Deadline,
    pb::{ExecuteRequest, InvokeRequest},
};
use toolmesh_telemetry::spans;

use super::{Call, Invoker};
use crate::{
    calls::call_log::CallLog,
    calls::idempotency::{
        Claim, IdempotencyError, IdempotencyKey, StoredOutcome, Ticket, fingerprint,
    },
    calls::ratelimit::{CallDecision, CallLimits, Refused},
    catalog::descriptor::{self, Limit},
    catalog::validate,
    catalog::versions::Reference,
    catalog::{Entry, ToolState},
    error::RegistryError,
    metrics::{RateLimitDecision, ValidationFailure},
};

/// What a call through the front door is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// An `Invoke`, answered when the tool is.
    Invoke,
    /// A task's start, answered once the task runs.
    Task,
}

/// A call the front door let through.
pub(crate) struct Admitted {
    /// The tool, as the call found it.
    pub entry: Entry,
    /// What the sidecar is sent.
    pub execute: ExecuteRequest,
    /// The call's deadline, the tool's timeout applied (for a task's
    /// start, [`TASK_START_BUDGET`]).
    pub deadline: Deadline,
    /// The idempotency key, claimed for this call.
    pub ticket: Option<Ticket>,
}

/// The front door's answer.
pub(crate) enum Admission {
    /// The call goes on.
    Admitted(Admitted),
    /// A repeat: its key's first call ended so.
    Replay(StoredOutcome),
}

/// Longest a task's start may take (its caller's deadline may be shorter).
pub(crate) const TASK_START_BUDGET: Duration = Duration::from_secs(10);

/// Longest idempotency key accepted.
pub(crate) const MAX_IDEMPOTENCY_KEY_LEN: usize = 256;
/// How long past its deadline a call may hold its idempotency key (a replica
/// that died mid-call frees it then).
const IDEMPOTENCY_HOLD_MARGIN: Duration = Duration::from_secs(5);

impl Invoker {
    /// Takes a call through the front door: the tool looked up, the
    /// arguments parsed and validated (and kept for the audit record), the
    /// idempotency key claimed (a repeat is answered from its first run),
    /// the rate limits' tokens taken.
    pub(crate) async fn admit(
        &self,
        request: InvokeRequest,
        call: &Call<'_>,
        invocation_id: String,
        log: &mut CallLog,
        purpose: Purpose,
    ) -> Result<Admission, RegistryError> {
        let caller = call.caller;
        let span = tracing::Span::current();
        let reference = Reference::parse(&request.tool, &request.version, "tool")?;
        let entry = self
            .catalog
            .resolve(&reference, &request.tool_digest)
            .inspect_err(|error| {
                if matches!(error, RegistryError::ToolChanged(_)) {
                    spans::set(&span, "toolmesh.definition", "changed");
                }
            })?;
        let tool = entry.tool();
        log.resolved(&entry);
        let arguments =
            validate::parse_arguments(&request.arguments_json, self.settings.max_arguments_bytes)
                .inspect_err(|_| {
                spans::set(&span, "toolmesh.validation", "malformed");
                self.metrics
                    .validation_failed(&request.tool, ValidationFailure::Malformed);
            })?;
        entry.validator()?.check(&arguments).map_err(|violations| {
            spans::set(&span, "toolmesh.validation", "invalid");
            self.metrics
                .validation_failed(&request.tool, ValidationFailure::Schema);
            RegistryError::ArgumentsInvalid {
                tool: request.tool.clone(),
                violations,
            }
        })?;
        spans::set(&span, "toolmesh.validation", "valid");
        if log.wants_arguments(&tool.descriptor) {
            log.arguments(&tool.descriptor, entry.redactor(), arguments.clone());
        }
        let deadline = match purpose {
            Purpose::Invoke => call.deadline.limited(
                descriptor::timeout(&tool.descriptor).unwrap_or(self.settings.default_timeout),
            ),
            Purpose::Task => call.deadline.limited(TASK_START_BUDGET),
        };
        let ticket = match request.idempotency_key.as_str() {
            "" => None,
            key => match self
                .claim(tool, caller, key, &arguments, deadline, purpose)
                .await?
            {
                Claim::Run(ticket) => Some(ticket),
                Claim::Replay(outcome) => {
                    log.replayed();
                    spans::set(&span, "toolmesh.idempotency_replay", true);
                    return Ok(Admission::Replay(outcome));
                }
                Claim::ArgumentsDiffer => {
                    return Err(RegistryError::IdempotencyKeyReused {
                        tool: request.tool,
                        key: request.idempotency_key,
                    });
                }
            },
        };
        let limited = self.take_token(tool, caller).await;
        spans::set(
            &span,
            "toolmesh.rate_limit",
            match &limited {
                Ok(()) => "allowed",
                Err(RegistryError::RateLimited {
                    caller: Some(_), ..
                }) => "limited_caller",
                Err(RegistryError::RateLimited { caller: None, .. }) => "limited_tool",
                Err(_) => "unavailable",
            },
        );
        if let Err(error) = limited {
            if let Some(ticket) = ticket {
                ticket.release().await;
            }
            return Err(error);
        }
        let execute = ExecuteRequest {
            tool: tool.name().to_owned(),
            arguments_json: if toolmesh_proto::rules::no_arguments(&request.arguments_json) {
                "{}".into()
            } else {
                request.arguments_json
            },
            invocation_id,
            caller: caller.to_owned(),
        };
        Ok(Admission::Admitted(Admitted {
            entry,
            execute,
            deadline,
            ticket,
        }))
    }

    /// Claims `key` for this call, waiting (within the deadline) for an
    /// earlier call with the same key to finish.
    async fn claim(
        &self,
        tool: &ToolState,
        caller: &str,
        key: &str,
        arguments: &serde_json::Value,
        deadline: Deadline,
        purpose: Purpose,
    ) -> Result<Claim, RegistryError> {
        if key.len() > MAX_IDEMPOTENCY_KEY_LEN {
            return Err(RegistryError::InvalidRequest {
                field: "idempotency_key".into(),
                reason: format!("longer than {MAX_IDEMPOTENCY_KEY_LEN} bytes"),
            });
        }
        let key = IdempotencyKey {
            caller: caller.to_owned(),
            // A space: no tool's name, so a task's key is never a call's.
            tool: match purpose {
                Purpose::Invoke => tool.name().to_owned(),
                Purpose::Task => format!("task {}", tool.name()),
            },
            key: key.to_owned(),
        };
        let hold_for = deadline.budget() + IDEMPOTENCY_HOLD_MARGIN;
        self.idempotency
            .claim(&key, &fingerprint(arguments), hold_for, deadline.at())
            .await
            .map_err(|error| match error {
                IdempotencyError::WaitTimedOut => RegistryError::DeadlineExceeded {
                    tool: tool.name().to_owned(),
                    deadline: deadline.budget(),
                },
                IdempotencyError::Unavailable(reason) => RegistryError::StoreUnavailable { reason },
                IdempotencyError::Full => RegistryError::IdempotencyFull,
            })
    }

    /// Takes the call's tokens: its caller's on the tool, then the tool's.
    pub(crate) async fn take_token(
        &self,
        tool: &ToolState,
        caller: &str,
    ) -> Result<(), RegistryError> {
        let limit = Limit::of(&tool.descriptor);
        let per_caller = Limit::per_caller(&tool.descriptor);
        if limit.is_none() && per_caller.is_none() {
            return Ok(());
        }
        let key = tool.key();
        let call = CallLimits {
            tool: &key,
            limit,
            caller: per_caller.map(|l| (caller, l)),
        };
        let decision = self.limiter.acquire_call(call).await.map_err(|e| {
            self.metrics
                .rate_limit(tool.name(), RateLimitDecision::Error);
            RegistryError::LimiterUnavailable {
                tool: tool.name().to_owned(),
                reason: e.to_string(),
            }
        })?;
        let CallDecision::Deny { retry_after, by } = decision else {
            self.metrics
                .rate_limit(tool.name(), RateLimitDecision::Allowed);
            return Ok(());
        };
        self.metrics.rate_limit(
            tool.name(),
            match by {
                Refused::Caller => RateLimitDecision::LimitedCaller,
                Refused::Tool => RateLimitDecision::LimitedTool,
            },
        );
        let (refusing, caller) = match by {
            Refused::Caller => (per_caller, Some(caller.to_owned())),
            Refused::Tool => (limit, None),
        };
        let refusing = refusing.unwrap_or(Limit {
            rate: 0.0,
            burst: 0,
        });
        Err(RegistryError::RateLimited {
            tool: tool.name().to_owned(),
            caller,
            retry_after,
            rate: refusing.rate,
            burst: refusing.burst,
        })
    }
}
