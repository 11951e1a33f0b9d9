//! The writer task: takes records off the queue, formats them into a
//! buffer, and writes the buffer on a blocking thread when the queue runs
//! empty, when it holds [`FLUSH_BYTES`], or once a flush interval has
//! passed. It also reports dropped records and reopens the file.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};

use super::record::Entry;
use super::{AuditOptions, Shared};

/// The buffer is written once it holds this many bytes.
pub(super) const FLUSH_BYTES: usize = 64 * 1024;

/// Where lines go.
pub(super) struct Sink {
    out: Box<dyn Write + Send>,
    /// The file, to reopen; `None` for stdout.
    path: Option<PathBuf>,
}

impl Sink {
    pub(super) fn stdout() -> Self {
        Self {
            out: Box::new(io::stdout()),
            path: None,
        }
    }

    /// `path`, opened for append, created with mode 0600 on unix.
    pub(super) fn file(path: PathBuf) -> io::Result<Self> {
        let file = open_append(&path)?;
        Ok(Self {
            out: Box::new(file),
            path: Some(path),
        })
    }

    #[cfg(test)]
    pub(super) fn custom(out: Box<dyn Write + Send>) -> Self {
        Self { out, path: None }
    }

    fn reopen(&mut self) {
        let Some(path) = &self.path else {
            return;
        };
        match open_append(path) {
            Ok(file) => self.out = Box::new(file),
            Err(error) => tracing::warn!(
                path = %path.display(),
                %error,
                "cannot reopen the audit log; still writing to the old file"
            ),
        }
    }
}

fn open_append(path: &std::path::Path) -> io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Says how many records were dropped, at most once per interval.
#[derive(Debug)]
pub(super) struct DropReporter {
    interval: Duration,
    reported: u64,
    last: Option<Instant>,
}

impl DropReporter {
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            interval,
            reported: 0,
            last: None,
        }
    }

    /// Records dropped since the last report, if there are some and a
    /// report is due at `now`; `total` is the count since the start.
    pub(super) fn due(&mut self, now: Instant, total: u64) -> Option<u64> {
        if total <= self.reported {
            return None;
        }
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.interval)
        {
            return None;
        }
        let dropped = total - self.reported;
        self.reported = total;
        self.last = Some(now);
        Some(dropped)
    }
}

struct Writer {
    /// `None` once a write thread was lost (it panicked).
    sink: Option<Sink>,
    buf: Vec<u8>,
    /// Records in `buf`.
    pending: u64,
    last_flush: Instant,
    shared: Arc<Shared>,
}

impl Writer {
    fn push(&mut self, entry: &Entry) {
        match entry.write_line(&mut self.buf) {
            Ok(()) => self.pending += 1,
            Err(error) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "an audit record could not be formatted");
            }
        }
    }

    async fn flush(&mut self) {
        self.last_flush = Instant::now();
        if self.buf.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.buf);
        let records = std::mem::take(&mut self.pending);
        let Some(mut sink) = self.sink.take() else {
            self.shared.dropped.fetch_add(records, Ordering::Relaxed);
            return;
        };
        let written = tokio::task::spawn_blocking(move || {
            let result = sink.out.write_all(&lines).and_then(|()| sink.out.flush());
            (sink, lines, result)
        })
        .await;
        match written {
            Ok((sink, mut lines, result)) => {
                self.sink = Some(sink);
                lines.clear();
                self.buf = lines;
                if let Err(error) = result {
                    self.shared.dropped.fetch_add(records, Ordering::Relaxed);
                    tracing::warn!(%error, records, "cannot write the audit log");
                }
            }
            Err(error) => {
                self.shared.dropped.fetch_add(records, Ordering::Relaxed);
                tracing::error!(%error, "the audit log's writer thread failed; records are dropped");
            }
        }
    }

    fn due(&self, queue_empty: bool, interval: Duration) -> bool {
        !self.buf.is_empty()
            && (queue_empty
                || self.buf.len() >= FLUSH_BYTES
                || self.last_flush.elapsed() >= interval)
    }

    async fn reopen(&mut self) {
        self.flush().await;
        if let Some(sink) = &mut self.sink {
            sink.reopen();
        }
    }
}

/// Runs until [`super::AuditLog::close`] or until every handle is dropped,
/// then writes what is queued.
pub(super) async fn run(
    mut rx: mpsc::Receiver<Entry>,
    sink: Sink,
    shared: Arc<Shared>,
    options: AuditOptions,
) {
    let mut hangups = hangups(options.reopen_on_sighup && sink.path.is_some());
    let mut writer = Writer {
        sink: Some(sink),
        buf: Vec::with_capacity(FLUSH_BYTES),
        pending: 0,
        last_flush: Instant::now(),
        shared: shared.clone(),
    };
    let mut reporter = DropReporter::new(options.warn_interval);
    let mut tick = tokio::time::interval(options.flush_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = shared.stop.cancelled() => break,
            () = shared.reopen.notified() => writer.reopen().await,
            () = hangups.next() => writer.reopen().await,
            entry = rx.recv() => match entry {
                Some(entry) => writer.push(&entry),
                None => break,
            },
            _ = tick.tick() => {}
        }
        if writer.due(rx.is_empty(), options.flush_interval) {
            writer.flush().await;
        }
        report(&mut reporter, &shared);
    }
    rx.close();
    while let Ok(entry) = rx.try_recv() {
        writer.push(&entry);
        if writer.buf.len() >= FLUSH_BYTES {
            writer.flush().await;
        }
    }
    writer.flush().await;
    report(&mut reporter, &shared);
}

fn report(reporter: &mut DropReporter, shared: &Shared) {
    let total = shared.dropped.load(Ordering::Relaxed);
    if let Some(dropped) = reporter.due(Instant::now(), total) {
        tracing::warn!(
            dropped,
            total,
            "audit records dropped: the audit log cannot keep up"
        );
    }
}

/// SIGHUP, when asked for and available.
struct Hangups {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

fn hangups(wanted: bool) -> Hangups {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let signal = if wanted {
            signal(SignalKind::hangup())
                .inspect_err(|error| {
                    tracing::warn!(%error, "the audit log will not reopen on SIGHUP");
                })
                .ok()
        } else {
            None
        };
        Hangups { signal }
    }
    #[cfg(not(unix))]
    {
        let _ = wanted;
        Hangups {}
    }
}

impl Hangups {
    /// The next SIGHUP; never, if there are none to wait for.
    async fn next(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = &mut self.signal {
            if signal.recv().await.is_some() {
                return;
            }
            self.signal = None;
        }
        std::future::pending::<()>().await;
    }
}
