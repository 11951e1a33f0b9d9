//! The operator's say over versions (`--versions-file`): per tool, the
//! default version, a split of calls by weight between versions, and the
//! versions marked deprecated.
//!
//! ```yaml
//! tools:
//!   weather:
//!     default: 1.4.2          # else the highest release
//!     split:                  # calls by name alone, by weight (sum 100)
//!       1.4.2: 90
//!       2.0.0: 10
//!     deprecated:             # still served, with this notice
//!       1.3.0: use 1.4 or later; 1.3 goes away in March
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::access::auth::{error::FormatError, reload::AuthFile};

/// Longest deprecation notice.
pub const MAX_NOTICE_BYTES: usize = 256;
/// Most tools the file may name.
pub const MAX_TOOLS: usize = 10_000;
/// Most versions one split may name.
pub const MAX_SPLIT: usize = 16;

/// The whole file.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct VersionPolicy {
    tools: BTreeMap<String, ToolVersions>,
}

/// What the operator says about one tool's versions.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ToolVersions {
    /// The version calls by name alone go to (when no split applies).
    pub default: Option<String>,
    /// Weights of the versions calls by name alone are split between,
    /// summing to 100.
    pub split: Vec<(String, u32)>,
    /// Deprecated versions, each with its notice.
    pub deprecated: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    tools: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    default: Option<String>,
    #[serde(default)]
    split: BTreeMap<String, u32>,
    #[serde(default)]
    deprecated: BTreeMap<String, String>,
}

impl VersionPolicy {
    /// Parses and checks the file's text: names the entry and field of the
    /// first problem.
    pub fn parse(text: &str) -> Result<Self, FormatError> {
        let file: File = if text.trim().is_empty() {
            File {
                tools: BTreeMap::new(),
            }
        } else {
            serde_yaml_ng::from_str(text)?
        };
        if file.tools.len() > MAX_TOOLS {
            return Err(FormatError::File(format!(
                "names {} tools, more than {MAX_TOOLS}",
                file.tools.len()
            )));
        }
        let mut tools = BTreeMap::new();
        for (name, entry) in file.tools {
            let at = |field: &str| format!("tools.{name}.{field}");
            if !crate::catalog::descriptor::is_valid_name(&name) {
                return Err(FormatError::entry(
                    format!("tools.{name}"),
                    "not a tool name: 1 to 64 of letters, digits, '_', '-' or '.'",
                ));
            }
            let version = |field: String, v: &str| {
                super::check(v)
                    .map(|_| ())
                    .map_err(|e| FormatError::entry(field, e))
            };
            if let Some(default) = &entry.default {
                version(at("default"), default)?;
            }
            if entry.split.len() > MAX_SPLIT {
                return Err(FormatError::entry(
                    at("split"),
                    format!("more than {MAX_SPLIT} versions"),
                ));
            }
            let mut sum = 0u64;
            for (v, weight) in &entry.split {
                version(at(&format!("split.{v}")), v)?;
                if *weight > 100 {
                    return Err(FormatError::entry(
                        at(&format!("split.{v}")),
                        format!("weight {weight} is more than 100"),
                    ));
                }
                sum += u64::from(*weight);
            }
            if !entry.split.is_empty() && sum != 100 {
                return Err(FormatError::entry(
                    at("split"),
                    format!("the weights sum to {sum}, not 100"),
                ));
            }
            for (v, notice) in &entry.deprecated {
                version(at(&format!("deprecated.{v}")), v)?;
                if notice.len() > MAX_NOTICE_BYTES || notice.contains(char::is_control) {
                    return Err(FormatError::entry(
                        at(&format!("deprecated.{v}")),
                        format!("a notice is one line of at most {MAX_NOTICE_BYTES} bytes"),
                    ));
                }
            }
            let split = entry.split.into_iter().filter(|(_, w)| *w > 0).collect();
            tools.insert(
                name,
                ToolVersions {
                    default: entry.default,
                    split,
                    deprecated: entry.deprecated,
                },
            );
        }
        Ok(Self { tools })
    }

    /// What the file says about `name`, if anything.
    pub fn tool(&self, name: &str) -> Option<&ToolVersions> {
        self.tools.get(name)
    }

    /// The operator's default version of `name`, if set.
    pub fn default_of(&self, name: &str) -> Option<&str> {
        self.tool(name)?.default.as_deref()
    }

    /// The deprecation notice of `name` at `version`, if it is deprecated.
    pub fn deprecation(&self, name: &str, version: &str) -> Option<&str> {
        self.tool(name)?.deprecated.get(version).map(String::as_str)
    }
}

impl AuthFile for VersionPolicy {
    const KIND: &'static str = "versions file";

    fn parse(text: &str) -> Result<Self, FormatError> {
        Self::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(text: &str) -> String {
        VersionPolicy::parse(text).expect_err(text).to_string()
    }

    #[test]
    fn a_policy_reads_defaults_splits_and_notices() {
        let policy = VersionPolicy::parse(
            "tools:\n  weather:\n    default: 1.4.2\n    split: {1.4.2: 90, 2.0.0: 10, 3.0.0-rc.1: 0}\n    deprecated:\n      1.3.0: use 1.4\n",
        )
        .expect("parses");
        assert_eq!(policy.default_of("weather"), Some("1.4.2"));
        let weather = policy.tool("weather").expect("weather");
        assert_eq!(
            weather.split,
            [("1.4.2".to_owned(), 90), ("2.0.0".to_owned(), 10)]
        );
        assert_eq!(policy.deprecation("weather", "1.3.0"), Some("use 1.4"));
        assert_eq!(policy.deprecation("weather", "1.4.2"), None);
        assert_eq!(
            VersionPolicy::parse("").expect("empty"),
            VersionPolicy::default()
        );
    }

    #[test]
    fn bad_entries_name_the_field() {
        let cases = [
            (
                "tools:\n  weather:\n    default: v1\n",
                "tools.weather.default",
            ),
            (
                "tools:\n  weather:\n    split: {1.0.0: 50, 2.0.0: 40}\n",
                "the weights sum to 90",
            ),
            (
                "tools:\n  weather:\n    split: {1.0.0: 150}\n",
                "tools.weather.split.1.0.0",
            ),
            (
                "tools:\n  weather:\n    split: {one: 100}\n",
                "tools.weather.split.one",
            ),
            (
                "tools:\n  'bad name':\n    default: 1.0.0\n",
                "tools.bad name",
            ),
            (
                "tools:\n  weather:\n    deprecated: {1.0.0: \"two\\nlines\"}\n",
                "tools.weather.deprecated.1.0.0",
            ),
            ("tools:\n  weather:\n    defualt: 1.0.0\n", "unknown field"),
        ];
        for (text, expected) in cases {
            let problem = problem(text);
            assert!(problem.contains(expected), "{text:?}: {problem}");
        }
    }
}
