//! The connection to the registry: its address (`--registry`, else
//! `TOOLMESH_REGISTRY`, else `127.0.0.1:50051`), TLS for an `https://`
//! address (verified with `--ca-file` or the public roots), and the
//! credential sent as `authorization: Bearer ...` on every call.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_proto::tls::{ClientFiles, ClientTls};

/// Where the registry is and how to reach it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct Target {
    /// The registry: `host:port`, `http://host:port`, or `https://host:port` (TLS).
    #[arg(
        long,
        env = "TOOLMESH_REGISTRY",
        default_value = "127.0.0.1:50051",
        global = true
    )]
    pub(crate) registry: String,
    /// File holding the credential (an API key or a JWT), sent as a bearer token.
    #[arg(long, env = "TOOLMESH_TOKEN_FILE", global = true)]
    pub(crate) token_file: Option<PathBuf>,
    /// PEM CA certificate an `https://` registry's certificate is verified with (else the public roots).
    #[arg(long, env = "TOOLMESH_CA_FILE", global = true)]
    pub(crate) ca_file: Option<PathBuf>,
    /// Deadline of each call, in seconds.
    #[arg(long, default_value_t = 30.0, global = true)]
    pub(crate) timeout: f64,
}

/// A connected client and the credential it presents.
pub(crate) struct Registry {
    /// The `ToolRegistry` client.
    pub(crate) client: ToolRegistryClient<Channel>,
    token: Option<String>,
    timeout: Duration,
}

impl Registry {
    /// Connects to `target`.
    pub(crate) async fn connect(target: &Target) -> anyhow::Result<Self> {
        let token = read_token(target)?;
        let url = toolmesh_proto::endpoint::url(&target.registry)
            .with_context(|| format!("--registry {}", target.registry))?;
        if target.ca_file.is_some() && !url.starts_with("https://") {
            anyhow::bail!(
                "--ca-file is for an https:// registry; {} is plaintext",
                target.registry
            );
        }
        let timeout = Duration::try_from_secs_f64(target.timeout)
            .ok()
            .filter(|t| !t.is_zero())
            .context("--timeout: a number of seconds above 0")?;
        let tls = ClientTls::load(ClientFiles {
            ca: target.ca_file.clone(),
            ..Default::default()
        })
        .context("--ca-file")?;
        let channel = Endpoint::from_shared(url)?
            .connect_timeout(timeout)
            .connect_with_connector_lazy(toolmesh_proto::tls::connector(tls));
        Ok(Self {
            client: ToolRegistryClient::new(channel).max_decoding_message_size(64 << 20),
            token,
            timeout,
        })
    }

    /// `message` as a request carrying the credential and the deadline.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(self.timeout);
        if let Some(token) = &self.token
            && let Ok(value) = format!("Bearer {token}").parse()
        {
            request.metadata_mut().insert("authorization", value);
        }
        request
    }
}

/// The credential: `--token-file`, else `TOOLMESH_TOKEN`.
fn read_token(target: &Target) -> anyhow::Result<Option<String>> {
    let token = match &target.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("--token-file {}", path.display()))?,
        ),
        None => std::env::var("TOOLMESH_TOKEN").ok(),
    };
    let Some(token) = token.map(|t| t.trim().to_owned()) else {
        return Ok(None);
    };
    if token.is_empty() || !token.chars().all(|c| c.is_ascii_graphic()) {
        anyhow::bail!("the credential must be printable ASCII with no spaces");
    }
    Ok(Some(token))
}
