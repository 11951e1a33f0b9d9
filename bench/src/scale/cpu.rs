//! The registry's CPU time, read from `/proc` (Linux): every thread's
//! `schedstat`, in nanoseconds. Work the registry does after answering (its
//! search index follows the catalog's changes in a task of its own) shows
//! here and in no answer's time.
//!
//! A thread that exits takes its `schedstat` with it; when one has between
//! two samples, the difference falls back to the process's `utime + stime`
//! (which keeps exited threads' time), in clock ticks of 10 ms.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

/// The slice over which the registry is judged busy or quiet.
const SLICE: Duration = Duration::from_millis(200);
/// Below this share of one core over a slice, the registry is quiet.
const QUIET: f64 = 0.05;
/// Nanoseconds in one clock tick of `/proc/PID/stat` (`USER_HZ` is 100 on
/// Linux).
const TICK_NS: u64 = 10_000_000;

/// One reading of a process's CPU time.
#[derive(Debug, Clone, Default)]
pub(super) struct Sample {
    /// Each live thread's CPU time, in nanoseconds, by thread id.
    threads: HashMap<u32, u64>,
    /// The process's `utime + stime`, exited threads included, in
    /// nanoseconds (10 ms steps).
    process_ns: u64,
}

/// The CPU time of `pid` now.
pub(super) fn sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let mut threads = HashMap::new();
    for thread in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(thread) = thread else { continue };
        let Some(tid) = thread.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread that exits while it is read is left out.
        if let Ok(schedstat) = std::fs::read_to_string(thread.path().join("schedstat"))
            && let Some(Ok(ns)) = schedstat.split_whitespace().next().map(str::parse)
        {
            threads.insert(tid, ns);
        }
    }
    Some(Sample {
        threads,
        process_ns: (utime + stime) * TICK_NS,
    })
}

/// The CPU time used between `before` and `after`, in nanoseconds: by
/// thread when every thread of `before` is still in `after`, else by the
/// process's ticks.
pub(super) fn used_ns(before: &Sample, after: &Sample) -> u64 {
    let all_live = before
        .threads
        .keys()
        .all(|tid| after.threads.contains_key(tid));
    if !all_live {
        return after.process_ns.saturating_sub(before.process_ns);
    }
    after
        .threads
        .iter()
        .map(|(tid, ns)| ns.saturating_sub(before.threads.get(tid).copied().unwrap_or(0)))
        .sum()
}

/// CPU time spent beyond the rest rate: `used_ns` over `window`, less
/// `rest_ns` over `rest` scaled to `window`; in milliseconds, at least 0.
pub(super) fn beyond_rest_ms(used_ns: u64, window: Duration, rest_ns: u64, rest: Duration) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let (used, at_rest) = (used_ns as f64, rest_ns as f64);
    let scaled = at_rest * window.as_secs_f64() / rest.as_secs_f64().max(f64::EPSILON);
    ((used - scaled) / 1e6).max(0.0)
}

/// Whether `used_ns` of CPU over `slice` is under [`QUIET`] of one core.
fn is_quiet(used_ns: u64, slice: Duration) -> bool {
    #[allow(clippy::cast_precision_loss)]
    let share = used_ns as f64 / 1e9 / slice.as_secs_f64().max(f64::EPSILON);
    share < QUIET
}

/// Waits until `pid` is quiet for a slice: the start of that slice and the
/// CPU time at it. Fails after `within`, or if `/proc` cannot be read.
pub(super) async fn settle(pid: u32, within: Duration) -> anyhow::Result<(Instant, Sample)> {
    let read = || sample(pid).ok_or_else(|| anyhow::anyhow!("no CPU time for process {pid}"));
    let deadline = Instant::now() + within;
    loop {
        let (at, before) = (Instant::now(), read()?);
        tokio::time::sleep(SLICE).await;
        if is_quiet(used_ns(&before, &read()?), at.elapsed()) {
            return Ok((at, before));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "process {pid} was still busy after {within:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_rate_is_scaled_to_the_window() {
        let second = Duration::from_secs(1);
        assert!((beyond_rest_ms(30_000_000, second / 2, 10_000_000, second) - 25.0).abs() < 1e-9);
        assert_eq!(beyond_rest_ms(1_000_000, second, 10_000_000, second), 0.0);
    }

    #[test]
    fn quiet_is_a_share_of_one_core() {
        let slice = Duration::from_millis(200);
        assert!(is_quiet(9_000_000, slice), "4.5 % of a core");
        assert!(!is_quiet(11_000_000, slice), "5.5 % of a core");
    }

    #[test]
    fn this_process_has_cpu_time() {
        if cfg!(target_os = "linux") {
            let now = sample(std::process::id()).expect("a sample of this process");
            assert!(now.threads.values().sum::<u64>() > 0);
        }
    }

    fn at(threads: &[(u32, u64)], process_ns: u64) -> Sample {
        Sample {
            threads: threads.iter().copied().collect(),
            process_ns,
        }
    }

    #[test]
    fn time_is_counted_by_thread_while_none_exits() {
        let before = at(&[(1, 100), (2, 50)], 0);
        let after = at(&[(1, 130), (2, 60), (3, 5)], 0);
        assert_eq!(used_ns(&before, &after), 45, "a new thread counts whole");
    }

    #[test]
    fn an_exited_thread_falls_back_to_the_process_ticks() {
        let before = at(&[(1, 100), (2, 50)], 10 * TICK_NS);
        let after = at(&[(1, 130)], 13 * TICK_NS);
        assert_eq!(used_ns(&before, &after), 3 * TICK_NS);
    }
}
