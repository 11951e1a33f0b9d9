//! Reports about a task to the registry (`Registration.ReportTask`): the
//! end, retried with backoff until a registry takes it or refuses it for
//! good, within [`END_WINDOW`]; progress, best effort, the latest at most
//! every [`PROGRESS_INTERVAL`].

use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::transport::Channel;
use toolmesh_proto::pb;
use toolmesh_proto::pb::registration_client::RegistrationClient;
use toolmesh_proto::token::Token;
use toolmesh_telemetry::{TraceContext, spans};
use tracing::Instrument as _;

use crate::announcer::{Backoff, request, with_deadline};
use crate::progress::Update;

/// `Registration.ReportTask`'s fully qualified name, as its spans name it.
const REPORT_TASK: &str = "toolmesh.v1.Registration/ReportTask";
/// Longest one ReportTask may take.
pub(crate) const RPC_TIMEOUT: Duration = Duration::from_secs(5);
/// Shortest time between two progress reports of one task.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);
/// How long after a task's end its report is tried again.
pub(crate) const END_WINDOW: Duration = Duration::from_secs(3600);
/// First delay before the end is reported again.
const END_BACKOFF_START: Duration = Duration::from_millis(200);
/// Longest delay between two tries of the end.
const END_BACKOFF_CAP: Duration = Duration::from_secs(10);

/// Sends one report to the registry, within a deadline of its own.
#[async_trait]
pub(crate) trait Report: Send + Sync + 'static {
    /// The registry's answer to `report`, sent in the task's `trace`.
    async fn report(
        &self,
        report: pb::ReportTaskRequest,
        trace: &TraceContext,
    ) -> Result<pb::ReportTaskResponse, tonic::Status>;
}

/// Reports over the registry channel the announcer uses, with the token
/// it registers with.
#[derive(Debug, Clone)]
pub(crate) struct RegistryReport {
    client: RegistrationClient<Channel>,
    token: Option<Token>,
}

impl RegistryReport {
    /// Reports on `channel`, presenting `token` (the registrant's).
    pub(crate) fn new(channel: Channel, token: Option<Token>) -> Self {
        Self {
            client: RegistrationClient::new(channel),
            token,
        }
    }
}

#[async_trait]
impl Report for RegistryReport {
    async fn report(
        &self,
        report: pb::ReportTaskRequest,
        trace: &TraceContext,
    ) -> Result<pb::ReportTaskResponse, tonic::Status> {
        let what = match &report.report {
            Some(pb::report_task_request::Report::Progress(_)) => "progress",
            Some(_) => "end",
            None => "nothing",
        };
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.Registration/ReportTask",
            otel.kind = "client",
            report = what,
        );
        spans::rpc(&span, REPORT_TASK);
        let mut client = self.client.clone();
        let mut call = request(report, RPC_TIMEOUT, self.token.as_ref());
        trace.onward(&span).inject_metadata(call.metadata_mut());
        let answer = with_deadline(RPC_TIMEOUT, client.report_task(call))
            .instrument(span.clone())
            .await;
        let code = answer
            .as_ref()
            .map_or_else(tonic::Status::code, |_| tonic::Code::Ok);
        spans::rpc_status(&span, toolmesh_proto::code::name(code));
        answer
    }
}

/// What became of a task's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// A registry took it.
    Taken,
    /// The registry refused it for good (the task is unknown or over,
    /// the token not the task's, the report not one it takes).
    Refused(tonic::Code),
    /// No registry took it within the window.
    GaveUp,
}

/// Whether the registry's `code` means no report about the task will
/// ever be taken.
fn is_final(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::NotFound | tonic::Code::PermissionDenied | tonic::Code::InvalidArgument
    )
}

/// Reports `end` until a registry takes it or refuses it for good, with
/// backoff and jitter between tries, giving up once the next try would
/// fall more than `window` after the first.
pub(crate) async fn deliver(
    reporter: &dyn Report,
    end: pb::ReportTaskRequest,
    window: Duration,
    trace: &TraceContext,
) -> Delivery {
    let give_up = Instant::now() + window;
    let mut backoff = Backoff::between(END_BACKOFF_START, END_BACKOFF_CAP);
    loop {
        let status = match reporter.report(end.clone(), trace).await {
            Ok(_) => return Delivery::Taken,
            Err(status) if is_final(status.code()) => return Delivery::Refused(status.code()),
            Err(status) => status,
        };
        let delay = backoff.next_delay();
        if Instant::now() + delay > give_up {
            return Delivery::GaveUp;
        }
        tracing::debug!(
            code = toolmesh_proto::code::name(status.code()),
            reason = status.message(),
            ?delay,
            "the registry did not take the task's end; reporting it again"
        );
        tokio::time::sleep(delay).await;
    }
}

/// Whether a task in `state` is over.
fn is_terminal(state: pb::TaskState) -> bool {
    match state {
        pb::TaskState::Completed | pb::TaskState::Failed | pb::TaskState::Cancelled => true,
        pb::TaskState::Unspecified | pb::TaskState::Working | pb::TaskState::InputRequired => false,
    }
}

/// Reports the task `task`'s progress as `updates` has it: the latest,
/// at most once per [`PROGRESS_INTERVAL`], one report at a time, a failed
/// one not tried again. Returns the state the registry answered when it
/// says the task is over (its work should stop); never otherwise.
pub(crate) async fn progress(
    reporter: &dyn Report,
    task: &str,
    report_token: &[u8],
    mut updates: watch::Receiver<Option<Update>>,
    trace: &TraceContext,
) -> pb::TaskState {
    let mut next = Instant::now();
    loop {
        if updates.changed().await.is_err() {
            // No one reports any more: the work is over.
            return std::future::pending().await;
        }
        tokio::time::sleep_until(next).await;
        let Some(update) = updates.borrow_and_update().clone() else {
            continue;
        };
        next = Instant::now() + PROGRESS_INTERVAL;
        let report = pb::ReportTaskRequest {
            task_id: task.to_owned(),
            report_token: report_token.to_vec(),
            report: Some(pb::report_task_request::Report::Progress(update.to_pb())),
        };
        match reporter.report(report, trace).await {
            Ok(answer) if is_terminal(answer.state()) => return answer.state(),
            Ok(_) => {}
            Err(status) => tracing::debug!(
                code = toolmesh_proto::code::name(status.code()),
                reason = status.message(),
                "progress report failed"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
