//! Keys made at test time, and tokens signed with them.

use std::sync::LazyLock;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use rsa::pkcs8::{EncodePrivateKey, EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde_json::{Value, json};

pub(crate) struct TestKey {
    pub(crate) algorithm: Algorithm,
    pub(crate) private_pem: String,
    pub(crate) public_pem: String,
    jwk_params: Value,
}

impl TestKey {
    pub(crate) fn jwk(&self, kid: &str) -> Value {
        let mut jwk = self.jwk_params.clone();
        jwk["kid"] = kid.into();
        jwk
    }

    pub(crate) fn sign(&self, claims: &Value, kid: Option<&str>) -> String {
        let pem = self.private_pem.as_bytes();
        let key = match self.algorithm {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(pem),
            Algorithm::ES256 => EncodingKey::from_ec_pem(pem),
            _ => EncodingKey::from_ed_pem(pem),
        }
        .expect("test private key");
        let mut header = Header::new(self.algorithm);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, claims, &key).expect("signed token")
    }
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn make_rsa() -> TestKey {
    let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).expect("RSA key");
    let public = private.to_public_key();
    TestKey {
        algorithm: Algorithm::RS256,
        private_pem: private
            .to_pkcs8_pem(LineEnding::LF)
            .expect("PEM")
            .to_string(),
        public_pem: public.to_public_key_pem(LineEnding::LF).expect("PEM"),
        jwk_params: json!({
            "kty": "RSA",
            "n": b64(&public.n().to_bytes_be()),
            "e": b64(&public.e().to_bytes_be()),
        }),
    }
}

fn make_ec() -> TestKey {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("P-256 key");
    let point = pair.public_key_raw();
    TestKey {
        algorithm: Algorithm::ES256,
        private_pem: pair.serialize_pem(),
        public_pem: pair.public_key_pem(),
        jwk_params: json!({
            "kty": "EC",
            "crv": "P-256",
            "x": b64(&point[1..33]),
            "y": b64(&point[33..]),
        }),
    }
}

fn make_ed() -> TestKey {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("Ed25519 key");
    TestKey {
        algorithm: Algorithm::EdDSA,
        private_pem: pair.serialize_pem(),
        public_pem: pair.public_key_pem(),
        jwk_params: json!({ "kty": "OKP", "crv": "Ed25519", "x": b64(pair.public_key_raw()) }),
    }
}

static RSA: LazyLock<TestKey> = LazyLock::new(make_rsa);
static OTHER_RSA: LazyLock<TestKey> = LazyLock::new(make_rsa);
static EC: LazyLock<TestKey> = LazyLock::new(make_ec);
static ED: LazyLock<TestKey> = LazyLock::new(make_ed);

pub(crate) fn rsa() -> &'static TestKey {
    &RSA
}

pub(crate) fn other_rsa() -> &'static TestKey {
    &OTHER_RSA
}

pub(crate) fn ec() -> &'static TestKey {
    &EC
}

pub(crate) fn ed() -> &'static TestKey {
    &ED
}

pub(crate) fn jwks(keys: &[(&str, &TestKey)]) -> String {
    let keys: Vec<Value> = keys.iter().map(|(kid, key)| key.jwk(kid)).collect();
    json!({ "keys": keys }).to_string()
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

/// Encodes a token from a raw header and claims, with the given signature.
pub(crate) fn raw_token(header: &Value, claims: &Value, signature: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes()),
        b64(signature)
    )
}
