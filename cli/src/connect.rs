//! The connection to the registry: its address (`--registry`, else
//! `TOOLMESH_REGISTRY`, else `127.0.0.1:50051`), TLS for an `https://`
//! address (verified with `--ca-file` or the public roots), the
//! credential sent as `authorization: Bearer ...` on every call, the
//! deadline of each call (`--timeout`, else [`CALL_TIMEOUT`]), and
//! whether the registry is ready ([`Registry::ready`]).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use toolmesh_proto::pb::tasks_client::TasksClient;
use toolmesh_proto::pb::tool_registry_client::ToolRegistryClient;
use toolmesh_proto::pb::tool_registry_server::SERVICE_NAME;
use toolmesh_proto::tls::{ClientFiles, ClientTls};

use crate::failure::Failure;

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
    /// Deadline of each call: `5s`, `250ms`, `1m`, or a number of seconds [default: 30s]. For `tasks wait` and `invoke --task`: how long to wait for the task to end [default: until it ends].
    #[arg(long, env = "TOOLMESH_TIMEOUT", value_parser = timeout, global = true)]
    pub(crate) timeout: Option<Duration>,
}

/// The deadline of each call when `--timeout` sets none.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A connected client and the credential it presents.
pub(crate) struct Registry {
    client: ToolRegistryClient<Channel>,
    tasks: TasksClient<Channel>,
    health: HealthClient<Channel>,
    /// The address dialled, as errors name it.
    url: String,
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
        let timeout = target.timeout.unwrap_or(CALL_TIMEOUT);
        let tls = ClientTls::load(ClientFiles {
            ca: target.ca_file.clone(),
            ..Default::default()
        })
        .context("--ca-file")?;
        let channel = Endpoint::from_shared(url.clone())?
            .connect_timeout(timeout)
            .connect_with_connector_lazy(toolmesh_proto::tls::connector(tls));
        Ok(Self {
            client: ToolRegistryClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            tasks: TasksClient::new(channel.clone()).max_decoding_message_size(64 << 20),
            health: HealthClient::new(channel),
            url,
            token,
            timeout,
        })
    }

    /// Whether the registry serves agents: its gRPC health for
    /// `toolmesh.v1.ToolRegistry` is SERVING. It is not until its catalog
    /// is loaded (from Redis, in distributed mode) and from the start of a
    /// shutdown; meanwhile it would list no tools. A registry without the
    /// health service is taken as ready.
    pub(crate) async fn ready(&mut self) -> Result<(), Failure> {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: SERVICE_NAME.to_owned(),
        });
        request.set_timeout(self.timeout);
        match self.health.check(request).await {
            Ok(answer) => match answer.into_inner().status() {
                ServingStatus::Serving => Ok(()),
                status => Err(Failure::not_ready(
                    &self.url,
                    &format!(
                        "its health is {} (it has not loaded its catalog yet, as when it cannot reach its Redis, or it is shutting down; its log says which)",
                        status.as_str_name()
                    ),
                )),
            },
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unimplemented | tonic::Code::NotFound
                ) =>
            {
                Ok(())
            }
            Err(status) => Err(self.failed(&status)),
        }
    }

    /// `call` on the client: its answer, or a failure that names the
    /// registry when it was not reached.
    pub(crate) async fn call<T>(
        &mut self,
        call: impl AsyncFnOnce(
            &mut ToolRegistryClient<Channel>,
        ) -> Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, Failure> {
        call(&mut self.client)
            .await
            .map(tonic::Response::into_inner)
            .map_err(|status| self.failed(&status))
    }

    /// `call` on the `Tasks` client, as [`Self::call`].
    pub(crate) async fn tasks_call<T>(
        &mut self,
        call: impl AsyncFnOnce(&mut TasksClient<Channel>) -> Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, Failure> {
        let answer = self.tasks_raw(call).await;
        answer.map_err(|status| self.failed(&status))
    }

    /// `call` on the `Tasks` client, its status as it came: for a caller
    /// that decides for itself what a failure means (a wait that
    /// reconnects).
    pub(crate) async fn tasks_raw<T>(
        &mut self,
        call: impl AsyncFnOnce(&mut TasksClient<Channel>) -> Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, tonic::Status> {
        call(&mut self.tasks).await.map(tonic::Response::into_inner)
    }

    /// The deadline of each call.
    pub(crate) fn call_timeout(&self) -> Duration {
        self.timeout
    }

    /// A call's failure, naming the registry when it was not reached.
    pub(crate) fn failed(&self, status: &tonic::Status) -> Failure {
        Failure::at(&self.url, status)
    }

    /// `message` as a request carrying the credential and the deadline.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.request_within(message, self.timeout)
    }

    /// `message` as a request carrying the credential, with `deadline`
    /// instead of the call deadline.
    pub(crate) fn request_within<T>(&self, message: T, deadline: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(deadline);
        if let Some(token) = &self.token
            && let Ok(value) = format!("Bearer {token}").parse()
        {
            request.metadata_mut().insert("authorization", value);
        }
        request
    }
}

/// `--timeout`: a duration with its unit (`5s`, `250ms`, `1m 30s`), or,
/// as before units were taken, a number of seconds (`30`, `0.5`).
fn timeout(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let parsed = match text.parse::<f64>() {
        Ok(seconds) => Duration::try_from_secs_f64(seconds).map_err(|_| "out of range".to_owned()),
        Err(_) => humantime::parse_duration(text).map_err(|e| e.to_string()),
    };
    match parsed {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err(format!(
            "{text:?} is no time at all; give a deadline above 0, e.g. 5s"
        )),
        Err(why) => Err(format!(
            "{text:?} is not a duration ({why}); write a number and a unit (ms, s, m, h), e.g. 5s, 250ms or 1m, or a number of seconds"
        )),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_take_units_and_bare_seconds() {
        for (given, expected) in [
            ("5s", Duration::from_secs(5)),
            ("250ms", Duration::from_millis(250)),
            ("1m", Duration::from_secs(60)),
            ("1m 30s", Duration::from_secs(90)),
            ("30", Duration::from_secs(30)),
            ("0.5", Duration::from_millis(500)),
        ] {
            assert_eq!(timeout(given), Ok(expected), "{given}");
        }
        for refused in ["0", "0s", "-1", "soon", "5 parsecs", "", "inf", "NaN"] {
            assert!(timeout(refused).is_err(), "{refused}");
        }
        assert!(
            timeout("soon").is_err_and(|e| e.contains("e.g. 5s, 250ms or 1m")),
            "the error shows what to write"
        );
    }
}
