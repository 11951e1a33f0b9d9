//! Real `redis-server` processes on loopback: started without persistence,
//! killed (SIGKILL) when dropped, restartable on the same port to play an
//! outage. Standalone, TLS-only, and three masters joined into a Cluster
//! with `redis-cli --cluster create`.
//!
//! Ports come from [`crate::ports::reserved_port`], outside the kernel's
//! ephemeral range, so a restart finds its port still free; a start that
//! loses its port anyway is retried on another.

use std::{
    io::{Read as _, Write as _},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{ports::reserved_port, suite};

/// How many ports a start tries before giving up.
const START_ATTEMPTS: usize = 5;
/// How long a server may take to answer PING.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// `redis-server` on `PATH` (or in /usr/bin, /usr/local/bin).
fn find(program: &str) -> Result<PathBuf, String> {
    std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("{program} is not installed; scripts/test.sh installs it"))
}

/// One `redis-server` process.
pub struct RedisServer {
    /// Its port on 127.0.0.1 (TLS only, for [`start_tls`]).
    pub port: u16,
    tls: bool,
    binary: PathBuf,
    extra: Vec<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server, or `None` after [`suite::skip`] when
    /// `redis-server` is not installed.
    pub fn start() -> Option<Self> {
        Self::start_with(Vec::new())
    }

    /// A server with extra arguments; `{port}` in them is replaced by the
    /// port it gets.
    pub fn start_with(extra: Vec<String>) -> Option<Self> {
        let binary = suite::require("redis-server", find("redis-server"))?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let port = reserved_port();
            let extra: Vec<String> = extra
                .iter()
                .map(|a| a.replace("{port}", &port.to_string()))
                .collect();
            let tls = extra.iter().any(|a| a == "--tls-port");
            let mut server = Self {
                port,
                tls,
                binary: binary.clone(),
                extra,
                dir: tempfile::tempdir().expect("temp dir"),
                child: None,
            };
            match server.spawn() {
                Ok(()) => return Some(server),
                Err(why) => last = why,
            }
        }
        panic!("redis-server did not start on any of {START_ATTEMPTS} ports: {last}");
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Kills the server at once (SIGKILL): its data is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        if let Err(why) = self.spawn() {
            panic!("redis-server did not restart on port {}: {why}", self.port);
        }
    }

    fn spawn(&mut self) -> Result<(), String> {
        let plain_port = if self.tls { 0 } else { self.port };
        let log = self.dir.path().join("redis.log");
        let child = Command::new(&self.binary)
            .args(["--port", &plain_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start redis-server: {e}"))?;
        self.child = Some(child);
        self.wait_ready().inspect_err(|_| self.kill())
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Some(child) = &mut self.child
                && let Ok(Some(status)) = child.try_wait()
            {
                let log =
                    std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
                return Err(format!("exited with {status}: {}", log.trim()));
            }
            if self.answers() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no answer on port {} within {READY_WITHIN:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// PING answered (or, serving TLS only, a connection accepted).
    fn answers(&self) -> bool {
        let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        if self.tls {
            return true;
        }
        let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut reply = [0u8; 16];
        stream
            .read(&mut reply)
            .is_ok_and(|n| reply[..n].starts_with(b"+PONG") || reply[..n].starts_with(b"-NOAUTH"))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three masters on loopback joined into a Redis Cluster, every node
/// reporting `cluster_state:ok`; `None` after [`suite::skip`] when
/// `redis-server` or `redis-cli` is missing. A cluster that cannot be formed
/// is a failure, never a skip.
pub fn start_cluster() -> Option<Vec<RedisServer>> {
    let cli = suite::require("redis-cli", find("redis-cli"))?;
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(RedisServer::start_with(vec![
            "--cluster-enabled".into(),
            "yes".into(),
            "--cluster-config-file".into(),
            "nodes-{port}.conf".into(),
            "--cluster-node-timeout".into(),
            "2000".into(),
        ])?);
    }
    let output = Command::new(&cli)
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli --cluster create");
    assert!(
        output.status.success(),
        "redis-cli --cluster create failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &nodes {
        loop {
            let info = Command::new(&cli)
                .args(["-p", &node.port.to_string(), "cluster", "info"])
                .output()
                .expect("run redis-cli cluster info");
            if String::from_utf8_lossy(&info.stdout).contains("cluster_state:ok") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster never became healthy on port {}",
                node.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Some(nodes)
}

/// A server on a TLS-only port with a certificate for 127.0.0.1 signed by a
/// CA made here; returns it, the CA's PEM file, and the directory holding
/// the files (keep it alive as long as the server).
pub fn start_tls() -> Option<(RedisServer, String, tempfile::TempDir)> {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "toolmesh test CA");
    let ca = ca_params.self_signed(&ca_key).expect("ca cert");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().expect("server key");
    let server_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .expect("server params");
    let server = server_params
        .signed_by(&server_key, &issuer)
        .expect("server cert");

    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, pem: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, pem).expect("write pem");
        path.display().to_string()
    };
    let ca_file = write("ca.pem", ca.pem());
    let cert_file = write("server.pem", server.pem());
    let key_file = write("server.key", server_key.serialize_pem());
    let server = RedisServer::start_with(vec![
        "--tls-port".into(),
        "{port}".into(),
        "--tls-cert-file".into(),
        cert_file,
        "--tls-key-file".into(),
        key_file,
        "--tls-ca-cert-file".into(),
        ca_file.clone(),
        "--tls-auth-clients".into(),
        "no".into(),
    ])?;
    Some((server, ca_file, dir))
}
