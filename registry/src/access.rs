//! Who is calling and what they may see: the [`Authenticator`] and the call
//! [`Policy`] together, as the agent-facing services use them.
//!
//! - Without `--api-keys-file` or `--jwt-keys-file`, every call is the
//!   anonymous caller (id `""`), and every tool is visible.
//! - With either, a call without a credential the registry accepts is
//!   `UNAUTHENTICATED`.
//! - With `--policy-file` too, a caller sees and calls only the tools the
//!   policy gives it; any other tool is `NOT_FOUND`, exactly as if it did
//!   not exist, so the catalog's contents do not leak.
//!
//! Its parts: [`auth`] (API keys, JWTs, the call policy, files that reload),
//! [`registrants`] (who may register which tools), `endpoint_policy`
//! (which announced endpoints the registry dials) and `audit` (a JSON line
//! per call and registration change, arguments redacted).

pub(crate) mod audit;
pub mod auth;
pub(crate) mod endpoint_policy;
pub mod registrants;

use std::{path::Path, sync::Arc};

use tonic::metadata::MetadataMap;

use crate::{
    access::auth::{
        AuthSettings, Authenticator, Caller, Policy,
        reload::{self, DEFAULT_RELOAD_INTERVAL, Reload, ReloadTask, Watched},
    },
    access::registrants::Registrants,
    error::RegistryError,
};

/// Longest caller id accepted.
pub const MAX_CALLER_ID: usize = 256;

/// Whether `id` can reach every tool unchanged: printable ASCII, no space
/// at either end (what an HTTP header and an environment variable carry).
pub fn is_usable_caller_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_CALLER_ID
        && id.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
        && !id.starts_with(' ')
        && !id.ends_with(' ')
}

/// The anonymous caller: every call when agents are not authenticated.
pub fn anonymous() -> Caller {
    Caller {
        id: String::new(),
        groups: Vec::new(),
    }
}

/// Agents' authentication and the call policy, reloaded as their files
/// change.
/// The default is open: anonymous callers, open registration.
#[derive(Debug, Default)]
pub struct Access {
    /// `None` when agents are not authenticated.
    authenticator: Option<Authenticator>,
    policy: Option<Arc<Watched<Policy>>>,
    registrants: Option<Arc<Watched<Registrants>>>,
    _reload: Option<ReloadTask>,
}

impl Access {
    /// The credentials `auth` names, the call policy and the registrants
    /// files, loaded, and a task re-reading them every couple of seconds.
    /// Must be called inside a tokio runtime.
    pub fn open(
        auth: &AuthSettings,
        policy_file: Option<&Path>,
        registrants_file: Option<&Path>,
    ) -> Result<Self, String> {
        let authenticator = Authenticator::new(auth).map_err(|e| e.to_string())?;
        let policy = match policy_file {
            Some(_) if !authenticator.is_enabled() => {
                return Err("--policy-file needs callers to tell apart: add --api-keys-file or --jwt-keys-file".into());
            }
            Some(path) => Some(Arc::new(
                Watched::open(path).map_err(|e| format!("--policy-file {e}"))?,
            )),
            None => None,
        };
        let registrants = match registrants_file {
            Some(path) => Some(Arc::new(
                Watched::open(path).map_err(|e| format!("--registrants-file {e}"))?,
            )),
            None => None,
        };
        let authenticator = authenticator.is_enabled().then_some(authenticator);
        let mut files = authenticator
            .as_ref()
            .map(Authenticator::files)
            .unwrap_or_default();
        if let Some(policy) = &policy {
            files.push(policy.clone() as Arc<dyn Reload>);
        }
        if let Some(registrants) = &registrants {
            files.push(registrants.clone() as Arc<dyn Reload>);
        }
        let reload = (!files.is_empty()).then(|| reload::spawn(files, DEFAULT_RELOAD_INTERVAL));
        Ok(Self {
            authenticator,
            policy,
            registrants,
            _reload: reload,
        })
    }

    /// Who made a call: the caller its credential proves, or the anonymous
    /// caller when agents are not authenticated.
    pub fn caller(&self, metadata: &MetadataMap) -> Result<Caller, RegistryError> {
        let Some(authenticator) = &self.authenticator else {
            return Ok(anonymous());
        };
        let caller = authenticator.authenticate(metadata).map_err(|error| {
            RegistryError::Unauthenticated {
                reason: error.to_string(),
            }
        })?;
        if !is_usable_caller_id(&caller.id) {
            return Err(RegistryError::Unauthenticated {
                reason: format!(
                    "the credential's caller id is not 1 to {MAX_CALLER_ID} printable ASCII characters (it is passed to tools in a header and an environment variable)"
                ),
            });
        }
        Ok(caller)
    }

    /// The policy in force now, if there is one.
    pub fn policy(&self) -> Option<Arc<Policy>> {
        self.policy.as_ref().map(|p| p.current())
    }

    /// The registrants in force now, if registration is authenticated.
    pub fn registrants(&self) -> Option<Arc<Registrants>> {
        self.registrants.as_ref().map(|r| r.current())
    }
}

/// Whether `policy` (none: everything) lets `caller` see and call `tool`.
pub fn allows(policy: Option<&Policy>, caller: &Caller, tool: &str) -> bool {
    policy.is_none_or(|p| p.allows(caller, tool))
}

/// Whether `caller` may see and cancel a task of `tool` that `owner`
/// started: its own always; another's only where `policy` grants it.
pub fn sees_task(policy: Option<&Policy>, caller: &Caller, owner: &str, tool: &str) -> bool {
    caller.id == owner || policy.is_some_and(|p| p.sees_task(caller, owner, tool))
}

/// Whether `policy` (none: everything) lets `caller` see every tool, so
/// that what it sees need not be asked tool by tool.
pub fn allows_every_tool(policy: Option<&Policy>, caller: &Caller) -> bool {
    policy.is_none_or(|p| p.allows_every_tool(caller))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_ids_must_reach_tools_unchanged() {
        for good in ["billing-agent", "user@example.com", "a b", "spiffe://x/y"] {
            assert!(is_usable_caller_id(good), "{good}");
        }
        for bad in [
            "",
            " a",
            "a ",
            "é",
            "a\r\nb",
            &"x".repeat(MAX_CALLER_ID + 1),
        ] {
            assert!(!is_usable_caller_id(bad), "{bad:?}");
        }
    }
}
