//! Which version a call goes to: the one it names, else the one whose
//! digest it carries, else the operator's split, else the default.

use std::sync::Arc;

use toolmesh_proto::pb;

use super::{Family, Reference};
use crate::{
    catalog::{Catalog, Entry, ToolState},
    error::RegistryError,
};

impl Catalog {
    /// The version of `reference` a call goes to, with what is compiled
    /// from it; `shown` is the digest the call carries (`""`: none).
    ///
    /// - A version named: that one, and `shown` must be its digest.
    /// - Else a digest carried: the live version that has it, or the
    ///   refusal naming what changed since (against the default).
    /// - Else the operator's split, if one is set for the tool.
    /// - Else the default.
    pub fn resolve(&self, reference: &Reference<'_>, shown: &str) -> Result<Entry, RegistryError> {
        let family = self.live_family(reference.name)?;
        let tool = match reference.version {
            Some(version) => {
                let tool = family
                    .version(version)
                    .ok_or_else(|| unknown(&family, version))?;
                self.check_shown(tool, shown)?;
                tool.clone()
            }
            None if !shown.is_empty() => match family.with_digest(shown) {
                Some(tool) => tool.clone(),
                None => {
                    self.check_shown(family.default(), shown)?;
                    family.default().clone()
                }
            },
            None => self.split(reference.name, &family),
        };
        Ok(self.entry_of(tool))
    }

    /// The version `reference` names, or its default: what `GetTool`
    /// shows.
    pub fn lookup(&self, reference: &Reference<'_>) -> Result<Arc<ToolState>, RegistryError> {
        let family = self.live_family(reference.name)?;
        match reference.version {
            Some(version) => family
                .version(version)
                .cloned()
                .ok_or_else(|| unknown(&family, version)),
            None => Ok(family.default().clone()),
        }
    }

    fn live_family(&self, name: &str) -> Result<Arc<Family>, RegistryError> {
        self.store
            .family(name)
            .ok_or_else(|| RegistryError::ToolNotFound {
                tool: name.to_owned(),
            })
    }

    /// The version a call by name alone goes to.
    fn split(&self, name: &str, family: &Family) -> Arc<ToolState> {
        let policy = self.store.resident().view.policy();
        let Some(split) = policy.tool(name).filter(|t| !t.split.is_empty()) else {
            return family.default().clone();
        };
        let live: Vec<(&str, u32)> = split
            .split
            .iter()
            .filter(|(v, _)| family.version(v).is_some())
            .map(|(v, w)| (v.as_str(), *w))
            .collect();
        self.splitter
            .pick(name, &live)
            .and_then(|v| family.version(v))
            .unwrap_or_else(|| family.default())
            .clone()
    }

    /// The operator's deprecation notice of `tool`'s version, if any.
    pub fn deprecation(&self, tool: &ToolState) -> Option<String> {
        self.store
            .resident()
            .view
            .policy()
            .deprecation(tool.name(), &tool.descriptor.version)
            .map(str::to_owned)
    }

    /// `tool` as the API shows it: with its name's live versions and its
    /// deprecation notice.
    pub fn describe(&self, tool: &ToolState) -> pb::Tool {
        let mut shown = tool.to_proto();
        if let Some(family) = self.store.family(tool.name()) {
            shown.versions = std::iter::once(family.default().descriptor.version.clone())
                .chain(
                    family
                        .versions()
                        .iter()
                        .filter(|t| !Arc::ptr_eq(t, family.default()))
                        .map(|t| t.descriptor.version.clone()),
                )
                .collect();
        }
        shown.deprecation = self.deprecation(tool).unwrap_or_default();
        shown
    }

    /// Puts the operator's version policy in force.
    pub fn set_versions(&self, policy: Arc<super::policy::VersionPolicy>) {
        self.splitter.retain(|tool| policy.tool(tool).is_some());
        self.store.resident().view.set_policy(policy);
    }
}

/// A version `family` does not have.
fn unknown(family: &Family, version: &str) -> RegistryError {
    RegistryError::VersionNotFound {
        tool: family.default().name().to_owned(),
        version: version.to_owned(),
        live: family.version_names(),
    }
}
