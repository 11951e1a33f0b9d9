//! The MCP endpoint (`--mcp-listen`): the catalog for every MCP client,
//! over Streamable HTTP at `/mcp`, with the registry's own validation,
//! rate limits, balancing, authentication and audit in the path
//! (`docs/mcp-endpoint.md`).
//!
//! The protocol itself (JSON-RPC, the transport, version negotiation,
//! sessions of the revisions before 2026-07-28) is the `rmcp` crate's;
//! what is toolmesh's lives here.
//!
//! # Layout
//! - [`serve`]: the HTTP server: listener (TLS with the registry's
//!   settings), the `/mcp` route, its layers, and the drain on shutdown.
//! - [`auth`]: the `Authorization` header to a caller, or HTTP 401.
//! - [`sessions`]: sessions of the handshake revisions, bounded in number
//!   and idle time.
//! - [`handler`]: the MCP methods: `tools/list`, `tools/call`,
//!   `subscriptions/listen`, and the handshake.
//! - [`listing`]: `tools/list` pages, in name order, by cursor.
//! - [`content`]: what a tool's answer is to an MCP client: the content
//!   blocks its MCP server sent, or the result as text.
//! - [`results`]: what a refused or failed call is to an MCP client.
//! - [`search`]: `toolmesh.search_tools`, `SearchTools` as an MCP tool.
//! - [`call_tool`]: `toolmesh.call_tool`, the call half of progressive
//!   discovery (`--mcp-discovery progressive`).
//! - [`notify`]: `notifications/tools/list_changed` from the catalog's
//!   change stream, coalesced.
//! - [`tasks`]: the Tasks extension: which calls answer with a task, and
//!   the registry's tasks as `tasks/get` shows them.

pub(crate) mod auth;
pub(crate) mod call_tool;
pub(crate) mod content;
pub(crate) mod handler;
pub(crate) mod listing;
pub(crate) mod notify;
pub(crate) mod own_tool;
pub(crate) mod results;
pub(crate) mod search;
pub(crate) mod serve;
pub(crate) mod sessions;
pub(crate) mod tasks;

pub(crate) use serve::{McpEndpoint, McpSettings};
