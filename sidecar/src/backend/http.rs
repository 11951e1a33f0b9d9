//! An HTTP JSON endpoint as a tool: the arguments are POSTed as the body,
//! a 2xx response body is the result, anything else an `is_error` result.
//! The caller and the invocation id go in headers ([`CALLER_HEADER`],
//! [`INVOCATION_ID_HEADER`]), each left out when empty; the trace context
//! in `traceparent` and `tracestate`, from the request's client span.
//!
//! The request accepts a streamed answer too ([`ACCEPT_VALUE`]): a 2xx
//! response of `Content-Type: text/event-stream` is read as its events
//! arrive, progress events reported, until its result event.
//!
//! - `events`: the streamed answer's events: progress, result, error,
//!   and its bounds.
//! - `sse`: the event stream format, parsed chunk by chunk, bounded.

use async_trait::async_trait;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use toolmesh_proto::deadline::Deadline;
use toolmesh_telemetry::spans;
use tracing::Instrument as _;

use crate::context::{
    CALLER_HEADER, CONFIG_HEADER, CallContext, INVOCATION_ID_HEADER, config_header,
};
use crate::tool::{Backend, BackendError, Outcome};

mod events;
mod sse;

pub use events::MAX_STREAM_BYTES;

/// The `Accept` header of every request (unless the tool's headers set
/// one): a JSON body, or an answer streamed as Server-Sent Events.
pub const ACCEPT_VALUE: &str = "application/json, text/event-stream";

/// POSTs the arguments to a URL.
#[derive(Debug, Clone)]
pub struct HttpBackend {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    max_body_bytes: usize,
    /// The URL as spans show it: no credentials, no query.
    shown_url: String,
}

impl HttpBackend {
    /// A backend POSTing to `url` through `client` (share one client between
    /// backends: it holds the connection pool), with extra `headers`.
    /// Response bodies longer than `max_body_bytes` are cut just past that
    /// size, which the runtime then reports as too large; a streamed
    /// answer's result is bounded the same.
    pub fn new(
        client: reqwest::Client,
        url: reqwest::Url,
        headers: HeaderMap,
        max_body_bytes: usize,
    ) -> Self {
        let mut shown = url.clone();
        let _ = shown.set_username("");
        let _ = shown.set_password(None);
        shown.set_query(None);
        Self {
            client,
            url,
            headers,
            max_body_bytes,
            shown_url: shown.to_string(),
        }
    }

    /// Converts a reqwest error to a backend error.
    fn error(err: reqwest::Error) -> BackendError {
        if err.is_timeout() {
            BackendError::DeadlineExceeded
        } else if err.is_connect() {
            BackendError::HttpConnect(err)
        } else {
            BackendError::Http(err)
        }
    }

    /// The configured headers, then the call's context: the sidecar's
    /// values replace any of the same name.
    fn headers(&self, context: &CallContext) -> Result<HeaderMap, BackendError> {
        context.check()?;
        let mut headers = self.headers.clone();
        for (name, value) in [
            (CALLER_HEADER, &context.caller),
            (INVOCATION_ID_HEADER, &context.invocation_id),
        ] {
            let name = HeaderName::from_static(name);
            headers.remove(&name);
            if !value.is_empty() {
                let value = HeaderValue::from_str(value)
                    .map_err(|e| BackendError::Internal(format!("{name}: {e}")))?;
                headers.insert(name, value);
            }
        }
        let name = HeaderName::from_static(CONFIG_HEADER);
        headers.remove(&name);
        if !context.config.is_empty() {
            let value = HeaderValue::from_str(&config_header(&context.config))
                .map_err(|e| BackendError::Internal(format!("{name}: {e}")))?;
            headers.insert(name, value);
        }
        if !headers.contains_key(ACCEPT) {
            headers.insert(ACCEPT, HeaderValue::from_static(ACCEPT_VALUE));
        }
        Ok(headers)
    }

    /// The answer streamed in `response`, read until its result.
    async fn streamed(
        response: &mut reqwest::Response,
        max_output: usize,
        context: &CallContext,
    ) -> Result<Outcome, BackendError> {
        let mut answer = events::Answer::new(max_output, context.progress());
        while let Some(chunk) = response.chunk().await.map_err(Self::error)? {
            if let Some(outcome) = answer.feed(&chunk)? {
                return Ok(outcome);
            }
        }
        Err(answer.ended())
    }
}

