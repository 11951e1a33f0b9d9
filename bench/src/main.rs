//! The side-by-side benchmark's parts (`scripts/bench.sh` drives them):
//!
//! - `toolmesh-bench echo`: an SDK `echo` tool (no rate limit, or one too
//!   high ever to deny with `--rate-limited`) served by the sidecar library
//!   and announced to a registry;
//! - `toolmesh-bench load`: a gRPC load generator over raw HTTP/2 (one
//!   thread, pre-encoded request frames, as `h2load -t 1` would), which
//!   also checks that every answer is `grpc-status: 0`, and prints one JSON
//!   line of figures;
//! - `toolmesh-bench frame`: the request `load` sends, for `h2load -d`;
//! - `toolmesh-bench scale`: a large catalog announced over gRPC, timing
//!   announce, heartbeat, `ListTools`, `GetTool`, `SearchTools` and the
//!   lease sweep (`scripts/scale.sh` drives it);
//! - `toolmesh-bench scale-out`: one tool called through every registry
//!   replica at once, counting accepted and rate-limited calls
//!   (`scripts/scale.sh` drives it on a Redis Cluster);
//! - `toolmesh-bench console`: the console's pages timed over HTTP/1.1 at
//!   a catalog announced as `scale` does (`scripts/bench_console.sh`
//!   drives it).

// The allocator the binaries use.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser as _;

mod console;
mod direct;
mod echo;
mod load;
mod scale;
mod scale_out;

#[derive(Debug, clap::Parser)]
#[command(name = "toolmesh-bench", about = "The side-by-side benchmark's parts")]
enum Command {
    /// Serves the `echo` tool through the sidecar library.
    Echo(echo::Args),
    /// Drives a gRPC method with pre-encoded requests.
    Load(load::Args),
    /// Writes the request `load` sends to stdout (for `h2load -d`).
    Frame(load::Request),
    /// Announces a large catalog and times announce, heartbeat, reads and
    /// the lease sweep.
    Scale(scale::Args),
    /// Calls one tool through every replica at once; counts what each
    /// accepted and what the rate limit refused.
    ScaleOut(scale_out::Args),
    /// Announces a large catalog and times the console's pages.
    Console(console::Args),
}

fn main() -> anyhow::Result<()> {
    match Command::parse() {
        Command::Echo(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
            .block_on(echo::run(args)),
        // One thread, as `h2load -t 1`: the client takes one core at most.
        Command::Load(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(load::run(args)),
        Command::Frame(args) => load::write_frame(&args),
        Command::Scale(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(scale::run(args)),
        // One thread for every replica's calls.
        Command::ScaleOut(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(scale_out::run(args)),
        Command::Console(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(console::run(args)),
    }
}
