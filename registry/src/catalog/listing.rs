//! `ListTools` pages: the filters, the order (by name), and page tokens.
//!
//! A page token says where the page before ended (the last name it listed)
//! and which filters it was read with, so that a token cannot be replayed
//! with other filters (AIP-158). It is opaque to clients: base64url of a
//! small JSON object. Resuming after a name, rather than at an offset,
//! keeps paging exact while tools come and go: no tool is listed twice, and
//! none that stayed in the catalog is skipped.

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use serde::{Deserialize, Serialize};
use toolmesh_proto::pb;

use crate::error::RegistryError;

/// Longest page token accepted, in bytes: a name is at most 64 characters,
/// so anything much longer was not made here.
const MAX_TOKEN_BYTES: usize = 4096;

/// One `ListTools` request, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Query {
    filters: Filters,
    page_size: usize,
    after: Option<String>,
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
    #[serde(flatten)]
    filters: Filters,
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
        let after = match request.page_token.as_str() {
            "" => None,
            token => Some(decode(token, &filters)?),
        };
        Ok(Self {
            filters,
            page_size: usize::try_from(request.page_size).unwrap_or(usize::MAX),
            after,
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

    /// The page of `tools` (sorted by name, filtered with
    /// [`matches`](Self::matches)) this query asks for: at most `page_size`
    /// tools (0: no limit) whose encoded size fits in `limit_bytes`, from
    /// after the token's name. `to_proto` makes the answer's entry of a
    /// tool (only for tools on the page); `name` reads a tool's name.
    pub(crate) fn page<T>(
        &self,
        tools: &[T],
        name: impl Fn(&T) -> &str,
        to_proto: impl Fn(&T) -> pb::Tool,
        limit_bytes: usize,
    ) -> pb::ListToolsResponse {
        let start = self
            .after
            .as_deref()
            .map_or(0, |after| tools.partition_point(|t| name(t) <= after));
        let mut answer = pb::ListToolsResponse {
            total_size: u32::try_from(tools.len()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        let wanted = if self.page_size == 0 {
            usize::MAX
        } else {
            self.page_size
        };
        let mut size = 0;
        let mut last = None;
        for tool in tools.iter().skip(start) {
            if answer.tools.len() == wanted {
                break;
            }
            let entry = to_proto(tool);
            let len = prost::Message::encoded_len(&entry);
            // A repeated field costs its message, a tag and a length prefix.
            let cost = len + 1 + prost::length_delimiter_len(len);
            if size + cost > limit_bytes {
                answer.truncated = true;
                break;
            }
            size += cost;
            last = Some(name(tool));
            answer.tools.push(entry);
        }
        let listed_to = start + answer.tools.len();
        if listed_to < tools.len()
            && let Some(last) = last
        {
            answer.next_page_token = encode(last, &self.filters);
        }
        answer
    }
}

fn encode(after: &str, filters: &Filters) -> String {
    let token = Token {
        after: after.to_owned(),
        filters: filters.clone(),
    };
    // Serializing strings and vectors of strings cannot fail.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

fn decode(token: &str, filters: &Filters) -> Result<String, RegistryError> {
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
    Ok(token.after)
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
        query.page(tools, |n| n, |n| tool(n), limit)
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
