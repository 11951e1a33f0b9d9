//! Saying that Redis is unreachable, from the one place that sees every
//! call: what (the address as configured, never a password), why (the
//! last error a call got), and what that means for each part of the
//! registry that uses Redis. Said when the breaker opens, again after 1 s,
//! 2 s, 4 s … (at most every minute) while it stays away, and once when it
//! answers again, with how long it was gone.

use std::{
    collections::BTreeMap,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;

/// First pause between two reports of one outage; it doubles each time.
const FIRST_REPEAT: Duration = Duration::from_secs(1);
/// Longest pause between two reports.
const MAX_REPEAT: Duration = Duration::from_secs(60);
/// How early a report may come: reports ride on calls that find Redis
/// away, and the catalog's look once a second would otherwise land a hair
/// before the report is due, and put it off by a whole second.
const EARLY: Duration = Duration::from_millis(100);

/// A part of the registry that depends on Redis, in the order reports
/// name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Dependent {
    /// The catalog store.
    Catalog,
    /// The rate limiter.
    RateLimits,
    /// The idempotency store.
    Idempotency,
    /// The task store.
    Tasks,
    /// The shared cache of tool embeddings.
    Embeddings,
}

/// What a dependent does while Redis is away, asked at each report (it may
/// change: the catalog is first unloaded, later served from its view).
pub type Consequence = Box<dyn Fn() -> String + Send + Sync>;

/// The state of one outage.
struct Down {
    /// When the first failed call of the outage was made.
    since: Instant,
    /// Reports so far.
    reports: u32,
    /// When the next report is due.
    next: Instant,
}

#[derive(Default)]
struct State {
    /// The first failure since Redis last answered.
    first_failure: Option<Instant>,
    /// The latest error a call got from Redis itself (not the breaker).
    cause: Option<String>,
    /// Set once the breaker opened: Redis is reported as unreachable.
    down: Option<Down>,
}

/// Decides when to report an outage, and reports it.
pub(crate) struct OutageLog {
    /// Where Redis is, as configured, with any password masked.
    redis: String,
    /// Whether any failure was seen since Redis last answered: the fast
    /// path of every answered call reads only this.
    troubled: AtomicBool,
    state: Mutex<State>,
    /// One consequence per dependent, registered once by each.
    consequences: Mutex<BTreeMap<Dependent, Consequence>>,
}

impl OutageLog {
    /// Reports about the Redis at `url`.
    pub(crate) fn new(url: &str) -> Self {
        Self {
            redis: masked(url),
            troubled: AtomicBool::new(false),
            state: Mutex::default(),
            consequences: Mutex::default(),
        }
    }

    /// The address reports name.
    pub(crate) fn redis(&self) -> &str {
        &self.redis
    }

    /// Names, in every report, what `dependent` does while Redis is away.
    pub(crate) fn on_outage(&self, dependent: Dependent, consequence: Consequence) {
        self.consequences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(dependent, consequence);
    }

    /// A call made at `started` failed with `error` (`None`: refused by
    /// the open breaker, Redis not tried); `open`: the breaker is open now.
    pub(crate) fn failed(&self, started: Instant, error: Option<String>, open: bool) {
        self.troubled.store(true, Ordering::Relaxed);
        let now = Instant::now();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let since = *state.first_failure.get_or_insert(started);
        if let Some(error) = error {
            state.cause = Some(error);
        }
        let due = match &mut state.down {
            None if open => {
                state.down = Some(Down {
                    since,
                    reports: 0,
                    next: now,
                });
                true
            }
            Some(down) => down.next <= now + EARLY,
            None => false,
        };
        if !due {
            return;
        }
        let Some(down) = state.down.as_mut() else {
            return;
        };
        let repeat = repeat_after(down.reports);
        down.reports += 1;
        down.next = now + repeat;
        let (gone, cause) = (now - down.since, state.cause.clone());
        drop(state);
        self.report(gone, cause.as_deref(), repeat);
    }

