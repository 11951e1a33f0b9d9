//! The API key file: each entry names a caller and holds the SHA-256 of its
//! key, never the key itself.
//!
//! ```yaml
//! keys:
//!   - caller: billing-agent
//!     sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//!     groups: [billing]
//! ```

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::Caller;
use super::error::FormatError;
use super::reload::AuthFile;

/// The SHA-256 of `key`, as the lowercase hex an entry's `sha256` holds.
///
/// The key's bytes are hashed as they are: whoever reads a key from a
/// terminal or a file strips its line ending first (see [`key_from_input`]).
pub fn hash_key(key: &str) -> String {
    let digest: [u8; 32] = Sha256::digest(key.as_bytes()).into();
    let mut hex = String::with_capacity(64);
    for byte in digest {
        hex.push(char::from(HEX[usize::from(byte >> 4)]));
        hex.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    hex
}

/// The key in text read from standard input: one trailing `\n` or `\r\n`
/// removed, nothing else. `None` when nothing is left.
pub fn key_from_input(input: &str) -> Option<&str> {
    let key = input
        .strip_suffix('\n')
        .map(|rest| rest.strip_suffix('\r').unwrap_or(rest))
        .unwrap_or(input);
    (!key.is_empty()).then_some(key)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The parsed API key file: callers by the hash of their key.
#[derive(Debug, Default)]
pub struct ApiKeys {
    by_hash: HashMap<[u8; 32], Caller>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    keys: Vec<KeyEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyEntry {
    caller: String,
    sha256: String,
    #[serde(default)]
    groups: Vec<String>,
}

impl ApiKeys {
    /// Parses the YAML of an API key file. Refuses an entry with an empty
    /// caller or group, a `sha256` that is not 64 hex digits, or the same
    /// hash as an earlier entry.
    pub fn parse(yaml: &str) -> Result<Self, FormatError> {
        let file: KeyFile = serde_yaml_ng::from_str(yaml)?;
        let mut entries: HashMap<[u8; 32], (String, Caller)> =
            HashMap::with_capacity(file.keys.len());
        for (index, entry) in file.keys.into_iter().enumerate() {
            let name = format!("keys[{index}] (caller {:?})", entry.caller);
            if entry.caller.is_empty() {
                return Err(FormatError::entry(name, "`caller` is empty"));
            }
            if entry.groups.iter().any(String::is_empty) {
                return Err(FormatError::entry(name, "a group is empty"));
            }
            let Some(hash) = parse_hash(&entry.sha256) else {
                return Err(FormatError::entry(
                    name,
                    "`sha256` must be 64 hex digits (see `hash-key`)",
                ));
            };
            match entries.entry(hash) {
                Entry::Occupied(earlier) => {
                    let problem = format!("has the same `sha256` as {}", earlier.get().0);
                    return Err(FormatError::entry(name, problem));
                }
                Entry::Vacant(slot) => {
                    let caller = Caller {
                        id: entry.caller,
                        groups: entry.groups,
                    };
                    slot.insert((name, caller));
                }
            }
        }
        let by_hash = entries
            .into_iter()
            .map(|(hash, (_, caller))| (hash, caller))
            .collect();
        Ok(Self { by_hash })
    }

    /// The caller whose entry holds the hash of `key`.
    pub fn lookup(&self, key: &str) -> Option<&Caller> {
        let hash: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.by_hash.get(&hash)
    }

    /// How many keys the file holds.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether the file holds no key.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

impl AuthFile for ApiKeys {
    const KIND: &'static str = "API key file";

    fn parse(text: &str) -> Result<Self, FormatError> {
        Self::parse(text)
    }
}

/// The 32 bytes of a 64-digit hex SHA-256, as the key and registrants
/// files store them.
pub(crate) fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(bytes.chunks_exact(2)) {
        *byte = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
    }
    Some(hash)
}

fn hex_digit(c: u8) -> Option<u8> {
    char::from(c)
        .to_digit(16)
        .and_then(|digit| u8::try_from(digit).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(entries: &[(&str, &str, &[&str])]) -> String {
        let mut yaml = String::from("keys:\n");
        for (caller, hash, groups) in entries {
            yaml.push_str(&format!(
                "  - caller: {caller}\n    sha256: {hash}\n    groups: [{}]\n",
                groups.join(", ")
            ));
        }
        yaml
    }

    #[test]
    fn hash_key_is_lowercase_hex_sha256() {
        assert_eq!(
            hash_key("test"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
        );
    }

    #[test]
    fn key_from_input_strips_one_line_ending() {
        assert_eq!(key_from_input("k3y\n"), Some("k3y"));
        assert_eq!(key_from_input("k3y\r\n"), Some("k3y"));
        assert_eq!(key_from_input("k3y"), Some("k3y"));
        assert_eq!(key_from_input(" k3y \n\n"), Some(" k3y \n"));
        assert_eq!(key_from_input("\n"), None);
        assert_eq!(key_from_input(""), None);
    }

    #[test]
    fn looks_up_by_the_hash_of_the_key() {
        let upper = hash_key("second").to_uppercase();
        let keys = ApiKeys::parse(&file(&[
            ("billing-agent", &hash_key("first"), &["billing", "ops"]),
            ("search-agent", &upper, &[]),
        ]))
        .expect("valid file");
        assert_eq!(keys.len(), 2);
        let caller = keys.lookup("first").expect("known key");
        assert_eq!(caller.id, "billing-agent");
        assert_eq!(caller.groups, ["billing", "ops"]);
        assert_eq!(
            keys.lookup("second").map(|c| c.id.as_str()),
            Some("search-agent")
        );
        assert!(keys.lookup("third").is_none());
        assert!(keys.lookup("").is_none());
    }

    #[test]
    fn refuses_duplicate_hashes_naming_both_entries() {
        let hash = hash_key("same");
        let error = ApiKeys::parse(&file(&[("a", &hash, &[]), ("b", &hash, &[])]))
            .expect_err("duplicate")
            .to_string();
        assert!(error.contains("keys[1] (caller \"b\")"), "{error}");
        assert!(error.contains("keys[0] (caller \"a\")"), "{error}");
    }

    #[test]
    fn refuses_bad_hex_naming_the_entry() {
        for bad in ["abc", &"g".repeat(64), &"a".repeat(63), &"é".repeat(32)] {
            let error = ApiKeys::parse(&file(&[("ok", &hash_key("x"), &[]), ("bad", bad, &[])]))
                .expect_err("bad hex")
                .to_string();
            assert!(error.contains("keys[1] (caller \"bad\")"), "{error}");
            assert!(error.contains("64 hex digits"), "{error}");
        }
    }

    #[test]
    fn refuses_unknown_fields_with_the_line() {
        let yaml = format!(
            "keys:\n  - caller: a\n    sha256: {}\n    group: [x]\n",
            hash_key("k")
        );
        let error = ApiKeys::parse(&yaml)
            .expect_err("unknown field")
            .to_string();
        assert!(error.contains("unknown field `group`"), "{error}");
        assert!(error.contains("line 4"), "{error}");
    }

    #[test]
    fn refuses_an_empty_caller() {
        let error = ApiKeys::parse(&file(&[("''", &hash_key("k"), &[])]))
            .expect_err("empty caller")
            .to_string();
        assert!(error.contains("`caller` is empty"), "{error}");
    }
}
