//! `toolmesh.call_tool`: progressive discovery (`--mcp-discovery
//! progressive`). `tools/list` then lists only `toolmesh.search_tools` and
//! this tool, so a host with a small tool budget reaches a catalog of
//! thousands: it searches, then calls the tool found through this one,
//! by name with its arguments. The call is the named tool's own
//! `tools/call` (its schema, limits, policy, audit and metrics); this
//! tool only checks its own two arguments first.
//!
//! As with the search tool, a catalog tool of this name takes its place.

use std::sync::Arc;

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorData};
use serde_json::Value;
use toolmesh_proto::pb;

use super::own_tool::OwnTool;

/// The tool's name.
pub(crate) const NAME: &str = "toolmesh.call_tool";

const INPUT_SCHEMA: &str = r#"{
  "type": "object",
  "properties": {
    "name": {
      "type": "string",
      "minLength": 1,
      "maxLength": 256,
      "description": "The tool to call, by the name toolmesh.search_tools gave"
    },
    "arguments": {
      "type": "object",
      "description": "Its arguments, as its input schema (in the search's answer) says"
    }
  },
  "required": ["name"],
  "additionalProperties": false
}"#;

/// The call tool.
pub(crate) struct CallTool(OwnTool);

impl CallTool {
    /// The tool; `None` only if its own schema did not compile (it does:
    /// a test says so).
    pub(crate) fn new() -> Option<Self> {
        OwnTool::new(pb::ToolDescriptor {
            name: NAME.into(),
            title: "Call a tool".into(),
            description: "Call a tool of this registry by its name, with its arguments. Find \
                          the tool with toolmesh.search_tools first: its answer gives each \
                          tool's name, description and input schema."
                .into(),
            input_schema_json: INPUT_SCHEMA.into(),
            ..Default::default()
        })
        .map(Self)
    }

    /// Its descriptor, as `tools/list` lists it.
    pub(crate) fn descriptor(&self) -> &Arc<pb::ToolDescriptor> {
        self.0.descriptor()
    }

    /// The call `request` (a call of this tool) stands for, or the
    /// answer that refuses it.
    pub(crate) fn unwrap(
        &self,
        request: CallToolRequestParams,
    ) -> Result<CallToolRequestParams, Result<CallToolResult, ErrorData>> {
        let mut arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        self.0.check(&arguments)?;
        let name = arguments["name"].as_str().unwrap_or_default().to_owned();
        let inner = match arguments["arguments"].take() {
            Value::Object(inner) => inner,
            _ => serde_json::Map::new(),
        };
        let mut call = CallToolRequestParams::new(name).with_arguments(inner);
        call.meta = request.meta;
        Ok(call)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn request(arguments: Value) -> CallToolRequestParams {
        CallToolRequestParams::new(NAME).with_arguments(arguments.as_object().unwrap().clone())
    }

    #[test]
    fn its_schema_compiles_and_its_name_is_a_tool_name() {
        assert!(CallTool::new().is_some());
        assert!(toolmesh_proto::tool_name::is_valid(NAME));
    }

    #[test]
    fn a_call_stands_for_the_named_tools_call() {
        let tool = CallTool::new().unwrap();
        let call = tool
            .unwrap(request(
                json!({"name": "weather", "arguments": {"city": "Oslo"}}),
            ))
            .ok()
            .unwrap();
        assert_eq!(call.name, "weather");
        assert_eq!(call.arguments.unwrap()["city"], "Oslo");
        let bare = tool.unwrap(request(json!({"name": "ping"}))).ok().unwrap();
        assert_eq!(bare.arguments.unwrap().len(), 0);
    }

    #[test]
    fn bad_arguments_are_refused_naming_the_field() {
        let tool = CallTool::new().unwrap();
        for bad in [
            json!({}),
            json!({"name": ""}),
            json!({"name": "x", "arguments": "not an object"}),
            json!({"name": "x", "extra": 1}),
        ] {
            let refused = tool.unwrap(request(bad.clone())).err().unwrap().unwrap();
            assert_eq!(refused.is_error, Some(true), "{bad}");
        }
    }
}
