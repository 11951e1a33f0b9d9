//! A server future running on a bound loopback listener, stopped through a
//! oneshot, with its outcome checked: a server that fails, panics, or does
//! not stop in time fails the test instead of passing unnoticed. The
//! registry and the sidecar are served that way in-process.

use std::{fmt::Display, future::Future, net::SocketAddr, pin::Pin, time::Duration};

use tokio::{net::TcpListener, sync::oneshot, task::JoinHandle};
use toolmesh_sidecar::{
    Tool,
    server::{ServeOptions, serve},
};

/// The shutdown future handed to a server: completes when the test stops it.
pub type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How long a stopped server may take to return, unless a test says.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// The registry `config` asks for (the library's `run`), on `listener`.
pub fn registry(listener: TcpListener, config: toolmesh_registry::Config) -> LoopbackServer {
    LoopbackServer::spawn(listener, move |listener, shutdown| {
        toolmesh_registry::run(listener, config, shutdown)
    })
}

/// A listener on 127.0.0.1 with a port the kernel chose.
pub async fn loopback_listener() -> TcpListener {
    TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

/// A listener on `addr`, waiting up to 5 s for it to be free (a server that
/// just stopped there may still hold it): for a server restarted on the
/// address it had, which should come from [`crate::ports::reserved_port`].
pub async fn listener_at(addr: SocketAddr) -> TcpListener {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return listener,
            Err(e) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "cannot bind {addr}: {e}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A server task on loopback.
pub struct LoopbackServer {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), String>>,
}

impl LoopbackServer {
    /// Runs `serve(listener, shutdown)` as a task.
    pub fn spawn<F, Fut, E>(listener: TcpListener, serve: F) -> Self
    where
        F: FnOnce(TcpListener, Shutdown) -> Fut,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let addr = listener.local_addr().expect("listener address");
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown: Shutdown = Box::pin(async {
            let _ = stopped.await;
        });
        let server = serve(listener, shutdown);
        let task = tokio::spawn(async move { server.await.map_err(|e| e.to_string()) });
        Self {
            addr,
            stop: Some(stop),
            task,
        }
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Asks for a graceful stop and waits for the server to return; panics
    /// if it fails, panics, or takes longer than [`STOP_TIMEOUT`].
    pub async fn stop(self) {
        self.stop_within(STOP_TIMEOUT).await;
    }

    /// [`Self::stop`] with its own time limit.
    pub async fn stop_within(mut self, limit: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let addr = self.addr;
        match tokio::time::timeout(limit, &mut self.task).await {
            Err(_) => panic!("the server on {addr} did not stop within {limit:?}"),
            Ok(Err(join)) => panic!("the server on {addr} panicked: {join}"),
            Ok(Ok(Err(error))) => panic!("the server on {addr} failed: {error}"),
            Ok(Ok(Ok(()))) => {}
        }
    }

    /// Whether the task has returned (by itself: a server should not).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops at once, without any graceful step: a crash.
    pub fn abort(self) {
        self.task.abort();
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A sidecar (the library's `serve`) on loopback, serving `tools` and
/// announcing them to `registry` as `instance_id`.
pub async fn sidecar(registry: &str, instance_id: &str, tools: Vec<Tool>) -> LoopbackServer {
    sidecar_on(loopback_listener().await, registry, instance_id, tools)
}

/// [`sidecar`] on a listener the caller bound.
pub fn sidecar_on(
    listener: TcpListener,
    registry: &str,
    instance_id: &str,
    tools: Vec<Tool>,
) -> LoopbackServer {
    sidecar_with(
        listener,
        tools,
        ServeOptions {
            registry: registry.to_owned(),
            instance_id: Some(instance_id.to_owned()),
            ..ServeOptions::default()
        },
    )
}

/// A sidecar library server serving `tools` on `listener` with `options`,
/// its execute key [`crate::grants::key`] unless `options` names one.
pub fn sidecar_with(
    listener: TcpListener,
    tools: Vec<Tool>,
    mut options: ServeOptions,
) -> LoopbackServer {
    options.execute_key.get_or_insert_with(crate::grants::key);
    LoopbackServer::spawn(listener, move |listener, shutdown| {
        serve(listener, tools, options, shutdown)
    })
}