#[async_trait]
impl Backend for HttpBackend {
    async fn call(
        &self,
        arguments_json: &str,
        context: &CallContext,
        deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        let mut headers = self.headers(context)?;
        let remaining = deadline.remaining();
        if remaining.is_zero() {
            return Err(BackendError::DeadlineExceeded);
        }
        let span =
            toolmesh_telemetry::call_span!(context.trace.is_traced(), "POST", otel.kind = "client");
        spans::set(&span, "http.request.method", "POST");
        spans::set(&span, "url.full", self.shown_url.clone());
        context.trace.onward(&span).inject_headers(&mut headers);
        let sent = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(arguments_json.to_owned())
            .timeout(remaining)
            .send()
            .instrument(span.clone())
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => {
                spans::failed(
                    &span,
                    if error.is_timeout() {
                        "timeout"
                    } else {
                        "transport"
                    },
                );
                return Err(Self::error(error));
            }
        };
        let status = response.status();
        spans::set(
            &span,
            "http.response.status_code",
            i64::from(status.as_u16()),
        );
        if status.is_client_error() || status.is_server_error() {
            spans::failed(&span, status.as_str());
        }
        let streamed = response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|value| events::is_event_stream(value.as_bytes()));
        if status.is_success() && streamed {
            let answer = Self::streamed(&mut response, self.max_body_bytes, context).await;
            if answer.is_err() {
                spans::failed(&span, "stream");
            }
            return answer;
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(Self::error)? {
            body.extend_from_slice(&chunk);
            if body.len() > self.max_body_bytes {
                break;
            }
        }
        let text = String::from_utf8_lossy(&body).into_owned();
        if status.is_success() {
            return Ok(Outcome::ok(text));
        }
        let is_json = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
        if is_json {
            Ok(Outcome::error(text.trim()))
        } else {
            Ok(Outcome::error_message(&format!(
                "HTTP {}: {}",
                status.as_u16(),
                text.trim()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend(headers: &[(&'static str, &'static str)]) -> HttpBackend {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_static(value));
        }
        let url = reqwest::Url::parse("http://127.0.0.1:9/x").expect("a URL");
        HttpBackend::new(reqwest::Client::new(), url, map, 10)
    }

    fn shown(headers: &HeaderMap) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.to_string(), value)
            })
            .collect()
    }

    #[test]
    fn the_context_replaces_configured_headers_of_the_same_name() {
        let backend = backend(&[("x-key", "k"), ("x-toolmesh-caller", "forged")]);
        let sent = backend
            .headers(&CallContext::new("alice", "inv-1"))
            .expect("a valid context");
        assert_eq!(
            shown(&sent),
            [
                ("x-key".to_owned(), "k".to_owned()),
                ("x-toolmesh-caller".to_owned(), "alice".to_owned()),
                ("x-toolmesh-invocation-id".to_owned(), "inv-1".to_owned()),
                ("accept".to_owned(), ACCEPT_VALUE.to_owned()),
            ]
        );
        let anonymous = backend
            .headers(&CallContext::default())
            .expect("a valid context");
        assert_eq!(
            shown(&anonymous),
            [
                ("x-key".to_owned(), "k".to_owned()),
                ("accept".to_owned(), ACCEPT_VALUE.to_owned()),
            ]
        );
        let own = self::backend(&[("accept", "application/json")])
            .headers(&CallContext::default())
            .expect("a valid context");
        assert_eq!(
            shown(&own),
            [("accept".to_owned(), "application/json".to_owned())],
            "a configured accept is kept"
        );
    }

    #[test]
    fn a_caller_no_header_carries_unchanged_is_refused() {
        for caller in ["a\r\nb", "\u{7f}", "é", " a"] {
            let err = backend(&[])
                .headers(&CallContext::new(caller, "inv"))
                .expect_err(caller);
            assert!(
                matches!(err, BackendError::InvalidContext(ref e) if e.field == "caller"),
                "{caller:?}: {err}"
            );
        }
    }
}
