//! The public keys JWTs are verified with, from one file: either PEM public
//! keys (`-----BEGIN PUBLIC KEY-----` or `RSA PUBLIC KEY`, one or more
//! blocks) or a JWKS document (`{"keys": [...]}`).
//!
//! Each key verifies one algorithm, fixed by its type: RSA keys RS256,
//! P-256 keys ES256, Ed25519 keys EdDSA. A JWK's `alg`, when present, must
//! be that algorithm; its `kid` selects it for tokens that name one. JWKs
//! with `"use": "enc"` are skipped; symmetric (`oct`) keys and other curves
//! are refused.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde::Deserialize;

use super::error::FormatError;
use super::reload::AuthFile;

/// The DER of the P-256 curve's object identifier (1.2.840.10045.3.1.7).
const P256_OID: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];

/// A parsed JWT key file.
pub struct JwtKeys {
    keys: Vec<JwtKey>,
}

pub(crate) struct JwtKey {
    pub(crate) kid: Option<String>,
    pub(crate) algorithm: Algorithm,
    pub(crate) key: DecodingKey,
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.keys.iter().map(|key| (&key.kid, key.algorithm)))
            .finish()
    }
}

#[derive(Deserialize)]
struct JwkSetFile {
    keys: Vec<serde_json::Value>,
}

impl JwtKeys {
    /// Parses PEM public keys or a JWKS document; refuses a file with no
    /// usable key, and names the block or entry that is wrong.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let keys = if text.trim_start().starts_with('{') {
            parse_jwks(text)?
        } else if text.contains("-----BEGIN ") {
            parse_pem(text)?
        } else {
            return Err(FormatError::File(
                "neither PEM public keys nor a JWKS document".into(),
            ));
        };
        if keys.is_empty() {
            return Err(FormatError::File("holds no signing key".into()));
        }
        Ok(Self { keys })
    }

    /// How many keys the file holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the file holds no key (never true of a parsed file).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys that may have signed a token with this `alg` and `kid`:
    /// those of the algorithm whose `kid` is the token's, and those with no
    /// `kid` (PEM keys); all keys of the algorithm when the token has none.
    pub(crate) fn candidates<'a>(
        &'a self,
        algorithm: Algorithm,
        kid: Option<&'a str>,
    ) -> impl Iterator<Item = &'a JwtKey> {
        self.keys.iter().filter(move |key| {
            key.algorithm == algorithm
                && match (kid, key.kid.as_deref()) {
                    (Some(wanted), Some(have)) => wanted == have,
                    _ => true,
                }
        })
    }
}

impl AuthFile for JwtKeys {
    const KIND: &'static str = "JWT key file";

    fn parse(text: &str) -> Result<Self, FormatError> {
        Self::parse(text)
    }
}

fn parse_pem(text: &str) -> Result<Vec<JwtKey>, FormatError> {
    let mut keys = Vec::new();
    for (index, block) in pem_blocks(text)?.into_iter().enumerate() {
        let name = format!("PEM block {} ({})", index + 1, block.label);
        let key = pem_key(&block).map_err(|problem| FormatError::entry(name, problem))?;
        keys.push(key);
    }
    Ok(keys)
}

struct PemBlock<'a> {
    label: &'a str,
    /// The whole block, BEGIN and END lines included.
    text: String,
    der: Vec<u8>,
}

fn pem_blocks(text: &str) -> Result<Vec<PemBlock<'_>>, FormatError> {
    let mut blocks = Vec::new();
    let mut open: Option<(&str, String, String)> = None;
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        let at = || format!("line {}", number + 1);
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|rest| rest.strip_suffix("-----"))
        {
            if open.is_some() {
                return Err(FormatError::entry(at(), "BEGIN inside a PEM block"));
            }
            open = Some((label, format!("{line}\n"), String::new()));
        } else if let Some(label) = line
            .strip_prefix("-----END ")
            .and_then(|rest| rest.strip_suffix("-----"))
        {
            let Some((begin, mut whole, body)) = open.take() else {
                return Err(FormatError::entry(at(), "END outside a PEM block"));
            };
            if label != begin {
                return Err(FormatError::entry(
                    at(),
                    format!("END {label} closes BEGIN {begin}"),
                ));
            }
            let der = STANDARD
                .decode(body.as_bytes())
                .map_err(|_| FormatError::entry(at(), "the PEM block is not base64"))?;
            whole.push_str(line);
            whole.push('\n');
            blocks.push(PemBlock {
                label: begin,
                text: whole,
                der,
            });
        } else if let Some((_, whole, body)) = open.as_mut() {
            whole.push_str(line);
            whole.push('\n');
            body.push_str(line);
        }
    }
    if open.is_some() {
        return Err(FormatError::File("a PEM block has no END line".into()));
    }
    Ok(blocks)
}

