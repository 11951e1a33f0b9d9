//! Who is calling, and which tools they may call.
//!
//! A call carries `authorization: Bearer <credential>`; the credential is an
//! API key (looked up by its SHA-256) or a JWT (verified against public
//! keys). Either yields a [`Caller`], which the [`policy::Policy`] checks
//! against the tool's name. Every file here is re-read when it changes.
//!
//! # Layout
//! - `authenticator`: the header, the choice between key and token, and
//!   the settings that name the files.
//! - [`api_keys`]: the file of hashed API keys, and [`api_keys::hash_key`].
//! - [`jwt`]: token verification and the claims that name the caller;
//!   [`jwt_keys`]: its public keys, from PEM or JWKS.
//! - `policy`: which caller may call which tool; [`approval_rules`]: which
//!   calls wait for a person, and who decides them.
//! - `pattern`: the `*` glob the policy matches tool names with.
//! - `reload`: a file's parsed contents, re-read when the file changes.
//! - `error`: refusals safe to return to a caller, and file errors.

pub mod api_keys;
pub mod approval_rules;
pub(crate) mod authenticator;
pub mod console_roles;
pub(crate) mod error;
pub mod jwt;
pub mod jwt_keys;
pub(crate) mod pattern;
pub(crate) mod policy;
pub(crate) mod reload;

#[cfg(test)]
mod test_keys;

pub use authenticator::{AuthSettings, Authenticator};
pub use console_roles::ConsoleRights;
pub use error::{AuthError, AuthFileError, FormatError};
pub use pattern::Pattern;
pub use policy::Policy;

/// Who made a call: an API key's entry or a verified token's claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The caller's id: the key entry's `caller`, or the token's caller claim.
    pub id: String,
    /// The groups the caller belongs to, which policy rules may name.
    pub groups: Vec<String>,
}
