//! Real sidecar processes (the `toolmesh-sidecar` binary) for fault tests,
//! and a counting HTTP backend for them to call.

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    process::Stdio,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, routing::post};
use nix::{sys::signal::Signal, unistd::Pid};
use serde::Deserialize;
use tokio::process::{Child, Command};

/// Where the workspace's binaries are: `TOOLMESH_BIN_DIR`, else the
/// workspace's `target/debug`. `None` (with a message) if the sidecar binary
/// is not built, unless `TOOLMESH_REQUIRE_REDIS` says this is the full suite.
pub fn sidecar_binary() -> Option<PathBuf> {
    let dir = std::env::var_os("TOOLMESH_BIN_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug"),
        PathBuf::from,
    );
    let binary = dir.join("toolmesh-sidecar");
    if binary.is_file() {
        return Some(binary);
    }
    assert!(
        std::env::var_os("TOOLMESH_REQUIRE_REDIS").is_none(),
        "{} is not built (scripts/test.sh builds it)",
        binary.display()
    );
    eprintln!(
        "SKIPPED: {} is not built; run cargo build --workspace --bins",
        binary.display()
    );
    None
}

/// A `toolmesh-sidecar` process.
pub struct SidecarProcess {
    child: Child,
    pub pid: i32,
    _dir: tempfile::TempDir,
}

impl SidecarProcess {
    /// Starts the binary with `yaml` as its config, announcing to `registry`
    /// as `instance`.
    pub fn start(binary: &PathBuf, registry: &str, instance: &str, yaml: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("sidecar.yaml");
        std::fs::write(&config, yaml).expect("write config");
        let port = super::redis_server::free_port();
        let child = Command::new(binary)
            .arg("--config")
            .arg(&config)
            .args([
                "--registry",
                registry,
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--instance-id",
                instance,
            ])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start toolmesh-sidecar");
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).expect("pid");
        Self {
            child,
            pid,
            _dir: dir,
        }
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: Signal) {
        nix::sys::signal::kill(Pid::from_raw(self.pid), signal).expect("signal the sidecar");
    }

    /// Whether the process is still running (not exited).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL, and reap.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }
}

impl Drop for SidecarProcess {
    fn drop(&mut self) {
        // A stopped process must be continued to die of SIGKILL promptly.
        let _ = nix::sys::signal::kill(Pid::from_raw(self.pid), Signal::SIGCONT);
        let _ = self.child.start_kill();
    }
}

#[derive(Debug, Deserialize)]
struct Work {
    id: String,
    #[serde(default)]
    sleep_ms: u64,
}

/// An HTTP backend counting executions per request id.
#[derive(Clone, Default)]
pub struct Counter {
    total: Arc<AtomicUsize>,
    by_id: Arc<Mutex<HashMap<String, usize>>>,
}

impl Counter {
    /// Serves `POST /work` on a loopback port; returns its URL.
    pub async fn serve(&self) -> String {
        let app = Router::new()
            .route("/work", post(work))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        format!("http://{addr}/work")
    }

    /// Executions so far.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// The most executions any one request id had.
    pub fn max_per_id(&self) -> usize {
        self.by_id
            .lock()
            .expect("lock")
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Executions of one request id.
    pub fn of(&self, id: &str) -> usize {
        self.by_id
            .lock()
            .expect("lock")
            .get(id)
            .copied()
            .unwrap_or(0)
    }
}

async fn work(State(counter): State<Counter>, Json(work): Json<Work>) -> Json<serde_json::Value> {
    counter.total.fetch_add(1, Ordering::SeqCst);
    let n = {
        let mut by_id = counter.by_id.lock().expect("lock");
        let n = by_id.entry(work.id.clone()).or_default();
        *n += 1;
        *n
    };
    tokio::time::sleep(Duration::from_millis(work.sleep_ms)).await;
    Json(serde_json::json!({"id": work.id, "n": n}))
}

/// A sidecar config with one HTTP tool `name` calling `url`.
pub fn work_tool_yaml(name: &str, url: &str, idempotent: bool, timeout: &str) -> String {
    format!(
        r#"tools:
  - name: {name}
    description: Does some work and counts it
    input_schema:
      type: object
      properties: {{id: {{type: string}}, sleep_ms: {{type: integer, minimum: 0}}}}
      required: [id]
    idempotent: {idempotent}
    timeout: {timeout}
    backend:
      http: {{url: "{url}"}}
"#
    )
}
