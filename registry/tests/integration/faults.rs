//! Faults with real processes: sidecars killed (-9) or stopped (SIGSTOP)
//! during bursts, the registry restarted under load. A counting HTTP backend
//! proves which side effects ran, and how often.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use tonic::Code;
use toolmesh_proto::pb;

use crate::common::{
    processes::{Counter, SidecarProcess, binary, work_tool_yaml},
    *,
};

fn work(tool: &str, id: &str, sleep_ms: u64) -> pb::InvokeRequest {
    pb::InvokeRequest {
        tool: tool.into(),
        arguments_json: format!(r#"{{"id":"{id}","sleep_ms":{sleep_ms}}}"#),
        idempotency_key: String::new(),
    }
}

struct Burst {
    calls: usize,
    succeeded: usize,
    failures: Vec<(Code, String)>,
}

/// A burst of calls.
struct Plan<'a> {
    tool: &'a str,
    calls: usize,
    concurrency: usize,
    sleep_ms: u64,
    deadline: Duration,
    /// The fault runs once this many calls have completed.
    fault_after: usize,
}

/// Runs `plan`, with `fault` once `plan.fault_after` calls have completed.
async fn burst(
    registry: &TestRegistry,
    plan: Plan<'_>,
    fault: impl FnOnce() + Send + 'static,
) -> Burst {
    let Plan {
        tool,
        calls,
        concurrency,
        sleep_ms,
        deadline,
        fault_after,
    } = plan;
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let fault = Arc::new(std::sync::Mutex::new(Some(fault)));
    let mut agents = Vec::new();
    for _ in 0..concurrency {
        let mut client = registry.client().await;
        let (next, done, fault, tool) =
            (next.clone(), done.clone(), fault.clone(), tool.to_owned());
        agents.push(tokio::spawn(async move {
            let mut results = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= calls {
                    return results;
                }
                let mut request = tonic::Request::new(work(&tool, &format!("call-{i}"), sleep_ms));
                request.set_timeout(deadline);
                let result = client.invoke(request).await;
                results.push(
                    result
                        .map(|r| r.into_inner())
                        .map_err(|s| (s.code(), s.message().to_owned())),
                );
                if done.fetch_add(1, Ordering::SeqCst) + 1 == fault_after
                    && let Some(fault) = fault.lock().expect("lock").take()
                {
                    fault();
                }
            }
        }));
    }
    let mut outcome = Burst {
        calls,
        succeeded: 0,
        failures: Vec::new(),
    };
    for agent in agents {
        for result in agent.await.expect("agent") {
            match result {
                Ok(response) if !response.is_error => outcome.succeeded += 1,
                Ok(response) => outcome.failures.push((Code::Ok, response.result_json)),
                Err(failure) => outcome.failures.push(failure),
            }
        }
    }
    outcome
}

