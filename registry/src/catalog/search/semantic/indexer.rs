//! The background worker that gives every tool its vector: it takes the
//! pending texts in batches, loads what the cache holds, claims the rest,
//! embeds what it claimed on its own low-priority thread, and shares the
//! vectors. A text another replica claimed is waited for (polling with
//! backoff, within the claim's life), then embedded here if it never came.
//!
//! One worker per registry, one batch at a time: the queue is the set of
//! pending texts, bounded by the catalog.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::cache::{CLAIM, EmbeddingCache};
use super::vectors::TextHash;
use super::workers::Workers;
use super::{Shared, normalized};

/// Texts looked up in the cache at once.
const LOOKUP_BATCH: usize = 256;
/// Texts embedded at once.
const EMBED_BATCH: usize = 32;
/// First and longest pause while waiting for another replica's vectors.
const FIRST_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(1);

/// Runs until the index it fills is dropped.
pub(super) async fn run(
    shared: Weak<Shared>,
    wake: Arc<Notify>,
    workers: Workers,
    cache: Option<Arc<dyn EmbeddingCache>>,
) {
    loop {
        wake.notified().await;
        loop {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let batch = shared.vectors().take(LOOKUP_BATCH);
            if batch.is_empty() {
                shared.observe();
                break;
            }
            let mut indexer = Batch {
                shared: &shared,
                workers: &workers,
                cache: cache.as_deref(),
            };
            indexer.index(batch).await;
            shared.observe();
        }
    }
}

struct Batch<'a> {
    shared: &'a Shared,
    workers: &'a Workers,
    cache: Option<&'a dyn EmbeddingCache>,
}

impl Batch<'_> {
    async fn index(&mut self, batch: Vec<(TextHash, Arc<str>)>) {
        let missing = self.load(batch).await;
        for chunk in missing.chunks(EMBED_BATCH) {
            let (mine, theirs) = self.claim(chunk).await;
            self.embed(mine).await;
            if !theirs.is_empty() {
                let left = self.wait_for(theirs).await;
                self.embed(left).await;
            }
        }
    }

    /// Stores what the cache holds; the rest is returned.
    async fn load(&self, batch: Vec<(TextHash, Arc<str>)>) -> Vec<(TextHash, Arc<str>)> {
        let Some(cache) = self.cache else {
            return batch;
        };
        let hashes: Vec<TextHash> = batch.iter().map(|(h, _)| *h).collect();
        match cache.get(&hashes).await {
            Ok(found) => self.keep_cached(batch, found),
            Err(error) => {
                tracing::warn!(%error, "tool vectors not loaded from the cache; embedding them here");
                batch
            }
        }
    }

    /// Stores the vectors `found` in the cache for `texts` (in order);
    /// returns the texts it had none for.
    fn keep_cached(
        &self,
        texts: Vec<(TextHash, Arc<str>)>,
        found: Vec<Option<Vec<f32>>>,
    ) -> Vec<(TextHash, Arc<str>)> {
        let mut left = Vec::new();
        let mut loaded = 0;
        for ((hash, text), vector) in texts.into_iter().zip(found) {
            match vector {
                Some(vector) => {
                    self.shared.vectors().store(hash, Arc::from(vector));
                    loaded += 1;
                }
                None => left.push((hash, text)),
            }
        }
        self.shared.metrics.tool_embeddings("cache", loaded);
        left
    }

    /// Splits `chunk` into what this replica claimed and what another did.
    async fn claim(
        &self,
        chunk: &[(TextHash, Arc<str>)],
    ) -> (Vec<(TextHash, Arc<str>)>, Vec<(TextHash, Arc<str>)>) {
        let Some(cache) = self.cache else {
            return (chunk.to_vec(), Vec::new());
        };
        let hashes: Vec<TextHash> = chunk.iter().map(|(h, _)| *h).collect();
        let claimed = match cache.claim(&hashes).await {
            Ok(claimed) => claimed,
            Err(error) => {
                tracing::warn!(%error, "tool vectors not claimed; embedding them here");
                return (chunk.to_vec(), Vec::new());
            }
        };
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for (text, claimed) in chunk.iter().cloned().zip(claimed) {
            if claimed {
                mine.push(text);
            } else {
                theirs.push(text);
            }
        }
        (mine, theirs)
    }

    /// Embeds `texts` here, stores and shares the vectors.
    async fn embed(&self, texts: Vec<(TextHash, Arc<str>)>) {
        if texts.is_empty() {
            return;
        }
        let inputs: Vec<Arc<str>> = texts.iter().map(|(_, t)| t.clone()).collect();
        let vectors = match self.workers.documents(inputs).await {
            Ok(vectors) if vectors.len() == texts.len() => vectors,
            Ok(_) | Err(_) => {
                // One text at a time, to find the one at fault.
                let mut vectors = Vec::with_capacity(texts.len());
                for (_, text) in &texts {
                    match self.workers.documents(vec![text.clone()]).await {
                        Ok(mut one) if one.len() == 1 => vectors.push(one.remove(0)),
                        Ok(_) | Err(_) => {
                            tracing::warn!(text = %clip(text), "a tool's text could not be embedded; it is ranked by its words alone");
                            vectors.push(Vec::new());
                        }
                    }
                }
                vectors
            }
        };
        let vectors: Vec<(TextHash, Arc<[f32]>)> = texts
            .iter()
            .zip(vectors)
            .map(|((hash, _), vector)| (*hash, Arc::from(normalized(vector))))
            .collect();
        {
            let mut index = self.shared.vectors();
            for (hash, vector) in &vectors {
                index.store(*hash, vector.clone());
            }
        }
        self.shared.metrics.tool_embeddings("model", vectors.len());
        if let Some(cache) = self.cache {
            let shared: Vec<(TextHash, &[f32])> = vectors
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(h, v)| (*h, &**v))
                .collect();
            if let Err(error) = cache.put(&shared).await {
                tracing::warn!(%error, "tool vectors not shared; other replicas embed them too");
            }
        }
    }

    /// Waits for the vectors of `texts`, which another replica claimed;
    /// returns those that did not come within the claim's life.
    async fn wait_for(&self, mut texts: Vec<(TextHash, Arc<str>)>) -> Vec<(TextHash, Arc<str>)> {
        let Some(cache) = self.cache else {
            return texts;
        };
        let deadline = Instant::now() + CLAIM + MAX_POLL;
        let mut pause = FIRST_POLL;
        while !texts.is_empty() && Instant::now() + pause < deadline {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
            // A tool that left needs no vector.
            texts.retain(|(hash, _)| self.shared.vectors().is_pending(hash));
            let hashes: Vec<TextHash> = texts.iter().map(|(h, _)| *h).collect();
            let Ok(found) = cache.get(&hashes).await else {
                return texts;
            };
            texts = self.keep_cached(texts, found);
        }
        texts
    }
}

/// The start of `text`, for a log line.
fn clip(text: &str) -> &str {
    let mut end = text.len().min(80);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
