//! JWT verification: the header is checked before any key is tried, the
//! signature against the keys that fit the token's `alg` and `kid`, then
//! the claims: `exp` always, `nbf` when present (both with the same
//! leeway), `aud` when configured, and in `claims` the registered
//! claims' types (a list `iss` is malformed), `iss` when configured, and
//! the caller.
//!
//! Only RS256, ES256 and EdDSA are accepted. `none` and the HMAC algorithms
//! never are (an HMAC over a public key's bytes is the classic forgery),
//! nor is an algorithm that does not fit the key's type.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::Caller;
use super::error::AuthError;
use super::jwt_keys::JwtKeys;

/// How tokens are checked and read, beyond their keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JwtSettings {
    /// The `iss` a token must have; any (or none) when `None`.
    pub issuer: Option<String>,
    /// The value a token's `aud` must hold; when `None`, a token that has an
    /// `aud` is refused.
    pub audience: Option<String>,
    /// How far past `exp` or before `nbf` a token is still accepted, to
    /// absorb clock skew. Whole seconds count.
    pub leeway: Duration,
    /// The claim that holds the caller's id.
    pub caller_claim: String,
    /// The claim that holds the caller's groups, an array of strings.
    pub groups_claim: String,
}

impl Default for JwtSettings {
    fn default() -> Self {
        Self {
            issuer: None,
            audience: None,
            leeway: Duration::from_secs(60),
            caller_claim: "sub".into(),
            groups_claim: "groups".into(),
        }
    }
}

/// Checks tokens against a [`JwtKeys`] and reads the caller from them.
#[derive(Debug)]
pub struct JwtVerifier {
    settings: JwtSettings,
    validations: [(&'static str, Algorithm, Validation); 3],
}

/// The accepted algorithms, by the name a token's header gives.
const ACCEPTED: [(&str, Algorithm); 3] = [
    ("RS256", Algorithm::RS256),
    ("ES256", Algorithm::ES256),
    ("EdDSA", Algorithm::EdDSA),
];

#[derive(Deserialize)]
struct RawHeader {
    alg: String,
    kid: Option<String>,
    crit: Option<Value>,
}

impl JwtVerifier {
    /// A verifier applying `settings`.
    pub fn new(settings: JwtSettings) -> Self {
        let validations =
            ACCEPTED.map(|(name, algorithm)| (name, algorithm, validation(algorithm, &settings)));
        Self {
            settings,
            validations,
        }
    }

    /// The caller a valid `token` names.
    pub fn verify(&self, keys: &JwtKeys, token: &str) -> Result<Caller, AuthError> {
        let header = header(token)?;
        let (_, algorithm, validation) = self
            .validations
            .iter()
            .find(|(name, _, _)| *name == header.alg)
            .ok_or(AuthError::AlgorithmNotAccepted)?;
        let mut outcome = Err(AuthError::NoMatchingKey);
        for key in keys.candidates(*algorithm, header.kid.as_deref()) {
            match jsonwebtoken::decode::<Map<String, Value>>(token, &key.key, validation) {
                Ok(data) => return claims::caller(&self.settings, &data.claims),
                Err(error) if matches!(error.kind(), ErrorKind::Json(_)) => {
                    return Err(claims::unreadable(token));
                }
                Err(error) => match refusal(error.kind()) {
                    AuthError::BadSignature => outcome = Err(AuthError::BadSignature),
                    other => return Err(other),
                },
            }
        }
        outcome
    }
}

fn validation(algorithm: Algorithm, settings: &JwtSettings) -> Validation {
    let mut validation = Validation::new(algorithm);
    validation.leeway = settings.leeway.as_secs();
    validation.validate_exp = true;
    validation.validate_nbf = true;
    // `iss` is left to `claims`: jsonwebtoken reads a list `iss` as a set
    // of issuers and accepts one that holds the configured issuer.
    let mut required = vec!["exp"];
    if let Some(audience) = &settings.audience {
        validation.set_audience(&[audience]);
        required.push("aud");
    }
    validation.set_required_spec_claims(&required);
    validation
}

/// The token's header, refused when it has `crit` extensions.
fn header(token: &str) -> Result<RawHeader, AuthError> {
    let mut parts = token.split('.');
    let (Some(encoded), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::MalformedToken);
    };
    let json = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| AuthError::MalformedToken)?;
    let header: RawHeader = serde_json::from_slice(&json).map_err(|_| AuthError::MalformedToken)?;
    if header.crit.is_some() {
        return Err(AuthError::AlgorithmNotAccepted);
    }
    Ok(header)
}

fn refusal(kind: &ErrorKind) -> AuthError {
    match kind {
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::MissingRequiredClaim(claim) => match claim.as_str() {
            "iss" => AuthError::WrongIssuer,
            "aud" => AuthError::WrongAudience,
            _ => AuthError::MissingClaim(claim.clone()),
        },
        ErrorKind::InvalidSignature
        | ErrorKind::InvalidEcdsaKey
        | ErrorKind::InvalidRsaKey(_)
        | ErrorKind::InvalidKeyFormat
        | ErrorKind::Crypto(_) => AuthError::BadSignature,
        ErrorKind::InvalidAlgorithm
        | ErrorKind::MissingAlgorithm
        | ErrorKind::InvalidAlgorithmName => AuthError::AlgorithmNotAccepted,
        _ => AuthError::MalformedToken,
    }
}

mod claims;
#[cfg(test)]
mod tests;
