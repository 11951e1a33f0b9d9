//! Calls to sidecars' `ToolRuntime.Execute`, over one reused HTTP/2
//! connection per sidecar endpoint: plaintext for `http://` endpoints, TLS
//! for `https://` ones (the sidecar's certificate verified for the
//! endpoint's host).
//!
//! A call is encoded once ([`Proxy::encode`]) and the same bytes go to
//! every instance an attempt tries, each with a grant of its own
//! ([`toolmesh_proto::grant`]) when the instance announced a key.

mod connection;
mod error;
mod unary;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use dashmap::DashMap;
use futures::FutureExt as _;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use toolmesh_proto::deadline::Deadline;
use toolmesh_proto::pb::{ExecuteRequest, ExecuteResponse};
use toolmesh_proto::tls::ClientTls;
use toolmesh_proto::{grant, timeout};
use toolmesh_telemetry::TraceContext;

use crate::access::endpoint_policy::EndpointPolicy;
use connection::{Dialer, Slot};
pub use error::{Health, ProxyError};
use unary::Failure;

/// Sidecar connections, keyed by endpoint.
pub struct Proxy {
    slots: DashMap<String, Arc<Slot>>,
    dialer: Dialer,
    max_message_bytes: usize,
}

impl Proxy {
    /// A proxy whose connection attempts give up after `connect_timeout`.
    pub fn new(connect_timeout: Duration, max_message_bytes: usize) -> Self {
        Self {
            slots: DashMap::new(),
            dialer: Dialer {
                connect_timeout,
                tls: None,
                endpoints: Arc::default(),
            },
            max_message_bytes,
        }
    }

    /// Connects only to addresses `endpoints` lets it dial, whatever a
    /// host name resolves to (the catalog checked the name at announce).
    #[must_use]
    pub fn with_endpoint_policy(mut self, endpoints: Arc<EndpointPolicy>) -> Self {
        self.dialer.endpoints = endpoints;
        self
    }

    /// Dials `https://` sidecars with `tls` (`None`: the public roots, no
    /// client certificate).
    #[must_use]
    pub fn with_tls(mut self, tls: Option<ClientTls>) -> Self {
        self.dialer.tls = tls;
        self
    }

    /// `request` as the bytes [`Proxy::execute`] sends: encoded once for
    /// all of a call's attempts. A request over the message limit is
    /// [`ProxyError::Status`] `OUT_OF_RANGE`.
    pub fn encode(&self, request: &ExecuteRequest) -> Result<Bytes, ProxyError> {
        unary::encode(request, self.max_message_bytes).map_err(ProxyError::Status)
    }

    /// Runs the encoded `request` on the sidecar at `endpoint` by `deadline`
    /// (sent on to the sidecar as the call's gRPC deadline), with `grant`
    /// (the instance's, for this call), in the trace `trace` names.
    /// Whatever is still pending at the deadline, connecting included, ends
    /// as [`ProxyError::Timeout`]; so does any failure seen once it has
    /// passed.
    pub async fn execute(
        &self,
        endpoint: &str,
        request: Bytes,
        grant: Option<AsciiMetadataValue>,
        deadline: Deadline,
        trace: &TraceContext,
    ) -> Result<ExecuteResponse, ProxyError> {
        let call = self.call(endpoint, None, request, grant.as_ref(), deadline, trace);
        Self::by(deadline, call).await
    }

    /// Sends `message` to `method` (a `ToolRuntime` path, e.g.
    /// `/toolmesh.v1.ToolRuntime/RunTask`) of the sidecar at `endpoint`, on
    /// the connection `Execute` uses, as [`Proxy::execute`] does.
    pub async fn unary<Req: prost::Message, Resp: prost::Message + Default>(
        &self,
        endpoint: &str,
        method: &'static str,
        message: &Req,
        grant: Option<AsciiMetadataValue>,
        deadline: Deadline,
        trace: &TraceContext,
    ) -> Result<Resp, ProxyError> {
        let request = unary::encode(message, self.max_message_bytes).map_err(ProxyError::Status)?;
        let call = self.call(
            endpoint,
            Some(method),
            request,
            grant.as_ref(),
            deadline,
            trace,
        );
        Self::by(deadline, call).await
    }

