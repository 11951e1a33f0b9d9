//! Keeps this sidecar in the registry's catalog: announce, heartbeat every
//! TTL/3, announce again when a heartbeat answers NOT_FOUND or the tool set
//! changes (an MCP server listed other tools, exited, came back; the new
//! announce replaces the lease), leave while there is no tool to serve,
//! back off (with jitter) while the registry is unreachable, withdraw when
//! told to stop.
//! An announce refused for good ([`crate::refusal::is_final`]) ends it. The
//! first announce that succeeds turns the sidecar's health SERVING
//! ([`crate::health`] says why a lost lease does not turn it back).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};
use toolmesh_proto::pb;
use toolmesh_proto::pb::registration_client::RegistrationClient;
use toolmesh_proto::tls::{self, ClientTls};
use toolmesh_proto::token::Token;

use toolmesh_telemetry::shown::secret_tag;

use crate::health::Readiness;
use crate::metrics::Metrics;
use crate::refusal::{self, AnnounceRefused};
use crate::toolset::Tools;

/// First retry delay after a failed call.
const BACKOFF_START: Duration = Duration::from_millis(100);
/// Longest retry delay.
const BACKOFF_CAP: Duration = Duration::from_secs(5);
/// Longest any single registry RPC may take.
const RPC_TIMEOUT_CAP: Duration = Duration::from_secs(5);
/// Lease TTL assumed when the registry does not send one.
const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Shortest heartbeat interval, whatever the TTL.
const MIN_INTERVAL: Duration = Duration::from_millis(20);
/// Longest the withdraw on shutdown may take.
pub(crate) const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

/// Exponential backoff with "equal jitter": the n-th delay is uniform in
/// `[d/2, d)` where `d = min(start * 2^n, cap)` (`backon`'s jitter adds up
/// to one more delay, so its delays start and end at half). It never runs
/// out: past the cap every delay is about the cap.
#[derive(Debug)]
pub(crate) struct Backoff {
    start: Duration,
    cap: Duration,
    delays: backon::ExponentialBackoff,
}

impl Backoff {
    /// The announcer's: from [`BACKOFF_START`] to [`BACKOFF_CAP`].
    pub(crate) fn new() -> Self {
        Self::between(BACKOFF_START, BACKOFF_CAP)
    }

    /// Delays from `start` to `cap`.
    pub(crate) fn between(start: Duration, cap: Duration) -> Self {
        Self {
            start,
            cap,
            delays: Self::schedule(start, cap),
        }
    }

    fn schedule(start: Duration, cap: Duration) -> backon::ExponentialBackoff {
        use backon::BackoffBuilder as _;
        backon::ExponentialBuilder::new()
            .with_min_delay(start / 2)
            .with_max_delay(cap / 2)
            .with_jitter()
            .without_max_times()
            .build()
    }

    /// Starts over from the shortest delay.
    pub(crate) fn reset(&mut self) {
        self.delays = Self::schedule(self.start, self.cap);
    }

    /// The next delay.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.delays.next().unwrap_or(self.cap)
    }
}

#[derive(Debug, Clone)]
struct Lease {
    id: String,
    ttl: Duration,
}

/// Announces one instance's tools and keeps its lease alive.
#[derive(Debug)]
pub(crate) struct Announcer {
    registry: String,
    client: RegistrationClient<Channel>,
    token: Option<Token>,
    request: pb::AnnounceRequest,
    tools: watch::Receiver<Arc<Tools>>,
    lease: Option<Lease>,
    /// An announce on the wire, on a task of its own: a stop that comes
    /// meanwhile must not drop the lease it grants, or the registry would
    /// keep serving the tools from a lease no one holds until its TTL.
    in_flight: Option<JoinHandle<Result<pb::AnnounceResponse, tonic::Status>>>,
    backoff: Backoff,
    readiness: Readiness,
    metrics: Metrics,
    /// Whether an announce has succeeded (health reported SERVING).
    announced: bool,
}

fn ttl_of(ttl: Option<prost_types::Duration>) -> Duration {
    toolmesh_proto::rules::duration(ttl).unwrap_or(DEFAULT_TTL)
}

/// Runs `call` under a deadline, telling the server about it too.
pub(crate) async fn with_deadline<T, F>(timeout: Duration, call: F) -> Result<T, tonic::Status>
where
    F: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
{
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map(tonic::Response::into_inner),
        Err(_) => Err(tonic::Status::deadline_exceeded(
            "registry did not answer in time",
        )),
    }
}

/// The answer of a call run on a task of its own.
fn joined<T>(
    joined: Result<Result<T, tonic::Status>, tokio::task::JoinError>,
) -> Result<T, tonic::Status> {
    joined.unwrap_or_else(|error| Err(tonic::Status::internal(format!("the call's task: {error}"))))
}

