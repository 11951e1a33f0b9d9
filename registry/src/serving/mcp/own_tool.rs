//! What the registry's own MCP tools (`toolmesh.search_tools`,
//! `toolmesh.call_tool`) share: a descriptor of their own, and their input
//! schema compiled once and checked as any tool's arguments are.

use std::sync::Arc;

use rmcp::model::{CallToolResult, ErrorData};
use serde_json::Value;
use toolmesh_proto::pb;

use crate::{
    catalog::validate::{self, ArgumentValidator},
    error::RegistryError,
};

/// One of the registry's own tools.
pub(crate) struct OwnTool {
    descriptor: Arc<pb::ToolDescriptor>,
    validator: ArgumentValidator,
}

impl OwnTool {
    /// The tool `descriptor` describes; `None` (logged) only if its own
    /// input schema did not compile (each tool's test says it does).
    pub(crate) fn new(descriptor: pb::ToolDescriptor) -> Option<Self> {
        let validator = validate::compile(&descriptor.input_schema_json)
            .inspect_err(
                |error| tracing::error!(%error, tool = %descriptor.name, "an own tool's schema"),
            )
            .ok()?;
        Some(Self {
            descriptor: Arc::new(descriptor),
            validator,
        })
    }

    /// Its descriptor, as `tools/list` lists it.
    pub(crate) fn descriptor(&self) -> &Arc<pb::ToolDescriptor> {
        &self.descriptor
    }

    /// Nothing if `arguments` fit its input schema; else the answer that
    /// refuses them, with their violations, as for any tool.
    pub(crate) fn check(&self, arguments: &Value) -> Result<(), Result<CallToolResult, ErrorData>> {
        self.validator.check(arguments).map_err(|violations| {
            let name = &self.descriptor.name;
            let error = RegistryError::ArgumentsInvalid {
                tool: name.clone(),
                violations,
            };
            super::results::from_error(name, &error)
        })
    }
}
