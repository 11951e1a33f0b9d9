//! "A rate-limited call costs exactly one Redis round trip; an unlimited
//! one costs none", counted with `INFO commandstats` with the replica's
//! background work taken out.

use std::sync::Arc;
use std::time::Duration;

use crate::{
    common::{
        redis_probe::{CommandCalls, command_calls, raw, reset_stats},
        *,
    },
    redis_invoke::retry_delay,
    redis_replicas::{limited_tool, replica_config},
};

/// What is left of `calls` once a replica's background work is taken out,
/// with `tools` tools and `leases` leases in the catalog (and this test's
/// own `CONFIG RESETSTAT` and `INFO`). Each background job is recognised by
/// a command only it issues:
///
/// | job | marker | commands |
/// |---|---|---|
/// | `presence.lua` | `zcard` | evalsha, time, zadd, zremrangebyscore, zcard |
/// | `sweep.lua`, nothing due | `zrangebyscore` | evalsha, time, zrangebyscore |
/// | `heartbeat.lua`, live lease | `exists` | evalsha, exists, hget, time, zadd |
/// | resync | `smembers` | smembers, zrange, get + hgetall per tool, hgetall per lease |
/// | task janitor, no live task | `zscan` | zscan, zcount (the calls held for approval) |
fn residual(mut calls: CommandCalls, tools: i64, leases: i64) -> CommandCalls {
    let count = |calls: &CommandCalls, name: &str| calls.get(name).copied().unwrap_or(0);
    // The task janitor's pass is two commands, a ZSCAN and the ZCOUNT of
    // the calls held for approval, which a window may cut between: each
    // stands for itself, and they pair up to one.
    let (scans, counts) = (count(&calls, "zscan"), count(&calls, "zcount"));
    assert!(
        (scans - counts).abs() <= 1,
        "ZCOUNT only in the task janitor's passes: {calls:?}"
    );
    let jobs: [(&str, Vec<(&str, i64)>); 6] = [
        (
            "zcard",
            vec![
                ("evalsha", 1),
                ("time", 1),
                ("zadd", 1),
                ("zremrangebyscore", 1),
                ("zcard", 1),
            ],
        ),
        (
            "zrangebyscore",
            vec![("evalsha", 1), ("time", 1), ("zrangebyscore", 1)],
        ),
        (
            "exists",
            vec![
                ("evalsha", 1),
                ("exists", 1),
                ("hget", 1),
                ("time", 1),
                ("zadd", 1),
            ],
        ),
        (
            "smembers",
            vec![
                ("smembers", 1),
                ("zrange", 1),
                ("get", tools),
                ("hgetall", tools + leases),
            ],
        ),
        ("zscan", vec![("zscan", 1)]),
        ("zcount", vec![("zcount", 1)]),
    ];
    for (marker, commands) in jobs {
        let times = count(&calls, marker);
        for (name, per_job) in commands {
            *calls.entry(name.to_owned()).or_default() -= times * per_job;
        }
    }
    calls.remove("config|resetstat");
    calls.remove("info");
    calls.retain(|_, n| *n != 0);
    calls
}

/// The counts since the last reset, once they include a maintenance tick
/// (so that every window has background work to take out).
async fn after_a_tick(admin: &mut redis::aio::MultiplexedConnection) -> CommandCalls {
    eventually(Duration::from_secs(5), "a presence and a sweep", || {
        let mut admin = admin.clone();
        async move {
            let calls = command_calls(&mut admin).await;
            calls.contains_key("zcard") && calls.contains_key("zrangebyscore")
        }
    })
    .await;
    command_calls(admin).await
}

