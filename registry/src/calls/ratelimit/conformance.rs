//! What every [`RateLimiter`] must decide, as scenarios run against the
//! local limiter (`ratelimit.rs`) and the Redis one (`redis.rs`) alike.
//! The limits are slow enough (a token per 1,000 s) that no token comes
//! back while a scenario runs, on a real clock or a paused one.

use std::time::Duration;

use super::{CallDecision, CallLimits, Decision, RateLimiter, Refused};
use crate::catalog::descriptor::Limit;

fn slow(burst: u32) -> Limit {
    Limit { rate: 0.001, burst }
}

/// A burst is admitted at once; the next call is told when a token comes
/// back, no later than one period; another key has its own bucket.
pub(super) async fn a_burst_is_admitted_then_the_next_waits(limiter: &dyn RateLimiter) {
    for _ in 0..3 {
        assert_eq!(
            limiter.acquire("burst", slow(3)).await.expect("decides"),
            Decision::Allow
        );
    }
    match limiter.acquire("burst", slow(3)).await.expect("decides") {
        Decision::Deny { retry_after } => assert!(
            retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1_000),
            "{retry_after:?}"
        ),
        Decision::Allow => panic!("the burst is spent"),
    }
    assert_eq!(
        limiter.acquire("another", slow(3)).await.expect("decides"),
        Decision::Allow
    );
}

/// A caller's limit is its own, and a call it refuses spends nothing of
/// the tool's.
pub(super) async fn a_callers_limit_is_its_own_and_spares_the_tools(limiter: &dyn RateLimiter) {
    let call = |caller| CallLimits {
        tool: "t",
        limit: Some(slow(3)),
        caller: Some((caller, slow(1))),
    };
    assert_eq!(
        limiter.acquire_call(call("a")).await.expect("decides"),
        CallDecision::Allow
    );
    for _ in 0..5 {
        assert!(matches!(
            limiter.acquire_call(call("a")).await.expect("decides"),
            CallDecision::Deny {
                by: Refused::Caller,
                ..
            }
        ));
    }
    // a's refusals took nothing from the tool: b and c still get in.
    assert_eq!(
        limiter.acquire_call(call("b")).await.expect("decides"),
        CallDecision::Allow
    );
    assert_eq!(
        limiter.acquire_call(call("c")).await.expect("decides"),
        CallDecision::Allow
    );
    assert!(matches!(
        limiter.acquire_call(call("d")).await.expect("decides"),
        CallDecision::Deny {
            by: Refused::Tool,
            ..
        }
    ));
}

/// Calls made at once are decided in the order they came, each seeing the
/// tokens the ones before it took, as one at a time: a caller's second call
/// is refused by its own limit and spends nothing of the tool's, and the
/// tool's burst goes to the first callers.
pub(super) async fn calls_made_at_once_are_decided_in_order(limiter: &dyn RateLimiter) {
    let call = |caller| CallLimits {
        tool: "together",
        limit: Some(slow(3)),
        caller: Some((caller, slow(1))),
    };
    let callers = ["x", "x", "y", "z", "w", "y"];
    let decisions =
        futures::future::join_all(callers.map(|caller| limiter.acquire_call(call(caller)))).await;
    let refusers: Vec<Option<Refused>> = decisions
        .into_iter()
        .map(|decision| match decision.expect("decides") {
            CallDecision::Allow => None,
            CallDecision::Deny { by, .. } => Some(by),
        })
        .collect();
    assert_eq!(
        refusers,
        [
            None,
            Some(Refused::Caller),
            None,
            None,
            Some(Refused::Tool),
            Some(Refused::Caller),
        ],
        "callers {callers:?}"
    );
}
