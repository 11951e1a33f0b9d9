//! `RedisIdempotency` against a real `redis-server` on loopback: one run per
//! key across replicas, replays, released and abandoned keys, expiry, and
//! an outage. The race of one key is one scenario run on both engines
//! ([`racing_claims_run_once`]).

use std::{sync::Arc, time::Duration};

use tokio::time::Instant;
use toolmesh_registry::{
    calls::idempotency::{
        Claim, IdempotencyError, IdempotencyKey, IdempotencyStore, MemoryIdempotency,
        RedisIdempotency, StoredOutcome, Ticket,
    },
    redis_pool::{RedisPool, RedisSettings},
};

use crate::{
    common::redis_probe::{command_calls, raw, reset_stats},
    common::{
        eventually,
        redis_server::{RedisServer, start_cluster},
    },
};

const PREFIX: &str = "t";
const HOLD: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(10);
const DAY: Duration = Duration::from_secs(86_400);

/// One replica's store, with its own pool.
fn store(url: &str, retention: Duration) -> RedisIdempotency {
    store_with(url, false, retention)
}

fn store_with(url: &str, cluster: bool, retention: Duration) -> RedisIdempotency {
    let pool = RedisPool::new(RedisSettings {
        url: url.to_owned(),
        cluster,
        ..RedisSettings::default()
    })
    .unwrap();
    RedisIdempotency::new(pool, PREFIX, retention)
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey {
        caller: "alice".into(),
        tool: "add".into(),
        key: name.into(),
    }
}

fn outcome(n: u32) -> StoredOutcome {
    StoredOutcome::Response {
        result_json: format!("{{\"sum\":{n}}}"),
        is_error: n == 13,
        instance_id: "s1".into(),
        attempts: 2,
        content_json: String::new(),
    }
}

async fn claim(
    store: &RedisIdempotency,
    name: &str,
    fp: &str,
    hold: Duration,
    wait: Duration,
) -> Result<Claim, IdempotencyError> {
    store
        .claim(&key(name), fp, hold, Instant::now() + wait)
        .await
}

async fn run(store: &RedisIdempotency, name: &str, fp: &str) -> Ticket {
    match claim(store, name, fp, HOLD, Duration::ZERO).await {
        Ok(Claim::Run(ticket)) => ticket,
        other => panic!("expected Run, got {other:?}"),
    }
}

async fn replay(store: &RedisIdempotency, name: &str, fp: &str) -> StoredOutcome {
    match claim(store, name, fp, HOLD, Duration::ZERO).await {
        Ok(Claim::Replay(outcome)) => outcome,
        other => panic!("expected Replay, got {other:?}"),
    }
}

async fn pttl_ms(url: &str, key: &str) -> i64 {
    let mut conn = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    redis::cmd("PTTL")
        .arg(key)
        .query_async::<i64>(&mut conn)
        .await
        .unwrap()
}

#[tokio::test]
async fn runs_once_then_replays_on_every_replica() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (store(&redis.url(), DAY), store(&redis.url(), DAY));
    let ticket = run(&a, "k", "fp1").await;
    let in_progress = pttl_ms(&redis.url(), &a.redis_key(&key("k"))).await;
    assert!(
        in_progress > 29_000 && in_progress <= 30_000,
        "{in_progress}"
    );
    let other = claim(&b, "k", "fp2", HOLD, WAIT).await;
    assert!(matches!(other, Ok(Claim::ArgumentsDiffer)), "{other:?}");
    let busy = claim(&b, "k", "fp1", HOLD, Duration::from_millis(100)).await;
    assert!(
        matches!(busy, Err(IdempotencyError::WaitTimedOut)),
        "{busy:?}"
    );

    ticket.complete(outcome(13)).await;
    assert_eq!(replay(&b, "k", "fp1").await, outcome(13));
    assert_eq!(replay(&a, "k", "fp1").await, outcome(13));
    let other = claim(&a, "k", "fp2", HOLD, WAIT).await;
    assert!(matches!(other, Ok(Claim::ArgumentsDiffer)), "{other:?}");
    let kept = pttl_ms(&redis.url(), &a.redis_key(&key("k"))).await;
    assert!(kept > 86_390_000 && kept <= 86_400_000, "{kept}");

    // A status is an outcome too.
    let status = StoredOutcome::Status {
        code: tonic::Code::DeadlineExceeded,
        message: "deadline of 1s exceeded".into(),
    };
    run(&a, "s", "fp").await.complete(status.clone()).await;
    assert_eq!(replay(&b, "s", "fp").await, status);
}

