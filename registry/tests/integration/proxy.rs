//! The registry's client for sidecars (`Proxy`), against a raw HTTP/2
//! server that answers each way a sidecar (or something posing as one) can:
//! what it sends, how each failure is sorted (never sent, broken mid-call,
//! a status), and its one connection per sidecar, redialled when closed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use h2::Reason;
use http::{HeaderMap, Response, StatusCode};
use prost::Message as _;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tonic::Code;
use tonic::metadata::AsciiMetadataValue;
use toolmesh_proto::deadline::Deadline;
use toolmesh_proto::grant::{self, CallKey};
use toolmesh_proto::pb::{ExecuteRequest, ExecuteResponse};
use toolmesh_registry::calls::proxy::{Proxy, ProxyError};
use toolmesh_telemetry::TraceContext;

/// How the fake sidecar answers every call.
#[derive(Clone, Copy)]
enum Answer {
    /// `result_json` is the arguments, grpc-status 0.
    Echo,
    /// The same, then the connection is closed (GOAWAY) once the call is done.
    EchoThenClose,
    /// `result_json` of this many bytes.
    Big(usize),
    /// `RST_STREAM(REFUSED_STREAM)`: not processed.
    Refuse,
    /// Headers, then `RST_STREAM(INTERNAL_ERROR)`.
    ResetAfterHeaders,
    /// A message, and the stream ended with no trailers.
    NoStatus,
    /// This HTTP status, no gRPC status.
    Http(u16),
    /// A trailers-only answer: `NOT_FOUND`, "gone".
    TrailersOnly,
    /// Nothing, ever.
    Silent,
}

struct Fake {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    /// The request headers of every call.
    seen: Arc<Mutex<Vec<HeaderMap>>>,
    /// The reasons of the resets the client sent.
    resets: Arc<Mutex<Vec<Reason>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

async fn fake(answer: Answer) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let resets = Arc::new(Mutex::new(Vec::new()));
    let task = tokio::spawn({
        let (connections, seen, resets) = (connections.clone(), seen.clone(), resets.clone());
        async move {
            while let Ok((tcp, _)) = listener.accept().await {
                connections.fetch_add(1, Ordering::SeqCst);
                let (seen, resets) = (seen.clone(), resets.clone());
                tokio::spawn(async move {
                    let Ok(mut connection) = h2::server::handshake(tcp).await else {
                        return;
                    };
                    while let Some(Ok((request, respond))) = connection.accept().await {
                        tokio::spawn(serve(
                            answer,
                            request,
                            respond,
                            seen.clone(),
                            resets.clone(),
                        ));
                        if matches!(answer, Answer::EchoThenClose) {
                            // GOAWAY; the call already accepted is answered.
                            connection.graceful_shutdown();
                        }
                    }
                });
            }
        }
    });
    Fake {
        addr,
        connections,
        seen,
        resets,
        task,
    }
}

fn grpc_message(message: &impl prost::Message) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_u8(0);
    buf.put_u32(u32::try_from(message.encoded_len()).unwrap());
    message.encode(&mut buf).unwrap();
    buf.freeze()
}

fn grpc_ok() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", "0".parse().unwrap());
    trailers
}

