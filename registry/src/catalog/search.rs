//! `SearchTools`: the tools most relevant to a task in words, ranked by
//! BM25 over what a model reads of a tool: its name, title, description,
//! tags, and the names and descriptions of its arguments, tokenized by the
//! `bm25` crate's English tokenizer (stemming, stop words). The scorer is
//! `search/bm25.rs`: an inverted index whose statistics are those of what
//! the caller may see.
//!
//! The index follows the catalog's change stream ([`ToolSearch::follow`]),
//! in both modes (the Redis store feeds the same stream), so a tool is
//! findable once it is listed and gone once it is not.
//!
//! With a model (`--search-model`, [`semantic`]) a search is hybrid
//! ([`fusion`]): the model's similarity (centred on the scope) and BM25,
//! blended. It is lexical when no model is loaded, when a tool in the
//! caller's scope is not embedded yet, or when the query's vector is not
//! had in time (the query threads busy or slow): [`Ranked::ranking`] says
//! which.
//!
//! A search's [`Scope`] is the caller's policy, never the request's tag
//! or name filters: a tool the caller may not see moves no score (BM25's
//! document counts and average length are the visible tools'), while a
//! filter only selects among the results, so a tool's score for a query
//! is the same whatever filter the request adds (as a filter clause does
//! not score in Lucene), and a filter matching a handful of tools does
//! not flatten every term's weight.

use std::sync::{Arc, PoisonError, RwLock};

use ::bm25::{DefaultTokenizer, Language, Tokenizer};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use toolmesh_proto::pb;

use crate::catalog::{Catalog, ChangeKind, ToolState};

mod bm25;
#[cfg(feature = "model")]
mod fusion;
#[cfg(feature = "model")]
pub mod semantic;

use self::bm25::Bm25;
pub use self::bm25::Scope;
#[cfg(feature = "model")]
use self::semantic::Semantic;

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 1024;
/// Most results one search returns.
pub const MAX_RESULTS: usize = 100;
/// Results when the request does not say.
pub const DEFAULT_RESULTS: usize = 5;
/// How deep argument schemas are read for names and descriptions.
const MAX_SCHEMA_DEPTH: usize = 4;
/// Most bytes of one tool's indexed text (descriptions are bounded already;
/// this bounds a schema's many properties).
const MAX_DOCUMENT_BYTES: usize = 32 * 1024;

/// One tool found, with its BM25 score (higher is more relevant; only
/// comparable within one caller's searches).
#[derive(Debug, Clone)]
pub struct Found {
    /// The tool's name.
    pub name: String,
    /// Its score.
    pub score: f32,
}

/// How an answer was ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// BM25 alone.
    Lexical,
    /// The model and BM25 ([`fusion`]).
    Hybrid,
}

/// A search's answer.
#[derive(Debug, Clone)]
pub struct Ranked {
    /// The tools, most relevant first.
    pub found: Vec<Found>,
    /// How they were ranked.
    pub ranking: Ranking,
}

/// The search index over the catalog's tools.
pub struct ToolSearch {
    tokenizer: DefaultTokenizer,
    index: RwLock<Bm25>,
    #[cfg(feature = "model")]
    semantic: Option<Semantic>,
}

impl Default for ToolSearch {
    fn default() -> Self {
        Self {
            tokenizer: DefaultTokenizer::new(Language::English),
            index: RwLock::default(),
            #[cfg(feature = "model")]
            semantic: None,
        }
    }
}

impl ToolSearch {
    /// An index that also ranks with `semantic`'s model.
    #[cfg(feature = "model")]
    pub fn hybrid(semantic: Semantic) -> Self {
        Self {
            semantic: Some(semantic),
            ..Self::default()
        }
    }

    /// The model's half, if a model is loaded.
    #[cfg(feature = "model")]
    pub fn semantic(&self) -> Option<&Semantic> {
        self.semantic.as_ref()
    }

