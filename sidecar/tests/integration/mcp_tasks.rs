//! Tasks passed through to an MCP server that hosts them (the Tasks
//! extension, `io.modelcontextprotocol/tasks`, on 2026-07-28): a server
//! written with the official Python SDK (`tests/mcp/tasks_server.py`, over
//! streamable HTTP) behind the `toolmesh-sidecar` binary, its tool's tasks
//! started, watched and cancelled through the real registry's `Tasks`
//! service. The server writes what it received to a file the tests read:
//! a call that became its task, each `tasks/get`, `tasks/cancel`, a plain
//! call, and any `notifications/cancelled` (which no task may get).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tonic::transport::Channel;
use toolmesh_proto::pb;
use toolmesh_proto::pb::tasks_client::TasksClient;
use toolmesh_test_support::mcp::python_with_sdk;

use crate::common::{
    SidecarProcess, TestRegistry, binary, catalog, eventually, reserved_port, wait_until,
};
use crate::mcp::{TTL, ran, wait_for_all};

/// How long a test waits for what must happen (Python starts in seconds,
/// and the machine is busy).
const PATIENCE: Duration = Duration::from_secs(60);
/// The server's suggested poll interval (`tasks_server.py`).
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// `tasks_server.py` on a loopback port, killed when dropped, writing
/// what it receives to `events`.
struct TasksServer {
    _child: tokio::process::Child,
    port: u16,
    events: PathBuf,
    _dir: tempfile::TempDir,
}

impl TasksServer {
    async fn start(python: &str) -> Self {
        let port = reserved_port();
        let dir = tempfile::tempdir().expect("a temp dir");
        let events = dir.path().join("events.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/tasks_server.py");
        let child = tokio::process::Command::new(python)
            .arg(script)
            .arg(port.to_string())
            .arg(&events)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Python MCP server");
        eventually(PATIENCE, "the Python MCP server to listen", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
        Self {
            _child: child,
            port,
            events,
            _dir: dir,
        }
    }

    /// Every event of kind `event` the server wrote so far.
    fn events(&self, event: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|e| e["event"] == event)
            .collect()
    }

    /// The server's id of the `n`-th call that became its task.
    async fn task_id(&self, n: usize) -> String {
        wait_until(PATIENCE, "the server to make a task", || {
            self.events("task").len() > n
        })
        .await;
        self.events("task")[n]["taskId"]
            .as_str()
            .expect("a task id")
            .to_owned()
    }

    /// Waits until the server received `tasks/cancel` for its task `id`.
    async fn cancelled(&self, id: &str) {
        wait_until(PATIENCE, "the server to receive tasks/cancel", || {
            self.events("cancel")
                .iter()
                .any(|e| e["taskId"] == id && e["known"] == true)
        })
        .await;
        wait_until(PATIENCE, "the server to stop the task's work", || {
            self.events("stopped").iter().any(|e| e["taskId"] == id)
        })
        .await;
    }
}

/// The server, a registry and a sidecar wrapping the server twice: as
/// `py.` (tasks may run 2 minutes) and as `short.` (3 s).
struct Setup {
    server: TasksServer,
    registry: TestRegistry,
    tasks: TasksClient<Channel>,
    _sidecar: SidecarProcess,
}

impl Setup {
    async fn start() -> Option<Self> {
        let (Some(bin), Some(python)) = (binary("toolmesh-sidecar"), python_with_sdk()) else {
            return None;
        };
        let server = TasksServer::start(&python).await;
        let registry = TestRegistry::start(TTL).await;
        let entry = |prefix: &str, task_timeout: &str| {
            format!(
                "  - backend:\n      mcp:\n        url: http://127.0.0.1:{}/mcp\n        prefix: {prefix}\n        relist_interval: 1h\n    task_timeout: {task_timeout}\n",
                server.port
            )
        };
        let yaml = format!("tools:\n{}{}", entry("py.", "120s"), entry("short.", "3s"));
        let sidecar = SidecarProcess::start(&bin, &registry.url(), "tasks", &yaml).await;
        wait_for_all(&registry, &["py.report", "short.report"]).await;
        let tasks = TasksClient::connect(registry.url())
            .await
            .expect("connect to the registry");
        Some(Self {
            server,
            registry,
            tasks,
            _sidecar: sidecar,
        })
    }

    async fn start_task(&self, tool: &str, arguments: &Value) -> pb::Task {
        self.tasks
            .clone()
            .start_task(pb::StartTaskRequest {
                call: Some(catalog::invoke(tool, &arguments.to_string())),
            })
            .await
            .expect("the task starts")
            .into_inner()
    }

    /// Watches the task `id` until `wanted` holds, within [`PATIENCE`];
    /// returns it then.
    async fn watch_until(
        &self,
        id: &str,
        what: &str,
        wanted: impl Fn(&pb::Task) -> bool,
    ) -> pb::Task {
        crate::common::watch_until(self.tasks.clone(), id, what, PATIENCE, wanted).await
    }

    async fn finished(&self, id: &str) -> pb::Task {
        self.watch_until(id, "the task ends", |t| {
            !matches!(
                state(t),
                pb::TaskState::Working | pb::TaskState::InputRequired
            )
        })
        .await
    }
}

