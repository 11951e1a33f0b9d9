//! The tool-name rule both the registry (at announce) and the sidecar (at
//! start) apply: the rule LLM function-calling APIs set for function names.

/// Longest tool name, in bytes.
pub const MAX_LEN: usize = 64;

/// Whether `name` is a valid tool name: 1 to [`MAX_LEN`] characters among
/// ASCII letters, digits, `_`, `-` and `.`.
pub fn is_valid(name: &str) -> bool {
    (1..=MAX_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in ["a", "word_count", "x.y-z_1", &"a".repeat(64)] {
            assert!(is_valid(good), "{good}");
        }
        for bad in ["", "has space", "ünï", "a/b", "(other)", &"a".repeat(65)] {
            assert!(!is_valid(bad), "{bad}");
        }
    }
}