/// Twenty claims of one key, spread over `replicas` (the same store twice
/// for an engine of one process): exactly one runs, holding the key for
/// `runs_for`; every other waits and replays its outcome.
async fn racing_claims_run_once<S: IdempotencyStore + 'static>(
    replicas: [Arc<S>; 2],
    runs_for: Duration,
) {
    let mut tasks = Vec::new();
    for i in 0..20 {
        let store = replicas[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let claimed = store
                .claim(&key("race"), "fp", HOLD, Instant::now() + WAIT)
                .await;
            match claimed.unwrap() {
                Claim::Run(ticket) => {
                    tokio::time::sleep(runs_for).await;
                    ticket.complete(outcome(42)).await;
                    None
                }
                Claim::Replay(outcome) => Some(outcome),
                Claim::ArgumentsDiffer => panic!("same arguments"),
            }
        }));
    }
    let mut runs = 0;
    for task in tasks {
        match task.await.unwrap() {
            None => runs += 1,
            Some(replayed) => assert_eq!(replayed, outcome(42)),
        }
    }
    assert_eq!(runs, 1, "exactly one of 20 racing claims runs");
}

#[tokio::test(start_paused = true)]
async fn racing_claims_run_a_key_once_in_memory() {
    let store = Arc::new(MemoryIdempotency::new(Duration::from_secs(3600), 100));
    racing_claims_run_once([store.clone(), store], Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_racing_run_a_key_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas = [
        Arc::new(store(&redis.url(), DAY)),
        Arc::new(store(&redis.url(), DAY)),
    ];
    racing_claims_run_once(replicas, Duration::from_millis(300)).await;
}

/// Released while another replica waits on it, the key goes to the
/// waiter at once, long before the hold would have freed it; dropped, it is
/// freed in the background.
#[tokio::test]
async fn release_and_drop_free_the_key() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (
        Arc::new(store(&redis.url(), DAY)),
        Arc::new(store(&redis.url(), DAY)),
    );
    let ticket = run(&a, "k", "fp").await;
    let mut admin = raw(&redis.url()).await;
    reset_stats(&mut admin).await;
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { claim(&b, "k", "fp", HOLD, WAIT).await })
    };
    // Each try of the waiter's is one `SET NX` that finds the key held.
    eventually(Duration::from_secs(5), "the waiter to try twice", || {
        let mut admin = admin.clone();
        async move { command_calls(&mut admin).await.get("set") >= Some(&2) }
    })
    .await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the key is held"
    );
    let released = Instant::now();
    ticket.release().await;
    let Ok(Claim::Run(ticket)) = waiter.await.unwrap() else {
        panic!("the waiter runs once the key is free");
    };
    let took = released.elapsed();
    assert!(
        took < HOLD / 10,
        "{took:?} after the release (hold {HOLD:?})"
    );

    // Dropped (the caller went away): freed in the background.
    drop(ticket);
    let record = a.redis_key(&key("k"));
    eventually(
        Duration::from_secs(5),
        "the dropped claim's key is freed",
        || {
            let url = redis.url();
            let record = record.clone();
            async move { pttl_ms(&url, &record).await == -2 }
        },
    )
    .await;
    let _ticket = run(&a, "k", "other arguments").await;
}

