//! Tool-name patterns: `*` matches any run of characters, everything else
//! itself. `invoice.*` matches `invoice.create`; `*` matches every name.
//!
//! Matching is linear in the name's length times the pattern's (no
//! backtracking blow-up, whatever the pattern).

use std::fmt;

/// A compiled tool-name pattern.
#[derive(Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    /// The literal runs between `*`s.
    parts: Vec<String>,
    anchored_start: bool,
    anchored_end: bool,
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pattern({:?})", self.text)
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Longest pattern accepted, in bytes.
pub const MAX_PATTERN_LEN: usize = 256;

impl Pattern {
    /// Compiles `text`; refuses an empty or overlong pattern.
    pub fn new(text: &str) -> Result<Self, String> {
        if text.is_empty() {
            return Err("an empty pattern matches nothing; use * for every tool".into());
        }
        if text.len() > MAX_PATTERN_LEN {
            return Err(format!("longer than {MAX_PATTERN_LEN} bytes"));
        }
        Ok(Self {
            text: text.to_owned(),
            parts: text
                .split('*')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            anchored_start: !text.starts_with('*'),
            anchored_end: !text.ends_with('*'),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        if !self.text.contains('*') {
            return self.text == name;
        }
        let mut rest = name;
        let last = self.parts.len().saturating_sub(1);
        for (i, part) in self.parts.iter().enumerate() {
            if i == 0 && self.anchored_start {
                let Some(after) = rest.strip_prefix(part.as_str()) else {
                    return false;
                };
                rest = after;
            } else if i == last && self.anchored_end {
                return rest.len() >= part.len() && rest.ends_with(part.as_str());
            } else {
                // Leftmost match is always safe for the middle parts: any
                // later match leaves a suffix of what this one leaves.
                let Some(at) = rest.find(part.as_str()) else {
                    return false;
                };
                rest = &rest[at + part.len()..];
            }
        }
        !self.anchored_end || rest.is_empty() || self.parts.is_empty()
    }
}

/// Whether any of `patterns` matches `name`.
pub fn any_matches(patterns: &[Pattern], name: &str) -> bool {
    patterns.iter().any(|p| p.matches(name))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The textbook recursive matcher, exponential but obviously right.
    fn reference(pattern: &[u8], name: &[u8]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some((b'*', rest)) => (0..=name.len()).any(|i| reference(rest, &name[i..])),
            Some((c, rest)) => name.first() == Some(c) && reference(rest, &name[1..]),
        }
    }

    #[test]
    fn patterns_match_as_documented() {
        let p = |t: &str| Pattern::new(t).expect("valid");
        assert!(p("invoice.*").matches("invoice.create"));
        assert!(!p("invoice.*").matches("invoices.create"));
        assert!(p("*").matches("anything"));
        assert!(p("*").matches(""));
        assert!(p("lookup").matches("lookup"));
        assert!(!p("lookup").matches("lookup2"));
        assert!(p("*_read").matches("stock_read"));
        assert!(!p("*_read").matches("stock_read_all"));
        assert!(p("a*b*c").matches("abc"));
        assert!(p("a*b*c").matches("aXbYbZc"));
        assert!(!p("a*b*c").matches("aXbYcZ"));
        assert!(p("ab*ba").matches("aba") == reference(b"ab*ba", b"aba"));
        assert!(Pattern::new("").is_err());
        assert!(Pattern::new(&"x".repeat(MAX_PATTERN_LEN + 1)).is_err());
    }

    proptest! {
        #[test]
        fn agrees_with_the_reference(pattern in "[ab*.]{1,8}", name in "[ab.]{0,10}") {
            let compiled = Pattern::new(&pattern).expect("valid");
            prop_assert_eq!(compiled.matches(&name), reference(pattern.as_bytes(), name.as_bytes()));
        }
    }
}
