//! `toolmesh-registry health`: asks a registry's `grpc.health.v1.Health`
//! whether it serves, for a `helm test` hook or an exec probe in an image
//! that has no shell and no `grpcurl`. It is a client only: it never binds.
//! An `https://` address is checked over TLS.

use std::time::Duration;

use tokio::time::Instant;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use toolmesh_proto::endpoint::{self, EndpointError};
use toolmesh_proto::tls::ClientTls;

/// Why a health check did not find every service SERVING.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The address is not a server address.
    #[error(transparent)]
    Address(#[from] EndpointError),
    /// No connection within the time given, or refused.
    #[error("cannot reach {address}: {reason}")]
    Unreachable {
        /// Where.
        address: String,
        /// Why.
        reason: String,
    },
    /// The server does not know one of the services asked about.
    #[error("{address} has no health status for the service {service:?}")]
    UnknownService {
        /// Where.
        address: String,
        /// The service name asked about.
        service: String,
    },
    /// The server answered with an error other than "unknown service".
    #[error(
        "{address} answered grpc.health.v1.Health/Check for {service:?} with {code}: {message}"
    )]
    Failed {
        /// Where.
        address: String,
        /// The service name asked about.
        service: String,
        /// The gRPC code's name.
        code: &'static str,
        /// The status message.
        message: String,
    },
    /// A service is not SERVING.
    #[error("{address}: the service {service:?} is {status}")]
    NotServing {
        /// Where.
        address: String,
        /// The service name asked about.
        service: String,
        /// What it reported (`NOT_SERVING`, `UNKNOWN`, ...).
        status: &'static str,
    },
}

/// Checks each of `services` (`""` is the whole server) on the registry at
/// `address` (`host:port`, `http://host:port`, or `https://host:port`,
/// dialled with `tls`), all within `timeout`. Returns `Ok` only when every
/// one answered SERVING.
pub async fn check(
    address: &str,
    services: &[String],
    timeout: Duration,
    tls: ClientTls,
) -> Result<(), ProbeError> {
    let url = endpoint::url(address)?;
    let deadline = Instant::now() + timeout;
    let unreachable = |reason: String| ProbeError::Unreachable {
        address: address.to_owned(),
        reason,
    };
    let late = || {
        unreachable(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        ))
    };
    let endpoint = Endpoint::from_shared(url).map_err(|e| unreachable(e.to_string()))?;
    let endpoint = endpoint.connect_timeout(timeout);
    let connect = endpoint.connect_with_connector(toolmesh_proto::tls::connector(tls));
    let channel = tokio::time::timeout_at(deadline, connect)
        .await
        .map_err(|_| late())?
        .map_err(|e| unreachable(toolmesh_telemetry::causes(&e)))?;
    let mut client = HealthClient::new(channel);
    for service in services {
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: service.clone(),
        });
        request.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let answer = tokio::time::timeout_at(deadline, client.check(request))
            .await
            .map_err(|_| late())?;
        let status = match answer {
            Ok(response) => response.into_inner().status(),
            Err(status) if status.code() == tonic::Code::NotFound => {
                return Err(ProbeError::UnknownService {
                    address: address.to_owned(),
                    service: service.clone(),
                });
            }
            Err(status) if status.code() == tonic::Code::DeadlineExceeded => return Err(late()),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                return Err(unreachable(status.message().to_owned()));
            }
            Err(status) => {
                return Err(ProbeError::Failed {
                    address: address.to_owned(),
                    service: service.clone(),
                    code: toolmesh_proto::code::name(status.code()),
                    message: status.message().to_owned(),
                });
            }
        };
        if status != ServingStatus::Serving {
            return Err(ProbeError::NotServing {
                address: address.to_owned(),
                service: service.clone(),
                status: status.as_str_name(),
            });
        }
    }
    Ok(())
}
