//! The definitions this process has served, by digest: what lets the
//! registry tell an agent whose shown definition is stale what changed
//! since, and show an operator what a held definition differs from.
//!
//! Bounded by count and by bytes; the oldest definitions go first. A
//! definition served before this process started is not known here.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, PoisonError},
};

use prost::Message as _;
use toolmesh_proto::pb::ToolDescriptor;

use super::model::ToolState;

/// Most definitions remembered.
const MAX_DEFINITIONS: usize = 4096;
/// Most bytes of definitions remembered (encoded size).
const MAX_BYTES: usize = 16 << 20;

/// Definitions by digest, oldest first out.
#[derive(Default)]
pub(crate) struct Seen {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_digest: HashMap<Arc<str>, Arc<ToolDescriptor>>,
    order: VecDeque<Arc<str>>,
    bytes: usize,
}

impl Seen {
    /// Remembers `tool`'s definition.
    pub(crate) fn saw(&self, tool: &ToolState) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if inner.by_digest.contains_key(&tool.digest) {
            return;
        }
        let size = tool.descriptor.encoded_len();
        if size > MAX_BYTES {
            return;
        }
        while inner.order.len() >= MAX_DEFINITIONS || inner.bytes + size > MAX_BYTES {
            let Some(oldest) = inner.order.pop_front() else {
                break;
            };
            if let Some(gone) = inner.by_digest.remove(&oldest) {
                inner.bytes -= gone.encoded_len();
            }
        }
        inner.bytes += size;
        inner.order.push_back(tool.digest.clone());
        inner
            .by_digest
            .insert(tool.digest.clone(), tool.descriptor.clone());
    }

    /// The definition whose digest is `digest`, if this process served it.
    pub(crate) fn get(&self, digest: &str) -> Option<Arc<ToolDescriptor>> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.by_digest.get(digest).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(description: &str) -> ToolState {
        ToolState::new(
            Arc::new(ToolDescriptor {
                name: "t".into(),
                description: description.into(),
                ..Default::default()
            }),
            Vec::new(),
        )
    }

    #[test]
    fn the_oldest_definitions_go_first() {
        let seen = Seen::default();
        let first = tool("0");
        seen.saw(&first);
        seen.saw(&first);
        assert_eq!(
            seen.get(&first.digest).map(|d| d.description.clone()),
            Some("0".into())
        );
        for i in 1..=MAX_DEFINITIONS {
            seen.saw(&tool(&i.to_string()));
        }
        assert!(seen.get(&first.digest).is_none());
        let last = tool(&MAX_DEFINITIONS.to_string());
        assert!(seen.get(&last.digest).is_some());
        let inner = seen.inner.lock().expect("lock");
        assert_eq!(inner.order.len(), MAX_DEFINITIONS);
        assert_eq!(inner.by_digest.len(), MAX_DEFINITIONS);
    }
}
