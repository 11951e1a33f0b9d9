//! A verified token's claims, read: the registered claims must have the
//! types RFC 7519 gives them whatever is configured, `iss` must equal the
//! configured issuer, and the caller claim names the caller.
//!
//! jsonwebtoken checks `exp`, `nbf` and `aud` only when they parse, and
//! reads a list `iss` as a set of issuers (one holding the configured
//! issuer passes): a claim of the wrong type is refused here instead of
//! being skipped, and `iss` is compared here as the one string it is.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};

use super::JwtSettings;
use crate::access::auth::{AuthError, Caller};

/// What a StringOrURI claim must be.
pub(super) const ONE_STRING: &str = "one string (RFC 7519: a StringOrURI, not a list)";

/// The registered claims and the type each must have when present.
const REGISTERED: [(&str, Shape); 5] = [
    ("iss", Shape::String),
    ("sub", Shape::String),
    ("aud", Shape::StringOrStrings),
    ("exp", Shape::Number),
    ("nbf", Shape::Number),
];

#[derive(Clone, Copy)]
enum Shape {
    String,
    StringOrStrings,
    Number,
}

impl Shape {
    fn fits(self, value: &Value) -> bool {
        match (self, value) {
            (Self::String | Self::StringOrStrings, Value::String(_))
            | (Self::Number, Value::Number(_)) => true,
            (Self::StringOrStrings, Value::Array(items)) => items.iter().all(Value::is_string),
            _ => false,
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Self::String => ONE_STRING,
            Self::StringOrStrings => "a string or an array of strings",
            Self::Number => "a number (seconds since the epoch)",
        }
    }
}

/// The caller `claims` name, once the registered claims have their types
/// and `iss` is the configured issuer (when one is).
pub(super) fn caller(
    settings: &JwtSettings,
    claims: &Map<String, Value>,
) -> Result<Caller, AuthError> {
    registered(claims)?;
    if let Some(issuer) = &settings.issuer
        && present(claims, "iss").and_then(Value::as_str) != Some(issuer.as_str())
    {
        return Err(AuthError::WrongIssuer);
    }
    let id_claim = &settings.caller_claim;
    let id = match present(claims, id_claim) {
        None => return Err(AuthError::MissingClaim(id_claim.clone())),
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        Some(_) => return Err(invalid(id_claim, "a non-empty string")),
    };
    let groups_claim = &settings.groups_claim;
    let groups = match present(claims, groups_claim) {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(str::to_owned))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid(groups_claim, "an array of strings"))?,
        Some(_) => return Err(invalid(groups_claim, "an array of strings")),
    };
    Ok(Caller { id, groups })
}

/// Why jsonwebtoken could not read the claims of `token`, whose signature
/// it verified (an object or a list `sub` breaks its parser): the
/// registered claim of the wrong type, else a malformed token.
pub(super) fn unreadable(token: &str) -> AuthError {
    token
        .split('.')
        .nth(1)
        .and_then(|part| URL_SAFE_NO_PAD.decode(part).ok())
        .and_then(|json| serde_json::from_slice::<Map<String, Value>>(&json).ok())
        .and_then(|claims| registered(&claims).err())
        .unwrap_or(AuthError::MalformedToken)
}

/// Whether each registered claim present has its type.
fn registered(claims: &Map<String, Value>) -> Result<(), AuthError> {
    for (claim, shape) in REGISTERED {
        if let Some(value) = present(claims, claim)
            && !shape.fits(value)
        {
            return Err(invalid(claim, shape.expected()));
        }
    }
    Ok(())
}

/// The claim `name`, unless it is absent or `null`.
fn present<'a>(claims: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    claims.get(name).filter(|value| !value.is_null())
}

fn invalid(claim: &str, expected: &'static str) -> AuthError {
    AuthError::InvalidClaim {
        claim: claim.to_owned(),
        expected,
    }
}
