//! The reads `toolmesh-bench scale` times once the catalog is announced:
//! the whole catalog page after page, one page of 100 at the start and
//! deep in it, `GetTool` of random names, and `SearchTools`. Before each
//! timed call the [`Keeper`] heartbeats the leases if that is due.

use std::time::{Duration, Instant};

use tonic::transport::Channel;
use toolmesh_proto::pb::{self, tool_registry_client::ToolRegistryClient};

use super::{keeper::Keeper, timing::Summary};

/// The registry's `ToolRegistry`, answers up to 64 MiB.
pub(super) type Registry = ToolRegistryClient<Channel>;

/// Most pages one walk of the catalog may take before it is called a loop.
const MAX_PAGES: usize = 1_000_000;

/// Searches timed in turn: a tool's own number, words of its schema, its
/// tags, and words no tool has.
pub(super) const QUERIES: [&str; 4] = [
    "generated tool number 4242",
    "what tool 77 looks up",
    "scale benchmark group3",
    "weather forecast in paris",
];

/// Every tool, page after page of the largest pages the registry sends
/// (`page_size` 0): how many were listed, and in how many pages.
pub(super) async fn list_all(registry: &mut Registry) -> anyhow::Result<(usize, usize)> {
    let mut token = String::new();
    let mut listed = 0;
    for pages in 1..=MAX_PAGES {
        let answer = registry
            .list_tools(pb::ListToolsRequest {
                page_token: token,
                ..Default::default()
            })
            .await?
            .into_inner();
        listed += answer.tools.len();
        token = answer.next_page_token;
        if token.is_empty() {
            return Ok((listed, pages));
        }
        anyhow::ensure!(!answer.tools.is_empty(), "ListTools sent an empty page");
    }
    anyhow::bail!("ListTools had more than {MAX_PAGES} pages")
}

/// The page token that resumes after the first `after` tools.
pub(super) async fn token_after(registry: &mut Registry, after: usize) -> anyhow::Result<String> {
    let mut token = String::new();
    let mut seen = 0;
    while seen < after {
        let answer = registry
            .list_tools(pb::ListToolsRequest {
                page_size: u32::try_from(after - seen).unwrap_or(u32::MAX),
                page_token: token,
                ..Default::default()
            })
            .await?
            .into_inner();
        anyhow::ensure!(
            !answer.tools.is_empty() && !answer.next_page_token.is_empty(),
            "the catalog ended after {seen} tools, before {after}"
        );
        seen += answer.tools.len();
        token = answer.next_page_token;
    }
    Ok(token)
}

/// `calls` reads of the page of `page_size` tools that `token` starts.
pub(super) async fn time_page(
    registry: &mut Registry,
    keeper: &mut Keeper,
    token: &str,
    page_size: u32,
    calls: usize,
) -> anyhow::Result<Summary> {
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        keeper.tend().await?;
        let request = pb::ListToolsRequest {
            page_size,
            page_token: token.to_owned(),
            ..Default::default()
        };
        let started = Instant::now();
        let answer = registry.list_tools(request).await?.into_inner();
        times.push(started.elapsed());
        anyhow::ensure!(
            answer.tools.len() == page_size as usize,
            "a page of {page_size} had {} tools",
            answer.tools.len()
        );
    }
    Ok(Summary::of(times))
}

/// A fixed sequence of numbers below a bound (xorshift64*): the same
/// random names on every run.
pub(super) struct Picks(u64);

impl Picks {
    /// A sequence from a fixed seed.
    pub(super) fn new() -> Self {
        Self(0x9e37_79b9_7f4a_7c15)
    }

    /// The next number in `0..bound` (0 when `bound` is 0).
    pub(super) fn below(&mut self, bound: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32;
        usize::try_from(value).unwrap_or(0) % bound.max(1)
    }
}

/// `calls` `GetTool`s of names drawn at random from the `tools` announced.
pub(super) async fn time_get_tool(
    registry: &mut Registry,
    keeper: &mut Keeper,
    tools: usize,
    calls: usize,
) -> anyhow::Result<Summary> {
    let mut picks = Picks::new();
    let mut times = Vec::with_capacity(calls);
    for _ in 0..calls {
        keeper.tend().await?;
        let name = super::descriptor(picks.below(tools)).name;
        let request = pb::GetToolRequest {
            name: name.clone(),
            version: String::new(),
        };
        let started = Instant::now();
        let tool = registry.get_tool(request).await?.into_inner();
        times.push(started.elapsed());
        let got = tool.descriptor.map(|d| d.name).unwrap_or_default();
        anyhow::ensure!(got == name, "GetTool {name} answered {got}");
    }
    Ok(Summary::of(times))
}

/// What `SearchTools` answered and how fast.
#[derive(Debug, serde::Serialize)]
pub(super) struct Searched {
    /// Over every query.
    pub(super) all: Summary,
    /// How the registry said it ranked (the last answer's ranking).
    pub(super) ranking: String,
    /// Per query: its words, its figures, and how many tools it found.
    pub(super) queries: Vec<(String, Summary, usize)>,
}

/// `calls` `SearchTools` (limit 5), the [`QUERIES`] in turn, after one
/// untimed search of each.
pub(super) async fn time_search(
    registry: &mut Registry,
    keeper: &mut Keeper,
    calls: usize,
) -> anyhow::Result<Searched> {
    let mut ranking = pb::SearchRanking::Unspecified;
    let mut matches = [0; QUERIES.len()];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); QUERIES.len()];
    for call in 0..calls + QUERIES.len() {
        let which = call % QUERIES.len();
        keeper.tend().await?;
        let request = pb::SearchToolsRequest {
            query: QUERIES[which].into(),
            limit: 5,
            ..Default::default()
        };
        let started = Instant::now();
        let answer = registry.search_tools(request).await?.into_inner();
        if call >= QUERIES.len() {
            times[which].push(started.elapsed());
        }
        ranking = answer.ranking();
        matches[which] = answer.matches.len();
    }
    let all = Summary::of(times.iter().flatten().copied().collect());
    let queries = QUERIES
        .iter()
        .zip(times)
        .zip(matches)
        .map(|((query, times), found)| ((*query).to_owned(), Summary::of(times), found))
        .collect();
    Ok(Searched {
        all,
        ranking: ranking.as_str_name().to_owned(),
        queries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_stay_below_their_bound_and_repeat_from_the_seed() {
        let mut picks = Picks::new();
        let drawn: Vec<usize> = (0..1000).map(|_| picks.below(100)).collect();
        assert!(drawn.iter().all(|&n| n < 100));
        let mut distinct = drawn.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 90, "{} distinct of 100", distinct.len());
        let mut again = Picks::new();
        assert!(drawn.iter().all(|&n| n == again.below(100)));
        assert_eq!(Picks::new().below(0), 0);
    }
}
