//! The toolmesh gRPC contract (`package toolmesh.v1`).
//!
//! The `.proto` files under `proto/toolmesh/v1/` are the source of truth; this
//! crate compiles them and re-exports the result as [`pb`].
//!
//! # Layout
//! - [`pb`]: messages, `*_client` and `*_server` modules for `ToolRegistry`,
//!   `Registration` and `ToolRuntime`.
//! - [`FILE_DESCRIPTOR_SET`]: the encoded descriptors, for server reflection.
//! - [`timeout`]: the `grpc-timeout` header, read by both servers, and the
//!   margin both keep back to answer within it.
//! - [`deadline`]: a call's deadline, one value from the edge of each
//!   process to the backend.
//! - [`code`]: gRPC status codes by their canonical names.
//! - [`tool_name`]: the tool-name rule registry and sidecar share.
//! - [`pattern`]: glob patterns over tool names (the registry's policies,
//!   the sidecar's MCP allow and deny lists).
//! - [`rules`]: how both read the same fields: blank arguments, durations.
//! - [`endpoint`]: server addresses as every binary and agent takes them
//!   (`host:port`, `http://host:port` or `https://host:port`).
//! - [`grant`]: the per-call grants that let the registry, and only for
//!   the calls it signs, run tools on a sidecar's `ToolRuntime.Execute`.
//! - [`token`]: bearer tokens read from files (the registration token).
//! - [`tls`]: TLS and mTLS with certificates reloaded from disk: the
//!   listeners' incoming connections, the peer of a call, and a connector
//!   for `https://` URLs.
//! - [`listen`]: addresses a server listens on (`IP:port`, or `host:port`
//!   with a name that resolves).

mod generated {
    #![allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
    pub mod toolmesh {
        pub mod v1 {
            tonic::include_proto!("toolmesh.v1");
        }
    }
}

/// Generated messages and services of `toolmesh.v1`.
pub mod pb {
    pub use crate::generated::toolmesh::v1::*;
}

/// The encoded `FileDescriptorSet` of the contract (and its imports), served
/// by gRPC server reflection so `grpcurl` works without `.proto` files.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/toolmesh_descriptor.bin"));

pub use prost_types::Duration;

pub mod code;
pub mod deadline;
pub mod digits;
pub mod endpoint;
pub mod grant;
pub mod listen;
pub mod pattern;
pub mod rules;
pub mod shutdown;
pub mod timeout;
pub mod tls;
pub mod token;
pub mod tool_name;
