#![allow(clippy::unwrap_used)]

use super::corpus::{QUERIES, distractors, realistic};
use super::*;
use toolmesh_proto::pb;

fn indexed(distractor_count: usize) -> ToolSearch {
    let search = ToolSearch::default();
    let mut tools = realistic();
    tools.extend(distractors(distractor_count));
    search.replace_all(&tools);
    search
}

fn first(search: &ToolSearch, query: &str) -> Option<String> {
    search
        .search(query, 1, Scope::Everything)
        .first()
        .map(|f| f.name.clone())
}

/// Where the expected tool ranks for each query of the fixed set, among
/// the realistic tools and 10,000 distractors.
fn ranks() -> Vec<(&'static str, &'static str, Option<usize>, Vec<String>)> {
    let search = indexed(10_000);
    QUERIES
        .iter()
        .map(|(query, expected)| {
            let found = search.search(query, 10, Scope::Everything);
            let rank = found.iter().position(|f| f.name == *expected);
            let top: Vec<String> = found.iter().take(3).map(|f| f.name.clone()).collect();
            (*query, *expected, rank, top)
        })
        .collect()
}

/// Lexical ranking cannot bridge every paraphrase: a query that shares no
/// word (or stem) with the tool it wants ("say this in French" for
/// `translate_text`) finds nothing. The fixed set is kept as written;
/// this test holds the ranking to what it reaches (docs/benchmarks.md,
/// "Tool search"), so that a change can only raise it.
#[test]
fn the_fixed_query_set_ranks_as_measured() {
    let ranks = ranks();
    let first = ranks.iter().filter(|r| r.2 == Some(0)).count();
    let top3 = ranks.iter().filter(|r| r.2.is_some_and(|r| r < 3)).count();
    let report: Vec<String> = ranks
        .iter()
        .filter(|r| r.2 != Some(0))
        .map(|(q, e, rank, top)| format!("{q:?}: {e} at {rank:?}, first {top:?}"))
        .collect();
    eprintln!(
        "first {first}/{}, top 3 {top3}/{}\n{}",
        ranks.len(),
        ranks.len(),
        report.join("\n")
    );
    assert!(
        first >= FIRST_AT_LEAST && top3 >= TOP3_AT_LEAST,
        "first {first}, top 3 {top3}:\n{}",
        report.join("\n")
    );
}

/// Measured with the index as it is (see the test above).
const FIRST_AT_LEAST: usize = 19;
const TOP3_AT_LEAST: usize = 20;

#[test]
fn words_split_names_as_a_query_would() {
    for (name, expected) in [
        ("getWeather", vec!["get", "weather"]),
        ("get_weather", vec!["get", "weather"]),
        ("github.create_issue", vec!["github", "create", "issue"]),
        ("HTTPServer2", vec!["httpserver2"]),
        ("café-menu", vec!["café", "menu"]),
    ] {
        assert_eq!(words(name), expected, "{name}");
    }
}

#[test]
fn the_index_follows_changes() {
    let search = indexed(0);
    assert_eq!(
        first(&search, "will it rain in Paris").as_deref(),
        Some("weather_forecast")
    );
    search.remove("weather_forecast");
    assert_ne!(
        first(&search, "will it rain in Paris").as_deref(),
        Some("weather_forecast")
    );
    let mut tools = realistic();
    let mut renamed = tools.remove(0);
    renamed.name = "meteo".into();
    search.upsert(&renamed);
    assert_eq!(
        first(&search, "will it rain in Paris").as_deref(),
        Some("meteo")
    );
    // Many changes rebuild the index; nothing is lost.
    for tool in distractors(500) {
        search.upsert(&tool);
    }
    assert_eq!(
        first(&search, "will it rain in Paris").as_deref(),
        Some("meteo")
    );
    assert_eq!(
        first(&search, "sync the forklift records of site 3").as_deref(),
        Some("sync_forklift_3")
    );
}

