//! Bounded label values: a metric labelled by a name the network chooses
//! (a tool's) gets a series for each of the first names seen, up to a cap,
//! and one shared [`OTHER`] series for every name after that, so a flood of
//! announced names cannot grow the metrics without bound.

use std::{
    collections::HashSet,
    sync::{Arc, RwLock},
};

/// The label value of every name past the cap. Tool names cannot contain
/// parentheses, so it never collides with one.
pub const OTHER: &str = "(other)";

/// Names seen so far, up to a cap.
#[derive(Debug)]
pub struct BoundedNames {
    max: usize,
    seen: RwLock<HashSet<Arc<str>>>,
    other: Arc<str>,
}

impl BoundedNames {
    /// At most `max` distinct names keep their own label value.
    pub fn new(max: usize) -> Self {
        Self {
            max,
            seen: RwLock::new(HashSet::new()),
            other: Arc::from(OTHER),
        }
    }

    /// The label value for `name`: itself while within the cap (or already
    /// seen), [`OTHER`] after it.
    pub fn label(&self, name: &str) -> Arc<str> {
        {
            let seen = self
                .seen
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(known) = seen.get(name) {
                return known.clone();
            }
            if seen.len() >= self.max {
                return self.other.clone();
            }
        }
        let mut seen = self
            .seen
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(known) = seen.get(name) {
            return known.clone();
        }
        if seen.len() >= self.max {
            return self.other.clone();
        }
        let name: Arc<str> = Arc::from(name);
        seen.insert(name.clone());
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_past_the_cap_share_one_value() {
        let names = BoundedNames::new(2);
        assert_eq!(&*names.label("a"), "a");
        assert_eq!(&*names.label("b"), "b");
        assert_eq!(&*names.label("c"), OTHER);
        assert_eq!(&*names.label("a"), "a");
        assert_eq!(&*BoundedNames::new(0).label("a"), OTHER);
    }

    proptest::proptest! {
        #[test]
        fn never_more_values_than_the_cap_plus_other(
            names in proptest::collection::vec("[a-z]{1,3}", 0..200),
            max in 0usize..20,
        ) {
            let bounded = BoundedNames::new(max);
            let values: HashSet<Arc<str>> = names.iter().map(|n| bounded.label(n)).collect();
            proptest::prop_assert!(values.len() <= max + 1);
        }
    }
}
