//! How an `Execute` failed, and what that means for the call: whether the
//! tool may have run, whether another instance may be tried, whether the
//! instance counts as unhealthy, and the error the agent gets if no attempt
//! answers. The attempts ([`crate::calls::retry`]) only schedule; every decision
//! about a failure is made here.

use tonic::Code;
use toolmesh_proto::deadline::Deadline;

use crate::error::RegistryError;

/// How an `Execute` failed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No connection could be made, or the sidecar refused the stream
    /// unprocessed: the request never reached the tool, so any tool may be
    /// retried elsewhere.
    #[error("cannot connect to {endpoint}: {reason}")]
    NotSent {
        /// The sidecar's endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The connection failed mid-call: the sidecar may have run the tool.
    #[error("transport failure mid-call: {0}")]
    Transport(String),
    /// The deadline passed before the sidecar answered: while connecting,
    /// while waiting, or mid-call.
    #[error("no answer within the deadline")]
    Timeout,
    /// The sidecar answered with a status (or the registry could not read
    /// its answer: oversized, malformed).
    #[error("{0}")]
    Status(tonic::Status),
}

/// What a failed attempt says of its instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// It could not be reached, broke mid-call, or refused the registry's
    /// credentials.
    Failed,
    /// It answered (with a status of the call's own).
    Answered,
    /// Nothing: the deadline passed first (a hedge's loser is counted
    /// apart).
    Unknown,
}

/// What a failed attempt means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Meaning {
    /// The deadline ended it.
    Deadline,
    /// The tool never ran: the request never left, the sidecar refused the
    /// registry's credentials, or it does not serve the tool.
    NeverRan,
    /// The call broke or the sidecar was unavailable: the tool may have run.
    MayHaveRun,
    /// The sidecar answered a status of the call's own.
    Answered,
}

impl ProxyError {
    /// Whether the request may have reached the sidecar (and so run the
    /// tool).
    pub fn reached(&self) -> bool {
        !matches!(self, Self::NotSent { .. })
    }

    /// The gRPC code the attempt ended with, as its span and metrics name
    /// it.
    pub fn code(&self) -> Code {
        match self {
            Self::NotSent { .. } | Self::Transport(_) => Code::Unavailable,
            Self::Timeout => Code::DeadlineExceeded,
            Self::Status(status) => status.code(),
        }
    }

    fn meaning(&self, deadline: &Deadline) -> Meaning {
        match self {
            Self::Timeout => Meaning::Deadline,
            Self::NotSent { .. } => Meaning::NeverRan,
            Self::Transport(_) => Meaning::MayHaveRun,
            Self::Status(status) => match status.code() {
                Code::DeadlineExceeded => Meaning::Deadline,
                // The sidecar's own timer, a hair before ours.
                Code::Cancelled if deadline.is_upon() => Meaning::Deadline,
                Code::Unauthenticated | Code::PermissionDenied | Code::NotFound => {
                    Meaning::NeverRan
                }
                Code::Unavailable => Meaning::MayHaveRun,
                _ => Meaning::Answered,
            },
        }
    }

    /// Whether the call ends with this failure, whatever attempts are left:
    /// its deadline ended it.
    pub fn is_final(&self, deadline: &Deadline) -> bool {
        self.meaning(deadline) == Meaning::Deadline
    }

    /// Whether another instance may be tried after this failure, for a
    /// tool that is `idempotent` or not: always when the tool never ran;
    /// when it may have run, only for an idempotent tool; never after the
    /// deadline or an answer of the sidecar's.
    pub fn is_retryable(&self, idempotent: bool, deadline: &Deadline) -> bool {
        match self.meaning(deadline) {
            Meaning::NeverRan => true,
            Meaning::MayHaveRun => idempotent,
            Meaning::Deadline | Meaning::Answered => false,
        }
    }

    /// What it says of the instance's health (outlier ejection).
    pub fn health(&self) -> Health {
        match self {
            Self::NotSent { .. } | Self::Transport(_) => Health::Failed,
            Self::Timeout => Health::Unknown,
            Self::Status(status)
                if matches!(
                    status.code(),
                    Code::Unauthenticated | Code::PermissionDenied
                ) =>
            {
                Health::Failed
            }
            Self::Status(_) => Health::Answered,
        }
    }

    /// Logs what the agent is not told: the OS's and the transport's words
    /// (to a caller they would tell an open port from a closed one), and
    /// why a sidecar refused the registry.
    pub fn log(&self, tool: &str, instance: &str) {
        match self {
            Self::NotSent { .. } => {
                tracing::warn!(tool, instance, error = %self, "instance unreachable");
            }
            Self::Transport(reason) => {
                tracing::warn!(
                    tool,
                    instance,
                    message = reason,
                    "transport failure mid-call"
                );
            }
            Self::Status(status)
                if matches!(
                    status.code(),
                    Code::Unauthenticated | Code::PermissionDenied
                ) =>
            {
                tracing::error!(
                    tool,
                    instance,
                    message = status.message(),
                    "the sidecar refused the registry's credentials for this call"
                );
            }
            Self::Timeout | Self::Status(_) => {}
        }
    }

