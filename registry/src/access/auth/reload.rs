//! A file's parsed contents, re-read when the file changes on disk.
//!
//! [`Watched::check`] looks at the file's modification time, length and
//! inode (a replaced file or a moved symlink shows as a change) and parses
//! it again when they differ from the last look. A file that no longer
//! parses, or has gone, keeps the previous contents in force and logs one
//! warning per change. [`spawn`] runs the checks every couple of seconds
//! until its [`ReloadTask`] is stopped or dropped.
//!
//! Reads are lock-free: [`Watched::current`] is an atomic load.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::error::{AuthFileError, FormatError};

/// How often [`spawn`] looks at the files unless told otherwise.
pub(crate) const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// The contents of a kind of auth file.
pub(crate) trait AuthFile: Sized + Send + Sync + 'static {
    /// What the file is, for log lines (e.g. "policy file").
    const KIND: &'static str;

    /// Parses the file's text.
    fn parse(text: &str) -> Result<Self, FormatError>;
}

/// What one [`Watched::check`] did.
#[derive(Debug)]
pub enum CheckOutcome {
    /// The file looks as it did at the last check.
    Unchanged,
    /// The file changed and its new contents are in force.
    Reloaded,
    /// The file changed and could not be loaded: the previous contents stay
    /// in force.
    Kept(AuthFileError),
}

/// A file whose contents [`check`](Self::check) can refresh.
pub trait Reload: Send + Sync {
    /// Re-reads the file if it changed since the last check.
    fn check(&self) -> CheckOutcome;

    /// The file.
    fn path(&self) -> &Path;
}

/// The parsed contents of a file, kept current by [`check`](Self::check).
#[derive(Debug)]
pub(crate) struct Watched<T> {
    path: PathBuf,
    current: ArcSwap<T>,
    seen: Mutex<Option<Stamp>>,
}

/// What a change on disk alters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

impl Stamp {
    fn of(path: &Path) -> Result<Self, AuthFileError> {
        let meta = fs::metadata(path).map_err(|source| AuthFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Ok(Self {
            modified: meta.modified().ok(),
            len: meta.len(),
            inode: inode(&meta),
        })
    }
}

#[cfg(unix)]
fn inode(meta: &fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_meta: &fs::Metadata) -> u64 {
    0
}

fn read<T: AuthFile>(path: &Path) -> Result<T, AuthFileError> {
    let text = fs::read_to_string(path).map_err(|source| AuthFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    T::parse(&text).map_err(|problem| AuthFileError::Invalid {
        path: path.to_owned(),
        problem,
    })
}

impl<T: AuthFile> Watched<T> {
    /// Loads the file; an error here is for the caller to report at startup.
    pub(crate) fn open(path: impl Into<PathBuf>) -> Result<Self, AuthFileError> {
        let path = path.into();
        let stamp = Stamp::of(&path)?;
        let value = read::<T>(&path)?;
        Ok(Self {
            path,
            current: ArcSwap::from_pointee(value),
            seen: Mutex::new(Some(stamp)),
        })
    }

    /// The contents in force.
    pub(crate) fn current(&self) -> Arc<T> {
        self.current.load_full()
    }

    /// Runs `f` on the contents in force without taking a reference count.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&T) -> R) -> R {
        f(&self.current.load())
    }

    fn reload(&self) -> CheckOutcome {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let stamp = match Stamp::of(&self.path) {
            Ok(stamp) => stamp,
            Err(error) => {
                if seen.take().is_none() {
                    return CheckOutcome::Unchanged;
                }
                tracing::warn!(path = %self.path.display(), %error, "kept the previous {}", T::KIND);
                return CheckOutcome::Kept(error);
            }
        };
        if *seen == Some(stamp) {
            return CheckOutcome::Unchanged;
        }
        *seen = Some(stamp);
        match read::<T>(&self.path) {
            Ok(value) => {
                self.current.store(Arc::new(value));
                tracing::info!(path = %self.path.display(), "reloaded the {}", T::KIND);
                CheckOutcome::Reloaded
            }
            Err(error) => {
                tracing::warn!(path = %self.path.display(), %error, "kept the previous {}", T::KIND);
                CheckOutcome::Kept(error)
            }
        }
    }
}

impl<T: AuthFile> Reload for Watched<T> {
    fn check(&self) -> CheckOutcome {
        self.reload()
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// The task [`spawn`] started; dropping it stops the task too.
#[derive(Debug)]
pub struct ReloadTask {
    stop: DropGuard,
    handle: JoinHandle<()>,
}

impl ReloadTask {
    /// Stops the task and waits for the check in progress, if any, to end.
    pub async fn stop(self) {
        let Self { stop, handle } = self;
        drop(stop);
        if let Err(error) = handle.await {
            tracing::warn!(%error, "the auth file reload task failed");
        }
    }
}

/// Checks every file in `files` every `every`, on the blocking pool, until
/// the returned task is stopped or dropped. Needs a tokio runtime.
pub(crate) fn spawn(files: Vec<Arc<dyn Reload>>, every: Duration) -> ReloadTask {
    let cancel = CancellationToken::new();
    let stopped = cancel.clone();
    let files: Arc<[Arc<dyn Reload>]> = files.into();
    let handle = tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                () = stopped.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let files = Arc::clone(&files);
            let checks = tokio::task::spawn_blocking(move || {
                for file in files.iter() {
                    file.check();
                }
            });
            if let Err(error) = checks.await {
                tracing::warn!(%error, "an auth file check failed");
            }
        }
    });
    ReloadTask {
        stop: cancel.drop_guard(),
        handle,
    }
}

#[cfg(test)]
mod tests;
