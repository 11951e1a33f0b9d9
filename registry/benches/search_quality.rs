//! Search quality and cost with a model: BM25 alone, the model alone and
//! hybrid, on both query sets (`test-support/src/search/`), at 1,000 and
//! 10,000 tools (the sets' 93 tools among generated distractors of twelve
//! domains); how long embedding the catalog takes and what its vectors
//! hold in memory; search latency with the query embedded.
//!
//! ```sh
//! dir=$(scripts/search-model.sh)
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir"
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir" --sizes 10000 --sets none
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir" --tune
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir" --variants --sizes 1000
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir" --variants --reading 0
//! ```
//!
//! `--tune` sweeps the lexical weight on the fixed set alone: the weight
//! is chosen there and measured on the held-out set. `--variants` compares
//! ways to read a tool as text, and how much of the catalog's mean vector
//! to take out (`semantic/centred.rs` in the registry),
//! on the fixed set alone too.
#![allow(missing_docs, clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use toolmesh_registry::catalog::search::{Ranking, Scope, ToolSearch, semantic::Semantic};
use toolmesh_test_support::search::{self, Quality, SearchSet};

#[path = "support/measure.rs"]
mod measure;
use measure::{percentile, rss};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The blend's weight as shipped.
const SHIPPED: f32 = 0.1;

fn rank_of(found: &[String], expected: &str) -> Option<usize> {
    found.iter().position(|n| n == expected)
}

async fn quality(index: &ToolSearch, set: &SearchSet, weight: Option<f32>) -> Quality {
    let mut ranks = Vec::new();
    for (query, expected) in &set.queries {
        let names: Vec<String> = match weight {
            None => index.search(query, 10, Scope::Everything),
            Some(w) => {
                let ranked = index.rank_weighted(query, Scope::Everything, w).await;
                assert_eq!(ranked.ranking, Ranking::Hybrid, "{query}: ranked lexically");
                ranked.found.into_iter().take(10).collect()
            }
        }
        .into_iter()
        .map(|f| f.name)
        .collect();
        ranks.push(rank_of(&names, expected));
    }
    Quality::of(&ranks)
}

struct Args {
    model: PathBuf,
    sizes: Vec<usize>,
    sets: Vec<SearchSet>,
    tune: bool,
    variants: bool,
    reading: Option<usize>,
}

fn args() -> Args {
    let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
    let mut parsed = Args {
        model: std::env::var_os("TOOLMESH_TEST_MODEL")
            .map(PathBuf::from)
            .unwrap_or_default(),
        sizes: vec![1_000, 10_000],
        sets: vec![search::fixed(), search::held_out()],
        tune: false,
        variants: false,
        reading: None,
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--sizes" => {
                parsed.sizes = args
                    .next()
                    .unwrap()
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect();
            }
            "--sets" => {
                let which = args.next().unwrap();
                parsed.sets.retain(|s| which.contains(s.name));
            }
            "--tune" => parsed.tune = true,
            "--variants" => parsed.variants = true,
            "--reading" => parsed.reading = Some(args.next().unwrap().parse().unwrap()),
            dir => parsed.model = PathBuf::from(dir),
        }
    }
    assert!(
        parsed.model.is_dir(),
        "give the model directory (scripts/search-model.sh prints it)"
    );
    parsed
}

