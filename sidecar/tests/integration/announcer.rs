//! Announce / heartbeat / re-announce / withdraw, against the real registry
//! in-process wherever the behaviour depends on it (catalog, expiry,
//! refusal, TTL); against [`FakeRegistry`] only for what the real registry
//! cannot show, with the reason at each use.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use tonic_types::StatusExt as _;
use toolmesh_proto::pb;
use toolmesh_proto::pb::tool_event::Kind;
use toolmesh_sidecar::sdk::{self, ToolError};
use toolmesh_sidecar::server::{ServeOptions, serve};
use toolmesh_sidecar::{SidecarError, Tool};
use toolmesh_test_support::tools::add_tool;

use crate::common::{TestRegistry, fake_registry, reserved_port, sidecar, stays, wait_until};

/// Registry lease for tests not about expiry.
const TTL: Duration = Duration::from_secs(5);
/// How long anything awaited may take on a busy machine.
const PATIENCE: Duration = Duration::from_secs(20);

fn noop() -> Tool {
    sdk::tool("noop", "Does nothing", |_: serde_json::Value| async {
        Ok::<_, ToolError>(())
    })
    .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn announces_serves_and_withdraws_through_the_real_registry() {
    let registry = TestRegistry::start(TTL).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let sidecar = sidecar(&registry.url(), "adder", vec![add_tool(calls)]).await;
    registry.wait_for_instances("add", 1, PATIENCE).await;

    let response = registry.invoke("add", r#"{"a": 2, "b": 3}"#).await.unwrap();
    assert_eq!(response.instance_id, "adder");
    assert_eq!(response.result_json, r#"{"sum":5,"calls":1}"#);

    // `serve` returns after its withdraw was answered: the tool is gone at
    // once, not a TTL later.
    sidecar.stop().await;
    assert_eq!(registry.tool("add").await, None, "withdrawn, not expiring");
}

#[tokio::test]
async fn heartbeats_every_third_of_the_ttl() {
    // Fake: the real registry does not expose heartbeats, so only a fake
    // can count them and time them.
    let ttl = Duration::from_millis(600);
    let interval = ttl / 3;
    let (registry, server) = fake_registry(ttl).await;
    let sidecar = sidecar(&server.url(), "test-instance", vec![noop()]).await;

    wait_until(PATIENCE, "the announce", || registry.announces().len() == 1).await;
    let (announced_at, request, lease) = registry.announces().remove(0);
    assert_eq!(lease, "lease-1");
    assert_eq!(request.instance_id, "test-instance");
    assert_eq!(request.endpoint, sidecar.url());
    assert_eq!(request.tools.len(), 1);

    wait_until(PATIENCE, "five heartbeats", || {
        registry.heartbeats().len() >= 5
    })
    .await;
    let heartbeats = registry.heartbeats();
    assert!(
        heartbeats
            .iter()
            .all(|(_, l, known)| l == "lease-1" && *known),
        "{heartbeats:?}"
    );
    // Each heartbeat is sent an interval after the previous one was
    // answered (after the announce, for the first), and recorded before it
    // is answered: no gap can be shorter, however busy the machine.
    let mut previous = announced_at;
    for (at, _, _) in &heartbeats {
        let gap = *at - previous;
        assert!(gap >= interval, "a heartbeat {gap:?} after the previous");
        previous = *at;
    }

    sidecar.stop().await;
    assert_eq!(registry.withdrawals(), ["lease-1"]);
    assert_eq!(registry.announces().len(), 1);
}

#[tokio::test]
async fn one_not_found_heartbeat_makes_it_announce_again() {
    // Fake: the real registry forgets leases only by expiring them or by
    // restarting, and neither lets a test count the NOT_FOUND heartbeats
    // before the new announce (exactly one).
    let (registry, server) = fake_registry(Duration::from_millis(300)).await;
    let sidecar = sidecar(&server.url(), "test-instance", vec![noop()]).await;
    wait_until(PATIENCE, "a heartbeat", || {
        !registry.heartbeats().is_empty()
    })
    .await;

    registry.forget_leases();
    wait_until(PATIENCE, "the second announce", || {
        registry.announces().len() == 2
    })
    .await;
    let not_found = registry
        .heartbeats()
        .iter()
        .filter(|(_, _, known)| !known)
        .count();
    assert_eq!(
        not_found, 1,
        "exactly one NOT_FOUND heartbeat before announcing again"
    );
    wait_until(PATIENCE, "a heartbeat on the new lease", || {
        registry
            .heartbeats()
            .iter()
            .any(|(_, l, known)| l == "lease-2" && *known)
    })
    .await;

    sidecar.stop().await;
    assert_eq!(registry.withdrawals(), ["lease-2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_registry_gets_the_tool_back_without_a_sidecar_restart() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], reserved_port()));
    let registry = TestRegistry::start_at(addr, TTL).await;
    let sidecar = sidecar(&registry.url(), "survivor", vec![noop()]).await;
    registry.wait_for_instances("noop", 1, PATIENCE).await;

    registry.stop().await;
    // A new, empty registry on the same address (whether the sidecar's next
    // heartbeat reaches it before this test looks is a race, so the empty
    // state is not asserted). The heartbeat finds its lease unknown and the
    // sidecar announces again: within a heartbeat interval plus backoff, a
    // few TTLs at most.
    let registry = TestRegistry::start_at(addr, TTL).await;
    registry.wait_for_instances("noop", 1, 4 * TTL).await;
    assert!(!sidecar.is_finished(), "the same sidecar, still serving");

    let response = registry.invoke("noop", "{}").await.unwrap();
    assert_eq!(response.instance_id, "survivor");
    sidecar.stop().await;
    assert_eq!(registry.tool("noop").await, None);
}

/// A stop that comes while an announce is on the wire waits for its
/// answer and withdraws the lease it grants: dropping the call would leave
/// the registry serving the tools from a lease no one holds, until its
/// TTL. Fake: the real registry answers too fast to stop a sidecar between
/// granting a lease and answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_during_the_announce_withdraws_the_lease_it_grants() {
    let (registry, server) = fake_registry(TTL).await;
    let held = registry.hold_answers().await;
    let sidecar = sidecar(&server.url(), "hasty", vec![noop()]).await;
    wait_until(PATIENCE, "the announce", || registry.announces().len() == 1).await;

    let stopping = tokio::spawn(sidecar.stop());
    // The stop is under way before the answer comes.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "it waits for the announce's answer"
    );
    drop(held);
    stopping.await.expect("the sidecar stops");
    assert_eq!(registry.withdrawals(), ["lease-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_ttl_is_adopted() {
    // About the TTL, so shorter than 5 s: a sidecar keeping its own 10 s
    // default would heartbeat every 3.3 s, after this lease had expired;
    // one that adopted it heartbeats every 0.83 s.
    let ttl = Duration::from_millis(2500);
    let registry = TestRegistry::start(ttl).await;
    let sidecar = sidecar(&registry.url(), "steady", vec![noop()]).await;
    registry.wait_for_instances("noop", 1, PATIENCE).await;

    let mut events = registry
        .client()
        .watch_tools(pb::WatchToolsRequest {
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut snapshot = Vec::new();
    loop {
        let event = events.message().await.unwrap().expect("the stream goes on");
        if event.kind() == Kind::Synced {
            break;
        }
        snapshot.push(event);
    }
    assert_eq!(snapshot.len(), 1, "{snapshot:?}");

    // Several TTLs on heartbeats alone: an expiry (REMOVED), or an expiry
    // and a new announce (REMOVED, ADDED), would show up in the stream.
    let window = 3 * ttl;
    match tokio::time::timeout(window, events.message()).await {
        Err(_quiet) => {}
        Ok(event) => panic!("the catalog changed within {window:?}: {event:?}"),
    }
    assert_eq!(registry.instances("noop").await, 1);
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_withdraws_nothing_and_the_lease_expires() {
    // About expiry: a short lease.
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(ttl).await;
    let sidecar = sidecar(&registry.url(), "crasher", vec![noop()]).await;
    registry.wait_for_instances("noop", 1, PATIENCE).await;

    sidecar.abort();
    // The last heartbeat was at most a third of the TTL ago: for another
    // third at least, the lease stands, as nothing withdrew it.
    stays(
        ttl / 3,
        "the crashed sidecar's tool is still listed",
        || async { registry.instances("noop").await == 1 },
    )
    .await;
    // No heartbeat keeps it alive any longer.
    registry.wait_for_instances("noop", 0, 5 * ttl).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_while_the_registry_is_down() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], reserved_port()));
    let sidecar = sidecar(&format!("http://{addr}"), "patient", vec![noop()]).await;
    stays(
        Duration::from_secs(1),
        "serve keeps retrying instead of failing",
        || async { !sidecar.is_finished() },
    )
    .await;

    let registry = TestRegistry::start_at(addr, TTL).await;
    // Backoff is capped at 5 s.
    registry.wait_for_instances("noop", 1, PATIENCE).await;
    let response = registry.invoke("noop", "{}").await.unwrap();
    assert_eq!(response.instance_id, "patient");

    sidecar.stop().await;
    assert_eq!(registry.tool("noop").await, None, "withdrawn on stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_without_a_reachable_registry_still_returns() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], reserved_port()));
    let sidecar = sidecar(&format!("http://{addr}"), "lonely", vec![noop()]).await;
    stays(
        Duration::from_millis(300),
        "serve keeps retrying instead of failing",
        || async { !sidecar.is_finished() },
    )
    .await;
    sidecar.stop_within(Duration::from_secs(10)).await;

    // Nothing of it keeps announcing once it returned.
    let registry = TestRegistry::start_at(addr, TTL).await;
    stays(
        Duration::from_secs(2),
        "no announce from a stopped sidecar",
        || async { registry.tool("noop").await.is_none() },
    )
    .await;
}

/// `serve`s `tools` on loopback as `instance`, announcing to `registry`,
/// and returns what it returned within [`PATIENCE`].
async fn served(
    registry: &str,
    instance: &str,
    tools: Vec<Tool>,
) -> Result<(), toolmesh_sidecar::SidecarError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let opts = ServeOptions {
        registry: registry.into(),
        instance_id: Some(instance.into()),
        ..ServeOptions::default()
    };
    tokio::time::timeout(
        PATIENCE,
        serve(listener, tools, opts, std::future::pending()),
    )
    .await
    .expect("serve returns")
}

#[tokio::test]
async fn invalid_tool_sets_and_addresses_are_refused_before_any_announce() {
    let err = served("http://127.0.0.1:1", "x", vec![]).await.unwrap_err();
    assert_eq!(err.to_string(), "no tools to serve");

    for (registry, expected) in [
        (
            "not a url\n",
            "registry: \"not a url\\n\" is not a server address: only a host and a port may be given; write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051",
        ),
        (
            "grpc://127.0.0.1:50051",
            "registry: \"grpc://127.0.0.1:50051\" is not a server address: the scheme must be http:// or https://; write host:port, http://host:port or https://host:port, e.g. 127.0.0.1:50051",
        ),
    ] {
        let err = served(registry, "x", vec![noop()]).await.unwrap_err();
        assert_eq!(err.to_string(), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_address_without_a_scheme_works_like_http() {
    let registry = TestRegistry::start(TTL).await;
    let sidecar = sidecar(&registry.addr.to_string(), "plain", vec![noop()]).await;
    registry.wait_for_instances("noop", 1, PATIENCE).await;
    let response = registry.invoke("noop", "{}").await.unwrap();
    assert_eq!(response.instance_id, "plain");
    sidecar.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_announce_ends_serve_with_the_difference_named() {
    let registry = TestRegistry::start(TTL).await;
    let first = sidecar(&registry.url(), "first", vec![noop()]).await;
    registry.wait_for_instances("noop", 1, PATIENCE).await;

    let other = sdk::tool(
        "noop",
        "Does nothing, differently",
        |_: serde_json::Value| async { Ok::<_, ToolError>(()) },
    )
    .build();
    let err = served(&registry.url(), "second", vec![other])
        .await
        .unwrap_err();
    let SidecarError::Refused(refused) = &err else {
        panic!("not a refusal: {err}");
    };
    assert_eq!(refused.code, tonic::Code::FailedPrecondition);
    assert_eq!(
        err.to_string(),
        format!(
            "the registry at {} refused this sidecar's tools (FAILED_PRECONDITION): descriptor of \"noop\" conflicts with the one its live instances announced: description: live \"Does nothing\" != announced \"Does nothing, differently\"",
            registry.url()
        )
    );
    // The live instance is untouched.
    assert_eq!(registry.instances("noop").await, 1);
    assert!(!first.is_finished());
    first.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_descriptor_ends_serve_with_the_registry_s_reason() {
    let registry = TestRegistry::start(TTL).await;
    // Valid for the sidecar (a rate above 0), below the registry's minimum.
    let rare = sdk::tool("rare", "Once a week", |_: serde_json::Value| async {
        Ok::<_, ToolError>(())
    })
    .rate_limit(0.000_001, 1)
    .build();
    let err = served(&registry.url(), "rare", vec![rare])
        .await
        .unwrap_err();
    let SidecarError::Refused(refused) = &err else {
        panic!("not a refusal: {err}");
    };
    assert_eq!(refused.code, tonic::Code::InvalidArgument);
    assert!(
        err.to_string().contains(
            "(INVALID_ARGUMENT): descriptor of \"rare\" is invalid: 0.000001 must be between"
        ),
        "{err}"
    );
    assert_eq!(registry.tool("rare").await, None);
}

#[tokio::test]
async fn failures_that_may_heal_are_retried_and_refusals_are_final() {
    // Fake: the real registry answers UNAVAILABLE only with its Redis down,
    // and puts everything in the message; a fake can fail on cue and put a
    // reason in the status details alone.
    let (registry, server) = fake_registry(TTL).await;
    registry.fail_next_announces(vec![
        tonic::Status::unavailable("catalog store unavailable"),
        tonic::Status::deadline_exceeded("slow"),
    ]);
    let sidecar = sidecar(&server.url(), "healing", vec![noop()]).await;
    wait_until(PATIENCE, "an announce after two failures", || {
        registry.announces().len() == 1
    })
    .await;
    assert_eq!(registry.failed_announces(), 2);
    assert!(!sidecar.is_finished());
    sidecar.stop().await;

    registry.fail_next_announces(vec![tonic::Status::with_error_details(
        tonic::Code::InvalidArgument,
        "announce refused",
        tonic_types::ErrorDetails::with_bad_request_violation(
            "tools[0].description",
            "longer than 16384 bytes",
        ),
    )]);
    let err = served(&server.url(), "refused", vec![noop()])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the registry at {} refused this sidecar's tools (INVALID_ARGUMENT): announce refused; tools[0].description: longer than 16384 bytes",
            server.url()
        )
    );
    assert_eq!(registry.failed_announces(), 3, "refused once, not retried");
    assert_eq!(registry.announces().len(), 1);
}