/// "A rate-limited call costs exactly one Redis round trip; an unlimited
/// one costs none": `INFO commandstats` around N calls on one replica, less
/// the replica's background work, holds exactly one `EVALSHA` of the GCRA
/// script per limited call (its `TIME`, `GET`, and `SET` when admitted,
/// inside it), admitted or denied alike, and nothing for unlimited calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limited_call_costs_one_round_trip_and_an_unlimited_one_none() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // Heartbeats every 10 s, presence and sweep every second.
    let config = replica_config(&redis.url(), "trips", Duration::from_secs(30));
    let registry = TestRegistry::start(config).await;
    let adds = Arc::default();
    let burst = 20;
    let _sidecar = TestSidecar::start(
        &registry.url(),
        "s",
        vec![add_tool(adds), limited_tool(0.001, burst)],
    )
    .await;
    wait_for_instances(&registry, "add", 1).await;
    wait_for_instances(&registry, "limited", 1).await;
    let mut client = registry.client().await;
    let sum = r#"{"a":1,"b":2}"#;
    // Loads the script, so that the counts below hold EVALSHA only.
    client.invoke(invoke("limited", sum)).await.unwrap();

    let n = 40;
    let mut admin = raw(&redis.url()).await;
    reset_stats(&mut admin).await;
    for _ in 0..n {
        client.invoke(invoke("add", sum)).await.unwrap();
    }
    let unlimited = after_a_tick(&mut admin).await;

    reset_stats(&mut admin).await;
    let mut admitted = 0;
    for _ in 0..n {
        match client.invoke(invoke("limited", sum)).await {
            Ok(_) => admitted += 1,
            Err(status) => {
                retry_delay(&status);
            }
        }
    }
    let limited = after_a_tick(&mut admin).await;
    eprintln!(
        "commands around {n} unlimited calls: {unlimited:?}\n\
         commands around {n} limited calls ({admitted} admitted): {limited:?}"
    );
    assert_eq!(
        admitted,
        i64::from(burst) - 1,
        "the burst, less the warm-up"
    );
    assert_eq!(
        residual(unlimited, 2, 1),
        CommandCalls::new(),
        "unlimited calls cost no Redis command"
    );
    let expected: CommandCalls = [("evalsha", n), ("time", n), ("get", n), ("set", admitted)]
        .into_iter()
        .map(|(name, calls)| (name.to_owned(), calls))
        .collect();
    assert_eq!(
        residual(limited, 2, 1),
        expected,
        "one EVALSHA per limited call, and nothing else"
    );
}

/// A tool with both limits, each caller's and the tool's: still one
/// `EVALSHA` per call. The caller's bucket is read on every call, the
/// tool's only on calls the caller's lets through, and a token is written
/// to each bucket that gave one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_limits_of_a_call_cost_one_round_trip() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let config = replica_config(&redis.url(), "both", Duration::from_secs(30));
    let registry = TestRegistry::start(config).await;
    let caller_burst = 5;
    let mut tool = limited_tool(0.001, 20);
    let mut descriptor = tool.descriptor().clone();
    descriptor.per_caller_rate_limit = Some(toolmesh_proto::pb::RateLimit {
        rate: 0.001,
        burst: caller_burst,
    });
    tool = toolmesh_sidecar::Tool::new(descriptor, tool.backend().clone());
    let _sidecar = TestSidecar::start(&registry.url(), "s", vec![tool]).await;
    wait_for_instances(&registry, "limited", 1).await;
    let mut client = registry.client().await;
    let sum = r#"{"a":1,"b":2}"#;
    client.invoke(invoke("limited", sum)).await.unwrap();

    let n = 12;
    let mut admin = raw(&redis.url()).await;
    reset_stats(&mut admin).await;
    let mut admitted = 0;
    for _ in 0..n {
        match client.invoke(invoke("limited", sum)).await {
            Ok(_) => admitted += 1,
            Err(status) => {
                retry_delay(&status);
                assert!(
                    status.message().starts_with("caller \"\"'s rate limit"),
                    "{}",
                    status.message()
                );
            }
        }
    }
    let calls = after_a_tick(&mut admin).await;
    assert_eq!(
        admitted,
        i64::from(caller_burst) - 1,
        "the caller's burst, less the warm-up"
    );
    let expected: CommandCalls = [
        ("evalsha", n),
        ("time", n),
        ("get", n + admitted),
        ("set", 2 * admitted),
    ]
    .into_iter()
    .map(|(name, calls)| (name.to_owned(), calls))
    .collect();
    assert_eq!(residual(calls, 1, 1), expected, "one EVALSHA per call");
}
