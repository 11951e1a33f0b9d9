//! Idempotency keys through `Invoke`: one run per key however many repeats
//! race, replays of results and of final statuses, and keys freed when the
//! first call provably never ran.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use tonic::Code;
use toolmesh_proto::pb;
use toolmesh_registry::Config;
use toolmesh_sidecar::sdk;

use crate::common::*;

/// `pay`: counts its runs, then takes `millis` to answer.
fn counted_sleep(calls: Arc<AtomicUsize>) -> toolmesh_sidecar::Tool {
    sdk::tool("pay", "Pays once per key", move |args: SleepArgs| {
        let calls = calls.clone();
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::time::sleep(Duration::from_millis(args.millis)).await;
            Ok(AddResult { sum: 0, calls: n })
        }
    })
    .timeout(Duration::from_secs(5))
    .build()
}

async fn same_key_from_many_agents(registries: &[TestRegistry], calls: &AtomicUsize) {
    let mut agents = Vec::new();
    for i in 0..20 {
        let mut client = registries[i % registries.len()].client().await;
        agents.push(tokio::spawn(async move {
            client
                .invoke(pb::InvokeRequest {
                    tool: "pay".into(),
                    arguments_json: r#"{"millis": 300}"#.into(),
                    idempotency_key: "order-42".into(),
                    tool_digest: String::new(),
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner())
        }));
    }
    let mut results = Vec::new();
    for agent in agents {
        results.push(
            agent
                .await
                .expect("agent")
                .expect("every repeat gets the outcome"),
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 1, "exactly one execution");
    assert!(
        results.iter().all(|r| r == &results[0]),
        "every repeat gets the same result"
    );

    // Later repeats: the stored result, no run; other arguments: refused.
    let mut client = registries[0].client().await;
    let again = client
        .invoke(pb::InvokeRequest {
            tool: "pay".into(),
            arguments_json: r#"{ "millis" : 300 }"#.into(),
            idempotency_key: "order-42".into(),
            tool_digest: String::new(),
            ..Default::default()
        })
        .await
        .expect("replayed");
    assert_eq!(again.into_inner(), results[0]);
    let status = client
        .invoke(pb::InvokeRequest {
            tool: "pay".into(),
            arguments_json: r#"{"millis": 1}"#.into(),
            idempotency_key: "order-42".into(),
            tool_digest: String::new(),
            ..Default::default()
        })
        .await
        .expect_err("other arguments");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_idempotency_keys_under_concurrency_run_once() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(10))).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _a = TestSidecar::start(&registry.url(), "a", vec![counted_sleep(calls.clone())]).await;
    let _b = TestSidecar::start(&registry.url(), "b", vec![counted_sleep(calls.clone())]).await;
    wait_for_instances(&registry, "pay", 2).await;
    same_key_from_many_agents(std::slice::from_ref(&registry), &calls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_idempotency_keys_across_replicas_run_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut config = config_with_ttl(Duration::from_secs(10));
    config.redis = Some(redis.url());
    config.redis_prefix = "idem".into();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        replicas.push(TestRegistry::start(config.clone()).await);
    }
    let calls = Arc::new(AtomicUsize::new(0));
    let _a = TestSidecar::start(&replicas[0].url(), "a", vec![counted_sleep(calls.clone())]).await;
    let _b = TestSidecar::start(&replicas[2].url(), "b", vec![counted_sleep(calls.clone())]).await;
    for replica in &replicas {
        wait_for_instances(replica, "pay", 2).await;
    }
    same_key_from_many_agents(&replicas, &calls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_and_final_statuses_are_replayed_without_a_run() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _sidecar = TestSidecar::start(
        &registry.url(),
        "s",
        vec![counted_sleep(calls.clone()), add_tool(calls.clone())],
    )
    .await;
    wait_for_instances(&registry, "pay", 1).await;
    let mut client = registry.client().await;

    // A tool error is an outcome: replayed as it was.
    let first = client
        .invoke(keyed("add", r#"{"a":13,"b":0}"#, "k1"))
        .await
        .unwrap()
        .into_inner();
    assert!(first.is_error);
    let again = client
        .invoke(keyed("add", r#"{"a":13,"b":0}"#, "k1"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again, first);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // A call that reached the tool and ran out of time: its status is the
    // outcome, replayed at once without running the tool again. The time
    // is the tool's own (5 s), which the registry keeps: a caller's deadline
    // instead has the caller's timer racing the registry's answer, and a
    // loaded suite run once saw the caller's fire first (`Cancelled`).
    let status = client
        .invoke(keyed("pay", r#"{"millis": 8000}"#, "k2"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let started = Instant::now();
    let replayed = client
        .invoke(keyed("pay", r#"{"millis": 8000}"#, "k2"))
        .await
        .unwrap_err();
    assert_eq!(replayed.code(), Code::DeadlineExceeded, "{replayed:?}");
    assert_eq!(replayed.message(), status.message());
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "replayed, not run: {:?}",
        started.elapsed()
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limited_first_call_frees_its_key() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let limited = adder("limited", calls.clone()).rate_limit(2.0, 1).build();
    let _sidecar = TestSidecar::start(&registry.url(), "s", vec![limited]).await;
    wait_for_instances(&registry, "limited", 1).await;
    let mut client = registry.client().await;

    client
        .invoke(invoke("limited", r#"{"a":1,"b":1}"#))
        .await
        .expect("the burst");
    let status = client
        .invoke(keyed("limited", r#"{"a":1,"b":1}"#, "after-limit"))
        .await
        .expect_err("over the limit");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // The limited call never ran: the same key runs once a token is back,
    // and is then replayed.
    eventually(
        Duration::from_secs(10),
        "the key runs once a token is back",
        || {
            let mut client = client.clone();
            async move {
                match client
                    .invoke(keyed("limited", r#"{"a":1,"b":1}"#, "after-limit"))
                    .await
                {
                    Ok(response) => {
                        assert!(!response.get_ref().is_error);
                        true
                    }
                    Err(status) if status.code() == Code::ResourceExhausted => false,
                    Err(status) => panic!("{status:?}"),
                }
            }
        },
    )
    .await;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let replayed = client
        .invoke(keyed("limited", r#"{"a":1,"b":1}"#, "after-limit"))
        .await
        .expect("replayed, not limited")
        .into_inner();
    assert!(
        replayed.result_json.contains(r#""calls":2"#),
        "{}",
        replayed.result_json
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_call_that_could_not_connect_frees_its_key() {
    let registry = TestRegistry::start(Config::default()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tool = add_tool(calls.clone());
    // The only instance's port has no listener: the call never leaves the
    // registry.
    let port = reserved_port();
    registry
        .registration()
        .await
        .announce(pb::AnnounceRequest {
            instance_id: "not-yet".into(),
            endpoint: format!("http://127.0.0.1:{port}"),
            tools: vec![tool.descriptor().clone()],
            // The key of the sidecar that comes up on this port, below.
            execute_key: toolmesh_test_support::grants::key().as_bytes().to_vec(),
        })
        .await
        .unwrap();
    let mut client = registry.client().await;
    let status = client
        .invoke(keyed("add", r#"{"a":2,"b":3}"#, "k"))
        .await
        .expect_err("nothing listens");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");

    // The sidecar comes up on that port: the same key runs now, for real.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let _sidecar =
        toolmesh_test_support::server::sidecar_on(listener, &registry.url(), "not-yet", vec![tool]);
    let response = client
        .invoke(keyed("add", r#"{"a":2,"b":3}"#, "k"))
        .await
        .expect("the key was freed")
        .into_inner();
    assert!(
        response.result_json.contains(r#""sum":5"#),
        "{}",
        response.result_json
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}
