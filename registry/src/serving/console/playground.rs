//! The playground: a tool tried from its page, through the same `Invoke`
//! an agent calls, as the viewer (its credential, its policy, its rate
//! limits, its approvals). The form is drawn from the input schema
//! ([`form`]); the answer shows the result, the tool's error, or each
//! violation at the field it names, the wait a rate limit asks for, the
//! task a held call became.

use axum::{
    Form,
    extract::{Path, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use maud::{Markup, html};
use serde_json::Value;
use tonic_types::StatusExt as _;
use toolmesh_proto::pb::{self, tool_registry_server::ToolRegistry as _};

use super::{
    Shared,
    form::{self, Field, Kind, PREFIX},
    identify, pages,
    pages::Viewer,
};
use crate::{access::auth::Caller, catalog::store::model::ToolState};

/// Longest result shown, in bytes.
const MAX_SHOWN: usize = 256 * 1024;

/// What a call from the playground came to.
#[derive(Debug, Default)]
struct Answer {
    /// `ok`, `tool_error`, `approval_required`, or a gRPC code's name.
    outcome: String,
    /// The registry's message, for a refusal.
    message: String,
    /// The result (or the tool's error), pretty when it is JSON.
    result: Option<String>,
    /// Violations, each at its JSON pointer.
    violations: Vec<(String, String)>,
    /// How long a rate limit asks to wait.
    retry_after: Option<std::time::Duration>,
    /// The task the call became.
    task: Option<String>,
    /// The instance that answered, and the attempts.
    instance: Option<(String, u32)>,
}

/// What the form posts besides the arguments.
struct Posted {
    csrf: String,
    idempotency_key: String,
    raw: String,
}

fn posted(values: &[(String, String)]) -> Posted {
    let get = |key: &str| {
        values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    Posted {
        csrf: get("csrf"),
        idempotency_key: get("idempotency_key"),
        raw: get("raw"),
    }
}

/// `GET /tools/{name}/try`.
pub(crate) async fn form_page(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Path(name): Path<String>,
) -> Response {
    let Some(tool) = visible(&console, &caller, &name) else {
        return super::no_such_tool(&viewer, &name);
    };
    page(&viewer, &tool, &[], &Posted::empty(), None).into_response()
}

/// `POST /tools/{name}/try`: the call, then the form again with its answer.
pub(crate) async fn try_it(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Path(name): Path<String>,
    Form(values): Form<Vec<(String, String)>>,
) -> Response {
    let Some(tool) = visible(&console, &caller, &name) else {
        return super::no_such_tool(&viewer, &name);
    };
    let posted = posted(&values);
    if !viewer.posted(&posted.csrf) {
        return identify::refused("The form expired or did not come from this console.");
    }
    if !viewer.rights.invoke {
        return (
            StatusCode::FORBIDDEN,
            pages::message(
                "Not allowed",
                Some(&viewer),
                "Your console role does not let you call tools.",
            ),
        )
            .into_response();
    }
    let fields = schema_fields(&tool);
    let arguments = if posted.raw.trim().is_empty() {
        match fields.as_deref().map(|f| form::arguments(f, &values)) {
            Some(Ok(arguments)) => arguments.to_string(),
            Some(Err(unreadable)) => {
                let answer = Answer {
                    outcome: "invalid_argument".into(),
                    message: "Some fields could not be read.".into(),
                    violations: unreadable
                        .into_iter()
                        .map(|u| (u.pointer, u.message))
                        .collect(),
                    ..Answer::default()
                };
                return page(&viewer, &tool, &values, &posted, Some(&answer)).into_response();
            }
            None => "{}".to_owned(),
        }
    } else {
        posted.raw.clone()
    };
    let answer = call(&console, &viewer, &tool, arguments, &posted).await;
    page(&viewer, &tool, &values, &posted, Some(&answer)).into_response()
}

impl Posted {
    fn empty() -> Self {
        Self {
            csrf: String::new(),
            idempotency_key: String::new(),
            raw: String::new(),
        }
    }
}

/// The tool, when the viewer may see it.
fn visible(
    console: &super::Console,
    caller: &Caller,
    name: &str,
) -> Option<std::sync::Arc<ToolState>> {
    console
        .catalog
        .get(name)
        .filter(|t| super::sees(console, caller, t.name()))
}

fn schema_fields(tool: &ToolState) -> Option<Vec<Field>> {
    serde_json::from_str::<Value>(&tool.descriptor.input_schema_json)
        .ok()
        .as_ref()
        .and_then(form::fields)
}

/// Calls `tool` with `arguments` through `Invoke`, as the viewer.
async fn call(
    console: &super::Console,
    viewer: &Viewer,
    tool: &ToolState,
    arguments: String,
    posted: &Posted,
) -> Answer {
    let mut request = tonic::Request::new(pb::InvokeRequest {
        tool: tool.name().to_owned(),
        arguments_json: arguments,
        idempotency_key: posted.idempotency_key.trim().to_owned(),
        tool_digest: String::new(),
        version: String::new(),
    });
    *request.metadata_mut() = identify::metadata(viewer.authorization.as_ref());
    match console.agents.invoke(request).await {
        Ok(response) => {
            let response = response.into_inner();
            Answer {
                outcome: if response.is_error {
                    toolmesh_proto::code::TOOL_ERROR.to_owned()
                } else {
                    "ok".to_owned()
                },
                result: Some(pretty(&response.result_json)),
                instance: Some((response.instance_id, response.attempts)),
                ..Answer::default()
            }
        }
        Err(status) => answer_of(&status),
    }
}

fn answer_of(status: &tonic::Status) -> Answer {
    let info = status.get_details_error_info();
    let task = info
        .as_ref()
        .and_then(|i| i.metadata.get("task_id").cloned());
    let held = info
        .as_ref()
        .is_some_and(|i| i.reason == "APPROVAL_REQUIRED");
    Answer {
        outcome: if held {
            "approval_required".to_owned()
        } else {
            toolmesh_proto::code::outcome(status.code()).to_owned()
        },
        message: status.message().to_owned(),
        violations: status
            .get_details_bad_request()
            .map(|b| {
                b.field_violations
                    .into_iter()
                    .map(|v| (v.field, v.description))
                    .collect()
            })
            .unwrap_or_default(),
        retry_after: status.get_details_retry_info().and_then(|r| r.retry_delay),
        task,
        ..Answer::default()
    }
}

fn pretty(json: &str) -> String {
    let shown = serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| json.to_owned());
    match shown.char_indices().nth(MAX_SHOWN) {
        Some((cut, _)) => format!("{}\n… (cut at {} KB)", &shown[..cut], MAX_SHOWN / 1024),
        None => shown,
    }
}

fn page(
    viewer: &Viewer,
    tool: &ToolState,
    values: &[(String, String)],
    posted: &Posted,
    answer: Option<&Answer>,
) -> Markup {
    let fields = schema_fields(tool);
    let violations = answer.map_or(&[][..], |a| a.violations.as_slice());
    // Violations no field owns are shown above the form.
    let loose: Vec<&(String, String)> = violations
        .iter()
        .filter(|(pointer, _)| {
            fields
                .as_deref()
                .is_none_or(|f| form::owner(f, pointer).is_none())
        })
        .collect();
    let raw_open = fields.is_none() || !posted.raw.trim().is_empty();
    let name = tool.name();
    pages::layout(
        &format!("Try {name}"),
        Some(viewer),
        html! {
            h1 { "Try " code { (name) } }
            p { a href=(pages::tool_href(name)) { "← the tool's page" } }
            @if !viewer.rights.invoke {
                p.error { "Your console role does not let you call tools." }
            }
            @if let Some(answer) = answer { (answer_section(answer, &loose)) }
            form #playground method="post" action=(format!("{}/try", pages::tool_href(name))) {
                input type="hidden" name="csrf" value=(viewer.csrf);
                @if let Some(fields) = &fields {
                    (field_set(fields, values, violations, answer.is_some()))
                } @else {
                    p.note { "This schema has no form; write the arguments as JSON." }
                }
                details.raw-json open[raw_open] {
                    summary { "Arguments as JSON (used instead of the form when not empty)" }
                    textarea name="raw" rows="8" spellcheck="false" { (posted.raw) }
                }
                div.field {
                    label for="idempotency_key" { "Idempotency key" }
                    input #idempotency_key type="text" name="idempotency_key" value=(posted.idempotency_key) placeholder="optional: a repeat with the same key is answered once";
                }
                button #invoke type="submit" disabled[!viewer.rights.invoke] { "Invoke" }
            }
        },
    )
}

fn answer_section(answer: &Answer, loose: &[&(String, String)]) -> Markup {
    html! {
        section #answer .answer data-outcome=(answer.outcome) {
            h2 { "Answer: " (answer.outcome.replace('_', " ")) }
            @if !answer.message.is_empty() { p.message { (answer.message) } }
            @if let Some(wait) = answer.retry_after {
                p.retry-after { "Rate limited: try again in " (format!("{:.1}", wait.as_secs_f64())) " s." }
            }
            @if let Some(task) = &answer.task {
                p.task {
                    "Held as task " code { (task) } ": "
                    a href="/approvals" { "approvals" } " · " a href="/calls" { "calls" }
                }
            }
            @if !loose.is_empty() {
                ul.violations {
                    @for (pointer, message) in loose {
                        li.violation data-pointer=(pointer) {
                            @if !pointer.is_empty() { code { (pointer) } ": " }
                            (message)
                        }
                    }
                }
            }
            @if let Some((instance, attempts)) = &answer.instance {
                p.note { "Answered by " code { (instance) } " in " (attempts) " attempt(s)." }
            }
            @if let Some(result) = &answer.result {
                pre #result .result.tool-error[answer.outcome == toolmesh_proto::code::TOOL_ERROR] { (result) }
            }
        }
    }
}

