//! Redis outages seen by the catalog: no lease swept until a TTL after
//! Redis is back, and changes whose messages were lost arrive with the
//! periodic resync.

use std::{
    sync::{Arc, atomic::AtomicUsize},
    time::{Duration, Instant},
};

use tonic::transport::Channel;
use toolmesh_proto::pb::{self, registration_client::RegistrationClient, tool_event::Kind};
use toolmesh_registry::Config;

use crate::{
    common::{
        redis_probe::{Frozen, Watcher, raw},
        *,
    },
    redis_replicas::{replica_config, replicas},
};

/// How Redis goes away in [`leases_outlive_an_outage_and_go_a_ttl_after_it`].
#[derive(Debug, Clone, Copy)]
enum Outage {
    /// SIGSTOP: Redis keeps its data while every lease's expiry time passes.
    Frozen,
    /// SIGKILL, then an empty Redis on the same port.
    Restarted,
}

/// "No lease is swept until a TTL after Redis is back": Redis is away for
/// longer than a TTL while one sidecar keeps heartbeating and another dies.
/// While it is away no replica reports a change; once it is back none
/// removes anything for a TTL (every replica writes its leases back
/// first); then the dead sidecar's tool goes, within a second TTL, and the
/// live one is still there.
async fn leases_outlive_an_outage_and_go_a_ttl_after_it(outage: Outage) {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let ttl = Duration::from_secs(4);
    let config = replica_config(&redis.url(), "grace", ttl);
    let replicas = replicas(&config).await;
    let _live =
        TestSidecar::start(&replicas[0].url(), "live", vec![add_tool(Arc::default())]).await;
    let doomed = TestSidecar::start(
        &replicas[1].url(),
        "doomed",
        vec![sleep_tool(Duration::from_secs(5))],
    )
    .await;
    for replica in &replicas {
        wait_for_instances(replica, "add", 1).await;
        wait_for_instances(replica, "sleep", 1).await;
    }
    let mut watchers = Vec::new();
    for replica in &replicas {
        watchers.push(Watcher::start(replica).await);
    }

    let frozen = match outage {
        Outage::Frozen => Some(Frozen::freeze(&redis.url()).await),
        Outage::Restarted => {
            redis.kill();
            None
        }
    };
    doomed.kill();
    tokio::time::sleep(ttl + ttl / 4).await;
    for replica in &replicas {
        assert_eq!(
            tool_names(&mut replica.client().await).await,
            ["add", "sleep"],
            "served from the local view while Redis is away"
        );
    }
    let back = Instant::now();
    match frozen {
        Some(frozen) => frozen.thaw(),
        None => redis.restart(),
    }
    for replica in &replicas {
        wait_for_instances(replica, "sleep", 0).await;
    }

    for (i, watcher) in watchers.iter().enumerate() {
        let seen = watcher.seen();
        let changes: Vec<_> = seen.iter().map(|s| (s.kind, s.tool.as_str())).collect();
        assert_eq!(
            changes,
            [(Kind::Removed, "sleep")],
            "replica {}: only the dead sidecar's tool goes: {seen:?}",
            i + 1
        );
        let swept = seen[0].at.saturating_duration_since(back);
        eprintln!(
            "{outage:?} for {:?}: replica {} removed the dead sidecar's tool {swept:?} after redis was back (ttl {ttl:?})",
            ttl + ttl / 4,
            i + 1
        );
        assert!(
            swept >= ttl,
            "swept within a TTL of redis coming back: {swept:?}"
        );
        assert!(swept <= ttl * 2, "swept late: {swept:?}");
    }
    // The live lease is in Redis itself: a replica started now sees it.
    let fresh = TestRegistry::start(config).await;
    wait_for_instances(&fresh, "add", 1).await;
    assert_eq!(tool_names(&mut fresh.client().await).await, ["add"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_outlive_a_frozen_redis_and_go_a_ttl_after_it() {
    leases_outlive_an_outage_and_go_a_ttl_after_it(Outage::Frozen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_outlive_a_restarted_redis_and_go_a_ttl_after_it() {
    leases_outlive_an_outage_and_go_a_ttl_after_it(Outage::Restarted).await;
}

/// How often every replica reloads the whole catalog (the README's "full
/// resync every 5 s").
const RESYNC_EVERY: Duration = Duration::from_secs(5);

/// "A full resync every 5 s heals any lost message": replica `late` reads
/// Redis as its own ACL user; while that user may not `HGETALL`, a second
/// instance is announced through replica `prompt`. `late` gets the change's
/// message, but its reload of the tool is refused, so the message is lost
/// to it. Once the right is back, only the periodic resync can bring the
/// change: it must arrive within one resync period (and a maintenance tick).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_change_arrives_with_the_periodic_resync() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let admin = raw(&redis.url()).await;
    let acl = async |args: &[&str]| {
        redis::cmd("ACL")
            .arg(args)
            .query_async::<redis::Value>(&mut admin.clone())
            .await
            .unwrap()
    };
    acl(&["SETUSER", "late", "on", ">late-pw", "~*", "&*", "+@all"]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let password = dir.path().join("password");
    std::fs::write(&password, "late-pw").expect("write");
    let ttl = Duration::from_secs(5);
    let prompt = TestRegistry::start(replica_config(&redis.url(), "resync", ttl)).await;
    let mut config = replica_config(
        &format!("redis://late@127.0.0.1:{}", redis.port),
        "resync",
        ttl,
    );
    config.redis_password_file = Some(password);
    let late = TestRegistry::start(config).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _a = TestSidecar::start(&prompt.url(), "a", vec![add_tool(calls.clone())]).await;
    wait_for_instances(&prompt, "add", 1).await;
    wait_for_instances(&late, "add", 1).await;

    acl(&["LOG", "RESET"]).await;
    acl(&["SETUSER", "late", "-hgetall"]).await;
    let _b = TestSidecar::start(&prompt.url(), "b", vec![add_tool(calls)]).await;
    wait_for_instances(&prompt, "add", 2).await;
    eventually(
        Duration::from_secs(10),
        "replica late's reload refused",
        || async {
            let log: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("ACL")
                .arg("LOG")
                .query_async(&mut admin.clone())
                .await
                .unwrap();
            log.iter().any(|entry| {
                let field = |name: &str| {
                    entry
                        .get(name)
                        .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
                };
                field("username").as_deref() == Some("late")
                    && field("object").as_deref() == Some("hgetall")
            })
        },
    )
    .await;
    let mut client = late.client().await;
    assert_eq!(
        instances(&mut client, "add").await,
        1,
        "the change is lost to late"
    );
    acl(&["SETUSER", "late", "+hgetall"]).await;
    let restored = Instant::now();
    let within = RESYNC_EVERY + ttl / 10 + Duration::from_secs(2);
    eventually(
        within,
        "the resync brings the second instance to late",
        || {
            let mut client = client.clone();
            async move { instances(&mut client, "add").await == 2 }
        },
    )
    .await;
    eprintln!(
        "a lost change reached replica late {:?} after its reads were allowed again (resync every {RESYNC_EVERY:?})",
        restored.elapsed()
    );
}

/// A subscription Redis refuses (here an ACL user that may not SUBSCRIBE)
/// is retried with backoff, not in a tight loop; the catalog still
/// works through the periodic resync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_subscription_is_retried_with_backoff() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut admin = raw(&redis.url()).await;
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "nosub",
            "on",
            ">nosub-pw",
            "~*",
            "&*",
            "+@all",
            "-subscribe",
        ])
        .query_async::<redis::Value>(&mut admin)
        .await
        .unwrap();
    let dir = tempfile::tempdir().expect("temp dir");
    let password = dir.path().join("password");
    std::fs::write(&password, "nosub-pw").expect("write");
    let mut config = replica_config(
        &format!("redis://nosub@127.0.0.1:{}", redis.port),
        "nosub",
        Duration::from_secs(5),
    );
    config.redis_password_file = Some(password);
    let registry = TestRegistry::start(config).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(&registry.url(), "s", vec![add_tool(calls)]).await;
    wait_for_instances(&registry, "add", 1).await;

    let watched = Duration::from_secs(3);
    let started = Instant::now();
    tokio::time::sleep(watched).await;
    let log: Vec<std::collections::HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut admin)
        .await
        .unwrap();
    let refused: i64 = log
        .iter()
        .filter(|entry| {
            entry
                .get("object")
                .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
                .as_deref()
                == Some("subscribe")
        })
        .filter_map(|entry| {
            entry
                .get("count")
                .and_then(|v| redis::from_redis_value::<i64>(v.clone()).ok())
        })
        .sum();
    eprintln!(
        "refused subscriptions in {:?}: {refused}",
        started.elapsed()
    );
    // Backoff from 50 ms doubling to 500 ms: about 10 tries in the 4 s
    // since the registry started.
    assert!(
        (2..=20).contains(&refused),
        "{refused} refused subscriptions"
    );
}

/// An announce of `instance` serving `descriptor`, at an address nothing
/// listens on (these tests call no tool).
fn announce(descriptor: &pb::ToolDescriptor, instance: &str) -> pb::AnnounceRequest {
    pb::AnnounceRequest {
        instance_id: instance.into(),
        endpoint: "http://127.0.0.1:9".into(),
        tools: vec![descriptor.clone()],
        execute_key: Vec::new(),
    }
}

/// A replica with a 10 s TTL (it looks at Redis once a second), serving
/// `add` from sidecar `a` and from instance `x`, announced here; Redis has
/// just been killed and the replica has seen it go.
struct Returning {
    redis: RedisServer,
    config: Config,
    registry: TestRegistry,
    _a: TestSidecar,
    registration: RegistrationClient<Channel>,
    descriptor: pb::ToolDescriptor,
    /// `x`'s lease.
    lease: String,
}

impl Returning {
    async fn start(prefix: &str) -> Option<Self> {
        let redis = RedisServer::start()?;
        let config = replica_config(&redis.url(), prefix, Duration::from_secs(10));
        let registry = TestRegistry::start(config.clone()).await;
        let a = TestSidecar::start(&registry.url(), "a", vec![add_tool(Arc::default())]).await;
        wait_for_instances(&registry, "add", 1).await;
        let descriptor = toolmesh_test_support::catalog::tool(&mut registry.client().await, "add")
            .await
            .and_then(|t| t.descriptor)
            .expect("add's descriptor");
        let mut registration = registry.registration().await;
        let lease = registration
            .announce(announce(&descriptor, "x"))
            .await
            .expect("announce x")
            .into_inner()
            .lease_id;
        wait_for_instances(&registry, "add", 2).await;
        let mut returning = Self {
            redis,
            config,
            registry,
            _a: a,
            registration,
            descriptor,
            lease,
        };
        returning.redis.kill();
        // Two ticks: the replica has seen Redis go.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        Some(returning)
    }

    fn announce(&self, instance: &str) -> pb::AnnounceRequest {
        announce(&self.descriptor, instance)
    }

    async fn heartbeat(&mut self) -> Result<(), tonic::Status> {
        let request = pb::HeartbeatRequest {
            lease_id: self.lease.clone(),
        };
        self.registration.heartbeat(request).await.map(drop)
    }

    /// What Redis itself holds: a replica started now sees `count`
    /// instances of `add`.
    async fn redis_shows(&self, count: u32) {
        let fresh = TestRegistry::start(self.config.clone()).await;
        wait_for_instances(&fresh, "add", count).await;
    }
}

/// An announce the moment Redis comes back empty, before the replica has
/// written its leases back, does not narrow the replica's view to the
/// little Redis holds so far (its watchers would see instances leave and
/// come back). The announce comes within milliseconds of Redis letting
/// calls through, well inside the replica's tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announce_as_redis_returns_empty_keeps_the_view() {
    let Some(mut world) = Returning::start("return-announce").await else {
        return;
    };
    world.heartbeat().await.expect("kept while Redis is away");
    world.redis.restart();
    // The breaker lets a call through half a second after the last failure:
    // the first announce to get through is that call, or comes just after.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match world.registration.announce(world.announce("y")).await {
            Err(status) if status.code() == tonic::Code::Unavailable => {
                assert!(
                    Instant::now() < deadline,
                    "redis never came back: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            answer => {
                answer.expect("announce y");
                break;
            }
        }
    }
    let shown = instances(&mut world.registry.client().await, "add").await;
    assert_eq!(shown, 3, "a, x and y: nothing left the view");
    world.redis_shows(3).await;
}

/// Heartbeats around Redis's return are all answered: while it is away
/// they are kept here; once it answers, a lease it lost is written back
/// before the heartbeat is refused as unknown (the sidecar would announce
/// again for nothing). The replica's tick would write it back too, but the
/// first heartbeat Redis answers comes before that tick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_as_redis_returns_empty_are_kept() {
    let Some(mut world) = Returning::start("return-heartbeat").await else {
        return;
    };
    world.redis.restart();
    // Past the breaker's half second and the next tick.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        world
            .heartbeat()
            .await
            .expect("a lease the replica is about to write back is kept");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    world.redis_shows(2).await;
}
