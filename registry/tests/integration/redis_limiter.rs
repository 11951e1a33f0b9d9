//! `RedisLimiter` against a real `redis-server` on loopback: exact across
//! replicas, exact retry delays, both outage policies, and Cluster.

use std::{
    collections::HashSet,
    sync::{Arc, atomic::AtomicUsize},
    time::{Duration, Instant},
};

use toolmesh_registry::{
    calls::ratelimit::{
        CallDecision, CallLimits, Decision, LimiterError, RateLimiter, Refused,
        redis::{OutagePolicy, RedisLimiter},
    },
    catalog::descriptor::Limit,
    redis_pool::{RedisPool, RedisSettings},
};

use crate::{
    common::redis_probe::Frozen,
    common::{
        eventually,
        redis_server::{RedisServer, start_cluster},
    },
};

const PREFIX: &str = "t";

fn pool(url: &str, call_timeout: Duration, breaker_cooldown: Duration) -> Arc<RedisPool> {
    RedisPool::new(RedisSettings {
        url: url.to_owned(),
        call_timeout,
        breaker_cooldown,
        ..RedisSettings::default()
    })
    .unwrap()
}

fn limiter(pool: Arc<RedisPool>, policy: OutagePolicy, replicas: usize) -> RedisLimiter {
    RedisLimiter::new(pool, PREFIX, policy, Arc::new(AtomicUsize::new(replicas)))
}

/// A plain connection to one server, to look at what the limiter wrote.
async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

async fn exists(url: &str, key: &str) -> bool {
    let mut conn = raw(url).await;
    // On a Cluster node that does not own the key this is a MOVED error.
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(&mut conn)
        .await
        .is_ok_and(|n| n == 1)
}

async fn pttl_ms(url: &str, key: &str) -> i64 {
    let mut conn = raw(url).await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async::<i64>(&mut conn)
        .await
        .unwrap()
}

/// One decision, timed from outside: it was taken by Redis between `sent`
/// and `answered`.
struct Timed {
    sent: Instant,
    answered: Instant,
    allowed: bool,
}

