//! `toolmesh_proto::tls` on loopback: handshakes, the identities a server
//! sees, the errors a client gets, and certificates reloaded from disk.
#![allow(missing_docs)]

use std::path::Path;
use std::time::Duration;

use futures::StreamExt as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tonic::codegen::http::Uri;
use tonic::transport::server::{Connected as _, TcpIncoming};
use toolmesh_proto::tls::{self, ClientFiles, ClientTls, ServerFiles, ServerTls, TlsError};
use toolmesh_test_support::tls::{Ca, Issued};

fn server_files(dir: &Path, server: &Issued, client_ca: Option<&Ca>) -> ServerFiles {
    let (cert, key) = server.write(dir, "server");
    ServerFiles {
        cert,
        key,
        client_ca: client_ca.map(|ca| ca.write(dir, "client-ca.pem")),
        require_client_cert: false,
    }
}

fn client(dir: &Path, ca: &Ca, identity: Option<&Issued>) -> ClientTls {
    let (cert, key) = match identity {
        Some(issued) => {
            let (cert, key) = issued.write(dir, "client");
            (Some(cert), Some(key))
        }
        None => (None, None),
    };
    ClientTls::load(ClientFiles {
        ca: Some(ca.write(dir, "ca.pem")),
        cert,
        key,
    })
    .expect("client settings")
}

/// The certificate the server presents in one handshake over a pipe.
async fn served_certificate(server: &ServerTls, client: &ClientTls, host: &str) -> Vec<u8> {
    let (near, far) = tokio::io::duplex(64 << 10);
    let acceptor = TlsAcceptor::from(server.config());
    let (accepted, connected) = tokio::join!(acceptor.accept(far), client.handshake(host, near));
    accepted.expect("server side");
    let stream = connected.expect("client side");
    let certs = stream
        .get_ref()
        .1
        .peer_certificates()
        .expect("a certificate");
    certs[0].as_ref().to_vec()
}

#[tokio::test]
async fn the_server_sees_the_client_certificates_identities_and_both_speak_h2() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let server = ServerTls::load(server_files(
        dir.path(),
        &ca.issue(&["127.0.0.1"]),
        Some(&ca),
    ))
    .expect("server settings");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let mut incoming = Box::pin(tls::incoming(TcpIncoming::from(listener), Some(server)));

    let named = client(
        dir.path(),
        &ca,
        Some(&ca.issue(&["spiffe://mesh/registry", "registry.svc", "10.0.0.1"])),
    );
    let uri: Uri = format!("https://{addr}").parse().expect("uri");
    let (conn, dialled) = tokio::join!(incoming.next(), tls::client::dial(uri.clone(), named));
    let conn = conn.expect("a connection").expect("accepted");
    let info = conn.connect_info();
    assert_eq!(
        &*info.identities,
        [
            "spiffe://mesh/registry".to_owned(),
            "registry.svc".to_owned()
        ]
    );
    assert!(info.remote_addr.is_some_and(|a| a.ip().is_loopback()));
    drop(dialled.expect("dialled"));

    // Without a client certificate: accepted (the caller may present an
    // API key instead), with no identity.
    let anonymous = client(dir.path(), &ca, None);
    let (conn, dialled) = tokio::join!(incoming.next(), tls::client::dial(uri, anonymous));
    let conn = conn.expect("a connection").expect("accepted");
    assert!(conn.connect_info().identities.is_empty());
    let dialled = dialled.expect("dialled");
    drop(dialled);
}

#[tokio::test]
async fn a_stalled_handshake_does_not_hold_up_the_next_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let server =
        ServerTls::load(server_files(dir.path(), &ca.issue(&["127.0.0.1"]), None)).expect("server");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let mut incoming = Box::pin(tls::incoming(TcpIncoming::from(listener), Some(server)));
    let _silent = TcpStream::connect(addr).await.expect("connect");
    let uri: Uri = format!("https://{addr}").parse().expect("uri");
    let dial = tls::client::dial(uri, client(dir.path(), &ca, None));
    let (conn, dialled) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(incoming.next(), dial)
    })
    .await
    .expect("the second handshake is not held up by the first");
    conn.expect("a connection").expect("accepted");
    dialled.expect("dialled");
}

#[tokio::test]
async fn https_to_a_plaintext_server_fails_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = [0u8; 512];
            let _ = socket.read(&mut buf).await;
            let _ = socket
                .write_all(b"\x00\x00\x08\x07\x00\x00\x00\x00\x00not tls")
                .await;
        }
    });
    let uri: Uri = format!("https://{addr}").parse().expect("uri");
    let error = tls::client::dial(uri, client(dir.path(), &ca, None))
        .await
        .err()
        .expect("no plaintext fallback")
        .to_string();
    assert!(
        error.starts_with("TLS handshake with 127.0.0.1 failed: ")
            && error.contains("does it serve plaintext?"),
        "{error}"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let server = ServerTls::load(server_files(
        dir.path(),
        &ca.issue(&["other.example"]),
        None,
    ))
    .expect("server");
    let client = client(dir.path(), &ca, None);
    let (near, far) = tokio::io::duplex(64 << 10);
    let acceptor = TlsAcceptor::from(server.config());
    let (_, connected) = tokio::join!(acceptor.accept(far), client.handshake("127.0.0.1", near));
    let error = connected.expect_err("refused").to_string();
    assert!(error.contains("certificate"), "{error}");

    let stranger = Ca::new("another CA");
    let other_client = ClientTls::load(ClientFiles {
        ca: Some(stranger.write(dir.path(), "stranger.pem")),
        ..ClientFiles::default()
    })
    .expect("client");
    let (near, far) = tokio::io::duplex(64 << 10);
    let (_, connected) = tokio::join!(
        acceptor.accept(far),
        other_client.handshake("other.example", near)
    );
    assert!(connected.is_err(), "a CA that did not sign it");
}

