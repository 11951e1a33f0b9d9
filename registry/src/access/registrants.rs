//! Who may register tools: the sidecar credentials file
//! (`--registrants-file`). Each credential is a bearer token (stored as its
//! SHA-256) or an mTLS identity, and may announce only tools whose names
//! match its patterns, with at most its number of live instances and of
//! tool names.
//!
//! Each registrant holds at most `max_tools` distinct tool names; one that
//! does not say gets an equal share of what `--max-tools` leaves once the
//! registrants that say have theirs. So, unless the file promises more
//! than `--max-tools` in all (the registry warns when it does), no
//! registrant can fill the catalog and lock the others out.
//!
//! ```yaml
//! registrants:
//!   - name: inventory
//!     token_sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
//!     tools: ["inventory.*", "stock_*"]
//!     max_instances: 20
//!     max_tools: 200
//!   - name: search
//!     identities: ["spiffe://example.org/ns/tools/sa/search"]
//!     tools: ["search"]
//! ```
//!
//! Without the file, registration is open: every sidecar is the anonymous
//! registrant (see `docs/security.md` for what that trusts).

use std::{collections::HashMap, path::Path, sync::Arc};

use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tonic::metadata::MetadataMap;

use crate::{access::auth::pattern::Pattern, error::RegistryError};

/// Longest registrant name.
pub const MAX_NAME_LEN: usize = 64;
/// Longest tool-name pattern.
pub const MAX_PATTERN_LEN: usize = 256;

/// Who holds a lease, and so its tools: a registrant's name, or `""` when
/// registration is open.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Owner {
    /// The registrant's name.
    pub name: String,
    /// Most live instances it may hold at once.
    pub max_instances: Option<usize>,
    /// Most distinct tool names it may hold at once (its `max_tools`, or
    /// its share of `--max-tools`: [`Registrants::owner`]).
    pub max_tools: Option<usize>,
}

/// One credential of the file, and what it may register.
#[derive(Debug)]
pub struct Registrant {
    owner: Owner,
    tools: Vec<Pattern>,
    /// Its own `max_tools`, if it says.
    max_tools: Option<usize>,
}

impl Registrant {
    /// The owner its leases are held by.
    pub fn owner(&self) -> &Owner {
        &self.owner
    }

