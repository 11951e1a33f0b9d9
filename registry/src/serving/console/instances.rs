//! The instances page: each live sidecar instance by registrant, with its
//! endpoint, the tools it serves that the viewer may see, its lease's age,
//! its last heartbeat and when the lease runs out; 50 a page.

use std::time::Duration;

use axum::{
    extract::{Query, State},
    response::{IntoResponse, Response},
};
use maud::html;

use super::{Shared, pages, pages::Viewer};
use crate::{
    access::{allows, auth::Caller},
    catalog::store::model::{InstanceLease, epoch_ms},
    catalog::versions,
};

/// Instances on one page.
const PAGE_SIZE: usize = 50;

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct InstancesQuery {
    #[serde(default)]
    page: Option<usize>,
    /// Only this registrant's.
    #[serde(default)]
    registrant: String,
}

/// `GET /instances`.
pub(crate) async fn page(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Query(query): Query<InstancesQuery>,
) -> Response {
    let instances = match console.catalog.instances().await {
        Ok(instances) => instances,
        Err(error) => return pages::unavailable("Instances", &viewer, &error),
    };
    let policy = console.access.policy();
    let mut shown: Vec<InstanceLease> = instances
        .into_iter()
        .filter(|i| query.registrant.is_empty() || i.owner == query.registrant)
        .filter_map(|mut instance| {
            // Only the tools the viewer may see; an instance of none is
            // not shown at all.
            instance
                .tools
                .retain(|key| allows(policy.as_deref(), &caller, versions::name_of(key)));
            (!instance.tools.is_empty()).then_some(instance)
        })
        .collect();
    shown.sort_by(|a, b| (&a.owner, &a.id).cmp(&(&b.owner, &b.id)));
    let total = shown.len();
    let page = query.page.unwrap_or(1).max(1);
    let skip = (page - 1).saturating_mul(PAGE_SIZE);
    let rows = shown.get(skip..).unwrap_or_default();
    let rows = &rows[..rows.len().min(PAGE_SIZE)];
    let now = epoch_ms();
    let href = |to: usize| {
        let mut url = url::form_urlencoded::Serializer::new(String::new());
        if !query.registrant.is_empty() {
            url.append_pair("registrant", &query.registrant);
        }
        url.append_pair("page", &to.to_string());
        format!("/instances?{}", url.finish())
    };
    pages::layout(
        "Instances",
        Some(&viewer),
        html! {
            h1 { "Instances" }
            form.filters method="get" action="/instances" {
                input type="text" name="registrant" value=(query.registrant) placeholder="registrant" aria-label="Registrant";
                button type="submit" { "Filter" }
            }
            p.summary { (total) " live instances · leases last " (seconds(console.lease_ttl)) " without a heartbeat" }
            table.instances {
                thead { tr {
                    th { "Instance" } th { "Registrant" } th { "Endpoint" } th { "Tools" }
                    th { "Lease age" } th { "Last heartbeat" } th { "Expires in" }
                } }
                tbody {
                    @for instance in rows {
                        tr data-instance=(instance.id) {
                            td { code { (instance.id) } }
                            td.registrant { (if instance.owner.is_empty() { "-" } else { &instance.owner }) }
                            td { code { (instance.endpoint) } }
                            td {
                                @for (i, key) in instance.tools.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    a href=(pages::tool_href(versions::name_of(key))) { (key) }
                                }
                            }
                            td { (instance.announced_ms.map_or_else(|| "-".to_owned(), |at| ago(now.saturating_sub(at)))) }
                            td { (instance.expires_in.and_then(|left| console.lease_ttl.checked_sub(left)).map_or_else(|| "-".to_owned(), |since| format!("{} ago", seconds(since)))) }
                            td { (instance.expires_in.map_or_else(|| "-".to_owned(), seconds)) }
                        }
                    }
                }
            }
            @if rows.is_empty() { p.empty { "No instance is live." } }
            nav.pages {
                @if page > 1 { a rel="prev" href=(href(page - 1)) { "← Previous" } }
                span { "Page " (page) }
                @if skip + PAGE_SIZE < total { a rel="next" href=(href(page + 1)) { "Next →" } }
            }
        },
    )
    .into_response()
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn ago(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs % 3600 / 60),
    }
}
