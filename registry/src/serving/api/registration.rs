//! `toolmesh.v1.Registration`, the sidecars' service: announce, heartbeat
//! and withdraw, each authorized by the registrant's token and audited.

use std::sync::Arc;

use tonic::{Request, Response, Status};
use toolmesh_proto::{pb, tls};
use toolmesh_telemetry::shown::{QUOTED_MAX, clip};

use crate::{
    access::Access,
    access::audit::{AuditLog, Outcome, RegistrationAction, RegistrationRecord},
    access::registrants::{Owner, Registrant},
    catalog::{Catalog, lease_tag},
    error::RegistryError,
};

/// `Registration.ReportTask`'s fully qualified name, as its spans name it.
const REPORT_TASK: &str = "toolmesh.v1.Registration/ReportTask";

/// `toolmesh.v1.Registration`, for sidecars: open, or only for the
/// registrants of `--registrants-file`, each for its own tools.
pub(crate) struct RegistrationApi {
    catalog: Arc<Catalog>,
    /// Where sidecars' task reports go (`None`: reports are NOT_FOUND).
    tasks: Option<Arc<crate::tasks::Tasks>>,
    access: Arc<Access>,
    audit: AuditLog,
    metrics: Arc<crate::metrics::Metrics>,
    /// The catalog's bound on tool names (`--max-tools`), which
    /// registrants without a `max_tools` of their own share.
    max_tools: usize,
}

impl RegistrationApi {
    /// The service over a catalog, for the registrants `access` knows
    /// (none: open registration).
    pub(crate) fn new(catalog: Arc<Catalog>, access: Arc<Access>) -> Self {
        Self {
            catalog,
            tasks: None,
            access,
            audit: AuditLog::disabled(),
            metrics: Arc::default(),
            max_tools: crate::catalog::store::memory::Limits::default().max_tools,
        }
    }

    /// Shares `max_tools` tool names (`--max-tools`) between registrants
    /// that give no `max_tools` of their own.
    #[must_use]
    pub(crate) fn sharing(mut self, max_tools: usize) -> Self {
        self.max_tools = max_tools;
        self
    }

    /// Writes a record of every registration change to `audit`.
    #[must_use]
    pub(crate) fn audit(mut self, audit: AuditLog) -> Self {
        self.audit = audit;
        self
    }

    /// Takes sidecars' reports on the tasks they run for `tasks`.
    #[must_use]
    pub(crate) fn reporting_to(mut self, tasks: Arc<crate::tasks::Tasks>) -> Self {
        self.tasks = Some(tasks);
        self
    }

