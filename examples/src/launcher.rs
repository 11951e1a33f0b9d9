//! The demo launcher (`toolmesh-demo`): starts the real registry and sidecar
//! binaries, the example HTTP service and the SDK tool on free loopback
//! ports, runs the [`agent`] in-process, then stops every
//! child with SIGTERM (SIGKILL after a grace period).
//!
//! Binaries are found next to the launcher's own executable; the registry
//! and sidecar may instead come from `TOOLMESH_BIN_DIR`. Child logs go to a
//! temp dir, removed after a passing run unless `--keep-logs`, kept (and
//! named) after a failing one.

use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::agent;
use crate::demo_config::effective_sidecar_config;
use crate::present::heading;
use crate::processes::{Ending, Supervisor};

/// Environment variable naming the dir holding `toolmesh-registry` and
/// `toolmesh-sidecar`.
pub const BIN_DIR_ENV: &str = "TOOLMESH_BIN_DIR";

/// How long a child may take to exit after SIGTERM.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// How long the registry and the inventory service may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// How the demo runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Dir holding `toolmesh-registry` and `toolmesh-sidecar` (default: the
    /// launcher's own dir).
    pub bin_dir: Option<PathBuf>,
    /// Dir holding `sidecar.yaml` and its scripts.
    pub demo_dir: PathBuf,
    /// The registry's lease TTL.
    pub lease_ttl: Duration,
    /// How long the agent waits for every tool to be live.
    pub wait_for_tools: Duration,
    /// Keep the log dir after a passing run.
    pub keep_logs: bool,
    /// Serve the registry's console here, and keep everything running
    /// after the agent's run until interrupted.
    pub console: Option<SocketAddr>,
}

impl Options {
    /// The default demo dir: `demo/` in this crate's source tree.
    pub fn default_demo_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("demo")
    }
}

/// The binaries a demo run starts.
struct Binaries {
    registry: PathBuf,
    sidecar: PathBuf,
    inventory: PathBuf,
    calculator: PathBuf,
}

impl Binaries {
    fn find(bin_dir: Option<&Path>) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find the launcher's own executable")?;
        let own_dir = exe
            .parent()
            .context("the launcher's executable has no parent dir")?;
        let tool_dir = bin_dir.unwrap_or(own_dir);
        let binaries = Self {
            registry: tool_dir.join("toolmesh-registry"),
            sidecar: tool_dir.join("toolmesh-sidecar"),
            inventory: own_dir.join("inventory-service"),
            calculator: own_dir.join("calculator-tool"),
        };
        for path in [
            &binaries.registry,
            &binaries.sidecar,
            &binaries.inventory,
            &binaries.calculator,
        ] {
            if !path.is_file() {
                bail!(
                    "{} not found: run `cargo build --workspace --bins` first (or set {BIN_DIR_ENV} \
                     to the dir holding toolmesh-registry and toolmesh-sidecar)",
                    path.display()
                );
            }
        }
        Ok(binaries)
    }
}

/// Runs the demo. `Ok(true)` when every expected outcome was observed and
/// every child stopped on SIGTERM; `Ok(false)` when something was missed;
/// `Err` when the demo could not run at all. Either way no child is left.
pub async fn run(options: &Options) -> anyhow::Result<bool> {
    let binaries = Binaries::find(options.bin_dir.as_deref())?;
    let demo_dir = options
        .demo_dir
        .canonicalize()
        .with_context(|| format!("demo dir {}", options.demo_dir.display()))?;
    let config_path = demo_dir.join("sidecar.yaml");
    let config_yaml = std::fs::read_to_string(&config_path)
        .with_context(|| format!("cannot read {}", config_path.display()))?;
    // Kept (not a self-deleting TempDir) so logs survive a panic.
    let log_dir = tempfile::Builder::new()
        .prefix("toolmesh-demo-")
        .tempdir()
        .context("cannot create the log dir")?
        .keep();

    println!("toolmesh demo");
    println!("  logs of the child processes: {}", log_dir.display());
    let mut supervisor = Supervisor::new(&log_dir);
    let outcome = start_and_run(
        &mut supervisor,
        &binaries,
        options,
        &config_yaml,
        &demo_dir,
        &log_dir,
    )
    .await;

    println!("{}", heading("Shutdown"));
    let mut stopped_cleanly = true;
    for stopped in supervisor.stop_all(STOP_GRACE).await {
        let status = stopped
            .status
            .map_or_else(|| "status unknown".to_owned(), |s| s.to_string());
        let how = match stopped.ending {
            Ending::Terminated => "stopped by SIGTERM",
            Ending::Killed => {
                stopped_cleanly = false;
                "ignored SIGTERM, killed"
            }
            Ending::AlreadyExited => {
                stopped_cleanly = false;
                "had already exited"
            }
        };
        println!(
            "  {:<18} pid={:<8} {how} ({status})",
            stopped.name, stopped.pid
        );
    }

    let passed = match outcome {
        Ok(report) => report.passed() && stopped_cleanly,
        Err(error) => {
            println!("\ndemo could not run: {error:#}");
            false
        }
    };
    if passed && !options.keep_logs {
        let _ = std::fs::remove_dir_all(&log_dir);
        println!("  logs removed (pass --keep-logs to keep them)");
    } else {
        println!("  logs kept in {}", log_dir.display());
    }
    if passed {
        println!("\ndemo passed: every expected outcome was observed");
    } else {
        println!("\ndemo FAILED");
    }
    Ok(passed)
}

