//! Whether anyone still reads standard output: `toolmesh watch | head -1`
//! would otherwise wait for the next change before a write found the pipe
//! closed (GNU `tail -f` notices the same way).

use std::os::fd::AsFd as _;

use tokio::io::Interest;
use tokio::net::unix::pipe;

/// Resolves once standard output is a pipe whose reader has gone; never
/// for a terminal or a file (nothing tells when they are done with).
pub(crate) async fn stdout_closed() {
    // A copy of the descriptor, only watched, never written to (so it is
    // left blocking): a pipe's writing end reports an error once no reader
    // is left. A regular file cannot be watched.
    let watched = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(pipe::Sender::from_owned_fd_unchecked);
    if let Ok(stdout) = watched
        && stdout
            .ready(Interest::ERROR)
            .await
            .is_ok_and(|ready| ready.is_error())
    {
        return;
    }
    std::future::pending().await
}
