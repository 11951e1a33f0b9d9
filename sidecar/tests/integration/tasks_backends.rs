//! Tasks on each kind of backend, end to end: the real registry
//! in-process starts them (`Tasks.StartTask`) on a real sidecar, whose
//! backend is a real HTTP server on loopback streaming its answer as
//! Server-Sent Events, or a Rust handler. The progress the backend reports
//! reaches the registry (`WatchTask`), the streamed result completes the
//! task, and `CancelTask` reaches the backend: the HTTP server sees its
//! response dropped before it finished, the handler's future is dropped.
//! (The command backend's cancel is the registry's own test,
//! `registry/tests/integration/tasks.rs`.)

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use tokio::sync::mpsc;
use toolmesh_proto::pb;
use toolmesh_sidecar::sdk::{self, CallContext, ToolError};

use crate::common::{LoopbackServer, TestRegistry, loopback_listener, sidecar, tools_from_yaml};

/// How long a test waits for what must happen (a busy 2-core machine).
const PATIENCE: Duration = Duration::from_secs(30);

/// One POST the streaming server received: its headers, and where the
/// test writes its response body (closed once the response is dropped).
struct Call {
    headers: HeaderMap,
    body: mpsc::Sender<Result<Bytes, Infallible>>,
}

/// An HTTP tool's server on loopback: every POST is answered 200,
/// `text/event-stream`, with a body the test writes through the [`Call`]
/// it receives.
async fn streaming_server() -> (LoopbackServer, mpsc::Receiver<Call>) {
    let (calls, received) = mpsc::channel::<Call>(4);
    let app = Router::new().route(
        "/stream",
        post(move |headers: HeaderMap| {
            let calls = calls.clone();
            async move {
                let (body, chunks) = mpsc::channel(16);
                calls
                    .send(Call { headers, body })
                    .await
                    .expect("the test takes the call");
                Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(
                        tokio_stream::wrappers::ReceiverStream::new(chunks),
                    ))
                    .expect("a response")
            }
        }),
    );
    let server =
        LoopbackServer::spawn(loopback_listener().await, |listener, shutdown| async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
        });
    (server, received)
}

/// A registry, and a sidecar serving the HTTP tool `stream` posting to
/// `server`; returns both once the registry knows the tool.
async fn with_http_tool(server: &LoopbackServer) -> (TestRegistry, LoopbackServer) {
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let yaml = format!(
        r#"tools:
  - name: stream
    description: Streams its progress, then its result
    timeout: 2s
    task_timeout: 120s
    backend:
      http: {{url: "{}/stream"}}
"#,
        server.url()
    );
    let dir = tempfile::tempdir().expect("a temp dir");
    let tools = tools_from_yaml(&yaml, dir.path());
    let sidecar = sidecar(&registry.url(), "s", tools).await;
    registry.wait_for_instances("stream", 1, PATIENCE).await;
    (registry, sidecar)
}

/// Starts a task of `tool`.
async fn start(registry: &TestRegistry, tool: &str) -> pb::Task {
    registry
        .tasks()
        .start_task(pb::StartTaskRequest {
            call: Some(toolmesh_test_support::catalog::invoke(tool, "{}")),
        })
        .await
        .expect("the task starts")
        .into_inner()
}

fn state(task: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(task.state).unwrap_or(pb::TaskState::Unspecified)
}

/// Watches the task `id` until it is as `wanted` says, within
/// [`PATIENCE`]; returns it then.
async fn watch_until(
    registry: &TestRegistry,
    id: &str,
    what: &str,
    wanted: impl Fn(&pb::Task) -> bool,
) -> pb::Task {
    crate::common::watch_until(registry.tasks(), id, what, PATIENCE, wanted).await
}

fn has_progress(task: &pb::Task, fraction: f64, message: &str) -> bool {
    task.progress
        .as_ref()
        .is_some_and(|p| p.fraction == Some(fraction) && p.message == message)
}

async fn cancel(registry: &TestRegistry, id: &str) -> pb::Task {
    let cancelled = registry
        .tasks()
        .cancel_task(pb::CancelTaskRequest { id: id.into() })
        .await
        .expect("cancel")
        .into_inner();
    assert_eq!(state(&cancelled), pb::TaskState::Cancelled, "{cancelled:?}");
    cancelled
}

