//! `ListTools` pages: the filters, the order (by name), and page tokens.
//!
//! A page token says where the page before ended (the last name it listed)
//! and which filters it was read with, so that a token cannot be replayed
//! with other filters (AIP-158). It is opaque to clients: base64url of a
//! small JSON object. Resuming after a name, rather than at an offset,
//! keeps paging exact while tools come and go: no tool is listed twice, and
//! none that stayed in the catalog is skipped.
//!
//! A page is read from the catalog's ordered index of names, resumed after
//! the token's name: it costs the names it walks (the page, and what the
//! filters pass by), not the catalog. `total_size` is counted when the first
//! page is read, and carried in the token to the later ones; with no filter
//! and no policy it is the catalog's own count, exact on every page.

use std::ops::ControlFlow;
use std::sync::Arc;

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use toolmesh_proto::pb;

use crate::catalog::{
    Catalog,
    store::{model::ToolState, view::Walk},
    versions,
};
use crate::error::RegistryError;

/// How many entries a page reads from the catalog at a time, when its
/// size is bounded by bytes rather than by `page_size`.
const BATCH: usize = 256;

/// Longest page token accepted, in bytes: a name is at most 64 characters,
/// so anything much longer was not made here.
const MAX_TOKEN_BYTES: usize = 4096;

/// One `ListTools` request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    filters: Filters,
    page_size: usize,
    after: Option<String>,
    /// The first page's `total_size`, carried by the token.
    total: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
struct Filters {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    tags: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    prefix: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    all_versions: bool,
}

