//! MCP both ways at once: an unmodified MCP server
//! (`@modelcontextprotocol/server-everything`, over stdio) wrapped by the
//! `toolmesh-sidecar` binary, reached by an MCP client through the
//! registry's `/mcp`, with the registry's validation in between.

use serde_json::{Value, json};
use toolmesh_test_support::mcp::everything_server;
use toolmesh_test_support::process::{SidecarProcess, binary};

use crate::mcp::{McpRegistry, Rpc, config};

/// The result of a `tools/call` answer.
fn result(reply: crate::mcp::Reply) -> Value {
    let message = reply.message.expect("a JSON-RPC answer");
    assert!(message.get("error").is_none(), "{message}");
    message["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_behind_a_sidecar_reaches_mcp_clients_through_the_registry() {
    let (Some(bin), Some(everything)) = (binary("toolmesh-sidecar"), everything_server()) else {
        return;
    };
    let registry = McpRegistry::start(config()).await;
    let yaml = format!(
        "tools:\n  - backend:\n      mcp:\n        command: [{}]\n        prefix: everything.\n        allow: [echo, get-sum]\n",
        everything.display()
    );
    let _sidecar = SidecarProcess::start(&bin, &registry.grpc, "everything", &yaml).await;
    let rpc = Rpc::new(&registry.mcp);
    rpc.wait_listed("everything.get-sum", true).await;

    let listed = result(rpc.modern(1, "tools/list", json!({})).await);
    let tools = listed["tools"].as_array().expect("tools");
    let sum = tools
        .iter()
        .find(|t| t["name"] == "everything.get-sum")
        .expect("listed");
    assert_eq!(sum["title"], "Get Sum Tool");
    assert_eq!(sum["inputSchema"]["required"], json!(["a", "b"]));
    assert_eq!(sum["annotations"]["readOnlyHint"], true);

    let called = result(
        rpc.modern(
            2,
            "tools/call",
            json!({"name": "everything.get-sum", "arguments": {"a": 1, "b": 2}}),
        )
        .await,
    );
    assert_ne!(called["isError"], true, "{called}");
    assert_eq!(
        called["content"][0]["text"],
        json!("The sum of 1 and 2 is 3.")
    );

    // The registry refuses what the server's schema forbids, before the
    // server sees it, in words a model can act on.
    let refused = result(
        rpc.modern(
            3,
            "tools/call",
            json!({"name": "everything.get-sum", "arguments": {"a": "one", "b": 2}}),
        )
        .await,
    );
    assert_eq!(refused["isError"], true, "{refused}");
    let text = refused["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("/a"), "{text}");
    assert_eq!(refused["_meta"]["toolmesh/code"], "INVALID_ARGUMENT");

    registry.stop().await;
}
