//! The head sampling decision, made once where a call enters the process,
//! before any span exists: the `OTEL_TRACES_SAMPLER` rules, applied to the
//! incoming W3C context.
//!
//! A call that is not sampled gets no exported span at all: its spans go
//! to the logs only ([`crate::call_span!`]), so tracing at 1 % costs about
//! what no tracing costs. Its context is still passed on, with the sampled
//! flag clear, so the next hop does not start a trace of its own.
//!
//! | `OTEL_TRACES_SAMPLER` | a call with a parent | a call without |
//! |---|---|---|
//! | `parentbased_always_on` (default) | the parent's flag | sampled |
//! | `parentbased_always_off` | the parent's flag | not sampled |
//! | `parentbased_traceidratio` | the parent's flag | `OTEL_TRACES_SAMPLER_ARG` of trace ids |
//! | `always_on`, `always_off` | sampled, not sampled | the same |
//! | `traceidratio` | `OTEL_TRACES_SAMPLER_ARG` of trace ids | the same |
//!
//! An unknown sampler or a bad argument is logged and the default used,
//! as the specification asks.

/// What decides for calls with no sampled parent to follow.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Root {
    On,
    Off,
    /// The fraction of trace ids sampled, 0 to 1.
    Ratio(f64),
}

/// A head sampler.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampler {
    parent_based: bool,
    root: Root,
}

impl Default for Sampler {
    fn default() -> Self {
        Self {
            parent_based: true,
            root: Root::On,
        }
    }
}

impl Sampler {
    /// The sampler `var` (an environment lookup) describes, and a warning
    /// when it had to fall back to the default.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> (Self, Option<String>) {
        let Some(name) = var("OTEL_TRACES_SAMPLER").filter(|v| !v.trim().is_empty()) else {
            return (Self::default(), None);
        };
        let ratio = || -> Result<f64, String> {
            let arg = var("OTEL_TRACES_SAMPLER_ARG").unwrap_or_default();
            match arg.trim().parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ if arg.trim().is_empty() => Ok(1.0),
                _ => Err(format!(
                    "OTEL_TRACES_SAMPLER_ARG={arg:?} is not a ratio between 0 and 1"
                )),
            }
        };
        let sampler = match name.trim() {
            "always_on" => Ok((false, Root::On)),
            "always_off" => Ok((false, Root::Off)),
            "traceidratio" => ratio().map(|r| (false, Root::Ratio(r))),
            "parentbased_always_on" => Ok((true, Root::On)),
            "parentbased_always_off" => Ok((true, Root::Off)),
            "parentbased_traceidratio" => ratio().map(|r| (true, Root::Ratio(r))),
            other => Err(format!("OTEL_TRACES_SAMPLER={other:?} is not supported")),
        };
        match sampler {
            Ok((parent_based, root)) => (Self { parent_based, root }, None),
            Err(why) => (
                Self::default(),
                Some(format!("{why}; sampling with parentbased_always_on")),
            ),
        }
    }

    /// Whether a call is sampled: `parent` is the incoming context's
    /// sampled flag (`None`: no parent), `trace_id` its trace id (or the
    /// one about to be made).
    pub fn samples(&self, parent: Option<bool>, trace_id: u128) -> bool {
        match parent {
            Some(sampled) if self.parent_based => sampled,
            _ => match self.root {
                Root::On => true,
                Root::Off => false,
                Root::Ratio(ratio) => by_ratio(trace_id, ratio),
            },
        }
    }
}

/// The trace-id ratio rule: the low 64 bits of the trace id, as a
/// fraction of their range, below `ratio`. The same trace gets the same
/// answer in every process with the same ratio.
fn by_ratio(trace_id: u128, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    // Exact for the comparison's purpose: 53 bits of precision over 64.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let bound = (ratio.max(0.0) * (u64::MAX as f64)) as u64;
    #[allow(clippy::cast_possible_truncation)]
    let low = trace_id as u64;
    low < bound
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn sampler(vars: &[(&str, &str)]) -> (Sampler, Option<String>) {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Sampler::from_vars(|name| vars.get(name).cloned())
    }

    #[test]
    fn the_default_follows_the_parent_and_samples_roots() {
        let (s, warning) = sampler(&[]);
        assert_eq!(warning, None);
        assert!(s.samples(None, 7));
        assert!(s.samples(Some(true), 7));
        assert!(!s.samples(Some(false), 7));
    }

    #[test]
    fn each_named_sampler() {
        let on = sampler(&[("OTEL_TRACES_SAMPLER", "always_on")]).0;
        assert!(on.samples(Some(false), 1));
        let off = sampler(&[("OTEL_TRACES_SAMPLER", "always_off")]).0;
        assert!(!off.samples(Some(true), 1));
        let pb_off = sampler(&[("OTEL_TRACES_SAMPLER", "parentbased_always_off")]).0;
        assert!(pb_off.samples(Some(true), 1));
        assert!(!pb_off.samples(None, 1));
        let ratio = sampler(&[
            ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
            ("OTEL_TRACES_SAMPLER_ARG", "0.5"),
        ])
        .0;
        assert!(ratio.samples(None, 0));
        assert!(!ratio.samples(None, u128::from(u64::MAX)));
        assert!(ratio.samples(Some(true), u128::from(u64::MAX)));
    }

    #[test]
    fn nonsense_falls_back_to_the_default_with_a_warning() {
        for vars in [
            &[("OTEL_TRACES_SAMPLER", "jaeger_remote")][..],
            &[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ],
            &[
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
                ("OTEL_TRACES_SAMPLER_ARG", "half"),
            ],
        ] {
            let (s, warning) = sampler(vars);
            assert_eq!(s, Sampler::default(), "{vars:?}");
            assert!(warning.is_some_and(|w| w.contains("parentbased_always_on")));
        }
    }

    proptest::proptest! {
        #[test]
        fn a_ratio_samples_about_that_share(ratio in 0.0f64..=1.0, seed in proptest::num::u64::ANY) {
            let s = Sampler { parent_based: true, root: Root::Ratio(ratio) };
            let mut state = seed;
            let n = 4000;
            let sampled = (0..n).filter(|_| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                s.samples(None, u128::from(state))
            }).count();
            #[allow(clippy::cast_precision_loss)]
            let share = sampled as f64 / f64::from(n);
            proptest::prop_assert!((share - ratio).abs() < 0.05, "{share} vs {ratio}");
        }
    }
}
