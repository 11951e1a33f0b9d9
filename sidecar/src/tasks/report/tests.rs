#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use tonic::Code;

use super::*;
use toolmesh_telemetry::TraceContext;

/// The trace of a call no one traces.
fn untraced() -> &'static TraceContext {
    static UNTRACED: std::sync::OnceLock<TraceContext> = std::sync::OnceLock::new();
    UNTRACED.get_or_init(TraceContext::default)
}
use crate::progress::Progress;
use crate::tasks::recorder::{Recorder, state};

fn end() -> pb::ReportTaskRequest {
    pb::ReportTaskRequest {
        task_id: "t-1".into(),
        report_token: b"secret".to_vec(),
        report: Some(pb::report_task_request::Report::Response(
            pb::ExecuteResponse {
                result_json: "1".into(),
                ..Default::default()
            },
        )),
    }
}

#[tokio::test(start_paused = true)]
async fn the_end_is_reported_again_until_a_registry_takes_it() {
    let recorder = Recorder::answering([
        Err(tonic::Status::unavailable("down")),
        Err(tonic::Status::deadline_exceeded("slow")),
        state(pb::TaskState::Completed),
    ]);
    let started = Instant::now();
    assert_eq!(
        deliver(&recorder, end(), END_WINDOW, untraced()).await,
        Delivery::Taken
    );
    let reports = recorder.reports();
    assert_eq!(reports.len(), 3);
    assert!(reports.iter().all(|(_, report)| *report == end()));
    // Backoff with jitter: 100-200 ms, then 200-400 ms.
    let first = reports[1].0 - started;
    let second = reports[2].0 - reports[1].0;
    assert!(
        first >= END_BACKOFF_START / 2 && first <= END_BACKOFF_START,
        "{first:?}"
    );
    assert!(
        second >= END_BACKOFF_START && second <= END_BACKOFF_START * 2,
        "{second:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_end_the_registry_refuses_for_good_is_dropped_at_once() {
    for code in [
        Code::NotFound,
        Code::PermissionDenied,
        Code::InvalidArgument,
    ] {
        let recorder = Recorder::answering([Err(tonic::Status::new(code, "no"))]);
        assert_eq!(
            deliver(&recorder, end(), END_WINDOW, untraced()).await,
            Delivery::Refused(code)
        );
        assert_eq!(recorder.reports().len(), 1, "{code:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_end_no_registry_takes_is_given_up_after_the_window() {
    let recorder = Recorder::answering(
        std::iter::repeat_with(|| Err(tonic::Status::unavailable("down"))).take(10_000),
    );
    let started = Instant::now();
    assert_eq!(
        deliver(&recorder, end(), END_WINDOW, untraced()).await,
        Delivery::GaveUp
    );
    let reports = recorder.reports();
    let last = reports.last().unwrap().0;
    assert!(last - started <= END_WINDOW);
    assert!(last - started >= END_WINDOW - END_BACKOFF_CAP);
    // At least half the cap between tries once there: a bounded number.
    assert!(reports.len() < 800, "{}", reports.len());
}

/// The progress in `report`, if it is a progress report.
fn progress_of(report: &pb::ReportTaskRequest) -> Option<(Option<f64>, String)> {
    match &report.report {
        Some(pb::report_task_request::Report::Progress(p)) => Some((p.fraction, p.message.clone())),
        _ => None,
    }
}

#[tokio::test(start_paused = true)]
async fn progress_is_sent_at_most_every_interval_the_latest_winning() {
    let recorder = Arc::new(Recorder::default());
    let (handle, updates) = Progress::channel();
    let pump = tokio::spawn({
        let recorder = recorder.clone();
        async move { progress(&*recorder, "t-1", b"secret", updates, untraced()).await }
    });
    let started = Instant::now();
    handle.report(Some(0.1), "one");
    tokio::time::sleep(Duration::from_millis(10)).await;
    for (i, fraction) in [0.2, 0.3, 0.4, 0.5].into_iter().enumerate() {
        handle.report(Some(fraction), format!("update {i}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    handle.report(None, "late");
    tokio::time::sleep(Duration::from_millis(10)).await;

    let sent: Vec<_> = recorder
        .reports()
        .into_iter()
        .map(|(at, report)| {
            assert_eq!(report.task_id, "t-1");
            assert_eq!(report.report_token, b"secret");
            (at - started, progress_of(&report).unwrap())
        })
        .collect();
    assert_eq!(
        sent,
        vec![
            (Duration::ZERO, (Some(0.1), "one".to_owned())),
            (PROGRESS_INTERVAL, (Some(0.5), "update 3".to_owned())),
            (Duration::from_millis(790), (None, "late".to_owned())),
        ]
    );
    assert!(!pump.is_finished());
    pump.abort();
}

#[tokio::test(start_paused = true)]
async fn a_registry_that_says_the_task_is_over_ends_the_progress() {
    for over in [
        pb::TaskState::Completed,
        pb::TaskState::Failed,
        pb::TaskState::Cancelled,
    ] {
        let recorder = Recorder::answering([
            Err(tonic::Status::unavailable("down")),
            state(pb::TaskState::Working),
            state(over),
        ]);
        let (handle, updates) = Progress::channel();
        let reports = async {
            for i in 0..10 {
                handle.report(None, format!("{i}"));
                tokio::time::sleep(PROGRESS_INTERVAL).await;
            }
            std::future::pending::<()>().await;
        };
        let answered = tokio::select! {
            state = progress(&recorder, "t", b"", updates, untraced()) => state,
            () = reports => unreachable!(),
        };
        assert_eq!(answered, over);
        assert_eq!(recorder.reports().len(), 3);
    }
}

#[tokio::test(start_paused = true)]
async fn progress_waits_for_a_report() {
    let recorder = Recorder::default();
    let (handle, updates) = Progress::channel();
    let pump = progress(&recorder, "t", b"", updates, untraced());
    assert!(
        tokio::time::timeout(Duration::from_secs(60), pump)
            .await
            .is_err()
    );
    drop(handle);
    assert!(recorder.reports().is_empty());
}
