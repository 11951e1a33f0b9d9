//! An announce the registry refused for good: which status codes mean "never
//! as is", and the error that ends the sidecar, carrying the registry's words
//! and the details of its status.

use tonic::Code;
use tonic_types::StatusExt as _;

/// The registry refused this sidecar's announce, and would refuse it again
/// unchanged (`INVALID_ARGUMENT`, `FAILED_PRECONDITION`): the sidecar stops
/// instead of retrying.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the registry at {registry} refused this sidecar's tools ({}): {}", toolmesh_proto::code::name(*.code), self.reason())]
pub struct AnnounceRefused {
    /// The registry's URL.
    pub registry: String,
    /// The status code of the refusal.
    pub code: Code,
    /// The registry's message.
    pub message: String,
    /// Field violations and failed preconditions from the status details
    /// that the message does not already say, as `field: description`.
    pub details: Vec<String>,
}

impl AnnounceRefused {
    /// The refusal `status` from the registry at `registry`.
    pub fn new(registry: &str, status: &tonic::Status) -> Self {
        let message = status.message().to_owned();
        let details = status.get_error_details();
        let violations = details
            .bad_request()
            .into_iter()
            .flat_map(|b| b.field_violations.iter())
            .map(|v| (v.field.clone(), v.description.clone()));
        let preconditions = details
            .precondition_failure()
            .into_iter()
            .flat_map(|p| p.violations.iter())
            .map(|v| (v.subject.clone(), v.description.clone()));
        let details = violations
            .chain(preconditions)
            .filter(|(_, description)| !message.contains(description.as_str()))
            .map(|(field, description)| {
                if field.is_empty() {
                    description
                } else {
                    format!("{field}: {description}")
                }
            })
            .collect();
        Self {
            registry: registry.to_owned(),
            code: status.code(),
            message,
            details,
        }
    }

    fn reason(&self) -> String {
        std::iter::once(self.message.as_str())
            .chain(self.details.iter().map(String::as_str))
            .filter(|part| !part.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// Whether an announce that failed with `code` can never succeed as is, so
/// that retrying is pointless; anything else (unreachable, `UNAVAILABLE`,
/// `DEADLINE_EXCEEDED`, ...) may heal and is retried with backoff.
pub fn is_final(code: Code) -> bool {
    match code {
        Code::InvalidArgument | Code::FailedPrecondition => true,
        Code::Ok
        | Code::Cancelled
        | Code::Unknown
        | Code::DeadlineExceeded
        | Code::NotFound
        | Code::AlreadyExists
        | Code::PermissionDenied
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::OutOfRange
        | Code::Unimplemented
        | Code::Internal
        | Code::Unavailable
        | Code::DataLoss
        | Code::Unauthenticated => false,
    }
}

#[cfg(test)]
mod tests {
    use tonic_types::{ErrorDetails, FieldViolation};

    use super::*;

    #[test]
    fn only_refusals_that_cannot_heal_are_final() {
        assert!(is_final(Code::InvalidArgument));
        assert!(is_final(Code::FailedPrecondition));
        for code in [
            Code::Unavailable,
            Code::DeadlineExceeded,
            Code::Unknown,
            Code::Internal,
            Code::ResourceExhausted,
        ] {
            assert!(!is_final(code), "{code:?}");
        }
    }

    #[test]
    fn details_the_message_lacks_are_added_once() {
        let status = tonic::Status::with_error_details(
            Code::InvalidArgument,
            "descriptor of \"t\" is invalid: too long",
            ErrorDetails::with_bad_request(vec![
                FieldViolation::new("tools[0].description", "too long"),
                FieldViolation::new("tools[0].tags", "more than 32 tags"),
            ]),
        );
        let refused = AnnounceRefused::new("http://127.0.0.1:50051", &status);
        assert_eq!(refused.details, ["tools[0].tags: more than 32 tags"]);
        assert_eq!(
            refused.to_string(),
            "the registry at http://127.0.0.1:50051 refused this sidecar's tools (INVALID_ARGUMENT): descriptor of \"t\" is invalid: too long; tools[0].tags: more than 32 tags"
        );
    }
}
