//! Lanes: which serving thread ([`crate::serving`]'s workers) the code runs
//! on, so that what a call dials (a sidecar's HTTP/2 connection, a Redis
//! connection) is driven on the thread the call is served on and the call
//! never changes threads.
//!
//! Lane 0 belongs to every thread that is not a serving thread (the main
//! runtime's workers: background work, the MCP endpoint, tasks); serving
//! thread `i` (from 1) has lane `i`.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Lanes in use so far: one more than the highest serving thread's index.
static LANES: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static LANE: Cell<usize> = const { Cell::new(0) };
}

/// Makes this thread serving thread `index` (from 1).
pub(crate) fn enter(index: usize) {
    LANES.fetch_max(index + 1, Ordering::Relaxed);
    LANE.set(index);
}

/// This thread's lane.
pub(crate) fn current() -> usize {
    LANE.get()
}

/// Lanes in use so far (lane 0 and one per serving thread started).
pub(crate) fn in_use() -> usize {
    LANES.load(Ordering::Relaxed).max(1)
}

/// The element of `per_lane` (one per lane) that this thread uses: its own,
/// or lane 0's when `per_lane` was made before this thread's lane existed.
pub(crate) fn pick<T>(per_lane: &[T]) -> &T {
    per_lane.get(current()).unwrap_or(&per_lane[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_thread_has_a_lane_of_its_own_and_others_share_lane_0() {
        let items = [0, 1, 2, 3, 4];
        let on_thread = std::thread::spawn(move || {
            enter(3);
            *pick(&items)
        })
        .join();
        assert!(matches!(on_thread, Ok(3)));
        assert!(in_use() >= 4);
        assert_eq!(*pick(&items), 0, "this test's thread is no serving thread");
        let older = [7];
        let on_thread = std::thread::spawn(move || {
            enter(2);
            *pick(&older)
        })
        .join();
        assert!(
            matches!(on_thread, Ok(7)),
            "lane 0's when made before the lane"
        );
    }
}
