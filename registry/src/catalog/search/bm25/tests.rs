#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn tokens(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

fn index(documents: &[(&str, &str)]) -> Bm25 {
    let mut index = Bm25::default();
    for (name, text) in documents {
        index.upsert(name, &tokens(text));
    }
    index
}

/// The scores of a search, by name.
fn scores(index: &Bm25, query: &str, scope: Scope<'_>) -> BTreeMap<String, f32> {
    index
        .search(&tokens(query), scope)
        .into_iter()
        .map(|(name, score)| (name.to_owned(), score))
        .collect()
}

#[test]
fn scores_are_okapi_bm25() {
    let index = index(&[("a", "quasar pulsar"), ("b", "pulsar"), ("c", "nebula")]);
    let found = scores(&index, "quasar", Scope::Everything);
    // N = 3, n = 1, average length 4/3, |a| = 2, tf = 1.
    let idf = (1.0f32 + (3.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln();
    let weight = 2.2f32 / (1.0 + 1.2 * (0.25 + 0.75 * (2.0 / (4.0f32 / 3.0))));
    assert_eq!(found.len(), 1);
    assert!((found["a"] - idf * weight).abs() < 1e-6, "{found:?}");
    let both = scores(&index, "pulsar quasar", Scope::Everything);
    assert!(both["a"] > both["b"], "{both:?}");
    assert!(scores(&index, "comet", Scope::Everything).is_empty());
}

/// The case: her tool's score for "quasar" is the same whether a
/// tool she may not see also says "quasar".
#[test]
fn a_hidden_document_moves_no_score() {
    let mine = [("mine", "quasar telescope"), ("other", "telescope mount")];
    let alone = index(&mine);
    let mut with_hidden = index(&mine);
    with_hidden.upsert("hidden", &tokens("quasar quasar catalogue of quasar"));
    let visible = |name: &str| name != "hidden";
    let scope = Scope::from(&visible);
    for query in ["quasar", "telescope", "quasar mount"] {
        assert_eq!(
            scores(&with_hidden, query, scope),
            scores(&alone, query, Scope::Everything),
            "{query}"
        );
    }
    assert_ne!(
        scores(&with_hidden, "quasar", Scope::Everything)["mine"],
        scores(&alone, "quasar", Scope::Everything)["mine"],
        "the unscoped statistics do count it"
    );
    with_hidden.remove("hidden");
    assert_eq!(
        scores(&with_hidden, "quasar", Scope::Everything),
        scores(&alone, "quasar", Scope::Everything)
    );
}

#[test]
fn a_scope_that_sees_nothing_finds_nothing() {
    let index = index(&[("a", "quasar")]);
    assert!(scores(&index, "quasar", Scope::Visible(&|_| false)).is_empty());
    assert!(scores(&Bm25::default(), "quasar", Scope::Everything).is_empty());
}

#[test]
fn removed_and_replaced_documents_leave_nothing_behind() {
    let mut index = index(&[("a", "x y"), ("b", "y z")]);
    index.upsert("a", &tokens("z"));
    index.remove("b");
    index.remove("b");
    assert_eq!(index.len(), 1);
    assert!(scores(&index, "x y", Scope::Everything).is_empty());
    assert_eq!(index.postings.len(), 1, "{:?}", index.postings.keys());
    assert_eq!(index.total_length, 1);
    index.upsert("c", &tokens("x"));
    assert_eq!(index.documents.len(), 2, "a freed slot is taken again");
}

/// A small vocabulary, so that documents share terms.
fn document() -> impl Strategy<Value = Vec<String>> {
    proptest::collection::vec(
        prop_oneof![
            Just("quasar"),
            Just("pulsar"),
            Just("nebula"),
            Just("comet"),
            Just("orbit"),
            Just("dust")
        ]
        .prop_map(str::to_owned),
        0..12,
    )
}

proptest! {
    /// What a scope sees is scored exactly as an index of only those
    /// documents scores them: hidden documents change no score or rank.
    #[test]
    fn scores_of_a_scope_never_depend_on_what_it_does_not_see(
        documents in proptest::collection::vec((document(), any::<bool>()), 1..30),
        query in document(),
    ) {
        let mut everything = Bm25::default();
        let mut only_visible = Bm25::default();
        for (i, (tokens, visible)) in documents.iter().enumerate() {
            let name = format!("{}{i}", if *visible { "v" } else { "h" });
            everything.upsert(&name, tokens);
            if *visible {
                only_visible.upsert(&name, tokens);
            }
        }
        let visible = |name: &str| name.starts_with('v');
        let scoped: BTreeMap<_, _> = everything.search(&query, Scope::from(&visible)).into_iter().collect();
        let alone: BTreeMap<_, _> = only_visible.search(&query, Scope::Everything).into_iter().collect();
        prop_assert_eq!(scoped, alone);
    }

    /// Upserts and removals leave the index as if it were built from what
    /// remains.
    #[test]
    fn changes_leave_the_index_as_a_fresh_build(
        changes in proptest::collection::vec((0..8usize, proptest::option::of(document())), 1..40),
        query in document(),
    ) {
        let mut changed = Bm25::default();
        let mut last: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (name, change) in changes {
            let name = format!("d{name}");
            match change {
                Some(tokens) => {
                    changed.upsert(&name, &tokens);
                    last.insert(name, tokens);
                }
                None => {
                    changed.remove(&name);
                    last.remove(&name);
                }
            }
        }
        let mut fresh = Bm25::default();
        for (name, tokens) in &last {
            fresh.upsert(name, tokens);
        }
        let a: BTreeMap<_, _> = changed.search(&query, Scope::Everything).into_iter().collect();
        let b: BTreeMap<_, _> = fresh.search(&query, Scope::Everything).into_iter().collect();
        prop_assert_eq!(a, b);
        prop_assert_eq!(changed.len(), last.len());
    }
}
