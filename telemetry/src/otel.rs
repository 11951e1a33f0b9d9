//! Trace export over OTLP, configured by the standard `OTEL_*` variables
//! and off when no endpoint is set.
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`:
//!   where spans go; neither set, nothing is exported.
//! - `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` or `OTEL_EXPORTER_OTLP_PROTOCOL`:
//!   `grpc` or `http/protobuf` (the default, as the specification says).
//! - `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`: the resource; the
//!   service name defaults to the binary's (`toolmesh-registry`).
//! - `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`: the sampler
//!   (default `parentbased_always_on`), applied where a call enters the
//!   process ([`crate::sampler`]).
//! - `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true`: off.
//! - `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_EXPORTER_OTLP_HEADERS`,
//!   `OTEL_BSP_*`: as the OpenTelemetry SDK reads them.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};

use crate::TelemetryError;

/// How spans leave the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP over gRPC (a collector's port 4317).
    Grpc,
    /// OTLP over HTTP with protobuf bodies (a collector's port 4318).
    HttpProtobuf,
}

impl std::fmt::Display for Protocol {
    /// As `OTEL_EXPORTER_OTLP_PROTOCOL` spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http/protobuf",
        })
    }
}

/// Where and how spans are exported, as the `OTEL_*` variables say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceExport {
    /// The transport.
    pub protocol: Protocol,
    /// The endpoint the variables give (the exporter reads it itself; kept
    /// for the start-up log line).
    pub endpoint: String,
}

impl TraceExport {
    /// The export `var` (an environment lookup) asks for, `None` when
    /// traces are off.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, TelemetryError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match set("OTEL_TRACES_EXPORTER").as_deref().map(str::trim) {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(TelemetryError::Otel(format!(
                    "OTEL_TRACES_EXPORTER={other:?} is not supported: use otlp or none"
                )));
            }
        }
        let Some(endpoint) = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| set("OTEL_EXPORTER_OTLP_ENDPOINT"))
        else {
            return Ok(None);
        };
        let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
            .map(str::trim)
        {
            None | Some("http/protobuf") => Protocol::HttpProtobuf,
            Some("grpc") => Protocol::Grpc,
            Some(other) => {
                return Err(TelemetryError::Otel(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL={other:?} is not supported: use grpc or http/protobuf"
                )));
            }
        };
        Ok(Some(Self { protocol, endpoint }))
    }

    /// A tracer provider exporting in batches; the gRPC exporter needs a
    /// tokio runtime (call inside one).
    pub(crate) fn provider(&self, service: &str) -> Result<SdkTracerProvider, TelemetryError> {
        toolmesh_proto::tls::install_default_provider();
        let built = match self.protocol {
            Protocol::Grpc => opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build(),
            Protocol::HttpProtobuf => opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build(),
        };
        let exporter = built.map_err(|e| TelemetryError::Otel(format!("OTLP exporter: {e}")))?;
        // Sampling is decided before any span exists (`crate::sampler`):
        // whatever reaches the provider is recorded.
        Ok(SdkTracerProvider::builder()
            .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
            .with_resource(resource(service))
            .with_batch_exporter(exporter)
            .build())
    }
}

/// The resource the variables describe, named `service` unless they name it.
fn resource(service: &str) -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = Resource::builder();
    let builder = if named {
        builder
    } else {
        builder.with_service_name(service.to_owned())
    };
    builder
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build()
}

/// The tracer spans are exported with.
pub(crate) fn tracer(provider: &SdkTracerProvider) -> opentelemetry_sdk::trace::Tracer {
    provider.tracer("toolmesh")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn export(vars: &[(&str, &str)]) -> Result<Option<TraceExport>, TelemetryError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        TraceExport::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert_eq!(export(&[]).expect("valid"), None);
        assert_eq!(export(&[("OTEL_SERVICE_NAME", "x")]).expect("valid"), None);
        assert_eq!(
            export(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]).expect("valid"),
            None
        );
    }

    #[test]
    fn http_protobuf_by_default_and_grpc_on_request() {
        let http = export(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])
            .expect("valid")
            .expect("on");
        assert_eq!(http.protocol, Protocol::HttpProtobuf);
        assert_eq!(http.protocol.to_string(), "http/protobuf");
        let grpc = export(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4317",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ])
        .expect("valid")
        .expect("on");
        assert_eq!(grpc.protocol, Protocol::Grpc);
        assert_eq!(grpc.endpoint, "http://127.0.0.1:4317");
    }

    #[test]
    fn disabled_or_unsupported() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
        assert_eq!(
            export(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]).expect("valid"),
            None
        );
        assert_eq!(
            export(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]).expect("valid"),
            None
        );
        let zipkin = export(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]).expect_err("no");
        assert!(zipkin.to_string().contains("use otlp or none"), "{zipkin}");
        let json =
            export(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]).expect_err("no");
        assert!(json.to_string().contains("grpc or http/protobuf"), "{json}");
    }
}
