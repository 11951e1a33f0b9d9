//! An SDK `echo` tool, served by the sidecar library and announced to a
//! registry: the tool every path of the benchmark ends at. Unlimited, with
//! a limit too high ever to deny (`--rate-limited`), or with a chosen one
//! (`--rate`, `--burst`). With `--direct`, the same tool also answers
//! `ToolRuntime.Execute` there with no grant check (see [`crate::direct`]).

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
    #[arg(long, conflicts_with = "rate")]
    rate_limited: bool,
    /// Give the tool this rate limit, in calls per second across every
    /// replica (`scripts/scale.sh` measures how exactly it holds).
    #[arg(long)]
    rate: Option<f64>,
    /// The limit's burst, with `--rate` (0: the registry's default,
    /// max(1, ⌈rate⌉)).
    #[arg(long, default_value_t = 0, requires = "rate")]
    burst: u32,
    /// Also serve the tool here, to anyone, without the sidecar's grant
    /// check: the path with no registry, which h2load can call.
    #[arg(long)]
    direct: Option<std::net::SocketAddr>,
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
    let tool = echo(&args);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("echo listening address={}", listener.local_addr()?);
    if let Some(direct) = args.direct {
        let direct = tokio::net::TcpListener::bind(direct).await?;
        println!("echo direct address={}", direct.local_addr()?);
        let tool = tool.clone();
        tokio::spawn(async move {
            if let Err(err) = crate::direct::serve(direct, tool).await {
                eprintln!("echo: the direct path stopped: {err:#}");
                std::process::exit(1);
            }
        });
    }
    let options = ServeOptions {
        registry: args.registry,
        instance_id: Some(args.instance_id),
        ..ServeOptions::default()
    };
    toolmesh_sidecar::server::serve(listener, vec![tool], options, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}

/// The echo tool `args` describe.
fn echo(args: &Args) -> toolmesh_sidecar::Tool {
    let mut tool = sdk::tool(&args.tool, "Answers its text", |args: Text| async move {
        Ok::<_, sdk::ToolError>(args)
    })
    .idempotent(true);
    if args.rate_limited {
        tool = tool.rate_limit(1e6, 1_000_000);
    } else if let Some(rate) = args.rate {
        tool = tool.rate_limit(rate, args.burst);
    }
    tool.build()
}
