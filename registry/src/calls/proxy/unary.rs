//! One gRPC unary call over an HTTP/2 stream (the gRPC over HTTP/2
//! protocol): a length-prefixed message out, one back, the status from the
//! trailers (or from the headers of a trailers-only answer).

use bytes::{Buf as _, BufMut as _, Bytes, BytesMut};
use h2::client::SendRequest;
use prost::Message;
use tonic::codegen::http::{self, HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};
use tonic::{Code, Status};

/// `ToolRuntime.Execute`'s path.
pub(super) const EXECUTE_PATH: &str = "/toolmesh.v1.ToolRuntime/Execute";

/// `uri` with its path replaced by `path` (another method of the same
/// service).
pub(super) fn at_path(uri: &Uri, path: &'static str) -> Result<Uri, String> {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static(path));
    Uri::from_parts(parts).map_err(|e| e.to_string())
}

/// The length prefix of a gRPC message: a compression flag and a 32-bit
/// big-endian length.
const PREFIX_BYTES: usize = 5;

/// How a call failed.
#[derive(Debug)]
pub(super) enum Failure {
    /// Nothing of the call left the registry (the connection was closed
    /// before the stream opened), or the sidecar refused the stream
    /// unprocessed (`REFUSED_STREAM`).
    NotSent(String),
    /// The stream broke: the sidecar may have run the call.
    Transport(String),
    /// The call ended with this status: the sidecar's, or one the registry
    /// gives a malformed or oversized answer.
    Status(Status),
}

impl Failure {
    /// Whether a call that was [`Failure::NotSent`] on a connection goes
    /// again on a new one: once, when that connection was pooled (found
    /// closed when the call started), as a new connection would have been
    /// made for it; a fresh connection's failure is the instance's.
    pub(super) fn may_redial(fresh: bool, redialled: bool) -> bool {
        !fresh && !redialled
    }
}

/// `message` as a gRPC message: uncompressed, length-prefixed; an
/// `OUT_OF_RANGE` status when it is longer than `max` bytes.
pub(super) fn encode(message: &impl Message, max: usize) -> Result<Bytes, Status> {
    let len = message.encoded_len();
    let too_long = || {
        Status::out_of_range(format!(
            "the request is {len} bytes encoded; the limit is {max} bytes"
        ))
    };
    if len > max {
        return Err(too_long());
    }
    let prefix = u32::try_from(len).map_err(|_| too_long())?;
    let mut buf = BytesMut::with_capacity(PREFIX_BYTES + len);
    buf.put_u8(0);
    buf.put_u32(prefix);
    message
        .encode(&mut buf)
        .map_err(|e| Status::internal(e.to_string()))?;
    Ok(buf.freeze())
}

/// Sends `body` (an encoded message) with `headers` on a new stream of
/// `send` to `uri`, and decodes the one message the answer carries (at most
/// `max` bytes).
pub(super) async fn call<M: Message + Default>(
    send: SendRequest<Bytes>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
    max: usize,
) -> Result<M, Failure> {
    let mut send = send
        .ready()
        .await
        .map_err(|e| Failure::NotSent(e.to_string()))?;
    let mut request = Request::new(());
    *request.method_mut() = Method::POST;
    *request.uri_mut() = uri;
    *request.headers_mut() = headers;
    let fixed = request.headers_mut();
    fixed.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    fixed.insert(http::header::TE, HeaderValue::from_static("trailers"));
    fixed.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(USER_AGENT),
    );
    let (response, mut stream) = send
        .send_request(request, false)
        .map_err(|e| Failure::NotSent(e.to_string()))?;
    stream.send_data(body, true).map_err(stream_failure)?;
    let (head, mut answer) = response.await.map_err(stream_failure)?.into_parts();
    if let Some(status) = Status::from_header_map(&head.headers) {
        // A trailers-only answer: no message follows.
        return Err(Failure::Status(if status.code() == Code::Ok {
            Status::internal("the sidecar answered OK with no message")
        } else {
            status
        }));
    }
    if head.status != StatusCode::OK {
        return Err(Failure::Status(from_http_status(head.status)));
    }
    let mut message = Received::new(max);
    while let Some(chunk) = answer.data().await {
        let chunk = chunk.map_err(stream_failure)?;
        let _ = answer.flow_control().release_capacity(chunk.len());
        message.push(chunk).map_err(Failure::Status)?;
    }
    let trailers = answer.trailers().await.map_err(stream_failure)?;
    // Most answers end `grpc-status: 0`: no `Status` (and no copy of the
    // trailers into its metadata) for those.
    if trailers
        .as_ref()
        .and_then(|t| t.get(GRPC_STATUS))
        .is_some_and(|code| code.as_bytes() == b"0")
    {
        return message.decode().map_err(Failure::Status);
    }
    match trailers.as_ref().and_then(Status::from_header_map) {
        Some(status) if status.code() == Code::Ok => message.decode().map_err(Failure::Status),
        Some(status) => Err(Failure::Status(status)),
        None => Err(Failure::Status(Status::unknown(
            "the sidecar's answer ended with no grpc-status",
        ))),
    }
}

const GRPC_STATUS: &str = "grpc-status";

const USER_AGENT: &str = concat!("toolmesh-registry/", env!("CARGO_PKG_VERSION"));

