//! Accepted connections: socket options, and a cut-off that closes every
//! connection at once when the shutdown grace period is over.
//!
//! tonic serves each connection on a task of its own, which outlives the
//! server future: dropping that future stops accepting but leaves calls in
//! flight (and endless streams such as `Health.Watch`) running. Every
//! accepted socket is wrapped in [`Cuttable`], whose reads and writes fail
//! once the cut-off token is cancelled, so the connection tasks end with it.
//! Its writes first write the log lines its thread gathered
//! ([`toolmesh_telemetry::output`]): what was logged before an answer is
//! in the log before the answer leaves.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use futures::{Stream, StreamExt as _};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::{Connected, TcpConnectInfo, TcpIncoming};

/// Accepted connections on `listener` with `TCP_NODELAY` and keepalive set
/// (a custom incoming stream does not get the server builder's socket
/// options), each closed when `cut` is cancelled.
pub(crate) fn incoming(
    listener: TcpListener,
    cut: &CancellationToken,
) -> impl Stream<Item = io::Result<Cuttable<TcpStream>>> + use<> {
    let cut = cut.clone();
    accepted(listener).map(move |accepted| accepted.map(|stream| Cuttable::new(stream, &cut)))
}

/// Accepted connections on `listener`, with `TCP_NODELAY` and keepalive set.
pub(crate) fn accepted(listener: TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)))
}

/// A connection whose reads and writes fail with `ConnectionAborted` once
/// its token is cancelled, waking a read that is waiting for data.
pub(crate) struct Cuttable<T> {
    io: T,
    cut: Pin<Box<WaitForCancellationFutureOwned>>,
    _open: Option<OpenConnection>,
}

impl<T> Cuttable<T> {
    /// `io`, cut off when `cut` is cancelled. The connection waits on a
    /// child token of its own: every read and write polls it, and the
    /// connections of all threads would otherwise contend for one lock.
    pub(crate) fn new(io: T, cut: &CancellationToken) -> Self {
        Self {
            io,
            cut: Box::pin(cut.child_token().cancelled_owned()),
            _open: None,
        }
    }

    /// `self`, taken off `open` (where whoever accepted it counted it)
    /// when it is dropped.
    pub(crate) fn counted_in(mut self, open: Arc<AtomicUsize>) -> Self {
        self._open = Some(OpenConnection(open));
        self
    }

    /// `Ready(error)` once cut; otherwise registers the waker and is pending.
    fn poll_cut(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        self.cut.as_mut().poll(cx).map(|()| {
            io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection cut off: the shutdown grace period is over",
            )
        })
    }
}

/// One in a count of open connections, taken off when dropped.
struct OpenConnection(Arc<AtomicUsize>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Cuttable<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(error) = this.poll_cut(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Cuttable<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(error) = this.poll_cut(cx) {
            return Poll::Ready(Err(error));
        }
        toolmesh_telemetry::output::flush_this_thread();
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Poll::Ready(error) = this.poll_cut(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Poll::Ready(error) = this.poll_cut(cx) {
            return Poll::Ready(Err(error));
        }
        toolmesh_telemetry::output::flush_this_thread();
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl Connected for Cuttable<TcpStream> {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    #[tokio::test]
    async fn a_waiting_read_fails_when_cut() {
        let (ours, mut theirs) = tokio::io::duplex(64);
        let cut = CancellationToken::new();
        let mut conn = Cuttable::new(ours, &cut);
        theirs.write_all(b"hi").await.expect("write");
        let mut buf = [0u8; 2];
        conn.read_exact(&mut buf)
            .await
            .expect("read before the cut");
        assert_eq!(&buf, b"hi");

        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 1];
            conn.read(&mut buf).await
        });
        tokio::task::yield_now().await;
        cut.cancel();
        let error = reader.await.expect("task").expect_err("cut off");
        assert_eq!(error.kind(), io::ErrorKind::ConnectionAborted);
        drop(theirs);
    }

    #[tokio::test]
    async fn writes_fail_once_cut() {
        let (ours, _theirs) = tokio::io::duplex(64);
        let cut = CancellationToken::new();
        let mut conn = Cuttable::new(ours, &cut);
        conn.write_all(b"ok").await.expect("write before the cut");
        cut.cancel();
        let error = conn.write_all(b"no").await.expect_err("cut off");
        assert_eq!(error.kind(), io::ErrorKind::ConnectionAborted);
    }
}