/// Three replicas (three limiters, each with its own pool) hammer one key
/// on one Redis for three seconds, starting together.
///
/// GCRA admits `b + r*s` calls over the span `s` from its first decision
/// to its last, on Redis's clock: the k-th admitted call (k > b) comes no
/// sooner than `(k - b) / r` after the first. Bounding the span from
/// outside with each decision's send and answer times:
///
/// - `admitted <= b + r * (answer of the last admitted - send of the
///   first) + 1` (the 1 for the two clocks' rounding);
/// - with callers always waiting no token goes unused (the bucket's TAT
///   stays ahead of the clock), but for the one or two left when the calls
///   stop: `admitted >= b + floor(r * (send of the last - answer of the
///   first)) - 2`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_together_admit_exactly_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limit = Limit {
        rate: 20.0,
        burst: 10,
    };
    let replicas: Vec<Arc<RedisLimiter>> = (0..3)
        .map(|_| {
            let pool = pool(
                &server.url(),
                Duration::from_secs(5),
                Duration::from_secs(1),
            );
            Arc::new(limiter(pool, OutagePolicy::FailClosed, 3))
        })
        .collect();
    // Connect and load the script first, so the run measures decisions only.
    for replica in &replicas {
        assert_eq!(
            replica.acquire("warm-up", limit).await.unwrap(),
            Decision::Allow
        );
    }

    let run_for = Duration::from_secs(3);
    let go = Arc::new(tokio::sync::Barrier::new(replicas.len()));
    let tasks: Vec<_> = replicas
        .iter()
        .map(|replica| {
            let (replica, go) = (replica.clone(), go.clone());
            tokio::spawn(async move {
                go.wait().await;
                let stop_at = Instant::now() + run_for;
                let (mut decisions, mut failed) = (Vec::new(), 0u64);
                while Instant::now() < stop_at {
                    let sent = Instant::now();
                    let decision = replica.acquire("shared", limit).await;
                    let answered = Instant::now();
                    match decision {
                        Ok(decision) => decisions.push(Timed {
                            sent,
                            answered,
                            allowed: decision == Decision::Allow,
                        }),
                        Err(_) => failed += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                (decisions, failed)
            })
        })
        .collect();
    let mut per_replica = Vec::new();
    for task in tasks {
        per_replica.push(task.await.unwrap());
    }

    let failed: u64 = per_replica.iter().map(|r| r.1).sum();
    assert_eq!(failed, 0, "no call may fail while Redis is up");
    let admitted_by: Vec<usize> = per_replica
        .iter()
        .map(|(d, _)| d.iter().filter(|d| d.allowed).count())
        .collect();
    let decisions: Vec<&Timed> = per_replica.iter().flat_map(|(d, _)| d).collect();
    let admitted: Vec<&&Timed> = decisions.iter().filter(|d| d.allowed).collect();
    let first_sent = decisions.iter().map(|d| d.sent).min().unwrap();
    let first_answered = decisions.iter().map(|d| d.answered).min().unwrap();
    let last_sent = decisions.iter().map(|d| d.sent).max().unwrap();
    let last_admitted = admitted.iter().map(|d| d.answered).max().unwrap();
    let (rate, burst) = (limit.rate, f64::from(limit.burst));
    let most = burst + rate * (last_admitted - first_sent).as_secs_f64() + 1.0;
    let least = burst
        + (rate
            * last_sent
                .saturating_duration_since(first_answered)
                .as_secs_f64())
        .floor()
        - 2.0;
    eprintln!(
        "redis limiter, 3 replicas, rate {rate}/s burst {burst}: admitted {} \
         (per replica {admitted_by:?}), denied {} over {:?} from the first decision \
         to the last; bound [{least}, {most:.1}]",
        admitted.len(),
        decisions.len() - admitted.len(),
        last_sent - first_sent,
    );
    #[allow(clippy::cast_precision_loss)]
    let admitted = admitted.len() as f64;
    assert!(
        admitted <= most && admitted >= least,
        "admitted {admitted}, expected between {least} and {most:.1}"
    );
}

/// After the burst, a denial says exactly how long until the next token,
/// and waiting that long is enough. The key expires once the bucket is full.
#[tokio::test]
async fn retry_after_is_exact() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let limiter = limiter(
        pool(
            &server.url(),
            Duration::from_secs(2),
            Duration::from_secs(1),
        ),
        OutagePolicy::FailClosed,
        1,
    );

    // rate 20, burst 10: the burst, then one token every 50 ms.
    let limit = Limit {
        rate: 20.0,
        burst: 10,
    };
    let start = Instant::now();
    let mut admitted = 0u32;
    let retry_after = loop {
        match limiter.acquire("burst", limit).await.unwrap() {
            Decision::Allow => admitted += 1,
            Decision::Deny { retry_after } => break retry_after,
        }
        assert!(admitted < 100, "never denied");
    };
    let took = start.elapsed().as_secs_f64();
    assert!(
        f64::from(admitted) >= 10.0 && f64::from(admitted) <= 11.0 + 20.0 * took,
        "admitted {admitted} in {took:.3} s"
    );
    assert!(
        retry_after > Duration::ZERO && retry_after <= limit.period(),
        "{retry_after:?}"
    );
    tokio::time::sleep(retry_after).await;
    assert_eq!(
        limiter.acquire("burst", limit).await.unwrap(),
        Decision::Allow
    );

    // rate 1, burst 1: the delay is one second less the time since the
    // admitted call, to the microsecond.
    let limit = Limit {
        rate: 1.0,
        burst: 1,
    };
    let before = Instant::now();
    assert_eq!(
        limiter.acquire("slow", limit).await.unwrap(),
        Decision::Allow
    );
    let key = limiter.redis_key("slow");
    assert_eq!(key, "{t:rl:slow}");
    let ttl = pttl_ms(&server.url(), &key).await;
    assert!(ttl > 0 && ttl <= 1001, "PTTL {ttl}");
    let deny_sent = Instant::now();
    let Decision::Deny { retry_after } = limiter.acquire("slow", limit).await.unwrap() else {
        panic!("the second call within a second must be denied");
    };
    let since = before.elapsed();
    assert!(
        retry_after <= Duration::from_secs(1)
            && retry_after >= Duration::from_secs(1).saturating_sub(since),
        "retry_after {retry_after:?}, {since:?} after the admitted call"
    );
    // Half way, the delay has shrunk by the time between the two
    // decisions, which lies between the pause and the time from sending the
    // first to the answer of the second (to the microsecond the script
    // rounds up to); a pause that overran the delay finds the token there.
    let denied_at = Instant::now();
    tokio::time::sleep(retry_after / 2).await;
    let paused = denied_at.elapsed();
    let again = limiter.acquire("slow", limit).await.unwrap();
    let apart = deny_sent.elapsed();
    match again {
        Decision::Deny { retry_after: rest } => {
            assert!(
                rest <= retry_after.saturating_sub(paused) + Duration::from_micros(1)
                    && rest >= retry_after.saturating_sub(apart),
                "{rest:?} left of {retry_after:?}, {paused:?} to {apart:?} later"
            );
            tokio::time::sleep(rest).await;
            assert_eq!(
                limiter.acquire("slow", limit).await.unwrap(),
                Decision::Allow
            );
        }
        Decision::Allow => assert!(apart >= retry_after, "admitted early, {apart:?} later"),
    }

    // Idle, the bucket fills up and its key vanishes.
    let url = server.url();
    eventually(Duration::from_secs(5), "the idle key to expire", || {
        let (url, key) = (url.clone(), key.clone());
        async move { !exists(&url, &key).await }
    })
    .await;
}

