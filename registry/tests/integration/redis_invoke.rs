//! Distributed mode through the real gRPC API, checking what the README
//! promises of it: what agents get while Redis is away (fail-closed and
//! degrade), and idempotency keys.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tonic::{Code, Status};
use tonic_types::StatusExt;
use toolmesh_proto::pb;
use toolmesh_registry::{
    calls::idempotency::{IdempotencyKey, RedisIdempotency},
    calls::ratelimit::redis::OutagePolicy,
    redis_pool::{RedisPool, RedisSettings},
};
use toolmesh_sidecar::sdk;

use crate::{
    common::{redis_probe::raw, redis_server::RedisServer, *},
    redis_replicas::replica_config,
};

/// `slow`: sleeps as long as asked, within `timeout`, counting its runs.
fn slow(timeout: Duration, runs: Arc<AtomicUsize>) -> toolmesh_sidecar::Tool {
    sdk::tool(
        "slow",
        "Sleeps, counting its runs",
        move |args: SleepArgs| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(args.millis)).await;
                Ok(Slept { slept: args.millis })
            }
        },
    )
    .timeout(timeout)
    .build()
}

fn runs(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// The `RetryInfo` delay of a `RESOURCE_EXHAUSTED`; panics without one.
pub(crate) fn retry_delay(status: &Status) -> Duration {
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    status
        .get_error_details()
        .retry_info()
        .and_then(|r| r.retry_delay)
        .unwrap_or_else(|| panic!("RESOURCE_EXHAUSTED without RetryInfo: {status:?}"))
}

/// Fail-closed, Redis away: a call carrying an idempotency key, and a call
/// to a rate-limited tool, get `UNAVAILABLE` and run nowhere; calls to an
/// unlimited tool without a key run as before. Checked before and after the
/// breaker opens; once Redis is back, keys work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_refuses_keyed_and_limited_calls_but_runs_the_rest() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let config = replica_config(&redis.url(), "away", Duration::from_secs(5));
    assert_eq!(config.redis_outage, OutagePolicy::FailClosed, "the default");
    let registry = TestRegistry::start(config).await;
    let (adds, limited_runs) = (Arc::default(), Arc::default());
    let _sidecar = TestSidecar::start(
        &registry.url(),
        "s",
        vec![
            add_tool(Arc::clone(&adds)),
            adder("limited", Arc::clone(&limited_runs))
                .rate_limit(100.0, 100)
                .build(),
        ],
    )
    .await;
    wait_for_instances(&registry, "add", 1).await;
    wait_for_instances(&registry, "limited", 1).await;
    let mut client = registry.client().await;
    let sum = r#"{"a":1,"b":2}"#;
    client.invoke(keyed("add", sum, "before")).await.unwrap();
    client.invoke(invoke("limited", sum)).await.unwrap();
    assert_eq!((runs(&adds), runs(&limited_runs)), (1, 1));

    redis.kill();
    for round in 0..5 {
        let status = client
            .invoke(keyed("add", sum, &format!("away-{round}")))
            .await
            .expect_err("a keyed call cannot be deduplicated without Redis");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains("redis"), "{status:?}");
        let status = client
            .invoke(invoke("limited", sum))
            .await
            .expect_err("fail-closed");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains("rate limiter unavailable"),
            "{status:?}"
        );
        let response = client
            .invoke(invoke("add", sum))
            .await
            .expect("an unlimited call without a key needs no Redis")
            .into_inner();
        assert!(!response.is_error, "{response:?}");
    }
    assert_eq!(
        (runs(&adds), runs(&limited_runs)),
        (1 + 5, 1),
        "only the unkeyed, unlimited calls ran"
    );

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    let back = loop {
        match client.invoke(keyed("add", sum, "back")).await {
            Ok(response) => break response.into_inner(),
            Err(status) if status.code() == Code::Unavailable => {
                assert!(
                    Instant::now() < deadline,
                    "keys never worked again: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("{status:?}"),
        }
    };
    let replayed = client.invoke(keyed("add", sum, "back")).await.unwrap();
    assert_eq!(replayed.into_inner(), back);
    assert_eq!(runs(&adds), 1 + 5 + 1, "the key ran once, then replayed");
}

/// The Redis key of the replica-count set of the catalog under `prefix`.
fn replicas_key(prefix: &str) -> String {
    format!("{{{prefix}}}:replicas")
}

/// Waits until exactly `n` replicas are counted live in Redis, every one of
/// them since this was called (so a replica stopped before cannot be among
/// them, even if its entry has not aged out yet), and each of them has
/// counted again after that: every live replica then holds `n` as the count
/// that degrade mode divides limits by.
async fn wait_for_replica_count(url: &str, prefix: &str, n: usize) {
    let mut conn = raw(url).await;
    let key = replicas_key(prefix);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut since = None;
    let mut exact_at = None;
    loop {
        let (seen, (secs, micros)): (Vec<(String, u64)>, (u64, u64)) = redis::pipe()
            .cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("TIME")
            .query_async(&mut conn)
            .await
            .unwrap();
        let now = secs * 1000 + micros / 1000;
        let since = *since.get_or_insert(now);
        let fresh = seen.len() == n && seen.iter().all(|(_, at)| *at > since);
        match exact_at {
            None if fresh => exact_at = Some(now),
            Some(at) if fresh && seen.iter().all(|(_, counted)| *counted > at) => return,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "never exactly {n} replicas, each counted since {since}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Calls `tool` `calls` times through `registry` while Redis is away;
/// returns how many were admitted and the first denial's delay, checking
/// that every denial is `RESOURCE_EXHAUSTED` with a `RetryInfo`, and how long
/// the run took (from before the first call to after the last).
async fn drain(registry: &TestRegistry, tool: &str, calls: usize) -> (usize, Duration, Duration) {
    let mut client = registry.client().await;
    let started = Instant::now();
    let (mut admitted, mut first_delay) = (0, None);
    for _ in 0..calls {
        match client.invoke(invoke(tool, r#"{"a":1,"b":1}"#)).await {
            Ok(_) => admitted += 1,
            Err(status) => {
                let delay = retry_delay(&status);
                first_delay.get_or_insert(delay);
            }
        }
    }
    let first_delay = first_delay.expect("some calls were denied");
    (admitted, first_delay, started.elapsed())
}

/// Degrade mode end to end: with Redis away each replica enforces its share
/// of a limit, rate / n and burst ceil(burst / n), where n is the live
/// replica count it last saw: a third with three replicas live, a half
/// with two. The denials' `RetryInfo` is the share's period, not the
/// limit's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degrade_enforces_each_replicas_share_of_the_live_count() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let prefix = "degrade";
    let mut config = replica_config(&redis.url(), prefix, Duration::from_secs(5));
    config.redis_outage = OutagePolicy::Degrade;
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestRegistry::start(config.clone()).await);
    }
    // Slow enough that no token comes back during a run: a run admits
    // exactly the share's burst.
    let (rate, burst) = (0.3, 30);
    let tools =
        ["third", "half"].map(|name| adder(name, Arc::default()).rate_limit(rate, burst).build());
    let _sidecar = TestSidecar::start(&replicas[0].url(), "s", tools.into()).await;
    for replica in &replicas {
        wait_for_instances(replica, "half", 1).await;
    }

    // Three live replicas: each admits a third of the burst, one token per
    // 3 / rate = 10 s after that.
    wait_for_replica_count(&redis.url(), prefix, 3).await;
    redis.kill();
    for replica in &replicas[..2] {
        let (admitted, delay, took) = drain(replica, "third", burst as usize).await;
        let period = Duration::from_secs_f64(3.0 / rate);
        eprintln!(
            "degrade, 3 live replicas, limit {rate}/s burst {burst}: admitted {admitted}, \
             then retry in {delay:?} (share period {period:?}), in {took:?}"
        );
        assert_eq!(admitted, 10, "ceil({burst} / 3)");
        assert!(
            delay <= period && delay >= period.saturating_sub(took),
            "{delay:?}"
        );
    }

    // Two live replicas: half the burst, one token per 2 / rate.
    redis.restart();
    replicas.pop().expect("three").stop().await;
    wait_for_replica_count(&redis.url(), prefix, 2).await;
    redis.kill();
    let (admitted, delay, took) = drain(&replicas[0], "half", burst as usize).await;
    let period = Duration::from_secs_f64(2.0 / rate);
    eprintln!(
        "degrade, 2 live replicas: admitted {admitted}, then retry in {delay:?} \
         (share period {period:?}), in {took:?}"
    );
    assert_eq!(admitted, 15, "ceil({burst} / 2)");
    assert!(
        delay <= period && delay >= period.saturating_sub(took),
        "{delay:?}"
    );
}

/// Whether `key`'s idempotency record exists in Redis.
async fn record_exists(url: &str, keys: &RedisIdempotency, tool: &str, key: &str) -> bool {
    let name = keys.redis_key(&IdempotencyKey {
        caller: String::new(),
        tool: tool.into(),
        key: key.into(),
    });
    redis::cmd("EXISTS")
        .arg(name)
        .query_async::<i64>(&mut raw(url).await)
        .await
        .unwrap()
        == 1
}

/// Idempotency keys through `Invoke` with two replicas sharing Redis, for
/// what `faults.rs` does not cover: a status is an outcome, stored and
/// replayed on another replica; a key whose call the rate limit refused, or
/// that never reached a sidecar, is freed, so its repeat runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_through_invoke_over_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let prefix = "keys";
    let config = replica_config(&redis.url(), prefix, Duration::from_secs(5));
    let replicas = [
        TestRegistry::start(config.clone()).await,
        TestRegistry::start(config).await,
    ];
    let keys = RedisIdempotency::new(
        RedisPool::new(RedisSettings::default()).unwrap(),
        prefix,
        Duration::ZERO,
    );
    let (slow_runs, limited_runs, ghost_runs) = (Arc::default(), Arc::default(), Arc::default());
    let _sidecar = TestSidecar::start(
        &replicas[0].url(),
        "s",
        vec![
            slow(Duration::from_millis(500), Arc::clone(&slow_runs)),
            adder("limited", Arc::clone(&limited_runs))
                .rate_limit(1.0, 1)
                .build(),
        ],
    )
    .await;
    for replica in &replicas {
        wait_for_instances(replica, "slow", 1).await;
        wait_for_instances(replica, "limited", 1).await;
    }
    let (mut first, mut second) = (replicas[0].client().await, replicas[1].client().await);

    // A status is an outcome: DEADLINE_EXCEEDED, stored and replayed.
    let too_long = r#"{"millis":5000}"#;
    let status = first
        .invoke(keyed("slow", too_long, "status"))
        .await
        .expect_err("over the tool's timeout");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert!(record_exists(&redis.url(), &keys, "slow", "status").await);
    let replayed = second
        .invoke(keyed("slow", too_long, "status"))
        .await
        .expect_err("the stored status");
    assert_eq!(
        (replayed.code(), replayed.message()),
        (status.code(), status.message())
    );
    assert_eq!(runs(&slow_runs), 1, "replayed, not run again");

    // Refused by the rate limit: the key is freed; its repeat runs once
    // the token is back, and is replayed after that.
    let sum = r#"{"a":2,"b":3}"#;
    first.invoke(invoke("limited", sum)).await.unwrap();
    let status = second
        .invoke(keyed("limited", sum, "limited"))
        .await
        .expect_err("no token left");
    let delay = retry_delay(&status);
    assert!(!record_exists(&redis.url(), &keys, "limited", "limited").await);
    tokio::time::sleep(delay).await;
    let ran = first
        .invoke(keyed("limited", sum, "limited"))
        .await
        .expect("the repeat runs")
        .into_inner();
    let replayed = second
        .invoke(keyed("limited", sum, "limited"))
        .await
        .expect("replayed, with no token needed")
        .into_inner();
    assert_eq!(replayed, ran);
    assert_eq!(runs(&limited_runs), 2, "the unkeyed call and the repeat");

    // Never reached a sidecar: the only instance's endpoint refuses
    // connections (nothing listens on 127.0.0.2 in these tests).
    let real = TestSidecar::start(
        &replicas[0].url(),
        "real",
        vec![adder("ghost", Arc::clone(&ghost_runs)).build()],
    )
    .await;
    wait_for_instances(&replicas[1], "ghost", 1).await;
    let descriptor = second
        .get_tool(pb::GetToolRequest {
            name: "ghost".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .descriptor;
    real.stop().await;
    wait_for_instances(&replicas[1], "ghost", 0).await;
    let dead = std::net::TcpListener::bind("127.0.0.2:0")
        .and_then(|l| l.local_addr())
        .unwrap();
    let mut registration = replicas[0].registration().await;
    let lease = registration
        .announce(pb::AnnounceRequest {
            instance_id: "dead".into(),
            endpoint: format!("http://{dead}"),
            tools: descriptor.into_iter().collect(),
            execute_key: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .lease_id;
    wait_for_instances(&replicas[1], "ghost", 1).await;
    let status = second
        .invoke(keyed("ghost", sum, "ghost"))
        .await
        .expect_err("no instance answers");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!record_exists(&redis.url(), &keys, "ghost", "ghost").await);
    registration
        .withdraw(pb::WithdrawRequest { lease_id: lease })
        .await
        .unwrap();
    wait_for_instances(&replicas[1], "ghost", 0).await;
    let _real = TestSidecar::start(
        &replicas[0].url(),
        "real",
        vec![adder("ghost", Arc::clone(&ghost_runs)).build()],
    )
    .await;
    wait_for_instances(&replicas[1], "ghost", 1).await;
    let ran = second
        .invoke(keyed("ghost", sum, "ghost"))
        .await
        .expect("the repeat runs")
        .into_inner();
    assert_eq!(ran.instance_id, "real");
    assert_eq!(runs(&ghost_runs), 1);
    assert!(record_exists(&redis.url(), &keys, "ghost", "ghost").await);
}

/// Redis restarts empty between two presence checks (the lease TTL is long,
/// so the checks are a second apart, and nothing else calls Redis): the
/// registry's change channel drops, and it writes its leases back before
/// trusting Redis again, so neither the resync on resubscribe nor the
/// periodic one (every 5 s) empties its catalog.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_restarts_empty_between_checks_does_not_empty_the_catalog() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let config = replica_config(&redis.url(), "blink", Duration::from_secs(30));
    let registry = TestRegistry::start(config).await;
    let adds = Arc::default();
    let _sidecar =
        TestSidecar::start(&registry.url(), "s", vec![add_tool(Arc::clone(&adds))]).await;
    wait_for_instances(&registry, "add", 1).await;
    let mut client = registry.client().await;

    redis.restart();
    stays(Duration::from_secs(12), "add stays callable", || {
        let mut client = client.clone();
        async move {
            client
                .invoke(invoke("add", r#"{"a":1,"b":2}"#))
                .await
                .is_ok()
        }
    })
    .await;
    let listed = client
        .list_tools(pb::ListToolsRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.tools.len(), 1, "{listed:?}");
}
