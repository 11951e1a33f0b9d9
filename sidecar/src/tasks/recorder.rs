//! A [`Report`] for tests: it keeps every report with the time it came,
//! and answers as told (by default: the task goes on).

use std::collections::VecDeque;
use std::sync::Mutex;

use async_trait::async_trait;
use tokio::time::Instant;
use toolmesh_proto::pb;

use super::Report;

/// Keeps reports; answers the scripted answers in order, then `WORKING`.
#[derive(Default)]
pub(crate) struct Recorder {
    reports: Mutex<Vec<(Instant, pb::ReportTaskRequest)>>,
    answers: Mutex<VecDeque<Result<pb::ReportTaskResponse, tonic::Status>>>,
}

impl Recorder {
    /// Answers `answers` to the next reports, one each.
    pub(crate) fn answering(
        answers: impl IntoIterator<Item = Result<pb::ReportTaskResponse, tonic::Status>>,
    ) -> Self {
        Self {
            reports: Mutex::default(),
            answers: Mutex::new(answers.into_iter().collect()),
        }
    }

    /// Every report so far, with when it came.
    pub(crate) fn reports(&self) -> Vec<(Instant, pb::ReportTaskRequest)> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The ends reported so far (not progress).
    pub(crate) fn ends(&self) -> Vec<pb::report_task_request::Report> {
        self.reports()
            .into_iter()
            .filter_map(|(_, report)| report.report)
            .filter(|report| !matches!(report, pb::report_task_request::Report::Progress(_)))
            .collect()
    }
}

/// An answer saying the task is in `state`.
pub(crate) fn state(state: pb::TaskState) -> Result<pb::ReportTaskResponse, tonic::Status> {
    Ok(pb::ReportTaskResponse {
        state: state as i32,
    })
}

#[async_trait]
impl Report for Recorder {
    async fn report(
        &self,
        report: pb::ReportTaskRequest,
        _trace: &toolmesh_telemetry::TraceContext,
    ) -> Result<pb::ReportTaskResponse, tonic::Status> {
        self.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((Instant::now(), report));
        self.answers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
            .unwrap_or_else(|| state(pb::TaskState::Working))
    }
}
