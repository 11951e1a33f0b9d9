//! The registry's settings: command-line flags, each with an environment
//! fallback. Every default is usable: the registry starts with no flags.

use std::{net::SocketAddr, time::Duration};

use clap::Parser;

/// toolmesh registry: validates, rate-limits and proxies agents' tool calls
/// to the sidecars that announced the tools.
#[derive(Debug, Clone, Parser)]
#[command(name = "toolmesh-registry", version, about, long_about = None)]
pub struct Config {
    /// Address the gRPC server listens on.
    #[arg(long, env = "TOOLMESH_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,

    /// How long a sidecar's lease lasts without a heartbeat (sidecars
    /// heartbeat every third of it).
    #[arg(long, env = "TOOLMESH_LEASE_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease_ttl: Duration,

    /// Timeout of tools whose descriptor declares none.
    #[arg(long, env = "TOOLMESH_DEFAULT_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub default_timeout: Duration,

    /// Largest `arguments_json` an Invoke may carry, in bytes.
    #[arg(long, env = "TOOLMESH_MAX_ARGUMENTS_BYTES", default_value_t = 1 << 20)]
    pub max_arguments_bytes: usize,

    /// Largest gRPC message accepted or sent, in bytes (results included).
    #[arg(long, env = "TOOLMESH_MAX_MESSAGE_BYTES", default_value_t = 4 << 20)]
    pub max_message_bytes: usize,

    /// How long to wait for a sidecar connection before trying another instance.
    #[arg(long, env = "TOOLMESH_CONNECT_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,

    /// Most live sidecar instances the catalog holds.
    #[arg(long, env = "TOOLMESH_MAX_INSTANCES", default_value_t = 10_000)]
    pub max_instances: usize,

    /// Most distinct tools the catalog holds.
    #[arg(long, env = "TOOLMESH_MAX_TOOLS", default_value_t = 10_000)]
    pub max_tools: usize,

    /// On shutdown, how long in-flight calls may take to finish.
    #[arg(long, env = "TOOLMESH_SHUTDOWN_GRACE", default_value = "10s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            lease_ttl: Duration::from_secs(10),
            default_timeout: Duration::from_secs(30),
            max_arguments_bytes: 1 << 20,
            max_message_bytes: 4 << 20,
            connect_timeout: Duration::from_secs(2),
            max_instances: 10_000,
            max_tools: 10_000,
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_flags() {
        let parsed = Config::try_parse_from(["toolmesh-registry"]).expect("no flags needed");
        let default = Config::default();
        assert_eq!(parsed.listen, default.listen);
        assert_eq!(parsed.lease_ttl, default.lease_ttl);
        assert_eq!(parsed.default_timeout, default.default_timeout);
        assert_eq!(parsed.max_message_bytes, default.max_message_bytes);
        assert_eq!(parsed.shutdown_grace, default.shutdown_grace);
    }

    #[test]
    fn durations_read_as_humans_write_them() {
        let parsed =
            Config::try_parse_from(["r", "--lease-ttl", "1m 30s", "--listen", "0.0.0.0:9"])
                .expect("valid");
        assert_eq!(parsed.lease_ttl, Duration::from_secs(90));
        assert!(Config::try_parse_from(["r", "--lease-ttl", "soon"]).is_err());
    }
}