/// What a page token carries.
#[derive(Debug, Serialize, Deserialize)]
struct Token {
    after: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    total: u32,
    #[serde(flatten)]
    filters: Filters,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's signature
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Query {
    /// The query of `request`; `INVALID_ARGUMENT` on `page_token` if the
    /// token was not made here or was made for other filters.
    pub(crate) fn new(request: &pb::ListToolsRequest) -> Result<Self, RegistryError> {
        let mut tags = request.tags.clone();
        tags.sort();
        tags.dedup();
        let filters = Filters {
            tags,
            prefix: request.name_prefix.clone(),
            all_versions: request.all_versions,
        };
        let (after, total) = match request.page_token.as_str() {
            "" => (None, 0),
            token => {
                let token = decode(token, &filters)?;
                (Some(token.after), token.total)
            }
        };
        Ok(Self {
            filters,
            page_size: usize::try_from(request.page_size).unwrap_or(usize::MAX),
            after,
            total,
        })
    }

    /// A query of the filters alone (no paging), for the RPCs that take
    /// the same `tags` and `name_prefix` as `ListTools`.
    pub(crate) fn filters(tags: Vec<String>, name_prefix: String) -> Result<Self, RegistryError> {
        Self::new(&pb::ListToolsRequest {
            tags,
            name_prefix,
            ..Default::default()
        })
    }

    /// Whether a tool named `name` with `tags` passes the filters.
    pub(crate) fn matches(&self, name: &str, tags: &[String]) -> bool {
        name.starts_with(&self.filters.prefix)
            && self.filters.tags.iter().all(|tag| tags.contains(tag))
    }

    /// The page this query asks for, read from `catalog`: the tools
    /// `visible` lets the caller see (a policy; `restricted` when it may
    /// hide any) that pass the filters, each made an answer's entry by
    /// `describe`, at most `limit_bytes` of them.
    pub(crate) fn list(
        &self,
        catalog: &Catalog,
        visible: impl Fn(&ToolState) -> bool,
        restricted: bool,
        describe: impl Fn(&ToolState) -> pb::Tool,
        limit_bytes: usize,
    ) -> pb::ListToolsResponse {
        let keep = |tool: &ToolState| {
            self.filters
                .tags
                .iter()
                .all(|tag| tool.descriptor.tags.contains(tag))
                && visible(tool)
        };
        let unfiltered =
            !restricted && self.filters.tags.is_empty() && self.filters.prefix.is_empty();
        let total = if unfiltered {
            if self.filters.all_versions {
                catalog.version_count()
            } else {
                catalog.tool_count()
            }
        } else if self.after.is_none() {
            let mut counted = 0;
            self.walk(catalog, None, &mut |tool| {
                if keep(tool) {
                    counted += 1;
                }
                ControlFlow::Continue(())
            });
            counted
        } else {
            self.total as usize
        };
        let mut answer = self.page(
            |after, wanted| {
                let mut found = Vec::new();
                self.walk(catalog, after, &mut |tool| {
                    if keep(tool) {
                        found.push((entry_key(tool, self.filters.all_versions), tool.clone()));
                    }
                    if found.len() == wanted {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                });
                found
            },
            |tool: &Arc<ToolState>| describe(tool),
            limit_bytes,
        );
        answer.total_size = u32::try_from(total).unwrap_or(u32::MAX);
        if !answer.next_page_token.is_empty() {
            answer.next_page_token = self.token(&answer.next_page_token, answer.total_size);
        }
        answer
    }

    /// Visits the tools (defaults, or every version) whose name starts
    /// with the prefix, in the listing's order, from just after the entry
    /// keyed `after`, until `visit` breaks.
    fn walk(
        &self,
        catalog: &Catalog,
        after: Option<&str>,
        visit: &mut dyn FnMut(&Arc<ToolState>) -> ControlFlow<()>,
    ) {
        let prefix = self.filters.prefix.as_str();
        let (after_name, after_version) = match after {
            Some(key) => (
                Some(versions::name_of(key)),
                key.split_once('@').map_or("", |(_, version)| version),
            ),
            None => (None, ""),
        };
        let from = match after_name {
            Some(name) if self.filters.all_versions && name >= prefix => Walk::From(name),
            Some(name) if name >= prefix => Walk::After(name),
            _ => Walk::From(prefix),
        };
        catalog.each_family(from, &mut |family| {
            let name = family.default().name();
            if !name.starts_with(prefix) {
                return ControlFlow::Break(());
            }
            if !self.filters.all_versions {
                return visit(family.default());
            }
            // Every version of the name, by version text.
            let mut versions: Vec<&Arc<ToolState>> = family.versions().iter().collect();
            versions.sort_by(|a, b| a.descriptor.version.cmp(&b.descriptor.version));
            for tool in versions {
                if after_name == Some(name) && tool.descriptor.version.as_str() <= after_version {
                    continue;
                }
                visit(tool)?;
            }
            ControlFlow::Continue(())
        });
    }

    /// The page of the entries `next` reads (each with the key its page
    /// token resumes after): `next(after, n)` gives up to `n` entries that
    /// pass the filters, in order, from just after the entry keyed `after`.
    /// At most `page_size` entries (0: no limit) whose encoded size fits in
    /// `limit_bytes`; `to_proto` makes an entry of the answer. The token it
    /// sets is the bare key: [`token`](Self::token) seals it.
    fn page<T>(
        &self,
        mut next: impl FnMut(Option<&str>, usize) -> Vec<(String, T)>,
        to_proto: impl Fn(&T) -> pb::Tool,
        limit_bytes: usize,
    ) -> pb::ListToolsResponse {
        let mut answer = pb::ListToolsResponse::default();
        let wanted = if self.page_size == 0 {
            usize::MAX
        } else {
            self.page_size
        };
        let mut size = 0;
        let mut last: Option<String> = None;
        let mut after = self.after.clone();
        loop {
            let batch = (wanted - answer.tools.len()).min(BATCH);
            // One entry past the batch tells whether another page follows.
            let entries = next(after.as_deref(), batch.saturating_add(1));
            let exhausted = entries.len() <= batch;
            for (key, tool) in entries.into_iter().take(batch) {
                let entry = to_proto(&tool);
                let len = prost::Message::encoded_len(&entry);
                // A repeated field costs its message, a tag and a length prefix.
                let cost = len + 1 + prost::length_delimiter_len(len);
                if size + cost > limit_bytes {
                    answer.truncated = true;
                    answer.next_page_token = last.unwrap_or_default();
                    return answer;
                }
                size += cost;
                answer.tools.push(entry);
                last = Some(key);
            }
            if exhausted {
                return answer;
            }
            if answer.tools.len() == wanted {
                answer.next_page_token = last.unwrap_or_default();
                return answer;
            }
            after.clone_from(&last);
        }
    }

    /// The page this query asks for of `items`, sorted by `name` (each
    /// name once), for lists that are not the catalog's.
    pub(crate) fn page_sorted<T>(
        &self,
        items: &[T],
        name: impl Fn(&T) -> &str,
        to_proto: impl Fn(&T) -> pb::Tool,
        limit_bytes: usize,
    ) -> pb::ListToolsResponse {
        let mut answer = self.page(
            |after, n| {
                let start = after.map_or(0, |after| items.partition_point(|t| name(t) <= after));
                items[start..]
                    .iter()
                    .take(n)
                    .map(|t| (name(t).to_owned(), t))
                    .collect()
            },
            |t| to_proto(t),
            limit_bytes,
        );
        answer.total_size = u32::try_from(items.len()).unwrap_or(u32::MAX);
        if !answer.next_page_token.is_empty() {
            answer.next_page_token = self.token(&answer.next_page_token, answer.total_size);
        }
        answer
    }

    /// The page token that resumes after the entry keyed `after`.
    fn token(&self, after: &str, total: u32) -> String {
        let token = Token {
            after: after.to_owned(),
            total,
            filters: self.filters.clone(),
        };
        // Serializing strings and vectors of strings cannot fail.
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
    }
}

/// The key a page token resumes after: the name, or (every version) the
/// version's key.
fn entry_key(tool: &ToolState, all_versions: bool) -> String {
    if all_versions {
        tool.key().into_owned()
    } else {
        tool.name().to_owned()
    }
}

fn decode(token: &str, filters: &Filters) -> Result<Token, RegistryError> {
    let invalid = |reason: &str| RegistryError::InvalidRequest {
        field: "page_token".into(),
        reason: reason.into(),
    };
    if token.len() > MAX_TOKEN_BYTES {
        return Err(invalid("not a page token of this registry"));
    }
    let token: Token = URL_SAFE_NO_PAD
        .decode(token)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .ok_or_else(|| invalid("not a page token of this registry"))?;
    if token.filters != *filters {
        return Err(invalid(
            "made for other filters: ask with the same tags, name_prefix and all_versions as the first page",
        ));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    fn tool(name: &str) -> pb::Tool {
        pb::Tool {
            descriptor: Some(pb::ToolDescriptor {
                name: name.into(),
                ..Default::default()
            }),
            instances: 1,
            ..Default::default()
        }
    }

    fn request(page_size: u32, page_token: &str) -> pb::ListToolsRequest {
        pb::ListToolsRequest {
            page_size,
            page_token: page_token.into(),
            ..Default::default()
        }
    }

    fn names(answer: &pb::ListToolsResponse) -> Vec<String> {
        answer
            .tools
            .iter()
            .map(|t| t.descriptor.as_ref().unwrap().name.clone())
            .collect()
    }

    fn page_of(query: &Query, tools: &[String], limit: usize) -> pb::ListToolsResponse {
        query.page_sorted(tools, |n| n, |n| tool(n), limit)
    }

    #[test]
    fn pages_resume_after_the_last_name() {
        let tools: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let first = page_of(&Query::new(&request(2, "")).unwrap(), &tools, usize::MAX);
        assert_eq!(names(&first), ["a", "b"]);
        assert_eq!(first.total_size, 5);
        assert!(!first.truncated);
        let query = Query::new(&request(2, &first.next_page_token)).unwrap();
        // "b" left meanwhile: the next page still starts after it.
        let later: Vec<String> = ["a", "c", "d", "e"].map(String::from).into();
        let second = page_of(&query, &later, usize::MAX);
        assert_eq!(names(&second), ["c", "d"]);
        let third = page_of(
            &Query::new(&request(2, &second.next_page_token)).unwrap(),
            &later,
            usize::MAX,
        );
        assert_eq!(names(&third), ["e"]);
        assert_eq!(third.next_page_token, "", "the last page");
    }

    #[test]
    fn the_size_limit_ends_a_page_early_and_says_so() {
        let tools: Vec<String> = ["a", "b", "c"].map(String::from).into();
        let one = prost::Message::encoded_len(&tool("a")) + 2;
        let answer = page_of(&Query::new(&request(0, "")).unwrap(), &tools, one * 2);
        assert_eq!(names(&answer), ["a", "b"]);
        assert!(answer.truncated);
        assert!(!answer.next_page_token.is_empty());
    }

    #[test]
    fn a_token_is_refused_with_other_filters_or_forged() {
        let tools: Vec<String> = ["a", "b", "c"].map(String::from).into();
        let first = page_of(&Query::new(&request(1, "")).unwrap(), &tools, usize::MAX);
        let other_filters = pb::ListToolsRequest {
            name_prefix: "a".into(),
            ..request(1, &first.next_page_token)
        };
        for bad in [other_filters, request(1, "not-a-token"), request(1, "e30")] {
            let error = Query::new(&bad).unwrap_err();
            assert!(
                matches!(&error, RegistryError::InvalidRequest { field, .. } if field == "page_token"),
                "{error:?}"
            );
        }
        // The order of tags does not matter.
        let tagged = |tags: &[&str], token: &str| pb::ListToolsRequest {
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            ..request(1, token)
        };
        let query = Query::new(&tagged(&["x", "y"], "")).unwrap();
        let token = page_of(&query, &tools, usize::MAX).next_page_token;
        assert!(Query::new(&tagged(&["y", "x"], &token)).is_ok());
    }

    #[test]
    fn filters_need_every_tag_and_the_prefix() {
        let query = Query::new(&pb::ListToolsRequest {
            tags: vec!["web".into(), "read".into()],
            name_prefix: "search.".into(),
            ..Default::default()
        })
        .unwrap();
        let tags = |t: &[&str]| t.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        assert!(query.matches("search.web", &tags(&["read", "web", "x"])));
        assert!(!query.matches("search.web", &tags(&["web"])));
        assert!(!query.matches("fetch", &tags(&["read", "web"])));
    }

    /// A catalog of `tools` (`name` or `name@version`, and tags).
    async fn catalog_of(tools: &[(&str, &[&str])]) -> Catalog {
        use std::time::Duration;

        use crate::catalog::store::memory::{Limits, MemoryStore};
        let catalog = Catalog::new(MemoryStore::new(Duration::from_secs(10), Limits::default()));
        // One instance per version: an announce names each tool once.
        for (i, (key, tags)) in tools.iter().enumerate() {
            let (name, version) = key.split_once('@').unwrap_or((key, ""));
            catalog
                .announce(pb::AnnounceRequest {
                    instance_id: format!("i{i}"),
                    endpoint: "http://127.0.0.1:1".into(),
                    tools: vec![pb::ToolDescriptor {
                        name: name.into(),
                        version: version.into(),
                        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
                        ..Default::default()
                    }],
                    execute_key: Vec::new(),
                })
                .await
                .unwrap();
        }
        catalog
    }

    /// Every page of `request` from `catalog`, and each page's total.
    fn read_all(
        catalog: &Catalog,
        request: pb::ListToolsRequest,
        restricted: bool,
    ) -> (Vec<String>, Vec<u32>) {
        let (mut listed, mut totals) = (Vec::new(), Vec::new());
        let mut token = String::new();
        loop {
            let query = Query::new(&pb::ListToolsRequest {
                page_token: token.clone(),
                ..request.clone()
            })
            .unwrap();
            let answer = query.list(
                catalog,
                |t| !restricted || t.name() != "hidden",
                restricted,
                |t| tool(&t.key()),
                usize::MAX,
            );
            listed.extend(names(&answer));
            totals.push(answer.total_size);
            token = answer.next_page_token;
            if token.is_empty() {
                return (listed, totals);
            }
        }
    }

    #[tokio::test]
    async fn a_page_is_walked_from_the_index_with_its_filters() {
        let catalog = catalog_of(&[
            ("b.x@2.0.0", &[]),
            ("b.x@1.0.0", &["t"]),
            ("b", &["t"]),
            ("b.y", &["t"]),
            ("a", &["t"]),
            ("c", &["t"]),
            ("hidden", &["t"]),
        ])
        .await;
        let request = |prefix: &str, tags: &[&str], all_versions| pb::ListToolsRequest {
            page_size: 2,
            name_prefix: prefix.into(),
            tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            all_versions,
            ..Default::default()
        };
        // Defaults only, every name; the policy hides one.
        let (listed, totals) = read_all(&catalog, request("", &[], false), true);
        assert_eq!(listed, ["a", "b", "b.x@2.0.0", "b.y", "c"]);
        assert_eq!(totals, [5, 5, 5]);
        // No filter and no policy: the catalog's own count.
        let (listed, totals) = read_all(&catalog, request("", &[], false), false);
        assert_eq!(listed.len(), 6);
        assert_eq!(totals, [6, 6, 6]);
        // The prefix ends the walk; a tag passes some by.
        let (listed, totals) = read_all(&catalog, request("b.", &["t"], true), true);
        assert_eq!(listed, ["b.x@1.0.0", "b.y"]);
        assert_eq!(totals, [2]);
        // Every version, by name then version text, resumed inside a name.
        let (listed, totals) = read_all(&catalog, request("b", &[], true), true);
        assert_eq!(listed, ["b", "b.x@1.0.0", "b.x@2.0.0", "b.y"]);
        assert_eq!(totals, [4, 4]);
    }

    proptest! {
        /// Reading page after page lists every tool once, in order, whatever
        /// the page size and size limit.
        #[test]
        fn paging_lists_every_tool_once_in_order(
            catalog in proptest::collection::btree_set("[a-z]{1,6}", 0..60),
            page_size in 0u32..8,
            limit_tools in 1usize..10,
        ) {
            let tools: Vec<String> = catalog.into_iter().collect();
            let limit = limit_tools * (prost::Message::encoded_len(&tool("abcdef")) + 2);
            let mut listed = Vec::new();
            let mut token = String::new();
            for _ in 0..=tools.len() {
                let answer = page_of(&Query::new(&request(page_size, &token)).unwrap(), &tools, limit);
                prop_assert!(page_size == 0 || answer.tools.len() <= page_size as usize);
                prop_assert!(!answer.tools.is_empty() || tools.is_empty());
                listed.extend(names(&answer));
                token = answer.next_page_token;
                if token.is_empty() {
                    break;
                }
            }
            prop_assert_eq!(listed, tools);
        }
    }
}
