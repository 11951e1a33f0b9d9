//! Distributed mode end to end: three registry replicas sharing one real
//! `redis-server`, sidecars heartbeating to different replicas, agents
//! calling through all three; leases through Redis outages, and the
//! periodic resync.

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tonic::Code;
use tonic_types::StatusExt;
use toolmesh_proto::pb::{self, tool_event::Kind};
use toolmesh_registry::{Config, calls::ratelimit::redis::OutagePolicy};

use crate::{
    common::redis_probe::{Watcher, raw},
    common::{redis_server::RedisServer, *},
};

/// A replica's config: the catalog under `prefix` in `redis`, leases of `ttl`.
pub(crate) fn replica_config(redis: &str, prefix: &str, ttl: Duration) -> Config {
    Config {
        redis: Some(redis.to_owned()),
        redis_prefix: prefix.to_owned(),
        lease_ttl: ttl,
        shutdown_grace: Duration::from_secs(2),
        redis_timeout: Duration::from_millis(250),
        ..Config::default()
    }
}

pub(crate) async fn replicas(config: &Config) -> Vec<TestRegistry> {
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestRegistry::start(config.clone()).await);
    }
    replicas
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_serves_every_sidecar_and_sees_every_change() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_secs(5);
    let replicas = replicas(&replica_config(&redis.url(), "watch", ttl)).await;

    let mut events = replicas[0]
        .client()
        .await
        .watch_tools(pb::WatchToolsRequest {
            ..Default::default()
        })
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
    // Every replica's search index follows the shared catalog.
    for replica in &replicas {
        let client = replica.client().await;
        toolmesh_test_support::wait::eventually(Duration::from_secs(10), "searchable", || {
            let mut client = client.clone();
            async move {
                let found = client
                    .search_tools(pb::SearchToolsRequest {
                        query: "add two numbers".into(),
                        ..Default::default()
                    })
                    .await
                    .expect("search")
                    .into_inner();
                found
                    .matches
                    .first()
                    .and_then(|m| m.tool.as_ref())
                    .and_then(|t| t.descriptor.as_ref())
                    .map(|d| d.name.as_str())
                    == Some("add")
            }
        })
        .await;
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
    let expired = killed.elapsed();
    eprintln!("expiry of a killed sidecar seen on another replica after {expired:?} (ttl {ttl:?})");
    // Its last heartbeat was at most ttl/3 before the kill: an earlier
    // change was not the lease's expiry.
    assert!(expired >= ttl / 2, "{expired:?}");
    for replica in &replicas {
        wait_for_instances(replica, "add", 1).await;
    }
}

/// What one agent of [`rate_limit_holds_across_all_replicas`] saw.
#[derive(Default)]
struct Agent {
    admitted: usize,
    /// The `RetryInfo` delay of each denial (`None`: it had none).
    denials: Vec<Option<Duration>>,
    /// Any other failure.
    failures: Vec<tonic::Status>,
    /// When its last call was sent.
    last_sent: Option<Instant>,
}

