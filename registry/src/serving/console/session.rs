//! Console sign-ins: a session is the viewer's credential (the API key or
//! JWT it signed in with), an expiry and a CSRF secret, sealed with
//! AES-256-GCM under a key of the registry's and kept in an HttpOnly,
//! SameSite=Strict cookie (Secure under TLS). Nothing is stored on the
//! server: any replica holding the key reads it. The credential is checked
//! again on every request, so a revoked API key or an expired JWT ends
//! the session at once; the session's own expiry bounds it otherwise.
//!
//! Forms carry the session's CSRF token (the secret, hex) and every
//! state-changing request must present it; before sign-in, the login form
//! uses a double-submit cookie instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::{Engine as _, engine::general_purpose::URL_SAFE_NO_PAD};
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom as _, SystemRandom};
use serde::{Deserialize, Serialize};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "toolmesh_console";
/// The login form's double-submit cookie.
pub(crate) const LOGIN_COOKIE: &str = "toolmesh_console_login";

/// Longest sealed cookie read: a JWT of a few KB, sealed and encoded.
const MAX_SEALED: usize = 8 * 1024;

/// A signed-in viewer's session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Session {
    /// The credential, as an `Authorization: Bearer` header would carry it.
    #[serde(rename = "c")]
    pub credential: String,
    /// Seconds since the Unix epoch after which it is void.
    #[serde(rename = "e")]
    pub expires: u64,
    /// The forms' CSRF token.
    #[serde(rename = "x")]
    pub csrf: String,
}

impl Session {
    /// A session for `credential`, valid for `ttl` from now.
    pub(crate) fn new(credential: String, ttl: Duration) -> Self {
        Self {
            credential,
            expires: now().saturating_add(ttl.as_secs()),
            csrf: random_token(),
        }
    }

    /// Whether it is past its expiry.
    pub(crate) fn expired(&self) -> bool {
        now() >= self.expires
    }
}

/// Why a cookie gives no session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unsealed {
    /// Not a session this registry sealed (forged, altered, or sealed
    /// under another key).
    #[error("the session cookie is not valid")]
    Invalid,
    /// A real session, past its expiry.
    #[error("the session has expired: sign in again")]
    Expired,
}

/// Seals and opens sessions under one key.
pub(crate) struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// A sealer under `key` (32 bytes).
    pub(crate) fn new(key: &[u8; 32]) -> Self {
        let key = UnboundKey::new(&AES_256_GCM, key)
            .unwrap_or_else(|_| unreachable!("AES-256-GCM takes any 32-byte key"));
        Self {
            key: LessSafeKey::new(key),
            random: SystemRandom::new(),
        }
    }

    /// A sealer under a fresh random key: sessions last as long as the
    /// process.
    pub(crate) fn random() -> Self {
        Self::new(&random_key())
    }

    /// `session` sealed, as a cookie value.
    pub(crate) fn seal(&self, session: &Session) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        fill(&self.random, &mut nonce);
        let mut sealed = serde_json::to_vec(session).unwrap_or_default();
        if self
            .key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::empty(),
                &mut sealed,
            )
            .is_err()
        {
            return String::new();
        }
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        URL_SAFE_NO_PAD.encode(out)
    }

    /// The session in a cookie value, if it was sealed here and is current.
    pub(crate) fn open(&self, value: &str) -> Result<Session, Unsealed> {
        if value.len() > MAX_SEALED {
            return Err(Unsealed::Invalid);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(value)
            .map_err(|_| Unsealed::Invalid)?;
        if bytes.len() < NONCE_LEN {
            return Err(Unsealed::Invalid);
        }
        let (nonce, sealed) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| Unsealed::Invalid)?;
        let mut sealed = sealed.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::empty(), &mut sealed)
            .map_err(|_| Unsealed::Invalid)?;
        let session: Session = serde_json::from_slice(plain).map_err(|_| Unsealed::Invalid)?;
        if session.expired() {
            return Err(Unsealed::Expired);
        }
        Ok(session)
    }
}

/// Whether `presented` is `expected`, in time independent of where they
/// differ; an empty token never matches.
pub(crate) fn tokens_match(expected: &str, presented: &str) -> bool {
    !expected.is_empty()
        && expected.len() == presented.len()
        && expected
            .bytes()
            .zip(presented.bytes())
            .fold(0u8, |differ, (a, b)| differ | (a ^ b))
            == 0
}

/// 32 random bytes, hex.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; 32];
    fill(&SystemRandom::new(), &mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A fresh session key.
pub(crate) fn random_key() -> [u8; 32] {
    let mut key = [0u8; 32];
    fill(&SystemRandom::new(), &mut key);
    key
}

fn fill(random: &SystemRandom, bytes: &mut [u8]) {
    // The system's random source failing is not something to serve on.
    if random.fill(bytes).is_err() {
        panic!("the system random source failed");
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The value of cookie `name` in a `Cookie` header's value.
pub(crate) fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (key, value) = pair.trim().split_once('=')?;
        (key == name).then_some(value)
    })
}

/// A `Set-Cookie` value: `name=value`, HttpOnly, SameSite=Strict, path
/// `/`, for `max_age` (zero: removed), Secure when served over TLS.
pub(crate) fn set_cookie(name: &str, value: &str, max_age: Duration, secure: bool) -> String {
    format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        max_age.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_session_opens_under_its_key_only() {
        let sealer = Sealer::random();
        let session = Session::new("key-abc".into(), Duration::from_secs(60));
        let sealed = sealer.seal(&session);
        assert!(
            !sealed.contains("key-abc"),
            "the credential is not readable"
        );
        assert_eq!(sealer.open(&sealed), Ok(session));
        assert_eq!(Sealer::random().open(&sealed), Err(Unsealed::Invalid));
    }

    #[test]
    fn an_altered_or_garbage_cookie_is_invalid_never_a_panic() {
        let sealer = Sealer::random();
        let sealed = sealer.seal(&Session::new("k".into(), Duration::from_secs(60)));
        let mut bytes = URL_SAFE_NO_PAD.decode(&sealed).expect("base64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = URL_SAFE_NO_PAD.encode(bytes);
        for bad in [
            altered.as_str(),
            "",
            "!!!",
            "AAAA",
            &"A".repeat(MAX_SEALED + 1),
        ] {
            assert_eq!(sealer.open(bad), Err(Unsealed::Invalid), "{bad:.20}");
        }
    }

    #[test]
    fn an_expired_session_says_so() {
        let sealer = Sealer::random();
        let mut session = Session::new("k".into(), Duration::from_secs(60));
        session.expires = now() - 1;
        assert_eq!(sealer.open(&sealer.seal(&session)), Err(Unsealed::Expired));
    }

    #[test]
    fn tokens_match_exactly_and_never_when_empty() {
        let token = random_token();
        assert_eq!(token.len(), 64);
        assert!(tokens_match(&token, &token));
        assert!(!tokens_match(&token, &token[1..]));
        assert!(!tokens_match(&token, ""));
        assert!(!tokens_match("", ""));
    }

    #[test]
    fn cookies_are_found_by_name_and_set_strictly() {
        let header = "a=1; toolmesh_console=xyz; b=2";
        assert_eq!(cookie(header, COOKIE), Some("xyz"));
        assert_eq!(cookie(header, "toolmesh"), None);
        let set = set_cookie(COOKIE, "v", Duration::from_secs(10), true);
        assert_eq!(
            set,
            "toolmesh_console=v; Path=/; HttpOnly; SameSite=Strict; Max-Age=10; Secure"
        );
        assert!(!set_cookie(COOKIE, "", Duration::ZERO, false).contains("Secure"));
    }
}
