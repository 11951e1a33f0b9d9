//! `toolmesh-sidecar`: serves the tools of a YAML config and keeps them
//! announced to the registry. SIGTERM / SIGINT shut it down gracefully;
//! SIGUSR1 makes it withdraw from the registry and keep serving until then.
//! `toolmesh-sidecar withdraw` sends that SIGUSR1, for Kubernetes' `preStop`
//! hook ([`toolmesh_sidecar::withdraw`]).
//!
//! This file parses the command line and delegates to
//! [`toolmesh_sidecar::launch`]. Any error ends it with exit code 1 and one
//! line on stderr, `error: ...`, each cause said once.

use std::process::ExitCode;

use clap::{ArgMatches, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};
use toolmesh_sidecar::launch::{self, Flags, WithdrawFlags};

/// glibc's malloc serializes the many small allocations of gRPC serving on
/// its arena locks; mimalloc does not (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line; each flag may also come from its environment variable.
/// Precedence: flag/env, then the config file, then the default.
#[derive(Debug, Parser)]
#[command(
    name = "toolmesh-sidecar",
    version,
    about,
    after_help = AFTER_HELP,
    subcommand_negates_reqs = true,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    /// Another command instead of serving.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    flags: Flags,
}

const AFTER_HELP: &str = "\
Health: grpc.health.v1.Health on the --listen port, for the services \"\" and
toolmesh.v1.ToolRuntime: NOT_SERVING until the first announce succeeded,
SERVING from then on (also while a lost lease is announced again), and
NOT_SERVING again once withdrawn.

Admin port (--admin-listen): GET /metrics (OpenMetrics text), GET /livez
(200 while the process answers), GET /readyz (200 as health says SERVING, 503
from the start of a withdraw on).

Signals: SIGTERM or SIGINT: withdraw, finish the calls in flight (up to 10s),
exit. SIGUSR1: withdraw, keep serving calls until SIGTERM
(`toolmesh-sidecar withdraw` sends it).";

#[derive(Debug, Subcommand)]
enum Command {
    /// Make the sidecar running in this container withdraw from the
    /// registry, for Kubernetes' preStop hook.
    #[command(long_about = WITHDRAW_ABOUT)]
    Withdraw(WithdrawFlags),
}

const WITHDRAW_ABOUT: &str = "\
Make the sidecar running in this container withdraw from the registry, for
Kubernetes' preStop hook (the image has no shell: the hook runs this binary).

It checks that the sidecar's health answers on --listen, sends SIGUSR1 to
--pid, and waits until the sidecar reports NOT_SERVING, which it does once the
registry answered its Withdraw. The sidecar stops announcing, keeps serving
calls (those in flight, and any the registry still sends) until SIGTERM, then
finishes them and exits. Exit status 0 once withdrawn, 1 with one line on
stderr otherwise.";

#[tokio::main]
async fn main() -> ExitCode {
    // Before anything else: until it is handled, SIGUSR1 ends the process.
    let withdraw = toolmesh_sidecar::shutdown::withdraw_requested();
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let result = match cli.command {
        Some(Command::Withdraw(flags)) => request_withdraw(flags, &matches).await,
        None => serve(cli.flags, &matches, withdraw).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", toolmesh_telemetry::causes(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// `toolmesh-sidecar withdraw`.
async fn request_withdraw(flags: WithdrawFlags, matches: &ArgMatches) -> anyhow::Result<()> {
    let Some(matches) = matches.subcommand_matches("withdraw") else {
        anyhow::bail!("no withdraw arguments");
    };
    println!("{}", launch::request_withdraw(flags, matches).await?);
    Ok(())
}

async fn serve(
    flags: Flags,
    matches: &ArgMatches,
    withdraw: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let log = toolmesh_telemetry::LogArgs {
        filter: toolmesh_telemetry::filter::quieting(&flags.log.filter, "rmcp"),
        ..flags.log.clone()
    };
    let _telemetry = toolmesh_telemetry::init(&log, "toolmesh-sidecar")?;
    let shutdown = toolmesh_sidecar::shutdown::signal_received();
    launch::run(flags, matches, withdraw, shutdown).await?;
    Ok(())
}
