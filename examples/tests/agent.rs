//! The Rust agent (the `agent` binary and `toolmesh_examples::agent`)
//! against a real `toolmesh-registry` that authenticates agents with API
//! keys (`--api-keys-file`, the keys' SHA-256 computed here), has a policy
//! (`--policy-file`), and, in one test, serves TLS with a certificate of a
//! CA made for the test; a real `toolmesh-sidecar` serves stand-ins for the
//! demo's four tools (`cat`), so the agent's walk-through finds them.
//!
//! The stand-ins return their arguments, so the walk-through's
//! demo-specific checks (7 words, 42 widgets, ...) fail and the binary
//! exits 1 once it has run: the tests look at what it listed and called.
//!
//! The binaries come from `TOOLMESH_BIN_DIR` (see
//! `toolmesh_test_support::process::bin_dir`); without them the tests fail
//! under the test command and say they skipped under a plain `cargo test`.
#![allow(clippy::unwrap_used)]

#[path = "common/mesh.rs"]
mod mesh;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use mesh::STARTUP;
use tokio::process::Command;
use tokio::time::Instant;
use tonic::Code;
use toolmesh_examples::agent::access::{Credential, NO_CREDENTIAL_HINT, TOKEN_ENV};
use toolmesh_examples::agent::{self, Access, Client, EXPECTED_TOOLS};
use toolmesh_proto::pb;
use toolmesh_test_support::process::{SidecarProcess, binary};
use toolmesh_test_support::registry_process::RegistryProcess;
use toolmesh_test_support::tls::Ca;
use toolmesh_test_support::wait::eventually;

const AGENT: &str = env!("CARGO_BIN_EXE_agent");

/// Test keys: long enough to look like real ones; only their SHA-256 goes
/// to the registry.
const KEY_A: &str = "agent-a-key-0123456789abcdef0123456789abcdef";
const KEY_B: &str = "agent-b-key-fedcba9876543210fedcba9876543210";
const WRONG_KEY: &str = "not-a-key-the-registry-knows-0123456789";

/// The demo's tool names, each returning its arguments.
const STAND_INS: &str = r#"
tools:
  - {name: divide, description: Stand-in, timeout: 30s, backend: {command: ["cat"]}}
  - {name: lookup, description: Stand-in, timeout: 30s, backend: {command: ["cat"]}}
  - {name: slow_report, description: Stand-in, timeout: 30s, backend: {command: ["cat"]}}
  - {name: word_count, description: Stand-in, timeout: 30s, backend: {command: ["cat"]}}
"#;

/// A registry that authenticates agents, with a policy (agent-a may call
/// `word_count` only, agent-b anything), and a sidecar serving the
/// stand-ins, all live.
struct Secured {
    _registry: RegistryProcess,
    _sidecar: SidecarProcess,
    url: String,
    /// The CA of the registry's certificate, when it serves TLS.
    ca: Option<PathBuf>,
    dir: tempfile::TempDir,
}

