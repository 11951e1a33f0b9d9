//! Settings built from files, and built again when one of the files
//! changes: [`Reloading::current`] compares the files' modification time,
//! size and inode with the last build's, at most once per interval.

use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use super::TlsError;

/// What identifies a version of a file; `None`: it cannot be read.
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len(), metadata.ino()))
}

type Build<T> = Box<dyn Fn() -> Result<T, TlsError> + Send + Sync>;

/// `T`, built by a function of some files, rebuilt when they change.
pub(super) struct Reloading<T> {
    what: &'static str,
    files: Vec<PathBuf>,
    build: Build<T>,
    interval: Duration,
    state: Mutex<State<T>>,
}

impl<T> std::fmt::Debug for Reloading<T> {
    /// What it builds and from which files, not the settings themselves.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloading")
            .field("what", &self.what)
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

struct State<T> {
    current: Arc<T>,
    stamps: Vec<Stamp>,
    checked: Instant,
}

impl<T> Reloading<T> {
    /// Builds `T` now (an error is the caller's to report), and again
    /// whenever [`Self::current`] sees that one of `files` changed.
    pub(super) fn new(
        what: &'static str,
        files: Vec<PathBuf>,
        build: impl Fn() -> Result<T, TlsError> + Send + Sync + 'static,
        interval: Duration,
    ) -> Result<Self, TlsError> {
        let stamps = files.iter().map(stamp).collect();
        let current = Arc::new(build()?);
        Ok(Self {
            what,
            files,
            build: Box::new(build),
            interval,
            state: Mutex::new(State {
                current,
                stamps,
                checked: Instant::now(),
            }),
        })
    }

    /// The settings to use for a new connection: rebuilt first if the
    /// interval has passed since the last check and a file changed. A
    /// failed rebuild keeps the previous settings, and is not tried again
    /// until a file changes again.
    pub(super) fn current(&self) -> Arc<T> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.checked.elapsed() < self.interval {
            return state.current.clone();
        }
        state.checked = Instant::now();
        let stamps: Vec<Stamp> = self.files.iter().map(stamp).collect();
        if stamps == state.stamps {
            return state.current.clone();
        }
        state.stamps = stamps;
        match (self.build)() {
            Ok(built) => {
                tracing::info!(what = self.what, "TLS files changed; reloaded");
                state.current = Arc::new(built);
            }
            Err(error) => {
                tracing::warn!(what = self.what, %error, "TLS files changed but cannot be used; keeping the previous ones");
            }
        }
        state.current.clone()
    }
}
