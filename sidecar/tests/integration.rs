//! Integration tests: real processes, real HTTP and gRPC servers on loopback.

#![allow(clippy::unwrap_used)]

mod common;

#[path = "integration/announcer.rs"]
mod announcer;
#[path = "integration/binary.rs"]
mod binary;
#[path = "integration/caller.rs"]
mod caller;
#[path = "integration/command.rs"]
mod command;
#[path = "integration/execute.rs"]
mod execute;
#[path = "integration/health.rs"]
mod health;
#[path = "integration/http.rs"]
mod http;
#[path = "integration/mcp.rs"]
mod mcp;
#[path = "integration/mcp_reference.rs"]
mod mcp_reference;
#[path = "integration/mcp_tasks.rs"]
mod mcp_tasks;
#[path = "integration/metrics.rs"]
mod metrics;
#[path = "integration/mistakes.rs"]
mod mistakes;
#[path = "integration/rmcp_tasks.rs"]
mod rmcp_tasks;
#[path = "integration/sdk.rs"]
mod sdk;
#[path = "integration/tasks_backends.rs"]
mod tasks_backends;
#[path = "integration/tool_config.rs"]
mod tool_config;
#[path = "integration/withdraw.rs"]
mod withdraw;
