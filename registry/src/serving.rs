//! Serving: the registry as a process on the network. `server` builds
//! every part from [`Config`](crate::Config), serves them with health and
//! reflection, and drains; the rest are what it serves and how.

pub(crate) mod api;
pub(crate) mod connections;
pub(crate) mod console;
pub(crate) mod first_route;
pub(crate) mod http_listener;
pub(crate) mod mcp;
pub mod probe;
pub(crate) mod readiness;
pub(crate) mod server;
pub(crate) mod watch;
pub(crate) mod workers;
