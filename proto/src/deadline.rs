//! A call's deadline, one value from the edge of each process to the
//! backend.
//!
//! A server makes it once, from the request (the caller's `grpc-timeout`,
//! less the [answer margin](crate::timeout::answer_margin) the server keeps
//! back to answer in time), then [limits](Deadline::limited) it by the
//! tool's timeout once the tool is known. Every part waits on the same
//! value (validation, idempotency, retries and hedges, the proxy, every
//! backend), and the `grpc-timeout` of an onward call is
//! [written from it](Deadline::grpc_timeout), once per hop.

use std::time::Duration;

use tokio::time::Instant;
use tonic::metadata::AsciiMetadataValue;

use crate::timeout;

/// When a call must be answered by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    /// When the call arrived: what its budget counts from.
    arrived: Instant,
    /// When its work must end; `None` while nothing bounds it (a caller
    /// without a deadline, before the tool's timeout is applied).
    at: Option<Instant>,
}

impl Deadline {
    /// A call that arrived at `arrived` with `caller` left on its caller's
    /// deadline (`grpc-timeout`), if it had one: it may run for all of it
    /// but the answer margin.
    pub fn from_caller(arrived: Instant, caller: Option<Duration>) -> Self {
        Self {
            arrived,
            at: caller.map(|left| arrived + timeout::answer_within(left)),
        }
    }

    /// The deadline of `request`, which arrives now.
    pub fn of<T>(request: &tonic::Request<T>) -> Self {
        Self::from_caller(Instant::now(), timeout::of(request))
    }

    /// A call that arrives now from a caller without a deadline.
    pub fn unbounded() -> Self {
        Self::from_caller(Instant::now(), None)
    }

    /// A call that arrives now and may run for `budget`.
    pub fn after(budget: Duration) -> Self {
        Self::unbounded().limited(budget)
    }

    /// This deadline, or `limit` after the call arrived if that is sooner:
    /// the tool's timeout.
    #[must_use]
    pub fn limited(self, limit: Duration) -> Self {
        let cap = self.arrived + limit;
        Self {
            at: Some(self.at.map_or(cap, |at| at.min(cap))),
            ..self
        }
    }

    /// This deadline limited by the tool's `timeout` if it declares one,
    /// else by `default` if nothing bounds the call yet: a sidecar's rule,
    /// where the registry's deadline already holds the registry's default.
    #[must_use]
    pub fn limited_by(self, timeout: Option<Duration>, default: Duration) -> Self {
        match (timeout, self.at) {
            (Some(limit), _) => self.limited(limit),
            (None, None) => self.limited(default),
            (None, Some(_)) => self,
        }
    }

    /// When the call arrived.
    pub fn arrived(&self) -> Instant {
        self.arrived
    }

    /// When the work must end. A deadline nothing bounds is far off.
    pub fn at(&self) -> Instant {
        self.at.unwrap_or_else(|| self.arrived + FAR)
    }

    /// The whole time the call was given, from its arrival: what a
    /// `DEADLINE_EXCEEDED` message names.
    pub fn budget(&self) -> Duration {
        self.at().saturating_duration_since(self.arrived)
    }

    /// What is left of it now.
    pub fn remaining(&self) -> Duration {
        self.at().saturating_duration_since(Instant::now())
    }

    /// Whether it has passed.
    pub fn has_passed(&self) -> bool {
        Instant::now() >= self.at()
    }

    /// Whether it falls within its answer margin from now: an onward call
    /// that ends `CANCELLED` this close to it ended by the deadline (the
    /// far side's own timer), not by a cancellation.
    pub fn is_upon(&self) -> bool {
        Instant::now() + timeout::answer_margin(self.budget()) >= self.at()
    }

    /// The `grpc-timeout` of an onward call made now: what remains. `None`
    /// when nothing bounds the call.
    pub fn grpc_timeout(&self) -> Option<AsciiMetadataValue> {
        self.at?;
        timeout::encode(self.remaining()).parse().ok()
    }
}

/// How far off an unbounded deadline is: beyond any tool's timeout.
const FAR: Duration = Duration::from_secs(365 * 24 * 3600);

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[tokio::test(start_paused = true)]
    async fn the_tool_and_the_caller_bound_it_whichever_is_sooner() {
        let now = Instant::now();
        let caller = Deadline::from_caller(now, Some(S(10)));
        assert_eq!(caller.limited(S(30)).budget(), Duration::from_millis(9_900));
        assert_eq!(caller.limited(S(2)).budget(), S(2));
        let open = Deadline::from_caller(now, None);
        assert_eq!(open.limited(S(30)).budget(), S(30));
        assert_eq!(open.grpc_timeout(), None, "nothing bounds it yet");
        assert!(open.budget() >= S(3600 * 24 * 364));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sidecar_keeps_the_registrys_bound_for_a_tool_without_one() {
        let now = Instant::now();
        let from_registry = Deadline::from_caller(now, Some(S(4)));
        assert_eq!(
            from_registry.limited_by(None, S(30)).budget(),
            Duration::from_millis(3_900)
        );
        assert_eq!(from_registry.limited_by(Some(S(1)), S(30)).budget(), S(1));
        let direct = Deadline::from_caller(now, None);
        assert_eq!(direct.limited_by(None, S(30)).budget(), S(30));
        assert_eq!(direct.limited_by(Some(S(5)), S(30)).budget(), S(5));
    }

    #[tokio::test(start_paused = true)]
    async fn it_counts_down_and_writes_what_remains() {
        let deadline = Deadline::after(S(2));
        assert_eq!(
            deadline.grpc_timeout().expect("bounded").to_str().ok(),
            Some("2000000u")
        );
        tokio::time::advance(Duration::from_millis(1_500)).await;
        assert_eq!(deadline.remaining(), Duration::from_millis(500));
        assert_eq!(deadline.budget(), S(2));
        assert!(!deadline.has_passed());
        assert!(!deadline.is_upon(), "500 ms left, a 100 ms margin");
        tokio::time::advance(Duration::from_millis(450)).await;
        assert!(deadline.is_upon());
        tokio::time::advance(Duration::from_millis(50)).await;
        assert!(deadline.has_passed());
        assert_eq!(
            deadline.grpc_timeout().expect("bounded").to_str().ok(),
            Some("0u")
        );
    }
}
