//! `--search-model`: a directory that does not load stops the registry
//! naming the file; with the suite's model (all-MiniLM-L6-v2, fetched by
//! `scripts/search-model.sh`), search is lexical while tools are being
//! embedded, then hybrid, and finds paraphrases BM25 cannot.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use toolmesh_registry::Registry;
use toolmesh_registry::catalog::search::{Ranking, Scope, ToolSearch, semantic::Semantic};
use toolmesh_registry::config::Config;
use toolmesh_test_support::search::{self, Quality};

/// The model's directory, from `TOOLMESH_TEST_MODEL`; `None` (with a
/// line saying so) when unset outside the full suite, which fails instead.
fn model_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TOOLMESH_TEST_MODEL") {
        return Some(PathBuf::from(dir));
    }
    assert!(
        std::env::var_os("TOOLMESH_FULL_SUITE").is_none(),
        "TOOLMESH_TEST_MODEL is unset: scripts/test.sh sets it from scripts/search-model.sh"
    );
    eprintln!("*** SKIPPED: TOOLMESH_TEST_MODEL is unset (scripts/search-model.sh prints one) ***");
    None
}

#[tokio::test]
async fn a_model_directory_that_does_not_load_stops_the_registry_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), "{not json").unwrap();
    let config = Config {
        search_model: Some(dir.path().to_owned()),
        ..Config::default()
    };
    let Err(error) = Registry::from_config(config) else {
        panic!("a broken model directory was accepted");
    };
    let message = error.to_string();
    assert!(message.contains("--search-model"), "{message}");
    assert!(message.contains("config.json"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_is_lexical_until_every_tool_is_embedded_then_hybrid() {
    let Some(dir) = model_dir() else { return };
    let index = ToolSearch::hybrid(Semantic::load(&dir).unwrap());
    let tools = search::catalog(400, search::varied_distractors);
    index.replace_all(&tools);
    let early = index.rank("say this in French", Scope::Everything).await;
    assert_eq!(
        early.ranking,
        Ranking::Lexical,
        "400 tools are not embedded at once"
    );

    let deadline = Instant::now() + Duration::from_secs(300);
    while index.semantic().unwrap().pending() > 0 {
        assert!(
            Instant::now() < deadline,
            "400 tools not embedded in 5 minutes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ranked = index.rank("say this in French", Scope::Everything).await;
    assert_eq!(ranked.ranking, Ranking::Hybrid);
    let top5: Vec<&str> = ranked
        .found
        .iter()
        .take(5)
        .map(|f| f.name.as_str())
        .collect();
    assert!(top5.contains(&"translate_text"), "{top5:?}");

    // On the fixed set (the one the blend was tuned on), hybrid beats BM25
    // by as much as measured (22 against 15 first at 1,000 tools).
    let fixed = search::fixed();
    let (mut lexical, mut hybrid) = (Vec::new(), Vec::new());
    for (query, expected) in &fixed.queries {
        let words = index.search(query, 10, Scope::Everything);
        lexical.push(words.iter().position(|f| &f.name == expected));
        let ranked = index.rank(query, Scope::Everything).await;
        assert_eq!(ranked.ranking, Ranking::Hybrid);
        hybrid.push(
            ranked
                .found
                .iter()
                .take(10)
                .position(|f| &f.name == expected),
        );
    }
    let (lexical, hybrid) = (Quality::of(&lexical), Quality::of(&hybrid));
    assert!(
        hybrid.first >= lexical.first + 4,
        "BM25 {lexical}; hybrid {hybrid}"
    );
    assert!(hybrid.top5 >= 24, "hybrid {hybrid}");

    // A caller sees only its scope; bad queries are answered, not fatal.
    let only_mail = |name: &str| name.contains("email");
    let scoped = index
        .rank("send a message", Scope::Visible(&only_mail))
        .await;
    assert!(scoped.found.iter().all(|f| f.name.contains("email")));
    assert!(!scoped.found.is_empty());
    // A 1 MB query: clipped for the model (or ranked lexically if its
    // vector is late), never a crash.
    let huge = "translate ".repeat(100_000);
    assert!(!index.rank(&huge, Scope::Everything).await.found.is_empty());
    let _ = index.rank("", Scope::Everything).await;
    let _ = index
        .rank("日本語に翻訳してください", Scope::Everything)
        .await;
}