    /// Indexes the tools `descriptors` describe, replacing whatever was
    /// indexed.
    pub fn replace_all<'a>(&self, descriptors: impl IntoIterator<Item = &'a pb::ToolDescriptor>) {
        let descriptors: Vec<&pb::ToolDescriptor> = descriptors.into_iter().collect();
        let mut index = Bm25::default();
        for descriptor in &descriptors {
            index.upsert(&descriptor.name, &self.tokens(descriptor));
        }
        *self.index.write().unwrap_or_else(PoisonError::into_inner) = index;
        #[cfg(feature = "model")]
        if let Some(semantic) = &self.semantic {
            semantic.replace_all(descriptors);
        }
    }

    /// Indexes the tool `descriptor` describes (again, if it was).
    pub fn upsert(&self, descriptor: &pb::ToolDescriptor) {
        let tokens = self.tokens(descriptor);
        self.index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .upsert(&descriptor.name, &tokens);
        #[cfg(feature = "model")]
        if let Some(semantic) = &self.semantic {
            semantic.upsert(descriptor);
        }
    }

    /// Forgets the tool named `name`.
    pub fn remove(&self, name: &str) {
        self.index
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        #[cfg(feature = "model")]
        if let Some(semantic) = &self.semantic {
            semantic.remove(name);
        }
    }

    /// The tools of `scope` ranked for `query`, most relevant first:
    /// hybrid when the model can rank them all, else by BM25 (the tools
    /// that share a word with the query).
    pub async fn rank(&self, query: &str, scope: Scope<'_>) -> Ranked {
        #[cfg(feature = "model")]
        return self
            .rank_weighted(query, scope, fusion::LEXICAL_WEIGHT)
            .await;
        #[cfg(not(feature = "model"))]
        self.lexical(query, scope)
    }

    /// The tools of `scope` ranked for `query` by BM25 alone.
    fn lexical(&self, query: &str, scope: Scope<'_>) -> Ranked {
        Ranked {
            found: self.search(query, usize::MAX, scope),
            ranking: Ranking::Lexical,
        }
    }

    /// [`Self::rank`] with the lexical score weighted `weight` in the
    /// blend instead of the tuned weight (0: the model alone), to measure.
    #[cfg(feature = "model")]
    pub async fn rank_weighted(&self, query: &str, scope: Scope<'_>, weight: f32) -> Ranked {
        let Some(semantic) = &self.semantic else {
            return self.lexical(query, scope);
        };
        let hybrid = match semantic.query(query).await {
            Ok(vector) => semantic.similarities(&vector, scope),
            Err(fallback) => Err(fallback),
        };
        match hybrid {
            Ok(similarities) => {
                let words = self.search(query, usize::MAX, scope);
                semantic.metrics().search_ranked("hybrid");
                Ranked {
                    found: fusion::blend(similarities, &words, weight),
                    ranking: Ranking::Hybrid,
                }
            }
            Err(fallback) => {
                semantic.metrics().search_fallback(fallback.label());
                semantic.metrics().search_ranked("lexical");
                self.lexical(query, scope)
            }
        }
    }

    /// The tools of `scope` matching `query` by BM25, most relevant first,
    /// at most `limit`, scored against the tools of `scope` alone.
    pub fn search<'a>(&self, query: &str, limit: usize, scope: impl Into<Scope<'a>>) -> Vec<Found> {
        let query = self.tokenizer.tokenize(&words(query).join(" "));
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let mut found: Vec<Found> = index
            .search(&query, scope.into())
            .into_iter()
            .map(|(name, score)| Found {
                name: name.to_owned(),
                score,
            })
            .collect();
        drop(index);
        // Equal scores in name order: the same query, the same answer.
        found.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.name.cmp(&b.name))
        });
        found.truncate(limit);
        found
    }

    /// Keeps the index equal to the catalog: everything in it now, then
    /// every change; a lagging stream reads the whole catalog again.
    pub async fn follow(&self, catalog: &Catalog) {
        let (tools, mut changes) = catalog.watch(false);
        self.replace_all(descriptors(&tools));
        loop {
            match changes.recv().await {
                Ok(event) if !event.for_defaults() => {}
                Ok(event) => match event.kind {
                    ChangeKind::Removed => self.remove(event.tool.name()),
                    ChangeKind::Added | ChangeKind::Updated => self.upsert(&event.tool.descriptor),
                },
                Err(RecvError::Lagged(_)) => self.replace_all(descriptors(&catalog.list())),
                Err(RecvError::Closed) => return,
            }
        }
    }

    fn tokens(&self, descriptor: &pb::ToolDescriptor) -> Vec<String> {
        self.tokenizer.tokenize(&text(descriptor))
    }
}

fn descriptors(tools: &[Arc<ToolState>]) -> impl Iterator<Item = &pb::ToolDescriptor> {
    tools.iter().map(|t| &*t.descriptor)
}

/// What a model reads of a tool, as one text: its name (twice: a name is
/// the densest description there is), title, description, tags, and its
/// arguments' names and descriptions.
pub fn text(descriptor: &pb::ToolDescriptor) -> String {
    let mut parts = vec![
        words(&descriptor.name).join(" "),
        words(&descriptor.name).join(" "),
        descriptor.title.clone(),
        descriptor.description.clone(),
    ];
    parts.extend(descriptor.tags.iter().map(|t| words(t).join(" ")));
    if let Ok(schema) = serde_json::from_str::<Value>(&descriptor.input_schema_json) {
        arguments(&schema, 0, &mut parts);
    }
    let mut text = parts.join(" \n");
    if text.len() > MAX_DOCUMENT_BYTES {
        let mut end = MAX_DOCUMENT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
    }
    text
}

/// The names and descriptions of the properties in `schema`, nested ones
/// included up to [`MAX_SCHEMA_DEPTH`].
fn arguments(schema: &Value, depth: usize, out: &mut Vec<String>) {
    if depth >= MAX_SCHEMA_DEPTH {
        return;
    }
    let Some(object) = schema.as_object() else {
        return;
    };
    if let Some(Value::Object(properties)) = object.get("properties") {
        for (name, property) in properties {
            out.push(words(name).join(" "));
            for key in ["title", "description"] {
                if let Some(Value::String(text)) = property.get(key) {
                    out.push(text.clone());
                }
            }
            arguments(property, depth + 1, out);
        }
    }
    if let Some(items) = object.get("items") {
        arguments(items, depth + 1, out);
    }
}

/// `text`'s words: split at anything not a letter or digit and at
/// lower-to-upper case changes, so `getWeather`, `get_weather`,
/// `get-weather` and `weather.get` all read as words a query uses.
pub fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            previous_lower = false;
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        if c.is_uppercase() && previous_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

#[cfg(test)]
mod corpus;
#[cfg(test)]
mod tests;
