//! One task from its start to its end delivered: the work and its
//! progress reports side by side, then the end reported until a registry
//! takes it.

use std::sync::Arc;

use tokio::sync::watch;
use toolmesh_proto::pb;
use toolmesh_proto::pb::report_task_request::Report as Said;

use super::report::{self, Delivery, END_WINDOW};
use super::{Shared, Work};
use crate::metrics::{TOOL_ERROR, TaskRecord};
use crate::progress::Update;

/// What [`Run::drive`] needs besides the work.
pub(super) struct Run {
    pub(super) shared: Arc<Shared>,
    pub(super) id: String,
    pub(super) serial: u64,
    pub(super) report_token: Vec<u8>,
    /// The trace the task runs in; its reports are in it too.
    pub(super) trace: toolmesh_telemetry::TraceContext,
    /// Counts the task running until it ends; dropped first (the task
    /// stopped), it counts as cancelled.
    pub(super) running: TaskRecord,
}

/// Why the work stopped.
enum End {
    /// The tool answered, or the call failed.
    Answered(Result<pb::ExecuteResponse, crate::runtime::ExecuteError>),
    /// The sidecar is stopping.
    Stopping,
    /// The registry answered a progress report that the task is over.
    Over(pb::TaskState),
}

impl Run {
    /// Runs `work` until it ends, reporting `updates` meanwhile, then
    /// reports the end; the task leaves the table once that is settled.
    pub(super) async fn drive(mut self, work: Work, updates: watch::Receiver<Option<Update>>) {
        // Reports are children of the task's span (the current one).
        let trace = self.trace.onward(&tracing::Span::current());
        let end = {
            let progress = report::progress(
                &*self.shared.reporter,
                &self.id,
                &self.report_token,
                updates,
                &trace,
            );
            tokio::select! {
                answer = work => End::Answered(answer),
                () = self.shared.stopping.cancelled() => End::Stopping,
                state = progress => End::Over(state),
            }
        };
        let said = match end {
            End::Answered(Ok(response)) => {
                self.running.ended(if response.is_error {
                    TOOL_ERROR
                } else {
                    toolmesh_proto::code::outcome(tonic::Code::Ok)
                });
                Said::Response(response)
            }
            End::Answered(Err(error)) => {
                let status = error.to_status();
                tracing::info!(error = %error, "the task's call failed");
                self.running
                    .ended(toolmesh_proto::code::outcome(status.code()));
                Said::Error(task_error(&status))
            }
            End::Stopping => {
                let status = tonic::Status::unavailable("the sidecar stopped while the task ran");
                self.running
                    .ended(toolmesh_proto::code::outcome(status.code()));
                Said::Error(task_error(&status))
            }
            End::Over(state) => {
                tracing::info!(
                    state = state.as_str_name(),
                    "the registry says the task is over; its work stopped"
                );
                self.running
                    .ended(toolmesh_proto::code::outcome(tonic::Code::Cancelled));
                self.shared.leave(&self.id, self.serial);
                return;
            }
        };
        let end = pb::ReportTaskRequest {
            task_id: self.id.clone(),
            report_token: std::mem::take(&mut self.report_token),
            report: Some(said),
        };
        match report::deliver(&*self.shared.reporter, end, END_WINDOW, &trace).await {
            Delivery::Taken => tracing::debug!("the registry took the task's end"),
            Delivery::Refused(code) => tracing::warn!(
                code = toolmesh_proto::code::name(code),
                "the registry refused the task's end; dropped"
            ),
            Delivery::GaveUp => tracing::warn!(
                window = ?END_WINDOW,
                "no registry took the task's end in time; dropped"
            ),
        }
        self.shared.leave(&self.id, self.serial);
    }
}

/// `status` as a task's failure: its code, message and encoded details.
pub(crate) fn task_error(status: &tonic::Status) -> pb::TaskError {
    pb::TaskError {
        code: status.code() as i32,
        message: status.message().to_owned(),
        details: status.details().to_vec(),
    }
}
