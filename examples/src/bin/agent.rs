//! `agent`: the demo's Rust agent on its own, against any registry that
//! serves the demo's tools. Exits 0 only when every expected outcome was
//! observed.
//!
//! Its credential (an API key or a JWT) comes from `--token-file`, else
//! `TOOLMESH_TOKEN` or `TOOLMESH_TOKEN_FILE`; an `https://` registry is
//! verified with `--ca-file` / `TOOLMESH_CA_FILE`, else the public roots.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use toolmesh_examples::agent::{self, Access, Options};

/// Discovers the demo's tools, calls them, and shows every error case with
/// its decoded google.rpc details.
#[derive(Debug, Parser)]
#[command(name = "agent", version, about)]
struct Cli {
    /// Registry address: host:port, http://host:port, or https://host:port
    /// (TLS, verified with --ca-file, else the public roots).
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY",
        default_value = "127.0.0.1:50051",
        value_parser = registry_url
    )]
    registry: String,
    /// Seconds to wait for the registry and every tool.
    #[arg(long, default_value_t = 30)]
    wait_secs: u64,
    /// File holding the agent's API key or JWT, one line (else the
    /// environment: TOOLMESH_TOKEN, the token itself, or
    /// TOOLMESH_TOKEN_FILE, a file holding it).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// PEM CA certificates an https:// registry's certificate is verified
    /// with (default: the public roots).
    #[arg(long, value_name = "PEM", env = "TOOLMESH_CA_FILE")]
    ca_file: Option<PathBuf>,
}

/// `--registry` as the URL to dial, by the rule every binary and agent
/// shares (`host:port`, `http://host:port` or `https://host:port`).
fn registry_url(address: &str) -> Result<String, toolmesh_proto::endpoint::EndpointError> {
    toolmesh_proto::endpoint::url(address)
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let access = match Access::from_env(cli.token_file.as_deref(), cli.ca_file) {
        Ok(access) => access,
        Err(error) => {
            eprintln!("agent: {error:#}");
            return ExitCode::from(2);
        }
    };
    let options = Options {
        registry: cli.registry,
        wait_for_tools: Duration::from_secs(cli.wait_secs),
    };
    match agent::run_with(&options, &access).await {
        Ok(report) if report.passed() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("agent: {error:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::Cli;

    fn registry(args: &[&str]) -> Result<String, String> {
        Cli::try_parse_from([&["agent"], args].concat())
            .map(|cli| cli.registry)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn registry_takes_host_port_and_http_urls_alike() {
        for given in [
            "127.0.0.1:50051",
            "http://127.0.0.1:50051",
            "http://127.0.0.1:50051/",
        ] {
            assert_eq!(
                registry(&["--registry", given]).as_deref(),
                Ok("http://127.0.0.1:50051"),
                "{given}"
            );
        }
        assert_eq!(
            registry(&["--registry", "registry.svc:7000"]).as_deref(),
            Ok("http://registry.svc:7000")
        );
    }

    #[test]
    fn registry_mistakes_are_refused_with_what_to_write() {
        for (given, problem) in [
            ("127.0.0.1", "the port is missing"),
            (
                "grpc://127.0.0.1:50051",
                "the scheme must be http:// or https://",
            ),
        ] {
            let error = registry(&["--registry", given]).expect_err(given);
            assert!(error.contains(problem), "{given}: {error}");
            assert!(
                error.contains("write host:port, http://host:port or https://host:port"),
                "{given}: {error}"
            );
        }
    }
}
