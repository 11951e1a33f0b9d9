//! gRPC status codes by the names the gRPC specification, grpcurl and the
//! docs use (`INVALID_ARGUMENT`), for messages and status fields; and as
//! outcomes (`invalid_argument`), the one spelling of what became of a
//! call in every log line, metric label and audit record.

use tonic::Code;

/// The canonical name of `code`, e.g. `INVALID_ARGUMENT`.
pub fn name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// `code` as an outcome: its name in lower snake case (`ok`,
/// `invalid_argument`, `resource_exhausted`), beside `tool_error` for a
/// tool that ran and failed.
pub fn outcome(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "cancelled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// What a tool's own failure is as an outcome (`is_error`: it ran).
pub const TOOL_ERROR: &str = "tool_error";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_spec() {
        assert_eq!(name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(name(Code::Ok), "OK");
        for n in 0..=16 {
            let code = Code::from_i32(n);
            assert_eq!(name(code), name(code).to_ascii_uppercase());
            assert_eq!(outcome(code), name(code).to_ascii_lowercase());
        }
    }
}
