//! OpenTelemetry attributes on `tracing` spans, named as the semantic
//! conventions name them. Set through the span's OpenTelemetry side, so
//! they reach the trace without lengthening log lines; each call is a
//! no-op when traces are not exported.
//!
//! - RPC spans: `rpc.system.name = grpc`, `rpc.method` (fully qualified,
//!   `toolmesh.v1.ToolRegistry/Invoke`), and the status as a string in
//!   `rpc.response.status_code` (the name the conventions settled on) and
//!   `rpc.status_code` (the name of their earlier drafts, which some
//!   back ends still query).
//! - Failures: `error.type` and the span status `ERROR`.

use opentelemetry::{Value, trace::Status};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::TraceContext;

/// Runs `call`, the gRPC method `method` this process serves, inside
/// `span` (made a child of the caller's `trace`), and records how it ended.
pub async fn serve<T>(
    span: tracing::Span,
    trace: &TraceContext,
    method: &'static str,
    call: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    trace.parent(&span);
    rpc(&span, method);
    let result = call.instrument(span.clone()).await;
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    rpc_status(&span, toolmesh_proto::code::name(code));
    result
}

/// Whether `span` is exported: traces are, and it is not a span of an
/// unsampled call ([`crate::call_span!`]).
fn exported(span: &tracing::Span) -> bool {
    crate::tracing_enabled()
        && span
            .metadata()
            .is_some_and(|meta| !meta.target().ends_with("::untraced"))
}

/// Sets `key` to `value` on `span`'s exported side.
pub fn set(span: &tracing::Span, key: &'static str, value: impl Into<Value>) {
    if exported(span) {
        span.set_attribute(key, value);
    }
}

/// Marks `span` as the gRPC call `method` (`package.Service/Method`).
pub fn rpc(span: &tracing::Span, method: &'static str) {
    if exported(span) {
        span.set_attribute("rpc.system.name", "grpc");
        span.set_attribute("rpc.method", method);
    }
}

/// Records how the gRPC call on `span` ended: `code` is the status code's
/// name (`OK`, `NOT_FOUND`, ...); anything but `OK` is a failure of that
/// type.
pub fn rpc_status(span: &tracing::Span, code: &'static str) {
    if !exported(span) {
        return;
    }
    span.set_attribute("rpc.response.status_code", code);
    span.set_attribute("rpc.status_code", code);
    if code != "OK" {
        failed(span, code);
    }
}

/// Records that the work on `span` failed, as `error_type`.
pub fn failed(span: &tracing::Span, error_type: &str) {
    if exported(span) {
        span.set_attribute("error.type", error_type.to_owned());
        span.set_status(Status::error(error_type.to_owned()));
    }
}