    /// A call got Redis's answer: ends the outage, if there was one.
    pub(crate) fn answered(&self) {
        if !self.troubled.load(Ordering::Relaxed) {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.troubled.store(false, Ordering::Relaxed);
        let down = state.down.take();
        *state = State::default();
        drop(state);
        if let Some(down) = down {
            let gone = down.since.elapsed();
            tracing::info!(
                redis = %self.redis,
                down_for = %seconds(gone),
                "redis at {} answers again after {} unreachable",
                self.redis,
                seconds(gone),
            );
        }
    }

    fn report(&self, gone: Duration, cause: Option<&str>, repeat: Duration) {
        let consequences: Vec<String> = self
            .consequences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|consequence| consequence())
            .filter(|text| !text.is_empty())
            .collect();
        let cause = cause.unwrap_or("no call has reached it");
        let meanwhile = if consequences.is_empty() {
            String::new()
        } else {
            format!(" Meanwhile {}.", consequences.join("; "))
        };
        tracing::warn!(
            redis = %self.redis,
            error = %cause,
            down_for = %seconds(gone),
            "redis at {} is unreachable (for {}): {cause}.{meanwhile} Said again in {} if it lasts.",
            self.redis,
            seconds(gone),
            seconds(repeat),
        );
    }
}

/// The pause after report number `reports` (from 0): 1 s, 2 s, 4 s … 60 s.
fn repeat_after(reports: u32) -> Duration {
    FIRST_REPEAT
        .saturating_mul(1 << reports.min(6))
        .min(MAX_REPEAT)
}

/// `duration` for a log line: `2.3s`, `45s`, `3m 20s`.
fn seconds(duration: Duration) -> String {
    let secs = duration.as_secs();
    if secs < 10 {
        format!("{:.1}s", duration.as_secs_f64())
    } else if secs < 60 {
        format!("{secs}s")
    } else {
        format!("{}m {}s", secs / 60, secs % 60)
    }
}

/// `url` with its password, if any, masked.
fn masked(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) if url.contains('@') => {
            "(an unreadable URL, not shown: it may hold a password)".into()
        }
        Err(_) => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_back_off_to_a_minute() {
        let pauses: Vec<u64> = (0..9).map(|n| repeat_after(n).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn passwords_are_never_shown() {
        assert_eq!(
            masked("redis://user:s3cret@10.0.0.1:6379/0"),
            "redis://user:***@10.0.0.1:6379/0"
        );
        assert_eq!(
            masked("redis://127.0.0.1:6391/0"),
            "redis://127.0.0.1:6391/0"
        );
        assert!(!masked("redis//:s3cret@x").contains("s3cret"));
    }

    #[test]
    fn durations_read_at_a_glance() {
        assert_eq!(seconds(Duration::from_millis(2345)), "2.3s");
        assert_eq!(seconds(Duration::from_secs(45)), "45s");
        assert_eq!(seconds(Duration::from_secs(200)), "3m 20s");
    }

    #[tokio::test(start_paused = true)]
    async fn an_outage_is_reported_when_the_breaker_opens_then_with_backoff() {
        let log = OutageLog::new("redis://127.0.0.1:1");
        let start = Instant::now();
        log.failed(start, Some("refused".into()), false);
        assert!(
            log.state.lock().expect("state").down.is_none(),
            "a blip is not an outage"
        );
        log.failed(start, Some("refused".into()), true);
        let next = |log: &OutageLog| {
            let state = log.state.lock().expect("state");
            state.down.as_ref().map(|d| (d.reports, d.next - start))
        };
        assert_eq!(next(&log), Some((1, Duration::from_secs(1))));
        tokio::time::sleep(Duration::from_millis(850)).await;
        log.failed(Instant::now(), None, true);
        assert_eq!(next(&log), Some((1, Duration::from_secs(1))), "not due yet");
        tokio::time::sleep(Duration::from_millis(100)).await;
        log.failed(Instant::now(), None, true);
        assert_eq!(next(&log), Some((2, Duration::from_millis(2950))), "due");
        log.answered();
        assert_eq!(next(&log), None);
        assert!(!log.troubled.load(Ordering::Relaxed));
    }
}
