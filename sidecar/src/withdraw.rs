//! `toolmesh-sidecar withdraw`: makes a running sidecar withdraw from the
//! registry, for Kubernetes' `preStop` hook. The image has no shell, so
//! the hook execs the sidecar binary itself; in the sidecar's container
//! the sidecar is pid 1.
//!
//! [`request`] first reaches the sidecar's `grpc.health.v1.Health` on the
//! address it listens on (nothing is signalled if that fails), then sends
//! it [`SIGNAL`] (SIGUSR1) and waits on a health `Watch` until it reports
//! `NOT_SERVING`, which it does once its `Withdraw` was answered
//! ([`crate::health`]). The sidecar keeps serving calls until SIGTERM.
//! A signal needs no port, file or shell, and only a process allowed to
//! signal the sidecar (same user, same PID namespace) can send it.

use std::error::Error as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::time::Instant;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};
use toolmesh_proto::listen::{ListenAddr, ListenError};
use toolmesh_proto::tls::ClientTls;

/// The signal that makes a sidecar withdraw.
pub const SIGNAL: Signal = Signal::SIGUSR1;

/// How long [`request`] waits by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a withdraw request failed.
#[derive(Debug, thiserror::Error)]
pub enum WithdrawError {
    /// The listen address is not usable.
    #[error(transparent)]
    Listen(#[from] ListenError),
    /// The listen address has port 0: the sidecar picked its own port.
    #[error(
        "{0} has port 0, so the sidecar chose its port: give the one it bound (its `bound addr=` log line)"
    )]
    PortZero(String),
    /// Nothing answered on the address.
    #[error(
        "cannot reach the sidecar's health service on {addr}: {reason}; is the sidecar running and listening there?"
    )]
    Unreachable {
        /// Where.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// Something answered, but not a sidecar's health service.
    #[error(
        "{addr} answered grpc.health.v1.Health/Watch with {code}{}; is a toolmesh sidecar listening there?",
        if message.is_empty() { String::new() } else { format!(" ({message})") }
    )]
    NoHealth {
        /// Where.
        addr: SocketAddr,
        /// The status code's name.
        code: &'static str,
        /// The status message, if any.
        message: String,
    },
    /// The pid is not a process's (0 and below name process groups).
    #[error("{0} is not a process id; give the sidecar's pid")]
    InvalidPid(i32),
    /// There is no process with that pid.
    #[error("no process with pid {0} to send SIGUSR1 to; give the sidecar's pid")]
    NoSuchProcess(i32),
    /// The signal could not be sent (another user's process).
    #[error("cannot send SIGUSR1 to pid {pid}: {reason}")]
    Signal {
        /// The pid.
        pid: i32,
        /// Why.
        reason: Errno,
    },
    /// The sidecar did not withdraw in time.
    #[error(
        "sent SIGUSR1 to pid {pid}, but the sidecar on {addr} still reports SERVING after {}; is pid {pid} that sidecar?",
        humantime::format_duration(*.timeout)
    )]
    StillServing {
        /// The pid signalled.
        pid: i32,
        /// Where its health was watched.
        addr: SocketAddr,
        /// How long it was given.
        timeout: Duration,
    },
    /// The health stream ended before `NOT_SERVING`.
    #[error("the sidecar on {addr} went away before it reported NOT_SERVING: {reason}")]
    Lost {
        /// Where.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
}

/// What the sidecar reported before the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    /// It was SERVING, and withdrew.
    Now,
    /// It already reported NOT_SERVING (not announced yet, or withdrawn
    /// before); it was asked to withdraw all the same, and no longer
    /// announces once it handled the signal.
    NotServingBefore,
}

/// The address to reach a sidecar listening on `listen`: an unspecified
/// IP (`0.0.0.0`, `::`) becomes loopback.
pub fn target(listen: &str) -> Result<SocketAddr, WithdrawError> {
    let mut addr = listen.parse::<ListenAddr>()?.resolve()?.addr;
    if addr.port() == 0 {
        return Err(WithdrawError::PortZero(listen.to_owned()));
    }
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(addr)
}

