//! Keeping the pins current: the pins file re-read when it changes, the
//! pin store read again every second (in Redis mode, what other replicas
//! pinned), and the catalog asked again about every live definition when
//! either changed.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Weak},
    time::Duration,
};

use tokio_util::sync::{CancellationToken, DropGuard};

use super::{PinRules, Pins, store::PinStore};
use crate::{
    access::auth::reload::{self, CheckOutcome, Reload, ReloadTask, Watched},
    catalog::Catalog,
};

/// How often the pin store is read again.
const REFRESH: Duration = Duration::from_secs(1);

/// What keeps the pins current; dropping it stops it.
pub(crate) struct PinsTask {
    _file: ReloadTask,
    _refresh: DropGuard,
}

struct PinsFile {
    watched: Watched<PinRules>,
    pins: Arc<Pins>,
    catalog: Weak<Catalog>,
}

impl Reload for PinsFile {
    fn check(&self) -> CheckOutcome {
        let outcome = self.watched.check();
        if let CheckOutcome::Reloaded = outcome {
            self.pins.set_rules(self.watched.current());
            if let Some(catalog) = self.catalog.upgrade() {
                catalog.regate();
            }
        }
        outcome
    }

    fn path(&self) -> &Path {
        self.watched.path()
    }
}

/// Reads the pins file at `path` and the pins in `store`, holds back in
/// `catalog` what they do not admit, and keeps both current until the
/// returned task is dropped (the store is first read at once, in the
/// background). The error names the file and the entry.
pub(crate) fn follow(
    path: PathBuf,
    store: Arc<dyn PinStore>,
    catalog: &Arc<Catalog>,
    (audit, metrics): (crate::access::audit::AuditLog, Arc<crate::metrics::Metrics>),
) -> Result<PinsTask, String> {
    let watched = Watched::<PinRules>::open(path).map_err(|e| format!("--pins-file {e}"))?;
    let pins = Arc::new(Pins::new(PinRules::default(), store));
    pins.observed_by(audit, metrics);
    pins.set_rules(watched.current());
    for (key, _) in pins.rules().pins() {
        let live = catalog
            .family(crate::catalog::versions::name_of(key))
            .is_some();
        if !live {
            tracing::warn!(pin = %key, "the pins file pins a tool that is not live (yet)");
        }
    }
    catalog.pin_with(pins.clone());
    let file = PinsFile {
        watched,
        pins: pins.clone(),
        catalog: Arc::downgrade(catalog),
    };
    let stop = CancellationToken::new();
    tokio::spawn({
        let (stopped, catalog) = (stop.clone(), Arc::downgrade(catalog));
        async move {
            let mut ticks = tokio::time::interval(REFRESH);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    () = stopped.cancelled() => return,
                    _ = ticks.tick() => {}
                }
                match pins.refresh().await {
                    Ok(true) => {
                        if let Some(catalog) = catalog.upgrade() {
                            catalog.regate();
                        }
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::debug!(%error, "pins not refreshed; the last read stays in force")
                    }
                }
            }
        }
    });
    Ok(PinsTask {
        _file: reload::spawn(vec![Arc::new(file)], reload::DEFAULT_RELOAD_INTERVAL),
        _refresh: stop.drop_guard(),
    })
}
