//! `RunTask` and `StopTask`: the task's deadline, and the grants each
//! takes (never one minted for another RPC).

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use pb::tool_runtime_server::ToolRuntime as _;
use tokio::time::Instant;
use toolmesh_proto::grant::{self, ArgumentsDigest, CallKey, Verifier};

use super::service::stop_grant_tool;
use super::*;
use crate::metrics::Metrics;
use crate::tasks::Tasks;
use crate::tasks::recorder::Recorder;
use crate::tool::Backend;

/// Sleeps `delay`, then answers; sets `dropped` if stopped first.
struct Sleeper {
    delay: Duration,
    dropped: Arc<AtomicBool>,
}

#[async_trait]
impl Backend for Sleeper {
    async fn call(
        &self,
        _args: &str,
        context: &CallContext,
        _deadline: Deadline,
    ) -> Result<Outcome, BackendError> {
        struct Flag(Arc<AtomicBool>, bool);
        impl Drop for Flag {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.store(true, Ordering::SeqCst);
                }
            }
        }
        let mut flag = Flag(self.dropped.clone(), false);
        context.report_progress(Some(0.5), "sleeping");
        tokio::time::sleep(self.delay).await;
        flag.1 = true;
        Ok(Outcome::ok("\"done\""))
    }
}

fn sleeper(
    name: &str,
    delay: Duration,
    timeout: Option<Duration>,
    task_timeout: Option<Duration>,
    dropped: &Arc<AtomicBool>,
) -> Tool {
    let descriptor = pb::ToolDescriptor {
        name: name.into(),
        timeout: timeout.and_then(toolmesh_proto::rules::duration_field),
        task_timeout: task_timeout.and_then(toolmesh_proto::rules::duration_field),
        ..Default::default()
    };
    Tool::new(
        descriptor,
        Arc::new(Sleeper {
            delay,
            dropped: dropped.clone(),
        }),
    )
}

/// How long `work` ran, and what it answered.
async fn timed(work: crate::tasks::Work) -> (Duration, Result<pb::ExecuteResponse, ExecuteError>) {
    let start = Instant::now();
    let answer = work.await;
    (start.elapsed(), answer)
}

#[tokio::test(start_paused = true)]
async fn a_task_runs_for_its_timeout_not_the_interactive_one() {
    let s = Duration::from_secs;
    let dropped = Arc::new(AtomicBool::new(false));
    let runtime = Runtime::new(vec![
        sleeper("long", s(50), Some(s(1)), Some(s(100)), &dropped),
        sleeper("plain", s(50), Some(s(30)), None, &dropped),
        sleeper("bare", s(3600), None, None, &dropped),
    ])
    .unwrap();
    let task = |tool: &str, timeout: Option<Duration>| {
        let (_, work) = runtime
            .task(tool, "{}".into(), CallContext::new("alice", "t"), timeout)
            .unwrap();
        timed(work)
    };
    let (took, answer) = task("long", None).await;
    assert_eq!(answer.unwrap().result_json, "\"done\"");
    assert_eq!(took, s(50), "task_timeout, not timeout, bounds it");
    let (took, answer) = task("long", Some(s(20))).await;
    assert_eq!(
        answer.unwrap_err().to_status().code(),
        tonic::Code::DeadlineExceeded
    );
    assert_eq!(took, s(20), "the request's timeout comes first");
    let (took, answer) = task("plain", None).await;
    assert!(answer.is_err());
    assert_eq!(took, s(30), "without task_timeout, timeout");
    let (took, _) = task("bare", None).await;
    assert_eq!(took, DEFAULT_TIMEOUT);
    // A timeout the clock cannot add is cut, not a panic.
    let (_, work) = runtime
        .task(
            "bare",
            "{}".into(),
            CallContext::new("", "t"),
            Some(Duration::MAX),
        )
        .unwrap();
    drop(work);
}

