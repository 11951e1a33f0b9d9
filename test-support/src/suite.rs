//! The full-suite switch.
//!
//! `scripts/test.sh` sets [`FULL_SUITE_ENV`]: then every test that needs
//! something missing (`redis-server`, `redis-cli`, a Redis Cluster, the
//! workspace's binaries) fails, naming it. A plain `cargo test` runs what it
//! can and prints one line per skipped test, straight to the process's
//! stderr so that the harness's output capture cannot hide it.

use std::io::Write as _;

/// Set (to anything) by the test command: nothing may be skipped.
pub const FULL_SUITE_ENV: &str = "TOOLMESH_FULL_SUITE";

/// Whether this run is the full suite.
pub fn is_full() -> bool {
    std::env::var_os(FULL_SUITE_ENV).is_some()
}

/// The running test's name: libtest names each test's thread after it.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .filter(|name| *name != "main")
        .unwrap_or("a test")
        .to_owned()
}

/// Reports that the running test cannot run because `missing` is not
/// available (`why` says how to get it). In the full suite that is a
/// failure (this panics); otherwise one loud line, and the caller returns.
pub fn skip(missing: &str, why: &str) {
    let test = current_test();
    assert!(
        !is_full(),
        "{test} needs {missing}, which is not available ({why}); {FULL_SUITE_ENV} is set, so this fails instead of skipping"
    );
    let line = format!(
        "\n*** SKIPPED {test}: needs {missing} ({why}); scripts/test.sh runs everything ***\n"
    );
    // Not eprintln!: libtest captures that for passing tests.
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// `Some(value)`, or [`skip`] with the error as the reason and `None`.
pub fn require<T>(missing: &str, found: Result<T, String>) -> Option<T> {
    match found {
        Ok(value) => Some(value),
        Err(why) => {
            skip(missing, &why);
            None
        }
    }
}
