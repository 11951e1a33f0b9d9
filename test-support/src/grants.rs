//! Calling a sidecar's `ToolRuntime.Execute` directly, as only the
//! registry may: the library sidecars of [`crate::server`] sign their
//! grants with [`key`], and [`Runtime`] signs every call with it, so a
//! test can ask a sidecar for what the registry would have stopped first.

use tonic::transport::Channel;
use toolmesh_proto::grant::{self, CallKey};
use toolmesh_proto::pb::{self, tool_runtime_client::ToolRuntimeClient};

/// The execute key of the suites' library sidecars.
pub fn key() -> CallKey {
    CallKey::from_bytes(&[0x5a; grant::KEY_LEN]).expect("32 bytes")
}

/// A `ToolRuntime` client that signs each call for one instance with
/// [`key`].
pub struct Runtime {
    client: ToolRuntimeClient<Channel>,
    instance: String,
}

impl Runtime {
    /// A client of the sidecar at `url`, announced as `instance`.
    pub async fn connect(url: String, instance: &str) -> Self {
        Self {
            client: ToolRuntimeClient::connect(url)
                .await
                .expect("connect to the sidecar"),
            instance: instance.to_owned(),
        }
    }

    /// `Execute(request)`, with a fresh grant.
    pub async fn execute(
        &mut self,
        request: impl tonic::IntoRequest<pb::ExecuteRequest>,
    ) -> Result<tonic::Response<pb::ExecuteResponse>, tonic::Status> {
        let mut request = request.into_request();
        grant::sign(&key(), &self.instance, &mut request);
        self.client.execute(request).await
    }
}
