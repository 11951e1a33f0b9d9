//! The call policy: which callers may call which tools.
//!
//! ```yaml
//! rules:
//!   - callers: [billing-agent]         # caller ids; "*" is every caller
//!     groups: [billing]                # or groups the caller belongs to
//!     tools: ["invoice.*", "lookup_customer"]
//!   - groups: [operators]
//!     tools: ["*"]
//!     tasks_of: ["*"]                  # sees and cancels others' tasks
//! approvals:                           # calls that wait for a person
//!   - tools: ["billing.refund"]
//!     approvers: {groups: [finance]}
//! ```
//!
//! A rule applies to a caller it names by id, or by one of the caller's
//! groups, or to every authenticated caller when its `callers` holds `*`.
//! A call is allowed when a rule that applies to the caller has a pattern
//! ([`Pattern`]) matching the tool's name, and refused otherwise. A caller
//! sees and cancels its own tasks; another caller's task of a tool when a
//! rule that applies to it gives it the tool and names that caller (or
//! `*`) in `tasks_of`. The `approvals` are [`ApprovalRules`]; the
//! `console` section, what viewers may do on the console
//! ([`ConsoleRoles`]).

use std::collections::HashSet;

use serde::Deserialize;

use super::Caller;
use super::approval_rules::{self, ApprovalRules};
use super::console_roles::{self, ConsoleRights, ConsoleRoles};
use super::error::FormatError;
use super::pattern::Pattern;
use super::reload::AuthFile;

/// A parsed policy file.
#[derive(Debug, Default)]
pub struct Policy {
    rules: Vec<Rule>,
    approvals: ApprovalRules,
    /// The `console` section; `None` when the file has none.
    console: Option<ConsoleRoles>,
}

#[derive(Debug)]
struct Rule {
    names: Named,
    tools: Vec<Pattern>,
    /// Whose tasks (of the rule's tools) the rule's callers see.
    tasks_of: HashSet<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    rules: Vec<RuleEntry>,
    #[serde(default)]
    approvals: Vec<approval_rules::RuleEntry>,
    console: Option<Vec<console_roles::RoleEntry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleEntry {
    #[serde(default)]
    callers: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    tools: Vec<String>,
    #[serde(default)]
    tasks_of: Vec<String>,
}

impl Policy {
    /// Parses the YAML of a policy file. Refuses a rule that names no
    /// caller and no group, has no tool pattern, or has an empty entry.
    pub fn parse(yaml: &str) -> Result<Self, FormatError> {
        let file: PolicyFile = serde_yaml_ng::from_str(yaml)?;
        let rules = file
            .rules
            .into_iter()
            .enumerate()
            .map(|(index, entry)| Rule::new(entry, &format!("rules[{index}]")))
            .collect::<Result<_, _>>()?;
        let approvals = ApprovalRules::parse(file.approvals)?;
        let console = file.console.map(ConsoleRoles::parse).transpose()?;
        Ok(Self {
            rules,
            approvals,
            console,
        })
    }

    /// What `caller` may do on the console: every right when the file has
    /// no `console` section ([`ConsoleRoles`]).
    pub fn console_rights(&self, caller: &Caller) -> ConsoleRights {
        self.console
            .as_ref()
            .map_or(ConsoleRights::ALL, |roles| roles.rights(caller))
    }

    /// Which calls wait for a person, and who decides them.
    pub fn approvals(&self) -> &ApprovalRules {
        &self.approvals
    }

    /// Whether a rule gives `caller` every tool (a pattern of `*` alone),
    /// so that it sees the whole catalog.
    pub fn allows_every_tool(&self, caller: &Caller) -> bool {
        self.rules.iter().any(|rule| {
            rule.applies_to(caller)
                && rule
                    .tools
                    .iter()
                    .any(|p| p.as_str().bytes().all(|b| b == b'*'))
        })
    }