async fn start_and_run(
    supervisor: &mut Supervisor,
    binaries: &Binaries,
    options: &Options,
    config_yaml: &str,
    demo_dir: &Path,
    log_dir: &Path,
) -> anyhow::Result<agent::Report> {
    let [registry_addr, inventory_addr, sidecar_addr] = free_ports()?;
    let registry_url = format!("http://{registry_addr}");
    // Config first, processes second: a bad config starts nothing.
    let effective =
        effective_sidecar_config(config_yaml, demo_dir, &format!("http://{inventory_addr}"))?;
    let effective_path = log_dir.join("sidecar.yaml");
    std::fs::write(&effective_path, effective)
        .with_context(|| format!("cannot write {}", effective_path.display()))?;
    println!("{}", heading("Starting"));

    let lease_ttl = format!("{}ms", options.lease_ttl.as_millis());
    let mut registry_args = vec![
        "--listen".to_owned(),
        registry_addr.to_string(),
        "--lease-ttl".to_owned(),
        lease_ttl,
        "--shutdown-grace".to_owned(),
        "2s".to_owned(),
    ];
    if let Some(console) = options.console {
        registry_args.extend(["--console-listen".to_owned(), console.to_string()]);
    }
    let pid = supervisor.spawn("registry", &binaries.registry, &registry_args)?;
    println!(
        "  {:<18} pid={pid:<8} {registry_url} (lease TTL {:?})",
        "registry", options.lease_ttl
    );
    wait_listening(supervisor, registry_addr).await?;

    let pid = supervisor.spawn(
        "inventory-service",
        &binaries.inventory,
        ["--listen", &inventory_addr.to_string()],
    )?;
    println!(
        "  {:<18} pid={pid:<8} http://{inventory_addr}/lookup",
        "inventory-service"
    );
    wait_listening(supervisor, inventory_addr).await?;

    let pid = supervisor.spawn(
        "toolmesh-sidecar",
        &binaries.sidecar,
        [
            "--config",
            path_str(&effective_path)?,
            "--registry",
            &registry_url,
            "--listen",
            &sidecar_addr.to_string(),
            "--instance-id",
            "demo-sidecar",
        ],
    )?;
    println!(
        "  {:<18} pid={pid:<8} {sidecar_addr}, config {} (word_count, slow_report, lookup)",
        "toolmesh-sidecar",
        effective_path.display()
    );

    let pid = supervisor.spawn(
        "calculator-tool",
        &binaries.calculator,
        [
            "--registry",
            &registry_url,
            "--listen",
            "127.0.0.1:0",
            "--instance-id",
            "demo-calculator",
        ],
    )?;
    println!(
        "  {:<18} pid={pid:<8} Rust SDK tool (divide)",
        "calculator-tool"
    );

    let agent_options = agent::Options {
        registry: registry_url,
        wait_for_tools: options.wait_for_tools,
    };
    let report = tokio::select! {
        report = agent::run(&agent_options) => report,
        error = supervisor.first_exit() => Err(error),
        () = toolmesh_sidecar::shutdown::signal_received() => bail!("interrupted"),
    }?;
    if let Some(console) = options.console {
        println!("{}", heading("Console"));
        println!(
            "  open http://{console}/ (the agent's calls are on /calls); Ctrl-C stops the demo"
        );
        tokio::select! {
            error = supervisor.first_exit() => return Err(error),
            () = toolmesh_sidecar::shutdown::signal_received() => {}
        }
    }
    Ok(report)
}

/// Distinct free loopback addresses: each bound to port 0 and released
/// (all held at once, so they differ).
fn free_ports<const N: usize>() -> anyhow::Result<[SocketAddr; N]> {
    let listeners = (0..N)
        .map(|_| StdListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("cannot bind a free loopback port")?;
    let addrs = listeners
        .iter()
        .map(StdListener::local_addr)
        .collect::<Result<Vec<_>, _>>()
        .context("cannot read a bound port")?;
    addrs
        .try_into()
        .map_err(|_| anyhow::anyhow!("wrong number of ports"))
}

/// Waits until `addr` accepts TCP connections, failing early if a child exits.
async fn wait_listening(supervisor: &mut Supervisor, addr: SocketAddr) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        supervisor.check_running()?;
        if TcpStream::connect(addr).await.is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("nothing listens on {addr} after {READY_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}
