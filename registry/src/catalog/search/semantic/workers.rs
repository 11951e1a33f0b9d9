//! The threads that run the model, apart from the ones that serve calls:
//! one pool for queries, one for the indexer, each a rayon pool (an
//! embedding runs on the one thread that takes it, so a pool bounds the
//! CPU the model takes) whose threads run at a lower priority than the
//! runtime's, so that `Invoke` gets the CPU first when both want it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, oneshot};
use toolmesh_embed::{Model, Role};

/// Nice value of the query threads: below the runtime's, above the indexer's.
const QUERY_NICE: i32 = 5;
/// Nice value of the indexer's thread: background work.
const INDEX_NICE: i32 = 10;

/// Why a search was ranked without the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fallback {
    /// Every query thread was busy and the queue full.
    Busy,
    /// The query's vector took longer than the deadline.
    Slow,
    /// The model could not embed the query.
    Failed,
    /// A tool in the caller's scope is not embedded yet.
    Indexing,
}

impl Fallback {
    /// Its metric label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Busy => "busy",
            Self::Slow => "slow",
            Self::Failed => "failed",
            Self::Indexing => "indexing",
        }
    }
}

/// A pool of model threads.
pub(crate) struct Workers {
    pool: rayon::ThreadPool,
    model: Arc<Model>,
}

impl Workers {
    fn new(
        model: Arc<Model>,
        threads: usize,
        nice: i32,
        name: &'static str,
    ) -> std::io::Result<Self> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .thread_name(move |i| format!("{name}-{i}"))
            .start_handler(move |_| lower_priority(nice))
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self { pool, model })
    }

    /// The indexer's single thread.
    pub(crate) fn indexer(model: Arc<Model>) -> std::io::Result<Self> {
        Self::new(model, 1, INDEX_NICE, "toolmesh-embed-index")
    }

    /// Vectors for `texts` as documents, computed on this pool.
    pub(crate) async fn documents(&self, texts: Vec<Arc<str>>) -> Result<Vec<Vec<f32>>, String> {
        let model = self.model.clone();
        let (tx, rx) = oneshot::channel();
        self.pool.spawn(move || {
            let texts: Vec<&str> = texts.iter().map(|t| &**t).collect();
            let _ = tx.send(
                model
                    .embed(&texts, Role::Document)
                    .map_err(|e| e.to_string()),
            );
        });
        rx.await
            .map_err(|_| "the indexer's thread stopped".to_owned())?
    }
}

/// Embeds queries: at most `4 × threads` at once (the rest are refused at
/// once, to be ranked lexically), each within a deadline.
pub(crate) struct Queries {
    workers: Workers,
    permits: Arc<Semaphore>,
    deadline: Duration,
}

impl Queries {
    /// `threads` query threads; a query's vector is awaited for `deadline`.
    pub(crate) fn new(
        model: Arc<Model>,
        threads: usize,
        deadline: Duration,
    ) -> std::io::Result<Self> {
        Ok(Self {
            workers: Workers::new(model, threads, QUERY_NICE, "toolmesh-embed-query")?,
            permits: Arc::new(Semaphore::new(threads.max(1) * 4)),
            deadline,
        })
    }

    /// The query's vector.
    pub(crate) async fn embed(&self, query: &str) -> Result<Vec<f32>, Fallback> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| Fallback::Busy)?;
        let model = self.workers.model.clone();
        let query = query.to_owned();
        let (tx, rx) = oneshot::channel();
        self.workers.pool.spawn(move || {
            let _permit = permit;
            // A search that gave up needs no vector.
            if tx.is_closed() {
                return;
            }
            let _ = tx.send(model.embed(&[&query], Role::Query));
        });
        match tokio::time::timeout(self.deadline, rx).await {
            Err(_) => Err(Fallback::Slow),
            Ok(Err(_)) => Err(Fallback::Failed),
            Ok(Ok(Err(error))) => {
                tracing::warn!(%error, "a search query could not be embedded; ranked lexically");
                Err(Fallback::Failed)
            }
            Ok(Ok(Ok(mut vectors))) => vectors.pop().ok_or(Fallback::Failed),
        }
    }
}

/// Lowers the calling thread's priority to `nice` (on Linux a thread's own).
fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::process::setpriority_process(None, nice) {
        tracing::debug!(%error, nice, "could not lower an embedding thread's priority");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}
