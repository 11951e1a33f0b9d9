//! `--search-model`: a directory that does not load stops the registry
//! naming the file; with the suite's model (all-MiniLM-L6-v2, fetched by
//! `scripts/search-model.sh`), search is lexical while tools are being
//! embedded, then hybrid, and finds paraphrases BM25 cannot.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use toolmesh_proto::pb;
use toolmesh_registry::Registry;
use toolmesh_test_support::wait::eventually;

use crate::common::*;
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
    // What the caller cannot see moves none of its scores: the same as an
    // index holding its tools alone (BM25's statistics and the centring's
    // mean are the scope's).
    let alone = ToolSearch::hybrid(Semantic::load(&dir).unwrap());
    alone.replace_all(tools.iter().filter(|t| only_mail(&t.name)));
    while alone.semantic().unwrap().pending() > 0 {
        assert!(Instant::now() < deadline, "the mail tools not embedded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let by_itself = alone.rank("send a message", Scope::Everything).await;
    assert_eq!(by_itself.ranking, Ranking::Hybrid);
    assert_eq!(scoped.found.len(), by_itself.found.len());
    for (seen, own) in scoped.found.iter().zip(&by_itself.found) {
        assert_eq!(seen.name, own.name);
        assert!((seen.score - own.score).abs() < 1e-4, "{seen:?} / {own:?}");
    }
    // A 1 MB query: clipped for the model (or ranked lexically if its
    // vector is late), never a crash.
    let huge = "translate ".repeat(100_000);
    assert!(!index.rank(&huge, Scope::Everything).await.found.is_empty());
    let _ = index.rank("", Scope::Everything).await;
    let _ = index
        .rank("日本語に翻訳してください", Scope::Everything)
        .await;
}

const TOOLS: &str = r#"
tools:
  - name: weather_forecast
    description: Forecast of temperature, rain and wind for a city
    backend: {command: [cat]}
  - name: send_email
    description: Send an email message to recipients
    backend: {command: [cat]}
  - name: translate_text
    description: Translate text from one language to another
    backend: {command: [cat]}
"#;

/// The vectors Redis holds under `prefix`: key and value, claims left out.
async fn cached(url: &str, prefix: &str) -> Vec<(String, Vec<u8>)> {
    let mut conn = crate::common::redis_probe::raw(url).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{{{prefix}:emb:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for key in keys.into_iter().filter(|k| !k.ends_with(":claim")) {
        let value: Vec<u8> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((key, value));
    }
    out.sort();
    out
}

async fn ranking(registry: &TestRegistry) -> i32 {
    let answer = registry
        .client()
        .await
        .search_tools(pb::SearchToolsRequest {
            query: "say this in French".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    answer.ranking
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_share_vectors_through_redis_and_refuse_a_corrupt_one() {
    let Some(dir) = model_dir() else { return };
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let mut config =
        crate::redis_replicas::replica_config(&redis.url(), "emb", Duration::from_secs(10));
    config.search_model = Some(dir);
    let first = TestRegistry::start(config.clone()).await;
    let second = TestRegistry::start(config.clone()).await;
    let _sidecar = TestSidecar::start(&first.url(), "s1", command_tools(TOOLS)).await;
    wait_for_instances(&second, "translate_text", 1).await;
    let hybrid = pb::SearchRanking::Hybrid as i32;
    for replica in [&first, &second] {
        eventually(Duration::from_secs(120), "search ranked hybrid", || async {
            ranking(replica).await == hybrid
        })
        .await;
    }
    // One vector per tool text, whichever replica computed it: 72 bytes of
    // header, 384 floats, an 8-byte checksum.
    let vectors = cached(&redis.url(), "emb").await;
    assert_eq!(
        vectors.len(),
        3,
        "{:?}",
        vectors.iter().map(|v| &v.0).collect::<Vec<_>>()
    );
    assert!(vectors.iter().all(|(_, v)| v.len() == 72 + 384 * 4 + 8));

    // A corrupt entry is not served: a new replica embeds that text again
    // and writes it over.
    let (key, value) = vectors[0].clone();
    let mut conn = crate::common::redis_probe::raw(&redis.url()).await;
    let mut corrupt = value.clone();
    corrupt[100] ^= 0xff;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg(&corrupt)
        .query_async(&mut conn)
        .await
        .unwrap();
    let third = TestRegistry::start(config).await;
    wait_for_instances(&third, "translate_text", 1).await;
    eventually(Duration::from_secs(120), "search ranked hybrid", || async {
        ranking(&third).await == hybrid
    })
    .await;
    let rewritten = cached(&redis.url(), "emb").await;
    let again = rewritten
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.clone());
    assert_eq!(
        again.as_ref(),
        Some(&value),
        "the corrupt vector was recomputed, bit for bit"
    );

    for replica in [first, second, third] {
        replica.stop().await;
    }
}
