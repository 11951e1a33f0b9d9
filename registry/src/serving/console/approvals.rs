//! The approvals page: what waits for the viewer (held calls, held
//! definitions), with the arguments as the approvers' inbox shows them
//! (redacted as the audit log redacts them, unless the rule reveals
//! them), who may decide and until when; approve or deny with a comment.
//! It reads and decides through the same inbox as `toolmesh.v1.Approvals`,
//! so the same checks hold: only the rule's approvers, no self-approval
//! unless the rule allows it, bound to the digest the approver saw.

use axum::{
    Form,
    extract::{Query, State},
    http::StatusCode,
    response::{IntoResponse, Redirect, Response},
};
use maud::html;
use toolmesh_proto::pb;
use toolmesh_telemetry::TraceContext;

use super::{Shared, identify, pages, pages::Viewer};
use crate::{
    access::auth::Caller,
    tasks::{Decide, Viewer as TaskViewer, approval::MAX_COMMENT},
};

/// Approvals on one page.
const PAGE_SIZE: u32 = 50;

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct ListQuery {
    /// The inbox's page token.
    #[serde(default)]
    page: String,
    /// What the last decision came to, shown once.
    #[serde(default)]
    done: String,
}

/// `GET /approvals`.
pub(crate) async fn list(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Query(query): Query<ListQuery>,
) -> Response {
    if !viewer.rights.approve {
        return not_an_approver(&viewer);
    }
    let request = pb::ListApprovalsRequest {
        page_size: PAGE_SIZE,
        page_token: query.page.clone(),
    };
    let page = match console.tasks.inbox_page(&caller, &request).await {
        Ok(page) => page,
        Err(error) => return pages::unavailable("Approvals", &viewer, &error),
    };
    let notice = match query.done.as_str() {
        "approved" => Some("Approved: the call runs now."),
        "denied" => Some("Denied: the caller gets your comment."),
        _ => None,
    };
    pages::layout(
        "Approvals",
        Some(&viewer),
        html! {
            h1 { "Approvals" }
            @if let Some(notice) = notice { p.notice role="status" { (notice) } }
            p.summary { "Calls and definitions waiting for a decision you may make." }
            table.approvals {
                thead { tr {
                    th { "Tool" } th { "Caller" } th { "Arguments" } th { "Rule" }
                    th { "Who decides" } th { "Until" } th { "Decision" }
                } }
                tbody {
                    @for approval in &page.approvals { (row(approval, &viewer)) }
                }
            }
            @if page.approvals.is_empty() { p.empty { "Nothing waits for you." } }
            @if !page.next_page_token.is_empty() {
                nav.pages {
                    a rel="next" href=(format!("/approvals?page={}", encode(&page.next_page_token))) { "Next →" }
                }
            }
        },
    )
    .into_response()
}

fn row(approval: &pb::Approval, viewer: &Viewer) -> maud::Markup {
    let held_definition = approval.kind == pb::ApprovalKind::Definition as i32;
    let arguments = if held_definition {
        approval
            .definition
            .as_ref()
            .map(|d| d.changes.join("\n"))
            .unwrap_or_default()
    } else {
        serde_json::from_str::<serde_json::Value>(&approval.arguments_json)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| approval.arguments_json.clone())
    };
    let who = approval
        .approver_callers
        .iter()
        .map(String::as_str)
        .chain(approval.approver_groups.iter().map(|g| g.as_str()))
        .collect::<Vec<_>>()
        .join(", ");
    html! {
        tr data-task=(approval.task_id) {
            td.tool {
                a href=(pages::tool_href(&approval.tool)) { (approval.tool) }
                @if held_definition { div.title { "a changed definition" } }
            }
            td.caller { (if approval.caller.is_empty() { "anonymous" } else { &approval.caller }) }
            td.arguments {
                pre { (arguments) }
                @if approval.arguments_redacted { div.note { "redacted" } }
            }
            td.rule { (approval.rule) @if !approval.reason.is_empty() { div.title { (approval.reason) } } }
            td { (who) }
            td.expires { (approval.expires_at.as_ref().map(pages::timestamp).unwrap_or_default()) }
            td {
                form.decide method="post" action="/approvals/decide" {
                    input type="hidden" name="csrf" value=(viewer.csrf);
                    input type="hidden" name="task_id" value=(approval.task_id);
                    input type="hidden" name="digest" value=(approval.digest);
                    textarea name="comment" rows="2" maxlength=(MAX_COMMENT) placeholder="comment (the caller reads it)" aria-label="Comment" {}
                    div.buttons {
                        button.approve type="submit" name="decision" value="approve" { "Approve" }
                        button.deny type="submit" name="decision" value="deny" { "Deny" }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Decision {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    task_id: String,
    #[serde(default)]
    digest: String,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    decision: String,
}

/// `POST /approvals/decide`.
pub(crate) async fn decide(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Form(form): Form<Decision>,
) -> Response {
    if !viewer.posted(&form.csrf) {
        return identify::refused("The form expired or did not come from this console.");
    }
    if !viewer.rights.approve {
        return not_an_approver(&viewer);
    }
    let (decide, done) = match form.decision.as_str() {
        "approve" => (Decide::Approve, "approved"),
        "deny" => (Decide::Deny, "denied"),
        _ => {
            return (
                StatusCode::BAD_REQUEST,
                pages::message("No decision", Some(&viewer), "Choose approve or deny."),
            )
                .into_response();
        }
    };
    let deciding = TaskViewer {
        caller,
        policy: console.access.policy(),
    };
    let decided = console
        .tasks
        .inbox_decide(
            &form.task_id,
            &deciding,
            decide,
            // The approval keeps at most MAX_COMMENT bytes of it.
            (form.comment.trim(), &form.digest),
            &TraceContext::default(),
        )
        .await;
    match decided {
        Ok(_) => {
            tracing::info!(task = %form.task_id, decided_by = %viewer.id, decision = done, "console: approval decided");
            Redirect::to(&format!("/approvals?done={done}")).into_response()
        }
        Err(error) => {
            let status = tonic::Status::from(error);
            (
                StatusCode::CONFLICT,
                pages::message("Not decided", Some(&viewer), status.message()),
            )
                .into_response()
        }
    }
}

fn not_an_approver(viewer: &Viewer) -> Response {
    (
        StatusCode::FORBIDDEN,
        pages::message(
            "Not an approver",
            Some(viewer),
            "Your console role does not let you decide approvals.",
        ),
    )
        .into_response()
}

fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