    /// Refuses `tool` unless one of the registrant's patterns matches it.
    pub fn may_announce(&self, tool: &str) -> Result<(), RegistryError> {
        if self.tools.iter().any(|p| p.matches(tool)) {
            return Ok(());
        }
        Err(RegistryError::PermissionDenied {
            reason: format!(
                "registrant {:?} may not announce tool {:?}: its patterns are {}",
                self.owner.name,
                toolmesh_telemetry::shown::clip(tool, toolmesh_telemetry::shown::QUOTED_MAX),
                self.tools
                    .iter()
                    .map(Pattern::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
    }
}

/// Every registrant, found by token digest or by mTLS identity.
#[derive(Debug, Default)]
pub struct Registrants {
    by_token: HashMap<[u8; 32], Arc<Registrant>>,
    by_identity: HashMap<String, Arc<Registrant>>,
    /// The `max_tools` the file gives, added up.
    promised_tools: usize,
    /// Registrants that give none: they share what `--max-tools` leaves.
    sharing: usize,
    /// Whether the file promising more than `--max-tools` was logged.
    overcommit_logged: std::sync::atomic::AtomicBool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    registrants: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    identities: Vec<String>,
    tools: Vec<String>,
    #[serde(default)]
    max_instances: Option<usize>,
    #[serde(default)]
    max_tools: Option<usize>,
}

impl Registrants {
    /// Reads the registrants file at `path`.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses a registrants file.
    pub fn parse(yaml: &str) -> Result<Self, String> {
        let file: File = serde_yaml_ng::from_str(yaml).map_err(|e| e.to_string())?;
        let mut registrants = Self::default();
        let mut names = std::collections::HashSet::new();
        for (i, entry) in file.registrants.into_iter().enumerate() {
            let at = format!("registrants[{i}]");
            if entry.name.is_empty()
                || entry.name.len() > MAX_NAME_LEN
                || !entry
                    .name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            {
                return Err(format!(
                    "{at}.name: 1 to {MAX_NAME_LEN} letters, digits, '.', '_' or '-'"
                ));
            }
            if !names.insert(entry.name.clone()) {
                return Err(format!("{at}.name: {:?} is named twice", entry.name));
            }
            if entry.token_sha256.is_none() && entry.identities.is_empty() {
                return Err(format!(
                    "{at}: give token_sha256 (`toolmesh-registry hash-key < token`) or identities"
                ));
            }
            if entry.tools.is_empty() {
                return Err(format!(
                    "{at}.tools: list the tool-name patterns it may announce, e.g. [\"inventory.*\"]"
                ));
            }
            let tools = entry
                .tools
                .iter()
                .enumerate()
                .map(|(j, t)| {
                    if t.is_empty() || t.len() > MAX_PATTERN_LEN {
                        Err(format!(
                            "{at}.tools[{j}]: 1 to {MAX_PATTERN_LEN} bytes; `*` matches any run of characters"
                        ))
                    } else {
                        Ok(Pattern::new(t))
                    }
                })
                .collect::<Result<Vec<_>, _>>()?;
            if entry.max_instances == Some(0) {
                return Err(format!("{at}.max_instances: 0 would refuse every announce"));
            }
            match entry.max_tools {
                Some(0) => return Err(format!("{at}.max_tools: 0 would refuse every announce")),
                Some(max) => {
                    registrants.promised_tools = registrants.promised_tools.saturating_add(max);
                }
                None => registrants.sharing += 1,
            }
            let registrant = Arc::new(Registrant {
                owner: Owner {
                    name: entry.name,
                    max_instances: entry.max_instances,
                    max_tools: None,
                },
                tools,
                max_tools: entry.max_tools,
            });
            if let Some(hex) = &entry.token_sha256 {
                let digest = crate::access::auth::api_keys::parse_hash(hex.trim())
                    .ok_or_else(|| format!("{at}.token_sha256: 64 hexadecimal digits"))?;
                if registrants
                    .by_token
                    .insert(digest, registrant.clone())
                    .is_some()
                {
                    return Err(format!(
                        "{at}.token_sha256: another registrant has the same token"
                    ));
                }
            }
            for (j, identity) in entry.identities.iter().enumerate() {
                if registrants
                    .by_identity
                    .insert(identity.clone(), registrant.clone())
                    .is_some()
                {
                    return Err(format!(
                        "{at}.identities[{j}]: another registrant has the same identity"
                    ));
                }
            }
        }
        Ok(registrants)
    }

    /// The owner `registrant`'s leases are held by, with its bound on tool
    /// names in a catalog of at most `max_tools` (`--max-tools`): its own
    /// `max_tools`, else an equal share of what the others' leave (at
    /// least 1).
    pub fn owner(&self, registrant: &Registrant, max_tools: usize) -> Owner {
        let left = max_tools.saturating_sub(self.promised_tools);
        if left < self.sharing || self.promised_tools > max_tools {
            self.log_overcommit(max_tools);
        }
        let bound = registrant
            .max_tools
            .unwrap_or_else(|| (left / self.sharing.max(1)).max(1));
        Owner {
            max_tools: Some(bound),
            ..registrant.owner.clone()
        }
    }

    fn log_overcommit(&self, max_tools: usize) {
        if !self
            .overcommit_logged
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                promised = self.promised_tools,
                sharing = self.sharing,
                max_tools,
                "the registrants file promises more tool names than --max-tools holds: together its registrants can fill the catalog and lock one another out; lower their max_tools or raise --max-tools"
            );
        }
    }

    /// The registrant whose token `metadata` carries (`authorization:
    /// Bearer`), else the one whose mTLS identity is among `identities`.
    pub fn authenticate(
        &self,
        metadata: &MetadataMap,
        identities: &[String],
    ) -> Result<Arc<Registrant>, RegistryError> {
        if let Some(value) = metadata.get("authorization") {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or_else(|| RegistryError::Unauthenticated {
                    reason: "the authorization header is not `Bearer <token>`".into(),
                })?;
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            return self.by_token.get(&digest).cloned().ok_or_else(|| {
                RegistryError::Unauthenticated {
                    reason: "the registration token is not one the registry knows".into(),
                }
            });
        }
        identities
            .iter()
            .find_map(|id| self.by_identity.get(id).cloned())
            .ok_or_else(|| RegistryError::Unauthenticated {
                reason: "registration needs a registrant's token (--registration-token-file on the sidecar) or client certificate".into(),
            })
    }
}

impl crate::access::auth::reload::AuthFile for Registrants {
    const KIND: &'static str = "registrants file";

    fn parse(text: &str) -> Result<Self, crate::access::auth::FormatError> {
        Self::parse(text).map_err(crate::access::auth::FormatError::File)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "inventory-token-0123456789abcdef";

    fn file() -> String {
        format!(
            "registrants:\n  - name: inventory\n    token_sha256: {}\n    tools: [\"inventory.*\"]\n    max_instances: 2\n  - name: search\n    identities: [\"spiffe://t/search\"]\n    tools: [search]\n",
            crate::access::auth::api_keys::hash_key(TOKEN)
        )
    }

    fn bearer(token: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert(
            "authorization",
            format!("Bearer {token}").parse().expect("ascii"),
        );
        m
    }

    #[test]
    fn registrants_without_max_tools_share_what_the_others_leave() {
        let file = |entries: &str| {
            Registrants::parse(&format!("registrants:\n{entries}")).expect("parses")
        };
        let entry = |name: &str, extra: &str| {
            format!(
                "  - {{name: {name}, token_sha256: {}, tools: [\"*\"]{extra}}}\n",
                crate::access::auth::api_keys::hash_key(name)
            )
        };
        let bound = |r: &Registrants, name: &str, max: usize| {
            let registrant = r.authenticate(&bearer(name), &[]).expect("known");
            r.owner(&registrant, max).max_tools
        };
        let two = file(&format!("{}{}", entry("a", ""), entry("b", "")));
        assert_eq!(bound(&two, "a", 60), Some(30));
        assert_eq!(bound(&two, "b", 60), Some(30));
        let mixed = file(&format!(
            "{}{}{}",
            entry("a", ", max_tools: 40"),
            entry("b", ""),
            entry("c", "")
        ));
        assert_eq!(bound(&mixed, "a", 100), Some(40));
        assert_eq!(bound(&mixed, "b", 100), Some(30));
        assert_eq!(bound(&mixed, "c", 100), Some(30));
        assert_eq!(
            bound(&mixed, "b", 30),
            Some(1),
            "overcommitted: at least one"
        );
        assert!(
            Registrants::parse(&format!("registrants:\n{}", entry("z", ", max_tools: 0"))).is_err()
        );
    }

    #[test]
    fn a_token_or_an_identity_names_its_registrant() {
        let r = Registrants::parse(&file()).expect("parses");
        let inventory = r.authenticate(&bearer(TOKEN), &[]).expect("known token");
        assert_eq!(inventory.owner().name, "inventory");
        assert_eq!(inventory.owner().max_instances, Some(2));
        assert!(inventory.may_announce("inventory.lookup").is_ok());
        assert!(matches!(
            inventory.may_announce("search"),
            Err(RegistryError::PermissionDenied { .. })
        ));
        let search = r
            .authenticate(&MetadataMap::new(), &["spiffe://t/search".into()])
            .expect("known identity");
        assert_eq!(search.owner().name, "search");
        for (metadata, ids) in [
            (bearer("another-token-0123456789abcdef"), vec![]),
            (MetadataMap::new(), vec![]),
            (MetadataMap::new(), vec!["spiffe://t/other".to_owned()]),
            // A wrong token is not rescued by a good certificate.
            (
                bearer("another-token-0123456789abcdef"),
                vec!["spiffe://t/search".to_owned()],
            ),
        ] {
            assert!(matches!(
                r.authenticate(&metadata, &ids),
                Err(RegistryError::Unauthenticated { .. })
            ));
        }
    }

    #[test]
    fn bad_files_name_the_entry() {
        for (yaml, expected) in [
            (
                "registrants:\n  - {name: a, tools: [x]}\n",
                "registrants[0]: give token_sha256",
            ),
            (
                "registrants:\n  - {name: a, token_sha256: abc, tools: [x]}\n",
                "registrants[0].token_sha256: 64 hexadecimal digits",
            ),
            (
                "registrants:\n  - {name: 'a b', identities: [x], tools: [x]}\n",
                "registrants[0].name",
            ),
            (
                "registrants:\n  - {name: a, identities: [x], tools: []}\n",
                "registrants[0].tools",
            ),
            (
                "registrants:\n  - {name: a, identities: [x], tools: [x]}\n  - {name: b, identities: [x], tools: [y]}\n",
                "registrants[1].identities[0]: another registrant",
            ),
            (
                "registrants:\n  - {name: a, identities: [x], tools: [x], colour: red}\n",
                "unknown field",
            ),
        ] {
            let error = Registrants::parse(yaml).expect_err(yaml);
            assert!(error.contains(expected), "{yaml}: {error}");
        }
    }
}
