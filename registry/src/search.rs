//! `SearchTools`: the tools most relevant to a task in words, ranked by
//! BM25 (the `bm25` crate: an in-memory inverted index with stemming and
//! stop words) over what a model reads of a tool: its name, title,
//! description, tags, and the names and descriptions of its arguments.
//!
//! The index follows the catalog's change stream ([`ToolSearch::follow`]),
//! in both modes (the Redis store feeds the same stream), so a tool is
//! findable once it is listed and gone once it is not. BM25 weighs terms by
//! the corpus's average document length; updates drift from it, so the
//! index is rebuilt once a tenth of it has changed.

use std::sync::{Arc, PoisonError, RwLock};

use bm25::{Document, Language, SearchEngine, SearchEngineBuilder};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use toolmesh_proto::pb;

use crate::catalog::{Catalog, ChangeKind, ToolState};

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
/// comparable within one search).
#[derive(Debug, Clone)]
pub struct Found {
    /// The tool's name.
    pub name: String,
    /// Its score.
    pub score: f32,
}

/// The search index over the catalog's tools.
pub struct ToolSearch {
    index: RwLock<Index>,
}

struct Index {
    engine: SearchEngine<String>,
    /// Documents upserted or removed since the engine was built.
    changes: usize,
}

impl Default for ToolSearch {
    fn default() -> Self {
        Self {
            index: RwLock::new(Index::build(Vec::new())),
        }
    }
}

impl Index {
    fn build(documents: Vec<Document<String>>) -> Self {
        let engine = if documents.is_empty() {
            SearchEngineBuilder::<String>::with_avgdl(16.0)
                .language_mode(Language::English)
                .build()
        } else {
            SearchEngineBuilder::<String>::with_documents(Language::English, documents).build()
        };
        Self { engine, changes: 0 }
    }

    /// Rebuilds once enough has changed that the average length drifted.
    fn changed(&mut self) {
        self.changes += 1;
        let size = self.engine.iter().size_hint().0.max(self.changes);
        if self.changes > (size / 10).max(16) {
            let documents: Vec<Document<String>> = self.engine.iter().collect();
            *self = Self::build(documents);
        }
    }
}

impl ToolSearch {
    /// Indexes the tools `descriptors` describe, replacing whatever was
    /// indexed.
    pub fn replace_all<'a>(&self, descriptors: impl IntoIterator<Item = &'a pb::ToolDescriptor>) {
        let documents = descriptors
            .into_iter()
            .map(|d| Document::new(d.name.clone(), text(d)))
            .collect();
        *self.index.write().unwrap_or_else(PoisonError::into_inner) = Index::build(documents);
    }

    /// Indexes the tool `descriptor` describes (again, if it was).
    pub fn upsert(&self, descriptor: &pb::ToolDescriptor) {
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        index
            .engine
            .upsert(Document::new(descriptor.name.clone(), text(descriptor)));
        index.changed();
    }

    /// Forgets the tool named `name`.
    pub fn remove(&self, name: &str) {
        let mut index = self.index.write().unwrap_or_else(PoisonError::into_inner);
        index.engine.remove(&name.to_owned());
        index.changed();
    }

    /// Every indexed tool matching `query`, most relevant first, that
    /// `keep` keeps, at most `limit`.
    pub fn search(&self, query: &str, limit: usize, keep: impl Fn(&str) -> bool) -> Vec<Found> {
        let index = self.index.read().unwrap_or_else(PoisonError::into_inner);
        let mut found: Vec<Found> = index
            .engine
            .search(&words(query).join(" "), None)
            .into_iter()
            .filter(|r| keep(&r.document.id))
            .map(|r| Found {
                name: r.document.id,
                score: r.score,
            })
            .collect();
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
        let (tools, mut changes) = catalog.watch();
        self.replace_all(descriptors(&tools));
        loop {
            match changes.recv().await {
                Ok(event) => match event.kind {
                    ChangeKind::Removed => self.remove(event.tool.name()),
                    ChangeKind::Added | ChangeKind::Updated => self.upsert(&event.tool.descriptor),
                },
                Err(RecvError::Lagged(_)) => self.replace_all(descriptors(&catalog.list())),
                Err(RecvError::Closed) => return,
            }
        }
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
