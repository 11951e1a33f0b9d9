//! Polling with a deadline. Prefer a signal (an event, a barrier, a log
//! line) where one exists; poll where the observable is a state.

use std::{future::Future, time::Duration};

use tokio::time::Instant;

/// How often both helpers look again.
const POLL: Duration = Duration::from_millis(20);

/// Polls the async `check` until it is true; panics naming `what` if it is
/// still false after `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Polls the synchronous `condition` until it holds; panics naming `what`
/// if it still does not after `within`.
pub async fn wait_until(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Asserts that `check` stays true for the whole of `period`, looking every
/// 20 ms: the opposite of [`eventually`], for "nothing happens".
pub async fn stays<F, Fut>(period: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let end = Instant::now() + period;
    loop {
        let looked_at = Instant::now();
        assert!(check().await, "no longer true: {what}");
        if looked_at >= end {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}
