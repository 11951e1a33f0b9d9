//! Certificates, private keys and CA bundles read from PEM files.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn bad(path: &Path, problem: impl Into<String>) -> TlsError {
    TlsError::Pem {
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// Every certificate in `path`, in order (a chain: the end entity first).
pub(super) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, format!("not valid PEM ({e})")))?;
    if certs.is_empty() {
        return Err(bad(
            path,
            "no certificate in it (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok(certs)
}

/// The private key in `path` (PKCS#8, PKCS#1 or SEC1).
pub(super) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls_pki_types::pem::Error::NoItemsFound => {
            bad(path, "no private key in it (-----BEGIN PRIVATE KEY-----)")
        }
        e => bad(path, format!("not a valid PEM private key ({e})")),
    })
}

/// The CA certificates in `path`, as trust anchors.
pub(super) fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(path)? {
        store.add(cert).map_err(|e| {
            bad(
                path,
                format!("a certificate in it is not a usable CA ({e})"),
            )
        })?;
    }
    Ok(store)
}
