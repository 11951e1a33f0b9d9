//! The policy's `approvals`: which calls wait for a person, and who decides
//! (docs/approvals.md).
//!
//! ```yaml
//! approvals:
//!   - name: large-refunds
//!     tools: ["billing.refund"]
//!     when: ["/amount > 100"]          # every condition holds
//!     approvers: {groups: [finance-leads]}
//!     reason: Refunds over 100 need a finance lead
//!     expires_after: 30m
//!   - name: destructive
//!     destructive: true                # tools whose descriptor says so
//!     approvers: {callers: [alice, bob]}
//!     webhook: https://hooks.example.com/approvals
//! ```
//!
//! The first rule (in file order) that matches a call holds it. A rule
//! matches a call of a tool one of its `tools` patterns names (all tools
//! when it has none) whose descriptor meets its `destructive` (when set),
//! made by one of its `callers` or `groups` (everyone when it names none),
//! with arguments that meet every condition of its `when`.

mod condition;

use std::{collections::HashSet, time::Duration};

use serde::Deserialize;
use toolmesh_proto::pb::ToolDescriptor;

pub use condition::Condition;

use super::{Caller, Pattern, error::FormatError};

/// How long a call waits for a decision when its rule does not say.
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(15 * 60);
/// Longest a rule may let a call wait.
pub const MAX_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);
/// Longest rule name and reason, in bytes.
const MAX_TEXT: usize = 512;

/// Who may decide a call a rule holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approvers {
    /// Caller ids.
    #[serde(default)]
    pub callers: Vec<String>,
    /// Groups (an API key's `groups`, a JWT's groups claim).
    #[serde(default)]
    pub groups: Vec<String>,
}

impl Approvers {
    /// Whether `caller` is one of them.
    pub fn include(&self, caller: &Caller) -> bool {
        self.callers.contains(&caller.id) || caller.groups.iter().any(|g| self.groups.contains(g))
    }

    /// `callers alice, bob or groups finance`, for messages.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.callers.is_empty() {
            parts.push(format!("callers {}", self.callers.join(", ")));
        }
        if !self.groups.is_empty() {
            parts.push(format!("groups {}", self.groups.join(", ")));
        }
        parts.join(" or ")
    }
}

/// One rule.
#[derive(Debug)]
pub struct ApprovalRule {
    /// Its name, as approvers and records see it.
    pub name: String,
    /// Why calls it holds need a person, for the approvers and the caller.
    pub reason: String,
    tools: Vec<Pattern>,
    destructive: Option<bool>,
    every_caller: bool,
    callers: HashSet<String>,
    groups: HashSet<String>,
    when: Vec<Condition>,
    /// Who decides.
    pub approvers: Approvers,
    /// Whether the caller of a held call may decide it (when it is an
    /// approver).
    pub self_approval: bool,
    /// How long a held call waits for a decision.
    pub expires_after: Duration,
    /// Where each held call (and its decision) is posted.
    pub webhook: Option<url::Url>,
    /// Whether approvers see the arguments whole, rather than redacted as
    /// the audit log redacts them.
    pub reveal_arguments: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleEntry {
    #[serde(default)]
    name: String,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    destructive: Option<bool>,
    #[serde(default)]
    callers: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    when: Vec<String>,
    approvers: Approvers,
    #[serde(default)]
    self_approval: bool,
    #[serde(default, with = "humantime_serde_opt")]
    expires_after: Option<Duration>,
    #[serde(default)]
    webhook: Option<String>,
    #[serde(default)]
    reveal_arguments: bool,
}

/// `expires_after: 30m`, as humantime writes durations.
mod humantime_serde_opt {
    use std::time::Duration;

    use serde::{Deserialize as _, Deserializer};

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(deserializer)?;
        humantime::parse_duration(&text)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a duration: {e}")))
    }
}

