//! Faults with real processes: sidecars killed (-9) or stopped (SIGSTOP)
//! during bursts, the registry restarted under load, an agent that gives
//! up. A counting HTTP backend proves which side effects ran, and how often.

use std::{
    os::unix::process::ExitStatusExt as _,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use nix::sys::signal::Signal;
use tonic::Code;
use toolmesh_proto::pb;
use toolmesh_test_support::process::{is_dead, send};

use crate::common::{
    processes::{Counter, SidecarProcess, binary, work_tool_yaml},
    *,
};

fn work(tool: &str, id: &str, sleep_ms: u64) -> pb::InvokeRequest {
    invoke(tool, &format!(r#"{{"id":"{id}","sleep_ms":{sleep_ms}}}"#))
}

/// One call of a burst: its id, how long it took, and what came back.
struct Call {
    id: String,
    took: Duration,
    outcome: Result<pb::InvokeResponse, (Code, String)>,
}

impl Call {
    /// The response, if it is a success that carries this call's own id.
    fn answer(&self) -> Option<&pb::InvokeResponse> {
        let response = self.outcome.as_ref().ok()?;
        let value: serde_json::Value = serde_json::from_str(&response.result_json).ok()?;
        (!response.is_error && value["id"] == self.id.as_str()).then_some(response)
    }
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

/// Runs `plan` (agents connected before the first call), with `fault` once
/// `plan.fault_after` calls have completed; panics if the fault never ran.
async fn burst(
    registry: &TestRegistry,
    plan: Plan<'_>,
    fault: impl FnOnce() + Send + 'static,
) -> Vec<Call> {
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let fault = Arc::new(Mutex::new(Some(fault)));
    let mut clients = Vec::new();
    for _ in 0..plan.concurrency {
        clients.push(registry.client().await);
    }
    let mut agents = Vec::new();
    for mut client in clients {
        let (next, done, fault, tool) = (
            next.clone(),
            done.clone(),
            fault.clone(),
            plan.tool.to_owned(),
        );
        let (calls, sleep_ms, deadline, fault_after) =
            (plan.calls, plan.sleep_ms, plan.deadline, plan.fault_after);
        agents.push(tokio::spawn(async move {
            let mut results = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= calls {
                    return results;
                }
                let id = format!("call-{i}");
                let mut request = tonic::Request::new(work(&tool, &id, sleep_ms));
                request.set_timeout(deadline);
                let started = Instant::now();
                let outcome = client
                    .invoke(request)
                    .await
                    .map(tonic::Response::into_inner)
                    .map_err(|s| (s.code(), s.message().to_owned()));
                results.push(Call {
                    id,
                    took: started.elapsed(),
                    outcome,
                });
                if done.fetch_add(1, Ordering::SeqCst) + 1 == fault_after {
                    let fault = fault
                        .lock()
                        .expect("lock")
                        .take()
                        .expect("the fault runs once");
                    fault();
                }
            }
        }));
    }
    let mut calls = Vec::new();
    for agent in agents {
        calls.extend(agent.await.expect("agent"));
    }
    if plan.fault_after <= plan.calls {
        assert!(fault.lock().expect("lock").is_none(), "the fault never ran");
    }
    calls
}

/// A registry, a counting backend, and two sidecar processes `a` and `b`
/// serving `tool` over it; 300 calls from 16 agents, with sidecar `a`
/// killed (-9) after 60 of them. Checks that SIGKILL is what ended `a`.
async fn burst_with_a_kill(tool: &str, idempotent: bool) -> Option<(Vec<Call>, Counter)> {
    let binary = binary("toolmesh-sidecar")?;
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(5))).await;
    let counter = Counter::default();
    let url = counter.serve().await;
    let yaml = work_tool_yaml(tool, &url, idempotent, "10s");
    let mut a = SidecarProcess::start(&binary, &registry.url(), "a", &yaml).await;
    let _b = SidecarProcess::start(&binary, &registry.url(), "b", &yaml).await;
    wait_for_instances(&registry, tool, 2).await;

    let pid = a.pid;
    let plan = Plan {
        tool,
        calls: 300,
        concurrency: 16,
        sleep_ms: 20,
        deadline: Duration::from_secs(10),
        fault_after: 60,
    };
    let calls = burst(&registry, plan, move || send(pid, Signal::SIGKILL)).await;
    let status = a.exited(Duration::from_secs(10)).await;
    assert_eq!(status.signal(), Some(Signal::SIGKILL as i32), "{status}");
    Some((calls, counter))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_burst_to_an_idempotent_tool_loses_no_call() {
    let Some((calls, counter)) = burst_with_a_kill("work", true).await else {
        return;
    };
    let retried = calls
        .iter()
        .filter_map(Call::answer)
        .filter(|r| r.attempts > 1)
        .count();
    eprintln!(
        "kill -9, idempotent tool: calls {}, answered {}, retried after the kill {retried}, executions counted {}",
        calls.len(),
        calls.iter().filter_map(Call::answer).count(),
        counter.total()
    );
    for call in &calls {
        assert!(call.answer().is_some(), "{}: {:?}", call.id, call.outcome);
        assert!(counter.of(&call.id) >= 1, "{} never ran", call.id);
    }
    assert!(
        retried > 0,
        "no call was in flight on the killed instance: the fault hit nothing"
    );
    assert!(counter.total() >= calls.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_never_runs_a_non_idempotent_side_effect_twice() {
    let Some((calls, counter)) = burst_with_a_kill("charge", false).await else {
        return;
    };
    let failed: Vec<&Call> = calls.iter().filter(|c| c.answer().is_none()).collect();
    eprintln!(
        "kill -9, non-idempotent tool: calls {}, answered {}, failed {}, executions counted {}, most executions of one call {}",
        calls.len(),
        calls.len() - failed.len(),
        failed.len(),
        counter.total(),
        counter.max_per_id()
    );
    assert_eq!(counter.max_per_id(), 1, "a side effect ran twice");
    for call in &calls {
        match call.answer() {
            Some(_) => assert_eq!(counter.of(&call.id), 1, "{}", call.id),
            None => {
                let Err((code, message)) = &call.outcome else {
                    panic!(
                        "{}: a success with someone else's result: {:?}",
                        call.id, call.outcome
                    );
                };
                assert_eq!(*code, Code::Unavailable, "{}: {message}", call.id);
            }
        }
    }
    // Only calls already sent to the killed instance may fail: each of the
    // 16 agents had at most one; every later call went to the survivor.
    assert!(
        !failed.is_empty() && failed.len() <= 16,
        "{} calls failed",
        failed.len()
    );
    assert!(counter.total() <= calls.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_sidecar_is_hedged_around_and_its_lease_expires() {
    let Some(binary) = binary("toolmesh-sidecar") else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(config_with_ttl(ttl)).await;
    let counter = Counter::default();
    let url = counter.serve().await;
    let yaml = work_tool_yaml("work", &url, true, "10s");
    let a = SidecarProcess::start(&binary, &registry.url(), "a", &yaml).await;
    let _b = SidecarProcess::start(&binary, &registry.url(), "b", &yaml).await;
    wait_for_instances(&registry, "work", 2).await;

    a.signal(Signal::SIGSTOP);
    let deadline = Duration::from_secs(4);
    let calls = burst(
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
    let hedged: Vec<&Call> = calls
        .iter()
        .filter(|c| c.answer().is_some_and(|r| r.attempts == 2))
        .collect();
    eprintln!(
        "SIGSTOP: calls {}, answered {}, hedged {}, slowest {:?}",
        calls.len(),
        calls.iter().filter_map(Call::answer).count(),
        hedged.len(),
        calls.iter().map(|c| c.took).max()
    );
    for call in &calls {
        let response = call
            .answer()
            .unwrap_or_else(|| panic!("{} failed: {:?}", call.id, call.outcome));
        assert_eq!(
            response.instance_id, "b",
            "{}: the stopped instance cannot answer",
            call.id
        );
        assert!(
            response.attempts <= 2,
            "{}: {} attempts",
            call.id,
            response.attempts
        );
    }
    // Calls that first went to the stopped instance were hedged at half
    // their deadline; the instance is then ejected and no longer picked.
    assert!(!hedged.is_empty(), "no call was hedged");
    for call in &hedged {
        assert!(
            call.took >= deadline * 2 / 5,
            "{}: hedged after {:?}",
            call.id,
            call.took
        );
    }
    assert!(
        hedged.len() < calls.len() / 2,
        "{} of {} hedged",
        hedged.len(),
        calls.len()
    );

    // The stopped sidecar no longer heartbeats: its lease expires.
    wait_for_instances(&registry, "work", 1).await;
    a.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_restart_during_a_burst_needs_no_sidecar_restart() {
    let Some(binary) = binary("toolmesh-sidecar") else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start_restartable(config_with_ttl(ttl)).await;
    let addr = registry.addr;
    let counter = Counter::default();
    let url = counter.serve().await;
    let yaml = work_tool_yaml("work", &url, true, "5s");
    let mut a = SidecarProcess::start(&binary, &registry.url(), "a", &yaml).await;
    let mut b = SidecarProcess::start(&binary, &registry.url(), "b", &yaml).await;
    wait_for_instances(&registry, "work", 2).await;

    // Agents keep calling, reconnecting after failures, while the registry
    // restarts; only answers after the restart count.
    let stop = Arc::new(AtomicBool::new(false));
    let answered_after_restart = Arc::new(AtomicUsize::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    let mut agents = Vec::new();
    for n in 0..4 {
        let (stop, answered, restarted) = (
            stop.clone(),
            answered_after_restart.clone(),
            restarted.clone(),
        );
        let url = format!("http://{addr}");
        agents.push(tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
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
                        Ok(response) if !response.get_ref().is_error => {
                            if restarted.load(Ordering::SeqCst) {
                                answered.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(response) => panic!("tool error: {}", response.into_inner().result_json),
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            break;
                        }
                    }
                }
            }
        }));
    }
    eventually(
        Duration::from_secs(10),
        "calls before the restart",
        || async { counter.total() >= 20 },
    )
    .await;
    registry.stop().await;
    let registry = TestRegistry::start_at(addr, config_with_ttl(ttl)).await;
    restarted.store(true, Ordering::SeqCst);
    let restart = Instant::now();
    wait_for_instances(&registry, "work", 2).await;
    let took = restart.elapsed();
    eventually(
        Duration::from_secs(20),
        "agents' calls succeed again",
        || {
            let answered = answered_after_restart.clone();
            async move { answered.load(Ordering::SeqCst) >= 20 }
        },
    )
    .await;
    stop.store(true, Ordering::SeqCst);
    for agent in agents {
        agent.await.expect("agent");
    }
    eprintln!("registry restarted under load: both sidecars back after {took:?}, same processes");
    assert!(a.is_running() && b.is_running(), "a sidecar exited");
    for sidecar in [&a, &b] {
        let log = sidecar.log();
        assert!(
            log.matches("announced to the registry").count() >= 2,
            "the sidecar announced again by itself:\n{log}"
        );
    }
    let response = registry
        .client()
        .await
        .invoke(work("work", "final", 0))
        .await
        .expect("a call after the restart")
        .into_inner();
    assert!(!response.is_error, "{}", response.result_json);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_stops_the_backend() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(5))).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let yaml = format!(
        r#"tools:
  - name: slow
    description: Writes its pid, then takes long
    timeout: 30s
    backend:
      command: ["sh", "-c", "echo $$ > {}.tmp && mv {}.tmp {}; exec sleep 30"]
"#,
        pidfile.display(),
        pidfile.display(),
        pidfile.display()
    );
    let tools = toolmesh_sidecar::config::SidecarConfig::from_yaml_str(&yaml)
        .expect("config")
        .build_tools(dir.path())
        .expect("tools");
    let _sidecar = TestSidecar::start(&registry.url(), "s", tools).await;
    wait_for_instances(&registry, "slow", 1).await;

    let mut client = registry.client().await;
    let call = tokio::spawn(async move { client.invoke(invoke("slow", "{}")).await });
    let mut pid = None;
    wait_until(Duration::from_secs(10), "the backend starts", || {
        pid = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        pid.is_some()
    })
    .await;
    let pid = pid.expect("pid");
    assert!(!is_dead(pid), "the backend runs");

    // The agent gives up: the registry's call, the sidecar's Execute and the
    // process all stop.
    call.abort();
    let cancelled = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "the backend process is gone",
        || is_dead(pid),
    )
    .await;
    eprintln!(
        "backend stopped {:?} after the agent cancelled",
        cancelled.elapsed()
    );
}
