//! The console's pages, rendered on the server with `maud`, which escapes
//! every value it interpolates: a tool's name, description or schema is
//! text on the page, never markup or script. No page has inline script or
//! style (the Content-Security-Policy forbids both).

use maud::{DOCTYPE, Markup, html};
use toolmesh_proto::pb;

use super::{plots, schema_view};
use crate::{access::auth::ConsoleRights, calls::tail::Bucket, catalog::store::model::ToolState};

/// Who is looking, as the pages show it and the forms check it.
#[derive(Debug, Clone)]
pub(crate) struct Viewer {
    /// The caller id.
    pub id: String,
    /// The token every form carries: the session's, or (anonymous) the
    /// double-submit cookie's.
    pub csrf: String,
    /// Signed in with a session: the page offers to sign out.
    pub signed_in: bool,
    /// Named by an `Authorization` header, which no other site's form can
    /// send: its posts need no token.
    pub by_header: bool,
    /// What the policy's `console` section lets it do.
    pub rights: ConsoleRights,
    /// The credential the playground's calls carry (marked sensitive:
    /// never in a debug print).
    pub authorization: Option<http::HeaderValue>,
}

impl Viewer {
    /// Whether a form posted with `token` came from this console's page.
    pub(crate) fn posted(&self, token: &str) -> bool {
        self.by_header || super::session::tokens_match(&self.csrf, token)
    }
}

