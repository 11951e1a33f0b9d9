//! Certificates for TLS tests: a CA made on the spot, and certificates it
//! signs for the names a test needs (DNS names, IP addresses, URIs such as
//! `spiffe://...`), good for both server and client authentication;
//! [`Pki`] writes them where the binaries under test read them.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use toolmesh_proto::tls::{ClientFiles, ClientTls};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};

/// A certificate authority that exists for one test.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pem: String,
}

/// A certificate and its key, in PEM.
#[derive(Debug, Clone)]
pub struct Issued {
    /// The certificate.
    pub cert: String,
    /// Its private key.
    pub key: String,
    /// The certificate, DER-encoded.
    pub der: Vec<u8>,
}

impl Ca {
    /// A new CA named `name`.
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("CA certificate");
        Self {
            issuer: Issuer::new(params, key),
            pem: cert.pem(),
        }
    }

    /// The CA's certificate, in PEM.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Writes the CA's certificate to `dir/name`.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, &self.pem).expect("write the CA");
        path
    }

    /// A certificate for `names`: IP addresses, URIs (with `://`) and
    /// DNS names.
    pub fn issue(&self, names: &[&str]) -> Issued {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.distinguished_name.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("anonymous"),
        );
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.subject_alt_names = names
            .iter()
            .map(|name| {
                if let Ok(ip) = name.parse::<IpAddr>() {
                    SanType::IpAddress(ip)
                } else if name.contains("://") {
                    SanType::URI((*name).try_into().expect("an ASCII URI"))
                } else {
                    SanType::DnsName((*name).try_into().expect("an ASCII name"))
                }
            })
            .collect();
        let cert = params.signed_by(&key, &self.issuer).expect("certificate");
        Issued {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}

impl Issued {
    /// Writes the certificate and the key to `dir/<name>.pem` and
    /// `dir/<name>.key`, replacing what is there; returns both paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert).expect("write the certificate");
        std::fs::write(&key, &self.key).expect("write the key");
        (cert, key)
    }
}

/// A CA of one test and the files it hands to the binaries, in a temporary
/// folder that goes with it.
pub struct Pki {
    ca: Ca,
    dir: tempfile::TempDir,
    /// The CA's certificate file (`ca.pem`), for `--*-ca-file` flags.
    pub ca_file: String,
}

impl Pki {
    /// A new CA, its certificate written.
    pub fn new() -> Self {
        let ca = Ca::new("toolmesh test CA");
        let dir = tempfile::tempdir().expect("temp dir");
        let ca_file = utf8(&ca.write(dir.path(), "ca.pem"));
        Self { ca, dir, ca_file }
    }

    /// A certificate for `names`, written as `<name>.pem` and `<name>.key`;
    /// returns both paths.
    pub fn issue(&self, name: &str, names: &[&str]) -> (String, String) {
        let (cert, key) = self.ca.issue(names).write(self.dir.path(), name);
        (utf8(&cert), utf8(&key))
    }

    /// A client trusting the CA, presenting `identity` (certificate and key
    /// files) when given.
    pub fn client(&self, identity: Option<(&str, &str)>) -> ClientTls {
        ClientTls::load(ClientFiles {
            ca: Some(PathBuf::from(&self.ca_file)),
            cert: identity.map(|(cert, _)| PathBuf::from(cert)),
            key: identity.map(|(_, key)| PathBuf::from(key)),
        })
        .expect("client settings")
    }

    /// The CA, to issue what [`Self::issue`] does not write.
    pub fn ca(&self) -> &Ca {
        &self.ca
    }

    /// The folder the files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

/// `path` as the `&str` a flag takes.
pub fn utf8(path: &Path) -> String {
    path.to_str().expect("utf-8 path").to_owned()
}
