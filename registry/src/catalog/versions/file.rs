//! The versions file (`--versions-file`), read at start and again when it
//! changes: each reload is put in force in the catalog at once (defaults
//! move, splits and notices change, watchers are told).

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Weak},
};

use super::policy::VersionPolicy;
use crate::{
    access::auth::reload::{self, CheckOutcome, Reload, ReloadTask, Watched},
    catalog::Catalog,
};

/// The file, and the catalog it is put in force in.
struct VersionsFile {
    watched: Watched<VersionPolicy>,
    catalog: Weak<Catalog>,
}

impl Reload for VersionsFile {
    fn check(&self) -> CheckOutcome {
        let outcome = self.watched.check();
        if let (CheckOutcome::Reloaded, Some(catalog)) = (&outcome, self.catalog.upgrade()) {
            catalog.set_versions(self.watched.current());
        }
        outcome
    }

    fn path(&self) -> &Path {
        self.watched.path()
    }
}

/// Reads `path`, puts it in force in `catalog`, and re-reads it when it
/// changes until the returned task is dropped. The error names the file
/// and the entry that is wrong.
pub(crate) fn follow(path: PathBuf, catalog: &Arc<Catalog>) -> Result<ReloadTask, String> {
    let watched =
        Watched::<VersionPolicy>::open(path).map_err(|e| format!("--versions-file {e}"))?;
    catalog.set_versions(watched.current());
    let file = VersionsFile {
        watched,
        catalog: Arc::downgrade(catalog),
    };
    Ok(reload::spawn(
        vec![Arc::new(file)],
        reload::DEFAULT_RELOAD_INTERVAL,
    ))
}