/// The page around `body`, titled `title`.
pub(crate) fn layout(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · toolmesh" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body {
                header {
                    nav {
                        a.brand href="/tools" { "toolmesh" }
                        a href="/tools" { "Catalog" }
                        a href="/instances" { "Instances" }
                        a href="/calls" { "Calls" }
                        @if viewer.is_some_and(|v| v.rights.approve) {
                            a href="/approvals" { "Approvals" }
                        }
                    }
                    @if let Some(viewer) = viewer {
                        div.viewer {
                            span { (if viewer.id.is_empty() { "anonymous" } else { &viewer.id }) }
                            @if viewer.signed_in {
                                form method="post" action="/logout" {
                                    input type="hidden" name="csrf" value=(viewer.csrf);
                                    button type="submit" { "Sign out" }
                                }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The sign-in form; `problem` says why the last attempt failed.
pub(crate) fn login(csrf: &str, problem: Option<&str>) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            p { "With the API key or JWT an agent of yours would call with." }
            @if let Some(problem) = problem {
                p.error role="alert" { (problem) }
            }
            form.login method="post" action="/login" {
                input type="hidden" name="csrf" value=(csrf);
                label for="credential" { "API key or JWT" }
                input #credential type="password" name="credential" autocomplete="off" required;
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// A page that only says `message`, with its title.
pub(crate) fn message(title: &str, viewer: Option<&Viewer>, message: &str) -> Markup {
    layout(title, viewer, html! { h1 { (title) } p { (message) } })
}

/// The answer when what `what` shows cannot be read now (the engine
/// behind it failed): 502, with the reason.
pub(crate) fn unavailable(
    what: &str,
    viewer: &Viewer,
    error: &crate::error::RegistryError,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    (
        http::StatusCode::BAD_GATEWAY,
        message(
            &format!("{what} unavailable"),
            Some(viewer),
            &error.to_string(),
        ),
    )
        .into_response()
}

/// What the catalog page was asked for.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub(crate) struct CatalogQuery {
    /// Words to search for (the `SearchTools` ranking); empty: by name.
    #[serde(default)]
    pub q: String,
    /// Only tools with this tag.
    #[serde(default)]
    pub tag: String,
    /// Only tools whose name starts with this.
    #[serde(default)]
    pub prefix: String,
    /// By name: the page starts after this name.
    #[serde(default)]
    pub after: String,
    /// By name: the page ends before this name.
    #[serde(default)]
    pub before: String,
    /// The page's number, from 1 (searched: which page of the ranking).
    #[serde(default)]
    pub page: Option<usize>,
}

impl CatalogQuery {
    /// The catalog page `to` with these filters, and `extra` parameters.
    pub(crate) fn href(&self, extra: &[(&str, &str)], to: usize) -> String {
        let mut url = url::form_urlencoded::Serializer::new(String::new());
        for (key, value) in [("q", &self.q), ("tag", &self.tag), ("prefix", &self.prefix)] {
            if !value.is_empty() {
                url.append_pair(key, value);
            }
        }
        for (key, value) in extra {
            url.append_pair(key, value);
        }
        url.append_pair("page", &to.to_string());
        format!("/tools?{}", url.finish())
    }
}

/// One page of the catalog.
pub(crate) struct Listing {
    pub tools: Vec<std::sync::Arc<ToolState>>,
    /// How many tools match, when known without a walk of them all.
    pub total: Option<usize>,
    /// The pages before and after, if any.
    pub prev: Option<String>,
    pub next: Option<String>,
    /// How the answer was ranked, when searched.
    pub ranking: Option<&'static str>,
}

pub(crate) fn catalog(
    viewer: Option<&Viewer>,
    query: &CatalogQuery,
    page: usize,
    listing: &Listing,
) -> Markup {
    layout(
        "Catalog",
        viewer,
        html! {
            h1 { "Catalog" }
            form.filters method="get" action="/tools" {
                input type="search" name="q" value=(query.q) placeholder="a task in words" aria-label="Search";
                input type="text" name="tag" value=(query.tag) placeholder="tag" aria-label="Tag";
                input type="text" name="prefix" value=(query.prefix) placeholder="name prefix" aria-label="Name prefix";
                button type="submit" { "Search" }
            }
            p.summary {
                @if let Some(total) = listing.total { (total) " tools" }
                @if let Some(ranking) = listing.ranking { " · ranked " (ranking) }
            }
            table.tools {
                thead { tr {
                    th { "Tool" } th { "Description" } th { "Version" } th { "Digest" }
                    th { "Hints" } th { "Limits" } th { "Instances" }
                } }
                tbody {
                    @for tool in &listing.tools {
                        (row(tool))
                    }
                }
            }
            @if listing.tools.is_empty() {
                p.empty { "No tool matches." }
            }
            nav.pages {
                @if let Some(prev) = &listing.prev { a rel="prev" href=(prev) { "← Previous" } }
                span { "Page " (page) }
                @if let Some(next) = &listing.next { a rel="next" href=(next) { "Next →" } }
            }
        },
    )
}

fn row(tool: &ToolState) -> Markup {
    let d = &tool.descriptor;
    html! {
        tr {
            td {
                a href=(tool_href(&d.name)) { (d.name) }
                @if !d.title.is_empty() { div.title { (d.title) } }
            }
            td.description { (d.description) }
            td { (if d.version.is_empty() { "-" } else { &d.version }) }
            td.digest title=(tool.digest) { (short(&tool.digest)) }
            td { (hints(d)) }
            td { (limits(d)) }
            td.count { (tool.instances.len()) }
        }
    }
}

/// What the tool's page shows.
pub(crate) struct ToolPage<'a> {
    pub tool: &'a ToolState,
    /// Every live version of its name.
    pub versions: &'a [String],
    /// Its export in each format: id, label, the JSON or why not.
    pub exports: &'a [(&'static str, &'static str, Result<String, String>)],
    /// Its last minutes on this replica, if it was called in them.
    pub series: Option<&'a [Bucket]>,
}

/// The tool's page.
pub(crate) fn tool(viewer: Option<&Viewer>, page: &ToolPage<'_>) -> Markup {
    let tool = page.tool;
    let d = &tool.descriptor;
    let title = if d.title.is_empty() {
        &d.name
    } else {
        &d.title
    };
    layout(
        &d.name,
        viewer,
        html! {
            h1 { (title) }
            p.name { code { (d.name) } " " a #try .button href=(format!("{}/try", tool_href(&d.name))) { "Try it" } }
            p.description { (d.description) }
            dl.facts {
                dt { "Version" } dd { (if d.version.is_empty() { "-" } else { &d.version }) }
                @if page.versions.len() > 1 {
                    dt { "Live versions" } dd { (page.versions.join(", ")) }
                }
                dt { "Digest" } dd { code { (tool.digest) } }
                dt { "Tags" } dd { (if d.tags.is_empty() { "-".to_owned() } else { d.tags.join(", ") }) }
                dt { "Hints" } dd { (hints(d)) }
                dt { "Timeout" } dd { (duration(d.timeout.as_ref())) }
            }
            h2 { "Rate limit" }
            (rate_limit(d, page.series))
            h2 { "Arguments" }
            (schema_view::render(&d.input_schema_json))
            @if !d.output_schema_json.is_empty() {
                h2 { "Output" }
                (schema_view::render(&d.output_schema_json))
            }
            h2 { "Last ten minutes" }
            @match page.series {
                Some(buckets) => (plots::charts(buckets)),
                None => p.empty { "No call in the last ten minutes on this replica." },
            }
            h2 { "Instances" }
            table.instances {
                thead { tr { th { "Instance" } th { "Endpoint" } th { "Calls signed" } } }
                tbody {
                    @for instance in &tool.instances {
                        tr {
                            td { code { (instance.id) } }
                            td { code { (instance.endpoint) } }
                            td { (if instance.execute_key.is_some() { "yes" } else { "no" }) }
                        }
                    }
                }
            }
            h2 { "Export" }
            p.note { "The tool as each LLM API takes it (what ExportTools answers)." }
            @for (id, label, shown) in page.exports {
                details.export {
                    summary { (label) }
                    @match shown {
                        Ok(json) => {
                            button.copy type="button" data-copy=(format!("export-{id}")) { "Copy" }
                            pre id=(format!("export-{id}")) { (json) }
                        }
                        Err(why) => p.note { (why) },
                    }
                }
            }
        },
    )
}

/// The tool's limits, and what they did in the last minutes.
fn rate_limit(d: &pb::ToolDescriptor, series: Option<&[Bucket]>) -> Markup {
    let (admitted, limited) = series.map_or((0, 0), |buckets| {
        buckets.iter().fold((0u64, 0u64), |(a, l), b| {
            (
                a + u64::from(b.calls() - b.limited),
                l + u64::from(b.limited),
            )
        })
    });
    let last_limited = series.and_then(|buckets| {
        buckets
            .iter()
            .rev()
            .position(|b| b.limited > 0)
            .map(|ago| ago as u64 * crate::calls::tail::BUCKET.as_secs())
    });
    html! {
        dl.facts.rate-limit {
            dt { "Limits" } dd { (limits(d)) }
            dt { "Last ten minutes" } dd {
                (admitted) " calls went past the limits, " (limited) " were refused by them"
                @if let Some(ago) = last_limited {
                    @if ago == 0 { " (the last in the current 10 s)" } @else { " (the last about " (ago) " s ago)" }
                }
            }
        }
    }
}

/// `at` as an RFC 3339 time, to the second.
pub(crate) fn timestamp(at: &prost_types::Timestamp) -> String {
    let seconds = u64::try_from(at.seconds).unwrap_or(0);
    humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds),
    )
    .to_string()
}

/// The path of `name`'s page, the name percent-encoded.
pub(crate) fn tool_href(name: &str) -> String {
    let encoded: String = url::form_urlencoded::byte_serialize(name.as_bytes()).collect();
    format!("/tools/{}", encoded.replace('+', "%20"))
}

fn short(digest: &str) -> &str {
    digest.get(..12).unwrap_or(digest)
}

fn hints(d: &pb::ToolDescriptor) -> String {
    let mut hints = Vec::new();
    if d.read_only == Some(true) {
        hints.push("read-only");
    }
    if d.destructive == Some(true) {
        hints.push("destructive");
    }
    if d.open_world == Some(true) {
        hints.push("open world");
    }
    if d.idempotent {
        hints.push("idempotent");
    }
    if hints.is_empty() {
        "-".to_owned()
    } else {
        hints.join(", ")
    }
}

fn limits(d: &pb::ToolDescriptor) -> String {
    let limit = |l: &pb::RateLimit| format!("{}/s, burst {}", l.rate, l.burst);
    let mut out = Vec::new();
    if let Some(l) = d.rate_limit.as_ref().filter(|l| l.rate > 0.0) {
        out.push(limit(l));
    }
    if let Some(l) = d.per_caller_rate_limit.as_ref().filter(|l| l.rate > 0.0) {
        out.push(format!("{} per caller", limit(l)));
    }
    if out.is_empty() {
        "-".to_owned()
    } else {
        out.join("; ")
    }
}

fn duration(d: Option<&prost_types::Duration>) -> String {
    match d {
        Some(d) if d.seconds > 0 || d.nanos > 0 => {
            let ms = d.seconds.saturating_mul(1000) + i64::from(d.nanos / 1_000_000);
            if ms % 1000 == 0 {
                format!("{} s", ms / 1000)
            } else {
                format!("{ms} ms")
            }
        }
        _ => "the registry's default".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_name_with_markup_is_text_on_the_page() {
        let href = tool_href("<script>alert(1)</script>");
        assert!(!href.contains('<'), "{href}");
        let page = message("<b>x</b>", None, "<script>alert(1)</script>").into_string();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    }
}
