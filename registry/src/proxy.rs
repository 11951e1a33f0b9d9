//! Calls to sidecars' `ToolRuntime.Execute`, over one reused connection per
//! sidecar endpoint: plaintext for `http://` endpoints, TLS for `https://`
//! ones (the sidecar's certificate verified for the endpoint's host).

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tonic::codegen::http::Uri;
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::{ExecuteRequest, ExecuteResponse, tool_runtime_client::ToolRuntimeClient};
use toolmesh_proto::tls::{self, ClientTls};
use toolmesh_proto::token::Token;
use toolmesh_telemetry::TraceContext;

use crate::endpoint_policy::EndpointPolicy;

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
    tls: Option<ClientTls>,
    endpoints: Arc<EndpointPolicy>,
}

impl Proxy {
    /// A proxy whose connection attempts give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration, max_message_bytes: usize) -> Self {
        Self {
            channels: DashMap::new(),
            connect_timeout,
            max_message_bytes,
            token: None,
            tls: None,
            endpoints: Arc::default(),
        }
    }

    /// Connects only to addresses `endpoints` lets it dial, whatever a
    /// host name resolves to (the catalog checked the name at announce).
    #[must_use]
    pub fn with_endpoint_policy(mut self, endpoints: Arc<EndpointPolicy>) -> Self {
        self.endpoints = endpoints;
        self
    }

    /// Presents `token` on every `Execute` (sidecars started with the same
    /// `--execute-token-file` take calls only with it).
    #[must_use]
    pub fn with_token(mut self, token: Option<Token>) -> Self {
        self.token = token;
        self
    }

    /// Dials `https://` sidecars with `tls` (`None`: the public roots, no
    /// client certificate).
    #[must_use]
    pub fn with_tls(mut self, tls: Option<ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// Runs `request` on the sidecar at `endpoint` by `deadline` (sent on
    /// to the sidecar as the call's gRPC deadline), in the trace `trace`
    /// names. Whatever is still
    /// pending at the deadline, connecting included, ends as
    /// [`ProxyError::Timeout`]; so does any failure seen once it has passed.
    pub async fn execute(
        &self,
        endpoint: &str,
        request: ExecuteRequest,
        deadline: Instant,
        trace: &TraceContext,
    ) -> Result<ExecuteResponse, ProxyError> {
        match tokio::time::timeout_at(deadline, self.call(endpoint, request, deadline, trace)).await
        {
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
        trace: &TraceContext,
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
        trace.inject_metadata(request.metadata_mut());
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
        let endpoints = self.endpoints.clone();
        let tls = match &self.tls {
            Some(tls) => tls.clone(),
            None => ClientTls::load(tls::ClientFiles::default())
                .map_err(|e| connect_error(e.to_string()))?,
        };
        let connector =
            tower::service_fn(move |uri: Uri| dial(uri, endpoints.clone(), tls.clone()));
        let channel = Endpoint::from_shared(endpoint.to_owned())
            .map_err(|e| connect_error(e.to_string()))?
            .connect_timeout(self.connect_timeout)
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .connect_with_connector(connector)
            .await
            .map_err(|e| connect_error(toolmesh_telemetry::causes(&e)))?;
        self.channels.insert(endpoint.to_owned(), channel.clone());
        Ok(channel)
    }
}

/// Opens a TCP connection (`TCP_NODELAY`) to the first address `uri`'s
/// host resolves to that `endpoints` lets the registry dial; for an
/// `https://` endpoint, then a TLS handshake with `tls`.
async fn dial(
    uri: Uri,
    endpoints: Arc<EndpointPolicy>,
    tls: ClientTls,
) -> std::io::Result<TokioIo<Box<dyn tls::client::Stream>>> {
    use std::io::{Error, ErrorKind};
    let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the endpoint has no host or port",
        ));
    };
    let https = uri.scheme_str() == Some("https");
    let name = host;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut refused = 0;
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        if !endpoints.may_dial(addr) {
            refused += 1;
            continue;
        }
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                if !https {
                    return Ok(TokioIo::new(Box::new(stream)));
                }
                let stream = tls.handshake(name, stream).await?;
                return Ok(TokioIo::new(Box::new(stream)));
            }
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::new(
            ErrorKind::PermissionDenied,
            if refused > 0 {
                format!("{host} resolves only to addresses the registry does not dial (its own, or unspecified)")
            } else {
                format!("{host} resolves to no address")
            },
        )
    }))
}
