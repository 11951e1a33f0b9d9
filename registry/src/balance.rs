//! Instance choice: the less loaded of two random live instances ("power of
//! two choices"), load being calls in flight from this registry.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use dashmap::DashMap;
use rand::seq::IndexedRandom;

use crate::catalog::Instance;

/// Counts calls in flight per instance and picks where the next one goes.
#[derive(Default)]
pub struct Balancer {
    in_flight: DashMap<String, Arc<AtomicUsize>>,
}

/// Marks one call in flight on an instance until dropped.
#[derive(Debug)]
pub struct InFlight {
    counter: Arc<AtomicUsize>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Balancer {
    /// Picks one of `instances` not in `exclude`, and marks a call in flight
    /// on it. `None` if every instance is excluded.
    pub fn pick(
        &self,
        instances: &[Arc<Instance>],
        exclude: &[String],
    ) -> Option<(Arc<Instance>, InFlight)> {
        let candidates: Vec<&Arc<Instance>> = instances
            .iter()
            .filter(|i| !exclude.contains(&i.id))
            .collect();
        let chosen = match candidates.as_slice() {
            [] => return None,
            [only] => *only,
            _ => {
                let mut rng = rand::rng();
                let two: Vec<&&Arc<Instance>> = candidates.choose_multiple(&mut rng, 2).collect();
                let (a, b) = (two[0], two[1]);
                if self.load(b) < self.load(a) { *b } else { *a }
            }
        };
        let counter = self.counter(&chosen.id);
        counter.fetch_add(1, Ordering::Relaxed);
        Some((chosen.clone(), InFlight { counter }))
    }

    /// Calls in flight on `instance`.
    pub fn load(&self, instance: &Instance) -> usize {
        self.in_flight
            .get(&instance.id)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Drops the counter of an instance that left.
    pub fn forget(&self, instance_id: &str) {
        self.in_flight.remove(instance_id);
    }

    fn counter(&self, id: &str) -> Arc<AtomicUsize> {
        self.in_flight.entry(id.to_owned()).or_default().clone()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn instances(n: usize) -> Vec<Arc<Instance>> {
        (0..n)
            .map(|i| {
                Arc::new(Instance {
                    id: format!("i{i}"),
                    endpoint: format!("http://127.0.0.1:{}", 1000 + i),
                })
            })
            .collect()
    }

    #[test]
    fn never_picks_an_excluded_instance() {
        let b = Balancer::default();
        let all = instances(3);
        for _ in 0..100 {
            let (i, _) = b.pick(&all, &["i0".into(), "i2".into()]).unwrap();
            assert_eq!(i.id, "i1");
        }
        assert!(
            b.pick(&all, &["i0".into(), "i1".into(), "i2".into()])
                .is_none()
        );
    }

    #[test]
    fn prefers_the_idle_instance_of_two() {
        let b = Balancer::default();
        let all = instances(2);
        let held: Vec<_> = (0..5).map(|_| b.pick(&all[..1], &[]).unwrap()).collect();
        for _ in 0..50 {
            let (i, _) = b.pick(&all, &[]).unwrap();
            assert_eq!(i.id, "i1");
        }
        drop(held);
        assert_eq!(b.load(&all[0]), 0);
    }

    #[test]
    fn spreads_calls_over_all_instances() {
        let b = Balancer::default();
        let all = instances(4);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            seen.insert(b.pick(&all, &[]).unwrap().0.id.clone());
        }
        assert_eq!(seen.len(), 4);
    }
}
