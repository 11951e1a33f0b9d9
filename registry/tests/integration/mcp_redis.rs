//! The MCP endpoint in Redis mode: two replicas share the catalog and the
//! rate limits, so an MCP client of either sees a tool announced to the
//! other, and a tool's limit holds across both front doors.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::redis_server::RedisServer;
use crate::mcp::{McpRegistry, Rpc, standard_sidecar};
use crate::redis_replicas::replica_config;

/// A `tools/call` of `limited` through `rpc`: its result.
async fn call_limited(rpc: &Rpc, id: u64) -> Value {
    let reply = rpc
        .modern(
            id,
            "tools/call",
            json!({"name": "limited", "arguments": {"a": 1, "b": 2}}),
        )
        .await;
    let message = reply.message.expect("a JSON-RPC answer");
    assert!(message.get("error").is_none(), "{message}");
    message["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_the_catalog_and_the_limits_through_mcp() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let config = replica_config(&redis.url(), "mcp", Duration::from_secs(10));
    let first = McpRegistry::start(config.clone()).await;
    let second = McpRegistry::start(config).await;
    let (rpc_first, rpc_second) = (Rpc::new(&first.mcp), Rpc::new(&second.mcp));

    // Announced to the first replica, listed by the second's endpoint.
    let _sidecar = standard_sidecar(&first, &rpc_first).await;
    rpc_second.wait_listed("limited", true).await;
    rpc_first.wait_listed("limited", true).await;

    // `limited` takes a burst of 2 then one call per 100 s, across both.
    for (id, rpc) in [(1, &rpc_first), (2, &rpc_second)] {
        let ran = call_limited(rpc, id).await;
        assert_ne!(ran["isError"], true, "{ran}");
    }
    for (id, rpc) in [(3, &rpc_first), (4, &rpc_second)] {
        let refused = call_limited(rpc, id).await;
        assert_eq!(refused["isError"], true, "{refused}");
        assert_eq!(refused["_meta"]["toolmesh/code"], "RESOURCE_EXHAUSTED");
        assert!(
            refused["_meta"]["toolmesh/retryAfterMs"]
                .as_u64()
                .is_some_and(|ms| ms > 1_000),
            "{refused}"
        );
    }

    first.stop().await;
    second.stop().await;
}
