//! The pins file:
//!
//! ```yaml
//! rules:                        # first match wins; unmatched: served as announced
//!   - tools: ["billing.*"]
//!     mode: enforce
//!   - tools: ["*"]
//!     mode: trust-on-first-use
//! pins:                         # approved digests, by name@version (or name)
//!   billing.refund@2.1.0: 3f2a...64 hex digits
//! approvers:                    # who may approve and revoke pins
//!   callers: [alice]
//!   groups: [platform]
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::{
    access::auth::{Caller, error::FormatError, pattern::Pattern, reload::AuthFile},
    catalog::{descriptor, versions},
};

/// Most rules, and most pins, the file may hold.
pub(crate) const MAX_ENTRIES: usize = 10_000;

/// What a rule does to the definitions it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Only a pinned definition is served.
    Enforce,
    /// Every definition is served; unpinned ones are flagged.
    Warn,
    /// The first definition seen is pinned; a change is held.
    TrustOnFirstUse,
}

impl Mode {
    /// As the file and the API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Warn => "warn",
            Self::TrustOnFirstUse => "trust-on-first-use",
        }
    }
}

/// The file, checked.
#[derive(Debug, Default)]
pub struct PinRules {
    rules: Vec<(Vec<Pattern>, Mode)>,
    pins: BTreeMap<String, String>,
    approver_callers: Vec<String>,
    approver_groups: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    rules: Vec<Rule>,
    #[serde(default)]
    pins: BTreeMap<String, String>,
    #[serde(default)]
    approvers: Approvers,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rule {
    tools: Vec<String>,
    mode: Mode,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Approvers {
    #[serde(default)]
    callers: Vec<String>,
    #[serde(default)]
    groups: Vec<String>,
}

impl PinRules {
    /// Parses and checks the file's text, naming the entry at fault.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        let file: File = serde_yaml_ng::from_str(text)?;
        if file.rules.len() > MAX_ENTRIES || file.pins.len() > MAX_ENTRIES {
            return Err(FormatError::File(format!(
                "more than {MAX_ENTRIES} rules or pins"
            )));
        }
        let mut rules = Vec::with_capacity(file.rules.len());
        for (i, rule) in file.rules.into_iter().enumerate() {
            if rule.tools.is_empty() {
                return Err(FormatError::entry(
                    format!("rules[{i}].tools"),
                    "name at least one tool pattern",
                ));
            }
            if let Some(j) = rule.tools.iter().position(String::is_empty) {
                return Err(FormatError::entry(
                    format!("rules[{i}].tools[{j}]"),
                    "an empty pattern",
                ));
            }
            let patterns = rule.tools.iter().map(|p| Pattern::new(p)).collect();
            rules.push((patterns, rule.mode));
        }
        for (key, digest) in &file.pins {
            let at = format!("pins.{key}");
            let name = versions::name_of(key);
            if !descriptor::is_valid_name(name) {
                return Err(FormatError::entry(
                    at,
                    "not a tool name (name or name@version)",
                ));
            }
            if let Some((_, version)) = key.split_once('@') {
                versions::check(version).map_err(|e| FormatError::entry(at.clone(), e))?;
            }
            if !descriptor::is_digest(digest) {
                return Err(FormatError::entry(
                    at,
                    "a digest is 64 lowercase hex digits, as `toolmesh tools get` shows it",
                ));
            }
        }
        Ok(Self {
            rules,
            pins: file.pins,
            approver_callers: file.approvers.callers,
            approver_groups: file.approvers.groups,
        })
    }

    /// The mode of the first rule covering `name`, if any.
    pub fn mode(&self, name: &str) -> Option<Mode> {
        self.rules
            .iter()
            .find(|(patterns, _)| patterns.iter().any(|p| p.matches(name)))
            .map(|(_, mode)| *mode)
    }

    /// The digest the file pins `key` to.
    pub fn pin(&self, key: &str) -> Option<&str> {
        self.pins.get(key).map(String::as_str)
    }

    /// Every pin the file holds.
    pub fn pins(&self) -> impl Iterator<Item = (&str, &str)> {
        self.pins.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// Who may approve: these caller ids, and members of these groups.
    pub fn approvers(&self) -> (&[String], &[String]) {
        (&self.approver_callers, &self.approver_groups)
    }

    /// Whether `caller` may approve and revoke pins.
    pub fn may_approve(&self, caller: &Caller) -> bool {
        self.approver_callers
            .iter()
            .any(|c| c == "*" || *c == caller.id)
            || self
                .approver_groups
                .iter()
                .any(|g| caller.groups.iter().any(|mine| mine == g))
    }
}

impl AuthFile for PinRules {
    const KIND: &'static str = "pins file";

    fn parse(text: &str) -> Result<Self, FormatError> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "3f2a000000000000000000000000000000000000000000000000000000000001";

    #[test]
    fn the_first_rule_that_covers_a_tool_gives_its_mode() {
        let rules = PinRules::parse(&format!(
            "rules:\n  - tools: ['billing.*']\n    mode: enforce\n  - tools: ['*']\n    mode: trust-on-first-use\npins:\n  billing.refund@2.1.0: {DIGEST}\napprovers:\n  groups: [platform]\n"
        ))
        .expect("parses");
        assert_eq!(rules.mode("billing.refund"), Some(Mode::Enforce));
        assert_eq!(rules.mode("weather"), Some(Mode::TrustOnFirstUse));
        assert_eq!(rules.pin("billing.refund@2.1.0"), Some(DIGEST));
        let caller = |id: &str, groups: &[&str]| Caller {
            id: id.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        };
        assert!(rules.may_approve(&caller("bob", &["platform"])));
        assert!(!rules.may_approve(&caller("eve", &[])));
        assert_eq!(PinRules::parse("").expect("empty").mode("x"), None);
    }

    #[test]
    fn a_bad_line_names_its_entry() {
        let cases = [
            (
                format!("pins:\n  weather@1.4: {DIGEST}\n"),
                "pins.weather@1.4",
            ),
            ("pins:\n  weather: abc\n".to_owned(), "pins.weather"),
            (format!("pins:\n  'bad name': {DIGEST}\n"), "pins.bad name"),
            (
                "rules:\n  - tools: []\n    mode: enforce\n".to_owned(),
                "rules[0].tools",
            ),
            (
                "rules:\n  - tools: ['*']\n    mode: strict\n".to_owned(),
                "unknown variant",
            ),
        ];
        for (text, expected) in cases {
            let problem = PinRules::parse(&text).expect_err(&text).to_string();
            assert!(problem.contains(expected), "{text:?}: {problem}");
        }
    }
}