    /// Whether `caller` may see and cancel a task of `tool` that `owner`
    /// started (its own always).
    pub fn sees_task(&self, caller: &Caller, owner: &str, tool: &str) -> bool {
        caller.id == owner
            || self.rules.iter().any(|rule| {
                rule.applies_to(caller)
                    && (rule.tasks_of.contains("*") || rule.tasks_of.contains(owner))
                    && rule.tools.iter().any(|p| p.matches(tool))
            })
    }

    /// Whether `caller` may call the tool `tool`.
    pub fn allows(&self, caller: &Caller, tool: &str) -> bool {
        self.rules
            .iter()
            .any(|rule| rule.applies_to(caller) && rule.tools.iter().any(|p| p.matches(tool)))
    }
}

impl Rule {
    fn new(entry: RuleEntry, name: &str) -> Result<Self, FormatError> {
        let names = Named::new(entry.callers, entry.groups, name)?;
        if entry.tools.is_empty() {
            return Err(FormatError::entry(name, "`tools` is empty"));
        }
        for (list, items) in [("tools", &entry.tools), ("tasks_of", &entry.tasks_of)] {
            if items.iter().any(String::is_empty) {
                return Err(FormatError::entry(
                    name,
                    format!("`{list}` has an empty entry"),
                ));
            }
        }
        Ok(Self {
            tools: entry.tools.iter().map(|tool| Pattern::new(tool)).collect(),
            names,
            tasks_of: entry.tasks_of.into_iter().collect(),
        })
    }

    fn applies_to(&self, caller: &Caller) -> bool {
        self.names.include(caller)
    }
}

/// Whom an entry of the file names: caller ids (`"*"`: every caller) and
/// groups.
#[derive(Debug)]
pub(super) struct Named {
    every_caller: bool,
    callers: HashSet<String>,
    groups: HashSet<String>,
}

impl Named {
    /// The callers and groups of entry `name`, checked: at least one, none
    /// empty, no `*` among the groups.
    pub(super) fn new(
        callers: Vec<String>,
        groups: Vec<String>,
        name: &str,
    ) -> Result<Self, FormatError> {
        if callers.is_empty() && groups.is_empty() {
            return Err(FormatError::entry(
                name,
                "names no `callers` and no `groups`, so applies to nobody",
            ));
        }
        for (list, items) in [("callers", &callers), ("groups", &groups)] {
            if items.iter().any(String::is_empty) {
                return Err(FormatError::entry(
                    name,
                    format!("`{list}` has an empty entry"),
                ));
            }
        }
        if groups.iter().any(|group| group == "*") {
            return Err(FormatError::entry(
                name,
                "`groups` holds `*`: write `callers: [\"*\"]` for every caller",
            ));
        }
        Ok(Self {
            every_caller: callers.iter().any(|caller| caller == "*"),
            callers: callers.into_iter().collect(),
            groups: groups.into_iter().collect(),
        })
    }

    /// Whether `caller` is one of them.
    pub(super) fn include(&self, caller: &Caller) -> bool {
        self.every_caller
            || self.callers.contains(&caller.id)
            || caller
                .groups
                .iter()
                .any(|group| self.groups.contains(group))
    }
}

impl AuthFile for Policy {
    const KIND: &'static str = "policy file";

