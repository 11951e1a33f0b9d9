//! Where tasks live: in this process ([`memory`]), or in Redis so that any
//! replica answers for any task ([`redis`]). The task logic talks to a
//! [`TaskStore`] and never knows which.

use std::sync::Arc;

use super::model::Task;

#[cfg(test)]
pub(crate) mod conformance;
pub(crate) mod memory;
pub(crate) mod redis;

/// The bounds on live tasks a store enforces when one is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Most live tasks in all.
    pub all: usize,
    /// Most live tasks of one caller.
    pub per_caller: usize,
}

/// Which limit refused a new task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// The registry's live tasks.
    All,
    /// The caller's live tasks.
    Caller,
}

/// Why a store could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    /// A limit is reached.
    #[error("the most live tasks allowed are running")]
    Full(Full),
    /// A task with that id exists.
    #[error("a task with this id exists")]
    Exists,
    /// The engine did not answer.
    #[error("the task store is unavailable: {0}")]
    Unavailable(String),
}

/// A change to one task: applied to the stored task, it says whether it
/// changed it ([`Task::progress`], [`Task::finish`], [`Task::cancel`]).
pub(crate) type Change<'a> = &'a (dyn Fn(&mut Task) -> bool + Send + Sync);

/// Where a caller's listing resumes: after the task created at `created_ms`
/// with id `id`, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cursor {
    /// The last listed task's creation time.
    pub created_ms: u64,
    /// The last listed task's id.
    pub id: String,
}

impl Cursor {
    /// The cursor after `task`.
    pub(crate) fn after(task: &Task) -> Self {
        Self {
            created_ms: task.created_ms,
            id: task.id.clone(),
        }
    }

    /// Whether `task` is listed after this cursor (newest first; ties by
    /// id, descending).
    pub(crate) fn precedes(&self, task: &Task) -> bool {
        (task.created_ms, task.id.as_str()) < (self.created_ms, self.id.as_str())
    }

    /// The page token.
    pub(crate) fn token(&self) -> String {
        format!("{}.{}", self.created_ms, self.id)
    }

    /// A page token back as a cursor; `None` if it is not one.
    pub(crate) fn parse(token: &str) -> Option<Self> {
        let (created, id) = token.split_once('.')?;
        let created_ms = created.parse().ok()?;
        (!id.is_empty() && id.len() <= 64).then(|| Self {
            created_ms,
            id: id.to_owned(),
        })
    }
}

/// Tasks, by id, with the indexes a caller's listing and the janitor need.
///
/// Every write is atomic: a change is applied to the task as stored and
/// written only if no other write came between (compare-and-set on the
/// revision), so two replicas that end one task at once end it once.
#[async_trait::async_trait]
pub(crate) trait TaskStore: Send + Sync + 'static {
    /// Stores a new task, unless `limits` are reached.
    async fn create(&self, task: &Task, limits: Limits) -> Result<(), StoreError>;
    /// One task; `None` if unknown or forgotten.
    async fn get(&self, id: &str) -> Result<Option<Task>, StoreError>;
    /// Applies `change` to the task, atomically: the task after it, and
    /// whether it changed; `None` if unknown.
    async fn update(
        &self,
        id: &str,
        change: Change<'_>,
    ) -> Result<Option<(Task, bool)>, StoreError>;
    /// Up to `limit` of `caller`'s tasks, newest first, after `after`.
    async fn list(
        &self,
        caller: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<Task>, StoreError>;
    /// About `limit` live tasks (not over); successive calls come round
    /// to every live task, however many there are.
    async fn live(&self, limit: usize) -> Result<Vec<Task>, StoreError>;
    /// Up to `limit` tasks whose call waits for approval, newest first,
    /// after `after`.
    async fn pending(&self, after: Option<&Cursor>, limit: usize) -> Result<Vec<Task>, StoreError>;
    /// How many calls wait for approval (about: entries whose task was
    /// forgotten may count until a listing drops them).
    async fn pending_count(&self) -> Result<usize, StoreError>;
    /// Forgets what is over and past its retention at `now_ms`.
    async fn sweep(&self, now_ms: u64) -> Result<(), StoreError>;
}

/// The store for a registry: Redis when it has one, else memory.
pub(crate) fn open(
    redis: Option<(Arc<crate::redis_pool::RedisPool>, &str)>,
    memory: memory::Bounds,
) -> Arc<dyn TaskStore> {
    match redis {
        Some((pool, prefix)) => Arc::new(redis::RedisTasks::new(pool, prefix)),
        None => Arc::new(memory::MemoryTasks::new(memory)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_cursor_is_its_token() {
        let cursor = Cursor {
            created_ms: 17,
            id: "a-b".into(),
        };
        assert_eq!(Cursor::parse(&cursor.token()), Some(cursor));
        for bad in ["", "x.y", "12", "12.", "-1.a"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn no_token_panics(token in ".{0,80}") {
            let _ = Cursor::parse(&token);
        }
    }
}
