//! A listener's TLS settings: its certificate chain and key, and the CA
//! that client certificates are verified with.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;

use super::reload::Reloading;
use super::{ALPN_H2, RELOAD_INTERVAL, TlsError, pem, provider};

/// The files a TLS listener is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    /// PEM certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// PEM private key of that certificate.
    pub key: PathBuf,
    /// PEM CA certificates that client certificates are verified with.
    /// `None`: no client certificate is asked for.
    pub client_ca: Option<PathBuf>,
    /// Refuse a handshake without a client certificate (else one is
    /// verified if presented, and the caller may authenticate otherwise).
    pub require_client_cert: bool,
}

/// A listener's TLS settings, rebuilt when their files change. Cloning
/// shares them.
#[derive(Clone, Debug)]
pub struct ServerTls {
    config: Arc<Reloading<ServerConfig>>,
}

impl ServerTls {
    /// Reads `files`; they are read again when they change.
    pub fn load(files: ServerFiles) -> Result<Self, TlsError> {
        Self::load_with_interval(files, RELOAD_INTERVAL)
    }

    /// [`Self::load`], checking the files for changes at most once per
    /// `interval`.
    pub fn load_with_interval(files: ServerFiles, interval: Duration) -> Result<Self, TlsError> {
        if files.require_client_cert && files.client_ca.is_none() {
            return Err(TlsError::Settings(
                "requiring client certificates needs a client CA file to verify them with",
            ));
        }
        let mut watched = vec![files.cert.clone(), files.key.clone()];
        watched.extend(files.client_ca.clone());
        let config = Reloading::new(
            "server certificate",
            watched,
            move || build(&files),
            interval,
        )?;
        Ok(Self {
            config: Arc::new(config),
        })
    }

    /// The settings for the next handshake.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.config.current()
    }
}

fn build(files: &ServerFiles) -> Result<ServerConfig, TlsError> {
    let certs = pem::certificates(&files.cert)?;
    let key = pem::private_key(&files.key)?;
    let rejected = |what: &str, e: &dyn fmt::Display| TlsError::Rejected {
        what: what.to_owned(),
        reason: e.to_string(),
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| rejected("TLS versions", &e))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = Arc::new(pem::roots(ca)?);
            let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider());
            let verifier = if files.require_client_cert {
                verifier
            } else {
                verifier.allow_unauthenticated()
            };
            let verifier = verifier
                .build()
                .map_err(|e| rejected(&ca.display().to_string(), &e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        rejected(
            &format!("{} with {}", files.cert.display(), files.key.display()),
            &e,
        )
    })?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}
