//! The console (`--console-listen`): web pages where operators see the
//! catalog, a tool's schema, exports, instances and recent traffic, try a
//! tool in the playground, follow calls and tasks, and decide approvals.
//! Server-rendered HTML ([`pages`]), one stylesheet and one small script
//! (the copy buttons) compiled into the binary; every answer carries a
//! strict Content-Security-Policy.
//!
//! A viewer is who an agent with the same credential would be
//! ([`identify`]): an `Authorization: Bearer` header, or a sign-in
//! ([`session`]) with the API key or JWT, kept sealed in a cookie. A
//! viewer sees exactly the tools the policy lets it call; a tool it may
//! not see reads as one that does not exist. The policy's `console`
//! section says who may view, invoke and approve. With agents
//! unauthenticated (loopback only, unless `--insecure`), anyone reaching
//! the port is the anonymous caller.

use std::{sync::Arc, time::Duration};

use axum::{
    Form, Router,
    extract::{DefaultBodyLimit, Path, Request, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::{Next, from_fn, from_fn_with_state},
    response::{IntoResponse, Redirect, Response},
    routing::{get, post},
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolmesh_proto::pb;
use toolmesh_proto::tls::ServerTls;

use crate::{
    access::{Access, allows, auth::Caller},
    calls::tail::CallTail,
    catalog::{Catalog, search::ToolSearch, store::model::ToolState},
    serving::api::ToolRegistryApi,
    serving::http_listener::{HttpListener, PeerAddr},
    tasks::Tasks,
};

mod approvals;
mod calls;
mod catalog_page;
mod form;
mod identify;
mod instances;
mod pages;
mod playground;
mod plots;
mod schema_view;
pub(crate) mod session;
pub(crate) mod shared_key;

use identify::{cookie, identify, metadata};
use pages::Viewer;
use session::{Sealer, Session};

/// Largest form body read.
const MAX_FORM_BYTES: usize = 64 * 1024;
/// The stylesheet, compiled in.
const STYLESHEET: &str = include_str!("console/console.css");
/// The one script: the copy buttons.
const SCRIPT: &str = include_str!("console/console.js");
/// What a page may load: its own stylesheet, nothing inline, no frames.
const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; script-src 'self'; \
                   form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// What the console serves from.
pub(crate) struct Console {
    /// The tools.
    pub catalog: Arc<Catalog>,
    /// Who the viewer is, and what it may see.
    pub access: Arc<Access>,
    /// The catalog page's search.
    pub search: Arc<ToolSearch>,
    /// Seals sign-ins.
    pub sealer: Sealer,
    /// How long a sign-in lasts.
    pub session_ttl: Duration,
    /// Whether it is served in TLS (cookies then Secure).
    pub tls: bool,
    /// `Invoke` and `ExportTools`, as agents call them.
    pub agents: Arc<ToolRegistryApi>,
    /// Tasks and approvals.
    pub tasks: Arc<Tasks>,
    /// The calls this replica answered lately.
    pub tail: Arc<CallTail>,
    /// How long a lease lasts without a heartbeat.
    pub lease_ttl: Duration,
    /// In Redis mode, the tail every replica adds its calls to.
    pub shared_tail: Option<crate::calls::tail::shared::SharedTail>,
}

type Shared = Arc<Console>;

impl Console {
    /// The console's routes and layers.
    pub(crate) fn router(self) -> Router {
        let shared: Shared = Arc::new(self);
        let viewed = Router::new()
            .route("/", get(|| async { Redirect::to("/tools") }))
            .route("/tools", get(catalog_page::catalog))
            .route("/tools/{name}", get(tool))
            .route(
                "/tools/{name}/try",
                get(playground::form_page).post(playground::try_it),
            )
            .route("/instances", get(instances::page))
            .route("/calls", get(calls::page))
            .route("/approvals", get(approvals::list))
            .route("/approvals/decide", post(approvals::decide))
            .route("/logout", post(logout))
            .layer(from_fn_with_state(shared.clone(), identify));
        Router::new()
            .route("/login", get(login_form).post(login))
            .route("/assets/console.css", get(stylesheet))
            .route("/assets/console.js", get(script))
            .merge(viewed)
            .fallback(|| async {
                (
                    StatusCode::NOT_FOUND,
                    pages::message("Not found", None, "No such page."),
                )
            })
            .layer(DefaultBodyLimit::max(MAX_FORM_BYTES))
            .layer(from_fn(secure_headers))
            .with_state(shared)
    }

    /// Serves on `listener` (in TLS if `tls` is set) until `drain` is
    /// cancelled; connections are closed at once when `cut` is.
    pub(crate) async fn serve(
        self,
        listener: TcpListener,
        tls: Option<ServerTls>,
        drain: CancellationToken,
        cut: CancellationToken,
    ) -> std::io::Result<()> {
        let listener = HttpListener::new(listener, tls, &cut);
        axum::serve(
            listener,
            self.router()
                .into_make_service_with_connect_info::<PeerAddr>(),
        )
        .with_graceful_shutdown(drain.cancelled_owned())
        .await
    }
}

/// Every answer: the Content-Security-Policy, no sniffing, no framing, no
/// referrer to other sites (the same origin's keeps forms' `Origin`), no
/// caching of what a viewer saw.
async fn secure_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn stylesheet() -> Response {
    asset("text/css; charset=utf-8", STYLESHEET)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        body,
    )
        .into_response()
}

/// The sign-in form, with a fresh double-submit token in a cookie and the
/// form.
async fn login_form(State(console): State<Shared>) -> Response {
    login_page(&console, StatusCode::OK, None)
}

fn login_page(console: &Console, status: StatusCode, problem: Option<&str>) -> Response {
    let token = session::random_token();
    let cookie = session::set_cookie(
        session::LOGIN_COOKIE,
        &token,
        Duration::from_secs(3600),
        console.tls,
    );
    (
        status,
        [(header::SET_COOKIE, cookie)],
        pages::login(&token, problem),
    )
        .into_response()
}

#[derive(serde::Deserialize)]
struct LoginForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    credential: String,
}