/// What went wrong: the status message, and for a connection that
/// failed (a TLS handshake, say) why.
fn reason(status: &tonic::Status) -> String {
    match std::error::Error::source(status) {
        Some(source) => format!(
            "{}: {}",
            status.message(),
            toolmesh_telemetry::causes(source)
        ),
        None => status.message().to_owned(),
    }
}

/// `message` as a registry call: its deadline `timeout` sent as
/// `grpc-timeout`, the registrant's `token` attached.
pub(crate) fn request<T>(
    message: T,
    timeout: Duration,
    token: Option<&Token>,
) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    if let Some(token) = token {
        token.attach(request.metadata_mut());
    }
    request
}

/// The channel to the registry at `registry` (`https://` with `tls`):
/// it connects lazily, so an unreachable registry is retried, not an
/// error.
pub(crate) fn registry_channel(
    registry: &str,
    tls: ClientTls,
) -> Result<Channel, tonic::transport::Error> {
    Ok(Endpoint::from_shared(registry.to_owned())?
        .connect_timeout(RPC_TIMEOUT_CAP)
        .connect_with_connector_lazy(tls::connector(tls)))
}

impl Announcer {
    /// An announcer for `request`, with the tools `tools` holds at each
    /// moment, talking to the registry at `registry` over `channel`
    /// ([`registry_channel`]), reporting its first announce to
    /// `readiness`, presenting `token` (the registrant's) on every call,
    /// recording the registry's answers in `metrics`.
    pub(crate) fn new(
        registry: &str,
        channel: Channel,
        request: pb::AnnounceRequest,
        tools: watch::Receiver<Arc<Tools>>,
        token: Option<Token>,
        readiness: Readiness,
        metrics: Metrics,
    ) -> Self {
        Self {
            registry: registry.to_owned(),
            client: RegistrationClient::new(channel),
            token,
            request,
            tools,
            lease: None,
            in_flight: None,
            backoff: Backoff::new(),
            readiness,
            metrics,
            announced: false,
        }
    }

    /// Keeps the lease alive until `stop` completes, then withdraws it and
    /// returns what `stop` returned; or until the registry refuses the
    /// announce for good (no lease is held then).
    pub(crate) async fn run_until<T>(
        mut self,
        stop: impl Future<Output = T>,
    ) -> Result<T, AnnounceRefused> {
        let stopped = tokio::select! {
            result = self.keep_alive() => {
                let Err(refused) = result;
                return Err(refused);
            }
            stopped = stop => stopped,
        };
        self.withdraw().await;
        Ok(stopped)
    }

    /// Announces, then heartbeats, until an announce is refused for good;
    /// announces again when the tools change, and holds no lease while
    /// there are none.
    async fn keep_alive(&mut self) -> Result<Infallible, AnnounceRefused> {
        loop {
            let tools = self.tools.borrow_and_update().descriptors();
            if tools.is_empty() {
                if self.lease.is_some() {
                    tracing::info!(instance = %self.request.instance_id, "no tool to serve; leaving the registry until there is one");
                    self.release().await;
                }
                self.tool_change().await;
                continue;
            }
            if tools != self.request.tools {
                self.request.tools = tools;
                // The next announce replaces the lease with the new tools.
                self.lease = None;
            }
            let Some(lease) = self.lease.clone() else {
                self.announce().await?;
                continue;
            };
            let interval = (lease.ttl / 3).max(MIN_INTERVAL);
            tokio::select! {
                () = tokio::time::sleep(interval) => {
                    self.heartbeat(&lease, interval.min(RPC_TIMEOUT_CAP)).await;
                }
                () = self.tool_change() => {}
            }
        }
    }

