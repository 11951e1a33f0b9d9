//! Why a call was refused, and why an auth file was not loaded.

use std::io;
use std::path::PathBuf;

/// Why a call's credential was refused.
///
/// Every message is safe to return to the caller: none repeats the
/// credential or any part of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The call has no `authorization` header.
    #[error("no credential: send `authorization: Bearer <API key or JWT>`")]
    MissingCredential,
    /// The `authorization` header is not `Bearer <credential>`.
    #[error("malformed authorization header: {0}")]
    MalformedHeader(&'static str),
    /// An API key was sent, and no API key file is configured.
    #[error("API keys are not accepted here")]
    ApiKeysNotAccepted,
    /// A JWT was sent, and no JWT key file is configured.
    #[error("JWTs are not accepted here")]
    JwtNotAccepted,
    /// No entry of the API key file has this key's hash.
    #[error("unknown API key")]
    UnknownKey,
    /// The token is not three base64url parts with a JSON header and claims.
    #[error("malformed token")]
    MalformedToken,
    /// The token's `alg` is not RS256, ES256 or EdDSA (`none` and HMAC are
    /// never accepted), or it carries `crit` extensions.
    #[error("token algorithm or header not accepted: only RS256, ES256 and EdDSA are")]
    AlgorithmNotAccepted,
    /// No configured key has the token's `kid` and algorithm.
    #[error("no key to verify this token")]
    NoMatchingKey,
    /// No configured key verifies the token's signature.
    #[error("token signature does not verify")]
    BadSignature,
    /// The token's `exp` is past, beyond the leeway.
    #[error("token has expired")]
    Expired,
    /// The token's `nbf` is ahead, beyond the leeway.
    #[error("token is not valid yet")]
    NotYetValid,
    /// The token's `iss` is not the configured issuer, or is missing.
    #[error("token has the wrong issuer")]
    WrongIssuer,
    /// The token's `aud` does not name the configured audience, or names one
    /// while none is configured.
    #[error("token has the wrong audience")]
    WrongAudience,
    /// A required claim is missing (the name comes from the configuration).
    #[error("token has no `{0}` claim")]
    MissingClaim(String),
    /// A claim has the wrong type: `iss` and `sub` must be one string
    /// (RFC 7519: a list is malformed), `aud` a string or an array of
    /// strings, `exp` and `nbf` numbers, the caller claim a non-empty
    /// string, the groups claim an array of strings.
    #[error("token claim `{claim}` must be {expected}")]
    InvalidClaim {
        /// The claim's name.
        claim: String,
        /// What it must be, in words.
        expected: &'static str,
    },
}

/// Why an auth file (API keys, JWT keys, policy) was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum AuthFileError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What reading it said.
        source: io::Error,
    },
    /// The file was read and is not valid.
    #[error("{}: {problem}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with its contents.
        problem: FormatError,
    },
}

/// What is wrong with the contents of an auth file.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// Not YAML of the expected shape (the message has the line).
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    /// Looks like a JWKS document and is not one.
    #[error("not a JWKS document: {0}")]
    Json(#[from] serde_json::Error),
    /// One entry is invalid; `entry` names it (e.g. `keys[2] (caller x)`).
    #[error("{entry}: {problem}")]
    Entry {
        /// Which entry, by position and name.
        entry: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The file as a whole is unusable (e.g. holds no key).
    #[error("{0}")]
    File(String),
}

impl FormatError {
    pub(crate) fn entry(entry: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Entry {
            entry: entry.into(),
            problem: problem.into(),
        }
    }
}
