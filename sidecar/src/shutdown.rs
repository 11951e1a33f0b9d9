//! The shutdown future of a sidecar process (the binary, or a program
//! serving SDK tools): completes on SIGTERM or SIGINT.

use tokio::signal::unix::{SignalKind, signal};

/// Completes when the process receives SIGTERM or SIGINT. If the handlers
/// cannot be installed it never completes (the process then stops only
/// with SIGKILL), and says so on stderr.
pub async fn signal_received() {
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}
