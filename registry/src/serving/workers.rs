//! Serving threads: each a single-threaded runtime of its own that serves
//! the agents' connections it is handed, as Envoy and nginx run their
//! workers. A call stays on one thread from the agent's connection to the
//! sidecar's (each thread has its own lane of sidecar connections,
//! [`crate::calls::proxy`]) and back: no hand-off between threads, and no
//! idle sibling woken to steal work, which on a busy machine cost as much
//! as the call itself (docs/benchmarks.md).
//!
//! One acceptor, on the caller's runtime, takes each connection and hands
//! it to the thread with the fewest open. Everything else the registry runs
//! (background work, the MCP endpoint, the console) stays on the caller's
//! runtime.

use std::{
    future::Future,
    io,
    net::TcpStream as StdTcpStream,
    num::NonZeroUsize,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::StreamExt as _;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
};
use tokio_util::sync::CancellationToken;
use toolmesh_proto::tls::ServerTls;

use super::connections::{self, Cuttable};
use super::first_route::Router;
use super::server::ServeError;

/// Connections handed to a thread and not yet taken up by its server; the
/// acceptor waits (and the listener's backlog fills) beyond it.
const HANDED_OVER: usize = 64;

/// How long the acceptor waits after a failed accept (out of file
/// descriptors, say) before it tries again.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// How the serving threads stop.
pub(crate) struct Stops {
    /// Stop accepting, and let each connection finish its calls.
    pub(crate) stop: CancellationToken,
    /// Fail every connection's reads and writes.
    pub(crate) cut: CancellationToken,
}

/// The number of serving threads `configured`, or one per CPU the process
/// may use.
pub(crate) fn count(configured: Option<u16>) -> usize {
    configured.map_or_else(
        || std::thread::available_parallelism().map_or(1, NonZeroUsize::get),
        usize::from,
    )
}

/// Serves `router` on `threads` serving threads, with the connections
/// accepted on `listener` (in TLS with `tls`), until `stops.stop` is
/// cancelled and their connections are done. The future ends when every
/// thread has; dropping it ends them at once.
pub(crate) fn serve(
    router: &Router,
    listener: TcpListener,
    tls: Option<ServerTls>,
    threads: usize,
    stops: &Stops,
) -> Result<impl Future<Output = Result<(), ServeError>> + Send + use<>, ServeError> {
    let abort = CancellationToken::new();
    let mut workers = Vec::with_capacity(threads);
    let mut ended = Vec::with_capacity(threads);
    for index in 1..=threads.max(1) {
        let (hand, handed) = mpsc::channel(HANDED_OVER);
        let (done, end) = oneshot::channel();
        let open = Arc::new(AtomicUsize::new(0));
        let thread = Thread {
            index,
            router: router.clone(),
            handed,
            tls: tls.clone(),
            open: open.clone(),
            stop: stops.stop.clone(),
            cut: stops.cut.clone(),
            abort: abort.clone(),
        };
        std::thread::Builder::new()
            .name(format!("toolmesh-serve-{index}"))
            .spawn(move || {
                let _ = done.send(thread.run());
            })
            .map_err(|e| ServeError::Transport(format!("starting a serving thread: {e}")))?;
        workers.push(Worker { hand, open });
        ended.push(end);
    }
    let acceptor = tokio::spawn(accept(listener, workers, stops.stop.clone()));
    let abort = abort.drop_guard();
    Ok(async move {
        let _abort = abort;
        let _acceptor = AbortOnDrop(acceptor);
        let mut result = Ok(());
        for end in ended {
            match end.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => result = Err(error),
                Err(_) => {
                    result = Err(ServeError::Transport("a serving thread panicked".into()));
                }
            }
        }
        result
    })
}

/// A serving thread, as the acceptor sees it.
struct Worker {
    hand: mpsc::Sender<StdTcpStream>,
    open: Arc<AtomicUsize>,
}