async fn serve(
    answer: Answer,
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    seen: Arc<Mutex<Vec<HeaderMap>>>,
    resets: Arc<Mutex<Vec<Reason>>>,
) {
    let (head, mut body) = request.into_parts();
    seen.lock().unwrap().push(head.headers);
    let mut received = BytesMut::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        received.extend_from_slice(&chunk);
    }
    let arguments = ExecuteRequest::decode(received.get(5..).unwrap_or_default())
        .map(|r| r.arguments_json)
        .unwrap_or_default();
    let ok = || {
        Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .unwrap()
    };
    match answer {
        Answer::Echo | Answer::EchoThenClose | Answer::Big(_) => {
            let result_json = match answer {
                Answer::Big(n) => "x".repeat(n),
                _ => arguments,
            };
            let mut stream = respond.send_response(ok(), false).unwrap();
            let message = grpc_message(&ExecuteResponse {
                result_json,
                is_error: false,
                content_json: String::new(),
            });
            let _ = stream.send_data(message, false);
            let _ = stream.send_trailers(grpc_ok());
        }
        Answer::Refuse => respond.send_reset(Reason::REFUSED_STREAM),
        Answer::ResetAfterHeaders => {
            let mut stream = respond.send_response(ok(), false).unwrap();
            stream.send_reset(Reason::INTERNAL_ERROR);
        }
        Answer::NoStatus => {
            let mut stream = respond.send_response(ok(), false).unwrap();
            let message = grpc_message(&ExecuteResponse::default());
            let _ = stream.send_data(message, true);
        }
        Answer::Http(status) => {
            let response = Response::builder()
                .status(StatusCode::from_u16(status).unwrap())
                .body(())
                .unwrap();
            let _ = respond.send_response(response, true);
        }
        Answer::TrailersOnly => {
            let response = Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "5")
                .header("grpc-message", "gone")
                .body(())
                .unwrap();
            let _ = respond.send_response(response, true);
        }
        Answer::Silent => {
            if let Ok(reason) = std::future::poll_fn(|cx| respond.poll_reset(cx)).await {
                resets.lock().unwrap().push(reason);
            }
        }
    }
}

fn proxy() -> Proxy {
    Proxy::new(Duration::from_secs(2), 1 << 20)
}

async fn call(
    proxy: &Proxy,
    endpoint: &str,
    arguments: &str,
    within: Duration,
) -> Result<ExecuteResponse, ProxyError> {
    call_traced(
        proxy,
        endpoint,
        arguments,
        within,
        &TraceContext::default(),
        None,
    )
    .await
}

async fn call_traced(
    proxy: &Proxy,
    endpoint: &str,
    arguments: &str,
    within: Duration,
    trace: &TraceContext,
    grant: Option<AsciiMetadataValue>,
) -> Result<ExecuteResponse, ProxyError> {
    let request = proxy
        .encode(&ExecuteRequest {
            tool: "echo".into(),
            arguments_json: arguments.into(),
            invocation_id: "i-1".into(),
            caller: String::new(),
        })
        .unwrap();
    proxy
        .execute(endpoint, request, grant, Deadline::after(within), trace)
        .await
}

const WITHIN: Duration = Duration::from_secs(10);