/// Asks the sidecar `pid`, serving health on `addr`, to withdraw, and
/// waits until it reports `NOT_SERVING`, for at most `timeout` in all.
/// With `tls`, its health is reached over TLS (a sidecar serving with
/// `--tls-cert-file`: see [`ClientTls::pinned`]).
pub async fn request(
    pid: i32,
    addr: SocketAddr,
    timeout: Duration,
    tls: Option<ClientTls>,
) -> Result<Withdrawn, WithdrawError> {
    if pid <= 0 {
        return Err(WithdrawError::InvalidPid(pid));
    }
    let deadline = Instant::now() + timeout;
    let (mut statuses, before) = watch(addr, deadline, timeout, tls).await?;
    send(pid)?;
    if before != ServingStatus::Serving {
        return Ok(Withdrawn::NotServingBefore);
    }
    let lost = |reason: &str| WithdrawError::Lost {
        addr,
        reason: reason.to_owned(),
    };
    loop {
        match tokio::time::timeout_at(deadline, statuses.message()).await {
            Err(_) => return Err(WithdrawError::StillServing { pid, addr, timeout }),
            Ok(Ok(Some(response))) if response.status() == ServingStatus::Serving => {}
            Ok(Ok(Some(_))) => return Ok(Withdrawn::Now),
            Ok(Ok(None)) => return Err(lost("its health stream ended")),
            Ok(Err(status)) => return Err(lost(status.message())),
        }
    }
}

/// A health `Watch` of the whole server on `addr`, and the status it
/// reported first; `timeout` is what `deadline` was computed from.
async fn watch(
    addr: SocketAddr,
    deadline: Instant,
    timeout: Duration,
    tls: Option<ClientTls>,
) -> Result<(Streaming<HealthCheckResponse>, ServingStatus), WithdrawError> {
    let unreachable = |reason: String| WithdrawError::Unreachable { addr, reason };
    let within = |what: &str| format!("{what} within {}", humantime::format_duration(timeout));
    let not_health = |status: tonic::Status| match status.code() {
        tonic::Code::Unavailable => unreachable(status.message().to_owned()),
        code => WithdrawError::NoHealth {
            addr,
            code: toolmesh_proto::code::name(code),
            message: status.message().to_owned(),
        },
    };

    let channel = tokio::time::timeout_at(deadline, connect(addr, timeout, tls))
        .await
        .map_err(|_| unreachable(within("no connection")))?
        .map_err(|e| {
            unreachable(
                e.source()
                    .map_or_else(|| e.to_string(), toolmesh_telemetry::causes),
            )
        })?;
    let mut client = HealthClient::new(channel);
    let watch = client.watch(HealthCheckRequest {
        service: String::new(),
    });
    let mut statuses = match tokio::time::timeout_at(deadline, watch).await {
        Err(_) => return Err(unreachable(within("no answer"))),
        Ok(Err(status)) => return Err(not_health(status)),
        Ok(Ok(response)) => response.into_inner(),
    };
    match tokio::time::timeout_at(deadline, statuses.message()).await {
        Err(_) => Err(unreachable(within("no health status"))),
        Ok(Err(status)) => Err(not_health(status)),
        Ok(Ok(None)) => Err(WithdrawError::Lost {
            addr,
            reason: "its health stream ended".to_owned(),
        }),
        Ok(Ok(Some(response))) => Ok((statuses, response.status())),
    }
}

async fn connect(
    addr: SocketAddr,
    timeout: Duration,
    tls: Option<ClientTls>,
) -> Result<Channel, tonic::transport::Error> {
    let Some(tls) = tls else {
        return Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(timeout)
            .connect()
            .await;
    };
    Endpoint::from_shared(format!("https://{addr}"))?
        .connect_timeout(timeout)
        .connect_with_connector(toolmesh_proto::tls::connector(tls))
        .await
}

/// Sends [`SIGNAL`] to `pid`.
fn send(pid: i32) -> Result<(), WithdrawError> {
    match kill(Pid::from_raw(pid), SIGNAL) {
        Ok(()) => Ok(()),
        Err(Errno::ESRCH) => Err(WithdrawError::NoSuchProcess(pid)),
        Err(reason) => Err(WithdrawError::Signal { pid, reason }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|_| unreachable!("{s}"))
    }

    #[test]
    fn the_target_is_where_the_sidecar_listens_with_any_address_made_loopback() {
        for (listen, expected) in [
            ("127.0.0.1:50061", "127.0.0.1:50061"),
            ("0.0.0.0:50061", "127.0.0.1:50061"),
            ("[::]:50061", "[::1]:50061"),
            ("10.1.2.3:7", "10.1.2.3:7"),
        ] {
            assert_eq!(target(listen).ok(), Some(addr(expected)), "{listen}");
        }
        assert!(matches!(
            target("127.0.0.1:0"),
            Err(WithdrawError::PortZero(_))
        ));
        assert!(matches!(target("nope"), Err(WithdrawError::Listen(_))));
    }

    #[tokio::test]
    async fn pids_that_name_process_groups_are_refused_before_anything_else() {
        // kill(0) and kill(-n) signal whole process groups: this one's.
        for pid in [0, -1, -42] {
            let result = request(pid, addr("127.0.0.1:1"), Duration::from_millis(10), None).await;
            assert!(
                matches!(result, Err(WithdrawError::InvalidPid(p)) if p == pid),
                "{result:?}"
            );
        }
    }
}
