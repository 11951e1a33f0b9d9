//! The shared secret that lets the registry, and only the registry, call a
//! sidecar's `ToolRuntime.Execute`: read from a file on both sides, sent by
//! the registry as `authorization: Bearer <token>`, checked by the sidecar.
//!
//! The sidecar compares SHA-256 digests, so the time a comparison takes
//! tells nothing about the token. The token is never logged.

use std::fmt;
use std::path::Path;

use sha2::{Digest as _, Sha256};
use tonic::metadata::{AsciiMetadataValue, MetadataMap};

/// Shortest token accepted, in bytes.
pub const MIN_LEN: usize = 16;
/// Longest token accepted, in bytes.
pub const MAX_LEN: usize = 4096;

/// Why a token file is not usable.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file's content is not a usable token.
    #[error(
        "{path}: {problem}; write one line of {MIN_LEN} to {MAX_LEN} visible ASCII characters, e.g. the output of `openssl rand -hex 32`"
    )]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// A shared secret, and the `authorization` value that carries it.
#[derive(Clone)]
pub struct Token {
    header: AsciiMetadataValue,
    digest: [u8; 32],
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    /// Reads the token in `path`: its one line, without the line break.
    pub fn load(path: &Path) -> Result<Self, TokenError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::new(text.trim_end_matches(['\n', '\r'])).map_err(|problem| TokenError::Invalid {
            path: path.display().to_string(),
            problem,
        })
    }

    /// The token `secret`, if it is usable.
    pub fn new(secret: &str) -> Result<Self, &'static str> {
        if secret.len() < MIN_LEN {
            return Err("the token is too short");
        }
        if secret.len() > MAX_LEN {
            return Err("the token is too long");
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("the token has a space, a control or a non-ASCII character");
        }
        let header = format!("Bearer {secret}")
            .parse()
            .map_err(|_| "the token is not a valid header value")?;
        Ok(Self {
            header,
            digest: Sha256::digest(secret.as_bytes()).into(),
        })
    }

    /// Adds `authorization: Bearer <token>` to `metadata`.
    pub fn attach(&self, metadata: &mut MetadataMap) {
        metadata.insert("authorization", self.header.clone());
    }

    /// Whether `metadata` carries this token.
    pub fn presented_in(&self, metadata: &MetadataMap) -> bool {
        let Some(secret) = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        let presented: [u8; 32] = Sha256::digest(secret.as_bytes()).into();
        presented == self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn the_token_it_attaches_is_the_one_it_accepts() {
        let token = Token::new(SECRET).expect("valid");
        let mut metadata = MetadataMap::new();
        assert!(!token.presented_in(&metadata));
        token.attach(&mut metadata);
        assert!(token.presented_in(&metadata));
        let other = Token::new("fedcba9876543210fedcba9876543210").expect("valid");
        assert!(!other.presented_in(&metadata));
        let mut lowercase = MetadataMap::new();
        lowercase.insert(
            "authorization",
            format!("bearer {SECRET}").parse().expect("ascii"),
        );
        assert!(!token.presented_in(&lowercase));
    }

    #[test]
    fn unusable_tokens_are_refused_and_none_is_ever_shown() {
        for bad in [
            "short",
            "with a space in it, long enough",
            &"x".repeat(MAX_LEN + 1),
            "non-ascii é token 123456",
        ] {
            assert!(Token::new(bad).is_err(), "{bad}");
        }
        let token = Token::new(SECRET).expect("valid");
        assert_eq!(format!("{token:?}"), "Token(<redacted>)");
    }

    #[test]
    fn a_file_is_read_without_its_line_break() {
        let dir = std::env::temp_dir().join(format!("toolmesh-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("token");
        std::fs::write(&path, format!("{SECRET}\n")).expect("write");
        let token = Token::load(&path).expect("loads");
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "authorization",
            format!("Bearer {SECRET}").parse().expect("ascii"),
        );
        assert!(token.presented_in(&metadata));
        std::fs::write(&path, "short\n").expect("write");
        let error = Token::load(&path).expect_err("too short").to_string();
        assert!(error.contains("openssl rand -hex 32"), "{error}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