fn pem_key(block: &PemBlock<'_>) -> Result<JwtKey, String> {
    match block.label {
        "PUBLIC KEY" | "RSA PUBLIC KEY" => {}
        "PRIVATE KEY" | "RSA PRIVATE KEY" | "EC PRIVATE KEY" | "ENCRYPTED PRIVATE KEY" => {
            return Err("a private key: give the registry the public key only".into());
        }
        _ => return Err("not a public key".into()),
    }
    let pem = block.text.as_bytes();
    let (algorithm, key) = if let Ok(key) = DecodingKey::from_rsa_pem(pem) {
        (Algorithm::RS256, key)
    } else if let Ok(key) = DecodingKey::from_ec_pem(pem) {
        if !contains(&block.der, P256_OID) {
            return Err("an EC key not on P-256 (only ES256 is accepted)".into());
        }
        (Algorithm::ES256, key)
    } else if let Ok(key) = DecodingKey::from_ed_pem(pem) {
        (Algorithm::EdDSA, key)
    } else {
        return Err("not an RSA, P-256 or Ed25519 public key".into());
    };
    Ok(JwtKey {
        kid: None,
        algorithm,
        key,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn parse_jwks(text: &str) -> Result<Vec<JwtKey>, FormatError> {
    let set: JwkSetFile = serde_json::from_str(text)?;
    let mut keys = Vec::with_capacity(set.keys.len());
    for (index, value) in set.keys.into_iter().enumerate() {
        let kid = value
            .get("kid")
            .and_then(|kid| kid.as_str())
            .map(str::to_owned);
        let name = match &kid {
            Some(kid) => format!("keys[{index}] (kid {kid:?})"),
            None => format!("keys[{index}]"),
        };
        if value.get("use").and_then(|u| u.as_str()) == Some("enc") {
            continue;
        }
        let jwk: Jwk = serde_json::from_value(value)
            .map_err(|error| FormatError::entry(&name, format!("not a JWK: {error}")))?;
        let (algorithm, key) =
            jwk_key(&jwk).map_err(|problem| FormatError::entry(&name, problem))?;
        keys.push(JwtKey {
            kid,
            algorithm,
            key,
        });
    }
    Ok(keys)
}

fn jwk_key(jwk: &Jwk) -> Result<(Algorithm, DecodingKey), String> {
    let (algorithm, expected) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (Algorithm::RS256, KeyAlgorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            (Algorithm::ES256, KeyAlgorithm::ES256)
        }
        AlgorithmParameters::OctetKeyPair(okp) if okp.curve == EllipticCurve::Ed25519 => {
            (Algorithm::EdDSA, KeyAlgorithm::EdDSA)
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err("a symmetric (`oct`) key: HMAC tokens are not accepted".into());
        }
        AlgorithmParameters::EllipticCurve(_) | AlgorithmParameters::OctetKeyPair(_) => {
            return Err("a curve other than P-256 and Ed25519".into());
        }
    };
    if let Some(declared) = jwk.common.key_algorithm
        && declared != expected
    {
        return Err(format!(
            "`alg` {declared:?} does not fit the key type (expected {expected:?})"
        ));
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|error| format!("unusable key: {error}"))?;
    Ok((algorithm, key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::auth::test_keys;

    #[test]
    fn reads_several_pem_keys_of_each_type() {
        let text = format!(
            "{}\n{}{}",
            test_keys::rsa().public_pem,
            test_keys::ec().public_pem,
            test_keys::ed().public_pem
        );
        let keys = JwtKeys::parse(&text).expect("three keys");
        let algorithms: Vec<_> = keys.keys.iter().map(|k| k.algorithm).collect();
        assert_eq!(
            algorithms,
            [Algorithm::RS256, Algorithm::ES256, Algorithm::EdDSA]
        );
    }

    #[test]
    fn refuses_private_keys_and_garbage() {
        let error = JwtKeys::parse(&test_keys::ec().private_pem)
            .expect_err("private key")
            .to_string();
        assert!(
            error.starts_with("PEM block 1 (PRIVATE KEY): a private key"),
            "{error}"
        );
        assert!(JwtKeys::parse("hello").is_err());
        assert!(JwtKeys::parse("-----BEGIN PUBLIC KEY-----\nAAAA\n").is_err());
        assert!(
            JwtKeys::parse("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n").is_err()
        );
    }

    #[test]
    fn reads_jwks_with_kids_and_names_a_bad_entry() {
        let jwks = test_keys::jwks(&[("rsa-1", test_keys::rsa()), ("ec-1", test_keys::ec())]);
        let keys = JwtKeys::parse(&jwks).expect("jwks");
        let kids: Vec<_> = keys.keys.iter().map(|k| k.kid.as_deref()).collect();
        assert_eq!(kids, [Some("rsa-1"), Some("ec-1")]);

        let oct = r#"{"keys": [{"kty": "oct", "kid": "shared", "k": "c2VjcmV0"}]}"#;
        let error = JwtKeys::parse(oct).expect_err("oct").to_string();
        assert!(
            error.starts_with("keys[0] (kid \"shared\"): a symmetric"),
            "{error}"
        );

        let enc_only = r#"{"keys": [{"kty": "oct", "use": "enc", "k": "c2VjcmV0"}]}"#;
        assert!(JwtKeys::parse(enc_only).is_err(), "no signing key left");
    }

    #[test]
    fn refuses_ec_keys_off_p256() {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).expect("P-384 key");
        let error = JwtKeys::parse(&pair.public_key_pem())
            .expect_err("P-384")
            .to_string();
        assert!(error.contains("not on P-256"), "{error}");
    }

    #[test]
    fn skips_encryption_keys() {
        let mut enc = test_keys::rsa().jwk("enc");
        enc["use"] = "enc".into();
        let text = serde_json::json!({ "keys": [enc, test_keys::ed().jwk("sig")] }).to_string();
        let keys = JwtKeys::parse(&text).expect("one signing key");
        assert_eq!(keys.len(), 1);
        assert_eq!(keys.keys[0].kid.as_deref(), Some("sig"));
    }

    #[test]
    fn refuses_a_jwk_alg_that_does_not_fit_its_key() {
        let mut jwk = test_keys::rsa().jwk("k");
        jwk["alg"] = "ES256".into();
        let text = serde_json::json!({ "keys": [jwk] }).to_string();
        let error = JwtKeys::parse(&text).expect_err("mismatch").to_string();
        assert!(error.contains("does not fit the key type"), "{error}");
    }
}