/// One event of the stream.
fn event(name: &str, data: &str) -> Result<Bytes, Infallible> {
    Ok(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_tasks_streamed_progress_and_result_complete_it() {
    let (server, mut calls) = streaming_server().await;
    let (registry, _sidecar) = with_http_tool(&server).await;
    let task = start(&registry, "stream").await;
    let call = tokio::time::timeout(PATIENCE, calls.recv())
        .await
        .expect("the backend is called")
        .expect("a call");
    assert_eq!(
        call.headers.get("accept").and_then(|v| v.to_str().ok()),
        Some(toolmesh_sidecar::backend::http::ACCEPT_VALUE)
    );

    // A comment, a malformed progress event (ignored), then progress: the
    // result waits until the registry has the progress.
    for chunk in [
        Ok(Bytes::from_static(b": the work starts\n\n")),
        event("progress", "half"),
        event("progress", r#"{"fraction": 0.5, "message": "half way"}"#),
    ] {
        call.body.send(chunk).await.expect("the response is read");
    }
    let working = watch_until(
        &registry,
        &task.id,
        "the progress reaches the registry",
        |t| has_progress(t, 0.5, "half way"),
    )
    .await;
    assert_eq!(state(&working), pb::TaskState::Working);

    // The result, in two chunks, ends the call (the stream stays open).
    call.body
        .send(Ok(Bytes::from_static(b"event: result\ndata: {\"rows\"")))
        .await
        .expect("the response is read");
    call.body
        .send(Ok(Bytes::from_static(b": 12}\n\n")))
        .await
        .expect("the response is read");
    let done = watch_until(&registry, &task.id, "the task completes", |t| {
        state(t) != pb::TaskState::Working
    })
    .await;
    assert_eq!(state(&done), pb::TaskState::Completed, "{done:?}");
    match &done.outcome {
        Some(pb::task::Outcome::Response(response)) => {
            assert_eq!(
                (response.result_json.as_str(), response.is_error),
                (r#"{"rows": 12}"#, false)
            );
        }
        other => panic!("no response: {other:?}"),
    }
    // The sidecar read no further: it dropped the response.
    dropped_within(PATIENCE, call.body).await;
}

/// Waits until the response `body` writes to is dropped (by the server,
/// once the connection closed), writing a comment every 100 ms: a write
/// is what tells the server the connection is gone.
async fn dropped_within(within: Duration, body: mpsc::Sender<Result<Bytes, Infallible>>) {
    let writes = async {
        while body
            .send(Ok(Bytes::from_static(b": still here\n")))
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(within, writes)
        .await
        .expect("the response is dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_http_task_drops_its_request() {
    let (server, mut calls) = streaming_server().await;
    let (registry, _sidecar) = with_http_tool(&server).await;
    let task = start(&registry, "stream").await;
    let call = tokio::time::timeout(PATIENCE, calls.recv())
        .await
        .expect("the backend is called")
        .expect("a call");

    // The backend reports progress slowly, then (once told) only writes
    // comments, and never ends by itself: it stops when its response is
    // dropped (a write then fails).
    let quiet = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (dropped, observed) = tokio::sync::oneshot::channel();
    let body = call.body;
    let writer_quiet = quiet.clone();
    tokio::spawn(async move {
        for step in 1_u32.. {
            let chunk = if writer_quiet.load(std::sync::atomic::Ordering::SeqCst) {
                Ok(Bytes::from_static(b": still working\n"))
            } else {
                let progress = format!(
                    r#"{{"fraction": {}, "message": "step {step}"}}"#,
                    f64::from(step.min(999)) / 1000.0
                );
                event("progress", &progress)
            };
            if body.send(chunk).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = dropped.send(());
    });

    let working = watch_until(&registry, &task.id, "progress reaches the registry", |t| {
        t.progress
            .as_ref()
            .is_some_and(|p| p.message.starts_with("step "))
    })
    .await;
    assert_eq!(state(&working), pb::TaskState::Working);
    // No more progress, and time for the last one to be reported: the
    // sidecar does not learn of the cancel from the answer to a progress
    // report, only from StopTask.
    quiet.store(true, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(1)).await;

    cancel(&registry, &task.id).await;
    let at = tokio::time::Instant::now();
    tokio::time::timeout(PATIENCE, observed)
        .await
        .expect("the server sees the response dropped within the patience")
        .expect("the writer says so");
    eprintln!(
        "the HTTP backend's response was dropped {:?} after the cancel",
        at.elapsed()
    );
}

/// Sends `dropped` when the handler's future is dropped.
struct DropGuard(mpsc::UnboundedSender<&'static str>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        let _ = self.0.send("dropped");
    }
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct NoArguments {}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_an_sdk_task_drops_its_future() {
    let (events, mut seen) = mpsc::unbounded_channel();
    let tool = sdk::tool_with_context(
        "forever",
        "Reports progress, then waits",
        move |_: NoArguments, context: CallContext| {
            let events = events.clone();
            async move {
                let _guard = DropGuard(events.clone());
                context.report_progress(Some(0.25), "waiting");
                let _ = events.send("started");
                tokio::time::sleep(Duration::from_secs(300)).await;
                let _ = events.send("finished");
                Ok::<_, ToolError>(serde_json::json!({}))
            }
        },
    )
    .timeout(Duration::from_secs(2))
    .task_timeout(Duration::from_secs(600))
    .build();
    let registry = TestRegistry::start(Duration::from_secs(10)).await;
    let _sidecar = sidecar(&registry.url(), "s", vec![tool]).await;
    registry.wait_for_instances("forever", 1, PATIENCE).await;

    let task = start(&registry, "forever").await;
    let first = tokio::time::timeout(PATIENCE, seen.recv())
        .await
        .expect("the handler runs");
    assert_eq!(first, Some("started"));
    watch_until(
        &registry,
        &task.id,
        "the progress reaches the registry",
        |t| has_progress(t, 0.25, "waiting"),
    )
    .await;

    cancel(&registry, &task.id).await;
    let next = tokio::time::timeout(PATIENCE, seen.recv())
        .await
        .expect("the handler's future is dropped within the patience");
    assert_eq!(next, Some("dropped"), "dropped, not finished");
}
