//! gRPC status codes by the names the gRPC specification, grpcurl and the
//! docs use (`INVALID_ARGUMENT`), for logs and messages.

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
        }
    }
}
