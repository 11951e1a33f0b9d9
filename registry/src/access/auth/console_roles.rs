//! The policy's `console`: what each viewer may do on the console's pages.
//!
//! ```yaml
//! console:
//!   - groups: [operators]
//!     can: [view, invoke, approve]
//!   - callers: [auditor]
//!     can: [view]
//! ```
//!
//! A viewer's rights are the union of the entries that name it (by caller
//! id, by group, or `callers: ["*"]`). With a `console` section, a viewer
//! no entry names is refused by the console; without one, every viewer
//! the registry admits has every right. Rights never widen what the rest
//! of the policy grants: a viewer sees and tries only the tools its rules
//! give it, and decides only the approvals whose rule names it.

use serde::Deserialize;

use super::{Caller, error::FormatError, policy::Named};

/// What a viewer may do on the console.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsoleRights {
    /// See the catalog, tools, instances, calls and approvals.
    pub view: bool,
    /// Call tools from the playground (as itself).
    pub invoke: bool,
    /// Approve or deny held calls (those whose rule names it).
    pub approve: bool,
}

impl ConsoleRights {
    /// Every right: the console of a policy with no `console` section.
    pub const ALL: Self = Self {
        view: true,
        invoke: true,
        approve: true,
    };

    fn union(self, other: Self) -> Self {
        Self {
            view: self.view || other.view,
            invoke: self.invoke || other.invoke,
            approve: self.approve || other.approve,
        }
    }
}

/// One right, as the file names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Right {
    View,
    Invoke,
    Approve,
}

/// An entry of the `console` section, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RoleEntry {
    #[serde(default)]
    callers: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    can: Vec<Right>,
}

/// The parsed `console` section.
#[derive(Debug, Default)]
pub struct ConsoleRoles {
    roles: Vec<Role>,
}

#[derive(Debug)]
struct Role {
    names: Named,
    rights: ConsoleRights,
}

impl ConsoleRoles {
    /// The section's entries, checked: each names a caller or a group and
    /// at least one right; `invoke` and `approve` come with `view`.
    pub(crate) fn parse(entries: Vec<RoleEntry>) -> Result<Self, FormatError> {
        let roles = entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| Role::new(entry, &format!("console[{index}]")))
            .collect::<Result<_, _>>()?;
        Ok(Self { roles })
    }

    /// What `caller` may do: the union of the entries naming it.
    pub fn rights(&self, caller: &Caller) -> ConsoleRights {
        self.roles
            .iter()
            .filter(|role| role.applies_to(caller))
            .fold(ConsoleRights::default(), |rights, role| {
                rights.union(role.rights)
            })
    }
}

impl Role {
    fn new(entry: RoleEntry, name: &str) -> Result<Self, FormatError> {
        if entry.can.is_empty() {
            return Err(FormatError::entry(
                name,
                "`can` is empty: give view, invoke or approve",
            ));
        }
        let has = |right| entry.can.contains(&right);
        // Deciding or trying a tool from a page one may not open means
        // nothing: either right brings the pages with it.
        let rights = ConsoleRights {
            view: true,
            invoke: has(Right::Invoke),
            approve: has(Right::Approve),
        };
        Ok(Self {
            names: Named::new(entry.callers, entry.groups, name)?,
            rights,
        })
    }

    fn applies_to(&self, caller: &Caller) -> bool {
        self.names.include(caller)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(id: &str, groups: &[&str]) -> Caller {
        Caller {
            id: id.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn roles(yaml: &str) -> Result<ConsoleRoles, FormatError> {
        let entries: Vec<RoleEntry> = serde_yaml_ng::from_str(yaml).map_err(FormatError::from)?;
        ConsoleRoles::parse(entries)
    }

    #[test]
    fn rights_are_the_union_of_the_entries_naming_the_viewer() {
        let roles = roles(
            "- {groups: [ops], can: [invoke]}\n\
             - {callers: [alice], can: [approve]}\n\
             - {callers: [auditor], can: [view]}\n",
        )
        .expect("valid");
        let alice = roles.rights(&caller("alice", &["ops"]));
        assert_eq!(alice, ConsoleRights::ALL);
        let auditor = roles.rights(&caller("auditor", &[]));
        assert!(auditor.view && !auditor.invoke && !auditor.approve);
        assert_eq!(
            roles.rights(&caller("stranger", &["agents"])),
            ConsoleRights::default(),
            "named by no entry: nothing"
        );
    }

    #[test]
    fn every_caller_is_star_in_callers() {
        let roles = roles("- {callers: ['*'], can: [view]}").expect("valid");
        assert!(roles.rights(&caller("", &[])).view);
    }

    #[test]
    fn entries_that_grant_nothing_or_to_nobody_are_refused() {
        for bad in [
            "- {can: [view]}",
            "- {groups: ['*'], can: [view]}",
            "- {callers: [a], can: []}",
            "- {callers: [''], can: [view]}",
            "- {callers: [a], can: [admin]}",
            "- {callers: [a], can: [view], extra: 1}",
        ] {
            assert!(roles(bad).is_err(), "{bad}");
        }
    }
}
