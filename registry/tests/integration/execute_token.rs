//! `--execute-token-file` on both binaries: a sidecar that has it runs
//! tools for the registry only; a direct `ToolRuntime.Execute` (the bypass
//! of the registry's validation and limits) is `UNAUTHENTICATED`.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use tonic::Code;
use tonic::transport::Channel;
use toolmesh_proto::pb;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_proto::pb::tool_runtime_client::ToolRuntimeClient;
use toolmesh_test_support::process::{self, SidecarProcess};
use toolmesh_test_support::registry_process::{RegistryProcess, run_to_exit};

const TOKEN: &str = "3f9a0c1d5e7b2a4c6d8e0f1a3b5c7d9e";

/// A tool `echo` that appends what it is given to the file `seen`.
const YAML: &str = r#"
tools:
  - name: echo
    description: echoes
    backend:
      command: [sh, -c, 'cat >> seen; echo >> seen; echo "\"ok\""']
"#;

fn token_file(dir: &Path, name: &str, token: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).expect("write the token");
    path.to_str().expect("utf-8 path").to_owned()
}

async fn registry_client(addr: SocketAddr) -> ToolRegistryClient<Channel> {
    ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the registry")
}

/// `Execute` straight on the sidecar, with `token` if given.
async fn direct(
    sidecar: SocketAddr,
    token: Option<&str>,
) -> Result<pb::ExecuteResponse, tonic::Status> {
    let mut client = ToolRuntimeClient::connect(format!("http://{sidecar}"))
        .await
        .expect("connect to the sidecar");
    let mut request = tonic::Request::new(pb::ExecuteRequest {
        tool: "echo".into(),
        arguments_json: r#"{"direct":true}"#.into(),
        invocation_id: "attacker".into(),
        ..Default::default()
    });
    if let Some(token) = token {
        request.metadata_mut().insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii"),
        );
    }
    client
        .execute(request)
        .await
        .map(tonic::Response::into_inner)
}

/// A registry (with the token file if `registry_has_token`) and a sidecar
/// with it, the sidecar's tool `echo` announced.
struct Mesh {
    registry: RegistryProcess,
    sidecar: SidecarProcess,
    /// Where the sidecar listens.
    bound: SocketAddr,
    agent: ToolRegistryClient<Channel>,
    _dir: tempfile::TempDir,
}

async fn mesh(registry_has_token: bool) -> Option<Mesh> {
    let registry_bin = process::binary("toolmesh-registry")?;
    let sidecar_bin = process::binary("toolmesh-sidecar")?;
    let dir = tempfile::tempdir().expect("temp dir");
    let file = token_file(dir.path(), "token", TOKEN);
    let mut args = vec!["--listen", "127.0.0.1:0"];
    if registry_has_token {
        args.extend(["--execute-token-file", &file]);
    }
    let (registry, addr) = RegistryProcess::start(&registry_bin, &args, &[]).await;
    let mut sidecar = SidecarProcess::spawn(
        &sidecar_bin,
        YAML,
        &[
            "--registry",
            &format!("http://{addr}"),
            "--listen",
            "127.0.0.1:0",
            "--execute-token-file",
            &file,
        ],
        &[],
    );
    let bound = sidecar.bound(Duration::from_secs(20)).await;
    let agent = registry_client(addr).await;
    toolmesh_test_support::catalog::wait_for_instances(&agent, "echo", 1, Duration::from_secs(20))
        .await;
    Some(Mesh {
        registry,
        sidecar,
        bound,
        agent,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_registry_runs_tools_on_a_sidecar_with_a_token() {
    let Some(mesh) = mesh(true).await else {
        return;
    };
    let (sidecar, bound, mut agent) = (&mesh.sidecar, mesh.bound, mesh.agent.clone());

    let answer = agent
        .invoke(toolmesh_test_support::catalog::invoke(
            "echo",
            r#"{"via":"registry"}"#,
        ))
        .await
        .expect("through the registry")
        .into_inner();
    assert_eq!(answer.result_json, r#""ok""#);

    for token in [
        None,
        Some("0000000000000000000000000000000000"),
        Some(&TOKEN[..20]),
    ] {
        let refused = direct(bound, token).await.expect_err("a direct call");
        assert_eq!(
            refused.code(),
            Code::Unauthenticated,
            "{token:?}: {refused:?}"
        );
        assert!(
            refused.message().contains("through the registry"),
            "{refused:?}"
        );
    }
    let seen = std::fs::read_to_string(sidecar.dir().join("seen")).unwrap_or_default();
    assert_eq!(
        seen, "{\"via\":\"registry\"}\n",
        "only the registry's call ran"
    );
    assert!(!sidecar.log().contains(TOKEN), "the token is never logged");
    // With the token, as the registry calls it.
    direct(bound, Some(TOKEN))
        .await
        .expect("the registry's token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_without_the_token_is_refused_and_the_agent_is_not_blamed() {
    let Some(mesh) = mesh(false).await else {
        return;
    };
    let (registry, mut agent) = (&mesh.registry, mesh.agent.clone());
    let failed = agent
        .invoke(toolmesh_test_support::catalog::invoke("echo", "{}"))
        .await
        .expect_err("the sidecar refuses the registry");
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert_eq!(
        failed.message(),
        r#"no healthy instance of "echo" (instance refused the registry's credentials)"#
    );
    toolmesh_test_support::wait::wait_until(
        Duration::from_secs(10),
        "the registry to log why",
        || {
            registry
                .log()
                .contains("check --execute-token-file on both")
        },
    )
    .await;
}

#[tokio::test]
async fn unusable_token_files_stop_both_binaries_at_start() {
    let (Some(registry_bin), Some(sidecar_bin)) = (
        process::binary("toolmesh-registry"),
        process::binary("toolmesh-sidecar"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let short = token_file(dir.path(), "short", "tooshort");
    let finished = run_to_exit(
        &registry_bin,
        &["--listen", "127.0.0.1:0", "--execute-token-file", &short],
        &[],
    )
    .await;
    assert_eq!(finished.status.code(), Some(1), "{}", finished.stderr);
    assert_eq!(
        finished.stderr,
        format!(
            "error: config: --execute-token-file {short}: the token is too short; write one line of 16 to 4096 visible ASCII characters, e.g. the output of `openssl rand -hex 32`\n"
        )
    );

    let config = dir.path().join("sidecar.yaml");
    std::fs::write(&config, YAML).expect("write the config");
    let missing = dir
        .path()
        .join("missing")
        .to_str()
        .expect("utf-8")
        .to_owned();
    let output = tokio::process::Command::new(&sidecar_bin)
        .args([
            "--config",
            config.to_str().expect("utf-8"),
            "--execute-token-file",
            &missing,
        ])
        .output()
        .await
        .expect("run the sidecar");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!(
            "error: --execute-token-file {missing}: No such file or directory"
        )),
        "{stderr}"
    );
}
