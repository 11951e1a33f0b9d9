//! Search quality and cost with a model: BM25 alone, the model alone and
//! hybrid, on both query sets (`test-support/src/search/`), at 1,000 and
//! 10,000 tools (the sets' 93 tools among generated distractors of twelve
//! domains); how long embedding the catalog takes and what its vectors
//! hold in memory; search latency with the query embedded.
//!
//! ```sh
//! dir=$(scripts/search-model.sh)
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir"
//! CANDLE_NUM_THREADS=1 cargo bench -p toolmesh-registry --bench search_quality -- "$dir" --sizes 10000 --sets none
//! cargo bench -p toolmesh-registry --bench search_quality -- "$dir" --tune
//! ```
//!
//! `--tune` sweeps the lexical weight on the fixed set alone: the weight
//! is chosen there and measured on the held-out set.
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