fn field_set(
    fields: &[Field],
    values: &[(String, String)],
    violations: &[(String, String)],
    submitted: bool,
) -> Markup {
    html! {
        @for field in fields {
            @let mine: Vec<&String> = violations
                .iter()
                .filter(|(pointer, _)| form::owner(fields, pointer).is_some_and(|f| f.pointer == field.pointer))
                .map(|(_, message)| message)
                .collect();
            @if let Kind::Object(nested) = &field.kind {
                fieldset.field data-pointer=(field.pointer) {
                    legend { (field.name) @if field.required { span.required { " *" } } }
                    @if !field.description.is_empty() { p.hint { (field.description) } }
                    @for message in &mine { p.violation data-pointer=(field.pointer) { (message) } }
                    (field_set(nested, values, violations, submitted))
                }
            } @else {
                (input(field, values, &mine, submitted))
            }
        }
    }
}

fn input(field: &Field, values: &[(String, String)], mine: &[&String], submitted: bool) -> Markup {
    let name = format!("{PREFIX}{}", field.pointer);
    let id = format!("f{}", field.pointer.replace(['/', '~'], "-"));
    let text = match form::submitted(values, &field.pointer) {
        Some(text) => text.to_owned(),
        None if submitted => String::new(),
        None => field
            .default
            .as_ref()
            .map(|d| form::text_of(&field.kind, d))
            .unwrap_or_default(),
    };
    let invalid = !mine.is_empty();
    html! {
        div.field.invalid[invalid] data-pointer=(field.pointer) {
            label for=(id) {
                (field.name) @if field.required { span.required { " *" } }
                span.kind { " " (kind_label(&field.kind)) }
            }
            @match &field.kind {
                Kind::Choice(options) => {
                    select #(id) name=(name) aria-invalid=[invalid.then_some("true")] {
                        option value="" selected[text.is_empty()] { "(unset)" }
                        @for option in options {
                            @let shown = form::text_of(&field.kind, option);
                            option value=(shown) selected[shown == text] { (shown) }
                        }
                    }
                }
                Kind::List(..) => {
                    textarea #(id) name=(name) rows="3" placeholder="one item a line" aria-invalid=[invalid.then_some("true")] { (text) }
                }
                Kind::Json => {
                    textarea #(id) name=(name) rows="3" spellcheck="false" placeholder="JSON" aria-invalid=[invalid.then_some("true")] { (text) }
                }
                Kind::Scalar(form::Scalar::Number | form::Scalar::Integer) => {
                    input #(id) type="text" inputmode="decimal" name=(name) value=(text) aria-invalid=[invalid.then_some("true")];
                }
                _ => {
                    input #(id) type="text" name=(name) value=(text) aria-invalid=[invalid.then_some("true")];
                }
            }
            @if !field.description.is_empty() { p.hint { (field.description) } }
            @for message in mine { p.violation data-pointer=(field.pointer) { (message) } }
        }
    }
}

fn kind_label(kind: &Kind) -> &'static str {
    match kind {
        Kind::Scalar(form::Scalar::String) => "text",
        Kind::Scalar(form::Scalar::Number) => "number",
        Kind::Scalar(form::Scalar::Integer) => "integer",
        Kind::Scalar(form::Scalar::Boolean) | Kind::Choice(_) => "choice",
        Kind::List(..) => "list, one a line",
        Kind::Object(_) => "object",
        Kind::Json => "JSON",
    }
}