    /// The error the call ends with if this is its last attempt's failure,
    /// on `instance` of `tool`.
    pub fn into_error(self, tool: &str, instance: &str, deadline: &Deadline) -> RegistryError {
        let no_instance = |detail: String| RegistryError::NoHealthyInstance {
            tool: tool.to_owned(),
            detail,
        };
        if self.is_final(deadline) {
            return RegistryError::DeadlineExceeded {
                tool: tool.to_owned(),
                deadline: deadline.budget(),
            };
        }
        match self {
            Self::NotSent { .. } | Self::Transport(_) => {
                no_instance("instance unreachable".to_owned())
            }
            Self::Status(status) => match status.code() {
                Code::Unauthenticated | Code::PermissionDenied => {
                    no_instance("instance refused the registry's credentials".to_owned())
                }
                Code::NotFound => {
                    no_instance(format!("instance {instance} does not serve the tool"))
                }
                code => RegistryError::Upstream {
                    tool: tool.to_owned(),
                    instance: instance.to_owned(),
                    code,
                    message: status.message().to_owned(),
                },
            },
            Self::Timeout => RegistryError::DeadlineExceeded {
                tool: tool.to_owned(),
                deadline: deadline.budget(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn status(code: Code) -> ProxyError {
        ProxyError::Status(tonic::Status::new(code, "said"))
    }

    fn not_sent() -> ProxyError {
        ProxyError::NotSent {
            endpoint: "http://10.0.0.7:50061".into(),
            reason: "connection refused".into(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_safe_by_what_the_tool_may_have_done() {
        let deadline = Deadline::after(Duration::from_secs(10));
        // (failure, retried for an idempotent tool, for another, health)
        let table = [
            (not_sent(), true, true, Health::Failed),
            (
                ProxyError::Transport("reset".into()),
                true,
                false,
                Health::Failed,
            ),
            (ProxyError::Timeout, false, false, Health::Unknown),
            (status(Code::Unavailable), true, false, Health::Answered),
            (status(Code::Unauthenticated), true, true, Health::Failed),
            (status(Code::PermissionDenied), true, true, Health::Failed),
            (status(Code::NotFound), true, true, Health::Answered),
            (
                status(Code::DeadlineExceeded),
                false,
                false,
                Health::Answered,
            ),
            (status(Code::Cancelled), false, false, Health::Answered),
            (status(Code::Internal), false, false, Health::Answered),
            (
                status(Code::InvalidArgument),
                false,
                false,
                Health::Answered,
            ),
        ];
        for (failure, idempotent, other, health) in table {
            assert_eq!(
                failure.is_retryable(true, &deadline),
                idempotent,
                "{failure:?}"
            );
            assert_eq!(failure.is_retryable(false, &deadline), other, "{failure:?}");
            assert_eq!(failure.health(), health, "{failure:?}");
        }
        assert!(!not_sent().reached());
        assert!(ProxyError::Transport("x".into()).reached());
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_ends_the_call_with_its_budget() {
        let deadline = Deadline::after(Duration::from_secs(2));
        for failure in [ProxyError::Timeout, status(Code::DeadlineExceeded)] {
            assert!(failure.is_final(&deadline));
            let error = failure.into_error("t", "i", &deadline);
            assert!(
                matches!(error, RegistryError::DeadlineExceeded { deadline, .. } if deadline == Duration::from_secs(2)),
                "{error:?}"
            );
        }
        assert!(
            !status(Code::Cancelled).is_final(&deadline),
            "a cancellation"
        );
        tokio::time::advance(Duration::from_millis(1_950)).await;
        assert!(
            status(Code::Cancelled).is_final(&deadline),
            "the sidecar's timer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_agent_is_told_what_it_can_act_on() {
        let deadline = Deadline::after(Duration::from_secs(2));
        let message = |failure: ProxyError| failure.into_error("t", "i-1", &deadline).to_string();
        assert_eq!(
            message(not_sent()),
            message(ProxyError::Transport("reset".into()))
        );
        assert!(message(not_sent()).contains("instance unreachable"));
        assert!(
            message(status(Code::Unauthenticated)).contains("refused the registry's credentials")
        );
        assert!(message(status(Code::NotFound)).contains("instance i-1 does not serve the tool"));
        assert!(matches!(
            status(Code::Internal).into_error("t", "i-1", &deadline),
            RegistryError::Upstream {
                code: Code::Internal,
                ..
            }
        ));
    }
}
