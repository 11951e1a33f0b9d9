//! One HTTP/2 connection to a sidecar: dialled (TCP, then TLS for
//! `https://`), driven by a task of its own that also pings it, and shared
//! by every call to that sidecar.
//!
//! Calls open their streams on it straight from their own task (`h2`'s
//! `SendRequest`): no buffer worker and no dispatch channel between a call
//! and the connection, only the wake-up of the task that writes the socket.
//!
//! Each serving thread ([`crate::serving::workers`]) has a lane of its own:
//! its own connection to each sidecar, driven on that thread, so that a
//! call never leaves the thread its agent's connection is served on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::net::TcpStream;
use tonic::codegen::http::Uri;
use toolmesh_proto::tls::{self, ClientTls};

use crate::access::endpoint_policy::EndpointPolicy;
use crate::lanes;

/// How often an open connection is pinged, and how long the answer may
/// take before the connection is given up (a sidecar whose host vanished
/// sends no RST: only a PING finds it).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest header block a sidecar may answer with (the status details of
/// an error included): bounds what a hostile sidecar can make the registry
/// buffer.
const MAX_HEADER_LIST_BYTES: u32 = 256 * 1024;

/// Flow-control windows: a 16 KiB answer never waits for a WINDOW_UPDATE.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 8 * 1024 * 1024;

/// An open connection, as calls use it.
#[derive(Clone)]
pub(super) struct Live {
    /// Opens streams.
    pub(super) send: SendRequest<Bytes>,
    /// `Execute`'s URI on this sidecar (scheme and authority from the endpoint).
    pub(super) uri: Uri,
    generation: u64,
}

/// The connections to one endpoint, one per lane, and the locks that make
/// concurrent calls on a lane with none wait for one dial instead of each
/// dialling.
pub(super) struct Slot {
    lanes: Box<[Lane]>,
}

#[derive(Default)]
struct Lane {
    live: Mutex<Option<Live>>,
    dialling: tokio::sync::Mutex<()>,
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            lanes: (0..lanes::in_use()).map(|_| Lane::default()).collect(),
        }
    }
}

impl Slot {
    /// This thread's lane (the first when the slot is older than the
    /// thread's lane).
    fn lane(&self) -> &Lane {
        lanes::pick(&self.lanes)
    }

    fn open_in(lane: &Lane) -> Option<Live> {
        lane.live.lock().ok().and_then(|live| live.clone())
    }

    /// Whether any lane has a connection open.
    pub(super) fn is_open(&self) -> bool {
        self.lanes
            .iter()
            .any(|lane| lane.live.lock().is_ok_and(|live| live.is_some()))
    }

    /// Forgets `broken` (found closed by a call), unless a newer connection
    /// already replaced it.
    pub(super) fn discard(&self, broken: &Live) {
        self.discard_generation(broken.generation);
    }

    fn discard_generation(&self, generation: u64) {
        for lane in &self.lanes {
            if let Ok(mut live) = lane.live.lock()
                && live.as_ref().is_some_and(|l| l.generation == generation)
            {
                *live = None;
            }
        }
    }

    /// This thread's open connection, or a new one dialled with `dialer`
    /// (one dial at a time per lane); `true` with a connection made for
    /// this call.
    pub(super) async fn get_or_dial(
        self: &Arc<Self>,
        endpoint: &str,
        dialer: &Dialer,
    ) -> Result<(Live, bool), String> {
        if let Some(live) = Self::open_in(self.lane()) {
            return Ok((live, false));
        }
        // Boxed: a dial's state is most of a call's, and nearly every call
        // finds its connection open.
        Box::pin(self.dial(endpoint, dialer)).await
    }

    /// A new connection for this thread's lane, unless another call made
    /// one while this one waited to dial.
    async fn dial(
        self: &Arc<Self>,
        endpoint: &str,
        dialer: &Dialer,
    ) -> Result<(Live, bool), String> {
        let lane = self.lane();
        let _dialling = lane.dialling.lock().await;
        if let Some(live) = Self::open_in(lane) {
            return Ok((live, false));
        }
        let live = dialer.connect(endpoint, Arc::downgrade(self)).await?;
        if let Ok(mut slot) = lane.live.lock() {
            *slot = Some(live.clone());
        }
        Ok((live, true))
    }
}

/// Makes connections to sidecars.
pub(super) struct Dialer {
    pub(super) connect_timeout: Duration,
    pub(super) tls: Option<ClientTls>,
    pub(super) endpoints: Arc<EndpointPolicy>,
}

static GENERATION: AtomicU64 = AtomicU64::new(0);

