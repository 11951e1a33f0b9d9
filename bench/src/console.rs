//! `toolmesh-bench console`: the console's pages timed at a large catalog.
//! Announces `tools` tools over gRPC exactly as `scale` does (`tools / 10`
//! instances by default), then, for each page, sends one untimed request
//! (its time is the "cold" column) and `requests` timed GETs, one after
//! another over one HTTP/1.1 keep-alive connection, as a browser would
//! (the form cookie the console sets is sent back). Every answer must be
//! `200` and, where the page's content is known, name the tool it should;
//! anything else is a failure. Prints a Markdown table: p50, p99 and max
//! (nearest rank), the body's size, and whether p99 is within the budget.
//! `scripts/bench_console.sh` drives it.
//!
//! The leases must outlive the run: start the registry with a long
//! `--lease-ttl`, or pass `--heartbeat` (its calls then run between the
//! timed requests). The catalog is counted again at the end.

use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream};
use tokio::{
    io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader},
    net::TcpStream,
};
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::{
    self, registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};

use crate::scale::{announce_all, announces, descriptor, rss_kib, timing::percentile};

/// Tools on one catalog page (the console's page size).
const CATALOG_PAGE: usize = 50;

/// `toolmesh-bench console`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The registry's gRPC address: `http://HOST:PORT`.
    #[arg(long)]
    registry: String,
    /// The registry's console: `http://HOST:PORT`.
    #[arg(long)]
    console: String,
    /// Tools announced in all.
    #[arg(long, default_value_t = 10_000)]
    tools: usize,
    /// Instances they are spread over [default: tools / 10].
    #[arg(long)]
    instances: Option<usize>,
    /// Timed GETs per page.
    #[arg(long, default_value_t = 50)]
    requests: usize,
    /// Announces in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The budget a page's p99 is held to, in milliseconds.
    #[arg(long, default_value_t = 50.0)]
    budget_ms: f64,
    /// Heartbeat every lease this often, in seconds (unset: none, the
    /// registry's `--lease-ttl` must outlive the run).
    #[arg(long)]
    heartbeat: Option<f64>,
    /// The registry's process id, when on this machine: its resident memory
    /// is read after the announces and after the pages.
    #[arg(long)]
    pid: Option<u32>,
}

/// One page to time.
struct Page {
    /// What it is, for the table.
    label: &'static str,
    /// Its path and query.
    path: String,
    /// Text the answer must hold (a tool's name), when known.
    expect: Option<String>,
}

/// The pages, chosen around the middle tool of `tools`.
fn pages(tools: usize) -> Vec<Page> {
    let name = |index: usize| descriptor(index).name;
    let mid = tools / 2;
    let middle = name(mid);
    // Page 100 by the cursor the catalog's own "next" link carries (or the
    // last page, in a smaller catalog).
    let deep_page = (tools.saturating_sub(1) / CATALOG_PAGE).min(99);
    let deep_first = deep_page * CATALOG_PAGE;
    let deep_path = if deep_first == 0 {
        "/tools".to_owned()
    } else {
        format!(
            "/tools?after={}&page={}",
            name(deep_first - 1),
            deep_page + 1
        )
    };
    let prefix_first = mid / 100 * 100;
    let prefix = &middle[..middle.len() - 2];
    let group = if tools > 7 { 7 } else { 0 };
    let description = descriptor(mid).description;
    let words: Vec<&str> = description
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    vec![
        Page {
            label: "catalog, page 1",
            path: "/tools".into(),
            expect: Some(name(0)),
        },
        Page {
            label: "catalog, page 100",
            path: "/tools?page=100".into(),
            expect: None,
        },
        Page {
            label: "catalog, page 100 by cursor",
            path: deep_path,
            expect: Some(name(deep_first)),
        },
        Page {
            label: "prefix filter",
            path: format!("/tools?prefix={prefix}"),
            expect: Some(name(prefix_first)),
        },
        Page {
            label: "tag filter",
            path: format!("/tools?tag=group{group}"),
            expect: Some(name(group)),
        },
        Page {
            label: "search",
            path: format!("/tools?q={}", words.join("+")),
            expect: Some(middle.clone()),
        },
        Page {
            label: "tool page",
            path: format!("/tools/{middle}"),
            expect: Some(middle.clone()),
        },
        Page {
            label: "playground",
            path: format!("/tools/{middle}/try"),
            expect: Some(middle),
        },
        Page {
            label: "instances",
            path: "/instances".into(),
            expect: None,
        },
        Page {
            label: "instances, page 2",
            path: "/instances?page=2".into(),
            expect: None,
        },
        Page {
            label: "calls",
            path: "/calls".into(),
            expect: None,
        },
        Page {
            label: "approvals",
            path: "/approvals".into(),
            expect: None,
        },
    ]
}

