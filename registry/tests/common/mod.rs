//! The registry under test on loopback, on top of `toolmesh-test-support`:
//! the library server on a bound listener, stopped through a oneshot with
//! its outcome checked, or aborted to play a crash.
#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

pub mod processes;
pub mod redis_probe;

use std::{net::SocketAddr, time::Duration};

use tokio::net::TcpListener;
use tonic::transport::Channel;
use toolmesh_proto::pb::{
    registration_client::RegistrationClient, tool_registry_client::ToolRegistryClient,
};
use toolmesh_registry::Config;
use toolmesh_sidecar::config::SidecarConfig;
#[allow(unused_imports)]
pub use toolmesh_test_support::{
    catalog::{self, instances, invoke, keyed, tool_names},
    ports::reserved_port,
    redis::{self as redis_server, RedisServer},
    server::{LoopbackServer, listener_at, loopback_listener, sidecar as start_sidecar},
    suite,
    tools::*,
    wait::{eventually, stays, wait_until},
};

/// A registry (the library's `run`) serving on loopback.
pub struct TestRegistry {
    pub addr: SocketAddr,
    server: LoopbackServer,
}

impl TestRegistry {
    /// On 127.0.0.1 and a port the kernel chose.
    pub async fn start(config: Config) -> Self {
        Self::start_on(loopback_listener().await, config)
    }

    /// On a port below the ephemeral range, for a test that restarts it
    /// on the same address ([`Self::start_at`]).
    pub async fn start_restartable(config: Config) -> Self {
        Self::start_at(SocketAddr::from(([127, 0, 0, 1], reserved_port())), config).await
    }

    /// On `addr`, once it is free (a registry that just stopped there may
    /// still hold it).
    pub async fn start_at(addr: SocketAddr, config: Config) -> Self {
        Self::start_on(listener_at(addr).await, config)
    }

    /// On a listener the caller bound.
    pub fn start_on(listener: TcpListener, config: Config) -> Self {
        let server = toolmesh_test_support::server::registry(listener, config);
        Self {
            addr: server.addr,
            server,
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    pub async fn client(&self) -> ToolRegistryClient<Channel> {
        ToolRegistryClient::connect(self.url()).await.unwrap()
    }

    pub async fn registration(&self) -> RegistrationClient<Channel> {
        RegistrationClient::connect(self.url()).await.unwrap()
    }

    /// Graceful stop; panics if the registry fails or hangs.
    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// Gone at once, like a crash.
    pub fn abort(self) {
        self.server.abort();
    }
}

/// A sidecar (the library's `serve`) on loopback.
pub struct TestSidecar {
    pub addr: SocketAddr,
    server: LoopbackServer,
}

impl TestSidecar {
    pub async fn start(
        registry: &str,
        instance_id: &str,
        tools: Vec<toolmesh_sidecar::Tool>,
    ) -> Self {
        let server = start_sidecar(registry, instance_id, tools).await;
        Self {
            addr: server.addr,
            server,
        }
    }

    /// Withdraws and stops; panics if the sidecar fails or hangs.
    pub async fn stop(self) {
        self.server.stop().await;
    }

    /// Stops without withdrawing, like a crash.
    pub fn kill(self) {
        self.server.abort();
    }
}

/// A registry config with the given lease TTL.
pub fn config_with_ttl(ttl: Duration) -> Config {
    Config {
        lease_ttl: ttl,
        shutdown_grace: Duration::from_secs(2),
        ..Config::default()
    }
}

/// Tools built from a sidecar YAML, relative paths against the working
/// directory.
pub fn command_tools(yaml: &str) -> Vec<toolmesh_sidecar::Tool> {
    SidecarConfig::from_yaml_str(yaml)
        .unwrap()
        .build_tools(std::path::Path::new("."))
        .unwrap()
}

/// Waits (up to 20 s) until `tool` has exactly `count` live instances.
pub async fn wait_for_instances(registry: &TestRegistry, tool: &str, count: u32) {
    catalog::wait_for_instances(
        &registry.client().await,
        tool,
        count,
        Duration::from_secs(20),
    )
    .await;
}