#[tokio::test]
async fn a_task_is_refused_at_once_as_execute_would_be() {
    let dropped = Arc::new(AtomicBool::new(false));
    let runtime = Runtime::new(vec![sleeper("a", Duration::ZERO, None, None, &dropped)]).unwrap();
    let unknown = runtime
        .task("b", "{}".into(), CallContext::new("", "t"), None)
        .err()
        .unwrap();
    assert_eq!(unknown.to_status().code(), tonic::Code::NotFound);
    let forged = runtime
        .task("a", "{}".into(), CallContext::new("a\nb", "t"), None)
        .err()
        .unwrap();
    assert_eq!(forged.to_status().code(), tonic::Code::InvalidArgument);
}

const INSTANCE: &str = "tasks-instance";

fn key() -> CallKey {
    CallKey::from_bytes(&[9; grant::KEY_LEN]).unwrap()
}

static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A grant for the call `tool`, `invocation`, `caller`, `arguments`, on
/// `metadata`.
fn sign(
    metadata: &mut tonic::metadata::MetadataMap,
    tool: &str,
    invocation: &str,
    caller: &str,
    arguments: &str,
) {
    let call = grant::Call {
        instance: INSTANCE,
        invocation,
        tool,
        caller,
        arguments: ArgumentsDigest::of(arguments),
    };
    let nonce = NONCE.fetch_add(1, Ordering::SeqCst);
    grant::attach(metadata, grant::mint(&key(), &call, grant::now_ms(), nonce));
}

struct Fixture {
    service: RuntimeService,
    tasks: Arc<Tasks>,
    recorder: Arc<Recorder>,
    dropped: Arc<AtomicBool>,
}

fn fixture(delay: Duration) -> Fixture {
    let dropped = Arc::new(AtomicBool::new(false));
    let runtime = Arc::new(Runtime::new(vec![sleeper("a", delay, None, None, &dropped)]).unwrap());
    let recorder = Arc::new(Recorder::default());
    let tasks = Arc::new(Tasks::new(8, recorder.clone(), Metrics::new()));
    let grants = Arc::new(Verifier::new(key(), INSTANCE, grant::DEFAULT_MAX_AGE));
    Fixture {
        service: RuntimeService::new(runtime, grants).with_tasks(tasks.clone()),
        tasks,
        recorder,
        dropped,
    }
}

fn run_task(invocation: &str) -> tonic::Request<pb::RunTaskRequest> {
    tonic::Request::new(pb::RunTaskRequest {
        call: Some(pb::ExecuteRequest {
            tool: "a".into(),
            arguments_json: "{}".into(),
            caller: "alice".into(),
            invocation_id: invocation.into(),
        }),
        timeout: toolmesh_proto::rules::duration_field(Duration::from_secs(3600)),
        report_token: b"token".to_vec(),
    })
}

fn signed_run_task(invocation: &str) -> tonic::Request<pb::RunTaskRequest> {
    let mut request = run_task(invocation);
    sign(request.metadata_mut(), "a", invocation, "alice", "{}");
    request
}

fn stop_task(task: &str) -> tonic::Request<pb::StopTaskRequest> {
    tonic::Request::new(pb::StopTaskRequest {
        task_id: task.into(),
        tool: "a".into(),
        caller: "alice".into(),
    })
}

#[tokio::test(start_paused = true)]
async fn run_task_takes_the_grant_execute_takes_and_answers_at_once() {
    let f = fixture(Duration::from_secs(600));
    let unsigned = f.service.run_task(run_task("t-1")).await.unwrap_err();
    assert_eq!(unsigned.code(), tonic::Code::Unauthenticated);

    let request = signed_run_task("t-1");
    let grant = request.metadata().get(grant::HEADER).unwrap().clone();
    f.service.run_task(request).await.unwrap();
    assert_eq!(f.tasks.len(), 1);

    // The same grant, again, for RunTask or for Execute: a replay.
    let mut replayed = run_task("t-1");
    replayed.metadata_mut().insert(grant::HEADER, grant.clone());
    assert_eq!(
        f.service.run_task(replayed).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    let mut execute = tonic::Request::new(run_task("t-1").into_inner().call.unwrap());
    execute.metadata_mut().insert(grant::HEADER, grant);
    assert_eq!(
        f.service.execute(execute).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );

    let again = f
        .service
        .run_task(signed_run_task("t-1"))
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists);

    // Progress, then the end, reach the registry.
    tokio::time::sleep(Duration::from_secs(601)).await;
    let reports = f.recorder.reports();
    assert!(matches!(
        &reports[0].1.report,
        Some(pb::report_task_request::Report::Progress(p)) if p.fraction == Some(0.5)
    ));
    assert!(matches!(
        f.recorder.ends().as_slice(),
        [pb::report_task_request::Report::Response(r)] if r.result_json == "\"done\""
    ));
    assert_eq!(f.tasks.len(), 0);
}