impl Secured {
    async fn start(tls: bool) -> Option<Self> {
        let registry_binary = binary("toolmesh-registry")?;
        let sidecar_binary = binary("toolmesh-sidecar")?;
        let dir = tempfile::tempdir().unwrap();
        let keys = toolmesh_test_support::keys::api_keys_file(
            dir.path(),
            &[("agent-a", KEY_A, &[]), ("agent-b", KEY_B, &[])],
        );
        let policy = dir.path().join("policy.yaml");
        std::fs::write(
            &policy,
            "rules:\n  - {callers: [agent-a], tools: [\"word_count\"]}\n  - {callers: [agent-b], tools: [\"*\"]}\n",
        )
        .unwrap();
        let mut args: Vec<String> = [
            "--listen",
            "127.0.0.1:0",
            "--api-keys-file",
            keys.to_str().unwrap(),
            "--policy-file",
            policy.to_str().unwrap(),
        ]
        .map(str::to_owned)
        .to_vec();
        let mut ca_file = None;
        if tls {
            let ca = Ca::new("toolmesh test CA");
            let (cert, key) = ca
                .issue(&["127.0.0.1", "localhost"])
                .write(dir.path(), "registry");
            ca_file = Some(ca.write(dir.path(), "ca.pem"));
            args.extend([
                "--tls-cert-file".to_owned(),
                cert.display().to_string(),
                "--tls-key-file".to_owned(),
                key.display().to_string(),
            ]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (registry, addr) =
            RegistryProcess::start(&registry_binary, &args, &[("NO_COLOR", "1")]).await;
        let url = format!("{}://{addr}", if tls { "https" } else { "http" });
        let mut sidecar_args = vec![
            "--registry".to_owned(),
            url.clone(),
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--instance-id".to_owned(),
            "stand-ins".to_owned(),
        ];
        if let Some(ca) = &ca_file {
            sidecar_args.extend(["--registry-ca-file".to_owned(), ca.display().to_string()]);
        }
        let sidecar_args: Vec<&str> = sidecar_args.iter().map(String::as_str).collect();
        let mut sidecar = SidecarProcess::spawn(&sidecar_binary, STAND_INS, &sidecar_args, &[]);
        sidecar.bound(STARTUP).await;
        let secured = Self {
            _registry: registry,
            _sidecar: sidecar,
            url,
            ca: ca_file,
            dir,
        };
        let admin = secured.client(KEY_B).await;
        eventually(STARTUP, "the stand-ins are live", || {
            let mut admin = admin.clone();
            async move { names(&mut admin).await.is_ok_and(|n| n == EXPECTED_TOOLS) }
        })
        .await;
        Some(secured)
    }

    /// The agent's access with `key` (and the CA, over TLS).
    fn access(&self, key: &str) -> Access {
        Access {
            credential: Some(Credential::new(key, TOKEN_ENV).unwrap()),
            ca_file: self.ca.clone(),
        }
    }

    async fn client(&self, key: &str) -> Client {
        agent::connect(&self.url, &self.access(key), Instant::now() + STARTUP)
            .await
            .unwrap()
    }

    /// The `agent` binary against this registry (unless `args` has a
    /// `--registry`) with `args` and `envs` (none of the agent's variables
    /// but those).
    async fn run(&self, args: &[&str], envs: &[(&str, &str)]) -> Run {
        let mut command = Command::new(AGENT);
        if !args.contains(&"--registry") {
            command.args(["--registry", &self.url]);
        }
        command
            .args(["--wait-secs", "3"])
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        for name in [
            "TOOLMESH_REGISTRY",
            "TOOLMESH_TOKEN",
            "TOOLMESH_TOKEN_FILE",
            "TOOLMESH_CA_FILE",
        ] {
            command.env_remove(name);
        }
        command.envs(envs.iter().copied());
        let output = tokio::time::timeout(Duration::from_secs(60), command.output())
            .await
            .expect("the agent still runs after 60 s")
            .unwrap();
        Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The walk-through ran: it saw every tool, listed them and called them.
    fn walked_through(&self) {
        assert_eq!(self.code, Some(1), "{self:#?}");
        for line in [
            "all 4 tools are live",
            "[ok] ListTools lists every demo tool",
            "<- result {\"a\":22,\"b\":7}",
        ] {
            assert!(self.stdout.contains(line), "missing {line:?}: {self:#?}");
        }
        assert!(!self.stdout.contains("UNAUTHENTICATED"), "{self:#?}");
    }
}

async fn names(client: &mut Client) -> Result<Vec<String>, tonic::Status> {
    Ok(client
        .list_tools(pb::ListToolsRequest::default())
        .await?
        .into_inner()
        .tools
        .into_iter()
        .filter_map(|t| t.descriptor.map(|d| d.name))
        .collect())
}

fn write_token(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_credential_the_agent_says_what_to_set() {
    let Some(mesh) = Secured::start(false).await else {
        return;
    };
    let run = mesh.run(&[], &[]).await;
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert!(
        run.stderr
            .starts_with(&format!("agent: {NO_CREDENTIAL_HINT} (")),
        "{run:#?}"
    );

    let refused = mesh.run(&[], &[("TOOLMESH_TOKEN", WRONG_KEY)]).await;
    assert_eq!(refused.code, Some(2), "{refused:#?}");
    assert!(
        refused
            .stderr
            .starts_with("agent: the registry refused the credential from TOOLMESH_TOKEN ("),
        "{refused:#?}"
    );
    assert!(!refused.stderr.contains(WRONG_KEY) && !refused.stdout.contains(WRONG_KEY));

    let mut anonymous = agent::connect(&mesh.url, &Access::default(), Instant::now() + STARTUP)
        .await
        .unwrap();
    let status = names(&mut anonymous).await.expect_err("no credential");
    assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_key_the_agent_lists_and_invokes() {
    let Some(mesh) = Secured::start(false).await else {
        return;
    };
    let mut client = mesh.client(KEY_B).await;
    assert_eq!(names(&mut client).await.unwrap(), EXPECTED_TOOLS);
    let response = client
        .invoke(pb::InvokeRequest {
            tool: "divide".to_owned(),
            arguments_json: r#"{"a": 1}"#.to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&response.result_json).unwrap(),
        serde_json::json!({"a": 1})
    );

    mesh.run(&[], &[("TOOLMESH_TOKEN", KEY_B)])
        .await
        .walked_through();
    let token_file = write_token(mesh.dir.path(), KEY_B);
    let token_file = token_file.to_str().unwrap();
    mesh.run(&[], &[("TOOLMESH_TOKEN_FILE", token_file)])
        .await
        .walked_through();
    mesh.run(&["--token-file", token_file], &[])
        .await
        .walked_through();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_shows_the_agent_only_its_tools() {
    let Some(mesh) = Secured::start(false).await else {
        return;
    };
    let mut client = mesh.client(KEY_A).await;
    assert_eq!(names(&mut client).await.unwrap(), ["word_count"]);
    let hidden = client
        .invoke(pb::InvokeRequest {
            tool: "divide".to_owned(),
            arguments_json: "{}".to_owned(),
            ..Default::default()
        })
        .await
        .expect_err("agent-a may not call divide");
    assert_eq!(hidden.code(), Code::NotFound, "{hidden:?}");

    // The agent's WatchTools sees word_count only, and waits in vain for the rest.
    let run = mesh.run(&[], &[("TOOLMESH_TOKEN", KEY_A)]).await;
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert!(run.stdout.contains("+ word_count"), "{run:#?}");
    assert!(!run.stdout.contains("+ divide"), "{run:#?}");
    assert!(
        run.stderr
            .contains(r#"the tools ["divide", "lookup", "slow_report"] did not appear"#),
        "{run:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_the_ca_file() {
    let Some(mesh) = Secured::start(true).await else {
        return;
    };
    assert!(mesh.url.starts_with("https://"), "{}", mesh.url);
    let ca = mesh.ca.clone().unwrap();
    let ca = ca.to_str().unwrap();
    mesh.run(&[], &[("TOOLMESH_TOKEN", KEY_B), ("TOOLMESH_CA_FILE", ca)])
        .await
        .walked_through();
    mesh.run(&["--ca-file", ca], &[("TOOLMESH_TOKEN", KEY_B)])
        .await
        .walked_through();

    // Without the CA the certificate is not trusted: the public roots do not
    // know the test's CA.
    let untrusted = mesh.run(&[], &[("TOOLMESH_TOKEN", KEY_B)]).await;
    assert_eq!(untrusted.code, Some(2), "{untrusted:#?}");
    assert!(
        untrusted.stderr.contains("cannot reach the registry"),
        "{untrusted:#?}"
    );

    // A CA file with a plaintext address is a mistake, not a silent downgrade.
    let plaintext = mesh.url.replacen("https://", "http://", 1);
    let run = mesh
        .run(
            &["--registry", &plaintext],
            &[("TOOLMESH_TOKEN", KEY_B), ("TOOLMESH_CA_FILE", ca)],
        )
        .await;
    assert_eq!(run.code, Some(2), "{run:#?}");
    assert!(
        run.stderr.contains("is plaintext: write https:// for TLS"),
        "{run:#?}"
    );
}