#[tokio::test]
async fn a_pinned_client_trusts_exactly_its_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let issued = ca.issue(&["tools.svc"]);
    let files = server_files(dir.path(), &issued, None);
    let pinned = ClientTls::pinned(files.cert.clone()).expect("pinned");
    let server = ServerTls::load(files).expect("server");
    assert_eq!(
        served_certificate(&server, &pinned, "127.0.0.1").await,
        issued.der
    );

    let elsewhere = tempfile::tempdir().expect("temp dir");
    let other = ServerTls::load(server_files(
        elsewhere.path(),
        &ca.issue(&["tools.svc"]),
        None,
    ))
    .expect("server");
    let (near, far) = tokio::io::duplex(64 << 10);
    let acceptor = TlsAcceptor::from(other.config());
    let (_, connected) = tokio::join!(acceptor.accept(far), pinned.handshake("127.0.0.1", near));
    assert!(connected.is_err(), "another certificate of the same CA");
}

#[tokio::test]
async fn a_changed_certificate_is_served_and_a_broken_one_keeps_the_last() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let first = ca.issue(&["127.0.0.1", "first.example"]);
    let files = server_files(dir.path(), &first, None);
    let server = ServerTls::load_with_interval(files.clone(), Duration::ZERO).expect("server");
    let client = client(dir.path(), &ca, None);
    assert_eq!(
        served_certificate(&server, &client, "127.0.0.1").await,
        first.der
    );

    let second = ca.issue(&["127.0.0.1", "second.example"]);
    second.write(dir.path(), "server");
    assert_eq!(
        served_certificate(&server, &client, "127.0.0.1").await,
        second.der,
        "the new certificate"
    );

    std::fs::write(&files.cert, "not a certificate").expect("break it");
    assert_eq!(
        served_certificate(&server, &client, "127.0.0.1").await,
        second.der,
        "a broken file keeps the last good certificate"
    );
    // A key that does not match is refused the same way.
    std::fs::write(&files.cert, &first.cert).expect("write");
    assert_eq!(
        served_certificate(&server, &client, "127.0.0.1").await,
        second.der
    );
    std::fs::write(&files.key, &first.key).expect("write");
    assert_eq!(
        served_certificate(&server, &client, "127.0.0.1").await,
        first.der,
        "once both files agree again"
    );
}

#[test]
fn unusable_files_are_named_with_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = Ca::new("test CA");
    let good = ca.issue(&["127.0.0.1"]);
    let files = server_files(dir.path(), &good, None);
    let error = |files: ServerFiles| ServerTls::load(files).expect_err("refused").to_string();

    let missing = dir.path().join("missing.pem");
    let text = error(ServerFiles {
        cert: missing.clone(),
        ..files.clone()
    });
    assert!(
        text.starts_with(&format!("{}: No such file", missing.display())),
        "{text}"
    );

    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "hello").expect("write");
    let text = error(ServerFiles {
        cert: garbage.clone(),
        ..files.clone()
    });
    assert_eq!(
        text,
        format!(
            "{}: no certificate in it (-----BEGIN CERTIFICATE-----)",
            garbage.display()
        )
    );
    let text = error(ServerFiles {
        key: files.cert.clone(),
        ..files.clone()
    });
    assert_eq!(
        text,
        format!(
            "{}: no private key in it (-----BEGIN PRIVATE KEY-----)",
            files.cert.display()
        )
    );

    let (_, other_key) = ca.issue(&["127.0.0.1"]).write(dir.path(), "other");
    let text = error(ServerFiles {
        key: other_key,
        ..files.clone()
    });
    assert!(text.contains("with"), "{text}");
    assert!(matches!(
        ServerTls::load(ServerFiles {
            key: dir.path().join("other.key"),
            ..files.clone()
        }),
        Err(TlsError::Rejected { .. })
    ));

    assert!(matches!(
        ServerTls::load(ServerFiles {
            require_client_cert: true,
            ..files.clone()
        }),
        Err(TlsError::Settings(_))
    ));
    assert!(matches!(
        ClientTls::load(ClientFiles {
            cert: Some(files.cert.clone()),
            ..ClientFiles::default()
        }),
        Err(TlsError::Settings(_))
    ));
    let text = ClientTls::load(ClientFiles {
        ca: Some(garbage.clone()),
        ..ClientFiles::default()
    })
    .expect_err("refused")
    .to_string();
    assert!(text.contains("no certificate"), "{text}");
}
