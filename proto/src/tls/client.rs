//! Dialling `https://` URLs: TCP, then a rustls handshake that verifies
//! the server's certificate for the URL's host, against a CA file or the
//! public roots of `webpki-roots`; optionally presenting a client
//! certificate. `http://` URLs stay plaintext; `https://` is TLS or an
//! error, never plaintext.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::codegen::http::Uri;

use super::reload::Reloading;
use super::{ALPN_H2, RELOAD_INTERVAL, TlsError, pem, provider};

/// The files a TLS client is built from; all optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientFiles {
    /// PEM CA certificates that servers' certificates are verified with;
    /// `None`: the public roots of `webpki-roots`.
    pub ca: Option<PathBuf>,
    /// PEM certificate chain presented as the client's identity.
    pub cert: Option<PathBuf>,
    /// PEM private key of `cert`.
    pub key: Option<PathBuf>,
}

/// A client's TLS settings, rebuilt when their files change. Cloning
/// shares them.
#[derive(Clone, Debug)]
pub struct ClientTls {
    config: Arc<Reloading<ClientConfig>>,
}

impl ClientTls {
    /// Reads `files`; they are read again when they change (looked at
    /// once per [`RELOAD_INTERVAL`] at most).
    pub fn load(files: ClientFiles) -> Result<Self, TlsError> {
        if files.cert.is_some() != files.key.is_some() {
            return Err(TlsError::Settings(
                "a client certificate needs its key, and a key its certificate: give both files",
            ));
        }
        let watched = [&files.ca, &files.cert, &files.key]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        let config = Reloading::new(
            "client certificate",
            watched,
            move || build(&files),
            RELOAD_INTERVAL,
        )?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// Trusts exactly the certificate in `cert` (whatever name the server
    /// is dialled by): for a process checking on a server next to it that
    /// serves that certificate, over loopback.
    pub fn pinned(cert: PathBuf) -> Result<Self, TlsError> {
        let watched = vec![cert.clone()];
        let config = Reloading::new(
            "pinned certificate",
            watched,
            move || {
                let verifier = Pinned {
                    certs: pem::certificates(&cert)?,
                    algorithms: provider().signature_verification_algorithms,
                };
                let mut config = ClientConfig::builder_with_provider(provider())
                    .with_safe_default_protocol_versions()
                    .map_err(|e| rejected("TLS versions", &e))?
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_no_client_auth();
                config.alpn_protocols = vec![ALPN_H2.to_vec()];
                Ok(config)
            },
            RELOAD_INTERVAL,
        )?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// The settings for the next handshake.
    pub fn config(&self) -> Arc<ClientConfig> {
        self.config.current()
    }

    /// A TLS handshake on `io` with the server `host` (a DNS name or an
    /// IP address, which its certificate must name). The error says what
    /// failed, and hints at a plaintext server when the answer is not TLS.
    pub async fn handshake<IO>(&self, host: &str, io: IO) -> io::Result<TlsStream<IO>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{host:?} is not a TLS server name: {e}"),
            )
        })?;
        TlsConnector::from(self.config())
            .connect(name, io)
            .await
            .map_err(|error| {
                let not_tls = error.kind() == io::ErrorKind::UnexpectedEof
                    || error
                        .get_ref()
                        .and_then(|e| e.downcast_ref::<rustls::Error>())
                        .is_some_and(|e| matches!(e, rustls::Error::InvalidMessage(_)));
                let hint = if not_tls {
                    " (the server's answer is not TLS: does it serve plaintext? Use http:// for a plaintext server)"
                } else {
                    ""
                };
                io::Error::new(
                    error.kind(),
                    format!("TLS handshake with {host} failed: {error}{hint}"),
                )
            })
    }
}

fn rejected(what: &str, error: &dyn fmt::Display) -> TlsError {
    TlsError::Rejected {
        what: what.to_owned(),
        reason: error.to_string(),
    }
}

fn build(files: &ClientFiles) -> Result<ClientConfig, TlsError> {
    let roots = match &files.ca {
        Some(ca) => pem::roots(ca)?,
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| rejected("TLS versions", &e))?
        .with_root_certificates(roots);
    let mut config = match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(pem::certificates(cert)?, pem::private_key(key)?)
            .map_err(|e| rejected(&format!("{} with {}", cert.display(), key.display()), &e))?,
        _ => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// A connection to a server: plaintext or TLS.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// Connects to `uri`: TCP (`TCP_NODELAY`), then TLS with `tls` if the
/// scheme is `https`. Any other scheme than `http` and `https` is an
/// error.
pub async fn dial(uri: Uri, tls: ClientTls) -> io::Result<TokioIo<Box<dyn Stream>>> {
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{other:?} is not a scheme to dial: use http:// or https://"),
            ));
        }
    };
    let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{uri} has no host or port"),
        ));
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let tcp = TcpStream::connect((bare, port)).await?;
    tcp.set_nodelay(true)?;
    if !https {
        return Ok(TokioIo::new(Box::new(tcp)));
    }
    let stream = tls.handshake(host, tcp).await?;
    Ok(TokioIo::new(Box::new(stream)))
}

/// A connector for `Endpoint::connect_with_connector`: [`dial`] with `tls`.
pub fn connector(
    tls: ClientTls,
) -> impl tower::Service<
    Uri,
    Response = TokioIo<Box<dyn Stream>>,
    Error = io::Error,
    Future = impl Future<Output = io::Result<TokioIo<Box<dyn Stream>>>> + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |uri: Uri| dial(uri, tls.clone()))
}

/// Accepts the server certificates it was given, and only those.
#[derive(Debug)]
struct Pinned {
    certs: Vec<CertificateDer<'static>>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