    /// Completes when the tool set changes (never, once no one can change
    /// it).
    async fn tool_change(&mut self) {
        if self.tools.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// One announce attempt; on a failure that may heal, waits out the
    /// backoff delay; on a final refusal, returns it.
    async fn announce(&mut self) -> Result<(), AnnounceRefused> {
        let call = request(self.request.clone(), RPC_TIMEOUT_CAP, self.token.as_ref());
        let mut client = self.client.clone();
        let in_flight = self.in_flight.insert(tokio::spawn(async move {
            with_deadline(RPC_TIMEOUT_CAP, client.announce(call)).await
        }));
        let answer = joined(in_flight.await);
        self.in_flight = None;
        let instance = &self.request.instance_id;
        self.metrics
            .announce_answered(answer.as_ref().map(|_| ()).map_err(tonic::Status::code));
        match answer {
            Ok(response) => {
                let ttl = ttl_of(response.ttl);
                tracing::info!(instance, lease = %secret_tag(&response.lease_id), ?ttl, "announced to the registry");
                self.lease = Some(Lease {
                    id: response.lease_id,
                    ttl,
                });
                self.backoff.reset();
                if !self.announced {
                    self.announced = true;
                    self.readiness.serving().await;
                }
            }
            Err(status) if refusal::is_final(status.code()) => {
                tracing::error!(instance, registry = %self.registry, code = toolmesh_proto::code::name(status.code()), "announce refused; stopping");
                return Err(AnnounceRefused::new(&self.registry, &status));
            }
            Err(status) => {
                let delay = self.backoff.next_delay();
                tracing::warn!(instance, registry = %self.registry, code = toolmesh_proto::code::name(status.code()), reason = %reason(&status), ?delay, "announce failed, retrying");
                tokio::time::sleep(delay).await;
            }
        }
        Ok(())
    }

    /// One heartbeat; NOT_FOUND drops the lease so the next step announces
    /// at once; other failures keep it and wait out the backoff delay
    /// (at most one heartbeat interval).
    async fn heartbeat(&mut self, lease: &Lease, timeout: Duration) {
        let message = pb::HeartbeatRequest {
            lease_id: lease.id.clone(),
        };
        let answer = with_deadline(
            timeout,
            self.client
                .heartbeat(request(message, timeout, self.token.as_ref())),
        )
        .await;
        self.metrics
            .heartbeat_answered(answer.as_ref().map(|_| ()).map_err(tonic::Status::code));
        match answer {
            Ok(response) => {
                tracing::debug!(lease = %secret_tag(&lease.id), "heartbeat");
                if let Some(current) = &mut self.lease {
                    current.ttl = response.ttl.map_or(current.ttl, |t| ttl_of(Some(t)));
                }
                self.backoff.reset();
            }
            Err(status) if status.code() == tonic::Code::NotFound => {
                tracing::warn!(lease = %secret_tag(&lease.id), "the registry forgot the lease; announcing again");
                self.lease = None;
                self.backoff.reset();
            }
            Err(status) => {
                let delay = self.backoff.next_delay().min(timeout);
                tracing::warn!(lease = %secret_tag(&lease.id), code = toolmesh_proto::code::name(status.code()), reason = %reason(&status), "heartbeat failed");
                // The regular interval sleep follows; this only spaces out a
                // failing registry further.
                tokio::time::sleep(delay.saturating_sub(MIN_INTERVAL)).await;
            }
        }
    }

    /// Ends the lease, if any, within [`WITHDRAW_TIMEOUT`], saying so to
    /// health first; a lease an announce on the wire grants (its answer
    /// waited for, within [`RPC_TIMEOUT_CAP`]) included.
    async fn withdraw(&mut self) {
        self.readiness.withdrawing();
        if let Some(in_flight) = self.in_flight.take()
            && let Ok(response) = joined(in_flight.await)
        {
            tracing::info!(lease = %secret_tag(&response.lease_id), "the announce on the wire when told to stop was granted");
            self.lease = Some(Lease {
                id: response.lease_id,
                ttl: ttl_of(response.ttl),
            });
        }
        self.release().await;
    }

    /// Ends the lease, if any, within [`WITHDRAW_TIMEOUT`].
    async fn release(&mut self) {
        // Cleared once answered: a release cut short is done again at stop.
        let Some(lease) = self.lease.clone() else {
            tracing::info!(instance = %self.request.instance_id, "no lease to withdraw");
            return;
        };
        let message = pb::WithdrawRequest {
            lease_id: lease.id.clone(),
        };
        let answer = with_deadline(
            WITHDRAW_TIMEOUT,
            self.client
                .withdraw(request(message, WITHDRAW_TIMEOUT, self.token.as_ref())),
        )
        .await;
        self.lease = None;
        self.metrics.lease_released();
        match answer {
            Ok(_) => tracing::info!(lease = %secret_tag(&lease.id), "withdrawn from the registry"),
            Err(status) => {
                tracing::warn!(lease = %secret_tag(&lease.id), code = toolmesh_proto::code::name(status.code()), reason = status.message(), "withdraw failed; the lease will expire")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_with_jitter() {
        let mut backoff = Backoff::new();
        let mut ceiling = BACKOFF_START;
        for _ in 0..12 {
            let delay = backoff.next_delay();
            assert!(
                delay >= ceiling / 2 && delay <= ceiling,
                "{delay:?} vs {ceiling:?}"
            );
            ceiling = (ceiling * 2).min(BACKOFF_CAP);
        }
        assert_eq!(ceiling, BACKOFF_CAP);
        backoff.reset();
        assert!(backoff.next_delay() <= BACKOFF_START);
    }

    #[test]
    fn ttl_defaults() {
        assert_eq!(ttl_of(None), DEFAULT_TTL);
        assert_eq!(
            ttl_of(Some(prost_types::Duration {
                seconds: 0,
                nanos: 0
            })),
            DEFAULT_TTL
        );
        assert_eq!(
            ttl_of(Some(prost_types::Duration {
                seconds: 3,
                nanos: 0
            })),
            Duration::from_secs(3)
        );
    }
}