/// A claim whose replica vanished frees its key once its hold has passed
/// (measured from before the claim, so never sooner), and soon after.
#[tokio::test]
async fn a_vanished_claim_frees_its_key_after_hold_for() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (store(&redis.url(), DAY), store(&redis.url(), DAY));
    let hold = Duration::from_secs(1);
    let before = Instant::now();
    let Ok(Claim::Run(lost)) = claim(&a, "k", "fp", hold, Duration::ZERO).await else {
        panic!("first claim runs");
    };
    // The replica holding it crashes: no release, no completion.
    std::mem::forget(lost);
    let started = Instant::now();
    let Ok(Claim::Run(ticket)) = claim(&b, "k", "fp", HOLD, WAIT).await else {
        panic!("the key is free after its hold");
    };
    let (since_claim, waited) = (before.elapsed(), started.elapsed());
    assert!(since_claim >= hold, "freed {since_claim:?} after the claim");
    assert!(waited < hold * 3, "{waited:?} for a hold of {hold:?}");
    ticket.complete(outcome(1)).await;
    assert_eq!(replay(&a, "k", "fp").await, outcome(1));
}

#[tokio::test]
async fn an_outcome_after_the_hold_is_lost_does_not_overwrite() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let (a, b) = (store(&redis.url(), DAY), store(&redis.url(), DAY));
    let Ok(Claim::Run(late)) = claim(&a, "k", "fp", Duration::from_millis(200), WAIT).await else {
        panic!("first claim runs");
    };
    tokio::time::sleep(Duration::from_millis(400)).await;
    let second = run(&b, "k", "fp").await;
    late.complete(outcome(1)).await;
    second.complete(outcome(2)).await;
    assert_eq!(replay(&a, "k", "fp").await, outcome(2));
}

/// An outcome is kept for the retention, measured on Redis's clock, and
/// not beyond: the key runs again once it is gone.
#[tokio::test]
async fn outcomes_expire_after_the_retention() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let retention = Duration::from_secs(2);
    let store = store(&redis.url(), retention);
    let ticket = run(&store, "k", "fp").await;
    let completing = Instant::now();
    ticket.complete(outcome(1)).await;
    assert_eq!(replay(&store, "k", "fp").await, outcome(1));
    let record = store.redis_key(&key("k"));
    let kept = Duration::from_millis(pttl_ms(&redis.url(), &record).await.try_into().unwrap());
    let since = completing.elapsed();
    assert!(
        kept <= retention && kept + Duration::from_millis(1) >= retention.saturating_sub(since),
        "PTTL {kept:?}, {since:?} after completing, retention {retention:?}"
    );
    eventually(retention * 2, "the outcome to expire", || {
        let (url, record) = (redis.url(), record.clone());
        async move { pttl_ms(&url, &record).await == -2 }
    })
    .await;
    // Redis's millisecond clock may read up to 1 ms behind when it sets the key.
    let gone = completing.elapsed() + Duration::from_millis(1);
    assert!(gone >= retention, "gone {gone:?} after completing");
    let _ticket = run(&store, "k", "fp").await;
}

#[tokio::test]
async fn redis_down_is_unavailable_at_once() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let store = store(&redis.url(), DAY);
    run(&store, "k", "fp").await.complete(outcome(1)).await;
    redis.kill();
    for _ in 0..5 {
        let started = Instant::now();
        let result = claim(&store, "k", "fp", HOLD, WAIT).await;
        assert!(
            matches!(result, Err(IdempotencyError::Unavailable(_))),
            "{result:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
    }
    // Back (empty): claims work again once the breaker lets them through.
    redis.restart();
    eventually(Duration::from_secs(10), "claims work again", || async {
        matches!(
            claim(&store, "k", "fp", HOLD, Duration::ZERO).await,
            Ok(Claim::Run(_))
        )
    })
    .await;
}

#[tokio::test]
async fn cluster_runs_once_and_replays() {
    let Some(nodes) = start_cluster() else {
        return;
    };
    let url = nodes[0].url();
    let (a, b) = (
        store_with(&url, true, DAY),
        store_with(&nodes[1].url(), true, DAY),
    );
    for name in ["k1", "k2", "k3", "k4"] {
        let ticket = run(&a, name, "fp").await;
        let other = claim(&b, name, "other", HOLD, WAIT).await;
        assert!(matches!(other, Ok(Claim::ArgumentsDiffer)), "{other:?}");
        ticket.complete(outcome(7)).await;
        assert_eq!(replay(&b, name, "fp").await, outcome(7));
    }
}
