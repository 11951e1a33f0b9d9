//! The calls page: the last calls this replica answered (tool, caller,
//! outcome, latency, instance), filtered by tool, caller and outcome, of
//! the tools the viewer may see; and the tasks the viewer may see, with
//! their state and progress: its own, and those the tail names. The page
//! reloads itself while it is open (a `Refresh` header, no script).

use axum::{
    extract::{Query, State},
    http::header,
    response::{IntoResponse, Response},
};
use maud::html;
use toolmesh_proto::pb;

use super::{Shared, pages, pages::Viewer};
use crate::{
    access::{allows, auth::Caller},
    calls::tail::CallRecord,
    tasks::Viewer as TaskViewer,
};

/// Calls shown.
const SHOWN: usize = 100;
/// Tasks looked up from the tail.
const TAIL_TASKS: usize = 20;
/// Seconds between reloads of a live page.
const REFRESH_SECONDS: u32 = 3;

/// The outcomes the filter offers.
const OUTCOMES: [&str; 10] = [
    "ok",
    "tool_error",
    "invalid_argument",
    "resource_exhausted",
    "approval_required",
    "task_started",
    "not_found",
    "unavailable",
    "deadline_exceeded",
    "cancelled",
];

#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct Filter {
    #[serde(default)]
    tool: String,
    #[serde(default)]
    caller: String,
    #[serde(default)]
    outcome: String,
    /// `0` stops the page reloading itself.
    #[serde(default)]
    live: Option<u8>,
}

impl Filter {
    fn keeps(&self, call: &CallRecord) -> bool {
        (self.tool.is_empty() || call.tool.contains(self.tool.as_str()))
            && (self.caller.is_empty() || *call.caller == *self.caller)
            && (self.outcome.is_empty() || call.outcome == self.outcome)
    }
}

/// `GET /calls`.
pub(crate) async fn page(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Query(filter): Query<Filter>,
) -> Response {
    let policy = console.access.policy();
    let keep =
        |call: &CallRecord| filter.keeps(call) && allows(policy.as_deref(), &caller, &call.tool);
    // Every replica's calls in Redis mode; this replica's if Redis does
    // not answer (and always without Redis).
    let shared = match &console.shared_tail {
        Some(shared) => match shared.recent().await {
            Ok(calls) => Some(calls),
            Err(error) => {
                tracing::debug!(%error, "console: the shared tail is unavailable");
                None
            }
        },
        None => None,
    };
    let every_replica = shared.is_some();
    let calls: Vec<CallRecord> = match shared {
        Some(calls) => calls.into_iter().filter(|c| keep(c)).take(SHOWN).collect(),
        None => console.tail.recent(SHOWN, keep),
    };
    let tasks = tasks(&console, &caller, &calls).await;
    let live = filter.live != Some(0);
    let body = pages::layout(
        "Calls",
        Some(&viewer),
        html! {
            h1 { "Calls" }
            form.filters method="get" action="/calls" {
                input type="text" name="tool" value=(filter.tool) placeholder="tool name contains" aria-label="Tool";
                input type="text" name="caller" value=(filter.caller) placeholder="caller id" aria-label="Caller";
                select name="outcome" aria-label="Outcome" {
                    option value="" { "any outcome" }
                    @for outcome in OUTCOMES {
                        option value=(outcome) selected[filter.outcome == outcome] { (outcome) }
                    }
                }
                button type="submit" { "Filter" }
            }
            p.summary {
                "The last " (SHOWN) " calls "
                (if every_replica { "every replica answered" } else { "this replica answered" })
                ", newest first"
                @if live { ", reloaded every " (REFRESH_SECONDS) " s" }
                "."
            }
            table.calls {
                thead { tr {
                    th { "When" } th { "Tool" } th { "Caller" } th { "Outcome" }
                    th { "Latency" } th { "Instance" } th { "Task" }
                } }
                tbody {
                    @for call in &calls {
                        tr data-outcome=(call.outcome) {
                            td.when { (humantime::format_rfc3339_millis(call.at)) }
                            td.tool { a href=(pages::tool_href(&call.tool)) { (call.tool) } }
                            td.caller { (if call.caller.is_empty() { "anonymous" } else { &call.caller }) }
                            td.outcome { span class=(format!("outcome {}", outcome_class(call.outcome))) { (call.outcome) } }
                            td.latency { (format!("{:.1} ms", call.latency.as_secs_f64() * 1000.0)) }
                            td.instance { code { (call.instance.as_deref().unwrap_or("-")) } }
                            td.task { @if let Some(task) = &call.task { code { (task) } } }
                        }
                    }
                }
            }
            @if calls.is_empty() { p.empty { "No call matches yet." } }
            h2 { "Tasks" }
            table.tasks {
                thead { tr {
                    th { "Task" } th { "Tool" } th { "Caller" } th { "State" } th { "Progress" } th { "Updated" }
                } }
                tbody {
                    @for task in &tasks {
                        tr data-task=(task.id) {
                            td { code { (task.id) } }
                            td.tool { (task.tool) }
                            td.caller { (task.caller) }
                            td.state { (state(task.state)) }
                            td.progress { (progress(task)) }
                            td { (task.updated_at.as_ref().map(pages::timestamp).unwrap_or_default()) }
                        }
                    }
                }
            }
            @if tasks.is_empty() { p.empty { "No task to show." } }
        },
    );
    let mut response = body.into_response();
    if live && let Ok(value) = http::HeaderValue::from_str(&REFRESH_SECONDS.to_string()) {
        response
            .headers_mut()
            .insert(header::HeaderName::from_static("refresh"), value);
    }
    response
}