#[tokio::main]
async fn main() {
    let args = args();
    if args.tune {
        return tune(&args).await;
    }
    if args.variants {
        return variants(&args);
    }
    mcp_list_size();
    for &size in &args.sizes {
        let tools = search::catalog(size, search::varied_distractors);
        let before = rss();
        let semantic = Semantic::load(&args.model).unwrap();
        let loaded = rss();
        let index = ToolSearch::hybrid(semantic);
        let started = Instant::now();
        index.replace_all(&tools);
        let lexical_built = started.elapsed();
        while index.semantic().unwrap().pending() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let embedded = started.elapsed();
        let after = rss();
        println!(
            "{size} tools: model {:.0} MB resident; BM25 index built in {lexical_built:.2?}; every tool embedded in {embedded:.2?} ({:.0} tools/s); index and vectors {:.1} MB",
            (loaded - before) as f64 / 1e6,
            size as f64 / embedded.as_secs_f64(),
            (after - loaded) as f64 / 1e6,
        );
        for set in &args.sets {
            let bm25 = quality(&index, set, None).await;
            let model = quality(&index, set, Some(0.0)).await;
            let hybrid = quality(&index, set, Some(SHIPPED)).await;
            println!("  {} set ({} tasks):", set.name, set.queries.len());
            println!("    BM25 alone   {bm25}");
            println!("    model alone  {model}");
            println!("    hybrid       {hybrid}");
        }
        if !args.sets.is_empty() {
            let mut latencies = Vec::new();
            for _ in 0..5 {
                for set in &args.sets {
                    for (query, _) in &set.queries {
                        let started = Instant::now();
                        let ranked = index.rank(query, Scope::Everything).await;
                        latencies.push(started.elapsed());
                        assert_eq!(ranked.ranking, Ranking::Hybrid);
                    }
                }
            }
            latencies.sort();
            println!(
                "  hybrid search, query embedded: p50 {:.2?}, p99 {:.2?}, max {:.2?} ({} searches, one at a time)",
                percentile(&latencies, 0.5),
                percentile(&latencies, 0.99),
                latencies[latencies.len() - 1],
                latencies.len()
            );
        }
    }
}

/// What MCP `tools/list` costs a host at 10,000 tools in full discovery:
/// bytes of the tools' JSON, and tokens estimated at 4 bytes each
/// (progressive discovery's list is measured by the MCP test).
fn mcp_list_size() {
    let entry = |t: &toolmesh_proto::pb::ToolDescriptor| {
        serde_json::json!({
            "name": t.name,
            "description": t.description,
            "inputSchema": serde_json::from_str::<serde_json::Value>(&t.input_schema_json).unwrap(),
        })
    };
    let full: Vec<_> = search::catalog(10_000, search::varied_distractors)
        .iter()
        .map(entry)
        .collect();
    let full = serde_json::to_string(&full).unwrap().len();
    println!(
        "MCP tools/list at 10,000 tools, full: {full} bytes (~{} tokens)",
        full / 4
    );
}

/// The lexical weight's sweep, on the fixed set alone, at each size.
async fn tune(args: &Args) {
    let fixed = search::fixed();
    for &size in &args.sizes {
        let tools = search::catalog(size, search::varied_distractors);
        let index = ToolSearch::hybrid(Semantic::load(&args.model).unwrap());
        index.replace_all(&tools);
        while index.semantic().unwrap().pending() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("{size} tools, fixed set:");
        println!("  BM25 alone     {}", quality(&index, &fixed, None).await);
        for weight in [0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0] {
            println!(
                "  weight {weight:<5}   {}",
                quality(&index, &fixed, Some(weight)).await
            );
        }
        println!("  misses at the shipped weight:");
        for (query, expected) in &fixed.queries {
            let found = index
                .rank_weighted(query, Scope::Everything, SHIPPED)
                .await
                .found;
            if found.first().is_none_or(|f| &f.name != expected) {
                let top: Vec<String> = found
                    .iter()
                    .take(3)
                    .map(|f| format!("{} {:.3}", f.name, f.score))
                    .collect();
                let at = found.iter().position(|f| &f.name == expected);
                println!("    {query:?} wants {expected} (at {at:?}): {top:?}");
            }
        }
    }
}

/// A way to read a tool as text: its label and the text.
type Reading = (
    &'static str,
    fn(&toolmesh_proto::pb::ToolDescriptor) -> String,
);

/// Readings of a tool other than the one shipped ([`semantic::text`]).
fn readings() -> Vec<Reading> {
    use toolmesh_registry::catalog::search::{semantic, words};
    vec![
        ("shipped", semantic::text),
        ("with arguments", |t| {
            format!("{}. {}", semantic::text(t), arguments(t))
        }),
        ("description", |t| t.description.clone()),
        ("name words", |t| words(&t.name).join(" ")),
        ("name and description", |t| {
            format!("{}. {}", words(&t.name).join(" "), t.description)
        }),
    ]
}

