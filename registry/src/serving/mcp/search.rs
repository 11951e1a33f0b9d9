//! `toolmesh.search_tools`: `SearchTools` for MCP clients, which have no
//! search method of their own. It is listed and called like any tool, but
//! the registry answers it itself: its arguments are checked against its
//! schema as a catalog tool's are, and its results are only the live
//! tools the caller may see.
//!
//! Tool names are the sidecars' to choose, and this one is a valid name:
//! a catalog tool named `toolmesh.search_tools` takes its place in
//! `tools/list` and `tools/call` (and a warning is logged), so the
//! registry never shadows a tool someone announced.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ContentBlock, ErrorData};
use serde_json::{Value, json};
use toolmesh_proto::pb;

use super::own_tool::OwnTool;
use crate::{
    catalog::Catalog,
    catalog::search::{self, ToolSearch},
    error::RegistryError,
};

/// The tool's name.
pub(crate) const NAME: &str = "toolmesh.search_tools";

const INPUT_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "query": {
      "type": "string",
      "minLength": 1,
      "maxLength": 1024,
      "description": "The task, in words: what a tool should do (e.g. \"send an email\")"
    },
    "limit": {
      "type": "integer",
      "minimum": 1,
      "maximum": 100,
      "description": "Most tools to return (default 5)"
    }
  },
  "required": ["query"],
  "additionalProperties": false
}"#;

const OUTPUT_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "tools": {
      "type": "array",
      "description": "The tools found, most relevant first",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "title": {"type": "string"},
          "description": {"type": "string"},
          "score": {"type": "number", "description": "Relevance; compare within one answer only"}
        },
        "required": ["name", "description", "score"]
      }
    }
  },
  "required": ["tools"]
}"#;

/// The search tool.
pub(crate) struct SearchTool(OwnTool);

impl SearchTool {
    /// The tool; `None` only if its own schema did not compile (it does:
    /// a test says so).
    pub(crate) fn new() -> Option<Self> {
        OwnTool::new(pb::ToolDescriptor {
            name: NAME.into(),
            title: "Search tools".into(),
            description: "Find the tools most relevant to a task described in words, among \
                          all the tools this registry serves. Use it when no listed tool \
                          obviously fits, then call the tool found by its name."
                .into(),
            input_schema_json: INPUT_SCHEMA.into(),
            output_schema_json: OUTPUT_SCHEMA.into(),
            read_only: Some(true),
            destructive: Some(false),
            idempotent: true,
            open_world: Some(false),
            ..Default::default()
        })
        .map(Self)
    }

    /// Its descriptor, as `tools/list` lists it.
    pub(crate) fn descriptor(&self) -> &Arc<pb::ToolDescriptor> {
        self.0.descriptor()
    }

    /// Runs a search with `arguments` over `index`, keeping the live tools
    /// of `catalog` that `visible` lets the caller see.
    pub(crate) async fn call(
        &self,
        arguments: &Value,
        index: &ToolSearch,
        catalog: &Catalog,
        visible: impl Fn(&str) -> bool + Sync,
    ) -> Result<CallToolResult, ErrorData> {
        if let Err(refused) = self.0.check(arguments) {
            return refused;
        }
        let query = arguments["query"].as_str().unwrap_or_default().trim();
        if query.is_empty() || query.len() > search::MAX_QUERY_BYTES {
            let error = RegistryError::InvalidRequest {
                field: "query".into(),
                reason: format!(
                    "describe the task in words, at most {} bytes",
                    search::MAX_QUERY_BYTES
                ),
            };
            return super::results::from_error(NAME, &error);
        }
        let limit = arguments["limit"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(search::DEFAULT_RESULTS)
            .clamp(1, search::MAX_RESULTS);
        let mut found = Vec::with_capacity(limit);
        // The index may trail the catalog by an event: a tool found must
        // still be live.
        for hit in index.rank(query, (&visible).into()).await.found {
            if found.len() == limit {
                break;
            }
            let Some(tool) = catalog.get(&hit.name) else {
                continue;
            };
            let descriptor = &tool.descriptor;
            let mut entry = json!({
                "name": descriptor.name,
                "description": descriptor.description,
                "score": hit.score,
            });
            if !descriptor.title.is_empty() {
                entry["title"] = descriptor.title.clone().into();
            }
            found.push(entry);
        }
        let result = json!({ "tools": found });
        let mut answer = CallToolResult::success(vec![ContentBlock::text(result.to_string())]);
        answer.structured_content = Some(result);
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::catalog::store::memory::{Limits, MemoryStore};

    use super::*;

    async fn catalog_with(tools: &[(&str, &str)]) -> Catalog {
        let store = MemoryStore::new(std::time::Duration::from_secs(30), Limits::default());
        let catalog = Catalog::new(store);
        catalog
            .announce(pb::AnnounceRequest {
                instance_id: "i".into(),
                endpoint: "http://127.0.0.1:9".into(),
                tools: tools
                    .iter()
                    .map(|(name, description)| pb::ToolDescriptor {
                        name: (*name).into(),
                        description: (*description).into(),
                        ..Default::default()
                    })
                    .collect(),
                execute_key: Vec::new(),
            })
            .await
            .unwrap();
        catalog
    }

    #[test]
    fn its_own_schemas_compile_and_its_name_is_a_tool_name() {
        let tool = SearchTool::new().expect("compiles");
        assert!(toolmesh_proto::tool_name::is_valid(NAME));
        assert!(crate::catalog::validate::compile(&tool.descriptor().output_schema_json).is_ok());
    }

    #[tokio::test]
    async fn finds_visible_live_tools() {
        let catalog = catalog_with(&[
            ("send_email", "Send an email message to recipients"),
            ("search_email", "Search the mailbox for email messages"),
            ("weather", "Forecast the weather"),
        ])
        .await;
        let index = ToolSearch::default();
        index.replace_all(catalog.list().iter().map(|t| &*t.descriptor));
        let tool = SearchTool::new().unwrap();
        let result = tool
            .call(
                &json!({"query": "email", "limit": 5}),
                &index,
                &catalog,
                |name| name != "search_email",
            )
            .await
            .unwrap();
        let found = result.structured_content.unwrap();
        let names: Vec<&str> = found["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["send_email"]);
    }

    #[tokio::test]
    async fn bad_arguments_name_the_field() {
        let catalog = catalog_with(&[("t", "A tool")]).await;
        let tool = SearchTool::new().unwrap();
        let result = tool
            .call(
                &json!({"query": "x", "limit": 0, "extra": true}),
                &ToolSearch::default(),
                &catalog,
                |_| true,
            )
            .await
            .unwrap();
        assert_eq!(result.is_error, Some(true));
        let text = serde_json::to_value(&result).unwrap()["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(text.contains("- /limit:"), "{text}");
        assert!(text.contains("- /extra:"), "{text}");
    }
}
