//! What the benches measure with: resident memory and percentiles.

use std::time::Duration;

/// This process's resident memory in bytes (Linux; 0 elsewhere).
pub(crate) fn rss() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// The `q` quantile of `sorted` (not empty).
pub(crate) fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let index = ((sorted.len() as f64 * q) as usize).min(sorted.len() - 1);
    sorted[index]
}