fn state(task: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(task.state).unwrap_or(pb::TaskState::Unspecified)
}

fn response(task: &pb::Task) -> &pb::InvokeResponse {
    match &task.outcome {
        Some(pb::task::Outcome::Response(response)) => response,
        other => panic!("no response: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_servers_own_task_completes_with_its_result_and_progress() {
    let Some(setup) = Setup::start().await else {
        return;
    };
    let server = &setup.server;

    // Three steps of a second: the server's status messages are the
    // task's progress (a message, no fraction), its result the task's.
    let started = Instant::now();
    let task = setup
        .start_task("py.report", &json!({"steps": 3, "step_seconds": 1.0}))
        .await;
    let working = setup
        .watch_until(&task.id, "the server's status message as progress", |t| {
            t.progress
                .as_ref()
                .is_some_and(|p| p.message == "step 2 of 3")
        })
        .await;
    assert_eq!(state(&working), pb::TaskState::Working, "{working:?}");
    assert_eq!(working.progress.and_then(|p| p.fraction), None);
    let done = setup.finished(&task.id).await;
    let took = started.elapsed();
    assert_eq!(state(&done), pb::TaskState::Completed, "{done:?}");
    let answer = response(&done);
    assert!(!answer.is_error, "{}", answer.result_json);
    assert_eq!(ran(answer), json!({"result": "report of 3 steps"}));

    // The server ran a task, not a plain call, and was polled at its
    // interval (not faster), with no notifications/cancelled.
    let id = server.task_id(0).await;
    assert_eq!(server.events("task")[0]["tool"], "report");
    let gets = server.events("get");
    assert!(gets.iter().all(|g| g["taskId"] == id.as_str()), "{gets:?}");
    let most = took.as_millis() / POLL_INTERVAL.as_millis() + 2;
    assert!(
        gets.len() >= 2 && gets.len() as u128 <= most,
        "{} polls in {took:?}",
        gets.len()
    );
    assert!(server.events("call").is_empty());
    assert!(server.events("cancelled").is_empty());

    // A task that fails with a JSON-RPC error completes with a tool error
    // carrying its message.
    let task = setup
        .start_task(
            "py.report",
            &json!({"steps": 1, "step_seconds": 0.1, "fail": true}),
        )
        .await;
    let done = setup.finished(&task.id).await;
    assert_eq!(state(&done), pb::TaskState::Completed, "{done:?}");
    let answer = response(&done);
    assert!(answer.is_error, "{}", answer.result_json);
    assert!(
        answer
            .result_json
            .contains("the MCP server's task failed: the report's data source is gone"),
        "{}",
        answer.result_json
    );

    // An agent waiting on the same tool gets a plain answer: the extension
    // is offered to tasks only.
    let plain = setup
        .registry
        .invoke("py.report", r#"{"steps": 1, "step_seconds": 0.1}"#)
        .await
        .expect("ran");
    assert!(!plain.is_error, "{}", plain.result_json);
    assert_eq!(ran(&plain), json!({"result": "report of 1 steps"}));
    let calls = server.events("call");
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0]["tool"], "report");
    assert_eq!(server.events("task").len(), 2, "no task for the plain call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_or_timed_out_task_is_cancelled_on_the_server_with_tasks_cancel() {
    let Some(setup) = Setup::start().await else {
        return;
    };
    let server = &setup.server;

    // CancelTask: the server receives tasks/cancel for its task and stops
    // the work.
    let task = setup
        .start_task("py.report", &json!({"steps": 60, "step_seconds": 1.0}))
        .await;
    setup
        .watch_until(&task.id, "the task to report progress", |t| {
            t.progress
                .as_ref()
                .is_some_and(|p| p.message.starts_with("step "))
        })
        .await;
    let at = Instant::now();
    let cancelled = setup
        .tasks
        .clone()
        .cancel_task(pb::CancelTaskRequest {
            id: task.id.clone(),
        })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(state(&cancelled), pb::TaskState::Cancelled, "{cancelled:?}");
    let first = server.task_id(0).await;
    server.cancelled(&first).await;
    eprintln!(
        "the server received tasks/cancel and stopped {:?} after CancelTask was sent",
        at.elapsed()
    );

    // Past its 3 s task timeout: the task fails DEADLINE_EXCEEDED, and the
    // server's task is cancelled the same way.
    let task = setup
        .start_task("short.report", &json!({"steps": 60, "step_seconds": 1.0}))
        .await;
    let done = setup.finished(&task.id).await;
    assert_eq!(state(&done), pb::TaskState::Failed, "{done:?}");
    match &done.outcome {
        Some(pb::task::Outcome::Error(error)) => {
            assert_eq!(
                tonic::Code::from(error.code),
                tonic::Code::DeadlineExceeded,
                "{error:?}"
            );
        }
        other => panic!("no error: {other:?}"),
    }
    let second = server.task_id(1).await;
    assert_ne!(first, second);
    server.cancelled(&second).await;

    // A task is never sent notifications/cancelled.
    assert!(server.events("cancelled").is_empty());
    assert!(server.events("call").is_empty());
}