#[test]
fn results_are_filtered_bounded_and_stable() {
    let search = indexed(200);
    let all = search.search("list records", 50, Scope::Everything);
    assert!(all.len() <= 50 && all.len() > 5);
    assert!(all.windows(2).all(|w| w[0].score >= w[1].score));
    let kept = search.search("list records", 50, &|name: &str| name.starts_with("list_"));
    assert!(!kept.is_empty() && kept.iter().all(|f| f.name.starts_with("list_")));
    assert_eq!(
        search
            .search("list records", 10, Scope::Everything)
            .iter()
            .map(|f| &f.name)
            .collect::<Vec<_>>(),
        search
            .search("list records", 10, Scope::Everything)
            .iter()
            .map(|f| &f.name)
            .collect::<Vec<_>>()
    );
    assert!(search.search("zzzz qqqq", 5, Scope::Everything).is_empty());
}

/// The figures: her tool's score for "quasar" was 1.642 alone,
/// 1.256 while a tool hidden from her also said "quasar".
#[test]
fn a_hidden_tool_changes_no_score_and_no_rank() {
    let search = indexed(200);
    let tool = |name: &str, description: &str| pb::ToolDescriptor {
        name: name.into(),
        description: description.into(),
        ..Default::default()
    };
    search.upsert(&tool("observe_quasar", "Point the telescope at a quasar"));
    search.upsert(&tool("telescope_status", "Status of the quasar telescope"));
    let visible = |name: &str| name != "hidden_quasar_catalog";
    let before = search.search("quasar telescope", 10, &visible);
    assert_eq!(before.len(), 2, "{before:?}");
    search.upsert(&tool(
        "hidden_quasar_catalog",
        "Quasar catalog: every quasar, quasar redshifts",
    ));
    let during = search.search("quasar telescope", 10, &visible);
    let unscoped = search.search("quasar telescope", 10, Scope::Everything);
    search.remove("hidden_quasar_catalog");
    let after = search.search("quasar telescope", 10, &visible);
    let figures = |found: &[Found]| {
        found
            .iter()
            .map(|f| (f.name.clone(), f.score))
            .collect::<Vec<_>>()
    };
    assert_eq!(figures(&during), figures(&before));
    assert_eq!(figures(&after), figures(&before));
    assert!(unscoped.iter().any(|f| f.name == "hidden_quasar_catalog"));
    assert_ne!(
        unscoped
            .iter()
            .find(|f| f.name == "observe_quasar")
            .map(|f| f.score),
        before
            .iter()
            .find(|f| f.name == "observe_quasar")
            .map(|f| f.score),
        "without a scope the hidden tool weighs in"
    );
}

/// The scorer gives the scores the `bm25` crate's engine gave for a
/// freshly built index, so a caller who sees everything ranks as before.
#[test]
fn a_caller_who_sees_everything_gets_the_crate_s_scores() {
    let mut tools = realistic();
    tools.extend(distractors(1_000));
    let search = ToolSearch::default();
    search.replace_all(&tools);
    let documents: Vec<::bm25::Document<String>> = tools
        .iter()
        .map(|d| ::bm25::Document::new(d.name.clone(), text(d)))
        .collect();
    let engine =
        ::bm25::SearchEngineBuilder::<String>::with_documents(::bm25::Language::English, documents)
            .build();
    for (query, _) in QUERIES {
        let mut expected: Vec<(String, f32)> = engine
            .search(&words(query).join(" "), None)
            .into_iter()
            .map(|r| (r.document.id, r.score))
            .collect();
        expected.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let found: Vec<(String, f32)> = search
            .search(query, usize::MAX, Scope::Everything)
            .into_iter()
            .map(|f| (f.name, f.score))
            .collect();
        assert_eq!(found, expected, "{query}");
        let all_visible = search.search(query, usize::MAX, &|_: &str| true);
        assert_eq!(all_visible.len(), found.len(), "{query}");
    }
}