/// A registry, a counting backend, and two sidecar processes `a` and `b`
/// serving `tool` over it; `burst` with sidecar `a` killed (-9) after 60
/// of 300 calls.
async fn burst_with_a_kill(tool: &str, idempotent: bool) -> Option<(Burst, Counter)> {
    let binary = binary("toolmesh-sidecar")?;
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(3))).await;
    let counter = Counter::default();
    let url = counter.serve().await;
    let yaml = work_tool_yaml(tool, &url, idempotent, "5s");
    let a = SidecarProcess::start(&binary, &registry.url(), "a", &yaml).await;
    let _b = SidecarProcess::start(&binary, &registry.url(), "b", &yaml).await;
    wait_for_instances(&registry, tool, 2).await;

    let pid = a.pid;
    let plan = Plan {
        tool,
        calls: 300,
        concurrency: 16,
        sleep_ms: 20,
        deadline: Duration::from_secs(5),
        fault_after: 60,
    };
    let outcome = burst(&registry, plan, move || {
        toolmesh_test_support::process::send(pid, Signal::SIGKILL);
    })
    .await;
    a.kill().await;
    Some((outcome, counter))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_burst_to_an_idempotent_tool_loses_no_call() {
    let Some((outcome, counter)) = burst_with_a_kill("work", true).await else {
        return;
    };
    eprintln!(
        "kill -9, idempotent tool: calls {}, succeeded {}, failed {}, executions counted {}",
        outcome.calls,
        outcome.succeeded,
        outcome.failures.len(),
        counter.total()
    );
    assert_eq!(
        outcome.succeeded, outcome.calls,
        "failures: {:?}",
        outcome.failures
    );
    assert!(counter.total() >= outcome.calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_never_runs_a_non_idempotent_side_effect_twice() {
    let Some((outcome, counter)) = burst_with_a_kill("charge", false).await else {
        return;
    };
    eprintln!(
        "kill -9, non-idempotent tool: calls {}, succeeded {}, failed {} ({:?}), executions counted {}, most executions of one call {}",
        outcome.calls,
        outcome.succeeded,
        outcome.failures.len(),
        outcome
            .failures
            .iter()
            .map(|(c, _)| *c as i32)
            .collect::<std::collections::BTreeSet<_>>(),
        counter.total(),
        counter.max_per_id()
    );
    assert_eq!(counter.max_per_id(), 1, "a side effect ran twice");
    for (code, message) in &outcome.failures {
        assert_eq!(*code, Code::Unavailable, "unclear failure: {message}");
    }
    assert_eq!(outcome.succeeded + outcome.failures.len(), outcome.calls);
    assert!(counter.total() <= outcome.calls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_sidecar_is_hedged_around_and_its_lease_expires() {
    let Some(binary) = binary("toolmesh-sidecar") else {
        return;
    };
    let ttl = Duration::from_millis(1500);
    let registry = TestRegistry::start(config_with_ttl(ttl)).await;
    let counter = Counter::default();
    let url = counter.serve().await;
    let yaml = work_tool_yaml("work", &url, true, "5s");
    let a = SidecarProcess::start(&binary, &registry.url(), "a", &yaml).await;
    let _b = SidecarProcess::start(&binary, &registry.url(), "b", &yaml).await;
    wait_for_instances(&registry, "work", 2).await;

    a.signal(Signal::SIGSTOP);
    let stopped = Instant::now();
    let deadline = Duration::from_secs(2);
    let outcome = burst(
        &registry,
        Plan {
            tool: "work",
            calls: 40,
            concurrency: 4,
            sleep_ms: 5,
            deadline,
            fault_after: usize::MAX,
        },
        || {},
    )
    .await;
    eprintln!(
        "SIGSTOP: calls {}, succeeded {}, failed {:?}, in {:?}",
        outcome.calls,
        outcome.succeeded,
        outcome.failures,
        stopped.elapsed()
    );
    assert_eq!(
        outcome.succeeded, outcome.calls,
        "every call fails over within its deadline"
    );
    // The hung sidecar no longer heartbeats: its lease expires.
    wait_for_instances(&registry, "work", 1).await;
    a.signal(Signal::SIGCONT);
    a.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_restart_during_a_burst_needs_no_sidecar_restart() {
    let Some(binary) = binary("toolmesh-sidecar") else {
        return;
    };
    let ttl = Duration::from_millis(1500);
    let registry = TestRegistry::start(config_with_ttl(ttl)).await;
    let addr = registry.addr;
    let counter = Counter::default();
    let url = counter.serve().await;
    let yaml = work_tool_yaml("work", &url, true, "5s");
    let mut a = SidecarProcess::start(&binary, &registry.url(), "a", &yaml).await;
    let mut b = SidecarProcess::start(&binary, &registry.url(), "b", &yaml).await;
    wait_for_instances(&registry, "work", 2).await;
    let (pid_a, pid_b) = (a.pid, b.pid);

    // Agents keep calling, retrying UNAVAILABLE, while the registry restarts.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ok_after_restart = Arc::new(AtomicUsize::new(0));
    let restarted = Arc::new(std::sync::Mutex::new(None::<Instant>));
    let mut agents = Vec::new();
    for n in 0..4 {
        let (stop, ok_after_restart, restarted) =
            (stop.clone(), ok_after_restart.clone(), restarted.clone());
        let url = format!("http://{addr}");
        agents.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                i += 1;
                let Ok(mut client) =
                    pb::tool_registry_client::ToolRegistryClient::connect(url.clone()).await
                else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                while !stop.load(Ordering::SeqCst) {
                    i += 1;
                    let mut request =
                        tonic::Request::new(work("work", &format!("agent{n}-{i}"), 5));
                    request.set_timeout(Duration::from_secs(2));
                    match client.invoke(request).await {
                        Ok(_) => {
                            if restarted.lock().expect("lock").is_some() {
                                ok_after_restart.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            break;
                        }
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    registry.stop().await;
    let registry = TestRegistry::start_at(addr, config_with_ttl(ttl)).await;
    *restarted.lock().expect("lock") = Some(Instant::now());
    wait_for_instances(&registry, "work", 2).await;
    let took = restarted.lock().expect("lock").map(|t| t.elapsed());
    eventually(
        Duration::from_secs(20),
        "agents' calls succeed again",
        || {
            let ok = ok_after_restart.clone();
            async move { ok.load(Ordering::SeqCst) >= 20 }
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for agent in agents {
        agent.await.expect("agent");
    }
    eprintln!("registry restarted under load: both sidecars back after {took:?}, same processes");
    assert!(
        a.is_running() && b.is_running(),
        "no sidecar restarted or died"
    );
    assert_eq!((a.pid, b.pid), (pid_a, pid_b));
    let calls = registry
        .client()
        .await
        .invoke(work("work", "final", 0))
        .await;
    assert!(calls.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_the_backend() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(3))).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let yaml = format!(
        r#"tools:
  - name: slow
    description: Writes its pid, then takes long
    timeout: 30s
    backend:
      command: ["sh", "-c", "echo $$ > {}; exec sleep 30"]
"#,
        pidfile.display()
    );
    let tools = toolmesh_sidecar::config::SidecarConfig::from_yaml_str(&yaml)
        .expect("config")
        .build_tools(dir.path())
        .expect("tools");
    let _sidecar = TestSidecar::start(&registry.url(), "s", tools).await;
    wait_for_instances(&registry, "slow", 1).await;

    let mut client = registry.client().await;
    let call = tokio::spawn(async move {
        let _ = client
            .invoke(pb::InvokeRequest {
                tool: "slow".into(),
                arguments_json: "{}".into(),
                idempotency_key: String::new(),
            })
            .await;
    });
    let mut pid = None;
    eventually(Duration::from_secs(10), "the backend starts", || {
        let found = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok());
        pid = found;
        async move { found.is_some() }
    })
    .await;
    let pid = pid.expect("pid");
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());

    // The agent gives up: the registry's call, the sidecar's Execute and the
    // process all stop.
    call.abort();
    let cancelled = Instant::now();
    eventually(
        Duration::from_secs(10),
        "the backend process is gone",
        || async move { process_gone(pid) },
    )
    .await;
    eprintln!(
        "backend stopped {:?} after the agent cancelled",
        cancelled.elapsed()
    );
}

/// Gone, or a zombie nobody reaped yet (it no longer runs).
fn process_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_reports_not_serving_first_and_finishes_calls_in_flight() {
    let mut config = config_with_ttl(Duration::from_secs(3));
    config.shutdown_delay = Duration::from_millis(500);
    config.shutdown_grace = Duration::from_secs(10);
    let registry = TestRegistry::start(config).await;
    let _sidecar = TestSidecar::start(
        &registry.url(),
        "s",
        vec![sleep_tool(Duration::from_secs(10))],
    )
    .await;
    wait_for_instances(&registry, "sleep", 1).await;

    let channel = tonic::transport::Channel::from_shared(registry.url())
        .expect("url")
        .connect()
        .await
        .expect("connect");
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let mut client = pb::tool_registry_client::ToolRegistryClient::new(channel);
    let in_flight = tokio::spawn(async move {
        client
            .invoke(pb::InvokeRequest {
                tool: "sleep".into(),
                arguments_json: r#"{"millis": 1500}"#.into(),
                idempotency_key: String::new(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stopping = tokio::spawn(registry.stop());

    eventually(Duration::from_secs(5), "health reports NOT_SERVING", || {
        let mut health = health.clone();
        async move {
            health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: "toolmesh.v1.ToolRegistry".into(),
                })
                .await
                .is_ok_and(|r| {
                    r.into_inner().status()
                        == tonic_health::pb::health_check_response::ServingStatus::NotServing
                })
        }
    })
    .await;
    let response = in_flight
        .await
        .expect("task")
        .expect("the call in flight completes");
    assert!(!response.into_inner().is_error);
    stopping.await.expect("stopped");
    let _ = &mut health;
}

/// A tool that counts its runs and takes `millis` to answer.
fn counted_sleep(calls: Arc<AtomicUsize>) -> toolmesh_sidecar::Tool {
    toolmesh_sidecar::sdk::tool("pay", "Pays once per key", move |args: SleepArgs| {
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
        })
        .await
        .expect("replayed");
    assert_eq!(again.into_inner(), results[0]);
    let status = client
        .invoke(pb::InvokeRequest {
            tool: "pay".into(),
            arguments_json: r#"{"millis": 1}"#.into(),
            idempotency_key: "order-42".into(),
        })
        .await
        .expect_err("other arguments");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_idempotency_keys_under_concurrency_run_once() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(3))).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let _a = TestSidecar::start(&registry.url(), "a", vec![counted_sleep(calls.clone())]).await;
    let _b = TestSidecar::start(&registry.url(), "b", vec![counted_sleep(calls.clone())]).await;
    wait_for_instances(&registry, "pay", 2).await;
    same_key_from_many_agents(std::slice::from_ref(&registry), &calls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_idempotency_keys_across_replicas_run_once() {
    let Some(redis) = crate::common::redis_server::RedisServer::start() else {
        return;
    };
    let mut config = config_with_ttl(Duration::from_secs(3));
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
async fn connections_are_reused_and_closed_when_a_sidecar_leaves() {
    let registry = toolmesh_registry::Registry::embedded(config_with_ttl(Duration::from_secs(3)));
    let proxy = registry.proxy().clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(registry.serve(listener, async {
        let _ = stopped.await;
    }));
    let url = format!("http://{addr}");

    let calls = Arc::new(AtomicUsize::new(0));
    let sidecar = TestSidecar::start(&url, "s", vec![add_tool(calls)]).await;
    let mut client = pb::tool_registry_client::ToolRegistryClient::connect(url.clone())
        .await
        .expect("connect");
    eventually(Duration::from_secs(20), "the tool is announced", || {
        let mut client = client.clone();
        async move {
            client
                .get_tool(pb::GetToolRequest { name: "add".into() })
                .await
                .is_ok()
        }
    })
    .await;
    for _ in 0..10 {
        client
            .invoke(pb::InvokeRequest {
                tool: "add".into(),
                arguments_json: r#"{"a":1,"b":1}"#.into(),
                idempotency_key: String::new(),
            })
            .await
            .expect("invoke");
    }
    assert_eq!(proxy.endpoints().len(), 1, "one pooled connection, reused");

    sidecar.stop().await;
    eventually(
        Duration::from_secs(10),
        "the withdrawn sidecar's connection is closed",
        || {
            let proxy = proxy.clone();
            async move { proxy.endpoints().is_empty() }
        },
    )
    .await;
    let _ = stop.send(());
    let _ = server.await;
}
