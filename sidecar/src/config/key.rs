//! [`KeyPath`]: where a value sits in the config, written the way the user
//! reads the YAML: `tools[0].rate_limit.rate`.

use std::fmt;

/// One step of a [`KeyPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A key of a mapping.
    Key(String),
    /// A position in a list (0-based).
    Index(usize),
}

/// A path from the top of the config to a value, e.g.
/// `tools[0].rate_limit.rate`; empty is the whole file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPath(Vec<Segment>);

impl KeyPath {
    /// The whole file.
    pub fn root() -> Self {
        Self::default()
    }

    /// This path, then `key`.
    #[must_use]
    pub fn key(&self, key: impl Into<String>) -> Self {
        self.with(Segment::Key(key.into()))
    }

    /// This path, then item `index` of a list.
    #[must_use]
    pub fn index(&self, index: usize) -> Self {
        self.with(Segment::Index(index))
    }

    /// This path, then `segment`.
    #[must_use]
    pub fn with(&self, segment: Segment) -> Self {
        let mut segments = self.0.clone();
        segments.push(segment);
        Self(segments)
    }

    /// The steps, from the top.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// Whether this is the whole file.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The path with every list position written `[]`, e.g.
    /// `tools[].rate_limit.rate`: the same for every tool.
    pub(crate) fn pattern(&self) -> String {
        let mut out = String::new();
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => out.push_str(key),
                Segment::Key(key) => {
                    out.push('.');
                    out.push_str(key);
                }
                Segment::Index(_) => out.push_str("[]"),
            }
        }
        out
    }

    /// The path above this one, and the last step; `None` for the whole file.
    pub(crate) fn split_last(&self) -> Option<(KeyPath, &Segment)> {
        let (last, parent) = self.0.split_last()?;
        Some((Self(parent.to_vec()), last))
    }

    /// This path, then every step of `tail`.
    #[must_use]
    pub fn join(&self, tail: &[Segment]) -> Self {
        let mut segments = self.0.clone();
        segments.extend_from_slice(tail);
        Self(segments)
    }

    /// Every path from this one up to (not including) the whole file,
    /// longest first.
    pub(crate) fn ancestors(&self) -> impl Iterator<Item = KeyPath> + '_ {
        (1..=self.0.len())
            .rev()
            .map(|len| Self(self.0[..len].to_vec()))
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(key)?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}