impl Dialer {
    /// Dials `endpoint` and opens HTTP/2 on it within the connect timeout;
    /// a task drives the connection until it closes, then empties `slot`.
    async fn connect(&self, endpoint: &str, slot: Weak<Slot>) -> Result<Live, String> {
        let uri: Uri = endpoint.parse().map_err(|e| format!("{e}"))?;
        let tls = match &self.tls {
            Some(tls) => tls.clone(),
            None => ClientTls::load(tls::ClientFiles::default()).map_err(|e| e.to_string())?,
        };
        let handshake = async {
            let io = dial(&uri, &self.endpoints, &tls)
                .await
                .map_err(|e| toolmesh_telemetry::causes(&e))?;
            h2::client::Builder::new()
                .enable_push(false)
                .initial_window_size(STREAM_WINDOW)
                .initial_connection_window_size(CONNECTION_WINDOW)
                .max_header_list_size(MAX_HEADER_LIST_BYTES)
                .handshake::<_, Bytes>(io)
                .await
                .map_err(|e| toolmesh_telemetry::causes(&e))
        };
        let (send, connection) = tokio::time::timeout(self.connect_timeout, handshake)
            .await
            .map_err(|_| format!("no connection within {:?}", self.connect_timeout))??;
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let live = Live {
            send,
            uri: execute_uri(&uri)?,
            generation,
        };
        // The task holds no `SendRequest`: the connection closes once the
        // slot and every call are done with it.
        let endpoint = endpoint.to_owned();
        tokio::spawn(async move {
            drive(connection, &endpoint).await;
            if let Some(slot) = slot.upgrade() {
                slot.discard_generation(generation);
            }
        });
        Ok(live)
    }
}

/// `ToolRuntime.Execute`'s URI on the sidecar at `endpoint`.
fn execute_uri(endpoint: &Uri) -> Result<Uri, String> {
    let mut parts = endpoint.clone().into_parts();
    parts.path_and_query = Some(
        super::unary::EXECUTE_PATH
            .parse()
            .map_err(|e| format!("{e}"))?,
    );
    Uri::from_parts(parts).map_err(|e| e.to_string())
}

/// Runs the connection until it closes, pinging it every
/// [`KEEPALIVE_INTERVAL`] and closing it when a ping goes unanswered.
async fn drive<T>(mut connection: h2::client::Connection<T, Bytes>, endpoint: &str)
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let Some(mut ping) = connection.ping_pong() else {
        if let Err(error) = connection.await {
            tracing::debug!(endpoint, %error, "sidecar connection closed");
        }
        return;
    };
    let keepalive = async {
        loop {
            tokio::time::sleep(KEEPALIVE_INTERVAL).await;
            match tokio::time::timeout(KEEPALIVE_TIMEOUT, ping.ping(h2::Ping::opaque())).await {
                Ok(Ok(_pong)) => {}
                Ok(Err(_)) => return,
                Err(_elapsed) => {
                    tracing::warn!(endpoint, timeout = ?KEEPALIVE_TIMEOUT, "sidecar connection answered no PING; closing it");
                    return;
                }
            }
        }
    };
    tokio::select! {
        closed = &mut connection => {
            if let Err(error) = closed {
                tracing::debug!(endpoint, %error, "sidecar connection closed");
            }
        }
        () = keepalive => {}
    }
}

/// Opens a TCP connection (`TCP_NODELAY`) to the first address `uri`'s
/// host resolves to that `endpoints` lets the registry dial; for an
/// `https://` endpoint, then a TLS handshake with `tls`.
async fn dial(
    uri: &Uri,
    endpoints: &EndpointPolicy,
    tls: &ClientTls,
) -> std::io::Result<Box<dyn tls::client::Stream>> {
    use std::io::{Error, ErrorKind};
    let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "the endpoint has no host or port",
        ));
    };
    let https = uri.scheme_str() == Some("https");
    let name = host;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let mut refused = 0;
    let mut last = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        if !endpoints.may_dial(addr) {
            refused += 1;
            continue;
        }
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                if !https {
                    return Ok(Box::new(stream));
                }
                return Ok(Box::new(tls.handshake(name, stream).await?));
            }
            Err(error) => last = Some(error),
        }
    }
    Err(last.unwrap_or_else(|| {
        Error::new(
            ErrorKind::PermissionDenied,
            if refused > 0 {
                format!("{host} resolves only to addresses the registry does not dial (its own, or unspecified)")
            } else {
                format!("{host} resolves to no address")
            },
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_serving_thread_dials_on_a_lane_of_its_own() {
        let on_thread = std::thread::spawn(|| {
            lanes::enter(3);
            let slot = Slot::default();
            std::ptr::eq(slot.lane(), &slot.lanes[3])
        })
        .join();
        assert!(matches!(on_thread, Ok(true)));
        let slot = Slot::default();
        assert!(slot.lanes.len() >= 4);
        assert!(
            std::ptr::eq(slot.lane(), &slot.lanes[0]),
            "other threads share lane 0"
        );
    }
}
