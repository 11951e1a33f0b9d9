//! Glob patterns over names: `*` matches any run of characters (the empty
//! run too), every other character matches itself.
//!
//! Matching is linear in the name and the pattern: the parts between stars
//! are found left to right, each at its first occurrence, which is enough
//! because a star can absorb anything a later part leaves behind. There is
//! no backtracking, so no pattern can make a match slow.

use std::fmt;

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    shape: Shape,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// No star: the name must equal the pattern.
    Exact,
    /// `head*mid1*mid2*…*tail`: the name starts with `head`, ends with
    /// `tail`, and holds the middle parts in order in between.
    Starred {
        head: String,
        middle: Vec<String>,
        tail: String,
    },
}

impl Pattern {
    /// Compiles `source`; every string is a valid pattern.
    pub fn new(source: &str) -> Self {
        let shape = if source.contains('*') {
            let mut parts: Vec<&str> = source.split('*').collect();
            let tail = parts.pop().unwrap_or_default().to_owned();
            let head = if parts.is_empty() {
                String::new()
            } else {
                parts.remove(0).to_owned()
            };
            let middle = parts
                .into_iter()
                .filter(|part| !part.is_empty())
                .map(str::to_owned)
                .collect();
            Shape::Starred { head, middle, tail }
        } else {
            Shape::Exact
        };
        Self {
            source: source.to_owned(),
            shape,
        }
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern has no star and so matches one name only.
    pub fn is_exact(&self) -> bool {
        self.shape == Shape::Exact
    }

    /// Whether `name` matches the pattern.
    pub fn matches(&self, name: &str) -> bool {
        match &self.shape {
            Shape::Exact => name == self.source,
            Shape::Starred { head, middle, tail } => {
                if name.len() < head.len() + tail.len()
                    || !name.starts_with(head.as_str())
                    || !name.ends_with(tail.as_str())
                {
                    return false;
                }
                let mut rest = &name[head.len()..name.len() - tail.len()];
                for part in middle {
                    match rest.find(part.as_str()) {
                        Some(at) => rest = &rest[at + part.len()..],
                        None => return false,
                    }
                }
                true
            }
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

#[cfg(test)]
mod tests {
    use super::Pattern;
    use proptest::prelude::*;

    /// Backtracking over characters: slow, obviously right.
    fn reference(pattern: &[char], name: &[char]) -> bool {
        match pattern.split_first() {
            None => name.is_empty(),
            Some(('*', rest)) => (0..=name.len()).any(|skip| reference(rest, &name[skip..])),
            Some((c, rest)) => name.first() == Some(c) && reference(rest, &name[1..]),
        }
    }

    fn matches(pattern: &str, name: &str) -> bool {
        Pattern::new(pattern).matches(name)
    }

    #[test]
    fn literal_and_star() {
        assert!(matches("lookup_customer", "lookup_customer"));
        assert!(!matches("lookup_customer", "lookup_customers"));
        assert!(matches("invoice.*", "invoice.create"));
        assert!(matches("invoice.*", "invoice."));
        assert!(!matches("invoice.*", "invoices.create"));
        assert!(matches("*", ""));
        assert!(matches("*", "anything"));
        assert!(matches("a*b*c", "abc"));
        assert!(matches("a*b*c", "a-b-b-c"));
        assert!(!matches("a*b*c", "acb"));
        assert!(!matches("ab*ba", "aba"));
        assert!(matches("*.v2", "search.v2"));
        assert!(!matches("", "x"));
        assert!(matches("", ""));
    }

    #[test]
    fn multibyte_names() {
        assert!(matches("é*ü", "éaü"));
        assert!(matches("*ü*", "aüb"));
        assert!(!matches("é*é", "é"));
    }

    #[test]
    fn many_stars_against_a_long_name_stay_fast() {
        let pattern = format!("{}b", "a*".repeat(200));
        let name = "a".repeat(100_000);
        let started = std::time::Instant::now();
        assert!(!matches(&pattern, &name));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    proptest! {
        #[test]
        fn agrees_with_the_reference(pattern in "[ab.é*]{0,10}", name in "[ab.é]{0,14}") {
            let p: Vec<char> = pattern.chars().collect();
            let n: Vec<char> = name.chars().collect();
            prop_assert_eq!(matches(&pattern, &name), reference(&p, &n));
        }

        #[test]
        fn a_pattern_without_stars_matches_itself(name in "[a-z_.]{0,20}") {
            prop_assert!(matches(&name, &name));
        }
    }
}
