//! The leases kept alive while the catalog is read: a round of heartbeats
//! whenever a third of the TTL has passed since the last, sent between
//! timed calls (never during one), so that no read's time includes them.

use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream};
use tonic::transport::Channel;
use toolmesh_proto::pb::{self, registration_client::RegistrationClient};

/// Heartbeats every lease when due.
pub(super) struct Keeper {
    registration: RegistrationClient<Channel>,
    leases: Vec<String>,
    every: Duration,
    /// When the last round started.
    last: Instant,
}

impl Keeper {
    /// A keeper of `leases`, last heartbeated at `last`, due every `every`.
    pub(super) fn new(
        registration: RegistrationClient<Channel>,
        leases: Vec<String>,
        every: Duration,
        last: Instant,
    ) -> Self {
        Self {
            registration,
            leases,
            every,
            last,
        }
    }

    /// A round of heartbeats if one is due; fails if any heartbeat does.
    pub(super) async fn tend(&mut self) -> anyhow::Result<()> {
        if self.last.elapsed() < self.every {
            return Ok(());
        }
        let started = Instant::now();
        let (_, failed) = heartbeat_all(&self.registration, &self.leases).await;
        anyhow::ensure!(failed == 0, "{failed} heartbeats failed");
        self.last = started;
        Ok(())
    }
}

/// One heartbeat of each of `leases`, 16 in flight: the index of the lease
/// whose heartbeat was answered last, and how many failed.
pub(super) async fn heartbeat_all(
    registration: &RegistrationClient<Channel>,
    leases: &[String],
) -> (usize, usize) {
    let mut last = 0;
    let mut failed = 0;
    let mut answers = stream::iter(leases.iter().enumerate())
        .map(|(index, lease_id)| {
            let mut client = registration.clone();
            let request = pb::HeartbeatRequest {
                lease_id: lease_id.clone(),
            };
            async move { (index, client.heartbeat(request).await) }
        })
        .buffer_unordered(16);
    while let Some((index, answer)) = answers.next().await {
        last = index;
        failed += usize::from(answer.is_err());
    }
    (last, failed)
}
