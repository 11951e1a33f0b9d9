//! An SDK `echo` tool, served by the sidecar library and announced to a
//! registry: the tool every path of the benchmark ends at.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use toolmesh_sidecar::{sdk, server::ServeOptions};

/// `toolmesh-bench echo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Where `ToolRuntime` listens.
    #[arg(long, default_value = "127.0.0.1:50061")]
    listen: std::net::SocketAddr,
    /// The registry to announce to.
    #[arg(long, default_value = "http://127.0.0.1:50051")]
    registry: String,
    /// The tool's name.
    #[arg(long, default_value = "echo")]
    tool: String,
    /// The instance id to announce.
    #[arg(long, default_value = "echo")]
    instance_id: String,
    /// Give the tool a rate limit too high ever to deny (10⁶/s), so the
    /// limiter's cost is measured, not its effect.
    #[arg(long)]
    rate_limited: bool,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Text {
    /// Any text; answered unchanged.
    text: String,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let _telemetry = toolmesh_telemetry::init(
        &toolmesh_telemetry::LogArgs {
            filter: "warn".into(),
            ..toolmesh_telemetry::LogArgs::default()
        },
        "toolmesh-bench-echo",
    )?;
    let mut tool = sdk::tool(&args.tool, "Answers its text", |args: Text| async move {
        Ok::<_, sdk::ToolError>(args)
    })
    .idempotent(true);
    if args.rate_limited {
        tool = tool.rate_limit(1e6, 1_000_000);
    }
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("echo listening address={}", listener.local_addr()?);
    let options = ServeOptions {
        registry: args.registry,
        instance_id: Some(args.instance_id),
        ..ServeOptions::default()
    };
    toolmesh_sidecar::server::serve(listener, vec![tool.build()], options, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
