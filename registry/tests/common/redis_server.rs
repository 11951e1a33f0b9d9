//! A real `redis-server` on a loopback port for the tests: started without
//! persistence, stopped (SIGKILL) when dropped, restartable on the same port
//! to play an outage. Tests that need it skip with a message when the binary
//! is missing, unless `TOOLMESH_REQUIRE_REDIS` is set (`scripts/test.sh`
//! installs it and sets that).

use std::{
    net::TcpListener,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// Where `redis-server` is, if installed.
pub fn redis_server_binary() -> Option<PathBuf> {
    let candidates = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// One `redis-server` process.
pub struct RedisServer {
    pub port: u16,
    /// Serving TLS only: readiness is a TCP accept, not a plain PING.
    tls: bool,
    binary: PathBuf,
    extra: Vec<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a standalone server, or `None` (with a message) if
    /// `redis-server` is not installed.
    pub fn start() -> Option<Self> {
        Self::start_with(free_port(), Vec::new())
    }

    /// Starts a server on `port` with extra arguments (e.g. cluster mode).
    pub fn start_with(port: u16, extra: Vec<String>) -> Option<Self> {
        let Some(binary) = redis_server_binary() else {
            assert!(
                std::env::var_os("TOOLMESH_REQUIRE_REDIS").is_none(),
                "redis-server is not installed and TOOLMESH_REQUIRE_REDIS is set"
            );
            eprintln!("SKIPPED: redis-server is not installed (scripts/test.sh installs it)");
            return None;
        };
        let tls = extra.iter().any(|a| a == "--tls-port");
        let mut server = Self {
            port,
            tls,
            binary,
            extra,
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        server.spawn();
        Some(server)
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
        self.spawn();
    }

    fn spawn(&mut self) {
        let plain_port = if self.tls { 0 } else { self.port };
        let child = Command::new(&self.binary)
            .args(["--port", &plain_port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let connected = std::net::TcpStream::connect(("127.0.0.1", self.port));
            if self.tls && connected.is_ok() {
                return;
            }
            if let Ok(mut stream) = connected {
                use std::io::{Read, Write};
                let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
                if stream.write_all(b"PING\r\n").is_ok() {
                    let mut reply = [0u8; 16];
                    if let Ok(n) = stream.read(&mut reply)
                        && (reply[..n].starts_with(b"+PONG") || reply[..n].starts_with(b"-NOAUTH"))
                    {
                        return;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not start",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Three masters on loopback joined into a Redis Cluster with
/// `redis-cli --cluster create`, or `None` (with a message) if that cannot be
/// done here.
pub fn start_cluster() -> Option<Vec<RedisServer>> {
    let cli = redis_server_binary()?.with_file_name("redis-cli");
    if !cli.is_file() {
        eprintln!("SKIPPED: redis-cli is not installed");
        return None;
    }
    let mut nodes = Vec::new();
    for _ in 0..3 {
        let port = free_port();
        let extra = vec![
            "--cluster-enabled".into(),
            "yes".into(),
            "--cluster-config-file".into(),
            format!("nodes-{port}.conf"),
            "--cluster-node-timeout".into(),
            "2000".into(),
        ];
        nodes.push(RedisServer::start_with(port, extra)?);
    }
    let status = Command::new(&cli)
        .args(["--cluster", "create"])
        .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .ok()?;
    if !status.success() {
        eprintln!("SKIPPED: redis-cli --cluster create failed");
        return None;
    }
    // Wait until every node reports the cluster healthy.
    let deadline = Instant::now() + Duration::from_secs(20);
    for node in &nodes {
        loop {
            let out = Command::new(&cli)
                .args(["-p", &node.port.to_string(), "cluster", "info"])
                .output()
                .ok()?;
            if String::from_utf8_lossy(&out.stdout).contains("cluster_state:ok") {
                break;
            }
            if Instant::now() > deadline {
                eprintln!("SKIPPED: the cluster never became healthy");
                return None;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Some(nodes)
}

/// A `redis-server` serving TLS only on a free port, with a certificate for
/// 127.0.0.1 signed by a CA made for the test; returns it and the CA's PEM.
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
    let port = free_port();
    let extra = vec![
        "--tls-port".into(),
        port.to_string(),
        "--tls-cert-file".into(),
        cert_file,
        "--tls-key-file".into(),
        key_file,
        "--tls-ca-cert-file".into(),
        ca_file.clone(),
        "--tls-auth-clients".into(),
        "no".into(),
    ];
    let server = RedisServer::start_with(port, extra)?;
    Some((server, ca_file, dir))
}
