//! Accepted connections for `serve_with_incoming_shutdown`: TLS
//! handshakes run concurrently (at most [`MAX_HANDSHAKES`] at once, each
//! given [`HANDSHAKE_TIMEOUT`]), so a peer that never finishes its
//! handshake holds up neither the accept loop nor anyone else.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use super::ServerTls;
use super::peer::{PeerInfo, identities};

/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Most TLS handshakes in progress at once; connections beyond wait in
/// the listen backlog.
pub const MAX_HANDSHAKES: usize = 256;

/// An accepted connection, in TLS or not, with what is known of its peer.
pub struct Conn<IO> {
    io: Io<IO>,
    identities: Arc<[String]>,
}

enum Io<IO> {
    Plain(IO),
    Tls(Box<TlsStream<IO>>),
}

/// `accepted` connections, each after its TLS handshake if `tls` is set
/// (connections whose handshake fails or times out are dropped, with a
/// debug line), or as they are.
pub fn incoming<S, IO>(
    accepted: S,
    tls: Option<ServerTls>,
) -> impl Stream<Item = io::Result<Conn<IO>>> + Send + use<S, IO>
where
    S: Stream<Item = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected<ConnectInfo = TcpConnectInfo> + Unpin + Send + 'static,
{
    accepted
        .map(move |accepted| {
            let tls = tls.clone();
            async move {
                let (io, tls) = match (accepted, tls) {
                    (Err(error), _) => return Some(Err(error)),
                    (Ok(io), None) => return Some(Ok(Conn::plain(io))),
                    (Ok(io), Some(tls)) => (io, tls),
                };
                let remote = io.connect_info().remote_addr();
                let acceptor = TlsAcceptor::from(tls.config());
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(io)).await {
                    Ok(Ok(stream)) => Some(Ok(Conn::tls(stream))),
                    Ok(Err(error)) => {
                        tracing::debug!(?remote, %error, "TLS handshake failed");
                        None
                    }
                    Err(_) => {
                        tracing::debug!(?remote, timeout = ?HANDSHAKE_TIMEOUT, "TLS handshake timed out");
                        None
                    }
                }
            }
        })
        .buffer_unordered(MAX_HANDSHAKES)
        .filter_map(std::future::ready)
}

impl<IO> Conn<IO> {
    fn plain(io: IO) -> Self {
        Self {
            io: Io::Plain(io),
            identities: Arc::from([]),
        }
    }

    fn tls(stream: TlsStream<IO>) -> Self {
        let identities = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(<[_]>::first)
            .map(identities)
            .unwrap_or_default();
        Self {
            io: Io::Tls(Box::new(stream)),
            identities: identities.into(),
        }
    }
}

impl<IO: Connected<ConnectInfo = TcpConnectInfo>> Connected for Conn<IO> {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        let tcp = match &self.io {
            Io::Plain(io) => io.connect_info(),
            Io::Tls(stream) => stream.get_ref().0.connect_info(),
        };
        PeerInfo {
            remote_addr: tcp.remote_addr(),
            identities: self.identities.clone(),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Conn<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(io) => Pin::new(io).poll_read(cx, buf),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Conn<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(io) => Pin::new(io).poll_write(cx, buf),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(io) => Pin::new(io).poll_flush(cx),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(io) => Pin::new(io).poll_shutdown(cx),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Io::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Io::Plain(io) => io.is_write_vectored(),
            Io::Tls(io) => io.is_write_vectored(),
        }
    }
}
