//! Tasks end to end (docs/tasks.md): started through the front door, run by
//! a real sidecar with no request open, reported to any replica; cancelled
//! down to the backend; failed when the sidecar dies; collected from another
//! replica after the one that started it was killed.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tonic::Code;
use toolmesh_proto::pb::{self, tasks_client::TasksClient};
use toolmesh_registry::Config;
use toolmesh_test_support::process::{SidecarProcess, binaries, is_dead, send};
use toolmesh_test_support::registry_process::RegistryProcess;

use crate::common::*;

async fn tasks(url: &str) -> TasksClient<tonic::transport::Channel> {
    TasksClient::connect(url.to_owned()).await.expect("connect")
}

fn start(tool: &str, arguments: &str, key: &str) -> pb::StartTaskRequest {
    pb::StartTaskRequest {
        call: Some(pb::InvokeRequest {
            tool: tool.into(),
            arguments_json: arguments.into(),
            idempotency_key: key.into(),
            tool_digest: String::new(),
            ..Default::default()
        }),
    }
}

fn state(task: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(task.state).unwrap_or(pb::TaskState::Unspecified)
}

/// Follows `id` on `client` until it is over (within `within`): every
/// task the stream sent.
async fn follow(
    client: &mut TasksClient<tonic::transport::Channel>,
    id: &str,
    within: Duration,
) -> Vec<pb::Task> {
    let mut request = tonic::Request::new(pb::WatchTaskRequest { id: id.into() });
    request.set_timeout(within);
    let mut stream = client
        .watch_task(request)
        .await
        .expect("watch")
        .into_inner();
    let mut seen = Vec::new();
    while let Some(task) = stream.message().await.expect("the stream goes on") {
        seen.push(task);
    }
    let last = seen.last().expect("at least the task as it was");
    assert!(
        matches!(
            state(last),
            pb::TaskState::Completed | pb::TaskState::Failed | pb::TaskState::Cancelled
        ),
        "the stream ends after the end: {last:?}"
    );
    seen
}

fn response(task: &pb::Task) -> &pb::InvokeResponse {
    match &task.outcome {
        Some(pb::task::Outcome::Response(response)) => response,
        other => panic!("no response: {other:?} in {task:?}"),
    }
}

fn error(task: &pb::Task) -> &pb::TaskError {
    match &task.outcome {
        Some(pb::task::Outcome::Error(error)) => error,
        other => panic!("no error: {other:?} in {task:?}"),
    }
}

