//! A tool written in Rust with the sidecar SDK: `divide`, whose JSON Schemas
//! are derived from [`DivideArgs`] and [`Quotient`]. Dividing by zero is a
//! tool error (`is_error`), not a transport error.

use std::future::Future;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use toolmesh_sidecar::sdk::{self, ToolError};
use toolmesh_sidecar::{SidecarError, Tool};

/// Arguments of `divide`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DivideArgs {
    /// The dividend.
    pub a: f64,
    /// The divisor; must not be 0.
    pub b: f64,
}

/// Result of `divide`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
pub struct Quotient {
    /// a / b.
    pub quotient: f64,
}

/// `a / b`, or a tool error when `b` is 0.
pub fn divide(args: DivideArgs) -> Result<Quotient, ToolError> {
    if args.b == 0.0 {
        return Err(ToolError::new("division by zero"));
    }
    Ok(Quotient {
        quotient: args.a / args.b,
    })
}

/// The `divide` tool.
pub fn divide_tool() -> Tool {
    sdk::tool(
        "divide",
        "Divide a by b. Fails with a tool error when b is 0.",
        |args: DivideArgs| async move { divide(args) },
    )
    .timeout(Duration::from_secs(2))
    .rate_limit(50.0, 100)
    .idempotent(true)
    .tags(["math"])
    .version("1.0.0")
    .build()
}

/// Serves the calculator's tools on `listener`, announced to `registry`
/// (heartbeats included), until `shutdown` completes; then withdraws.
pub async fn serve(
    registry: &str,
    instance_id: Option<String>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), SidecarError> {
    let mut sidecar = sdk::Sidecar::new(registry).tool(divide_tool());
    if let Some(id) = instance_id {
        sidecar = sidecar.instance_id(id);
    }
    sidecar.serve(listener, shutdown).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn divides() {
        assert_eq!(divide(DivideArgs { a: 7.0, b: 2.0 }).unwrap().quotient, 3.5);
    }

    #[test]
    fn division_by_zero_is_a_tool_error() {
        let err = divide(DivideArgs { a: 1.0, b: 0.0 }).unwrap_err();
        assert_eq!(err.message(), "division by zero");
    }

    #[test]
    fn schema_requires_both_numbers_and_nothing_else() {
        let schema = serde_json::Value::from(schemars::schema_for!(DivideArgs));
        assert_eq!(schema["required"], serde_json::json!(["a", "b"]));
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["properties"]["a"]["type"], "number");
    }
}
