//! The `--api-keys-file` tests give the registry: agents' keys as the
//! SHA-256 digests the file holds, written once here.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// One agent's key: its caller id, the key it presents, its groups.
pub type AgentKey<'a> = (&'a str, &'a str, &'a [&'a str]);

/// Writes `keys.yaml` in `dir` with `keys`, and returns its path.
///
/// # Panics
/// If the file cannot be written.
pub fn api_keys_file(dir: &Path, keys: &[AgentKey<'_>]) -> PathBuf {
    let mut yaml = String::from("keys:\n");
    for (caller, key, groups) in keys {
        let _ = writeln!(
            yaml,
            "  - caller: {caller}\n    sha256: {}",
            sha256_hex(key)
        );
        if !groups.is_empty() {
            let _ = writeln!(yaml, "    groups: [{}]", groups.join(", "));
        }
    }
    let path = dir.join("keys.yaml");
    #[allow(clippy::unwrap_used)]
    std::fs::write(&path, yaml).unwrap();
    path
}

/// `message` presenting `key` as a bearer credential.
///
/// # Panics
/// If `key` is not printable ASCII.
pub fn bearer<T>(message: T, key: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value = format!("Bearer {key}").parse().expect("an ASCII key");
    request.metadata_mut().insert("authorization", value);
    request
}

/// The digest a keys file holds for `key`: SHA-256, lowercase hex.
pub fn sha256_hex(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .fold(String::new(), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_names_each_caller_its_digest_and_groups() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = api_keys_file(dir.path(), &[("a", "k", &["g1", "g2"]), ("b", "k2", &[])]);
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text,
            format!(
                "keys:\n  - caller: a\n    sha256: {}\n    groups: [g1, g2]\n  - caller: b\n    sha256: {}\n",
                sha256_hex("k"),
                sha256_hex("k2")
            )
        );
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
