//! [`MemoryTasks`]: tasks in this process (the embedded default). A
//! restart forgets them all; a sidecar reporting one then hears NOT_FOUND.
//!
//! Tasks that are over are kept for their retention, within [`Bounds`]: past
//! either bound the oldest ended task is forgotten first. Live tasks are
//! bounded by the [`Limits`] given at creation.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::{Change, Cursor, Full, Limits, StoreError, TaskStore};
use crate::tasks::model::Task;

/// How much ended tasks may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    /// Most ended tasks kept.
    pub ended: usize,
    /// Most bytes of tasks kept (results, mostly).
    pub bytes: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            ended: 10_000,
            bytes: 64 << 20,
        }
    }
}

/// Tasks in memory.
pub(crate) struct MemoryTasks {
    bounds: Bounds,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tasks: HashMap<String, Task>,
    /// Ended tasks by (when they are forgotten, id).
    ended: BTreeSet<(u64, String)>,
    bytes: usize,
}

impl Inner {
    fn live(&self) -> impl Iterator<Item = &Task> {
        self.tasks.values().filter(|t| !t.state.is_terminal())
    }

    fn insert(&mut self, task: Task) {
        self.bytes += task.size();
        if task.state.is_terminal() {
            self.ended.insert((task.expires_ms, task.id.clone()));
        }
        if let Some(old) = self.tasks.insert(task.id.clone(), task) {
            self.forget_size(&old);
        }
    }

    fn forget_size(&mut self, task: &Task) {
        self.bytes = self.bytes.saturating_sub(task.size());
        if task.state.is_terminal() {
            self.ended.remove(&(task.expires_ms, task.id.clone()));
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(task) = self.tasks.remove(id) {
            self.forget_size(&task);
        }
    }

    /// Forgets ended tasks past their time, then the oldest until within
    /// `bounds`.
    fn trim(&mut self, now_ms: u64, bounds: Bounds) {
        while let Some((expires, id)) = self.ended.first().cloned() {
            let over = self.ended.len() > bounds.ended || self.bytes > bounds.bytes;
            if expires > now_ms && !over {
                break;
            }
            self.remove(&id);
        }
    }
}

impl MemoryTasks {
    /// An empty store keeping ended tasks within `bounds`.
    pub(crate) fn new(bounds: Bounds) -> Self {
        Self {
            bounds,
            inner: Mutex::default(),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl TaskStore for MemoryTasks {
    async fn create(&self, task: &Task, limits: Limits) -> Result<(), StoreError> {
        let mut inner = self.inner();
        if inner.tasks.contains_key(&task.id) {
            return Err(StoreError::Exists);
        }
        let mut all = 0;
        let mut callers = 0;
        for live in inner.live() {
            all += 1;
            callers += usize::from(live.caller == task.caller);
        }
        if all >= limits.all {
            return Err(StoreError::Full(Full::All));
        }
        if callers >= limits.per_caller {
            return Err(StoreError::Full(Full::Caller));
        }
        inner.insert(task.clone());
        Ok(())
    }

    async fn get(&self, id: &str) -> Result<Option<Task>, StoreError> {
        Ok(self.inner().tasks.get(id).cloned())
    }

    async fn update(
        &self,
        id: &str,
        change: Change<'_>,
    ) -> Result<Option<(Task, bool)>, StoreError> {
        let mut inner = self.inner();
        let Some(mut task) = inner.tasks.get(id).cloned() else {
            return Ok(None);
        };
        if !change(&mut task) {
            return Ok(Some((task, false)));
        }
        inner.insert(task.clone());
        // Within the bounds; time is the sweep's.
        let bounds = self.bounds;
        inner.trim(0, bounds);
        Ok(Some((task, true)))
    }

    async fn list(
        &self,
        caller: &str,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Vec<Task>, StoreError> {
        let inner = self.inner();
        let mut tasks: Vec<&Task> = inner
            .tasks
            .values()
            .filter(|t| t.caller == caller && after.is_none_or(|c| c.precedes(t)))
            .collect();
        tasks.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
        Ok(tasks.into_iter().take(limit).cloned().collect())
    }

    async fn live(&self, limit: usize) -> Result<Vec<Task>, StoreError> {
        let inner = self.inner();
        let mut live: Vec<&Task> = inner.live().collect();
        live.sort_by_key(|t| t.expires_ms);
        Ok(live.into_iter().take(limit).cloned().collect())
    }

    async fn pending(&self, after: Option<&Cursor>, limit: usize) -> Result<Vec<Task>, StoreError> {
        let inner = self.inner();
        let mut pending: Vec<&Task> = inner
            .live()
            .filter(|t| t.pending_approval().is_some() && after.is_none_or(|c| c.precedes(t)))
            .collect();
        pending.sort_by(|a, b| (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id)));
        Ok(pending.into_iter().take(limit).cloned().collect())
    }

    async fn pending_count(&self) -> Result<usize, StoreError> {
        Ok(self
            .inner()
            .live()
            .filter(|t| t.pending_approval().is_some())
            .count())
    }

    async fn sweep(&self, now_ms: u64) -> Result<(), StoreError> {
        let bounds = self.bounds;
        self.inner().trim(now_ms, bounds);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::store::conformance;

    #[tokio::test]
    async fn the_memory_engine_does_what_every_engine_does() {
        conformance::run_all(|| MemoryTasks::new(Bounds::default())).await;
    }

    #[tokio::test]
    async fn ended_tasks_beyond_the_bounds_are_forgotten_oldest_first() {
        let store = MemoryTasks::new(Bounds {
            ended: 2,
            bytes: usize::MAX,
        });
        let limits = Limits {
            all: 10,
            per_caller: 10,
        };
        for (n, id) in ["a", "b", "c"].into_iter().enumerate() {
            let task = conformance::task(id, "c", 1_000 + n as u64);
            store
                .create(&task, limits)
                .await
                .expect("the store answers");
            let now = conformance::at(2_000 + n as u64);
            store
                .update(id, &move |t: &mut Task| t.cancel(now))
                .await
                .expect("the store answers");
        }
        assert!(store.get("a").await.expect("the store answers").is_none());
        assert!(store.get("b").await.expect("the store answers").is_some());
        assert!(store.get("c").await.expect("the store answers").is_some());
    }
}