/// Signs in with the credential given, if the registry accepts it and
/// the form came from its own page.
async fn login(
    State(console): State<Shared>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let expected = cookie(&headers, session::LOGIN_COOKIE).unwrap_or_default();
    if !session::tokens_match(expected, &form.csrf) {
        return login_page(
            &console,
            StatusCode::FORBIDDEN,
            Some("The form expired or did not come from this console: try again."),
        );
    }
    let credential = form.credential.trim();
    let bearer = HeaderValue::from_str(&format!("Bearer {credential}")).ok();
    if credential.is_empty() || bearer.is_none() {
        return login_page(
            &console,
            StatusCode::UNAUTHORIZED,
            Some("Give an API key or a JWT."),
        );
    }
    match console.access.caller(&metadata(bearer.as_ref())) {
        Ok(caller) => {
            tracing::info!(caller = %caller.id, "console: signed in");
            let sealed = console
                .sealer
                .seal(&Session::new(credential.to_owned(), console.session_ttl));
            let set =
                session::set_cookie(session::COOKIE, &sealed, console.session_ttl, console.tls);
            let clear = session::set_cookie(session::LOGIN_COOKIE, "", Duration::ZERO, console.tls);
            let mut response = Redirect::to("/tools").into_response();
            for value in [set, clear] {
                if let Ok(value) = HeaderValue::from_str(&value) {
                    response.headers_mut().append(header::SET_COOKIE, value);
                }
            }
            response
        }
        Err(error) => {
            tracing::info!(%error, "console: sign-in refused");
            login_page(
                &console,
                StatusCode::UNAUTHORIZED,
                Some("This credential is not accepted."),
            )
        }
    }
}

#[derive(serde::Deserialize)]
struct CsrfForm {
    #[serde(default)]
    csrf: String,
}

/// Signs out: the session cookie removed.
async fn logout(
    State(console): State<Shared>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Form(form): Form<CsrfForm>,
) -> Response {
    if !viewer.signed_in {
        return Redirect::to("/login").into_response();
    }
    if !viewer.posted(&form.csrf) {
        return (
            StatusCode::FORBIDDEN,
            pages::message("Refused", None, "The form did not come from this console."),
        )
            .into_response();
    }
    let clear = session::set_cookie(session::COOKIE, "", Duration::ZERO, console.tls);
    ([(header::SET_COOKIE, clear)], Redirect::to("/login")).into_response()
}

/// Whether `caller` may see `tool`.
fn sees(console: &Console, caller: &Caller, tool: &str) -> bool {
    allows(console.access.policy().as_deref(), caller, tool)
}

/// The answer for a tool that does not exist and for one the viewer may
/// not see alike.
fn no_such_tool(viewer: &Viewer, name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        pages::message(
            "No such tool",
            Some(viewer),
            &format!("There is no tool {name:?} you may see."),
        ),
    )
        .into_response()
}

async fn tool(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Path(name): Path<String>,
) -> Response {
    let found = console
        .catalog
        .get(&name)
        .filter(|t| sees(&console, &caller, t.name()));
    let Some(tool) = found else {
        return no_such_tool(&viewer, &name);
    };
    let versions: Vec<String> = console
        .catalog
        .family(tool.name())
        .map(|family| {
            family
                .versions()
                .iter()
                .map(|t| t.descriptor.version.clone())
                .filter(|v| !v.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let exports = exports(&tool);
    let series = console.tail.series(tool.name(), std::time::Instant::now());
    pages::tool(
        Some(&viewer),
        &pages::ToolPage {
            tool: &tool,
            versions: &versions,
            exports: &exports,
            series: series.as_deref(),
        },
    )
    .into_response()
}

/// The formats a tool is exported in, with its export in each.
const EXPORT_FORMATS: [(pb::ExportFormat, &str, &str); 5] = [
    (
        pb::ExportFormat::OpenaiChat,
        "openai-chat",
        "OpenAI Chat Completions",
    ),
    (
        pb::ExportFormat::OpenaiResponses,
        "openai-responses",
        "OpenAI Responses",
    ),
    (
        pb::ExportFormat::Anthropic,
        "anthropic",
        "Anthropic Messages",
    ),
    (pb::ExportFormat::Gemini, "gemini", "Gemini"),
    (pb::ExportFormat::Mcp, "mcp", "MCP"),
];

/// `tool` in each LLM format (id, label, pretty JSON or why not).
fn exports(tool: &Arc<ToolState>) -> Vec<(&'static str, &'static str, Result<String, String>)> {
    EXPORT_FORMATS
        .iter()
        .map(|(format, id, label)| {
            let export = crate::catalog::export::export(*format, [tool], usize::MAX);
            let shown = match export.tools.first() {
                Some(value) => Ok(serde_json::to_string_pretty(value).unwrap_or_default()),
                None => Err(export
                    .issues
                    .first()
                    .map_or_else(|| "not exported".to_owned(), |i| i.message.clone())),
            };
            (*id, *label, shown)
        })
        .collect()
}

#[cfg(test)]
mod tests;