/// Nine agents, three per replica, hammer one limit together. GCRA admits
/// `b + r*s` calls over the span `s` between its first and last decision,
/// on Redis's clock; measured here from outside:
///
/// - every decision lies between the agents' release and the last run of
///   the tool, so `admitted <= b + r * (last run - release) + 1`;
/// - the first decision precedes the tool's first run, the last one follows
///   the last call sent, and with calls always waiting no token goes unused
///   but the one or two left when the calls stop:
///   `admitted >= b + floor(r * (last sent - first run)) - 2`.
///
/// Every denial carries a `RetryInfo` of at most one period, 1/r.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_holds_across_all_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let replicas = replicas(&replica_config(
        &redis.url(),
        "limit",
        Duration::from_secs(5),
    ))
    .await;
    let (rate, burst) = (50.0, 20u32);
    let period = Duration::from_secs_f64(1.0 / rate);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let tool = timed_limited_tool(rate, burst, ran.clone());
    let _sidecar = TestSidecar::start(&replicas[0].url(), "s", vec![tool]).await;
    for replica in &replicas {
        wait_for_instances(replica, "limited", 1).await;
    }

    let mut clients = Vec::new();
    for i in 0..9 {
        clients.push(replicas[i % 3].client().await);
    }
    let go = Arc::new(tokio::sync::Barrier::new(clients.len() + 1));
    let run_for = Duration::from_secs(3);
    let agents: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            let go = go.clone();
            tokio::spawn(async move {
                go.wait().await;
                let stop_at = Instant::now() + run_for;
                let mut agent = Agent::default();
                loop {
                    let sent = Instant::now();
                    if sent >= stop_at {
                        return agent;
                    }
                    agent.last_sent = Some(sent);
                    match client.invoke(invoke("limited", r#"{"a":1,"b":1}"#)).await {
                        Ok(_) => agent.admitted += 1,
                        Err(status) if status.code() == Code::ResourceExhausted => {
                            agent.denials.push(
                                status
                                    .get_error_details()
                                    .retry_info()
                                    .and_then(|r| r.retry_delay),
                            )
                        }
                        Err(status) => agent.failures.push(status),
                    }
                }
            })
        })
        .collect();
    let released = Instant::now();
    go.wait().await;
    let mut seen = Vec::new();
    for agent in agents {
        seen.push(agent.await.expect("agent"));
    }

    let failures: Vec<_> = seen.iter().flat_map(|a| &a.failures).collect();
    assert!(failures.is_empty(), "{failures:?}");
    let admitted: usize = seen.iter().map(|a| a.admitted).sum();
    let denials: Vec<_> = seen
        .iter()
        .flat_map(|a| a.denials.iter().copied())
        .collect();
    let ran = ran.lock().unwrap().clone();
    assert_eq!(ran.len(), admitted, "every admitted call ran once");
    let (first_run, last_run) = (ran.iter().min().copied(), ran.iter().max().copied());
    let (Some(first_run), Some(last_run)) = (first_run, last_run) else {
        panic!("no call was admitted");
    };
    let last_sent = seen
        .iter()
        .filter_map(|a| a.last_sent)
        .max()
        .expect("calls were sent");
    let b = f64::from(burst);
    let most = b + rate * (last_run - released).as_secs_f64() + 1.0;
    let least =
        b + (rate * last_sent.saturating_duration_since(first_run).as_secs_f64()).floor() - 2.0;
    let longest = denials.iter().copied().max().flatten();
    eprintln!(
        "three replicas, r={rate}/s b={burst}: admitted {admitted}, denied {} \
         (longest RetryInfo {longest:?}), first run {:?} after the release, \
         last run {:?}, last call sent {:?}; bound [{least}, {most:.1}]",
        denials.len(),
        first_run - released,
        last_run - released,
        last_sent - released,
    );
    assert!(
        !denials.is_empty(),
        "nine agents over a limit of {rate}/s: some were denied"
    );
    for delay in &denials {
        assert!(
            delay.is_some_and(|d| d > Duration::ZERO && d <= period),
            "a denial's RetryInfo must be within one period ({period:?}): {delay:?}"
        );
    }
    #[allow(clippy::cast_precision_loss)]
    let admitted = admitted as f64;
    assert!(
        admitted >= least && admitted <= most,
        "admitted {admitted}, expected between {least} and {most:.1}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_survived_and_the_catalog_converges() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_secs(5);
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
    tokio::time::sleep(ttl + ttl / 4).await;
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
    // Over two TTLs no replica reports any change, and `add` keeps both
    // instances throughout.
    let mut watchers = Vec::new();
    for replica in &replicas {
        watchers.push(Watcher::start(replica).await);
    }
    let watching = Instant::now();
    let client = replicas[0].client().await;
    stays(ttl * 2, "add keeps both instances on replica 1", || {
        let mut client = client.clone();
        async move { instances(&mut client, "add").await == 2 }
    })
    .await;
    for (i, watcher) in watchers.iter().enumerate() {
        let seen: Vec<String> = watcher
            .seen()
            .iter()
            .map(|s| {
                format!(
                    "{:?} {} ({} instances) {:?} into the window",
                    s.kind,
                    s.tool,
                    s.instances,
                    s.at.saturating_duration_since(watching)
                )
            })
            .collect();
        assert!(seen.is_empty(), "replica {}: {seen:?}", i + 1);
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
    let second = TestRegistry::start(config).await;
    wait_for_instances(&second, "add", 1).await;
    // Both replicas' change subscriptions authenticated too (Redis takes no
    // SUBSCRIBE from a client that has not).
    let admin = raw(&format!("redis://:s3cret-pw@127.0.0.1:{}", redis.port)).await;
    eventually(Duration::from_secs(10), "two subscribed clients", || {
        let mut admin = admin.clone();
        async move {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut admin)
                .await
                .unwrap();
            clients.lines().filter(|c| c.contains(" sub=1 ")).count() == 2
        }
    })
    .await;
}

/// `limited`: adds, under a rate limit.
pub(crate) fn limited_tool(rate: f64, burst: u32) -> toolmesh_sidecar::Tool {
    toolmesh_sidecar::sdk::tool("limited", "Rate limited", |args: AddArgs| async move {
        Ok(AddResult {
            sum: args.a + args.b,
            calls: 0,
        })
    })
    .rate_limit(rate, burst)
    .build()
}

/// `limited`, noting when each call runs in `ran`.
fn timed_limited_tool(
    rate: f64,
    burst: u32,
    ran: Arc<Mutex<Vec<Instant>>>,
) -> toolmesh_sidecar::Tool {
    toolmesh_sidecar::sdk::tool("limited", "Rate limited", move |args: AddArgs| {
        ran.lock().unwrap().push(Instant::now());
        async move {
            Ok(AddResult {
                sum: args.a + args.b,
                calls: 0,
            })
        }
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