/// The viewer's own tasks, then those of the tail's calls it may see.
async fn tasks(console: &super::Console, caller: &Caller, calls: &[CallRecord]) -> Vec<pb::Task> {
    let request = pb::ListTasksRequest {
        page_size: 50,
        page_token: String::new(),
    };
    let mut tasks = console
        .tasks
        .list(&caller.id, &request)
        .await
        .map(|page| page.tasks)
        .unwrap_or_default();
    let viewer = TaskViewer {
        caller: caller.clone(),
        policy: console.access.policy(),
    };
    let named: Vec<&str> = calls
        .iter()
        .filter_map(|c| c.task.as_deref())
        .filter(|id| !tasks.iter().any(|t| t.id == *id))
        .take(TAIL_TASKS)
        .collect();
    for id in named {
        if tasks.iter().any(|t| t.id == id) {
            continue;
        }
        if let Ok(task) = console.tasks.get(id, &viewer).await {
            tasks.push(task.to_proto());
        }
    }
    tasks.sort_by(|a, b| {
        let at = |t: &pb::Task| t.updated_at.as_ref().map(|u| (u.seconds, u.nanos));
        at(b).cmp(&at(a))
    });
    tasks
}

fn state(state: i32) -> &'static str {
    match pb::TaskState::try_from(state) {
        Ok(pb::TaskState::Working) => "working",
        Ok(pb::TaskState::InputRequired) => "input required",
        Ok(pb::TaskState::Completed) => "completed",
        Ok(pb::TaskState::Failed) => "failed",
        Ok(pb::TaskState::Cancelled) => "cancelled",
        _ => "unknown",
    }
}

fn progress(task: &pb::Task) -> String {
    let Some(progress) = &task.progress else {
        return String::new();
    };
    match progress.fraction {
        Some(f) if progress.message.is_empty() => format!("{:.0}%", f * 100.0),
        Some(f) => format!("{:.0}% · {}", f * 100.0, progress.message),
        None => progress.message.clone(),
    }
}

/// The class an outcome is coloured by.
pub(crate) fn outcome_class(outcome: &str) -> &'static str {
    match outcome {
        "ok" => "good",
        "tool_error" | "invalid_argument" | "resource_exhausted" | "approval_required"
        | "task_started" | "not_found" => "notice",
        _ => "bad",
    }
}
