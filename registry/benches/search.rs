//! `SearchTools`' index at 10,000 tools: how long building it takes, what
//! it holds in memory, how fast it takes changes, and the latency of a
//! search, over the fixed query set (`registry/src/catalog/search/corpus.rs`: 30
//! realistic tools among 10,000 generated ones).
//!
//! ```sh
//! cargo bench -p toolmesh-registry --bench search
//! ```
//!
//! Memory is the process's resident size before and after building the
//! index (the tool descriptors are made before).
//!
//! A caller the policy restricts is scored against the tools it sees: its
//! search asks the policy once per indexed tool. "restricted" is such a
//! caller, given the 30 realistic tools by name and the `list_*` and
//! `sync_*` warehouse tools (a quarter of them) by pattern.
#![allow(missing_docs, clippy::unwrap_used)]

use std::time::Instant;

use toolmesh_registry::access::auth::{Caller, Policy};
use toolmesh_registry::catalog::search::{Scope, ToolSearch};

#[path = "../src/catalog/search/corpus.rs"]
mod corpus;

#[path = "support/measure.rs"]
mod measure;
use measure::{percentile, rss};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    for size in [1_000, 10_000] {
        let mut tools = corpus::realistic();
        tools.extend(corpus::distractors(size - tools.len()));

        let before = rss();
        let search = ToolSearch::default();
        let started = Instant::now();
        search.replace_all(&tools);
        let built = started.elapsed();
        let held = rss() - before;

        let mut latencies = Vec::new();
        let mut first = 0;
        for _ in 0..100 {
            for (query, expected) in corpus::QUERIES {
                let started = Instant::now();
                let found = search.search(query, 5, Scope::Everything);
                latencies.push(started.elapsed());
                first += usize::from(found.first().is_some_and(|f| f.name == *expected));
            }
        }
        latencies.sort();

        let mut patterns: Vec<String> = corpus::realistic().into_iter().map(|t| t.name).collect();
        patterns.extend(["list_*".to_owned(), "sync_*".to_owned()]);
        let policy = Policy::parse(&format!(
            "rules:\n  - callers: [agent]\n    tools: {}\n",
            serde_json::to_string(&patterns).unwrap()
        ))
        .unwrap();
        let caller = Caller {
            id: "agent".into(),
            groups: Vec::new(),
        };
        let visible = |name: &str| policy.allows(&caller, name);
        let seen = tools.iter().filter(|t| visible(&t.name)).count();
        let mut restricted = Vec::new();
        let mut restricted_first = 0;
        for _ in 0..20 {
            for (query, expected) in corpus::QUERIES {
                let started = Instant::now();
                let found = search.search(query, 5, &visible);
                restricted.push(started.elapsed());
                restricted_first += usize::from(found.first().is_some_and(|f| f.name == *expected));
            }
        }
        restricted.sort();

        let started = Instant::now();
        let changes = corpus::distractors(1_000);
        for tool in &changes {
            search.upsert(tool);
        }
        let upserts = changes.len() as f64 / started.elapsed().as_secs_f64();

        println!(
            "tools {size}: build {:.1} ms, index {:.1} MiB ({:.0} B a tool), search p50 {:.0} µs p99 {:.0} µs max {:.0} µs, {:.0} upserts/s, expected first {}/{}",
            built.as_secs_f64() * 1e3,
            held as f64 / (1 << 20) as f64,
            held as f64 / size as f64,
            percentile(&latencies, 0.5).as_secs_f64() * 1e6,
            percentile(&latencies, 0.99).as_secs_f64() * 1e6,
            latencies.last().unwrap().as_secs_f64() * 1e6,
            upserts,
            first / 100,
            corpus::QUERIES.len(),
        );
        println!(
            "tools {size}, restricted caller seeing {seen}: search p50 {:.0} µs p99 {:.0} µs max {:.0} µs, expected first {}/{}",
            percentile(&restricted, 0.5).as_secs_f64() * 1e6,
            percentile(&restricted, 0.99).as_secs_f64() * 1e6,
            restricted.last().unwrap().as_secs_f64() * 1e6,
            restricted_first / 20,
            corpus::QUERIES.len(),
        );
    }
}