/// Fail-closed: with Redis gone every call is refused, and once the breaker
/// is open (after three failures) the refusal comes from it without asking
/// Redis; Redis decides again soon after it returns. With a Redis that
/// answers nothing (frozen), each call before the breaker opens waits out
/// the call timeout, and none after it waits at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_refuses_while_redis_is_down() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let call_timeout = Duration::from_millis(500);
    let pool = pool(&server.url(), call_timeout, Duration::from_secs(3));
    let limiter = limiter(pool.clone(), OutagePolicy::FailClosed, 1);
    let limit = Limit {
        rate: 100.0,
        burst: 100,
    };
    assert_eq!(limiter.acquire("k", limit).await.unwrap(), Decision::Allow);

    server.kill();
    for call in 1..=10 {
        let result = limiter.acquire("k", limit).await;
        let Err(LimiterError::Unavailable(why)) = &result else {
            panic!("call {call}: {result:?}");
        };
        assert_eq!(why.contains("circuit open"), call > 3, "call {call}: {why}");
    }
    assert!(pool.breaker().is_open());
    assert!(limiter.in_outage());

    server.restart();
    eventually(Duration::from_secs(15), "redis to decide again", || async {
        limiter.acquire("k", limit).await.is_ok()
    })
    .await;
    assert!(!limiter.in_outage());
    assert!(exists(&server.url(), &limiter.redis_key("k")).await);

    let frozen = Frozen::freeze(&server.url()).await;
    for call in 1..=6 {
        let start = Instant::now();
        let result = limiter.acquire("k", limit).await;
        let took = start.elapsed();
        assert!(
            matches!(result, Err(LimiterError::Unavailable(_))),
            "call {call}: {result:?}"
        );
        if call <= 3 {
            assert!(took >= call_timeout, "call {call} took {took:?}");
        } else {
            assert!(
                took < call_timeout / 2,
                "breaker open, yet call {call} took {took:?}"
            );
        }
    }
    frozen.thaw();
    eventually(Duration::from_secs(15), "redis to decide again", || async {
        limiter.acquire("k", limit).await.is_ok()
    })
    .await;
}

