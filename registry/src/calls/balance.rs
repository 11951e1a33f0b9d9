//! Instance choice: the less loaded of two random healthy instances ("power
//! of two choices"), load being calls in flight from this registry; and
//! outlier ejection: an instance whose calls fail at transport level several
//! times in a row leaves rotation for a while, its lease untouched.

use std::{
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use dashmap::DashMap;
use rand::seq::IndexedRandom;
use tokio::time::Instant;

use crate::{catalog::Instance, metrics::Metrics};

/// When an instance is taken out of rotation, and for how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutlierPolicy {
    /// Transport failures in a row that eject an instance.
    pub consecutive_failures: u32,
    /// First ejection; each further one in a row doubles it.
    pub base_ejection: Duration,
    /// Longest ejection.
    pub max_ejection: Duration,
}

impl Default for OutlierPolicy {
    fn default() -> Self {
        Self {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(60),
        }
    }
}

#[derive(Debug, Default)]
struct Ejection {
    failures: u32,
    ejections: u32,
    until: Option<Instant>,
}

#[derive(Debug, Default)]
struct Health {
    in_flight: Arc<AtomicUsize>,
    ejection: Mutex<Ejection>,
}

impl Health {
    fn ejected(&self, now: Instant) -> bool {
        let ejection = self.ejection.lock().unwrap_or_else(PoisonError::into_inner);
        ejection.until.is_some_and(|until| now < until)
    }
}

/// Counts calls in flight per instance, tracks transport failures, and picks
/// where the next call goes.
#[derive(Default)]
pub(crate) struct Balancer {
    health: DashMap<String, Arc<Health>>,
    policy: OutlierPolicy,
    metrics: Arc<Metrics>,
}

/// Marks one call in flight on an instance until dropped.
#[derive(Debug)]
pub(crate) struct InFlight {
    counter: Arc<AtomicUsize>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.counter.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Balancer {
    /// A balancer ejecting outliers by `policy`.
    #[cfg(test)]
    pub(crate) fn new(policy: OutlierPolicy) -> Self {
        Self {
            health: DashMap::new(),
            policy,
            metrics: Arc::default(),
        }
    }

    /// Also counts ejections in `metrics`.
    #[must_use]
    pub(crate) fn metered(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Picks one of `instances` not in `exclude`, preferring instances not
    /// ejected (if every candidate is ejected, ejection is ignored rather
    /// than failing the call), and marks a call in flight on it. `None` if
    /// every instance is excluded.
    pub(crate) fn pick(
        &self,
        instances: &[Arc<Instance>],
        exclude: &[String],
    ) -> Option<(Arc<Instance>, InFlight)> {
        let mut left = instances.iter().filter(|i| !exclude.contains(&i.id));
        let first = left.next()?;
        let Some(second) = left.next() else {
            // One candidate, ejected or not: no choice to make, nothing to
            // collect.
            return Some(self.chosen(first));
        };
        let now = Instant::now();
        let candidates: Vec<&Arc<Instance>> = [first, second].into_iter().chain(left).collect();
        let healthy: Vec<&Arc<Instance>> = candidates
            .iter()
            .copied()
            .filter(|i| !self.health(&i.id).ejected(now))
            .collect();
        let pool = if healthy.is_empty() {
            candidates
        } else {
            healthy
        };
        let chosen = match pool.as_slice() {
            [] => return None,
            [only] => *only,
            _ => {
                let mut rng = rand::rng();
                let two: Vec<&&Arc<Instance>> = pool.choose_multiple(&mut rng, 2).collect();
                let (a, b) = (two[0], two[1]);
                if self.load(b) < self.load(a) { *b } else { *a }
            }
        };
        Some(self.chosen(chosen))
    }

    /// `instance`, with a call marked in flight on it.
    fn chosen(&self, instance: &Arc<Instance>) -> (Arc<Instance>, InFlight) {
        let counter = self.health(&instance.id).in_flight.clone();
        counter.fetch_add(1, Ordering::Relaxed);
        (instance.clone(), InFlight { counter })
    }

    /// Records that a call reached `instance` and got an answer.
    pub(crate) fn record_success(&self, instance: &str) {
        let health = self.health(instance);
        let mut ejection = health
            .ejection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if ejection.failures != 0 || ejection.ejections != 0 || ejection.until.is_some() {
            *ejection = Ejection::default();
        }
    }

    /// Records a transport failure on `instance`; returns `true` if this
    /// ejected it.
    pub(crate) fn record_failure(&self, instance: &str) -> bool {
        let health = self.health(instance);
        let mut ejection = health
            .ejection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if ejection.until.is_some_and(|until| now < until) {
            return false;
        }
        ejection.failures += 1;
        if ejection.failures < self.policy.consecutive_failures {
            return false;
        }
        let factor = 2u32.saturating_pow(ejection.ejections.min(16));
        let duration = self
            .policy
            .base_ejection
            .saturating_mul(factor)
            .min(self.policy.max_ejection);
        ejection.ejections += 1;
        ejection.failures = 0;
        ejection.until = Some(now + duration);
        self.metrics.ejected();
        tracing::warn!(
            instance,
            ?duration,
            "instance ejected after repeated transport failures"
        );
        true
    }

    /// Whether `instance` is out of rotation now.
    #[cfg(test)]
    pub(crate) fn is_ejected(&self, instance: &str) -> bool {
        self.health(instance).ejected(Instant::now())
    }

    /// Calls in flight on `instance`.
    pub(crate) fn load(&self, instance: &Instance) -> usize {
        self.health
            .get(&instance.id)
            .map_or(0, |h| h.in_flight.load(Ordering::Relaxed))
    }

    /// Drops what is kept for an instance that left.
    pub(crate) fn forget(&self, instance_id: &str) {
        self.health.remove(instance_id);
    }

    fn health(&self, id: &str) -> Arc<Health> {
        // The read lock first: the hot path finds the entry.
        if let Some(health) = self.health.get(id) {
            return health.clone();
        }
        self.health.entry(id.to_owned()).or_default().clone()
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
                    execute_key: None,
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

    #[tokio::test(start_paused = true)]
    async fn failing_instance_is_ejected_then_tried_again() {
        let b = Balancer::new(OutlierPolicy {
            consecutive_failures: 3,
            base_ejection: Duration::from_secs(5),
            max_ejection: Duration::from_secs(60),
        });
        let all = instances(2);
        assert!(!b.record_failure("i0"));
        assert!(!b.record_failure("i0"));
        assert!(b.record_failure("i0"));
        for _ in 0..50 {
            assert_eq!(b.pick(&all, &[]).unwrap().0.id, "i1");
        }
        // Only ejected instances left: use them rather than fail.
        assert_eq!(b.pick(&all, &["i1".into()]).unwrap().0.id, "i0");

        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!b.is_ejected("i0"));
        // Failing again right away ejects for twice as long.
        for _ in 0..3 {
            b.record_failure("i0");
        }
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(b.is_ejected("i0"));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!b.is_ejected("i0"));
        b.record_success("i0");
        for _ in 0..3 {
            b.record_failure("i0");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!b.is_ejected("i0"), "a success resets the backoff");
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let b = Balancer::default();
        b.record_failure("i0");
        b.record_failure("i0");
        b.record_success("i0");
        assert!(!b.record_failure("i0"));
        assert!(!b.is_ejected("i0"));
    }
}