/// Takes connections from `listener` and hands each to the worker with the
/// fewest open, until `stop` is cancelled; then drops the listener, so
/// that the kernel stops completing new connections.
async fn accept(listener: TcpListener, workers: Vec<Worker>, stop: CancellationToken) {
    let mut accepted = connections::accepted(listener);
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            stream = accepted.next() => stream,
        };
        let stream = match stream {
            Some(Ok(stream)) => stream,
            Some(Err(error)) => {
                tracing::warn!(%error, "accepting a connection failed");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
            None => return,
        };
        let Some(worker) = workers
            .iter()
            .min_by_key(|worker| worker.open.load(Ordering::Relaxed))
        else {
            return;
        };
        // The socket leaves this runtime's reactor for the worker's.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "an accepted connection could not be handed over");
                continue;
            }
        };
        // Counted now, so that a burst of connections spreads before the
        // threads take them up; the connection takes itself off.
        worker.open.fetch_add(1, Ordering::Relaxed);
        let sent = tokio::select! {
            () = stop.cancelled() => return,
            sent = worker.hand.send(stream) => sent,
        };
        if sent.is_err() {
            // The thread ended (its server failed): its error is the
            // serve future's.
            return;
        }
    }
}

/// What one serving thread needs.
struct Thread {
    index: usize,
    router: Router,
    handed: mpsc::Receiver<StdTcpStream>,
    tls: Option<ServerTls>,
    open: Arc<AtomicUsize>,
    stop: CancellationToken,
    cut: CancellationToken,
    abort: CancellationToken,
}

impl Thread {
    /// Serves until the server drains or `abort` is cancelled; the tasks
    /// left on the thread's runtime (sidecar connections) end with it.
    fn run(self) -> Result<(), ServeError> {
        // The thread's log lines gather while it has work, and go out in
        // one write before it writes to an agent (`Cuttable`) or idles.
        toolmesh_telemetry::output::gather_on_this_thread();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .on_thread_park(toolmesh_telemetry::output::flush_this_thread)
            .build()
            .map_err(|e| ServeError::Transport(format!("a serving thread's runtime: {e}")))?;
        crate::lanes::enter(self.index);
        let Self {
            router,
            handed,
            tls,
            open,
            stop,
            cut,
            abort,
            ..
        } = self;
        let served = runtime.block_on(async move {
            let incoming = tokio_stream::wrappers::ReceiverStream::new(handed).map(
                move |stream| -> io::Result<Cuttable<TcpStream>> {
                    let taken = stream
                        .set_nonblocking(true)
                        .and_then(|()| TcpStream::from_std(stream));
                    match taken {
                        Ok(stream) => Ok(Cuttable::new(stream, &cut).counted_in(open.clone())),
                        Err(error) => {
                            open.fetch_sub(1, Ordering::Relaxed);
                            Err(error)
                        }
                    }
                },
            );
            let served = router.serve_with_incoming_shutdown(
                toolmesh_proto::tls::incoming(incoming, tls),
                stop.cancelled_owned(),
            );
            tokio::select! {
                served = served => served.map_err(ServeError::from),
                () = abort.cancelled() => Ok(()),
            }
        });
        // What the last tasks logged as they ended, before the thread
        // reports that it is done and the process may exit.
        drop(runtime);
        toolmesh_telemetry::output::flush_this_thread();
        served
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn worker() -> (Worker, mpsc::Receiver<StdTcpStream>) {
        let (hand, handed) = mpsc::channel(HANDED_OVER);
        let open = Arc::new(AtomicUsize::new(0));
        (Worker { hand, open }, handed)
    }

    async fn taken(handed: &mut mpsc::Receiver<StdTcpStream>) -> usize {
        let mut n = 0;
        while tokio::time::timeout(Duration::from_millis(200), handed.recv())
            .await
            .is_ok_and(|stream| stream.is_some())
        {
            n += 1;
        }
        n
    }

    #[tokio::test]
    async fn each_connection_goes_to_the_thread_with_the_fewest_open_until_stopped() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (busy, mut busy_handed) = worker();
        let (idle, mut idle_handed) = worker();
        busy.open.store(2, Ordering::Relaxed);
        let opens = [busy.open.clone(), idle.open.clone()];
        let stop = CancellationToken::new();
        let acceptor = tokio::spawn(accept(listener, vec![busy, idle], stop.clone()));

        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(TcpStream::connect(address).await.unwrap());
        }
        // 2:0, 2:1, 2:2, then the first of equals, then the other.
        assert_eq!(taken(&mut busy_handed).await, 1);
        assert_eq!(taken(&mut idle_handed).await, 3);
        assert_eq!(opens.each_ref().map(|o| o.load(Ordering::Relaxed)), [3, 3]);

        stop.cancel();
        acceptor.await.unwrap();
        let refused = TcpStream::connect(address).await;
        assert!(refused.is_err(), "the listener is closed once stopped");
    }
}
