//! The listener of the registry's HTTP ports (the MCP endpoint and the
//! console): accepted connections, each cut off when the registry cuts
//! connections, in TLS with the registry's certificate when it has one
//! (HTTP/1.1 and HTTP/2 by ALPN), handshakes run concurrently as the gRPC
//! listener's are. Handlers find the peer's address as [`PeerAddr`].

use std::{net::SocketAddr, pin::Pin, sync::Arc, time::Duration};

use axum::{
    extract::connect_info::Connected as AxumConnected,
    serve::{IncomingStream, Listener},
};
use futures::{Stream, StreamExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, server::TlsStream};
use tokio_util::{either::Either, sync::CancellationToken};
use tonic::transport::server::Connected as _;
use toolmesh_proto::tls::{
    ServerTls,
    accept::{HANDSHAKE_TIMEOUT, MAX_HANDSHAKES},
};

use crate::serving::connections::{self, Cuttable};

/// The ALPN protocols offered: what axum serves.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// How long the accept loop pauses after a failed accept (too many open
/// files, say), so that it does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The peer's address (`None` when the transport has none to give).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub Option<SocketAddr>);

type Io = Either<Cuttable<TcpStream>, TlsStream<Cuttable<TcpStream>>>;

/// Accepted connections, after their TLS handshake when there is one.
/// Handshakes run concurrently, as the gRPC listener's do.
pub(crate) struct HttpListener {
    accepted: Pin<Box<dyn Stream<Item = (Io, PeerAddr)> + Send>>,
    local: SocketAddr,
}

impl HttpListener {
    /// The connections `listener` accepts, each cut off when `cut` is
    /// cancelled.
    pub(crate) fn new(
        listener: TcpListener,
        tls: Option<ServerTls>,
        cut: &CancellationToken,
    ) -> Self {
        let local = listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
        let accepted = connections::incoming(listener, cut)
            .filter_map(|accepted| async move {
                match accepted {
                    Ok(io) => Some(io),
                    Err(error) => {
                        tracing::debug!(%error, "accept failed");
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                        None
                    }
                }
            })
            .map(move |io| handshake(io, tls.clone()))
            .buffer_unordered(MAX_HANDSHAKES)
            .filter_map(std::future::ready);
        Self {
            accepted: Box::pin(accepted),
            local,
        }
    }
}

/// `io` in TLS with `tls`'s current certificate (and HTTP's ALPN), or as
/// it is; `None` when the handshake fails or times out.
async fn handshake(io: Cuttable<TcpStream>, tls: Option<ServerTls>) -> Option<(Io, PeerAddr)> {
    let peer = PeerAddr(io.connect_info().remote_addr());
    let Some(tls) = tls else {
        return Some((Either::Left(io), peer));
    };
    let mut config = (*tls.config()).clone();
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
        Ok(Ok(stream)) => Some((Either::Right(stream), peer)),
        Ok(Err(error)) => {
            tracing::debug!(remote = ?peer.0, %error, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(remote = ?peer.0, "TLS handshake timed out");
            None
        }
    }
}

impl Listener for HttpListener {
    type Io = Io;
    type Addr = PeerAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.next().await {
            Some(accepted) => accepted,
            // The accept stream never ends while its listener lives.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(PeerAddr(Some(self.local)))
    }
}

impl AxumConnected<IncomingStream<'_, HttpListener>> for PeerAddr {
    fn connect_info(stream: IncomingStream<'_, HttpListener>) -> Self {
        *stream.remote_addr()
    }
}
