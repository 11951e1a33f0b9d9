//! The signal that stops a toolmesh process, the same in the registry, the
//! sidecar and a program serving SDK tools: SIGTERM (Kubernetes, systemd,
//! `kill`) or SIGINT (Ctrl-C).

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

/// Completes when the process receives SIGTERM or SIGINT, and logs which.
///
/// The handlers are installed by this call, not when the future is first
/// polled, so a signal that comes while the process is still starting is
/// not lost to the default action (which ends the process at once, without
/// a drain). Must be called within a Tokio runtime. If they cannot be
/// installed the future never completes (the process then stops only with
/// SIGKILL), and says so.
pub fn signal_received() -> impl Future<Output = ()> + Send + 'static {
    let installed = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = installed else {
            tracing::error!("cannot install the SIGTERM and SIGINT handlers; stop with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    }
}
