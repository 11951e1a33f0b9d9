//! Calls to sidecars' `ToolRuntime.Execute`, over one reused connection per
//! sidecar endpoint.

use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::{ExecuteRequest, ExecuteResponse, tool_runtime_client::ToolRuntimeClient};
use toolmesh_proto::token::Token;

/// How an `Execute` failed.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// No connection could be made: the request never left the registry, so
    /// any tool may be retried elsewhere.
    #[error("cannot connect to {endpoint}: {reason}")]
    NotSent {
        /// The sidecar's endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// The connection failed mid-call: the sidecar may have run the tool.
    #[error("transport failure mid-call: {0}")]
    Transport(tonic::Status),
    /// The deadline passed before the sidecar answered: while connecting,
    /// while waiting, or (tonic's `grpc-timeout` timer) mid-call.
    #[error("no answer within the deadline")]
    Timeout,
    /// The sidecar answered with a status.
    #[error("{0}")]
    Status(tonic::Status),
}

impl ProxyError {
    /// Sorts a failed call's status: a status tonic made from a local
    /// transport error carries that error as its source; one the sidecar
    /// sent does not. tonic's own deadline timer is a source too.
    fn classify(endpoint: &str, status: tonic::Status) -> Self {
        let mut source = std::error::Error::source(&status);
        let transport = source.is_some();
        while let Some(error) = source {
            if error.is::<tonic::TimeoutExpired>() {
                return Self::Timeout;
            }
            if error.is::<tonic::ConnectError>() {
                return Self::NotSent {
                    endpoint: endpoint.to_owned(),
                    reason: status.message().to_owned(),
                };
            }
            source = error.source();
        }
        if transport {
            Self::Transport(status)
        } else {
            Self::Status(status)
        }
    }
}

/// Sidecar connections, keyed by endpoint.
pub struct Proxy {
    channels: DashMap<String, Channel>,
    connect_timeout: Duration,
    max_message_bytes: usize,
    token: Option<Token>,
}

impl Proxy {
    /// A proxy whose connection attempts give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration, max_message_bytes: usize) -> Self {
        Self {
            channels: DashMap::new(),
            connect_timeout,
            max_message_bytes,
            token: None,
        }
    }

    /// Presents `token` on every `Execute` (sidecars started with the same
    /// `--execute-token-file` take calls only with it).
    #[must_use]
    pub fn with_token(mut self, token: Option<Token>) -> Self {
        self.token = token;
        self
    }

    /// Runs `request` on the sidecar at `endpoint` by `deadline` (sent on
    /// to the sidecar as the call's gRPC deadline). Whatever is still
    /// pending at the deadline, connecting included, ends as
    /// [`ProxyError::Timeout`]; so does any failure seen once it has passed.
    pub async fn execute(
        &self,
        endpoint: &str,
        request: ExecuteRequest,
        deadline: Instant,
    ) -> Result<ExecuteResponse, ProxyError> {
        match tokio::time::timeout_at(deadline, self.call(endpoint, request, deadline)).await {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(ProxyError::Status(status))) => Err(ProxyError::Status(status)),
            Ok(Err(_)) if Instant::now() >= deadline => Err(ProxyError::Timeout),
            Ok(Err(error)) => Err(error),
            Err(_elapsed) => Err(ProxyError::Timeout),
        }
    }

    async fn call(
        &self,
        endpoint: &str,
        request: ExecuteRequest,
        deadline: Instant,
    ) -> Result<ExecuteResponse, ProxyError> {
        let channel = self.channel(endpoint).await?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(ProxyError::Timeout);
        }
        let mut client = ToolRuntimeClient::new(channel)
            .max_decoding_message_size(self.max_message_bytes)
            .max_encoding_message_size(self.max_message_bytes);
        let mut request = tonic::Request::new(request);
        request.set_timeout(remaining);
        if let Some(token) = &self.token {
            token.attach(request.metadata_mut());
        }
        match client.execute(request).await {
            Ok(response) => Ok(response.into_inner()),
            Err(status) => Err(ProxyError::classify(endpoint, status)),
        }
    }

    /// Endpoints with an open (cached) connection.
    pub fn endpoints(&self) -> Vec<String> {
        self.channels.iter().map(|c| c.key().clone()).collect()
    }

    /// Closes the connection to a sidecar that left.
    pub fn forget(&self, endpoint: &str) {
        self.channels.remove(endpoint);
    }

    async fn channel(&self, endpoint: &str) -> Result<Channel, ProxyError> {
        if let Some(channel) = self.channels.get(endpoint) {
            return Ok(channel.clone());
        }
        let connect_error = |reason: String| ProxyError::NotSent {
            endpoint: endpoint.to_owned(),
            reason,
        };
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| connect_error(e.to_string()))?
            .connect_timeout(self.connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .connect()
            .await
            .map_err(|e| connect_error(toolmesh_telemetry::causes(&e)))?;
        self.channels.insert(endpoint.to_owned(), channel.clone());
        Ok(channel)
    }
}
