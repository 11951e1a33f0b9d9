//! The SDK tools the suites call.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolmesh_sidecar::{
    Tool,
    sdk::{self, ToolError},
};

/// Arguments of `add`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct AddArgs {
    /// First addend.
    pub a: i64,
    /// Second addend.
    pub b: i64,
}

/// Result of `add`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AddResult {
    /// a + b.
    pub sum: i64,
    /// This execution's number, counting from 1.
    pub calls: usize,
}

/// `add` (idempotent), counting its executions in `calls`; `a == 13` is a
/// tool error ("13 is unlucky").
pub fn add_tool(calls: Arc<AtomicUsize>) -> Tool {
    adder("add", calls).idempotent(true).build()
}

/// A tool `name` that adds like `add`, counting its executions in `calls`,
/// for a test to give its own limit, timeout or idempotence.
pub fn adder(name: &str, calls: Arc<AtomicUsize>) -> sdk::ToolBuilder {
    sdk::tool(name, "Add two integers", move |args: AddArgs| {
        let calls = calls.clone();
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if args.a == 13 {
                return Err(ToolError::new("13 is unlucky"));
            }
            Ok(AddResult {
                sum: args.a + args.b,
                calls: n,
            })
        }
    })
}

/// Arguments of `sleep`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SleepArgs {
    /// How long to sleep.
    pub millis: u64,
}

/// Result of `sleep`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Slept {
    /// How long it slept.
    pub slept: u64,
}

/// `sleep` (not idempotent): sleeps as long as asked, within `timeout`.
pub fn sleep_tool(timeout: Duration) -> Tool {
    sdk::tool("sleep", "Sleep a while", |args: SleepArgs| async move {
        tokio::time::sleep(Duration::from_millis(args.millis)).await;
        Ok(Slept { slept: args.millis })
    })
    .timeout(timeout)
    .build()
}
