//! Lines that anyone who can reach a port can cause, at most one per
//! period: the first at once, then one per period naming how many were
//! left out since. So a flood of refused requests cannot flood the log;
//! the metrics still count every one.

use std::{
    sync::{Mutex, PoisonError},
    time::{Duration, Instant},
};

/// Decides which of a stream of lines are written.
#[derive(Debug)]
pub struct Throttle {
    period: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last: Option<Instant>,
    left_out: u64,
}

impl Throttle {
    /// At most one line per `period`.
    pub fn new(period: Duration) -> Self {
        Self {
            period,
            state: Mutex::new(State::default()),
        }
    }

    /// Whether the line due at `now` is written: `Some(n)` with the `n`
    /// lines left out since the last one written, or `None` to leave it
    /// out.
    pub fn admit(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        match state.last {
            Some(last) if now.saturating_duration_since(last) < self.period => {
                state.left_out = state.left_out.saturating_add(1);
                None
            }
            _ => {
                state.last = Some(now);
                Some(std::mem::take(&mut state.left_out))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_goes_out_then_one_per_period_with_the_count_left_out() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        assert_eq!(throttle.admit(at(0)), Some(0));
        for second in 1..10 {
            assert_eq!(throttle.admit(at(second)), None, "{second} s");
        }
        assert_eq!(throttle.admit(at(10)), Some(9));
        assert_eq!(throttle.admit(at(11)), None);
        assert_eq!(throttle.admit(at(100)), Some(1));
        assert_eq!(throttle.admit(at(100)), None, "the same instant");
    }

    #[test]
    fn a_clock_read_out_of_order_does_not_open_the_gate() {
        let throttle = Throttle::new(Duration::from_secs(10));
        let now = Instant::now() + Duration::from_secs(60);
        assert_eq!(throttle.admit(now), Some(0));
        assert_eq!(throttle.admit(now - Duration::from_secs(30)), None);
    }
}