/// A tool's arguments as `name words: description; ...`.
fn arguments(tool: &toolmesh_proto::pb::ToolDescriptor) -> String {
    let schema: serde_json::Value = serde_json::from_str(&tool.input_schema_json).unwrap();
    let Some(properties) = schema["properties"].as_object() else {
        return String::new();
    };
    properties
        .iter()
        .map(|(name, property)| {
            let words = toolmesh_registry::catalog::search::words(name).join(" ");
            format!(
                "{words}: {}",
                property["description"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `vectors` less `by` times their mean, each back to unit length.
fn centred(vectors: &[Vec<f32>], mean_of: &[Vec<f32>], by: f32) -> Vec<Vec<f32>> {
    let n = mean_of.len() as f32;
    let mean: Vec<f32> = (0..mean_of[0].len())
        .map(|i| mean_of.iter().map(|v| v[i]).sum::<f32>() / n)
        .collect();
    vectors
        .iter()
        .map(|v| {
            let d: Vec<f32> = v.iter().zip(&mean).map(|(x, m)| x - by * m).collect();
            let length = d.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
            d.into_iter().map(|x| x / length).collect()
        })
        .collect()
}

/// What each reading of a tool (and the best of several) would rank on
/// the fixed set alone, with the vectors centred by 0, 0.5 and all of the
/// catalog's mean, blended with BM25 at weights 0, 0.1 and 0.2: the tools
/// embedded under each reading with the model directly (`--reading N`
/// keeps only the Nth).
fn variants(args: &Args) {
    use toolmesh_embed::{Model, Role};
    let model = Model::load(&args.model).unwrap();
    let fixed = search::fixed();
    let readings: Vec<Reading> = readings()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| args.reading.is_none_or(|r| r == *i))
        .map(|(_, r)| r)
        .collect();
    let mut combinations: Vec<(String, Vec<usize>)> = readings
        .iter()
        .enumerate()
        .map(|(i, r)| (r.0.to_owned(), vec![i]))
        .collect();
    if readings.len() == 5 {
        combinations.push((
            "max(shipped, description, name words)".into(),
            vec![0, 2, 3],
        ));
        combinations.push(("max(shipped, with arguments)".into(), vec![0, 1]));
        combinations.push(("max(all)".into(), vec![0, 1, 2, 3, 4]));
    }
    let queries: Vec<&str> = fixed.queries.iter().map(|(q, _)| q.as_str()).collect();
    let query_vectors = model.embed(&queries, Role::Query).unwrap();
    for &size in &args.sizes {
        let tools = search::catalog(size, search::varied_distractors);
        let index = ToolSearch::default();
        index.replace_all(&tools);
        let lexical: Vec<std::collections::HashMap<String, f32>> = queries
            .iter()
            .map(|q| {
                let found = index.search(q, tools.len(), Scope::Everything);
                let best = found.iter().map(|f| f.score).fold(1e-6f32, f32::max);
                found
                    .into_iter()
                    .map(|f| (f.name, f.score / best))
                    .collect()
            })
            .collect();
        let started = Instant::now();
        let embedded: Vec<Vec<Vec<f32>>> = readings
            .iter()
            .map(|(_, read)| {
                let texts: Vec<String> = tools.iter().map(read).collect();
                let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
                model.embed(&texts, Role::Document).unwrap()
            })
            .collect();
        println!(
            "{size} tools, fixed set: {} readings embedded in {:.1?}",
            readings.len(),
            started.elapsed()
        );
        for centring in [0.0f32, 0.5, 1.0] {
            println!("  centred by {centring}:");
            let tool_vectors: Vec<Vec<Vec<f32>>> =
                embedded.iter().map(|e| centred(e, e, centring)).collect();
            let query_vectors = centred(&query_vectors, &embedded[0], centring);
            for (label, which) in &combinations {
                for weight in [0.0f32, 0.1, 0.2] {
                    let ranks: Vec<Option<usize>> = fixed
                        .queries
                        .iter()
                        .enumerate()
                        .map(|(q, (_, expected))| {
                            let mut scored: Vec<(f32, &str)> = tools
                                .iter()
                                .enumerate()
                                .map(|(t, tool)| {
                                    let cosine = which
                                        .iter()
                                        .map(|&r| dot(&query_vectors[q], &tool_vectors[r][t]))
                                        .fold(f32::MIN, f32::max);
                                    let bm25 = lexical[q].get(&tool.name).copied().unwrap_or(0.0);
                                    (cosine + weight * bm25, tool.name.as_str())
                                })
                                .collect();
                            scored.sort_by(|a, b| b.0.total_cmp(&a.0));
                            scored
                                .iter()
                                .position(|(_, n)| n == expected)
                                .filter(|&p| p < 10)
                        })
                        .collect();
                    println!("    {label:<40} weight {weight:<4} {}", Quality::of(&ranks));
                }
            }
        }
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
