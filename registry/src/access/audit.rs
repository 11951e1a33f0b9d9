//! The audit log: one JSON line per `Invoke` and per registration change,
//! to a file or stdout (format in `docs/audit.md`).
//!
//! Recording never waits: [`AuditLog::record`] puts the record on a bounded
//! queue, or drops and counts it when the queue is full. A writer task
//! formats, redacts and writes; it flushes when the queue runs empty and at
//! least every [`AuditOptions::flush_interval`], and warns about dropped
//! records at most once per [`AuditOptions::warn_interval`].
//!
//! - [`mod@record`]: the records and their JSON.
//! - [`mod@redact`]: arguments redacted by the tool's input schema.
//! - `writer`: the writer task.

pub(crate) mod record;
pub(crate) mod redact;
mod writer;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub(crate) use record::{
    ApprovalRecord, InvokeRecord, Outcome, PinEventRecord, Record, RegistrationAction,
    RegistrationRecord, TaskRecord,
};
pub(crate) use redact::Redactor;

use record::Entry;
use writer::Sink;

/// Where the audit log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// Standard output (`-`).
    Stdout,
    /// A file, appended to.
    File(PathBuf),
}

impl FromStr for AuditTarget {
    type Err = AuditError;

    /// `-` is stdout; anything else a file path.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "" => Err(AuditError::EmptyTarget),
            "-" => Ok(Self::Stdout),
            path => Ok(Self::File(PathBuf::from(path))),
        }
    }
}

/// How the audit log queues and writes.
#[derive(Debug, Clone)]
pub struct AuditOptions {
    /// Records that may wait for the writer; more are dropped.
    pub capacity: usize,
    /// Longest a written record stays in the buffer.
    pub flush_interval: Duration,
    /// Shortest time between two warnings about dropped records.
    pub warn_interval: Duration,
    /// Reopen the file on SIGHUP (after logrotate moved it). Unix only;
    /// ignored for stdout.
    pub reopen_on_sighup: bool,
}

impl Default for AuditOptions {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            flush_interval: Duration::from_secs(1),
            warn_interval: Duration::from_secs(10),
            reopen_on_sighup: true,
        }
    }
}

/// Why the audit log cannot be opened or closed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The target was an empty string.
    #[error("the audit log target is empty (use - for stdout, or a file path)")]
    EmptyTarget,
    /// The file cannot be opened.
    #[error("cannot open the audit log {}: {source}", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Opened outside a Tokio runtime, so there is nowhere to run the
    /// writer.
    #[error("the audit log must be opened inside a Tokio runtime")]
    NoRuntime,
    /// Closing did not finish writing the queued records in time; the
    /// writer goes on in the background.
    #[error("the audit log did not finish writing within {grace:?}")]
    CloseTimedOut {
        /// The time given.
        grace: Duration,
    },
}

/// A handle on the audit log; clones share one queue and writer. When the
/// last handle is dropped the writer writes what is queued and ends; call
/// [`AuditLog::close`] to wait for that.
#[derive(Debug, Clone, Default)]
pub struct AuditLog {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    tx: mpsc::Sender<Entry>,
    shared: Arc<Shared>,
}

/// What the handles and the writer share.
#[derive(Debug, Default)]
struct Shared {
    dropped: AtomicU64,
    stop: CancellationToken,
    reopen: Notify,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl AuditLog {
    /// Opens `target` and starts the writer on the current Tokio runtime.
    pub fn open(target: &AuditTarget, options: AuditOptions) -> Result<Self, AuditError> {
        tokio::runtime::Handle::try_current().map_err(|_| AuditError::NoRuntime)?;
        let sink = match target {
            AuditTarget::Stdout => Sink::stdout(),
            AuditTarget::File(path) => {
                Sink::file(path.clone()).map_err(|source| AuditError::Open {
                    path: path.clone(),
                    source,
                })?
            }
        };
        Self::start(sink, options)
    }

    fn start(sink: Sink, options: AuditOptions) -> Result<Self, AuditError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| AuditError::NoRuntime)?;
        let (tx, rx) = mpsc::channel(options.capacity.max(1));
        let shared = Arc::new(Shared::default());
        let task = runtime.spawn(writer::run(rx, sink, shared.clone(), options));
        *shared.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(Self {
            inner: Some(Arc::new(Inner { tx, shared })),
        })
    }

    /// An audit log that records nothing.
    pub fn disabled() -> Self {
        Self::default()
    }

    /// False for [`AuditLog::disabled`].
    pub fn is_enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Queues `record`, stamped with the time now; drops and counts it if
    /// the queue is full or the log closed. Never waits.
    pub fn record(&self, record: impl Into<Record>) {
        let Some(inner) = &self.inner else {
            return;
        };
        let entry = Entry {
            at: SystemTime::now(),
            record: record.into(),
        };
        if inner.tx.try_send(entry).is_err() {
            inner.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records dropped so far: queue full, log closed, or a failed write.
    pub fn dropped(&self) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.shared.dropped.load(Ordering::Relaxed))
    }

    /// Asks the writer to reopen the file (what SIGHUP does), after writing
    /// what it holds.
    pub fn reopen(&self) {
        if let Some(inner) = &self.inner {
            inner.shared.reopen.notify_one();
        }
    }

    /// Stops taking records, writes those queued, and waits up to `grace`
    /// for that. Later records are dropped. Closing twice is harmless.
    pub async fn close(&self, grace: Duration) -> Result<(), AuditError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        inner.shared.stop.cancel();
        let task = inner
            .shared
            .task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(task) = task else {
            return Ok(());
        };
        match tokio::time::timeout(grace, task).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => {
                tracing::error!(%error, "the audit log's writer failed");
                Ok(())
            }
            Err(_) => Err(AuditError::CloseTimedOut { grace }),
        }
    }
}

#[cfg(test)]
mod tests;
