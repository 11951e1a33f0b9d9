//! The registry's catalog as agents see it, through the public gRPC API
//! only (so this crate needs no dependency on the registry).

use std::time::Duration;

use tonic::{Code, transport::Channel};
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};

use crate::wait::eventually;

/// An `Invoke` request without an idempotency key.
pub fn invoke(tool: &str, arguments: &str) -> pb::InvokeRequest {
    pb::InvokeRequest {
        tool: tool.into(),
        arguments_json: arguments.into(),
        idempotency_key: String::new(),
        tool_digest: String::new(),
        ..Default::default()
    }
}

/// An `Invoke` request carrying an idempotency key.
pub fn keyed(tool: &str, arguments: &str, key: &str) -> pb::InvokeRequest {
    pb::InvokeRequest {
        idempotency_key: key.into(),
        ..invoke(tool, arguments)
    }
}

/// `GetTool(name)`, or `None` when the registry answers NOT_FOUND; panics
/// on any other error, so a failing registry never reads as "the tool
/// left".
pub async fn tool(client: &mut ToolRegistryClient<Channel>, name: &str) -> Option<pb::Tool> {
    match client
        .get_tool(pb::GetToolRequest {
            name: name.into(),
            ..Default::default()
        })
        .await
    {
        Ok(tool) => Some(tool.into_inner()),
        Err(status) if status.code() == Code::NotFound => None,
        Err(status) => panic!("GetTool {name}: {status:?}"),
    }
}

/// Live instances of `name` (0 when it is not in the catalog).
pub async fn instances(client: &mut ToolRegistryClient<Channel>, name: &str) -> u32 {
    tool(client, name).await.map_or(0, |t| t.instances)
}

/// Names of the tools `ListTools` shows; panics if `ListTools` fails.
pub async fn tool_names(client: &mut ToolRegistryClient<Channel>) -> Vec<String> {
    client
        .list_tools(pb::ListToolsRequest::default())
        .await
        .expect("ListTools")
        .into_inner()
        .tools
        .into_iter()
        .filter_map(|t| t.descriptor.map(|d| d.name))
        .collect()
}

/// Waits up to `within` until `name` has exactly `count` live instances.
pub async fn wait_for_instances(
    client: &ToolRegistryClient<Channel>,
    name: &str,
    count: u32,
    within: Duration,
) {
    eventually(
        within,
        &format!("{name} with {count} live instances"),
        || {
            let mut client = client.clone();
            async move { instances(&mut client, name).await == count }
        },
    )
    .await;
}