    fn parse(text: &str) -> Result<Self, FormatError> {
        Self::parse(text)
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

    const POLICY: &str = r#"
rules:
  - callers: [billing-agent]
    tools: ["invoice.*", "lookup_customer"]
  - groups: [support]
    tools: ["ticket.*"]
  - callers: ["*"]
    tools: [ping]
"#;

    #[test]
    fn tasks_of_others_are_seen_only_where_a_rule_grants_them() {
        let policy = Policy::parse(
            r#"
rules:
  - groups: [operators]
    tools: ["deploy.*"]
    tasks_of: ["*"]
  - callers: [auditor]
    tools: ["*"]
    tasks_of: [billing-agent]
  - callers: [billing-agent]
    tools: ["*"]
"#,
        )
        .expect("valid policy");
        let (operator, auditor, billing) = (
            caller("ops-1", &["operators"]),
            caller("auditor", &[]),
            caller("billing-agent", &[]),
        );
        assert!(
            policy.sees_task(&billing, "billing-agent", "anything"),
            "its own"
        );
        assert!(!policy.sees_task(&billing, "ops-1", "deploy.app"));
        assert!(policy.sees_task(&operator, "billing-agent", "deploy.app"));
        assert!(
            !policy.sees_task(&operator, "billing-agent", "invoice.send"),
            "not its tool"
        );
        assert!(policy.sees_task(&auditor, "billing-agent", "invoice.send"));
        assert!(
            !policy.sees_task(&auditor, "ops-1", "invoice.send"),
            "not named"
        );
        assert!(Policy::parse("rules: [{callers: [a], tools: [x], tasks_of: ['']}]").is_err());
    }

    #[test]
    fn allows_by_caller_id() {
        let policy = Policy::parse(POLICY).expect("valid policy");
        let billing = caller("billing-agent", &[]);
        assert!(policy.allows(&billing, "invoice.create"));
        assert!(policy.allows(&billing, "lookup_customer"));
        assert!(!policy.allows(&billing, "lookup_customers"));
        assert!(!policy.allows(&billing, "ticket.open"));
    }

    #[test]
    fn allows_by_group() {
        let policy = Policy::parse(POLICY).expect("valid policy");
        let support = caller("helpdesk", &["sales", "support"]);
        assert!(policy.allows(&support, "ticket.open"));
        assert!(!policy.allows(&support, "invoice.create"));
        assert!(!policy.allows(&caller("support", &[]), "ticket.open"));
    }

    #[test]
    fn wildcard_caller_applies_to_everyone() {
        let policy = Policy::parse(POLICY).expect("valid policy");
        assert!(policy.allows(&caller("anyone", &[]), "ping"));
        assert!(!policy.allows(&caller("anyone", &[]), "pingx"));
    }

    #[test]
    fn every_tool_is_a_star_pattern_alone() {
        let policy = Policy::parse(
            "rules:\n  - {callers: [all], tools: [\"*\"]}\n  - {groups: [ops], tools: [\"**\"]}\n  - {callers: [some], tools: [\"a*\", \"*b\"]}\n",
        )
        .expect("valid policy");
        assert!(policy.allows_every_tool(&caller("all", &[])));
        assert!(policy.allows_every_tool(&caller("x", &["ops"])));
        assert!(!policy.allows_every_tool(&caller("some", &[])));
        assert!(!policy.allows_every_tool(&caller("nobody", &[])));
    }

    #[test]
    fn denies_by_default() {
        let policy = Policy::parse("rules: []").expect("valid policy");
        assert!(!policy.allows(&caller("billing-agent", &["billing"]), "ping"));
        assert!(!Policy::default().allows(&caller("a", &[]), "ping"));
    }

    #[test]
    fn refuses_unknown_keys_with_the_line() {
        let error = Policy::parse("rules:\n  - callers: [a]\n    tool: [x]\n")
            .expect_err("unknown key")
            .to_string();
        assert!(error.contains("unknown field `tool`"), "{error}");
        assert!(error.contains("line 3"), "{error}");
    }

    #[test]
    fn refuses_rules_that_apply_to_nobody_or_nothing() {
        let nobody = Policy::parse("rules:\n  - tools: [x]\n").expect_err("nobody");
        assert!(
            nobody.to_string().starts_with("rules[0]: names no"),
            "{nobody}"
        );
        let nothing = Policy::parse("rules:\n  - callers: [a]\n  - callers: [b]\n    tools: []\n");
        assert!(nothing.is_err());
        let empty = Policy::parse("rules:\n  - callers: [a]\n    tools: ['']\n")
            .expect_err("empty pattern");
        assert!(
            empty.to_string().contains("`tools` has an empty entry"),
            "{empty}"
        );
        let star_group =
            Policy::parse("rules:\n  - groups: ['*']\n    tools: [x]\n").expect_err("star group");
        assert!(
            star_group.to_string().contains("every caller"),
            "{star_group}"
        );
    }
}
