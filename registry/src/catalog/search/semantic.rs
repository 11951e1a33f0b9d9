//! The model's half of hybrid search (`--search-model`): a vector per
//! tool, computed off the request path, and a vector per query.
//!
//! - `vectors.rs`: each tool's text and, once embedded, its vector; tools
//!   not embedded yet are pending, and a search whose scope holds one is
//!   ranked lexically (an answer mixes no half-ranked tools).
//! - `indexer.rs`: the background worker that embeds pending texts, on
//!   one low-priority thread, sharing vectors through `cache.rs` (Redis)
//!   so that replicas embed a tool once and a restart recomputes nothing.
//! - `workers.rs`: the model's threads; queries on their own small pool,
//!   bounded in number and time, so a burst of searches falls back to
//!   BM25 rather than take the CPU `Invoke` needs.

mod cache;
mod centred;
mod indexer;
mod vectors;
mod workers;

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use tokio::sync::Notify;
use toolmesh_embed::Model;
use toolmesh_proto::pb;

pub(crate) use cache::{EmbeddingCache, RedisCache};
pub(crate) use workers::Fallback;

use self::vectors::Vectors;
use self::workers::{Queries, Workers};
use super::{Scope, words};
use crate::metrics::Metrics;

/// How the model's threads are set.
#[derive(Debug, Clone)]
pub struct SemanticSettings {
    /// Threads that embed queries (`--search-threads`).
    pub query_threads: usize,
    /// Longest a search waits for its query's vector before ranking by
    /// words alone.
    pub query_deadline: Duration,
}

impl Default for SemanticSettings {
    fn default() -> Self {
        Self {
            query_threads: 1,
            query_deadline: Duration::from_millis(250),
        }
    }
}

/// What the indexer and the searches share.
pub(super) struct Shared {
    vectors: RwLock<Vectors>,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn vectors(&self) -> RwLockWriteGuard<'_, Vectors> {
        self.vectors.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn read(&self) -> RwLockReadGuard<'_, Vectors> {
        self.vectors.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports the index's size to the metrics.
    fn observe(&self) {
        let (tools, pending) = {
            let v = self.read();
            (v.tools(), v.pending())
        };
        self.metrics.search_index(tools, pending);
    }
}

/// Tool and query vectors from one model.
pub struct Semantic {
    shared: Arc<Shared>,
    wake: Arc<Notify>,
    queries: Queries,
    model: Arc<Model>,
}

impl std::fmt::Debug for Semantic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semantic")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Semantic {
    /// Vectors from `model`, shared through `cache` if any. Starts the
    /// indexer: must be called inside a tokio runtime.
    pub(crate) fn new(
        model: Arc<Model>,
        cache: Option<Arc<dyn EmbeddingCache>>,
        settings: &SemanticSettings,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            vectors: RwLock::default(),
            metrics,
        });
        let wake = Arc::new(Notify::new());
        let indexer = Workers::indexer(model.clone())?;
        tokio::spawn(indexer::run(
            Arc::downgrade(&shared),
            wake.clone(),
            indexer,
            cache,
        ));
        Ok(Self {
            queries: Queries::new(
                model.clone(),
                settings.query_threads,
                settings.query_deadline,
            )?,
            shared,
            wake,
            model,
        })
    }

    /// Vectors of the model in `dir`, in this process only (tests, benches).
    pub fn load(dir: &std::path::Path) -> Result<Self, String> {
        let model = Model::load(dir).map_err(|e| e.to_string())?;
        Self::new(
            Arc::new(model),
            None,
            &SemanticSettings::default(),
            Arc::default(),
        )
        .map_err(|e| e.to_string())
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// Tools whose text waits for a vector.
    pub fn pending(&self) -> usize {
        self.shared.read().pending()
    }

    pub(super) fn upsert(&self, descriptor: &pb::ToolDescriptor) {
        if self
            .shared
            .vectors()
            .set(&descriptor.name, &text(descriptor))
        {
            self.wake.notify_one();
        }
    }

    pub(super) fn remove(&self, name: &str) {
        self.shared.vectors().remove(name);
    }

    pub(super) fn replace_all<'a>(
        &self,
        descriptors: impl IntoIterator<Item = &'a pb::ToolDescriptor>,
    ) {
        let mut names = std::collections::HashSet::new();
        let mut waiting = false;
        {
            let mut vectors = self.shared.vectors();
            for descriptor in descriptors {
                names.insert(descriptor.name.as_str());
                waiting |= vectors.set(&descriptor.name, &text(descriptor));
            }
            vectors.retain(&names);
        }
        if waiting {
            self.wake.notify_one();
        }
    }

    /// The query's vector, or why there is none.
    pub(super) async fn query(&self, query: &str) -> Result<Vec<f32>, Fallback> {
        self.queries.embed(query).await.map(normalized)
    }

    /// The similarity of `query` with each tool of `scope`, centred on
    /// the scope's tools ([`centred`]), or
    /// [`Fallback::Indexing`] if one of them has no vector yet.
    pub(super) fn similarities(
        &self,
        query: &[f32],
        scope: Scope<'_>,
    ) -> Result<Vec<(String, f32)>, Fallback> {
        let visible = match scope {
            Scope::Everything => None,
            Scope::Visible(v) => Some(v),
        };
        let vectors = self.shared.read();
        let each = vectors.each(visible).ok_or(Fallback::Indexing)?;
        let tools: Vec<&[f32]> = each.iter().map(|(_, vector)| *vector).collect();
        let scores = centred::similarities(query, &tools, centred::CENTRING);
        Ok(each
            .into_iter()
            .zip(scores)
            .map(|((name, _), score)| (name.to_owned(), score))
            .collect())
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }
}

/// What the model reads of a tool: its name as words, title, description
/// and tags (argument names and descriptions add more noise than meaning
/// to one vector; BM25 reads them).
pub fn text(descriptor: &pb::ToolDescriptor) -> String {
    let mut parts = vec![words(&descriptor.name).join(" ")];
    if !descriptor.title.is_empty() {
        parts.push(descriptor.title.clone());
    }
    parts.push(descriptor.description.clone());
    if !descriptor.tags.is_empty() {
        parts.push(descriptor.tags.join(", "));
    }
    parts.join(". ")
}

/// `vector` scaled to unit length (empty if it has none).
fn normalized(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return Vec::new();
    }
    vector.iter_mut().for_each(|x| *x /= norm);
    vector
}
