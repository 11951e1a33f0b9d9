//! The catalog page: the tools the viewer may see, 50 a page, by name
//! (walked from the catalog's ordered index, resumed after the last name
//! shown, so a page costs what it walks) or, searched, in the
//! `SearchTools` ranking.

use axum::extract::{Query, State};
use maud::Markup;

use super::{Shared, pages, pages::Viewer};
use crate::{
    access::{allows, auth::Caller},
    catalog::{
        search::{Ranking, Scope},
        store::model::ToolState,
        store::view::{Step, Walk},
    },
};

/// Tools on one catalog page.
pub(crate) const PAGE_SIZE: usize = 50;

/// `GET /tools`.
pub(crate) async fn catalog(
    State(console): State<Shared>,
    axum::Extension(caller): axum::Extension<Caller>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    Query(query): Query<pages::CatalogQuery>,
) -> Markup {
    let policy = console.access.policy();
    let matches = |tool: &ToolState| {
        allows(policy.as_deref(), &caller, tool.name())
            && (query.tag.is_empty() || tool.descriptor.tags.contains(&query.tag))
            && tool.name().starts_with(query.prefix.as_str())
    };
    // By name, a page is where its cursor says; its number only labels it.
    let by_name = query.q.trim().is_empty();
    let page = if by_name && query.after.is_empty() && query.before.is_empty() {
        1
    } else {
        query.page.unwrap_or(1).max(1)
    };
    let listing = if by_name {
        let backwards = !query.before.is_empty();
        let from = if backwards {
            Walk::Before(&query.before)
        } else if !query.after.is_empty() {
            Walk::After(&query.after)
        } else {
            Walk::From(&query.prefix)
        };
        let prefix = query.prefix.as_str();
        let (mut tools, more) = console.catalog.walk(from, PAGE_SIZE, &mut |tool| {
            if !tool.name().starts_with(prefix) {
                // Names with the prefix are together: past them, none.
                let past = if backwards {
                    tool.name() < prefix
                } else {
                    tool.name() > prefix
                };
                return if past { Step::Stop } else { Step::Skip };
            }
            if matches(tool) {
                Step::Take
            } else {
                Step::Skip
            }
        });
        if backwards {
            tools.reverse();
        }
        // Exact for free only when every tool is shown.
        let unfiltered = query.tag.is_empty()
            && query.prefix.is_empty()
            && policy
                .as_deref()
                .is_none_or(|p| p.allows_every_tool(&caller));
        let (has_prev, has_next) = if backwards {
            (more, true)
        } else {
            (!query.after.is_empty(), more)
        };
        let link = |key: &str, name: Option<&std::sync::Arc<ToolState>>, to: usize| {
            name.map(|tool| query.href(&[(key, tool.name())], to))
        };
        pages::Listing {
            total: unfiltered.then(|| console.catalog.tool_count()),
            prev: if has_prev {
                link("before", tools.first(), page.saturating_sub(1).max(1))
            } else {
                None
            },
            next: if has_next {
                link("after", tools.last(), page + 1)
            } else {
                None
            },
            tools,
            ranking: None,
        }
    } else {
        let catalog = console.catalog.clone();
        let scope = move |name: &str| catalog.get(name).is_some_and(|t| matches(&t));
        let ranked = console.search.rank(&query.q, Scope::Visible(&scope)).await;
        let skip = (page - 1).saturating_mul(PAGE_SIZE);
        let total = ranked.found.len();
        let tools = ranked
            .found
            .iter()
            .skip(skip)
            .take(PAGE_SIZE)
            .filter_map(|f| console.catalog.get(&f.name))
            .collect();
        pages::Listing {
            tools,
            total: Some(total),
            prev: (page > 1).then(|| query.href(&[], page - 1)),
            next: (skip + PAGE_SIZE < total).then(|| query.href(&[], page + 1)),
            ranking: Some(match ranked.ranking {
                Ranking::Hybrid => "by meaning and words",
                Ranking::Lexical => "by words",
            }),
        }
    };
    pages::catalog(Some(&viewer), &query, page, &listing)
}
