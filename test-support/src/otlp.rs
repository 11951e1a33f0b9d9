//! An OTLP trace receiver on loopback, as a collector would run: the gRPC
//! `TraceService` and HTTP `POST /v1/traces` (protobuf), keeping every span
//! it is sent, flattened for assertions, and a text waterfall of a trace.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use axum::{body::Bytes, extract::State, http::header, response::IntoResponse, routing::post};
use opentelemetry_proto::tonic::{
    collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
        trace_service_server::{TraceService, TraceServiceServer},
    },
    common::v1::{AnyValue, any_value::Value},
};
use prost::Message as _;

/// One span as received, ids in lower-case hex.
#[derive(Debug, Clone)]
pub struct Span {
    /// The resource's `service.name`.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, empty for a root span.
    pub parent_span_id: String,
    /// OTLP's span kind: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// Attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status: i32,
    /// Start, nanoseconds since the epoch.
    pub start: u64,
    /// End, nanoseconds since the epoch.
    pub end: u64,
}

impl Span {
    /// The attribute `key`, if set.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// What the receivers were sent: every span, or (for load runs) a count.
#[derive(Clone, Default)]
struct Received {
    spans: Arc<Mutex<Vec<Span>>>,
    count: Arc<AtomicU64>,
    keep: bool,
}

/// The receiver; stops when dropped.
pub struct Collector {
    spans: Received,
    grpc: SocketAddr,
    http: SocketAddr,
    _tasks: Vec<AbortOnDrop>,
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Collector {
    /// Starts both receivers on loopback ports of their own, keeping every
    /// span.
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0", true).await
    }

    /// Starts both receivers, the gRPC one on `grpc` (the HTTP one on a
    /// port of its own), only counting the spans (for load runs).
    pub async fn counting(grpc: &str) -> Self {
        Self::start_on(grpc, false).await
    }

    async fn start_on(grpc: &str, keep: bool) -> Self {
        let spans = Received {
            keep,
            ..Received::default()
        };
        let grpc_listener = tokio::net::TcpListener::bind(grpc)
            .await
            .expect("bind the OTLP gRPC receiver");
        let http_listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP HTTP receiver");
        let grpc = grpc_listener.local_addr().expect("bound");
        let http = http_listener.local_addr().expect("bound");
        let service = TraceServiceServer::new(Receiver(spans.clone()));
        let grpc_task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(
                    grpc_listener,
                ))
                .await;
        });
        let app = axum::Router::new()
            .route("/v1/traces", post(http_export))
            .with_state(spans.clone());
        let http_task = tokio::spawn(async move {
            let _ = axum::serve(http_listener, app).await;
        });
        Self {
            spans,
            grpc,
            http,
            _tasks: vec![AbortOnDrop(grpc_task), AbortOnDrop(http_task)],
        }
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// `OTEL_EXPORTER_OTLP_ENDPOINT` for `http/protobuf`.
    pub fn http_endpoint(&self) -> String {
        format!("http://{}", self.http)
    }

    /// The spans received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.spans.lock().expect("not poisoned").clone()
    }

    /// How many spans were received so far.
    pub fn count(&self) -> u64 {
        self.spans.count.load(Ordering::Relaxed)
    }

    /// The spans of `trace_id`, once `done` holds of them, within `within`.
    pub async fn trace(
        &self,
        trace_id: &str,
        within: Duration,
        done: impl Fn(&[Span]) -> bool,
    ) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let spans: Vec<Span> = self
                .spans()
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect();
            if done(&spans) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "trace {trace_id} incomplete after {within:?}: {}",
                waterfall(&spans)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

struct Receiver(Received);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        keep(&self.0, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn http_export(State(spans): State<Received>, body: Bytes) -> impl IntoResponse {
    match ExportTraceServiceRequest::decode(body) {
        Ok(request) => {
            keep(&spans, request);
            (
                axum::http::StatusCode::OK,
                [(header::CONTENT_TYPE, "application/x-protobuf")],
                ExportTraceServiceResponse::default().encode_to_vec(),
            )
        }
        Err(_) => (
            axum::http::StatusCode::BAD_REQUEST,
            [(header::CONTENT_TYPE, "text/plain")],
            b"not an ExportTraceServiceRequest".to_vec(),
        ),
    }
}

fn keep(received: &Received, request: ExportTraceServiceRequest) {
    let total: usize = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum();
    received
        .count
        .fetch_add(u64::try_from(total).unwrap_or(u64::MAX), Ordering::Relaxed);
    if !received.keep {
        return;
    }
    let mut kept = received.spans.lock().expect("not poisoned");
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .map(|kv| text(kv.value.as_ref()))
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                kept.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    kind: span.kind,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                        .collect(),
                    status: span.status.map_or(0, |s| s.code),
                    start: span.start_time_unix_nano,
                    end: span.end_time_unix_nano,
                });
            }
        }
    }
}

fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The spans as a text waterfall: one line per span, children under their
/// parent, each with its service, start offset, duration and a bar on a
/// common time axis.
pub fn waterfall(spans: &[Span]) -> String {
    const WIDTH: u64 = 40;
    let Some(start) = spans.iter().map(|s| s.start).min() else {
        return "(no spans)".into();
    };
    let end = spans.iter().map(|s| s.end).max().unwrap_or(start);
    let total = (end - start).max(1);
    let ids: Vec<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let mut out = String::new();
    let mut roots: Vec<&Span> = spans
        .iter()
        .filter(|s| !ids.contains(&s.parent_span_id.as_str()))
        .collect();
    roots.sort_by_key(|s| s.start);
    for root in roots {
        line(&mut out, spans, root, 0, start, total, WIDTH);
    }
    out
}

fn line(
    out: &mut String,
    spans: &[Span],
    span: &Span,
    depth: usize,
    t0: u64,
    total: u64,
    width: u64,
) {
    let from = (span.start - t0) * width / total;
    let to = ((span.end - t0) * width / total).max(from + 1);
    let bar: String = (0..width)
        .map(|i| if (from..to).contains(&i) { '█' } else { ' ' })
        .collect();
    let label = format!("{}{} [{}]", "  ".repeat(depth), span.name, span.service);
    let _ = writeln!(
        out,
        "{label:<58} {:>8.2} ms {:>8.2} ms |{bar}|",
        (span.start - t0) as f64 / 1e6,
        (span.end - span.start) as f64 / 1e6,
    );
    let mut children: Vec<&Span> = spans
        .iter()
        .filter(|s| s.parent_span_id == span.span_id)
        .collect();
    children.sort_by_key(|s| s.start);
    for child in children {
        line(out, spans, child, depth + 1, t0, total, width);
    }
}