    /// `call`'s answer, or [`ProxyError::Timeout`] once `deadline` passed.
    ///
    /// A combinator, not an `async fn`: an `async fn` would hold `call`
    /// twice in its state, as its argument and inside the timeout.
    fn by<T>(
        deadline: Deadline,
        call: impl Future<Output = Result<T, ProxyError>>,
    ) -> impl Future<Output = Result<T, ProxyError>> {
        tokio::time::timeout_at(deadline.at(), call).map(move |answer| match answer {
            Ok(Ok(response)) => Ok(response),
            Ok(Err(ProxyError::Status(status))) => Err(ProxyError::Status(status)),
            Ok(Err(_)) if deadline.has_passed() => Err(ProxyError::Timeout),
            Ok(Err(error)) => Err(error),
            Err(_elapsed) => Err(ProxyError::Timeout),
        })
    }

    /// One call; a connection found closed when the call starts is
    /// replaced once, as a new connection would have been made for it.
    async fn call<M: prost::Message + Default>(
        &self,
        endpoint: &str,
        method: Option<&'static str>,
        request: Bytes,
        grant: Option<&AsciiMetadataValue>,
        deadline: Deadline,
        trace: &TraceContext,
    ) -> Result<M, ProxyError> {
        let not_sent = |reason: String| ProxyError::NotSent {
            endpoint: endpoint.to_owned(),
            reason,
        };
        let slot = self.slot(endpoint);
        let mut redialled = false;
        loop {
            let (live, fresh) = slot
                .get_or_dial(endpoint, &self.dialer)
                .await
                .map_err(not_sent)?;
            if deadline.has_passed() {
                return Err(ProxyError::Timeout);
            }
            // A request sent again here never reached the sidecar (the
            // connection was closed, the stream refused unprocessed): the
            // same grant stays good for it.
            let headers = headers(&deadline, grant, trace);
            let uri = match method {
                None => live.uri.clone(),
                Some(path) => unary::at_path(&live.uri, path).map_err(not_sent)?,
            };
            let outcome = unary::call(
                live.send.clone(),
                uri,
                headers,
                request.clone(),
                self.max_message_bytes,
            )
            .await;
            match outcome {
                Ok(response) => return Ok(response),
                Err(Failure::NotSent(reason)) => {
                    slot.discard(&live);
                    if !Failure::may_redial(fresh, redialled) {
                        return Err(not_sent(reason));
                    }
                    redialled = true;
                }
                Err(Failure::Transport(reason)) => return Err(ProxyError::Transport(reason)),
                Err(Failure::Status(status)) => return Err(ProxyError::Status(status)),
            }
        }
    }

    fn slot(&self, endpoint: &str) -> Arc<Slot> {
        if let Some(slot) = self.slots.get(endpoint) {
            return slot.clone();
        }
        self.slots.entry(endpoint.to_owned()).or_default().clone()
    }

    /// Endpoints with an open connection.
    pub fn endpoints(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|slot| slot.is_open())
            .map(|slot| slot.key().clone())
            .collect()
    }

    /// Closes the connection to a sidecar that left (once the calls still
    /// on it are done).
    pub fn forget(&self, endpoint: &str) {
        self.slots.remove(endpoint);
    }
}

/// The request's metadata: its deadline, its grant, the trace context.
fn headers(
    deadline: &Deadline,
    grant: Option<&AsciiMetadataValue>,
    trace: &TraceContext,
) -> tonic::codegen::http::HeaderMap {
    let mut metadata = MetadataMap::new();
    if let Some(mut value) = deadline.grpc_timeout() {
        // Sent as a literal never indexed, as the grant is: a value new on
        // almost every call would otherwise be added to the connection's
        // HPACK table each time (on both ends), evicting the entries the
        // next calls reuse.
        value.set_sensitive(true);
        metadata.insert(timeout::GRPC_TIMEOUT_KEY.clone(), value);
    }
    if let Some(grant) = grant {
        grant::attach(&mut metadata, grant.clone());
    }
    trace.inject_metadata(&mut metadata);
    metadata.into_headers()
}
