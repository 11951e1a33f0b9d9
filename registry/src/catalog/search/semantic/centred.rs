//! Cosine similarity with what the tools share taken out. A small
//! sentence model gives every text a large common component, the more so
//! when a catalog holds thousands of tools written from a few templates:
//! a vague query then lands near whatever is most typical. Subtracting
//! part of the tools' mean vector from each tool and from the query
//! before comparing them (as "all-but-the-top" post-processing does)
//! leaves what sets a tool apart. The mean is the caller's scope's, as
//! BM25's statistics are: a tool the caller may not see changes nothing
//! of the caller's answer.
//!
//! With `m` the mean and `a` [`CENTRING`], the similarity of unit vectors
//! `q` and `t` is `(q - a m)·(t - a m) / (|q - a m| |t - a m|)`, expanded
//! so that each tool's vector is read twice (once for the mean, once for
//! `q·t` and `t·m` together) and never copied.

/// How much of the mean is taken out: tuned on the fixed query set alone
/// (`search_quality --variants`), where 0.5 beat 0 and 1 at 1,000 and at
/// 10,000 tools.
pub(crate) const CENTRING: f32 = 0.5;

/// Below this length a centred vector is taken as having no direction.
const TINY: f32 = 1e-6;

/// The similarity of `query` (unit length) to each of `tools` (unit
/// length, of `query`'s dimension; any other reads 0), centred by
/// `centring` times the tools' mean.
pub(crate) fn similarities(query: &[f32], tools: &[&[f32]], centring: f32) -> Vec<f32> {
    let dimension = query.len();
    let mut mean = vec![0.0f32; dimension];
    let mut counted = 0usize;
    for tool in tools.iter().filter(|t| t.len() == dimension) {
        mean.iter_mut().zip(*tool).for_each(|(m, x)| *m += x);
        counted += 1;
    }
    if counted > 0 {
        let scale = centring / counted as f32;
        mean.iter_mut().for_each(|m| *m *= scale);
    }
    // `mean` is now a·m.
    let qm = dot(query, &mean);
    let mm = dot(&mean, &mean);
    let query_length = (1.0 - 2.0 * qm + mm).max(0.0).sqrt();
    tools
        .iter()
        .map(|tool| {
            if tool.len() != dimension {
                return 0.0;
            }
            let (qt, tm) = tool
                .iter()
                .zip(query)
                .zip(&mean)
                .fold((0.0f32, 0.0f32), |(qt, tm), ((t, q), m)| {
                    (qt + t * q, tm + t * m)
                });
            let tool_length = (1.0 - 2.0 * tm + mm).max(0.0).sqrt();
            if query_length < TINY || tool_length < TINY {
                return 0.0;
            }
            (qt - qm - tm + mm) / (query_length * tool_length)
        })
        .collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = dot(v, v).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    /// The definition, computed the long way: vectors copied, centred,
    /// normalised, compared.
    fn by_definition(query: &[f32], tools: &[Vec<f32>], a: f32) -> Vec<f32> {
        let n = tools.len() as f32;
        let mean: Vec<f32> = (0..query.len())
            .map(|i| tools.iter().map(|t| t[i]).sum::<f32>() / n)
            .collect();
        let centre = |v: &[f32]| {
            unit(
                &v.iter()
                    .zip(&mean)
                    .map(|(x, m)| x - a * m)
                    .collect::<Vec<_>>(),
            )
        };
        let q = centre(query);
        tools.iter().map(|t| dot(&q, &centre(t))).collect()
    }

    #[test]
    fn without_centring_it_is_the_cosine() {
        let q = unit(&[1.0, 2.0, 0.5]);
        let tools = [unit(&[1.0, 0.0, 0.0]), unit(&[0.0, 1.0, 1.0])];
        let refs: Vec<&[f32]> = tools.iter().map(Vec::as_slice).collect();
        let got = similarities(&q, &refs, 0.0);
        for (t, g) in tools.iter().zip(got) {
            assert!((dot(&q, t) - g).abs() < 1e-6);
        }
    }

    #[test]
    fn what_every_tool_shares_stops_counting() {
        // Two tools mostly along a shared direction, apart in the rest;
        // a query along the shared direction and slightly towards the
        // second tool. Uncentred, both look alike to it; centred, the
        // second is clearly nearer.
        let tools = [unit(&[1.0, 0.2, 0.0]), unit(&[1.0, 0.0, 0.2])];
        let refs: Vec<&[f32]> = tools.iter().map(Vec::as_slice).collect();
        let q = unit(&[1.0, 0.0, 0.05]);
        let plain = similarities(&q, &refs, 0.0);
        let centred = similarities(&q, &refs, 1.0);
        assert!(plain[1] - plain[0] < 0.05, "{plain:?}");
        assert!(centred[1] - centred[0] > 0.5, "{centred:?}");
    }

    #[test]
    fn a_vector_of_another_dimension_reads_zero_and_weighs_nothing() {
        let q = unit(&[1.0, 1.0]);
        let good = unit(&[1.0, 0.0]);
        let odd = [1.0f32, 0.0, 0.0];
        let got = similarities(&q, &[&good, &odd], 0.5);
        assert_eq!(got[1], 0.0);
        assert!((got[0] - similarities(&q, &[&good], 0.5)[0]).abs() < 1e-6);
        assert!(similarities(&q, &[], 0.5).is_empty());
    }

    #[test]
    fn a_single_tool_centred_whole_has_no_direction() {
        let t = unit(&[0.3, 0.4]);
        assert_eq!(similarities(&t, &[&t], 1.0), vec![0.0]);
    }

    proptest! {
        #[test]
        fn the_expansion_is_the_definition(
            raw in prop::collection::vec(prop::collection::vec(-1.0f32..1.0, 4), 2..12),
            query in prop::collection::vec(-1.0f32..1.0, 4),
            a in 0.0f32..0.9,
        ) {
            prop_assume!(dot(&query, &query) > 1e-3 && raw.iter().all(|t| dot(t, t) > 1e-3));
            let tools: Vec<Vec<f32>> = raw.iter().map(|t| unit(t)).collect();
            let query = unit(&query);
            let expected = by_definition(&query, &tools, a);
            let refs: Vec<&[f32]> = tools.iter().map(Vec::as_slice).collect();
            let got = similarities(&query, &refs, a);
            for (e, g) in expected.iter().zip(&got) {
                prop_assert!((e - g).abs() < 1e-3, "{expected:?} vs {got:?}");
            }
        }
    }
}
