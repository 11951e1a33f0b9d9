//! Versions side by side: how a tool's versions are told apart, ordered,
//! and named in a call.
//!
//! Every version of a tool is its own catalog entry, keyed `name@version`
//! (an unversioned tool is keyed by its bare name, as before versions
//! existed). A version is [semver](https://semver.org). The versions of one
//! name form a [`Family`]; a call by name alone goes to the family's
//! default (the operator's choice, else the highest release), or is split
//! by weight between versions ([`policy`]).

pub(crate) mod file;
pub mod policy;
mod resolve;
pub(crate) mod split;

use std::{cmp::Ordering, sync::Arc};

use toolmesh_proto::pb::ToolDescriptor;

use crate::{catalog::ToolState, error::RegistryError};

/// The catalog key of a descriptor: `name@version`, or the bare name when
/// it has no version.
pub fn key(descriptor: &ToolDescriptor) -> String {
    key_of(&descriptor.name, &descriptor.version)
}

/// The catalog key of `name` at `version` (`""`: unversioned).
pub fn key_of(name: &str, version: &str) -> String {
    if version.is_empty() {
        name.to_owned()
    } else {
        format!("{name}@{version}")
    }
}

/// The name part of a key or a reference (`weather@1.4.2` → `weather`).
pub fn name_of(reference: &str) -> &str {
    reference
        .split_once('@')
        .map_or(reference, |(name, _)| name)
}

/// A tool as a call or a lookup names it: `name`, or `name@version`, or
/// `name` with a separate version field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// The version asked for; `None`: whichever the catalog chooses.
    pub version: Option<&'a str>,
}

impl<'a> Reference<'a> {
    /// Reads `tool` (`name` or `name@version`) and `version` (a field
    /// beside it, `""` if not given); `field` names the request's field in
    /// errors. The two may not disagree, and a version must be semver.
    pub fn parse(tool: &'a str, version: &'a str, field: &str) -> Result<Self, RegistryError> {
        let (name, inline) = match tool.split_once('@') {
            Some((name, v)) => (name, Some(v)),
            None => (tool, None),
        };
        let given = (!version.is_empty()).then_some(version);
        let version = match (inline, given) {
            (Some(a), Some(b)) if a != b => {
                return Err(RegistryError::InvalidRequest {
                    field: "version".into(),
                    reason: format!("{field} names version {a:?} and version names {b:?}"),
                });
            }
            (Some(a), _) => Some(a),
            (None, b) => b,
        };
        if let Some(v) = version {
            check(v).map_err(|reason| RegistryError::InvalidRequest {
                field: if inline.is_some() {
                    field.into()
                } else {
                    "version".into()
                },
                reason,
            })?;
        }
        Ok(Self { name, version })
    }

    /// The catalog key of the exact version asked for, if one is.
    pub fn key(&self) -> Option<String> {
        self.version.map(|v| key_of(self.name, v))
    }
}

/// Checks a version string: semver (`1.4.2`, `2.0.0-rc.1`), at most 64
/// bytes. The error says why, for a field's reason.
pub fn check(version: &str) -> Result<semver::Version, String> {
    if version.len() > super::descriptor::MAX_LABEL_BYTES {
        return Err(format!(
            "longer than {} bytes",
            super::descriptor::MAX_LABEL_BYTES
        ));
    }
    semver::Version::parse(version).map_err(|e| {
        format!("{version:?} is not a semantic version such as 1.4.2 or 2.0.0-rc.1 ({e})")
    })
}

/// How two versions of one tool rank for the default: releases above
/// everything, highest first; then the unversioned entry; then
/// prereleases, highest first. `Less` means `a` ranks first.
pub fn precedence(a: &str, b: &str) -> Ordering {
    rank(a).cmp(&rank(b))
}

/// A sort key: lower ranks first.
fn rank(version: &str) -> (u8, std::cmp::Reverse<Option<semver::Version>>) {
    match semver::Version::parse(version) {
        Ok(v) if v.pre.is_empty() => (0, std::cmp::Reverse(Some(v))),
        Ok(v) => (2, std::cmp::Reverse(Some(v))),
        Err(_) => (1, std::cmp::Reverse(None)),
    }
}

/// The live versions of one tool, best first by [`precedence`], and which
/// of them a call by name alone goes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    versions: Vec<Arc<ToolState>>,
    default: usize,
}

impl Family {
    /// The family of `versions` (not empty), its default the version
    /// `chosen` names if live, else the best ranked.
    pub(crate) fn new(mut versions: Vec<Arc<ToolState>>, chosen: Option<&str>) -> Option<Self> {
        if versions.is_empty() {
            return None;
        }
        versions.sort_by(|a, b| precedence(&a.descriptor.version, &b.descriptor.version));
        let default = chosen
            .and_then(|v| versions.iter().position(|t| t.descriptor.version == v))
            .unwrap_or(0);
        Some(Self { versions, default })
    }

    /// The version a call by name alone goes to, when no split applies.
    pub fn default(&self) -> &Arc<ToolState> {
        &self.versions[self.default]
    }

    /// Every live version, best first.
    pub fn versions(&self) -> &[Arc<ToolState>] {
        &self.versions
    }

    /// One live version.
    pub fn version(&self, version: &str) -> Option<&Arc<ToolState>> {
        self.versions
            .iter()
            .find(|t| t.descriptor.version == version)
    }

    /// The live version whose definition has `digest`.
    pub fn with_digest(&self, digest: &str) -> Option<&Arc<ToolState>> {
        self.versions.iter().find(|t| *t.digest == *digest)
    }

    /// The live versions' names, best first (`""`: the unversioned one).
    pub fn version_names(&self) -> Vec<String> {
        self.versions
            .iter()
            .map(|t| t.descriptor.version.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests;
