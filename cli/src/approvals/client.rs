//! The `toolmesh.v1.Approvals` client beside a connected [`Registry`]: its
//! own channel, dialled to the same address with the same TLS, and every
//! request made and every failure shown by that `Registry` (the same
//! credential, deadline and exit codes as the other commands').

use anyhow::Context as _;
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb::approvals_client::ApprovalsClient;
use toolmesh_proto::tls::{ClientFiles, ClientTls};

use crate::connect::{Registry, Target};
use crate::failure::{Exit, Failure};

/// The registry's `Approvals` service.
pub(crate) struct Approvals {
    client: ApprovalsClient<Channel>,
    registry: Registry,
}

impl Approvals {
    /// `Approvals` at `target`, which `registry` is connected to.
    pub(crate) fn new(registry: Registry, target: &Target) -> Result<Self, Failure> {
        let channel = channel(target, &registry)
            .map_err(|e| Failure::plain(Exit::Usage, format!("{e:#}")))?;
        Ok(Self {
            client: ApprovalsClient::new(channel).max_decoding_message_size(64 << 20),
            registry,
        })
    }

    /// `message` as a request with the credential and the call deadline.
    pub(crate) fn request<T>(&self, message: T) -> tonic::Request<T> {
        self.registry.request(message)
    }

    /// `call` on the client: its answer, or the failure the other commands
    /// would show for its status.
    pub(crate) async fn call<T>(
        &mut self,
        call: impl AsyncFnOnce(
            &mut ApprovalsClient<Channel>,
        ) -> Result<tonic::Response<T>, tonic::Status>,
    ) -> Result<T, Failure> {
        let answer = call(&mut self.client).await;
        answer
            .map(tonic::Response::into_inner)
            .map_err(|status| self.failed(&status))
    }

    /// A call's failure, naming the registry when it was not reached.
    pub(crate) fn failed(&self, status: &tonic::Status) -> Failure {
        self.registry.failed(status)
    }
}

/// A channel to `target` as [`Registry::connect`] opens one (connected
/// on first use).
pub(crate) fn channel(target: &Target, registry: &Registry) -> anyhow::Result<Channel> {
    let url = toolmesh_proto::endpoint::url(&target.registry)
        .with_context(|| format!("--registry {}", target.registry))?;
    let tls = ClientTls::load(ClientFiles {
        ca: target.ca_file.clone(),
        ..Default::default()
    })
    .context("--ca-file")?;
    Ok(Endpoint::from_shared(url)?
        .connect_timeout(registry.call_timeout())
        .connect_with_connector_lazy(toolmesh_proto::tls::connector(tls)))
}
