//! TLS on every hop, with the real binaries: agents → registry over TLS,
//! sidecar ⇄ registry over mTLS, `--registry-identity`, a sidecar whose
//! certificate does not name its endpoint, an `https://` registry that
//! speaks plaintext, and a registry certificate rotated on disk.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb;
use toolmesh_proto::pb::registration_client::RegistrationClient;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_proto::pb::tool_runtime_client::ToolRuntimeClient;
use toolmesh_proto::tls::{self, ClientTls};
use toolmesh_test_support::catalog::{invoke, wait_for_instances};
use toolmesh_test_support::process::{self, SidecarProcess};
use toolmesh_test_support::registry_process::{RegistryProcess, run_to_exit};
use toolmesh_test_support::tls::{Pki, utf8};
use toolmesh_test_support::wait::{eventually, wait_until};

const REGISTRY_ID: &str = "spiffe://mesh.test/registry";

/// A tool `echo` that appends what it is given to the file `seen`.
const YAML: &str = r#"
tools:
  - name: echo
    description: echoes
    backend:
      command: [sh, -c, 'cat >> seen; echo >> seen; echo "\"ok\""']
"#;

async fn channel(addr: SocketAddr, tls: ClientTls) -> Result<Channel, tonic::transport::Error> {
    Endpoint::from_shared(format!("https://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tls::connector(tls))
        .await
}

/// `Execute` straight on a TLS sidecar, as `tls` presents itself.
async fn direct(sidecar: SocketAddr, tls: ClientTls) -> Result<pb::ExecuteResponse, tonic::Status> {
    let channel = channel(sidecar, tls).await.expect("connect to the sidecar");
    ToolRuntimeClient::new(channel)
        .execute(pb::ExecuteRequest {
            tool: "echo".into(),
            arguments_json: r#"{"direct":true}"#.into(),
            invocation_id: "attacker".into(),
            ..Default::default()
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hop_in_mtls_and_only_the_registry_runs_tools() {
    let Some((registry_bin, sidecar_bin)) = process::binaries() else {
        return;
    };
    let pki = Pki::new();
    let (registry_cert, registry_key) = pki.issue("registry", &["127.0.0.1", REGISTRY_ID]);
    let (sidecar_cert, sidecar_key) =
        pki.issue("sidecar", &["127.0.0.1", "spiffe://mesh.test/sidecar/echo"]);
    let ca = pki.ca_file.as_str();
    let (registry, addr) = RegistryProcess::start(
        &registry_bin,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert-file",
            &registry_cert,
            "--tls-key-file",
            &registry_key,
            "--tls-client-ca-file",
            ca,
            "--sidecar-ca-file",
            ca,
            "--sidecar-cert-file",
            &registry_cert,
            "--sidecar-key-file",
            &registry_key,
        ],
        &[],
    )
    .await;
    let mut sidecar = SidecarProcess::spawn(
        &sidecar_bin,
        YAML,
        &[
            "--registry",
            &format!("https://{addr}"),
            "--registry-ca-file",
            ca,
            "--registry-cert-file",
            &sidecar_cert,
            "--registry-key-file",
            &sidecar_key,
            "--listen",
            "127.0.0.1:0",
            "--tls-cert-file",
            &sidecar_cert,
            "--tls-key-file",
            &sidecar_key,
            "--tls-client-ca-file",
            ca,
            "--registry-identity",
            REGISTRY_ID,
        ],
        &[],
    );
    let bound = sidecar.bound(Duration::from_secs(20)).await;

    let agent = ToolRegistryClient::new(
        channel(addr, pki.client(None))
            .await
            .expect("an agent without a client certificate connects"),
    );
    wait_for_instances(&agent, "echo", 1, Duration::from_secs(20)).await;
    assert!(
        sidecar.log().contains(&format!("endpoint=https://{bound}")),
        "{}",
        sidecar.log()
    );
    let answer = agent
        .clone()
        .invoke(invoke("echo", r#"{"via":"registry"}"#))
        .await
        .expect("through the registry, over mTLS")
        .into_inner();
    assert_eq!(answer.result_json, r#""ok""#);

    let intruder = pki.issue("intruder", &["127.0.0.1", "spiffe://mesh.test/intruder"]);
    for tls in [
        pki.client(None),
        pki.client(Some((&intruder.0, &intruder.1))),
    ] {
        let refused = direct(bound, tls).await.expect_err("a direct call");
        assert_eq!(refused.code(), Code::Unauthenticated, "{refused:?}");
    }
    let seen = std::fs::read_to_string(sidecar.dir().join("seen")).unwrap_or_default();
    assert_eq!(
        seen, "{\"via\":\"registry\"}\n",
        "only the registry's call ran"
    );

    let plaintext = ToolRegistryClient::connect(format!("http://{addr}")).await;
    let refused = match plaintext {
        Err(_) => true,
        Ok(mut client) => client
            .list_tools(pb::ListToolsRequest::default())
            .await
            .is_err(),
    };
    assert!(refused, "no plaintext on a TLS listener");

    let health = run_to_exit(
        &registry_bin,
        &[
            "health",
            "--address",
            &format!("https://{addr}"),
            "--ca-file",
            ca,
        ],
        &[],
    )
    .await;
    assert_eq!(health.status.code(), Some(0), "{}", health.stderr);
    let untrusted = run_to_exit(
        &registry_bin,
        &[
            "health",
            "--address",
            &format!("https://{addr}"),
            "--timeout",
            "2s",
        ],
        &[],
    )
    .await;
    assert_eq!(untrusted.status.code(), Some(1), "{}", untrusted.stdout);
    assert!(
        untrusted.stderr.contains("certificate"),
        "{}",
        untrusted.stderr
    );
    drop(registry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_certificate_for_another_host_is_never_sent_a_call() {
    let Some((registry_bin, sidecar_bin)) = process::binaries() else {
        return;
    };
    let pki = Pki::new();
    let (cert, key) = pki.issue("sidecar", &["elsewhere.example"]);
    let (registry, addr) = RegistryProcess::start(
        &registry_bin,
        &["--listen", "127.0.0.1:0", "--sidecar-ca-file", &pki.ca_file],
        &[],
    )
    .await;
    let mut sidecar = SidecarProcess::spawn(
        &sidecar_bin,
        YAML,
        &[
            "--registry",
            &format!("http://{addr}"),
            "--listen",
            "127.0.0.1:0",
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
        ],
        &[],
    );
    sidecar.bound(Duration::from_secs(20)).await;
    let mut agent = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    wait_for_instances(&agent, "echo", 1, Duration::from_secs(20)).await;
    let failed = agent
        .invoke(invoke("echo", "{}"))
        .await
        .expect_err("the certificate does not name 127.0.0.1");
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert!(!sidecar.dir().join("seen").exists(), "the tool never ran");
    wait_until(Duration::from_secs(10), "the registry to log why", || {
        registry.log().contains("certificate")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_registry_that_speaks_plaintext_is_never_announced_to() {
    let Some((registry_bin, sidecar_bin)) = process::binaries() else {
        return;
    };
    let pki = Pki::new();
    let (_registry, addr) =
        RegistryProcess::start(&registry_bin, &["--listen", "127.0.0.1:0"], &[]).await;
    let mut sidecar = SidecarProcess::spawn(
        &sidecar_bin,
        YAML,
        &[
            "--registry",
            &format!("https://{addr}"),
            "--registry-ca-file",
            &pki.ca_file,
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    sidecar.bound(Duration::from_secs(20)).await;
    wait_until(
        Duration::from_secs(10),
        "announces to fail, saying why",
        || {
            let log = sidecar.log();
            log.matches("announce failed").count() >= 2 && log.contains("does it serve plaintext?")
        },
    )
    .await;
    assert!(
        !sidecar.log().contains("announced to the registry"),
        "{}",
        sidecar.log()
    );
    let mut agent = ToolRegistryClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    assert_eq!(
        toolmesh_test_support::catalog::instances(&mut agent, "echo").await,
        0
    );
}

/// The certificate the server at `addr` presents to a new connection.
async fn served(addr: SocketAddr, tls: &ClientTls) -> Vec<u8> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let stream = tls.handshake("127.0.0.1", tcp).await.expect("handshake");
    stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate")[0]
        .as_ref()
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_certificate_serves_new_connections_and_keeps_open_ones() {
    let Some(registry_bin) = process::binary("toolmesh-registry") else {
        return;
    };
    let pki = Pki::new();
    let first = pki.ca().issue(&["127.0.0.1", "first.example"]);
    let (cert, key) = first.write(pki.dir(), "registry");
    let (_registry, addr) = RegistryProcess::start(
        &registry_bin,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert-file",
            &utf8(&cert),
            "--tls-key-file",
            &utf8(&key),
        ],
        &[],
    )
    .await;
    let tls = pki.client(None);
    assert_eq!(served(addr, &tls).await, first.der);

    // A stream that lives across the rotation: it ends if its connection does.
    let watching = channel(addr, tls.clone()).await.expect("connect");
    let mut events = ToolRegistryClient::new(watching)
        .watch_tools(pb::WatchToolsRequest {
            ..Default::default()
        })
        .await
        .expect("watch")
        .into_inner();
    let synced = events.message().await.expect("an event").expect("open");
    assert_eq!(synced.kind(), pb::tool_event::Kind::Synced);

    let second = pki.ca().issue(&["127.0.0.1", "second.example"]);
    second.write(pki.dir(), "registry");
    eventually(
        Duration::from_secs(10),
        "new connections to see the new certificate",
        || {
            let tls = tls.clone();
            let expected = second.der.clone();
            async move { served(addr, &tls).await == expected }
        },
    )
    .await;

    let mut registration =
        RegistrationClient::new(channel(addr, tls.clone()).await.expect("connect"));
    registration
        .announce(pb::AnnounceRequest {
            instance_id: "late".into(),
            endpoint: "http://127.0.0.1:9".into(),
            tools: vec![pb::ToolDescriptor {
                name: "late".into(),
                ..Default::default()
            }],
            execute_key: Vec::new(),
        })
        .await
        .expect("announce over a new connection");
    let added = tokio::time::timeout(Duration::from_secs(10), events.message())
        .await
        .expect("the old connection still delivers")
        .expect("still open")
        .expect("an event");
    assert_eq!(added.kind(), pb::tool_event::Kind::Added);
    assert_eq!(
        added
            .tool
            .expect("the tool")
            .descriptor
            .expect("descriptor")
            .name,
        "late"
    );
}

/// Registrants by certificate: a `--registrants-file` entry with
/// `identities` takes announces from a client certificate carrying one of
/// them, and only for its own tools; any other certificate, or none, is
/// `UNAUTHENTICATED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registrant_may_be_its_client_certificate() {
    let Some(registry_bin) = process::binary("toolmesh-registry") else {
        return;
    };
    let pki = Pki::new();
    let (registry_cert, registry_key) = pki.issue("registry", &["127.0.0.1"]);
    let echo_id = "spiffe://mesh.test/sidecar/echo";
    let sidecar = pki.issue("sidecar", &["127.0.0.1", echo_id]);
    let intruder = pki.issue("intruder", &["127.0.0.1", "spiffe://mesh.test/intruder"]);
    let registrants = pki.dir().join("registrants.yaml");
    std::fs::write(
        &registrants,
        format!("registrants:\n  - {{name: echo, identities: [\"{echo_id}\"], tools: [echo]}}\n"),
    )
    .expect("write registrants");
    let (_registry, addr) = RegistryProcess::start(
        &registry_bin,
        &[
            "--listen",
            "127.0.0.1:0",
            "--tls-cert-file",
            &registry_cert,
            "--tls-key-file",
            &registry_key,
            "--tls-client-ca-file",
            &pki.ca_file,
            "--registrants-file",
            &utf8(&registrants),
        ],
        &[],
    )
    .await;
    let announce = |tool: &str| pb::AnnounceRequest {
        instance_id: "echo-1".into(),
        endpoint: "http://127.0.0.1:9".into(),
        tools: vec![pb::ToolDescriptor {
            name: tool.into(),
            ..Default::default()
        }],
        execute_key: Vec::new(),
    };
    let as_ = |identity: Option<(&str, &str)>| {
        let tls = pki.client(identity);
        async move { RegistrationClient::new(channel(addr, tls).await.expect("connect over TLS")) }
    };
    let mut echo = as_(Some((&sidecar.0, &sidecar.1))).await;
    echo.announce(announce("echo"))
        .await
        .expect("the registrant's certificate announces its tool");
    let status = echo
        .announce(announce("other"))
        .await
        .expect_err("outside its patterns");
    assert_eq!(status.code(), Code::PermissionDenied);
    for identity in [None, Some((intruder.0.as_str(), intruder.1.as_str()))] {
        let status = as_(identity)
            .await
            .announce(announce("echo"))
            .await
            .expect_err("not a registrant");
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    }
}
