//! [`RedisTasks`]: tasks in Redis, so that any replica answers for any task
//! and a replica that dies leaves nothing behind that only it knew.
//!
//! Every key is under one hash tag, `{<prefix>:tasks}`, so that the scripts
//! that keep the indexes true touch one Cluster slot:
//!
//! - `…:t:<id>`: the task, a JSON string, expiring when it is forgotten (a
//!   live task's at its timeout plus its retention, should no replica end
//!   it first).
//! - `…:live`: the live tasks, a sorted set of `<caller tag> <id>` by when
//!   they time out: the janitor's list (read with `ZSCAN`, a pass at a
//!   time), and the bound in all.
//! - `…:live:<caller tag>`: a caller's live tasks (its bound).
//! - `…:by:<caller tag>`: a caller's tasks by creation time (its listing;
//!   the newest [`MAX_LISTED`] are kept, and entries whose task is gone
//!   are dropped when a listing meets them).
//! - `…:pending`: the tasks whose call waits for approval, by creation
//!   time (the approvers' listing; bounded by the live tasks).
//!
//! `create.lua` checks the bounds and writes the task and its indexes at
//! once; `update.lua` writes a change only if the revision it was read at
//! still holds (compare-and-set, retried), and drops an ended task from the
//! live indexes.

use std::sync::Arc;

use ::redis::Script;
use sha2::{Digest as _, Sha256};

use super::{Change, Cursor, Full, Limits, StoreError, TaskStore};
use crate::{
    calls::idempotency::hex,
    metrics::RedisOp,
    redis_pool::{Dependent, RedisError, RedisPool},
    tasks::model::Task,
};

/// Most tasks a caller's listing keeps.
const MAX_LISTED: usize = 1000;
/// Tries of one change against concurrent writers.
const UPDATE_TRIES: usize = 16;

/// Tasks in Redis.
pub(crate) struct RedisTasks {
    pool: Arc<RedisPool>,
    tag: String,
    /// Where the janitor's next pass over the live tasks resumes (ZSCAN).
    scan: std::sync::Mutex<u64>,
    create: Script,
    update: Script,
}

impl RedisTasks {
    /// A store over `pool`, its keys under `prefix`.
    pub(crate) fn new(pool: Arc<RedisPool>, prefix: &str) -> Self {
        pool.on_outage(Dependent::Tasks, || {
            "tasks cannot be started, read, reported or cancelled: UNAVAILABLE; sidecars keep their results and report again".into()
        });
        Self {
            pool,
            tag: format!("{{{prefix}:tasks}}"),
            scan: std::sync::Mutex::new(0),
            create: Script::new(include_str!("redis/create.lua")),
            update: Script::new(include_str!("redis/update.lua")),
        }
    }

    fn task_key(&self, id: &str) -> String {
        format!("{}:t:{id}", self.tag)
    }

    fn live_key(&self) -> String {
        format!("{}:live", self.tag)
    }

    fn caller_live_key(&self, caller_tag: &str) -> String {
        format!("{}:live:{caller_tag}", self.tag)
    }

    fn caller_key(&self, caller_tag: &str) -> String {
        format!("{}:by:{caller_tag}", self.tag)
    }

    fn pending_key(&self) -> String {
        format!("{}:pending", self.tag)
    }
}

/// `"1"` if `task`'s call waits for approval, as the scripts take it.
fn pending_flag(task: &Task) -> &'static str {
    if task.pending_approval().is_some() {
        "1"
    } else {
        "0"
    }
}

/// A caller id as keys name it: a digest, so any id makes a short key.
fn caller_tag(caller: &str) -> String {
    hex(&Sha256::digest(caller.as_bytes())[..12])
}

/// When a task's key expires: once over, when it is forgotten; while it
/// runs, its retention past its timeout.
fn key_expiry(task: &Task) -> u64 {
    if task.state.is_terminal() {
        task.expires_ms
    } else {
        task.expires_ms.saturating_add(task.retention_ms)
    }
    .max(1)
}

fn unavailable(error: RedisError) -> StoreError {
    StoreError::Unavailable(error.to_string())
}

fn encode(task: &Task) -> Result<String, StoreError> {
    serde_json::to_string(task).map_err(|e| StoreError::Unavailable(format!("cannot encode: {e}")))
}

fn decode(text: &str) -> Result<Task, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Unavailable(format!("an unreadable task in redis: {e}")))
}

