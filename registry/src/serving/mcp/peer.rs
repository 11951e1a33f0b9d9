//! Where an MCP connection comes from, as the endpoint's handlers see it.

use std::net::SocketAddr;

/// The peer's address (`None` when the transport has none to give).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerAddr(pub Option<SocketAddr>);
