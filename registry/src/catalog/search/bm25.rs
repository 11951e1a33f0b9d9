//! Okapi BM25 over an inverted index, with its statistics (how many
//! documents, how many hold each term, their average length) taken over
//! the documents a search may see, never over the others.
//!
//! Documents arrive as tokens (the tokenizer is the caller's); each term
//! keeps its postings (document, term frequency), each document its
//! length, so a document is added or removed in time linear in its
//! distinct terms and the postings of those terms.
//!
//! A search over [`Scope::Everything`] costs the postings of its terms.
//! One over [`Scope::Visible`] also asks the scope once per document, to
//! count the documents it sees and their length, and skips the postings
//! of the others.
//!
//! The formula is the `bm25` crate's (k1 = 1.2, b = 0.75, IDF
//! `ln(1 + (N - n + 0.5) / (n + 0.5))`, a query term counted each time it
//! occurs), computed in the same order, so the scores of a search that
//! sees everything are those the crate gives for a freshly built index.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

/// Term frequency saturation.
const K1: f32 = 1.2;
/// Document length normalisation.
const B: f32 = 0.75;

/// What a search's statistics and results cover.
#[derive(Clone, Copy)]
pub enum Scope<'a> {
    /// Every document.
    Everything,
    /// The documents whose name this keeps.
    Visible(&'a (dyn Fn(&str) -> bool + Sync)),
}

impl<'a, F: Fn(&str) -> bool + Sync> From<&'a F> for Scope<'a> {
    fn from(visible: &'a F) -> Self {
        Self::Visible(visible)
    }
}

/// The index: documents by name, postings by term.
#[derive(Debug, Default)]
pub(super) struct Bm25 {
    /// By slot; `None` is a slot free for the next document.
    documents: Vec<Option<Document>>,
    free: Vec<u32>,
    slots: HashMap<String, u32>,
    postings: HashMap<Arc<str>, Vec<Posting>>,
    /// The sum of the documents' lengths, in tokens.
    total_length: u64,
}

#[derive(Debug)]
struct Document {
    name: String,
    /// Tokens, repeats included.
    length: u32,
    /// Distinct terms, to find its postings again.
    terms: Vec<Arc<str>>,
}

#[derive(Debug, Clone, Copy)]
struct Posting {
    slot: u32,
    frequency: u32,
}

/// N and the average length, over what a search sees.
struct Statistics {
    documents: u32,
    average_length: f32,
    /// By slot, when the scope is not everything.
    visible: Option<Vec<bool>>,
}

impl Bm25 {
    /// How many documents are indexed.
    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    /// Indexes `tokens` as the document `name`, replacing the one of that
    /// name.
    pub(super) fn upsert(&mut self, name: &str, tokens: &[String]) {
        self.remove(name);
        let mut frequencies: HashMap<&str, u32> = HashMap::new();
        for token in tokens {
            *frequencies.entry(token).or_default() += 1;
        }
        let slot = self.free.pop().unwrap_or_else(|| {
            self.documents.push(None);
            u32::try_from(self.documents.len() - 1).unwrap_or(u32::MAX)
        });
        let mut terms = Vec::with_capacity(frequencies.len());
        for (term, frequency) in frequencies {
            let term = match self.postings.get_key_value(term) {
                Some((known, _)) => known.clone(),
                None => Arc::from(term),
            };
            self.postings
                .entry(term.clone())
                .or_default()
                .push(Posting { slot, frequency });
            terms.push(term);
        }
        let length = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        self.total_length += u64::from(length);
        self.slots.insert(name.to_owned(), slot);
        self.documents[slot as usize] = Some(Document {
            name: name.to_owned(),
            length,
            terms,
        });
    }

    /// Forgets the document `name`, if it is indexed.
    pub(super) fn remove(&mut self, name: &str) {
        let Some(slot) = self.slots.remove(name) else {
            return;
        };
        let Some(document) = self.documents.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        self.total_length -= u64::from(document.length);
        for term in document.terms {
            if let Entry::Occupied(mut entry) = self.postings.entry(term) {
                let postings = entry.get_mut();
                if let Some(at) = postings.iter().position(|p| p.slot == slot) {
                    postings.swap_remove(at);
                }
                if postings.is_empty() {
                    entry.remove();
                }
            }
        }
        self.free.push(slot);
    }

    /// Every document of `scope` holding a term of `query`, with its
    /// score, in no order.
    pub(super) fn search(&self, query: &[String], scope: Scope<'_>) -> Vec<(&str, f32)> {
        let Some(statistics) = self.statistics(scope) else {
            return Vec::new();
        };
        let seen = |slot: u32| {
            statistics
                .visible
                .as_ref()
                .is_none_or(|visible| visible[slot as usize])
        };
        let mut scores: Vec<Option<f32>> = vec![None; self.documents.len()];
        let mut matched = Vec::new();
        for term in query {
            let Some(postings) = self.postings.get(term.as_str()) else {
                continue;
            };
            let held = match statistics.visible {
                None => postings.len(),
                Some(_) => postings.iter().filter(|p| seen(p.slot)).count(),
            };
            if held == 0 {
                continue;
            }
            let idf = idf(statistics.documents, held);
            for posting in postings.iter().filter(|p| seen(p.slot)) {
                let Some(document) = &self.documents[posting.slot as usize] else {
                    continue;
                };
                let score = scores[posting.slot as usize].get_or_insert_with(|| {
                    matched.push(posting.slot);
                    0.0
                });
                *score += idf * weight(posting.frequency, document.length, &statistics);
            }
        }
        matched
            .into_iter()
            .filter_map(|slot| {
                let document = self.documents[slot as usize].as_ref()?;
                Some((document.name.as_str(), scores[slot as usize]?))
            })
            .collect()
    }

    /// The statistics of `scope`; `None` when it sees no document.
    fn statistics(&self, scope: Scope<'_>) -> Option<Statistics> {
        let (documents, total_length, visible) = match scope {
            Scope::Everything => (self.len(), self.total_length, None),
            Scope::Visible(keep) => {
                let mut visible = vec![false; self.documents.len()];
                let (mut documents, mut total_length) = (0, 0);
                for (slot, document) in self.documents.iter().enumerate() {
                    if let Some(document) = document
                        && keep(&document.name)
                    {
                        visible[slot] = true;
                        documents += 1;
                        total_length += u64::from(document.length);
                    }
                }
                (documents, total_length, Some(visible))
            }
        };
        if documents == 0 {
            return None;
        }
        // As the crate computes it: in f64, then narrowed.
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let average_length = (total_length as f64 / documents as f64) as f32;
        Some(Statistics {
            documents: u32::try_from(documents).unwrap_or(u32::MAX),
            average_length,
            visible,
        })
    }
}

/// How rare a term held by `held` of `documents` documents is.
#[allow(clippy::cast_precision_loss)]
fn idf(documents: u32, held: usize) -> f32 {
    let held = held as f32;
    let documents = documents as f32;
    (1.0 + (documents - held + 0.5) / (held + 0.5)).ln()
}

/// A term's weight in a document of `length` tokens that holds it
/// `frequency` times.
#[allow(clippy::cast_precision_loss)]
fn weight(frequency: u32, length: u32, statistics: &Statistics) -> f32 {
    let frequency = frequency as f32;
    // A corpus of empty documents has no postings to weigh.
    let average = statistics.average_length.max(f32::MIN_POSITIVE);
    let numerator = frequency * (K1 + 1.0);
    let denominator = frequency + K1 * (1.0 - B + B * (length as f32 / average));
    numerator / denominator
}

#[cfg(test)]
mod tests;
