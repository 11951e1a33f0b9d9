//! Latency figures of a sample of timed calls.

use std::time::Duration;

/// p50, p99 and max of a sample, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub(crate) struct Summary {
    /// The median, by nearest rank.
    pub(crate) p50_ms: f64,
    /// The 99th percentile, by nearest rank.
    pub(crate) p99_ms: f64,
    /// The slowest call.
    pub(crate) max_ms: f64,
}

impl Summary {
    /// The summary of `times`, in any order; zeros for none.
    pub(crate) fn of(mut times: Vec<Duration>) -> Self {
        times.sort_unstable();
        Self {
            p50_ms: millis(percentile(&times, 50)),
            p99_ms: millis(percentile(&times, 99)),
            max_ms: millis(times.last().copied().unwrap_or_default()),
        }
    }
}

/// The `pct` percentile of `sorted`, by nearest rank.
pub(crate) fn percentile(sorted: &[Duration], pct: usize) -> Duration {
    let rank = (sorted.len() * pct)
        .div_ceil(100)
        .clamp(1, sorted.len().max(1));
    sorted.get(rank - 1).copied().unwrap_or_default()
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let times: Vec<Duration> = (1..=200).map(Duration::from_millis).collect();
        assert_eq!(percentile(&times, 50), Duration::from_millis(100));
        assert_eq!(percentile(&times, 99), Duration::from_millis(198));
        assert_eq!(percentile(&times[..1], 99), Duration::from_millis(1));
        assert_eq!(percentile(&[], 99), Duration::ZERO);
        let fifty: Vec<Duration> = (1..=50).map(Duration::from_millis).collect();
        assert_eq!(percentile(&fifty, 50), Duration::from_millis(25));
        assert_eq!(percentile(&fifty, 99), Duration::from_millis(50));
    }

    #[test]
    fn a_summary_sorts_its_sample() {
        let times = [3, 1, 2].map(Duration::from_millis).to_vec();
        assert_eq!(
            Summary::of(times),
            Summary {
                p50_ms: 2.0,
                p99_ms: 3.0,
                max_ms: 3.0
            }
        );
        assert_eq!(Summary::of(Vec::new()), Summary::default());
    }
}
