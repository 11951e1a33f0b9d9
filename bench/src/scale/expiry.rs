//! Every lease let go at once: what the registry's lease sweep costs it to
//! drop the whole catalog.
//!
//! The embedded engine exposes no sweep duration (in Redis mode the sweep
//! script's is `toolmesh_redis_command_duration_seconds{op="sweep"}`), so
//! the cost is the registry's CPU time ([`cpu`](super::cpu)) from just
//! before the first lease's deadline until the catalog lists no tool and
//! the registry is quiet again (the search index forgets the tools after
//! the catalog has), less what it spends in the same time at rest
//! (measured just before, with the same polling). Given the admin port,
//! the Redis engine's own sweep timing over the same window is read too
//! ([`sweep_metric`](super::sweep_metric)).

use std::time::{Duration, Instant};

use tonic::{Code, transport::Channel};
use toolmesh_proto::pb::{self, registration_client::RegistrationClient};

use super::{
    cpu::{beyond_rest_ms, sample, settle, used_ns},
    keeper::heartbeat_all,
    reads::Registry,
    sweep_metric,
};

/// How often the catalog is asked whether the leases are gone.
const POLL: Duration = Duration::from_millis(10);
/// How long the registry's CPU time at rest is measured.
const AT_REST: Duration = Duration::from_secs(2);
/// How long after the last deadline the leases must be gone.
const GONE_WITHIN: Duration = Duration::from_secs(10);
/// How long after that the registry must be quiet again.
const QUIET_WITHIN: Duration = Duration::from_secs(120);

/// What letting every lease go cost.
#[derive(Debug, Default, serde::Serialize)]
pub(super) struct Expiry {
    /// Leases let expire.
    pub(super) leases: usize,
    /// The registry's CPU time beyond its rest rate, from just before the
    /// first deadline until it was quiet again.
    pub(super) cpu_ms: Option<f64>,
    /// Its CPU use at rest (with the polling), in percent of one core.
    pub(super) rest_cpu_pct: Option<f64>,
    /// From the last heartbeat's answer plus the TTL until the catalog
    /// listed no tool (the sweep runs every tenth of the TTL, at most once
    /// a second, so this is mostly the wait for its next tick).
    pub(super) emptied_after_deadline_ms: f64,
    /// From the same moment until the registry was quiet again.
    pub(super) quiet_after_deadline_ms: Option<f64>,
    /// Redis mode, with the admin port: the sweep scripts' time in the
    /// window, by the registry's histogram.
    pub(super) redis_sweep_ms: Option<f64>,
    /// And how many sweep scripts ran in it.
    pub(super) redis_sweeps: Option<u64>,
}

/// The sweep histogram at `admin`, when given and exposed.
async fn sweeps_at(admin: Option<&str>) -> anyhow::Result<Option<sweep_metric::Sweeps>> {
    match admin {
        Some(admin) => Ok(sweep_metric::sweeps(&sweep_metric::scrape(admin).await?)),
        None => Ok(None),
    }
}

/// Heartbeats every lease once more, then none: times the catalog's
/// emptying and the registry's CPU spent on it. `tool_of(i)` names a tool
/// of the lease `leases[i]`.
pub(super) async fn let_go(
    registration: &RegistrationClient<Channel>,
    registry: &mut Registry,
    leases: &[String],
    tool_of: impl Fn(usize) -> String,
    ttl: Duration,
    pid: Option<u32>,
    admin: Option<&str>,
) -> anyhow::Result<Expiry> {
    anyhow::ensure!(
        ttl >= AT_REST + Duration::from_secs(1),
        "a lease TTL of {ttl:?} leaves no time to measure the registry at rest"
    );
    let round = Instant::now();
    let (last, failed) = heartbeat_all(registration, leases).await;
    let deadline = Instant::now() + ttl;
    anyhow::ensure!(failed == 0, "{failed} heartbeats of the last round failed");
    let watched = tool_of(last);

    let rest_from = (Instant::now(), pid.and_then(sample));
    while rest_from.0.elapsed() < AT_REST {
        anyhow::ensure!(is_listed(registry, &watched).await?, "{watched} left early");
        tokio::time::sleep(POLL).await;
    }
    let rest = (rest_from.0.elapsed(), pid.and_then(sample));

    tokio::time::sleep_until((round + ttl - AT_REST / 4).into()).await;
    let sweeps_from = sweeps_at(admin).await?;
    let from = (Instant::now(), pid.and_then(sample));
    while is_listed(registry, &watched).await? || !catalog_empty(registry).await? {
        anyhow::ensure!(
            Instant::now() < deadline + GONE_WITHIN,
            "the leases were still listed {GONE_WITHIN:?} after their deadline"
        );
        tokio::time::sleep(POLL).await;
    }
    let emptied = Instant::now();
    let quiet = match pid {
        Some(pid) => Some(settle(pid, QUIET_WITHIN).await?),
        None => None,
    };
    let sweeps = sweeps_from.zip(sweeps_at(admin).await?);

    let cpu = |a: Option<&_>, b: Option<&_>| Some(used_ns(a?, b?));
    let rest_ns = cpu(rest_from.1.as_ref(), rest.1.as_ref());
    let to = quiet.as_ref().map_or(emptied, |(at, _)| (*at).max(emptied));
    let used = cpu(from.1.as_ref(), quiet.as_ref().map(|(_, s)| s));
    let window = to - from.0;
    Ok(Expiry {
        leases: leases.len(),
        cpu_ms: used
            .zip(rest_ns)
            .map(|(used, at_rest)| beyond_rest_ms(used, window, at_rest, rest.0)),
        #[allow(clippy::cast_precision_loss)]
        rest_cpu_pct: rest_ns.map(|ns| ns as f64 / 1e7 / rest.0.as_secs_f64()),
        emptied_after_deadline_ms: signed_ms(emptied, deadline),
        quiet_after_deadline_ms: quiet.map(|_| signed_ms(to, deadline)),
        redis_sweep_ms: sweeps.map(|(a, b)| (b.seconds - a.seconds) * 1e3),
        redis_sweeps: sweeps.map(|(a, b)| b.count.saturating_sub(a.count)),
    })
}

/// `a − b` in milliseconds, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    match a.checked_duration_since(b) {
        Some(d) => d.as_secs_f64() * 1e3,
        None => -(b - a).as_secs_f64() * 1e3,
    }
}

/// Whether `GetTool` finds `name`.
async fn is_listed(registry: &mut Registry, name: &str) -> anyhow::Result<bool> {
    let request = pb::GetToolRequest {
        name: name.to_owned(),
        version: String::new(),
    };
    match registry.get_tool(request).await {
        Ok(_) => Ok(true),
        Err(status) if status.code() == Code::NotFound => Ok(false),
        Err(status) => Err(status.into()),
    }
}

/// Whether the first page of `ListTools` is empty.
async fn catalog_empty(registry: &mut Registry) -> anyhow::Result<bool> {
    let answer = registry
        .list_tools(pb::ListToolsRequest {
            page_size: 1,
            ..Default::default()
        })
        .await?
        .into_inner();
    Ok(answer.tools.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_keep_their_sign() {
        let now = Instant::now();
        let later = now + Duration::from_millis(5);
        assert!((signed_ms(later, now) - 5.0).abs() < 1e-6);
        assert!((signed_ms(now, later) + 5.0).abs() < 1e-6);
    }
}
