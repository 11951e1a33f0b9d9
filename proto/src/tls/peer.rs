//! Who is calling: the connect info [`super::Conn`] gives every request,
//! and [`peer()`], which reads it (or tonic's own, for connections served
//! without [`super::incoming`]).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls_pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer as _, X509Certificate};

/// What a connection knows of its peer, set as each request's extension.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    /// The peer's address.
    pub remote_addr: Option<SocketAddr>,
    /// The identities of the client certificate the handshake verified:
    /// its URI and DNS subject alternative names. Empty without one.
    pub identities: Arc<[String]>,
}

/// The peer of one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peer {
    /// The peer's address, if the server knows it.
    pub remote_addr: Option<SocketAddr>,
    /// URI SANs (`spiffe://...`) and DNS SANs of its verified client
    /// certificate; empty in plaintext or without a client certificate.
    pub identities: Vec<String>,
}

impl Peer {
    /// Whether the verified client certificate carries `identity`.
    pub fn has_identity(&self, identity: &str) -> bool {
        self.identities.iter().any(|i| i == identity)
    }
}

/// The peer of `request`, served in TLS or not.
pub fn peer<T>(request: &tonic::Request<T>) -> Peer {
    match request.extensions().get::<PeerInfo>() {
        Some(info) => Peer {
            remote_addr: info.remote_addr,
            identities: info.identities.to_vec(),
        },
        None => Peer {
            remote_addr: request.remote_addr(),
            identities: Vec::new(),
        },
    }
}

/// The URI and DNS subject alternative names of `cert`; none if it does
/// not parse.
pub(super) fn identities(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, parsed)) = X509Certificate::from_der(cert.as_ref()) else {
        return Vec::new();
    };
    let Ok(Some(names)) = parsed.subject_alternative_name() else {
        return Vec::new();
    };
    names
        .value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::URI(uri) => Some((*uri).to_owned()),
            GeneralName::DNSName(dns) => Some((*dns).to_owned()),
            _ => None,
        })
        .collect()
}
