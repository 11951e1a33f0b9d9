//! Turns a call's `authorization: Bearer <credential>` into a [`Caller`].
//!
//! A credential with exactly two dots is a JWT; anything else is an API
//! key. Nothing here logs or returns the credential.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tonic::metadata::MetadataMap;

use super::Caller;
use super::api_keys::ApiKeys;
use super::error::{AuthError, AuthFileError};
use super::jwt::{JwtSettings, JwtVerifier};
use super::jwt_keys::JwtKeys;
use super::reload::{self, Reload, ReloadTask, Watched};

/// Where credentials are checked against; no file means that kind of
/// credential is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthSettings {
    /// The API key file (YAML of hashed keys).
    pub api_keys_file: Option<PathBuf>,
    /// The JWT public keys: PEM public keys or a JWKS document.
    pub jwt_keys_file: Option<PathBuf>,
    /// The `iss` every JWT must have.
    pub jwt_issuer: Option<String>,
    /// The value every JWT's `aud` must hold.
    pub jwt_audience: Option<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub jwt_leeway: Duration,
    /// The JWT claim holding the caller's id.
    pub jwt_caller_claim: String,
    /// The JWT claim holding the caller's groups.
    pub jwt_groups_claim: String,
}

impl Default for AuthSettings {
    fn default() -> Self {
        let jwt = JwtSettings::default();
        Self {
            api_keys_file: None,
            jwt_keys_file: None,
            jwt_issuer: jwt.issuer,
            jwt_audience: jwt.audience,
            jwt_leeway: jwt.leeway,
            jwt_caller_claim: jwt.caller_claim,
            jwt_groups_claim: jwt.groups_claim,
        }
    }
}

/// Checks credentials against the configured, reloadable files.
#[derive(Debug)]
pub struct Authenticator {
    api_keys: Option<Arc<Watched<ApiKeys>>>,
    jwt: Option<(Arc<Watched<JwtKeys>>, JwtVerifier)>,
}

impl Authenticator {
    /// Loads the configured files; an error names the file and the problem.
    pub fn new(settings: &AuthSettings) -> Result<Self, AuthFileError> {
        let api_keys = match &settings.api_keys_file {
            Some(path) => Some(Arc::new(Watched::open(path)?)),
            None => None,
        };
        let jwt = match &settings.jwt_keys_file {
            Some(path) => {
                let verifier = JwtVerifier::new(JwtSettings {
                    issuer: settings.jwt_issuer.clone(),
                    audience: settings.jwt_audience.clone(),
                    leeway: settings.jwt_leeway,
                    caller_claim: settings.jwt_caller_claim.clone(),
                    groups_claim: settings.jwt_groups_claim.clone(),
                });
                Some((Arc::new(Watched::open(path)?), verifier))
            }
            None => None,
        };
        Ok(Self { api_keys, jwt })
    }

    /// Whether any kind of credential is configured. When not, every
    /// credential is refused, and the owner should not ask for one.
    pub fn is_enabled(&self) -> bool {
        self.api_keys.is_some() || self.jwt.is_some()
    }

    /// The caller the call's `authorization` header proves.
    pub fn authenticate(&self, metadata: &MetadataMap) -> Result<Caller, AuthError> {
        self.authenticate_credential(bearer_credential(metadata)?)
    }

    /// The caller a bare credential (API key or JWT) proves.
    pub fn authenticate_credential(&self, credential: &str) -> Result<Caller, AuthError> {
        if credential.bytes().filter(|&b| b == b'.').count() == 2 {
            let (keys, verifier) = self.jwt.as_ref().ok_or(AuthError::JwtNotAccepted)?;
            keys.with(|keys| verifier.verify(keys, credential))
        } else {
            let keys = self
                .api_keys
                .as_ref()
                .ok_or(AuthError::ApiKeysNotAccepted)?;
            keys.with(|keys| keys.lookup(credential).cloned())
                .ok_or(AuthError::UnknownKey)
        }
    }

    /// The files to re-read when they change, for `reload::spawn`.
    pub fn files(&self) -> Vec<Arc<dyn Reload>> {
        let mut files: Vec<Arc<dyn Reload>> = Vec::new();
        if let Some(keys) = &self.api_keys {
            files.push(keys.clone());
        }
        if let Some((keys, _)) = &self.jwt {
            files.push(keys.clone());
        }
        files
    }

    /// Re-reads this authenticator's files every `every` until the task is
    /// stopped or dropped; see `reload::spawn` to watch other files too.
    pub fn spawn_reload(&self, every: Duration) -> ReloadTask {
        reload::spawn(self.files(), every)
    }
}

/// The credential in `authorization: Bearer <credential>`: exactly one such
/// header, the scheme in any case, one or more spaces, then a credential
/// of visible ASCII.
pub(crate) fn bearer_credential(metadata: &MetadataMap) -> Result<&str, AuthError> {
    let mut values = metadata.get_all("authorization").iter();
    let value = values.next().ok_or(AuthError::MissingCredential)?;
    if values.next().is_some() {
        return Err(AuthError::MalformedHeader(
            "more than one authorization header",
        ));
    }
    let value = value
        .to_str()
        .map_err(|_| AuthError::MalformedHeader("not visible ASCII"))?;
    let (scheme, credential) = value
        .split_once(' ')
        .ok_or(AuthError::MalformedHeader("expected `Bearer <credential>`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(AuthError::MalformedHeader("the scheme must be `Bearer`"));
    }
    let credential = credential.trim_start_matches(' ');
    if credential.is_empty() {
        return Err(AuthError::MissingCredential);
    }
    if !credential.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(AuthError::MalformedHeader(
            "the credential has spaces or controls",
        ));
    }
    Ok(credential)
}

#[cfg(test)]
mod tests;
