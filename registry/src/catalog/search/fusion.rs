//! Hybrid ranking: each tool's similarity to the query (a centred cosine,
//! `semantic/centred.rs`), plus its BM25 score over the best one's,
//! weighted by [`LEXICAL_WEIGHT`]. The model ranks; the words break its
//! near-ties and lift an exact name.
//!
//! A linear blend, not reciprocal rank fusion: RRF gives BM25's ranking as
//! much say as the model's, and BM25's ranking of a paraphrase is noise
//! (measured: `docs/benchmarks.md`, search quality). The weight was chosen
//! on the fixed query set alone; the held-out set measures it.

use std::collections::HashMap;

use super::Found;

/// Weight of the lexical score, over the answer's best, in the blend.
pub(super) const LEXICAL_WEIGHT: f32 = 0.1;

/// Every tool of `similarities`, scored `similarity + weight × bm25 / best`,
/// most relevant first (equal scores in name order).
pub(super) fn blend(
    similarities: Vec<(String, f32)>,
    lexical: &[Found],
    weight: f32,
) -> Vec<Found> {
    let best = lexical.iter().map(|f| f.score).fold(0.0_f32, f32::max);
    let lexical: HashMap<&str, f32> = lexical.iter().map(|f| (f.name.as_str(), f.score)).collect();
    let mut found: Vec<Found> = similarities
        .into_iter()
        .map(|(name, cosine)| {
            let words = match lexical.get(name.as_str()) {
                Some(score) if best > 0.0 => score / best,
                _ => 0.0,
            };
            Found {
                score: cosine + weight * words,
                name,
            }
        })
        .collect();
    found.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.name.cmp(&b.name))
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(name: &str, score: f32) -> Found {
        Found {
            name: name.into(),
            score,
        }
    }

    fn names(found: &[Found]) -> Vec<&str> {
        found.iter().map(|f| f.name.as_str()).collect()
    }

    #[test]
    fn the_model_ranks_and_words_break_near_ties() {
        let similarities = vec![("a".into(), 0.50), ("b".into(), 0.49), ("c".into(), 0.20)];
        let lexical = [found("b", 8.0), found("c", 2.0)];
        let blended = blend(similarities.clone(), &lexical, 0.1);
        assert_eq!(names(&blended), ["b", "a", "c"]);
        // Words alone do not lift a tool far below the model's pick.
        let far = vec![("a".into(), 0.70), ("c".into(), 0.20)];
        assert_eq!(names(&blend(far, &[found("c", 9.0)], 0.1)), ["a", "c"]);
        // Without words, the model's order.
        assert_eq!(names(&blend(similarities, &[], 0.1)), ["a", "b", "c"]);
    }

    #[test]
    fn equal_scores_come_in_name_order() {
        let similarities = vec![("z".into(), 0.3), ("a".into(), 0.3)];
        assert_eq!(names(&blend(similarities, &[], 0.1)), ["a", "z"]);
    }

    #[test]
    fn a_tool_without_a_vector_is_ranked_by_its_words() {
        let similarities = vec![("a".into(), 0.0), ("b".into(), 0.0)];
        let blended = blend(similarities, &[found("b", 1.0)], 0.1);
        assert_eq!(names(&blended), ["b", "a"]);
        assert!((blended[0].score - 0.1).abs() < 1e-6);
    }
}