/// Degrade: with Redis gone one of three replicas admits its share (a
/// third of the burst), not the whole limit; Redis decides again after it
/// returns.
#[tokio::test]
async fn degrade_admits_this_replicas_share_while_redis_is_down() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let pool = pool(
        &server.url(),
        Duration::from_millis(250),
        Duration::from_secs(2),
    );
    let limiter = limiter(pool.clone(), OutagePolicy::Degrade, 3);
    let limit = Limit {
        rate: 30.0,
        burst: 30,
    };
    assert_eq!(
        limiter.acquire("warm-up", limit).await.unwrap(),
        Decision::Allow
    );

    server.kill();
    // Open the breaker on another key, so the count below is not spread
    // over the call timeouts.
    for _ in 0..20 {
        if pool.breaker().is_open() {
            break;
        }
        limiter.acquire("trip", limit).await.unwrap();
    }
    assert!(pool.breaker().is_open());
    assert!(limiter.in_outage());

    let start = Instant::now();
    let mut admitted = 0u32;
    let mut first_delay = None;
    for _ in 0..30 {
        match limiter.acquire("k", limit).await.unwrap() {
            Decision::Allow => admitted += 1,
            Decision::Deny { retry_after } => {
                first_delay.get_or_insert(retry_after);
            }
        }
    }
    let took = start.elapsed().as_secs_f64();
    eprintln!(
        "degraded, 3 replicas, limit 30/s burst 30: admitted {admitted} of 30 in {took:.3} s"
    );
    // The share is rate 10, burst 10.
    assert!(
        f64::from(admitted) >= 10.0 && f64::from(admitted) <= 11.0 + 10.0 * took,
        "admitted {admitted} in {took:.3} s"
    );
    let first_delay = first_delay.unwrap();
    assert!(
        first_delay <= Duration::from_millis(100),
        "the share's period is 100 ms: {first_delay:?}"
    );

    server.restart();
    eventually(Duration::from_secs(15), "redis to decide again", || async {
        limiter.acquire("probe", limit).await.is_ok() && !limiter.in_outage()
    })
    .await;
    // The whole burst again, from Redis.
    for call in 1..=30 {
        assert_eq!(
            limiter.acquire("after", limit).await.unwrap(),
            Decision::Allow,
            "call {call}"
        );
    }
    assert!(!limiter.in_outage());
    assert!(exists(&server.url(), &limiter.redis_key("after")).await);
}

/// Cluster: keys in different slots, on different masters, each decided
/// exactly.
#[tokio::test]
async fn cluster_decides_each_key_on_its_own_slot() {
    let Some(nodes) = start_cluster() else {
        return;
    };
    let pool = RedisPool::new(RedisSettings {
        url: nodes[0].url(),
        cluster: true,
        call_timeout: Duration::from_secs(2),
        ..RedisSettings::default()
    })
    .unwrap();
    let limiter = limiter(pool, OutagePolicy::FailClosed, 1);
    let limit = Limit {
        rate: 1.0,
        burst: 3,
    };
    let keys = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"];
    for key in keys {
        for call in 1..=3 {
            assert_eq!(
                limiter.acquire(key, limit).await.unwrap(),
                Decision::Allow,
                "{key}, call {call}"
            );
        }
        let Decision::Deny { retry_after } = limiter.acquire(key, limit).await.unwrap() else {
            panic!("{key}: the fourth call within a second must be denied");
        };
        assert!(
            retry_after > Duration::ZERO && retry_after <= Duration::from_secs(1),
            "{key}: {retry_after:?}"
        );
    }

    // Each key lives on exactly one master, and they are not all on one.
    let mut owners = HashSet::new();
    for key in keys {
        let redis_key = limiter.redis_key(key);
        let mut on = Vec::new();
        for node in &nodes {
            if exists(&node.url(), &redis_key).await {
                on.push(node.port);
            }
        }
        assert_eq!(on.len(), 1, "{redis_key} is on {on:?}");
        owners.extend(on);
    }
    eprintln!("cluster: {} keys on {} masters", keys.len(), owners.len());
    assert!(owners.len() >= 2, "all keys on one master: {owners:?}");

    // Calls made at once on one tool go as one script, callers' buckets
    // and all: one slot.
    for key in keys {
        let tool = format!("{key}-together");
        let calls = ["a", "b", "a", "c", "d"].map(|caller| {
            limiter.acquire_call(CallLimits {
                tool: &tool,
                limit: Some(Limit {
                    rate: 0.001,
                    burst: 3,
                }),
                caller: Some((
                    caller,
                    Limit {
                        rate: 0.001,
                        burst: 1,
                    },
                )),
            })
        });
        let refused: Vec<Option<Refused>> = futures::future::join_all(calls)
            .await
            .into_iter()
            .map(|decision| match decision.unwrap() {
                CallDecision::Allow => None,
                CallDecision::Deny { by, .. } => Some(by),
            })
            .collect();
        assert_eq!(
            refused,
            [None, None, Some(Refused::Caller), None, Some(Refused::Tool)],
            "{tool}"
        );
    }
}