    /// Counts every announce, by result, in `metrics`.
    #[must_use]
    pub(crate) fn metered(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Who sent `request`: `None` when registration is open.
    fn registrant<T>(
        &self,
        request: &Request<T>,
    ) -> Result<Option<Arc<Registrant>>, RegistryError> {
        let Some(registrants) = self.access.registrants() else {
            return Ok(None);
        };
        let identities = peer_identities(request);
        registrants
            .authenticate(request.metadata(), &identities)
            .map(Some)
    }

    fn record(&self, record: RegistrationRecord) {
        if self.audit.is_enabled() {
            self.audit.record(record);
        }
    }
}

/// The verified identities (SANs) of the client's certificate, if it sent
/// one over TLS with `--tls-client-ca-file`.
fn peer_identities<T>(request: &Request<T>) -> Vec<String> {
    tls::peer(request).identities
}

fn owner_name(registrant: Option<&Arc<Registrant>>) -> &str {
    registrant.map_or("", |r| r.owner().name.as_str())
}

/// The record of a withdraw or heartbeat by `caller`: `action`, or
/// `refused` with `error`.
fn lease_record(
    action: RegistrationAction,
    caller: &str,
    peer: Option<std::net::SocketAddr>,
    error: Option<&RegistryError>,
) -> RegistrationRecord {
    RegistrationRecord {
        caller: caller.to_owned(),
        action: if error.is_none() {
            action
        } else {
            RegistrationAction::Refused
        },
        instance: String::new(),
        endpoint: String::new(),
        tools: Vec::new(),
        outcome: error.map_or(Outcome::Ok, |e| Outcome::Failed(e.code())),
        reason: error.map(ToString::to_string),
        peer,
    }
}

#[tonic::async_trait]
impl pb::registration_server::Registration for RegistrationApi {
    #[tracing::instrument(skip_all, fields(instance = %clip(&request.get_ref().instance_id, QUOTED_MAX)))]
    async fn announce(
        &self,
        request: Request<pb::AnnounceRequest>,
    ) -> Result<Response<pb::AnnounceResponse>, Status> {
        let peer = tls::peer(&request).remote_addr;
        let registrant = self.registrant(&request);
        let request = request.into_inner();
        let tools: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
        let mut record = RegistrationRecord {
            caller: registrant
                .as_ref()
                .ok()
                .and_then(|r| r.as_ref().map(|r| r.owner().name.clone()))
                .unwrap_or_default(),
            action: RegistrationAction::Announce,
            instance: request.instance_id.clone(),
            endpoint: request.endpoint.clone(),
            tools: tools.clone(),
            outcome: Outcome::Ok,
            reason: None,
            peer,
        };
        let endpoint = request.endpoint.clone();
        let result = match registrant {
            Ok(registrant) => self.announce_as(request, registrant.as_ref(), &tools).await,
            Err(error) => Err(error),
        };
        match result {
            Ok(lease) => {
                self.metrics.announced("accepted");
                self.record(record);
                tracing::info!(?tools, %endpoint, lease = %lease_tag(&lease.id), "announced");
                if !lease.held.is_empty() {
                    tracing::warn!(held = ?lease.held, %endpoint, "announced definitions are not the pinned ones: held in quarantine until approved (toolmesh pins)");
                }
                Ok(Response::new(pb::AnnounceResponse {
                    lease_id: lease.id,
                    ttl: toolmesh_proto::rules::duration_field(lease.ttl),
                    held: lease.held,
                }))
            }
            Err(error) => {
                self.metrics
                    .announced(toolmesh_proto::code::outcome(error.code()));
                tracing::warn!(%error, "announce refused");
                record.action = RegistrationAction::Refused;
                record.outcome = Outcome::Failed(error.code());
                record.reason = Some(error.to_string());
                self.record(record);
                Err(error.into())
            }
        }
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let peer = tls::peer(&request).remote_addr;
        let (caller, result) = match self.registrant(&request) {
            Ok(registrant) => {
                let caller = owner_name(registrant.as_ref()).to_owned();
                let result = self
                    .catalog
                    .heartbeat(&request.into_inner().lease_id, &caller)
                    .await;
                (caller, result)
            }
            Err(error) => (String::new(), Err(error)),
        };
        match result {
            Ok(ttl) => Ok(Response::new(pb::HeartbeatResponse {
                ttl: toolmesh_proto::rules::duration_field(ttl),
            })),
            Err(error) => {
                // A heartbeat changes nothing; only a refused one is recorded.
                if matches!(
                    error,
                    RegistryError::Unauthenticated { .. } | RegistryError::PermissionDenied { .. }
                ) {
                    self.record(lease_record(
                        RegistrationAction::Refused,
                        &caller,
                        peer,
                        Some(&error),
                    ));
                }
                Err(error.into())
            }
        }
    }

    async fn withdraw(
        &self,
        request: Request<pb::WithdrawRequest>,
    ) -> Result<Response<pb::WithdrawResponse>, Status> {
        let peer = tls::peer(&request).remote_addr;
        let result = match self.registrant(&request) {
            Ok(registrant) => {
                let caller = owner_name(registrant.as_ref()).to_owned();
                let result = self
                    .catalog
                    .withdraw(&request.into_inner().lease_id, &caller)
                    .await;
                (caller, result)
            }
            Err(error) => (String::new(), Err(error)),
        };
        let (caller, result) = result;
        self.record(lease_record(
            RegistrationAction::Withdraw,
            &caller,
            peer,
            result.as_ref().err(),
        ));
        result?;
        Ok(Response::new(pb::WithdrawResponse {}))
    }

    async fn report_task(
        &self,
        request: Request<pb::ReportTaskRequest>,
    ) -> Result<Response<pb::ReportTaskResponse>, Status> {
        let trace = toolmesh_telemetry::TraceContext::from_metadata(request.metadata()).decide();
        let span = toolmesh_telemetry::call_span!(
            trace.is_traced(),
            "toolmesh.v1.Registration/ReportTask",
            otel.kind = "server",
            task = %clip(&request.get_ref().task_id, QUOTED_MAX),
        );
        toolmesh_telemetry::spans::serve(span, &trace, REPORT_TASK, async {
            // Registrants authenticate as for a heartbeat; the task's own
            // token says the report is its instance's.
            self.registrant(&request)?;
            let request = request.into_inner();
            let Some(tasks) = &self.tasks else {
                return Err(RegistryError::TaskNotFound {
                    id: request.task_id,
                }
                .into());
            };
            Ok(Response::new(tasks.report(request).await?))
        })
        .await
    }
}

impl RegistrationApi {
    async fn announce_as(
        &self,
        request: pb::AnnounceRequest,
        registrant: Option<&Arc<Registrant>>,
        tools: &[String],
    ) -> Result<crate::catalog::Lease, RegistryError> {
        let owner = match registrant {
            Some(registrant) => {
                for tool in tools {
                    registrant.may_announce(tool)?;
                }
                match self.access.registrants() {
                    Some(all) => all.owner(registrant, self.max_tools),
                    None => registrant.owner().clone(),
                }
            }
            None => Owner::default(),
        };
        self.catalog.announce_as(request, owner).await
    }
}
