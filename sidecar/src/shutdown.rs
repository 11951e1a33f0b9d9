//! The signals a sidecar process (the binary, or a program serving SDK
//! tools) acts on: SIGTERM / SIGINT shut it down ([`signal_received`], the
//! registry's signal too),
//! SIGUSR1 makes it withdraw from the registry while it keeps serving
//! ([`withdraw_requested`], sent by `toolmesh-sidecar withdraw`).

use std::future::Future;

use tokio::signal::unix::{SignalKind, signal};

pub use toolmesh_proto::shutdown::signal_received;

/// Completes when the process receives SIGUSR1: the withdraw request of
/// [`crate::server::serve_with_withdraw`], which `toolmesh-sidecar
/// withdraw` sends ([`crate::withdraw`]).
///
/// The handler is installed by this call, not when the future is first
/// polled: call it at start, since until then SIGUSR1 ends the process
/// (its default action). It stays installed, so later SIGUSR1s are
/// ignored. Must be called within a Tokio runtime. If the handler cannot
/// be installed the future never completes, and says so.
pub fn withdraw_requested() -> impl Future<Output = ()> + Send + 'static {
    let installed = signal(SignalKind::user_defined1());
    async move {
        match installed {
            Ok(mut usr1) => {
                usr1.recv().await;
                tracing::info!("SIGUSR1: withdrawing from the registry");
            }
            Err(error) => {
                tracing::error!(%error, "cannot install the SIGUSR1 handler; withdraw requests are not taken");
                std::future::pending::<()>().await;
            }
        }
    }
}
