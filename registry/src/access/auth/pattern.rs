//! Glob patterns over tool names, shared with the sidecar (which selects
//! an MCP server's tools by them): [`toolmesh_proto::pattern`].

pub use toolmesh_proto::pattern::Pattern;
