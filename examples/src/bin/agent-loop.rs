//! `agent-loop`: the agent loop with a scripted stand-in for the LLM
//! ([`toolmesh_examples::agent_loop`]) against any registry, printing its
//! transcript, one step a line.

use std::time::Duration;

use clap::Parser;
use toolmesh_examples::agent::{self, Access};
use toolmesh_examples::agent_loop::{self, ScriptedModel};

/// Searches for a tool for the task, calls it, fixes the call from the
/// registry's violations, and prints each step.
#[derive(Debug, Parser)]
#[command(name = "agent-loop", version, about)]
struct Cli {
    /// Registry address: host:port, http://host:port, or https://host:port.
    #[arg(long, env = "TOOLMESH_REGISTRY", default_value = "127.0.0.1:50051")]
    registry: String,
    /// The task, in words; the model passes its quoted part to the tool.
    #[arg(default_value = r#"How many words are in "the quick brown fox jumps"?"#)]
    task: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let access = Access::from_env(None, None)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut client = agent::connect(&cli.registry, &access, deadline).await?;
    for step in agent_loop::run(&mut client, &cli.task, &ScriptedModel::default()).await? {
        println!("{step:?}");
    }
    Ok(())
}
