//! TLS for every hop, with rustls (ring provider): the registry's and the
//! sidecars' listeners, and the clients that dial them.
//!
//! Certificates, keys and CAs are PEM files, read again when any of them
//! changes on disk (checked at most once per [`RELOAD_INTERVAL`], when a
//! connection is made). A reload that fails keeps the previous settings
//! and logs a warning; a connection keeps the settings it started with.
//!
//! # Layout
//! - `pem` (private): reading certificates, keys and CAs from PEM files.
//! - `reload` (private): settings rebuilt when their files change.
//! - [`server`]: [`ServerTls`], a listener's certificate and the client
//!   CA it verifies client certificates with.
//! - [`accept`]: [`incoming`], accepted connections after their TLS
//!   handshakes (or as they are, without TLS), and the [`Conn`] type that
//!   tells handlers who the peer is.
//! - [`peer`](mod@peer): [`peer()`], the peer of a call: its address and the
//!   identities of its verified client certificate.
//! - [`client`]: [`ClientTls`] and [`connector`], for `https://` URLs.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub mod accept;
pub mod client;
pub mod peer;
mod pem;
mod reload;
pub mod server;

pub use accept::{Conn, incoming};
pub use client::{ClientFiles, ClientTls, connector};
pub use peer::{Peer, PeerInfo, peer};
pub use server::{ServerFiles, ServerTls};

/// How often, at most, the files behind TLS settings are checked for
/// changes.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(2);

/// Why TLS settings cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A file holds no usable PEM content of the kind expected.
    #[error("{}: {problem}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What is wrong, e.g. "no certificate (-----BEGIN CERTIFICATE-----)".
        problem: String,
    },
    /// rustls refused the material (a key that does not match the
    /// certificate, an unusable CA).
    #[error("{what}: {reason}")]
    Rejected {
        /// Which settings.
        what: String,
        /// rustls's reason.
        reason: String,
    },
    /// Settings that do not go together.
    #[error("{0}")]
    Settings(&'static str),
}

/// The crypto provider every TLS setting uses: ring, as the rest of the
/// dependency tree does.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Makes ring the process's default crypto provider, for the HTTP clients
/// that find theirs process-wide (reqwest 0.13 built without a provider of
/// its own: the OTLP HTTP exporter, the MCP client). Harmless when one is
/// installed already.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The ALPN protocol of gRPC.
const ALPN_H2: &[u8] = b"h2";
