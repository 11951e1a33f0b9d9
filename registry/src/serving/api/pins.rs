//! `toolmesh.v1.Pins`, for operators: each request authenticated as
//! agents' are; the catalog decides who may review and what a pin takes.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use toolmesh_proto::pb;

use crate::{access::Access, catalog::Catalog};

/// `toolmesh.v1.Pins`, over the catalog's pins.
pub(crate) struct PinsApi {
    access: Arc<Access>,
    catalog: Arc<Catalog>,
}

impl PinsApi {
    /// The service over `catalog`, for the callers `access` knows.
    pub(crate) fn new(access: Arc<Access>, catalog: Arc<Catalog>) -> Self {
        Self { access, catalog }
    }
}

#[tonic::async_trait]
impl pb::pins_server::Pins for PinsApi {
    async fn list_pins(
        &self,
        request: Request<pb::ListPinsRequest>,
    ) -> Result<Response<pb::ListPinsResponse>, Status> {
        let caller = self.access.caller(request.metadata())?;
        Ok(Response::new(self.catalog.review_pins(&caller)?))
    }

    async fn approve_pin(
        &self,
        request: Request<pb::ApprovePinRequest>,
    ) -> Result<Response<pb::PinnedDefinition>, Status> {
        let caller = self.access.caller(request.metadata())?;
        let request = request.into_inner();
        let pinned = self
            .catalog
            .approve_pin(&caller, &request.tool, &request.digest)
            .await?;
        Ok(Response::new(pinned))
    }

    async fn revoke_pin(
        &self,
        request: Request<pb::RevokePinRequest>,
    ) -> Result<Response<pb::RevokePinResponse>, Status> {
        let caller = self.access.caller(request.metadata())?;
        let revoked = self
            .catalog
            .revoke_pin(&caller, &request.into_inner().tool)
            .await?;
        Ok(Response::new(pb::RevokePinResponse { revoked }))
    }
}
