//! [`ToolSet`]: the tools a sidecar serves now. Its fixed tools (the YAML's
//! `http` and `command` tools, the SDK's) never change; each MCP server
//! ([`crate::mcp`]) publishes its own share, which changes as the server
//! lists other tools, exits or comes back. The runtime reads the current
//! set on every call; the announcer re-announces when it changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;
use toolmesh_proto::pb;

use crate::tool::{InvalidToolName, Tool, validate_tool_name};

/// Why a set of tools cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ToolSetError {
    /// A tool name breaks the naming rule.
    #[error(transparent)]
    InvalidName(#[from] InvalidToolName),
    /// Two tools share a name.
    #[error("tool {0:?} is defined twice")]
    Duplicate(String),
    /// There is nothing to serve.
    #[error("no tools to serve")]
    Empty,
}

/// The tools served at one moment, by name.
#[derive(Debug, Default)]
pub struct Tools {
    by_name: HashMap<String, Tool>,
}

impl Tools {
    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name)
    }

    /// Whether no tool is served.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The descriptors to announce, sorted by name.
    pub fn descriptors(&self) -> Vec<pb::ToolDescriptor> {
        let mut descriptors: Vec<_> = self
            .by_name
            .values()
            .map(|tool| tool.descriptor().clone())
            .collect();
        descriptors.sort_by(|a, b| a.name.cmp(&b.name));
        descriptors
    }
}

/// The fixed tools and each dynamic source's share, merged into the
/// [`Tools`] served now.
#[derive(Debug)]
pub struct ToolSet {
    fixed: Vec<Tool>,
    /// Each source's tools, by source index.
    shares: Mutex<Vec<Vec<Tool>>>,
    current: watch::Sender<Arc<Tools>>,
}

impl ToolSet {
    /// A set of the `fixed` tools (names valid and unique) and room for
    /// `sources` dynamic shares, empty until published. With no source,
    /// at least one fixed tool.
    pub fn new(fixed: Vec<Tool>, sources: usize) -> Result<Self, ToolSetError> {
        if fixed.is_empty() && sources == 0 {
            return Err(ToolSetError::Empty);
        }
        let mut by_name = HashMap::new();
        for tool in &fixed {
            let name = tool.descriptor().name.clone();
            validate_tool_name(&name)?;
            if by_name.insert(name.clone(), tool.clone()).is_some() {
                return Err(ToolSetError::Duplicate(name));
            }
        }
        Ok(Self {
            fixed,
            shares: Mutex::new(vec![Vec::new(); sources]),
            current: watch::Sender::new(Arc::new(Tools { by_name })),
        })
    }

    /// The tools served now.
    pub fn current(&self) -> Arc<Tools> {
        self.current.borrow().clone()
    }

    /// The tools served now, and every later change.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Tools>> {
        self.current.subscribe()
    }

    /// Replaces source `source`'s share with `tools`. A name the fixed
    /// tools or an earlier source already serve stays theirs: the tools
    /// left out for that are returned. Watchers hear of it only when a
    /// descriptor changed.
    pub fn publish(&self, source: usize, tools: Vec<Tool>) -> Vec<String> {
        let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(share) = shares.get_mut(source) {
            *share = tools;
        }
        let mut by_name: HashMap<String, Tool> = HashMap::new();
        let mut shadowed = Vec::new();
        let shared = shares
            .iter()
            .enumerate()
            .flat_map(|(index, share)| share.iter().map(move |tool| (Some(index), tool)));
        for (owner, tool) in self.fixed.iter().map(|tool| (None, tool)).chain(shared) {
            let name = &tool.descriptor().name;
            if by_name.contains_key(name) {
                if owner == Some(source) {
                    shadowed.push(name.clone());
                }
                continue;
            }
            by_name.insert(name.clone(), tool.clone());
        }
        let next = Tools { by_name };
        self.current.send_if_modified(|current| {
            let changed = current.descriptors() != next.descriptors();
            // The backends may have changed (a restarted server) even when
            // the descriptors did not: serve the new ones either way.
            *current = Arc::new(next);
            changed
        });
        shadowed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::CallContext;
    use crate::tool::{Backend, BackendError, Outcome};

    struct Echo;

    #[async_trait::async_trait]
    impl Backend for Echo {
        async fn call(
            &self,
            arguments_json: &str,
            _: &CallContext,
            _: toolmesh_proto::deadline::Deadline,
        ) -> Result<Outcome, BackendError> {
            Ok(Outcome::ok(arguments_json))
        }
    }

    fn tool(name: &str, version: &str) -> Tool {
        Tool::new(
            pb::ToolDescriptor {
                name: name.to_owned(),
                description: "d".to_owned(),
                version: version.to_owned(),
                ..Default::default()
            },
            Arc::new(Echo),
        )
    }

    fn names(tools: &Tools) -> Vec<String> {
        tools.descriptors().into_iter().map(|d| d.name).collect()
    }

    #[test]
    fn fixed_tools_are_checked_as_before() {
        assert!(matches!(ToolSet::new(vec![], 0), Err(ToolSetError::Empty)));
        assert!(ToolSet::new(vec![], 1).is_ok_and(|set| set.current().is_empty()));
        let twice = ToolSet::new(vec![tool("a", "1"), tool("a", "1")], 0);
        assert!(matches!(twice, Err(ToolSetError::Duplicate(name)) if name == "a"));
    }

    #[test]
    fn shares_come_and_go_and_never_take_a_name_already_served() {
        let set = ToolSet::new(vec![tool("fixed", "1")], 2).expect("set");
        let mut changes = set.subscribe();
        changes.borrow_and_update();

        assert_eq!(
            set.publish(0, vec![tool("a", "1"), tool("b", "1")]),
            Vec::<String>::new()
        );
        assert!(changes.has_changed().expect("open"));
        changes.borrow_and_update();
        assert_eq!(names(&set.current()), ["a", "b", "fixed"]);

        let shadowed = set.publish(1, vec![tool("b", "2"), tool("fixed", "2"), tool("c", "1")]);
        assert_eq!(shadowed, ["b", "fixed"]);
        let current = set.current();
        assert_eq!(names(&current), ["a", "b", "c", "fixed"]);
        assert_eq!(
            current.get("b").map(|t| t.descriptor().version.as_str()),
            Some("1")
        );
        changes.borrow_and_update();

        // The same share again changes nothing a watcher needs to hear of.
        set.publish(1, vec![tool("b", "2"), tool("fixed", "2"), tool("c", "1")]);
        assert!(!changes.has_changed().expect("open"));

        // Source 0 leaves: its names go, and source 1's `b` comes forward.
        set.publish(0, Vec::new());
        assert!(changes.has_changed().expect("open"));
        let current = set.current();
        assert_eq!(names(&current), ["b", "c", "fixed"]);
        assert_eq!(
            current.get("b").map(|t| t.descriptor().version.as_str()),
            Some("2")
        );
    }
}