#[tokio::test]
async fn a_call_carries_its_deadline_grant_and_trace_and_reads_the_answer() {
    let sidecar = fake(Answer::Echo).await;
    let proxy = proxy();
    let key = CallKey::from_bytes(&[5; 32]).unwrap();
    let call = grant::Call {
        instance: "i",
        invocation: "i-1",
        tool: "echo",
        caller: "",
        arguments: grant::ArgumentsDigest::of(r#"{"a":1}"#),
    };
    let minted = grant::mint(&key, &call, grant::now_ms(), 1);
    let mut incoming = HeaderMap::new();
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    incoming.insert("traceparent", traceparent.parse().unwrap());
    let trace = TraceContext::from_headers(&incoming);

    let answer = call_traced(
        &proxy,
        &sidecar.endpoint(),
        r#"{"a":1}"#,
        WITHIN,
        &trace,
        Some(minted.clone()),
    )
    .await
    .unwrap();

    assert_eq!(answer.result_json, r#"{"a":1}"#);
    let seen = sidecar.seen.lock().unwrap();
    let headers = &seen[0];
    assert_eq!(headers["content-type"], "application/grpc");
    assert_eq!(headers["te"], "trailers");
    assert_eq!(headers[grant::HEADER], minted.to_str().unwrap());
    assert!(
        headers.get("authorization").is_none(),
        "no credential but the call's own grant"
    );
    assert_eq!(headers["traceparent"], traceparent);
    let timeout = toolmesh_proto::timeout::parse(headers["grpc-timeout"].to_str().unwrap())
        .expect("a valid grpc-timeout");
    assert!(
        timeout <= WITHIN && timeout > WITHIN - Duration::from_secs(5),
        "grpc-timeout {timeout:?} for a {WITHIN:?} deadline"
    );
}

#[tokio::test]
async fn calls_to_one_sidecar_share_one_connection_even_when_they_start_together() {
    let sidecar = fake(Answer::Echo).await;
    let proxy = proxy();
    let endpoint = sidecar.endpoint();
    let calls = (0..32).map(|i| {
        let (proxy, endpoint) = (&proxy, &endpoint);
        async move { call(proxy, endpoint, &format!("{i}"), WITHIN).await }
    });
    for (i, answer) in futures::future::join_all(calls)
        .await
        .into_iter()
        .enumerate()
    {
        assert_eq!(answer.unwrap().result_json, format!("{i}"));
    }
    assert_eq!(sidecar.connections.load(Ordering::SeqCst), 1);
    assert_eq!(proxy.endpoints(), vec![endpoint.clone()]);

    proxy.forget(&endpoint);
    assert!(proxy.endpoints().is_empty());
}

#[tokio::test]
async fn a_connection_the_sidecar_closed_is_replaced_without_failing_a_call() {
    let sidecar = fake(Answer::EchoThenClose).await;
    let proxy = proxy();
    let endpoint = sidecar.endpoint();
    for i in 0..3 {
        let answer = call(&proxy, &endpoint, &format!("{i}"), WITHIN).await;
        assert_eq!(answer.unwrap().result_json, format!("{i}"));
        // The next call finds the connection gone, as it would after a
        // sidecar restart, rather than racing the GOAWAY.
        toolmesh_test_support::wait::wait_until(WITHIN, "the closed connection forgotten", || {
            proxy.endpoints().is_empty()
        })
        .await;
    }
    assert_eq!(sidecar.connections.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_refused_stream_and_a_closed_port_were_never_sent() {
    let sidecar = fake(Answer::Refuse).await;
    let refused = call(&proxy(), &sidecar.endpoint(), "{}", WITHIN).await;
    assert!(
        matches!(refused, Err(ProxyError::NotSent { .. })),
        "{refused:?}"
    );

    let port = toolmesh_test_support::ports::reserved_port();
    let closed = call(&proxy(), &format!("http://127.0.0.1:{port}"), "{}", WITHIN).await;
    assert!(
        matches!(closed, Err(ProxyError::NotSent { .. })),
        "{closed:?}"
    );
}

#[tokio::test]
async fn a_stream_reset_after_the_request_went_out_is_a_transport_failure() {
    let sidecar = fake(Answer::ResetAfterHeaders).await;
    let broken = call(&proxy(), &sidecar.endpoint(), "{}", WITHIN).await;
    assert!(
        matches!(broken, Err(ProxyError::Transport(_))),
        "{broken:?}"
    );
}

/// The status of a call that failed with one.
async fn status_of(answer: Answer, proxy: &Proxy) -> tonic::Status {
    let sidecar = fake(answer).await;
    match call(proxy, &sidecar.endpoint(), "{}", WITHIN).await {
        Err(ProxyError::Status(status)) => status,
        other => panic!("expected a status, got {other:?}"),
    }
}

#[tokio::test]
async fn malformed_and_oversized_answers_end_with_a_status_not_a_hang() {
    let small = Proxy::new(Duration::from_secs(2), 1024);
    let big = status_of(Answer::Big(4096), &small).await;
    assert_eq!(big.code(), Code::OutOfRange, "{big:?}");

    let none = status_of(Answer::NoStatus, &proxy()).await;
    assert_eq!(none.code(), Code::Unknown, "{none:?}");

    let unavailable = status_of(Answer::Http(503), &proxy()).await;
    assert_eq!(unavailable.code(), Code::Unavailable, "{unavailable:?}");

    let gone = status_of(Answer::TrailersOnly, &proxy()).await;
    assert_eq!((gone.code(), gone.message()), (Code::NotFound, "gone"));
}

#[tokio::test]
async fn a_silent_sidecar_times_out_at_the_deadline_and_its_stream_is_cancelled() {
    let sidecar = fake(Answer::Silent).await;
    let started = Instant::now();
    let silent = call(
        &proxy(),
        &sidecar.endpoint(),
        "{}",
        Duration::from_millis(300),
    )
    .await;
    assert!(matches!(silent, Err(ProxyError::Timeout)), "{silent:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "gave up after {:?}",
        started.elapsed()
    );
    toolmesh_test_support::wait::wait_until(WITHIN, "the stream reset", || {
        !sidecar.resets.lock().unwrap().is_empty()
    })
    .await;
    assert_eq!(sidecar.resets.lock().unwrap()[0], Reason::CANCEL);
}
