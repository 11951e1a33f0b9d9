//! Distributed mode end to end: three registry replicas sharing one real
//! `redis-server`, sidecars heartbeating to different replicas, agents
//! calling through all three.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tonic::Code;
use tonic_types::StatusExt;
use toolmesh_proto::pb::{self, tool_event::Kind};
use toolmesh_registry::{Config, ratelimit::redis::OutagePolicy};

use crate::common::{redis_server::RedisServer, *};

fn replica_config(redis: &str, prefix: &str, ttl: Duration) -> Config {
    Config {
        redis: Some(redis.to_owned()),
        redis_prefix: prefix.to_owned(),
        lease_ttl: ttl,
        shutdown_grace: Duration::from_secs(2),
        redis_timeout: Duration::from_millis(250),
        ..Config::default()
    }
}

async fn replicas(config: &Config) -> Vec<TestRegistry> {
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestRegistry::start(config.clone()).await);
    }
    replicas
}

fn invoke(tool: &str, arguments: &str) -> pb::InvokeRequest {
    pb::InvokeRequest {
        tool: tool.into(),
        arguments_json: arguments.into(),
        idempotency_key: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_every_sidecar_and_sees_every_change() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_millis(1500);
    let replicas = replicas(&replica_config(&redis.url(), "watch", ttl)).await;

    let mut events = replicas[0]
        .client()
        .await
        .watch_tools(pb::WatchToolsRequest {})
        .await
        .expect("watch")
        .into_inner();
    let mut next = async || {
        let event = tokio::time::timeout(Duration::from_secs(20), events.message())
            .await
            .expect("an event in time")
            .expect("stream ok")
            .expect("stream goes on");
        let kind = event.kind();
        (
            kind,
            event
                .tool
                .and_then(|t| t.descriptor)
                .map(|d| d.name)
                .unwrap_or_default(),
        )
    };
    assert_eq!(next().await, (Kind::Synced, String::new()));

    // Announced to replica 3, seen on replica 1.
    let calls = Arc::new(AtomicUsize::new(0));
    let a = TestSidecar::start(&replicas[2].url(), "a", vec![add_tool(calls.clone())]).await;
    assert_eq!(next().await, (Kind::Added, "add".into()));

    // A second instance heartbeating to replica 2.
    let _b = TestSidecar::start(&replicas[1].url(), "b", vec![add_tool(calls.clone())]).await;
    assert_eq!(next().await, (Kind::Updated, "add".into()));
    for replica in &replicas {
        wait_for_instances(replica, "add", 2).await;
    }

    // Agents call through all three; both instances run calls.
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..30 {
        let mut client = replicas[i % 3].client().await;
        let response = client
            .invoke(invoke("add", r#"{"a":1,"b":2}"#))
            .await
            .expect("invoke")
            .into_inner();
        seen.insert(response.instance_id);
    }
    assert_eq!(seen.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(calls.load(Ordering::SeqCst), 30);

    // A killed sidecar's lease expires in Redis; no replica got a withdraw,
    // yet replica 1 reports the change.
    a.kill();
    let killed = Instant::now();
    assert_eq!(next().await, (Kind::Updated, "add".into()));
    eprintln!(
        "expiry of a killed sidecar seen on another replica after {:?} (ttl {ttl:?})",
        killed.elapsed()
    );
    for replica in &replicas {
        wait_for_instances(replica, "add", 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_holds_across_all_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas = replicas(&replica_config(
        &redis.url(),
        "limit",
        Duration::from_secs(3),
    ))
    .await;
    // r·T + b = 220: the ±1% band (±2.2 calls) is wider than the one token
    // GCRA's floor and the first call's latency can cost.
    let (rate, burst) = (50.0, 20u32);
    let tool = limited_tool(rate, burst);
    let _sidecar = TestSidecar::start(&replicas[0].url(), "s", vec![tool]).await;
    for replica in &replicas {
        wait_for_instances(replica, "limited", 1).await;
    }

    let seconds = 4.0;
    let admitted = Arc::new(AtomicUsize::new(0));
    let denied = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let stop_at = started + Duration::from_secs_f64(seconds);
    let mut agents = Vec::new();
    for i in 0..9 {
        let mut client = replicas[i % 3].client().await;
        let (admitted, denied) = (admitted.clone(), denied.clone());
        agents.push(tokio::spawn(async move {
            while Instant::now() < stop_at {
                match client.invoke(invoke("limited", r#"{"a":1,"b":1}"#)).await {
                    Ok(_) => {
                        admitted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(status) => {
                        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                        let delay = status
                            .get_error_details()
                            .retry_info()
                            .and_then(|r| r.retry_delay);
                        assert!(
                            delay.is_some_and(|d| d <= Duration::from_millis(50)),
                            "{delay:?}"
                        );
                        denied.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }));
    }
    for agent in agents {
        agent.await.expect("agent");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let admitted = admitted.load(Ordering::SeqCst) as f64;
    // GCRA admits exactly b + floor(r * t) over a window t measured on
    // Redis's clock, from the first decision to the last; t lies within our
    // wall-clock window `elapsed` (which overshoots T by the last call).
    let expected = f64::from(burst) + rate * seconds;
    let most = (f64::from(burst) + rate * elapsed) * 1.01;
    eprintln!(
        "three replicas, r={rate}/s b={burst} for {elapsed:.3}s: admitted {admitted}, denied {}, r*T+b = {expected}, bound [{:.1}, {most:.1}]",
        denied.load(Ordering::SeqCst),
        expected * 0.99
    );
    assert!(admitted <= most, "admitted {admitted} > {most}");
    assert!(
        admitted >= expected * 0.99,
        "admitted {admitted} < 99% of {expected}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_survived_and_the_catalog_converges() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_millis(1500);
    let mut config = replica_config(&redis.url(), "outage", ttl);
    config.redis_outage = OutagePolicy::FailClosed;
    let replicas = replicas(&config).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let limited = limited_tool(100.0, 100);
    let _a = TestSidecar::start(
        &replicas[0].url(),
        "a",
        vec![add_tool(calls.clone()), limited],
    )
    .await;
    let _b = TestSidecar::start(&replicas[2].url(), "b", vec![add_tool(calls.clone())]).await;
    for replica in &replicas {
        wait_for_instances(replica, "add", 2).await;
        wait_for_instances(replica, "limited", 1).await;
    }

    redis.kill();
    // Longer than a TTL: only the outage could take leases away now.
    tokio::time::sleep(ttl * 2).await;
    for replica in &replicas {
        let mut client = replica.client().await;
        let names = tool_names(&mut client).await;
        assert_eq!(
            names,
            ["add", "limited"],
            "the catalog keeps serving from the local view"
        );
        let response = client
            .invoke(invoke("add", r#"{"a":2,"b":2}"#))
            .await
            .expect("unlimited tools still run");
        assert!(!response.into_inner().is_error);
        let status = client
            .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
            .await
            .expect_err("fail-closed");
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    }

    // Redis returns empty; the replicas write the leases back.
    redis.restart();
    let back = Instant::now();
    for replica in &replicas {
        wait_for_instances(replica, "add", 2).await;
        wait_for_instances(replica, "limited", 1).await;
    }
    // A replica started now knows only what Redis holds: the leases are
    // back in Redis, not just in the old replicas' views.
    let fresh = TestRegistry::start(config.clone()).await;
    wait_for_instances(&fresh, "add", 2).await;
    eprintln!(
        "catalog back in redis {:?} after redis returned",
        back.elapsed()
    );
    let mut client = replicas[1].client().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.invoke(invoke("limited", r#"{"a":1,"b":1}"#)).await {
            Ok(_) => break,
            Err(status) => {
                assert!(
                    Instant::now() < deadline,
                    "the limiter never came back: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    eprintln!(
        "rate limiter back {:?} after redis returned (heartbeat every {:?})",
        back.elapsed(),
        ttl / 3
    );
    // Nothing expires afterwards: the written-back leases are heartbeated.
    tokio::time::sleep(ttl * 2).await;
    for replica in &replicas {
        wait_for_instances(replica, "add", 2).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_work_on_a_redis_cluster() {
    let Some(cluster) = crate::common::redis_server::start_cluster() else {
        return;
    };
    let mut config = replica_config(&cluster[0].url(), "cluster", Duration::from_secs(3));
    config.redis_cluster = true;
    let replicas = replicas(&config).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let limited = limited_tool(1.0, 2);
    let _a = TestSidecar::start(
        &replicas[1].url(),
        "a",
        vec![add_tool(calls.clone()), limited],
    )
    .await;
    for replica in &replicas {
        wait_for_instances(replica, "add", 1).await;
    }
    let mut client = replicas[2].client().await;
    client
        .invoke(invoke("add", r#"{"a":1,"b":1}"#))
        .await
        .expect("invoke");
    for _ in 0..2 {
        replicas[0]
            .client()
            .await
            .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
            .await
            .expect("within burst");
    }
    let status = client
        .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_comes_from_a_file() {
    let Some(redis) = RedisServer::start_with(vec!["--requirepass".into(), "s3cret-pw".into()])
    else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("redis-password");
    std::fs::write(&file, "s3cret-pw\n").expect("write");
    let mut config = replica_config(&redis.url(), "auth", Duration::from_secs(3));
    config.redis_password_file = Some(file);
    let registry = TestRegistry::start(config).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s", vec![add_tool(calls)]).await;
    wait_for_instances(&registry, "add", 1).await;

    // The catalog really is in that Redis: a second replica sees it.
    let mut config = replica_config(&redis.url(), "auth", Duration::from_secs(3));
    config.redis_password_file = Some(dir.path().join("redis-password"));
    let started = Instant::now();
    let second = TestRegistry::start(config).await;
    wait_for_instances(&second, "add", 1).await;
    // Through its authenticated subscription's first resync, not the
    // periodic one 5 s later.
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

/// `limited`: adds, under a rate limit.
fn limited_tool(rate: f64, burst: u32) -> toolmesh_sidecar::Tool {
    toolmesh_sidecar::sdk::tool("limited", "Rate limited", |args: AddArgs| async move {
        Ok(AddResult {
            sum: args.a + args.b,
            calls: 0,
        })
    })
    .rate_limit(rate, burst)
    .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_a_tls_redis() {
    let Some((redis, ca_file, _certs)) = crate::common::redis_server::start_tls() else {
        return;
    };
    let mut config = replica_config(
        &format!("rediss://127.0.0.1:{}", redis.port),
        "tls",
        Duration::from_secs(3),
    );
    config.redis_ca_file = Some(ca_file.into());
    let replicas = replicas(&config).await;
    let _sidecar = TestSidecar::start(&replicas[0].url(), "s", vec![limited_tool(1.0, 1)]).await;
    for replica in &replicas {
        wait_for_instances(replica, "limited", 1).await;
    }
    replicas[1]
        .client()
        .await
        .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
        .await
        .expect("within the burst");
    let status = replicas[2]
        .client()
        .await
        .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
        .await
        .expect_err("the limit is shared over TLS");
    assert_eq!(status.code(), Code::ResourceExhausted);
}