impl ApprovalRule {
    pub(super) fn new(entry: RuleEntry, index: usize) -> Result<Self, FormatError> {
        let name = if entry.name.is_empty() {
            format!("approvals[{index}]")
        } else {
            entry.name
        };
        let at = format!("approvals[{index}] ({name})");
        if name.len() > MAX_TEXT || entry.reason.len() > MAX_TEXT {
            return Err(FormatError::entry(
                at,
                format!("`name` and `reason` are at most {MAX_TEXT} bytes"),
            ));
        }
        if entry.approvers.callers.is_empty() && entry.approvers.groups.is_empty() {
            return Err(FormatError::entry(
                at,
                "`approvers` names no caller and no group, so no call it holds could run",
            ));
        }
        let lists = [
            ("tools", &entry.tools),
            ("callers", &entry.callers),
            ("groups", &entry.groups),
            ("approvers.callers", &entry.approvers.callers),
            ("approvers.groups", &entry.approvers.groups),
        ];
        for (list, items) in lists {
            if items.iter().any(String::is_empty) {
                return Err(FormatError::entry(
                    at,
                    format!("`{list}` has an empty entry"),
                ));
            }
        }
        let when = entry
            .when
            .iter()
            .map(|c| Condition::parse(c))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|problem| FormatError::entry(&at, format!("`when`: {problem}")))?;
        let expires_after = entry.expires_after.unwrap_or(DEFAULT_EXPIRY);
        if expires_after.is_zero() || expires_after > MAX_EXPIRY {
            return Err(FormatError::entry(
                at,
                format!(
                    "`expires_after` is more than zero and at most {}",
                    humantime::format_duration(MAX_EXPIRY)
                ),
            ));
        }
        let webhook = entry
            .webhook
            .map(|text| match url::Url::parse(&text) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => Ok(url),
                Ok(_) => Err(FormatError::entry(&at, "`webhook` is an http(s) URL")),
                Err(e) => Err(FormatError::entry(
                    &at,
                    format!("`webhook` is not a URL: {e}"),
                )),
            })
            .transpose()?;
        Ok(Self {
            name,
            reason: entry.reason,
            tools: entry.tools.iter().map(|t| Pattern::new(t)).collect(),
            destructive: entry.destructive,
            every_caller: (entry.callers.is_empty() && entry.groups.is_empty())
                || entry.callers.iter().any(|c| c == "*"),
            callers: entry.callers.into_iter().collect(),
            groups: entry.groups.into_iter().collect(),
            when,
            approvers: entry.approvers,
            self_approval: entry.self_approval,
            expires_after,
            webhook,
            reveal_arguments: entry.reveal_arguments,
        })
    }

    /// Whether the rule may hold a call of `tool` by `caller`, before its
    /// arguments are read.
    fn may_hold(&self, caller: &Caller, tool: &ToolDescriptor) -> bool {
        (self.tools.is_empty() || self.tools.iter().any(|p| p.matches(&tool.name)))
            && self
                .destructive
                .is_none_or(|wanted| tool.destructive == Some(wanted))
            && (self.every_caller
                || self.callers.contains(&caller.id)
                || caller.groups.iter().any(|g| self.groups.contains(g)))
    }

    /// Whether the rule reads the call's arguments.
    fn reads_arguments(&self) -> bool {
        !self.when.is_empty()
    }
}

/// The rules of a policy file, in order.
#[derive(Debug, Default)]
pub struct ApprovalRules {
    rules: Vec<ApprovalRule>,
}

impl ApprovalRules {
    pub(super) fn parse(entries: Vec<RuleEntry>) -> Result<Self, FormatError> {
        let rules = entries
            .into_iter()
            .enumerate()
            .map(|(index, entry)| ApprovalRule::new(entry, index))
            .collect::<Result<Vec<_>, _>>()?;
        let mut names = HashSet::new();
        if let Some(twice) = rules.iter().find(|r| !names.insert(r.name.as_str())) {
            return Err(FormatError::entry(
                format!("approvals ({})", twice.name),
                "two rules have this name",
            ));
        }
        Ok(Self { rules })
    }