/// One page's figures.
struct Timed {
    /// The untimed first request.
    cold: Duration,
    /// The timed ones, sorted.
    times: Vec<Duration>,
    /// The last answer's body size.
    bytes: usize,
    /// Answers not `200`, without the expected text, or not received.
    failed: usize,
    /// The first failure, described.
    first_failure: Option<String>,
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `n` with thousands separated by commas.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Times `page`: one cold request, then `requests` timed.
async fn time_page(client: &mut Http, page: &Page, requests: usize) -> Timed {
    let mut timed = Timed {
        cold: Duration::ZERO,
        times: Vec::with_capacity(requests),
        bytes: 0,
        failed: 0,
        first_failure: None,
    };
    for attempt in 0..=requests {
        let started = Instant::now();
        let answer = client.get(&page.path).await;
        let took = started.elapsed();
        if attempt == 0 {
            timed.cold = took;
        } else {
            timed.times.push(took);
        }
        let failure = match answer {
            Err(error) => Some(format!("{error:#}")),
            Ok(answer) => {
                timed.bytes = answer.body.len();
                let expected = page.expect.as_deref().is_none_or(|text| {
                    answer
                        .body
                        .windows(text.len())
                        .any(|w| w == text.as_bytes())
                });
                if answer.status != 200 {
                    Some(format!("status {}", answer.status))
                } else if !expected {
                    Some(format!("no {:?} in the page", page.expect))
                } else {
                    None
                }
            }
        };
        if let Some(failure) = failure {
            timed.failed += 1;
            timed.first_failure.get_or_insert(failure);
        }
    }
    timed.times.sort();
    timed
}

/// Heartbeats every lease each `every`, until dropped.
fn keep_alive(registration: RegistrationClient<Channel>, leases: Vec<String>, every: Duration) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let failed = stream::iter(leases.iter().cloned())
                .map(|lease_id| {
                    let mut client = registration.clone();
                    async move { client.heartbeat(pb::HeartbeatRequest { lease_id }).await }
                })
                .buffer_unordered(16)
                .filter(|answer| std::future::ready(answer.is_err()))
                .count()
                .await;
            if failed > 0 {
                eprintln!("{failed} heartbeats failed");
            }
        }
    });
}

pub(crate) async fn run(args: Args) -> anyhow::Result<()> {
    let channel: Channel = Endpoint::from_shared(args.registry.clone())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(60))
        .connect()
        .await?;
    let registration = RegistrationClient::new(channel.clone());
    let registry = ToolRegistryClient::new(channel).max_decoding_message_size(64 << 20);
    let mut client = Http::new(&args.console)?;

    let requests = announces(args.tools, args.instances.unwrap_or(args.tools / 10));
    let instances = requests.len();
    let started = Instant::now();
    let leases = announce_all(&registration, requests, args.concurrency).await?;
    let announce_took = started.elapsed();
    let rss_announced = rss_kib(args.pid);
    if let Some(every) = args.heartbeat {
        keep_alive(registration, leases, Duration::from_secs_f64(every));
    }

    let mut rows = Vec::new();
    for page in pages(args.tools) {
        let timed = time_page(&mut client, &page, args.requests.max(1)).await;
        rows.push((page, timed));
    }

    let listed = registry
        .clone()
        .list_tools(pb::ListToolsRequest::default())
        .await?
        .into_inner()
        .tools
        .len();
    let rss_after = rss_kib(args.pid);

    let budget = Duration::from_secs_f64(args.budget_ms / 1e3);
    println!(
        "| page | path | p50 (ms) | p99 (ms) | max (ms) | cold (ms) | bytes | p99 ≤ {} ms | failed |",
        args.budget_ms
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut within = 0;
    let mut failed = 0;
    for (page, timed) in &rows {
        let p99 = percentile(&timed.times, 99);
        let ok = p99 <= budget;
        within += usize::from(ok);
        failed += timed.failed;
        println!(
            "| {} | `{}` | {:.2} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            page.label,
            page.path,
            millis(percentile(&timed.times, 50)),
            millis(p99),
            millis(timed.times.last().copied().unwrap_or_default()),
            millis(timed.cold),
            thousands(timed.bytes),
            if ok { "yes" } else { "**no**" },
            timed.failed,
        );
    }
    println!();
    let mib = |kib: Option<u64>| {
        kib.map_or_else(|| "?".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0))
    };
    println!(
        "{} tools on {} instances, announced in {:.2} s; {} timed GETs a page after one cold, \
         sequential, HTTP/1.1 keep-alive ({} connection(s) opened). p99 within {} ms: {} of {} pages.",
        thousands(args.tools),
        thousands(instances),
        announce_took.as_secs_f64(),
        args.requests.max(1),
        client.connections,
        args.budget_ms,
        within,
        rows.len(),
    );
    if args.pid.is_some() {
        println!(
            "Registry RSS: {} MiB after the announces, {} MiB after the pages.",
            mib(rss_announced),
            mib(rss_after)
        );
    }
    for (page, timed) in &rows {
        if let Some(failure) = &timed.first_failure {
            eprintln!("{} (`{}`): {failure}", page.label, page.path);
        }
    }
    if listed != args.tools {
        anyhow::bail!(
            "the catalog holds {listed} tools at the end, {} were announced (leases expired? \
             raise the registry's --lease-ttl or pass --heartbeat)",
            args.tools
        );
    }
    if failed > 0 {
        anyhow::bail!("{failed} answers failed");
    }
    Ok(())
}