#[tokio::test]
async fn run_task_refuses_an_unknown_tool_and_a_task_without_an_id() {
    let f = fixture(Duration::ZERO);
    let mut unknown = run_task("t-2");
    if let Some(call) = &mut unknown.get_mut().call {
        call.tool = "b".into();
    }
    sign(unknown.metadata_mut(), "b", "t-2", "alice", "{}");
    assert_eq!(
        f.service.run_task(unknown).await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let anonymous = signed_run_task("");
    assert_eq!(
        f.service.run_task(anonymous).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    let mut no_call = tonic::Request::new(pb::RunTaskRequest::default());
    sign(no_call.metadata_mut(), "", "", "", "");
    assert_eq!(
        f.service.run_task(no_call).await.unwrap_err().code(),
        tonic::Code::InvalidArgument
    );
    assert_eq!(f.tasks.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn stop_task_takes_only_a_stop_grant_and_stops_the_work() {
    let f = fixture(Duration::from_secs(600));
    f.service.run_task(signed_run_task("t-3")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;

    // An Execute grant for the same tool, task and caller, without
    // arguments, is not a stop grant.
    let mut forged = stop_task("t-3");
    sign(forged.metadata_mut(), "a", "t-3", "alice", "");
    assert_eq!(
        f.service.stop_task(forged).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    assert!(!f.dropped.load(Ordering::SeqCst));

    let mut stop = stop_task("t-3");
    sign(stop.metadata_mut(), "stop a", "t-3", "alice", "");
    f.service.stop_task(stop).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        f.dropped.load(Ordering::SeqCst),
        "the backend's future dropped"
    );
    assert_eq!(f.tasks.len(), 0);
    tokio::time::sleep(Duration::from_secs(700)).await;
    assert!(
        f.recorder.ends().is_empty(),
        "a stopped task reports no end"
    );

    let mut unknown = stop_task("t-unknown");
    sign(unknown.metadata_mut(), "stop a", "t-unknown", "alice", "");
    f.service.stop_task(unknown).await.unwrap();
}

#[tokio::test]
async fn a_stop_grant_never_admits_an_execute() {
    let f = fixture(Duration::ZERO);
    let mut execute = tonic::Request::new(pb::ExecuteRequest {
        tool: "a".into(),
        arguments_json: String::new(),
        caller: "alice".into(),
        invocation_id: "t-4".into(),
    });
    sign(
        execute.metadata_mut(),
        &stop_grant_tool("a"),
        "t-4",
        "alice",
        "",
    );
    assert_eq!(
        f.service.execute(execute).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    let mut run = run_task("t-4");
    sign(
        run.metadata_mut(),
        &stop_grant_tool("a"),
        "t-4",
        "alice",
        "{}",
    );
    assert_eq!(
        f.service.run_task(run).await.unwrap_err().code(),
        tonic::Code::Unauthenticated
    );
    assert!(!toolmesh_proto::tool_name::is_valid(&stop_grant_tool("a")));
}

/// The log lines written while `f` runs on this thread.
async fn logged<F: std::future::Future<Output = ()>>(f: F) -> String {
    #[derive(Clone, Default)]
    struct Lines(Arc<std::sync::Mutex<Vec<u8>>>);
    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    f.await;
    String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
}

#[tokio::test]
async fn a_flood_of_refused_calls_writes_one_line() {
    let f = fixture(Duration::from_secs(600));
    let log = logged(async {
        for n in 0..100 {
            let refused = f.service.run_task(run_task(&format!("t-{n}"))).await;
            assert_eq!(refused.unwrap_err().code(), tonic::Code::Unauthenticated);
        }
    })
    .await;
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(lines[0].contains("left_out=0"), "{log}");
}