    /// Whether there are none: no call is ever held.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rule that holds a call of `tool` by `caller` with `arguments`;
    /// `arguments` is asked for only when a rule that may hold the call
    /// reads them (`None`: they do not parse, and the call's own checks
    /// will refuse it).
    pub fn holding<'a>(
        &'a self,
        caller: &Caller,
        tool: &ToolDescriptor,
        mut arguments: impl FnMut() -> Option<serde_json::Value>,
    ) -> Option<&'a ApprovalRule> {
        let mut parsed: Option<Option<serde_json::Value>> = None;
        self.rules.iter().find(|rule| {
            if !rule.may_hold(caller, tool) {
                return false;
            }
            if !rule.reads_arguments() {
                return true;
            }
            let Some(arguments) = parsed.get_or_insert_with(&mut arguments) else {
                return false;
            };
            rule.when.iter().all(|c| c.holds(arguments))
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rules(yaml: &str) -> Result<ApprovalRules, FormatError> {
        let entries: Vec<RuleEntry> = serde_yaml_ng::from_str(yaml)?;
        ApprovalRules::parse(entries)
    }

    fn caller(id: &str, groups: &[&str]) -> Caller {
        Caller {
            id: id.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }

    fn tool(name: &str, destructive: Option<bool>) -> ToolDescriptor {
        ToolDescriptor {
            name: name.into(),
            destructive,
            ..Default::default()
        }
    }

    const RULES: &str = r#"
- name: large-refunds
  tools: ["billing.refund"]
  when: ["/amount > 100"]
  approvers: {groups: [finance]}
  reason: big money
- name: destructive
  destructive: true
  groups: [agents]
  approvers: {callers: [alice]}
  expires_after: 2m
"#;

    #[test]
    fn the_first_matching_rule_holds_the_call() {
        let rules = rules(RULES).expect("valid");
        let agent = caller("bot", &["agents"]);
        let refund = tool("billing.refund", Some(true));
        let held = |amount: i64| {
            rules
                .holding(&agent, &refund, || Some(json!({"amount": amount})))
                .map(|r| r.name.as_str())
        };
        assert_eq!(held(500), Some("large-refunds"));
        assert_eq!(held(50), Some("destructive"), "the next rule");
        let other = caller("someone", &[]);
        assert_eq!(
            rules
                .holding(&other, &refund, || Some(json!({"amount": 5})))
                .map(|r| r.name.as_str()),
            None,
            "not an agent, not large"
        );
        let rule = rules
            .holding(&agent, &tool("drop_table", Some(true)), || None)
            .expect("destructive");
        assert_eq!(rule.expires_after, Duration::from_secs(120));
        assert!(
            rules
                .holding(&agent, &tool("drop_table", None), || None)
                .is_none(),
            "a tool that does not say is not matched by the hint"
        );
    }

    #[test]
    fn arguments_are_read_only_when_a_rule_needs_them() {
        let rules = rules(RULES).expect("valid");
        let mut reads = 0;
        let _ = rules.holding(&caller("x", &[]), &tool("ping", None), || {
            reads += 1;
            None
        });
        assert_eq!(reads, 0);
        let _ = rules.holding(&caller("x", &[]), &tool("billing.refund", None), || {
            reads += 1;
            Some(json!({"amount": 1}))
        });
        assert_eq!(reads, 1);
    }

    #[test]
    fn approvers_are_ids_or_groups() {
        let approvers = Approvers {
            callers: vec!["alice".into()],
            groups: vec!["finance".into()],
        };
        assert!(approvers.include(&caller("alice", &[])));
        assert!(approvers.include(&caller("carol", &["finance"])));
        assert!(!approvers.include(&caller("finance", &[])));
        assert_eq!(approvers.describe(), "callers alice or groups finance");
    }

    #[test]
    fn bad_rules_are_refused_with_their_place() {
        for (yaml, says) in [
            ("- {tools: [x]}", "missing field `approvers`"),
            ("- {approvers: {}}", "names no caller"),
            ("- {approvers: {callers: ['']}}", "has an empty entry"),
            (
                "- {approvers: {callers: [a]}, when: ['amount > 1']}",
                "not a JSON pointer",
            ),
            (
                "- {approvers: {callers: [a]}, expires_after: 30d}",
                "at most",
            ),
            (
                "- {approvers: {callers: [a]}, expires_after: soon}",
                "not a duration",
            ),
            (
                "- {approvers: {callers: [a]}, webhook: 'ftp://x'}",
                "http(s)",
            ),
            (
                "- {name: a, approvers: {callers: [a]}}\n- {name: a, approvers: {callers: [b]}}",
                "two rules",
            ),
            ("- {approvers: {callers: [a]}, tool: [x]}", "unknown field"),
        ] {
            let error = rules(yaml).expect_err(yaml).to_string();
            assert!(error.contains(says), "{yaml}: {error}");
        }
        let error = rules("- {approvers: {callers: [a]}}\n- {approvers: {}}")
            .expect_err("second")
            .to_string();
        assert!(error.starts_with("approvals[1]"), "{error}");
    }
}
