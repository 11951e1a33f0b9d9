//! What a stdio server sees of the environment: never the sidecar's whole
//! environment (its tokens and keys), only what a Node or Python program
//! needs to start, what its entry passes through by name (`env_pass`) and
//! what its entry sets (`env`). A server's tool can hand its environment to
//! whoever calls it (server-everything's `get-env` does).

use std::collections::BTreeMap;
use std::ffi::OsString;

/// Variables every stdio server gets from the sidecar's environment, when
/// set: where programs are (`PATH`), a home for caches and settings, who it
/// runs as, the language and time zone, and the temporary folder. Every
/// `LC_*` variable goes with them ([`LOCALE_PREFIX`]).
pub const INHERITED: [&str; 7] = ["PATH", "HOME", "USER", "LOGNAME", "LANG", "TZ", "TMPDIR"];

/// The locale variables (`LC_ALL`, `LC_CTYPE`, ...), passed like
/// [`INHERITED`].
pub const LOCALE_PREFIX: &str = "LC_";

/// The whole environment of a stdio server: from `sidecar` (the sidecar's
/// variables), those [`INHERITED`], those starting with [`LOCALE_PREFIX`]
/// and those named in `pass`; then `set`, which wins over all of them. A
/// name in `pass` the sidecar does not have is left out.
pub(crate) fn environment(
    sidecar: impl IntoIterator<Item = (OsString, OsString)>,
    pass: &[String],
    set: &BTreeMap<String, String>,
) -> BTreeMap<OsString, OsString> {
    let mut env: BTreeMap<OsString, OsString> = sidecar
        .into_iter()
        .filter(|(name, _)| {
            name.to_str().is_some_and(|name| {
                INHERITED.contains(&name)
                    || name.starts_with(LOCALE_PREFIX)
                    || pass.iter().any(|passed| passed == name)
            })
        })
        .collect();
    env.extend(
        set.iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value))),
    );
    env
}

/// Whether `name` may be passed through: a portable variable name (letters,
/// digits and `_`, not starting with a digit), as `env_pass` takes them.
pub(crate) fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(name, value)| (OsString::from(name), OsString::from(value)))
            .collect()
    }

    fn names(env: &BTreeMap<OsString, OsString>) -> Vec<&str> {
        env.keys().filter_map(|name| name.to_str()).collect()
    }

    #[test]
    fn only_the_minimal_set_the_passed_and_the_set_variables_reach_a_server() {
        let sidecar = vars(&[
            ("PATH", "/usr/bin"),
            ("HOME", "/home/app"),
            ("LC_ALL", "C.UTF-8"),
            ("TOOLMESH_EXECUTE_TOKEN", "secret"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("GITHUB_TOKEN", "ghp_x"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("PATHEXT", "no"),
        ]);
        let pass = ["GITHUB_TOKEN".to_owned(), "NOT_SET".to_owned()];
        let set = BTreeMap::from([
            ("HOME".to_owned(), "/srv/mcp".to_owned()),
            ("MODE".to_owned(), "fast".to_owned()),
        ]);
        let env = environment(sidecar, &pass, &set);
        assert_eq!(
            names(&env),
            ["GITHUB_TOKEN", "HOME", "LC_ALL", "MODE", "PATH"]
        );
        assert_eq!(env[&OsString::from("HOME")], "/srv/mcp", "env wins");
        assert_eq!(env[&OsString::from("GITHUB_TOKEN")], "ghp_x");
    }

    #[cfg(unix)]
    #[test]
    fn a_name_that_is_not_valid_utf8_is_never_passed() {
        use std::os::unix::ffi::OsStringExt as _;
        let odd = OsString::from_vec(b"PATH\xff".to_vec());
        let env = environment([(odd, OsString::from("x"))], &[], &BTreeMap::new());
        assert!(env.is_empty(), "{env:?}");
    }

    #[test]
    fn variable_names_are_portable_ones() {
        for good in ["GITHUB_TOKEN", "_X", "npm_config_cache", "A1"] {
            assert!(is_variable_name(good), "{good}");
        }
        for bad in ["", "1A", "A=B", "A B", "A-B", "É"] {
            assert!(!is_variable_name(bad), "{bad:?}");
        }
    }
}
