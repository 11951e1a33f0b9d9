//! Looking at Redis from outside the registry: a plain connection,
//! `INFO commandstats`, a frozen server, and a recorder of `WatchTools`
//! events, for the distributed-mode tests.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use nix::{sys::signal::Signal, unistd::Pid};
use toolmesh_proto::pb::{self, tool_event::Kind};

use super::TestRegistry;

/// A plain connection to `url`, to look at Redis from outside the registry.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Calls per command since the last `CONFIG RESETSTAT`, from
/// `INFO commandstats` (commands run inside scripts included).
pub async fn command_calls(conn: &mut redis::aio::MultiplexedConnection) -> CommandCalls {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.split(',').find_map(|s| s.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

/// Calls per command name.
pub type CommandCalls = BTreeMap<String, i64>;

/// Resets the counters `INFO commandstats` reports.
pub async fn reset_stats(conn: &mut redis::aio::MultiplexedConnection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(conn)
        .await
        .unwrap();
}

/// A `redis-server` stopped with SIGSTOP: it keeps its data and its
/// connections but answers nothing, like a stalled or partitioned Redis.
/// Thawed (SIGCONT) by [`Frozen::thaw`] or when dropped.
pub struct Frozen(Pid);

impl Frozen {
    /// Freezes the server behind `url` (one this test started).
    pub async fn freeze(url: &str) -> Self {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut raw(url).await)
            .await
            .unwrap();
        let pid = info
            .lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|p| p.trim().parse().ok())
            .expect("INFO server names the process id");
        let pid = Pid::from_raw(pid);
        nix::sys::signal::kill(pid, Signal::SIGSTOP).expect("SIGSTOP redis-server");
        Self(pid)
    }

    /// Lets it run again.
    pub fn thaw(self) {}
}

impl Drop for Frozen {
    fn drop(&mut self) {
        nix::sys::signal::kill(self.0, Signal::SIGCONT).expect("SIGCONT redis-server");
    }
}

/// One event a [`Watcher`] saw.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub kind: Kind,
    pub tool: String,
    /// The tool's live instance count the event reported.
    pub instances: u32,
}

/// Records every event one replica's `WatchTools` stream delivers after its
/// snapshot, with when it arrived. A stream that fails or ends is recorded
/// as an `Unspecified` event naming why, so no check can overlook it.
pub struct Watcher {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Watches `registry`; returns once its snapshot has been delivered.
    pub async fn start(registry: &TestRegistry) -> Self {
        let mut stream = registry
            .client()
            .await
            .watch_tools(pb::WatchToolsRequest {
                ..Default::default()
            })
            .await
            .expect("WatchTools")
            .into_inner();
        loop {
            let event = tokio::time::timeout(Duration::from_secs(20), stream.message())
                .await
                .expect("the snapshot in time")
                .expect("stream ok")
                .expect("stream goes on");
            if event.kind() == Kind::Synced {
                break;
            }
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                loop {
                    let (kind, tool, instances, last) = match stream.message().await {
                        Ok(Some(event)) => {
                            let tool = event.tool.as_ref();
                            let name = tool
                                .and_then(|t| t.descriptor.as_ref())
                                .map(|d| d.name.clone())
                                .unwrap_or_default();
                            let instances = tool.map_or(0, |t| t.instances);
                            (event.kind(), name, instances, false)
                        }
                        Ok(None) => (Kind::Unspecified, "stream ended".into(), 0, true),
                        Err(status) => (
                            Kind::Unspecified,
                            format!("stream failed: {status}"),
                            0,
                            true,
                        ),
                    };
                    let at = Instant::now();
                    seen.lock().unwrap().push(Seen {
                        at,
                        kind,
                        tool,
                        instances,
                    });
                    if last {
                        return;
                    }
                }
            }
        });
        Self { seen, task }
    }

    /// Everything seen so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