/// An HTTP/1.1 answer.
struct Answer {
    status: u16,
    body: Vec<u8>,
}

/// A minimal HTTP/1.1 client: GETs over one keep-alive connection (opened
/// again when the server closes it), `Content-Length` or chunked bodies,
/// and the cookies the server sets sent back.
struct Http {
    /// `host:port`.
    authority: String,
    conn: Option<BufReader<TcpStream>>,
    cookies: Vec<(String, String)>,
    /// Connections opened so far.
    connections: usize,
}

impl Http {
    fn new(base: &str) -> anyhow::Result<Self> {
        let authority = base
            .strip_prefix("http://")
            .ok_or_else(|| anyhow::anyhow!("--console takes http://HOST:PORT, not {base:?}"))?
            .trim_end_matches('/');
        Ok(Self {
            authority: authority.to_owned(),
            conn: None,
            cookies: Vec::new(),
            connections: 0,
        })
    }

    async fn get(&mut self, path: &str) -> anyhow::Result<Answer> {
        let reused = self.conn.is_some();
        match self.exchange(path).await {
            Ok(answer) => Ok(answer),
            // A kept-alive connection the server had closed: once more on
            // a new one.
            Err(_) if reused => {
                self.conn = None;
                self.exchange(path).await
            }
            Err(error) => {
                self.conn = None;
                Err(error)
            }
        }
    }

    async fn exchange(&mut self, path: &str) -> anyhow::Result<Answer> {
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAccept: text/html\r\nUser-Agent: toolmesh-bench\r\n",
            self.authority
        );
        if !self.cookies.is_empty() {
            let pairs: Vec<String> = self
                .cookies
                .iter()
                .map(|(n, v)| format!("{n}={v}"))
                .collect();
            head.push_str(&format!("Cookie: {}\r\n", pairs.join("; ")));
        }
        head.push_str("\r\n");
        let conn = match &mut self.conn {
            Some(conn) => conn,
            None => {
                let stream = TcpStream::connect(&self.authority).await?;
                stream.set_nodelay(true)?;
                self.connections += 1;
                self.conn.insert(BufReader::new(stream))
            }
        };
        conn.get_mut().write_all(head.as_bytes()).await?;

        let mut line = String::new();
        if conn.read_line(&mut line).await? == 0 {
            anyhow::bail!("the connection was closed");
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("not an HTTP status line: {line:?}"))?;
        let mut length = None;
        let mut chunked = false;
        let mut close = false;
        loop {
            line.clear();
            if conn.read_line(&mut line).await? == 0 {
                anyhow::bail!("the connection was closed in the headers");
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = Some(value.parse::<usize>()?);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().contains("chunked");
            } else if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close");
            } else if name.eq_ignore_ascii_case("set-cookie") {
                let pair = value.split(';').next().unwrap_or_default();
                if let Some((name, value)) = pair.split_once('=') {
                    self.cookies.retain(|(n, _)| n != name.trim());
                    self.cookies
                        .push((name.trim().to_owned(), value.trim().to_owned()));
                }
            }
        }

        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                conn.read_line(&mut line).await?;
                let size = line.trim().split(';').next().unwrap_or_default();
                let size = usize::from_str_radix(size, 16)?;
                if size == 0 {
                    // Trailers, to the empty line.
                    loop {
                        line.clear();
                        if conn.read_line(&mut line).await? == 0 || line.trim().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let start = body.len();
                body.resize(start + size, 0);
                conn.read_exact(&mut body[start..]).await?;
                let mut crlf = [0; 2];
                conn.read_exact(&mut crlf).await?;
            }
        } else if let Some(length) = length {
            body.resize(length, 0);
            conn.read_exact(&mut body).await?;
        } else {
            conn.read_to_end(&mut body).await?;
            close = true;
        }
        if close {
            self.conn = None;
        }
        Ok(Answer { status, body })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_name_tools_of_the_catalog() {
        let pages = pages(10_000);
        let path = |label: &str| {
            pages
                .iter()
                .find(|p| p.label == label)
                .map(|p| (p.path.clone(), p.expect.clone()))
        };
        assert_eq!(
            path("catalog, page 100 by cursor"),
            Some((
                "/tools?after=tool_04949&page=100".into(),
                Some("tool_04950".into())
            ))
        );
        assert_eq!(
            path("prefix filter"),
            Some(("/tools?prefix=tool_050".into(), Some("tool_05000".into())))
        );
        assert_eq!(
            path("tag filter"),
            Some(("/tools?tag=group7".into(), Some("tool_00007".into())))
        );
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(999), "999");
    }

    #[test]
    fn a_small_catalog_has_its_pages() {
        for tools in [1, 10, 100] {
            assert!(pages(tools).iter().all(|p| p.path.starts_with('/')));
        }
    }
}
