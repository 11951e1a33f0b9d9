//! Splitting calls between versions by weight: smooth weighted round-robin
//! (as nginx balances upstreams), one schedule per tool on each replica.
//!
//! Within every run of 100 calls to a tool on one replica, each live
//! version of the split gets its weight's share, to one call; replicas
//! running the same versions file each hold the split, so their sum holds
//! it too. A version of the split with no live instance has its share
//! spread over the others.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use dashmap::DashMap;

/// Per tool, the running credit of each version.
#[derive(Default)]
pub(crate) struct Splitter {
    credit: DashMap<String, Mutex<HashMap<String, i64>>>,
}

impl Splitter {
    /// The version of `tool` the next call goes to, among `weights` (the
    /// live versions of the split, each with its weight); `None` if none
    /// has weight.
    pub(crate) fn pick<'a>(&self, tool: &str, weights: &[(&'a str, u32)]) -> Option<&'a str> {
        let total: i64 = weights.iter().map(|(_, w)| i64::from(*w)).sum();
        if total == 0 {
            return None;
        }
        let entry = self.credit.entry(tool.to_owned()).or_default();
        let mut credit = entry.lock().unwrap_or_else(PoisonError::into_inner);
        credit.retain(|version, _| weights.iter().any(|(v, _)| v == version));
        let mut best: Option<(&'a str, i64)> = None;
        for (version, weight) in weights {
            let c = credit.entry((*version).to_owned()).or_default();
            *c += i64::from(*weight);
            if best.is_none_or(|(_, b)| *c > b) {
                best = Some((version, *c));
            }
        }
        let (chosen, _) = best?;
        if let Some(c) = credit.get_mut(chosen) {
            *c -= total;
        }
        Some(chosen)
    }

    /// Forgets the tools not in `keep` (the versions file changed).
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.credit.retain(|tool, _| keep(tool));
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn ninety_ten_is_exact_in_every_hundred() {
        let splitter = Splitter::default();
        let weights = [("1.4.2", 90), ("2.0.0", 10)];
        for _ in 0..10 {
            let canary = (0..100)
                .filter(|_| splitter.pick("weather", &weights) == Some("2.0.0"))
                .count();
            assert_eq!(canary, 10);
        }
        assert_eq!(splitter.pick("weather", &[("1.4.2", 0)]), None);
    }

    proptest! {
        #[test]
        fn every_version_gets_its_share_to_one_call(
            weights in proptest::collection::vec(1u32..100, 1..6),
            rounds in 1usize..5,
        ) {
            let names: Vec<String> = (0..weights.len()).map(|i| format!("{i}.0.0")).collect();
            let table: Vec<(&str, u32)> = names.iter().map(String::as_str).zip(weights.iter().copied()).collect();
            let total: u32 = weights.iter().sum();
            let splitter = Splitter::default();
            let calls = total as usize * rounds;
            let mut got: HashMap<&str, usize> = HashMap::new();
            for _ in 0..calls {
                let v = splitter.pick("t", &table).expect("weighted");
                *got.entry(v).or_default() += 1;
            }
            for (v, w) in &table {
                prop_assert_eq!(got.get(v).copied().unwrap_or(0), *w as usize * rounds);
            }
        }
    }
}
