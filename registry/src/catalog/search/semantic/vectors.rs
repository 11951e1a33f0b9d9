//! The tools' vectors: each tool's current text (by its hash) and, once
//! embedded, the text's vector. Tools that read alike share one vector; a
//! vector leaves when the last tool reading that text does. A text whose
//! vector is not here yet is pending, with the text kept for the indexer.
//!
//! Everything is bounded by the catalog: one entry per live tool, one
//! vector and at most one pending text per distinct text among them.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// SHA-256 of a tool's text as the model reads it.
pub(crate) type TextHash = [u8; 32];

/// The hash of `text`.
pub(crate) fn hash(text: &str) -> TextHash {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(text.as_bytes()).into()
}

#[derive(Debug, Default)]
pub(super) struct Vectors {
    /// Each tool's text.
    names: HashMap<String, TextHash>,
    /// How many tools read each text.
    users: HashMap<TextHash, u32>,
    /// Embedded texts, unit length.
    vectors: HashMap<TextHash, Arc<[f32]>>,
    /// Texts waiting for a vector.
    pending: HashMap<TextHash, Arc<str>>,
    /// Pending texts the indexer is working on.
    taken: HashSet<TextHash>,
}

impl Vectors {
    /// Sets `name`'s text; true if it now waits for a vector.
    pub(super) fn set(&mut self, name: &str, text: &str) -> bool {
        let hash = hash(text);
        match self.names.get(name) {
            Some(old) if *old == hash => return self.pending.contains_key(&hash),
            Some(old) => {
                let old = *old;
                self.release(old);
            }
            None => {}
        }
        self.names.insert(name.to_owned(), hash);
        *self.users.entry(hash).or_default() += 1;
        if self.vectors.contains_key(&hash) {
            return false;
        }
        self.pending.entry(hash).or_insert_with(|| Arc::from(text));
        true
    }

    /// Forgets `name`.
    pub(super) fn remove(&mut self, name: &str) {
        if let Some(hash) = self.names.remove(name) {
            self.release(hash);
        }
    }

    /// Keeps only the tools `keep` names.
    pub(super) fn retain(&mut self, keep: &HashSet<&str>) {
        let gone: Vec<String> = self
            .names
            .keys()
            .filter(|n| !keep.contains(n.as_str()))
            .cloned()
            .collect();
        for name in gone {
            self.remove(&name);
        }
    }

    fn release(&mut self, hash: TextHash) {
        let Some(users) = self.users.get_mut(&hash) else {
            return;
        };
        *users -= 1;
        if *users == 0 {
            self.users.remove(&hash);
            self.vectors.remove(&hash);
            self.pending.remove(&hash);
            self.taken.remove(&hash);
        }
    }

    /// Up to `most` pending texts nobody is working on, now marked taken.
    pub(super) fn take(&mut self, most: usize) -> Vec<(TextHash, Arc<str>)> {
        let batch: Vec<(TextHash, Arc<str>)> = self
            .pending
            .iter()
            .filter(|(hash, _)| !self.taken.contains(*hash))
            .take(most)
            .map(|(hash, text)| (*hash, text.clone()))
            .collect();
        self.taken.extend(batch.iter().map(|(hash, _)| *hash));
        batch
    }

    /// Stores `vector` for the text `hash`, if a tool still reads it.
    pub(super) fn store(&mut self, hash: TextHash, vector: Arc<[f32]>) -> bool {
        self.taken.remove(&hash);
        if self.pending.remove(&hash).is_none() {
            return false;
        }
        self.vectors.insert(hash, vector);
        true
    }

    /// Tools indexed.
    pub(super) fn tools(&self) -> usize {
        self.names.len()
    }

    /// Distinct texts waiting for a vector.
    pub(super) fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether the text `hash` still waits for a vector.
    pub(super) fn is_pending(&self, hash: &TextHash) -> bool {
        self.pending.contains_key(hash)
    }

    /// Each tool `visible` keeps, with its vector; `None` if one of them
    /// has none yet.
    pub(super) fn each<'a>(
        &'a self,
        visible: Option<&(dyn Fn(&str) -> bool + Sync)>,
    ) -> Option<Vec<(&'a str, &'a [f32])>> {
        let mut out = Vec::with_capacity(self.names.len());
        for (name, hash) in &self.names {
            if visible.is_some_and(|v| !v(name)) {
                continue;
            }
            out.push((name.as_str(), &**self.vectors.get(hash)?));
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector(x: f32) -> Arc<[f32]> {
        Arc::from(vec![x, 0.0])
    }

    #[test]
    fn a_tool_waits_until_its_text_is_embedded() {
        let mut v = Vectors::default();
        assert!(v.set("a", "send mail"));
        assert!(
            v.each(None).is_none(),
            "one tool without a vector: no answer"
        );
        let taken = v.take(10);
        assert_eq!(taken.len(), 1);
        assert!(v.take(10).is_empty(), "taken once");
        assert!(v.store(taken[0].0, vector(1.0)));
        assert_eq!(v.each(None).map(|e| e.len()), Some(1));
        assert_eq!(v.pending(), 0);
    }

    #[test]
    fn tools_that_read_alike_share_a_vector_until_the_last_leaves() {
        let mut v = Vectors::default();
        v.set("a", "same");
        assert!(v.set("a", "same"), "unchanged and still waiting");
        v.set("b", "same");
        assert_eq!(v.pending(), 1);
        let (hash, _) = v.take(10)[0].clone();
        v.store(hash, vector(1.0));
        assert!(!v.set("a", "same"), "unchanged: nothing to embed");
        assert!(!v.set("c", "same"), "reuses the vector");
        v.remove("a");
        v.remove("b");
        assert_eq!(v.each(None).map(|e| e.len()), Some(1));
        v.remove("c");
        assert!(v.vectors.is_empty() && v.users.is_empty());
    }

    #[test]
    fn a_changed_text_is_embedded_again_and_a_late_vector_is_dropped() {
        let mut v = Vectors::default();
        v.set("a", "old");
        let (old, _) = v.take(10)[0].clone();
        v.set("a", "new");
        assert!(!v.store(old, vector(1.0)), "nobody reads the old text now");
        assert_eq!(v.pending(), 1);
        assert!(v.each(None).is_none());
    }

    #[test]
    fn scope_counts_only_what_the_caller_sees() {
        let mut v = Vectors::default();
        v.set("seen", "x");
        v.set("hidden", "y");
        v.store(super::hash("x"), vector(1.0));
        let only_seen = |n: &str| n == "seen";
        assert_eq!(v.each(Some(&only_seen)).map(|e| e.len()), Some(1));
        assert!(v.each(None).is_none());
    }

    #[test]
    fn retain_forgets_the_rest() {
        let mut v = Vectors::default();
        v.set("a", "x");
        v.set("b", "y");
        v.retain(&HashSet::from(["a"]));
        assert_eq!(v.tools(), 1);
        assert_eq!(v.pending(), 1);
    }
}