/// A stream's failure: `REFUSED_STREAM` from the sidecar means it did not
/// process the stream (RFC 9113 §8.7); anything else may have come after
/// it ran the call.
fn stream_failure(error: h2::Error) -> Failure {
    if error.is_remote() && error.is_reset() && error.reason() == Some(h2::Reason::REFUSED_STREAM) {
        Failure::NotSent(error.to_string())
    } else {
        Failure::Transport(toolmesh_telemetry::causes(&error))
    }
}

/// The code for an answer with no gRPC status, from its HTTP status (the
/// mapping gRPC documents in `http-grpc-status-mapping.md`).
fn from_http_status(status: StatusCode) -> Status {
    let code = match status {
        StatusCode::BAD_REQUEST => Code::Internal,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::Unimplemented,
        StatusCode::TOO_MANY_REQUESTS
        | StatusCode::BAD_GATEWAY
        | StatusCode::SERVICE_UNAVAILABLE
        | StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(
        code,
        format!(
            "the sidecar answered HTTP {} with no grpc-status",
            status.as_u16()
        ),
    )
}

/// The answer's body as it arrives: one length-prefixed message, kept
/// without a copy when it comes in one DATA frame.
struct Received {
    max: usize,
    first: Option<Bytes>,
    rest: BytesMut,
}

impl Received {
    fn new(max: usize) -> Self {
        Self {
            max,
            first: None,
            rest: BytesMut::new(),
        }
    }

    fn len(&self) -> usize {
        self.first.as_ref().map_or(0, Bytes::len) + self.rest.len()
    }

    fn push(&mut self, chunk: Bytes) -> Result<(), Status> {
        if self.len() + chunk.len() > PREFIX_BYTES + self.max {
            return Err(self.too_long(self.len() + chunk.len() - PREFIX_BYTES));
        }
        match self.first.take() {
            None if self.rest.is_empty() => self.first = Some(chunk),
            first => {
                if let Some(first) = first {
                    self.rest.extend_from_slice(&first);
                }
                self.rest.extend_from_slice(&chunk);
            }
        }
        Ok(())
    }

    fn too_long(&self, len: usize) -> Status {
        Status::out_of_range(format!(
            "the sidecar's answer is at least {len} bytes; the limit is {} bytes",
            self.max
        ))
    }

    /// The one message received.
    fn decode<M: Message + Default>(self) -> Result<M, Status> {
        let mut body = match self.first {
            Some(first) => first,
            None => self.rest.freeze(),
        };
        if body.len() < PREFIX_BYTES {
            return Err(Status::internal("the sidecar answered OK with no message"));
        }
        let compressed = body.get_u8();
        let len = usize::try_from(body.get_u32()).unwrap_or(usize::MAX);
        if compressed != 0 {
            return Err(Status::internal(
                "the sidecar compressed its answer, which the registry did not ask for",
            ));
        }
        if len > self.max {
            return Err(Status::out_of_range(format!(
                "the sidecar's answer is {len} bytes; the limit is {} bytes",
                self.max
            )));
        }
        if body.len() != len {
            return Err(Status::internal(format!(
                "the sidecar's answer holds {} bytes after a message of {len}: a unary call has one message",
                body.len()
            )));
        }
        M::decode(body).map_err(|e| Status::internal(format!("the sidecar's answer: {e}")))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use toolmesh_proto::pb::ExecuteResponse;

    use super::*;

    fn response() -> ExecuteResponse {
        ExecuteResponse {
            result_json: r#"{"ok":true}"#.into(),
            is_error: false,
            content_json: String::new(),
        }
    }

    #[test]
    fn a_message_in_any_number_of_chunks_decodes_to_itself() {
        let encoded = encode(&response(), 1024).unwrap();
        for split in 0..=encoded.len() {
            let mut received = Received::new(1024);
            received.push(encoded.slice(..split)).unwrap();
            received.push(encoded.slice(split..)).unwrap();
            assert_eq!(received.decode::<ExecuteResponse>().unwrap(), response());
        }
    }

    #[test]
    fn an_answer_over_the_limit_is_refused_as_it_arrives() {
        let encoded = encode(&response(), 1024).unwrap();
        let mut received = Received::new(encoded.len() - PREFIX_BYTES - 1);
        let refused = received.push(encoded).unwrap_err();
        assert_eq!(refused.code(), Code::OutOfRange);
    }

    #[test]
    fn a_request_over_the_limit_is_not_encoded() {
        let refused = encode(&response(), 3).unwrap_err();
        assert_eq!(refused.code(), Code::OutOfRange);
    }

    #[test]
    fn malformed_answers_are_internal_errors() {
        let encoded = encode(&response(), 1024).unwrap();
        let mut compressed = BytesMut::from(&encoded[..]);
        compressed[0] = 1;
        let mut trailing = BytesMut::from(&encoded[..]);
        trailing.extend_from_slice(b"x");
        for body in [
            Bytes::new(),
            encoded.slice(..3),
            compressed.freeze(),
            trailing.freeze(),
        ] {
            let mut received = Received::new(1024);
            received.push(body).unwrap();
            let error = received.decode::<ExecuteResponse>().unwrap_err();
            assert_eq!(error.code(), Code::Internal, "{error:?}");
        }
    }

    #[test]
    fn http_statuses_map_as_grpc_documents() {
        for (http, code) in [
            (StatusCode::BAD_REQUEST, Code::Internal),
            (StatusCode::NOT_FOUND, Code::Unimplemented),
            (StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
            (StatusCode::IM_A_TEAPOT, Code::Unknown),
        ] {
            assert_eq!(from_http_status(http).code(), code);
        }
    }
}
