//! `tools/list` pages: the tools a caller may see, in name order, cut into
//! pages by `ListTools`' own paging ([`crate::catalog::listing`]: a cursor resumes
//! after the last name listed, so tools coming and going never make a page
//! list a tool twice or skip one that stayed), each tool in the MCP shape
//! `ExportTools` makes ([`crate::catalog::export`], format MCP).

use std::sync::Arc;

use rmcp::model::{ListToolsResult, Tool};
use toolmesh_proto::pb::{self, ExportFormat};

use crate::{catalog::listing::Query, error::RegistryError};

/// One page of tools.
#[derive(Debug)]
pub struct Page {
    /// The tools, in name order.
    pub tools: Vec<Tool>,
    /// Where the next page starts; `None` on the last.
    pub next_cursor: Option<String>,
}

impl From<Page> for ListToolsResult {
    fn from(page: Page) -> Self {
        let mut result = ListToolsResult::with_all_items(page.tools);
        result.next_cursor = page.next_cursor;
        result
    }
}

/// One tool `tools/list` may list: its descriptor, and its digest if it
/// is a catalog tool (the registry's own search tool has none).
#[derive(Debug, Clone)]
pub(crate) struct Listed {
    /// The descriptor.
    pub descriptor: Arc<pb::ToolDescriptor>,
    /// Its digest.
    pub digest: Option<Arc<str>>,
}

impl From<&crate::catalog::ToolState> for Listed {
    fn from(tool: &crate::catalog::ToolState) -> Self {
        Self {
            descriptor: tool.descriptor.clone(),
            digest: Some(tool.digest.clone()),
        }
    }
}

/// The page of `descriptors` (sorted by name, each name once) that
/// `cursor` asks for: at most `page_size` tools whose descriptors take at
/// most `limit_bytes`. A cursor that was not made here is
/// `INVALID_ARGUMENT` on `page_token` (MCP: invalid params).
pub(crate) fn page(
    descriptors: &[Listed],
    cursor: Option<&str>,
    page_size: u32,
    limit_bytes: usize,
) -> Result<Page, RegistryError> {
    let query = Query::new(&pb::ListToolsRequest {
        page_size,
        page_token: cursor.unwrap_or_default().to_owned(),
        ..Default::default()
    })?;
    let answer = query.page_sorted(
        descriptors,
        |d| d.descriptor.name.as_str(),
        |d| pb::Tool {
            descriptor: Some(d.descriptor.as_ref().clone()),
            instances: 1,
            digest: d.digest.as_deref().unwrap_or_default().to_owned(),
            versions: Vec::new(),
            deprecation: String::new(),
        },
        limit_bytes,
    );
    let export = crate::catalog::export::export(ExportFormat::Mcp, &answer.tools, usize::MAX);
    for issue in export.issues.iter().filter(|i| i.omitted) {
        tracing::debug!(tool = %issue.tool, reason = %issue.message, "tool left out of MCP tools/list");
    }
    let tools = export
        .tools
        .into_iter()
        .filter_map(|tool| {
            serde_json::from_value::<Tool>(tool)
                .inspect_err(|error| tracing::warn!(%error, "an exported tool is not an MCP Tool"))
                .ok()
        })
        .collect();
    Ok(Page {
        tools,
        next_cursor: (!answer.next_page_token.is_empty()).then_some(answer.next_page_token),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn descriptor(name: &str) -> Listed {
        Listed {
            descriptor: Arc::new(pb::ToolDescriptor {
                name: name.into(),
                description: format!("The {name} tool"),
                input_schema_json: r#"{"type":"object","properties":{"a":{"type":"integer"}}}"#
                    .into(),
                ..Default::default()
            }),
            digest: None,
        }
    }

    fn names(page: &Page) -> Vec<&str> {
        page.tools.iter().map(|t| t.name.as_ref()).collect()
    }

    #[test]
    fn cursors_walk_every_tool_once_in_name_order() {
        let all: Vec<_> = ["a", "b", "c", "d", "e"].map(descriptor).into();
        let first = page(&all, None, 2, usize::MAX).unwrap();
        assert_eq!(names(&first), ["a", "b"]);
        let second = page(&all, first.next_cursor.as_deref(), 2, usize::MAX).unwrap();
        assert_eq!(names(&second), ["c", "d"]);
        // "e" stays, "c" left meanwhile: the cursor still resumes after "d".
        let later: Vec<_> = ["a", "b", "d", "e"].map(descriptor).into();
        let third = page(&later, second.next_cursor.as_deref(), 2, usize::MAX).unwrap();
        assert_eq!(names(&third), ["e"]);
        assert_eq!(third.next_cursor, None);
    }

    #[test]
    fn a_forged_cursor_is_refused() {
        let all = vec![descriptor("a")];
        let error = page(&all, Some("not-a-cursor"), 2, usize::MAX).unwrap_err();
        assert!(
            matches!(&error, RegistryError::InvalidRequest { field, .. } if field == "page_token"),
            "{error}"
        );
    }

    #[test]
    fn tools_have_the_mcp_shape_with_hints() {
        let described = Arc::new(pb::ToolDescriptor {
            name: "fetch".into(),
            title: "Fetch a page".into(),
            description: "GET a URL".into(),
            version: "1.2.0".into(),
            input_schema_json: r#"{"properties":{"url":{"type":"string"}}}"#.into(),
            output_schema_json: r#"{"type":"object"}"#.into(),
            read_only: Some(true),
            destructive: Some(false),
            idempotent: true,
            open_world: Some(true),
            ..Default::default()
        });
        let state = crate::catalog::ToolState::new(described, Vec::new());
        let page = page(&[Listed::from(&state)], None, 10, usize::MAX).unwrap();
        let tool = serde_json::to_value(&page.tools[0]).unwrap();
        assert_eq!(tool["name"], "fetch");
        assert_eq!(tool["_meta"]["dev.toolmesh/digest"], &*state.digest);
        assert_eq!(tool["_meta"]["dev.toolmesh/version"], "1.2.0");
        assert_eq!(tool["title"], "Fetch a page");
        assert_eq!(tool["description"], "GET a URL");
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["outputSchema"], json!({"type": "object"}));
        let hints = &tool["annotations"];
        assert_eq!(hints["readOnlyHint"], true);
        assert_eq!(hints["destructiveHint"], false);
        assert_eq!(hints["idempotentHint"], true);
        assert_eq!(hints["openWorldHint"], true);
    }

    #[test]
    fn the_size_limit_ends_a_page_early() {
        let all: Vec<_> = ["a", "b", "c"].map(descriptor).into();
        let one = prost::Message::encoded_len(&pb::Tool {
            descriptor: Some(all[0].descriptor.as_ref().clone()),
            instances: 1,
            digest: String::new(),
            ..Default::default()
        }) + 2;
        let first = page(&all, None, 10, one * 2).unwrap();
        assert_eq!(names(&first), ["a", "b"]);
        assert!(first.next_cursor.is_some());
    }
}