impl RedisTasks {
    async fn read(&self, keys: &[String]) -> Result<Vec<Option<String>>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        self.pool
            .run(RedisOp::TaskRead, async |conn| {
                ::redis::cmd("MGET").arg(keys).query_async(conn).await
            })
            .await
            .map_err(unavailable)
    }

    /// The members of the sorted set `key` (ids by creation time), newest
    /// first, from `after`'s time down: `limit` and some slack, for the ties
    /// at the cursor's millisecond the caller skips.
    async fn newest(
        &self,
        key: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let top = after.map_or_else(|| "+inf".to_owned(), |c| c.created_ms.to_string());
        let fetch = limit.saturating_add(64);
        self.pool
            .run(RedisOp::TaskRead, async |conn| {
                ::redis::cmd("ZREVRANGEBYSCORE")
                    .arg(key)
                    .arg(&top)
                    .arg("-inf")
                    .arg("LIMIT")
                    .arg(0)
                    .arg(fetch)
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(unavailable)
    }

    /// Drops `members` from the sorted set `key` (entries whose task is gone).
    async fn prune(&self, key: &str, members: &[String]) {
        if members.is_empty() {
            return;
        }
        let pruned = self
            .pool
            .run(RedisOp::TaskUpdate, async |conn| {
                ::redis::cmd("ZREM")
                    .arg(key)
                    .arg(members)
                    .query_async::<i64>(conn)
                    .await
            })
            .await;
        if let Err(error) = pruned {
            tracing::debug!(%error, "stale task index entries stay until the next pass");
        }
    }
}

#[async_trait::async_trait]
impl TaskStore for RedisTasks {
    async fn create(&self, task: &Task, limits: Limits) -> Result<(), StoreError> {
        let tag = caller_tag(&task.caller);
        let mut invocation = self.create.prepare_invoke();
        invocation
            .key(self.task_key(&task.id))
            .key(self.live_key())
            .key(self.caller_live_key(&tag))
            .key(self.caller_key(&tag))
            .key(self.pending_key())
            .arg(encode(task)?)
            .arg(key_expiry(task))
            .arg(task.expires_ms)
            .arg(task.created_ms)
            .arg(limits.all)
            .arg(limits.per_caller)
            .arg(&task.id)
            .arg(format!("{tag} {}", task.id))
            .arg(MAX_LISTED)
            .arg(pending_flag(task));
        let created: i64 = self
            .pool
            .run(RedisOp::TaskCreate, async |conn| {
                invocation.invoke_async(conn).await
            })
            .await
            .map_err(unavailable)?;
        match created {
            1 => Ok(()),
            0 => Err(StoreError::Exists),
            -1 => Err(StoreError::Full(Full::All)),
            _ => Err(StoreError::Full(Full::Caller)),
        }
    }

    async fn get(&self, id: &str) -> Result<Option<Task>, StoreError> {
        let key = self.task_key(id);
        let text: Option<String> = self
            .pool
            .run(RedisOp::TaskRead, async |conn| {
                ::redis::cmd("GET").arg(&key).query_async(conn).await
            })
            .await
            .map_err(unavailable)?;
        text.as_deref().map(decode).transpose()
    }

    async fn update(
        &self,
        id: &str,
        change: Change<'_>,
    ) -> Result<Option<(Task, bool)>, StoreError> {
        for _ in 0..UPDATE_TRIES {
            let Some(mut task) = self.get(id).await? else {
                return Ok(None);
            };
            let read_at = task.revision;
            if !change(&mut task) {
                return Ok(Some((task, false)));
            }
            let tag = caller_tag(&task.caller);
            let mut invocation = self.update.prepare_invoke();
            invocation
                .key(self.task_key(id))
                .key(self.live_key())
                .key(self.caller_live_key(&tag))
                .key(self.caller_key(&tag))
                .key(self.pending_key())
                .arg(read_at)
                .arg(encode(&task)?)
                .arg(key_expiry(&task))
                .arg(if task.state.is_terminal() { "1" } else { "0" })
                .arg(id)
                .arg(format!("{tag} {id}"))
                .arg(pending_flag(&task));
            let written: i64 = self
                .pool
                .run(RedisOp::TaskUpdate, async |conn| {
                    invocation.invoke_async(conn).await
                })
                .await
                .map_err(unavailable)?;
            match written {
                1 => return Ok(Some((task, true))),
                -1 => return Ok(None),
                _ => {}
            }
        }
        Err(StoreError::Unavailable(format!(
            "the task changed under {UPDATE_TRIES} writes in a row"
        )))
    }

    async fn list(
        &self,
        caller: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<Task>, StoreError> {
        let key = self.caller_key(&caller_tag(caller));
        let ids = self.newest(&key, after, limit).await?;
        let keys: Vec<String> = ids.iter().map(|id| self.task_key(id)).collect();
        let mut tasks = Vec::new();
        let mut gone = Vec::new();
        for (id, text) in ids.iter().zip(self.read(&keys).await?) {
            match text {
                Some(text) => {
                    let task = decode(&text)?;
                    if task.caller == caller && after.is_none_or(|c| c.precedes(&task)) {
                        tasks.push(task);
                    }
                }
                None => gone.push(id.clone()),
            }
        }
        self.prune(&key, &gone).await;
        tasks.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
        tasks.truncate(limit);
        Ok(tasks)
    }

    async fn live(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        let key = self.live_key();
        let from = *self
            .scan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // ZSCAN: each pass reads on from where the last stopped, so every
        // live task is looked at however many there are.
        let (next, scanned): (u64, Vec<String>) = self
            .pool
            .run(RedisOp::TaskRead, async |conn| {
                ::redis::cmd("ZSCAN")
                    .arg(&key)
                    .arg(from)
                    .arg("COUNT")
                    .arg(limit.max(1))
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(unavailable)?;
        *self
            .scan
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        // Members and scores alternate.
        let parsed: Vec<(&str, &str)> = scanned
            .iter()
            .step_by(2)
            .filter_map(|m| m.split_once(' '))
            .take(limit)
            .collect();
        let keys: Vec<String> = parsed.iter().map(|(_, id)| self.task_key(id)).collect();
        let mut live = Vec::new();
        for ((tag, id), text) in parsed.iter().zip(self.read(&keys).await?) {
            match text {
                Some(text) => live.push(decode(&text)?),
                None => {
                    // Its key expired before any replica ended it.
                    self.prune(&key, &[format!("{tag} {id}")]).await;
                    self.prune(&self.caller_live_key(tag), &[(*id).to_owned()])
                        .await;
                }
            }
        }
        Ok(live)
    }

    async fn pending(&self, after: Option<&Cursor>, limit: usize) -> Result<Vec<Task>, StoreError> {
        let key = self.pending_key();
        let ids = self.newest(&key, after, limit).await?;
        let keys: Vec<String> = ids.iter().map(|id| self.task_key(id)).collect();
        let mut tasks = Vec::new();
        let mut gone = Vec::new();
        for (id, text) in ids.iter().zip(self.read(&keys).await?) {
            let task = text.as_deref().map(decode).transpose()?;
            match task {
                Some(task) if task.pending_approval().is_some() => {
                    if after.is_none_or(|c| c.precedes(&task)) {
                        tasks.push(task);
                    }
                }
                _ => gone.push(id.clone()),
            }
        }
        self.prune(&key, &gone).await;
        tasks.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
        tasks.truncate(limit);
        Ok(tasks)
    }

    async fn pending_count(&self) -> Result<usize, StoreError> {
        let key = self.pending_key();
        self.pool
            .run(RedisOp::TaskRead, async |conn| {
                // ZCOUNT, not ZCARD: the same cost, and a command the
                // catalog's presence job does not use, so that each job's
                // commands stay told apart (tests/integration/redis_round_trips.rs).
                ::redis::cmd("ZCOUNT")
                    .arg(&key)
                    .arg("-inf")
                    .arg("+inf")
                    .query_async(conn)
                    .await
            })
            .await
            .map_err(unavailable)
    }

    async fn sweep(&self, _now_ms: u64) -> Result<(), StoreError> {
        // Redis forgets ended tasks itself (their keys expire); listings
        // and the live pass drop the index entries left behind.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis_pool::RedisSettings;
    use crate::tasks::store::conformance;

    #[tokio::test]
    async fn the_redis_engine_does_what_every_engine_does() {
        let Some(server) = toolmesh_test_support::redis::RedisServer::start() else {
            return;
        };
        let pool = RedisPool::new(RedisSettings {
            url: server.url(),
            ..Default::default()
        })
        .expect("a pool");
        let n = std::sync::atomic::AtomicUsize::new(0);
        conformance::run_all(|| {
            let prefix = format!(
                "conformance{}",
                n.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            RedisTasks::new(pool.clone(), &prefix)
        })
        .await;
    }
}
