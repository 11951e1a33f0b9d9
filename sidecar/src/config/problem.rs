//! [`Problem`]: one thing wrong with a config, said the way the user wrote
//! it: the file, the line and column, the key, what was found and what is
//! allowed.

use std::fmt;
use std::path::PathBuf;

use super::allowed::allowed;
use super::key::KeyPath;
pub use super::locate::Position;

/// One thing wrong with a config.
///
/// Displayed as `FILE:LINE:COLUMN: KEY: MESSAGE`, each part left out when
/// unknown (`line L, column C: ` stands in for a position without a file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The config file, when the config was read from one.
    pub file: Option<PathBuf>,
    /// Where the key's value starts, when the YAML text was at hand.
    pub position: Option<Position>,
    /// The key at fault; the whole file when empty.
    pub key: KeyPath,
    /// What is wrong, what is allowed, and how to fix it.
    pub message: String,
}

impl Problem {
    /// A problem at `key`.
    pub(crate) fn new(key: KeyPath, message: impl Into<String>) -> Self {
        Self {
            file: None,
            position: None,
            key,
            message: message.into(),
        }
    }

    /// `found FOUND, expected WHAT-KEY-ACCEPTS`.
    pub(crate) fn found(key: KeyPath, found: impl fmt::Display) -> Self {
        let expected = allowed(&key).unwrap_or("something else");
        Self::new(key, format!("found {found}, expected {expected}"))
    }

    /// The position of the key in `yaml` (of the nearest enclosing key, for
    /// a key that is missing), if it has none yet.
    pub(crate) fn located_in(mut self, yaml: &str) -> Self {
        if self.position.is_none() {
            // A missing key is not in the file: point at what lacks it.
            self.position = self
                .key
                .ancestors()
                .find_map(|key| super::locate::position(yaml, &key));
        }
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.position) {
            (Some(file), Some(Position { line, column })) => {
                write!(f, "{}:{line}:{column}: ", file.display())?;
            }
            (Some(file), None) => write!(f, "{}: ", file.display())?,
            (None, Some(Position { line, column })) => {
                write!(f, "line {line}, column {column}: ")?;
            }
            (None, None) => {}
        }
        if !self.key.is_root() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)
    }
}
