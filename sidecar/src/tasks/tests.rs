#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;

use super::recorder::{Recorder, state};
use super::*;
use crate::progress::Progress;
use pb::report_task_request::Report as Said;

fn table(limit: usize, recorder: &Arc<Recorder>) -> Tasks {
    Tasks::new(limit, recorder.clone(), Metrics::new())
}

/// The value of the series `series` in `metrics`' exposition.
fn value(metrics: &Metrics, series: &str) -> Option<f64> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics.registry()).unwrap();
    text.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().unwrap())
    })
}

#[tokio::test(start_paused = true)]
async fn tasks_are_counted_running_and_by_outcome() {
    let recorder = Arc::new(Recorder::default());
    let metrics = Metrics::new();
    let tasks = Tasks::new(4, recorder.clone(), metrics.clone());
    let dropped = Arc::new(AtomicBool::new(false));
    tasks
        .start(task("a"), endless(&dropped), no_progress())
        .unwrap();
    tasks.start(task("b"), answer("1"), no_progress()).unwrap();
    settle().await;
    let running = r#"toolmesh_sidecar_tasks_running{tool="slow"}"#;
    let ended = |outcome: &str| {
        value(
            &metrics,
            &format!(r#"toolmesh_sidecar_tasks_total{{tool="slow",outcome="{outcome}"}}"#),
        )
    };
    assert_eq!(value(&metrics, running), Some(1.0));
    assert_eq!(ended("ok"), Some(1.0));
    assert!(tasks.stop("a", "slow", "alice"));
    settle().await;
    assert_eq!(value(&metrics, running), Some(0.0));
    assert_eq!(ended("cancelled"), Some(1.0));
}

fn task(id: &str) -> NewTask {
    NewTask {
        id: id.into(),
        tool: "slow".into(),
        caller: "alice".into(),
        report_token: b"token".to_vec(),
        trace: toolmesh_telemetry::TraceContext::default(),
    }
}

/// Work that never ends; sets `dropped` when its future is dropped.
fn endless(dropped: &Arc<AtomicBool>) -> Work {
    struct OnDrop(Arc<AtomicBool>);
    impl Drop for OnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let guard = OnDrop(dropped.clone());
    Box::pin(async move {
        let _guard = guard;
        std::future::pending().await
    })
}

fn answer(result_json: &str) -> Work {
    let response = pb::ExecuteResponse {
        result_json: result_json.into(),
        ..Default::default()
    };
    Box::pin(async move { Ok(response) })
}

fn no_progress() -> watch::Receiver<Option<Update>> {
    Progress::channel().1
}

/// Lets the spawned tasks run until they wait on time or each other.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

#[tokio::test(start_paused = true)]
async fn the_table_is_bounded() {
    let recorder = Arc::new(Recorder::default());
    let tasks = table(2, &recorder);
    let dropped = Arc::new(AtomicBool::new(false));
    for id in ["a", "b"] {
        tasks
            .start(task(id), endless(&dropped), no_progress())
            .unwrap();
    }
    let full = tasks
        .start(task("c"), endless(&dropped), no_progress())
        .unwrap_err();
    assert!(matches!(full, StartError::Full { limit: 2 }));
    assert!(full.is_retryable());
    let status = full.to_status();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
    assert!(status.message().contains("(2, --max-tasks)"), "{status:?}");
    assert_eq!(tasks.len(), 2);
    assert!(tasks.stop("a", "slow", "alice"));
    tasks
        .start(task("c"), endless(&dropped), no_progress())
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_task_held_already_is_refused() {
    let recorder = Arc::new(Recorder::default());
    let tasks = table(4, &recorder);
    let dropped = Arc::new(AtomicBool::new(false));
    tasks
        .start(task("a"), endless(&dropped), no_progress())
        .unwrap();
    let again = tasks
        .start(task("a"), answer("1"), no_progress())
        .unwrap_err();
    assert!(!again.is_retryable());
    assert_eq!(again.to_status().code(), tonic::Code::AlreadyExists);
    settle().await;
    assert!(!dropped.load(Ordering::SeqCst), "the first one runs on");
    assert!(recorder.reports().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stopped_task_drops_its_work_and_reports_nothing() {
    let recorder = Arc::new(Recorder::default());
    let tasks = table(4, &recorder);
    let dropped = Arc::new(AtomicBool::new(false));
    tasks
        .start(task("a"), endless(&dropped), no_progress())
        .unwrap();
    settle().await;
    assert!(!tasks.stop("a", "other", "alice"), "another tool's");
    assert!(!tasks.stop("a", "slow", "bob"), "another caller's");
    assert!(!tasks.stop("b", "slow", "alice"), "unknown");
    assert!(!dropped.load(Ordering::SeqCst));
    assert!(tasks.stop("a", "slow", "alice"));
    settle().await;
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(tasks.len(), 0);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(recorder.reports().is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_end_is_delivered_once_then_the_task_leaves() {
    let recorder = Arc::new(Recorder::answering([
        Err(tonic::Status::unavailable("down")),
        state(pb::TaskState::Completed),
    ]));
    let tasks = table(4, &recorder);
    tasks.start(task("a"), answer("42"), no_progress()).unwrap();
    settle().await;
    assert_eq!(tasks.len(), 1, "held while its end is not taken");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(tasks.len(), 0);
    tokio::time::sleep(Duration::from_secs(60)).await;
    let reports = recorder.reports();
    assert_eq!(reports.len(), 2);
    for (_, report) in &reports {
        assert_eq!(report.task_id, "a");
        assert_eq!(report.report_token, b"token");
        assert!(matches!(
            &report.report,
            Some(Said::Response(response)) if response.result_json == "42"
        ));
    }
    // The same id may run again once the first has left.
    tasks.start(task("a"), answer("43"), no_progress()).unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_failed_call_reports_its_status() {
    let recorder = Arc::new(Recorder::default());
    let tasks = table(4, &recorder);
    let failed: Work = Box::pin(async {
        Err(ExecuteError::Backend(
            crate::tool::BackendError::DeadlineExceeded,
        ))
    });
    tasks.start(task("a"), failed, no_progress()).unwrap();
    settle().await;
    let ends = recorder.ends();
    let [Said::Error(error)] = ends.as_slice() else {
        panic!("{ends:?}");
    };
    assert_eq!(error.code, tonic::Code::DeadlineExceeded as i32);
    assert_eq!(error.message, "deadline exceeded");
    assert_eq!(tasks.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_registry_saying_the_task_is_over_stops_its_work() {
    let recorder = Arc::new(Recorder::answering([state(pb::TaskState::Cancelled)]));
    let tasks = table(4, &recorder);
    let dropped = Arc::new(AtomicBool::new(false));
    let (progress, updates) = Progress::channel();
    tasks.start(task("a"), endless(&dropped), updates).unwrap();
    progress.report(Some(0.5), "half");
    settle().await;
    assert!(dropped.load(Ordering::SeqCst));
    assert_eq!(tasks.len(), 0);
    assert_eq!(recorder.reports().len(), 1, "no end after it");
}

#[tokio::test(start_paused = true)]
async fn at_shutdown_running_tasks_fail_unavailable() {
    let recorder = Arc::new(Recorder::default());
    let tasks = table(4, &recorder);
    let dropped = Arc::new(AtomicBool::new(false));
    tasks
        .start(task("a"), endless(&dropped), no_progress())
        .unwrap();
    settle().await;
    let started = Instant::now();
    tasks.shutdown(Duration::from_secs(2)).await;
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(dropped.load(Ordering::SeqCst));
    let ends = recorder.ends();
    let [Said::Error(error)] = ends.as_slice() else {
        panic!("{ends:?}");
    };
    assert_eq!(error.code, tonic::Code::Unavailable as i32);
    assert_eq!(error.message, "the sidecar stopped while the task ran");
    let closed = tasks
        .start(task("b"), answer("1"), no_progress())
        .unwrap_err();
    assert_eq!(closed.to_status().code(), tonic::Code::Unavailable);
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_up_on_a_registry_that_does_not_answer() {
    let recorder = Arc::new(Recorder::answering(
        std::iter::repeat_with(|| Err(tonic::Status::unavailable("down"))).take(1000),
    ));
    let tasks = table(4, &recorder);
    let dropped = Arc::new(AtomicBool::new(false));
    tasks
        .start(task("a"), endless(&dropped), no_progress())
        .unwrap();
    settle().await;
    let started = Instant::now();
    tasks.shutdown(Duration::from_secs(2)).await;
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(tasks.len(), 0);
    let tries = recorder.reports().len();
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(recorder.reports().len(), tries, "no try after the abort");
}