/// A command tool that takes `seconds`, reporting progress half way, then
/// answers `{"done": true}`; its interactive timeout (1 s) is far shorter.
pub(crate) fn long_tool_yaml(seconds: u32) -> String {
    format!(
        r#"tools:
  - name: long
    description: Takes a while, then says it is done
    timeout: 1s
    task_timeout: 60s
    backend:
      command: ["sh", "-c", "echo 'toolmesh-progress {{\"fraction\": 0.5, \"message\": \"half way\"}}' >&2; sleep {seconds}; echo '{{\"done\": true}}'"]
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_outlives_the_interactive_timeout_and_reports_progress() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(5))).await;
    let _sidecar =
        TestSidecar::start(&registry.url(), "s", command_tools(&long_tool_yaml(2))).await;
    wait_for_instances(&registry, "long", 1).await;

    // Invoke gives up at the tool's timeout ...
    let invoked = registry
        .client()
        .await
        .invoke(invoke("long", "{}"))
        .await
        .expect_err("a 2 s call within a 1 s timeout");
    assert_eq!(invoked.code(), Code::DeadlineExceeded);

    // ... a task does not.
    let mut client = tasks(&registry.url()).await;
    let task = client
        .start_task(start("long", "{}", ""))
        .await
        .expect("start")
        .into_inner();
    assert_eq!(state(&task), pb::TaskState::Working);
    assert_eq!(task.tool, "long");
    assert!(task.id.len() >= 32, "an unguessable id: {}", task.id);
    let seen = follow(&mut client, &task.id, Duration::from_secs(30)).await;
    let last = seen.last().expect("the end");
    assert_eq!(state(last), pb::TaskState::Completed);
    assert_eq!(response(last).result_json, r#"{"done": true}"#);
    assert_eq!(response(last).instance_id, "s");
    assert!(
        seen.iter().any(|t| t
            .progress
            .as_ref()
            .is_some_and(|p| p.fraction == Some(0.5) && p.message == "half way")),
        "the progress the command printed reached the agent: {seen:?}"
    );
    let revisions: Vec<u64> = seen.iter().map(|t| t.revision).collect();
    assert!(revisions.windows(2).all(|w| w[0] < w[1]), "{revisions:?}");

    // Kept after its end, listed, gettable; unknown ids are NOT_FOUND.
    let got = client
        .get_task(pb::GetTaskRequest {
            id: task.id.clone(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(&got, last);
    let listed = client
        .list_tasks(pb::ListTasksRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(
        listed.tasks.first().map(|t| t.id.as_str()),
        Some(task.id.as_str())
    );
    let unknown = client
        .get_task(pb::GetTaskRequest { id: "nope".into() })
        .await
        .expect_err("unknown");
    assert_eq!(unknown.code(), Code::NotFound);

    // A cancel of a finished task changes nothing.
    let cancelled = client
        .cancel_task(pb::CancelTaskRequest { id: task.id })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(&cancelled, last);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_door_applies_to_a_task_start() {
    let config = Config {
        max_tasks_per_caller: 1,
        ..config_with_ttl(Duration::from_secs(5))
    };
    let registry = TestRegistry::start(config).await;
    let yaml = r#"tools:
  - name: strict
    description: Takes one number
    task_timeout: 30s
    input_schema: {type: object, properties: {n: {type: integer}}, required: [n], additionalProperties: false}
    backend:
      command: ["sleep", "20"]
"#;
    let _sidecar = TestSidecar::start(&registry.url(), "s", command_tools(yaml)).await;
    wait_for_instances(&registry, "strict", 1).await;
    let mut client = tasks(&registry.url()).await;

    let invalid = client
        .start_task(start("strict", r#"{"n": "x"}"#, ""))
        .await
        .expect_err("invalid arguments");
    assert_eq!(invalid.code(), Code::InvalidArgument);
    let unknown = client
        .start_task(start("missing", "{}", ""))
        .await
        .expect_err("unknown tool");
    assert_eq!(unknown.code(), Code::NotFound);
    let empty = client
        .start_task(pb::StartTaskRequest { call: None })
        .await
        .expect_err("no call");
    assert_eq!(empty.code(), Code::InvalidArgument);

    let first = client
        .start_task(start("strict", r#"{"n": 1}"#, "k1"))
        .await
        .expect("start")
        .into_inner();
    let again = client
        .start_task(start("strict", r#"{"n": 1}"#, "k1"))
        .await
        .expect("a repeat")
        .into_inner();
    assert_eq!(again.id, first.id, "a repeated key gives the same task");
    let full = client
        .start_task(start("strict", r#"{"n": 2}"#, ""))
        .await
        .expect_err("one live task per caller");
    assert_eq!(full.code(), Code::ResourceExhausted);
    assert!(
        full.message().contains("max-tasks-per-caller"),
        "{}",
        full.message()
    );

    // Cancelled, it frees its place.
    let cancelled = client
        .cancel_task(pb::CancelTaskRequest {
            id: first.id.clone(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(state(&cancelled), pb::TaskState::Cancelled);
    assert_eq!(error(&cancelled).code, Code::Cancelled as i32);
    client
        .start_task(start("strict", r#"{"n": 3}"#, ""))
        .await
        .expect("room again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_come_only_from_the_tasks_instance_and_end_it_once() {
    let registry = TestRegistry::start(config_with_ttl(Duration::from_secs(5))).await;
    let yaml = r#"tools:
  - name: slow
    description: Takes long
    task_timeout: 30s
    backend:
      command: ["sleep", "20"]
"#;
    let _sidecar = TestSidecar::start(&registry.url(), "s", command_tools(yaml)).await;
    wait_for_instances(&registry, "slow", 1).await;
    let task = tasks(&registry.url())
        .await
        .start_task(start("slow", "{}", ""))
        .await
        .expect("start")
        .into_inner();
    let mut registration = registry.registration().await;
    let forged = registration
        .report_task(pb::ReportTaskRequest {
            task_id: task.id.clone(),
            report_token: vec![7; 32],
            report: Some(pb::report_task_request::Report::Response(
                pb::ExecuteResponse {
                    result_json: "\"forged\"".into(),
                    ..Default::default()
                },
            )),
        })
        .await
        .expect_err("a token that is not the task's");
    assert_eq!(forged.code(), Code::PermissionDenied);
    let unknown = registration
        .report_task(pb::ReportTaskRequest {
            task_id: "nope".into(),
            report_token: vec![7; 32],
            report: None,
        })
        .await
        .expect_err("an unknown task");
    assert_eq!(unknown.code(), Code::NotFound);
    let now = tasks(&registry.url())
        .await
        .get_task(pb::GetTaskRequest { id: task.id })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(
        state(&now),
        pb::TaskState::Working,
        "nothing forged reached it"
    );
}

/// The `sh` that writes its pid to `pidfile`, then sleeps.
fn pid_tool_yaml(pidfile: &std::path::Path) -> String {
    format!(
        r#"tools:
  - name: slow
    description: Writes its pid, then takes long
    task_timeout: 60s
    backend:
      command: ["sh", "-c", "echo $$ > {p}.tmp && mv {p}.tmp {p}; exec sleep 30"]
"#,
        p = pidfile.display()
    )
}

async fn pid_in(pidfile: &std::path::Path) -> u32 {
    let mut pid = None;
    wait_until(Duration::from_secs(15), "the backend starts", || {
        pid = std::fs::read_to_string(pidfile)
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok());
        pid.is_some()
    })
    .await;
    pid.expect("a pid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_the_command_backend() {
    let dir = tempfile::tempdir().expect("temp dir");
    let audit = dir.path().join("audit.jsonl");
    let registry = TestRegistry::start(Config {
        audit_log: Some(audit.to_string_lossy().into_owned()),
        ..config_with_ttl(Duration::from_secs(5))
    })
    .await;
    let pidfile = dir.path().join("pid");
    let _sidecar = TestSidecar::start(
        &registry.url(),
        "s",
        command_tools(&pid_tool_yaml(&pidfile)),
    )
    .await;
    wait_for_instances(&registry, "slow", 1).await;
    let mut client = tasks(&registry.url()).await;
    let task = client
        .start_task(start("slow", "{}", ""))
        .await
        .expect("start")
        .into_inner();
    let pid = pid_in(&pidfile).await;
    assert!(!is_dead(pid), "the backend runs");
    let cancelled = client
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(state(&cancelled), pb::TaskState::Cancelled);
    let at = Instant::now();
    wait_until(
        Duration::from_secs(10),
        "the backend process is gone",
        || is_dead(pid),
    )
    .await;
    eprintln!("backend stopped {:?} after the cancel", at.elapsed());

    // The start and the end are audited, naming the task.
    let mut lines = Vec::new();
    wait_until(Duration::from_secs(10), "the task's audit records", || {
        lines = std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .collect();
        lines.iter().any(|l| l["kind"] == "task")
    })
    .await;
    let started = lines
        .iter()
        .find(|l| l["kind"] == "invoke")
        .expect("the start's record");
    assert_eq!(started["task"], task.id.as_str(), "{started}");
    assert_eq!(started["tool"], "slow");
    let ended = lines
        .iter()
        .find(|l| l["kind"] == "task")
        .expect("the end's record");
    assert_eq!(ended["task"], task.id.as_str(), "{ended}");
    assert_eq!(ended["state"], "cancelled", "{ended}");
    assert_eq!(ended["outcome"], "cancelled", "{ended}");
    assert_eq!(ended["ended_by"], "cancel", "{ended}");
    assert_eq!(ended["instance"], "s", "{ended}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_killed_mid_task_fails_the_task_within_a_ttl() {
    let Some((_, sidecar_binary)) = binaries() else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(config_with_ttl(ttl)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let pidfile = dir.path().join("pid");
    let sidecar = SidecarProcess::start(
        &sidecar_binary,
        &registry.url(),
        "doomed",
        &pid_tool_yaml(&pidfile),
    )
    .await;
    wait_for_instances(&registry, "slow", 1).await;
    let mut client = tasks(&registry.url()).await;
    let task = client
        .start_task(start("slow", "{}", ""))
        .await
        .expect("start")
        .into_inner();
    pid_in(&pidfile).await;
    sidecar.signal(Signal::SIGKILL);
    let killed = Instant::now();
    let seen = follow(&mut client, &task.id, Duration::from_secs(30)).await;
    let last = seen.last().expect("the end");
    let took = killed.elapsed();
    assert_eq!(state(last), pb::TaskState::Failed, "{last:?}");
    assert_eq!(error(last).code, Code::Unavailable as i32, "{last:?}");
    assert!(error(last).message.contains("doomed"), "{last:?}");
    // One TTL for the lease, the janitor's grace and tick, and slack for a
    // busy machine.
    assert!(took < ttl + Duration::from_secs(8), "failed after {took:?}");
    eprintln!("the task failed {took:?} after its sidecar was killed (lease TTL {ttl:?})");
    drop(sidecar);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_completes_while_the_replica_that_started_it_is_killed() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let Some((registry_binary, sidecar_binary)) = binaries() else {
        return;
    };
    let url = redis.url();
    let args = [
        "--listen",
        "127.0.0.1:0",
        "--redis",
        url.as_str(),
        "--redis-prefix",
        "tasks-kill",
        "--lease-ttl",
        "5s",
    ];
    let (starter, starter_addr) = RegistryProcess::start(&registry_binary, &args, &[]).await;
    let (_survivor, survivor_addr) = RegistryProcess::start(&registry_binary, &args, &[]).await;
    let survivor_url = format!("http://{survivor_addr}");
    // The sidecar reaches the registry through the survivor, as a Service
    // would once the starter's pod is gone.
    let _sidecar =
        SidecarProcess::start(&sidecar_binary, &survivor_url, "worker", &long_tool_yaml(6)).await;
    let starter_url = format!("http://{starter_addr}");
    let mut starter_client = tasks(&starter_url).await;
    let started = eventually_start(&mut starter_client).await;
    assert_eq!(state(&started), pb::TaskState::Working);

    send(starter.pid(), Signal::SIGKILL);
    drop(starter);

    let mut survivor_client = tasks(&survivor_url).await;
    let seen = follow(&mut survivor_client, &started.id, Duration::from_secs(40)).await;
    let last = seen.last().expect("the end");
    assert_eq!(state(last), pb::TaskState::Completed, "{last:?}");
    assert_eq!(response(last).result_json, r#"{"done": true}"#);
    assert_eq!(last.created_at, started.created_at, "the same task");
}

/// Starts the long tool, once the starter's catalog has it.
async fn eventually_start(client: &mut TasksClient<tonic::transport::Channel>) -> pb::Task {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.start_task(start("long", "{}", "")).await {
            Ok(task) => return task.into_inner(),
            Err(status) if status.code() == Code::NotFound && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("start: {status:?}"),
        }
    }
}

/// An idempotent command tool that writes its pid to `pidfile`, takes
/// `seconds`, then answers the arguments it was given.
fn idempotent_tool_yaml(pidfile: &std::path::Path, seconds: u32) -> String {
    format!(
        r#"tools:
  - name: rebuild
    description: Writes its pid, takes a while, then answers its arguments
    idempotent: true
    task_timeout: 60s
    backend:
      command: ["sh", "-c", "echo $$ > {p}.tmp && mv {p}.tmp {p}; sleep {seconds}; cat"]
"#,
        p = pidfile.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_tools_task_runs_again_on_another_instance_when_its_own_dies() {
    let Some((_, sidecar_binary)) = binaries() else {
        return;
    };
    let ttl = Duration::from_secs(3);
    let registry = TestRegistry::start(config_with_ttl(ttl)).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (first_pid, second_pid) = (dir.path().join("first"), dir.path().join("second"));
    let first = SidecarProcess::start(
        &sidecar_binary,
        &registry.url(),
        "first",
        &idempotent_tool_yaml(&first_pid, 30),
    )
    .await;
    wait_for_instances(&registry, "rebuild", 1).await;
    let mut client = tasks(&registry.url()).await;
    let arguments = r#"{"target":"docs"}"#;
    let task = client
        .start_task(start("rebuild", arguments, ""))
        .await
        .expect("start")
        .into_inner();
    pid_in(&first_pid).await;

    // A second instance joins; the first dies mid-task.
    let _second = SidecarProcess::start(
        &sidecar_binary,
        &registry.url(),
        "second",
        &idempotent_tool_yaml(&second_pid, 2),
    )
    .await;
    wait_for_instances(&registry, "rebuild", 2).await;
    first.signal(Signal::SIGKILL);
    let killed = Instant::now();

    let seen = follow(&mut client, &task.id, Duration::from_secs(40)).await;
    let last = seen.last().expect("the end");
    assert_eq!(state(last), pb::TaskState::Completed, "{last:?}");
    assert_eq!(response(last).instance_id, "second", "{last:?}");
    assert_eq!(
        response(last).result_json,
        arguments,
        "the same arguments, kept with the task"
    );
    assert_eq!(last.id, task.id, "the same task");
    pid_in(&second_pid).await;
    eprintln!(
        "the task completed on another instance {:?} after its own was killed (lease TTL {ttl:?})",
        killed.elapsed()
    );
    drop(first);
}
