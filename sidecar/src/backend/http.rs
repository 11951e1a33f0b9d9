//! An HTTP JSON endpoint as a tool: the arguments are POSTed as the body,
//! a 2xx response body is the result, anything else an `is_error` result.

use async_trait::async_trait;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::tool::{Backend, BackendError, Outcome};

/// POSTs the arguments to a URL.
#[derive(Debug, Clone)]
pub struct HttpBackend {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    max_body_bytes: usize,
}

impl HttpBackend {
    /// A backend POSTing to `url` through `client` (share one client between
    /// backends: it holds the connection pool), with extra `headers`.
    /// Response bodies longer than `max_body_bytes` are cut just past that
    /// size, which the runtime then reports as too large.
    pub fn new(
        client: reqwest::Client,
        url: reqwest::Url,
        headers: HeaderMap,
        max_body_bytes: usize,
    ) -> Self {
        Self {
            client,
            url,
            headers,
            max_body_bytes,
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
}

#[async_trait]
impl Backend for HttpBackend {
    async fn call(&self, arguments_json: &str, deadline: Instant) -> Result<Outcome, BackendError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(BackendError::DeadlineExceeded);
        }
        let mut response = self
            .client
            .post(self.url.clone())
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(arguments_json.to_owned())
            .timeout(remaining)
            .send()
            .await
            .map_err(Self::error)?;
        let status = response.status();
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
