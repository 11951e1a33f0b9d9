//! What is read at scrape time from the parts that already count it: the
//! catalog's live tools, instances and leases, the audit log's dropped
//! records.

use std::{
    fmt,
    sync::{OnceLock, Weak},
};

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeMetric},
    metrics::{counter::ConstCounter, gauge::ConstGauge},
};

use crate::access::audit::AuditLog;

/// What the metrics read of the catalog: at each scrape, and for the
/// `tool` label.
pub trait LiveCatalog: Send + Sync {
    /// How many tools, instances and leases are live.
    fn live(&self) -> LiveCounts;
    /// Whether `tool` is in the catalog.
    fn has(&self, tool: &str) -> bool;
}

/// What [`LiveCatalog::live`] counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Tools with a live instance.
    pub tools: usize,
    /// Distinct live instances.
    pub instances: usize,
    /// Live leases.
    pub leases: usize,
}

/// What is read at scrape time from the parts that already count it.
#[derive(Default)]
pub(super) struct Live {
    pub(super) catalog: OnceLock<Weak<dyn LiveCatalog>>,
    pub(super) audit: OnceLock<AuditLog>,
}

impl fmt::Debug for Live {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Live")
            .field("catalog", &self.catalog.get().is_some())
            .field("audit", &self.audit)
            .finish()
    }
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let LiveCounts {
            tools,
            instances,
            leases,
        } = self
            .catalog
            .get()
            .and_then(Weak::upgrade)
            .map(|catalog| catalog.live())
            .unwrap_or_default();
        for (name, help, value) in [
            ("toolmesh_tools", "Tools with a live instance.", tools),
            ("toolmesh_instances", "Live sidecar instances.", instances),
            ("toolmesh_leases", "Live leases.", leases),
        ] {
            let gauge = ConstGauge::new(i64::try_from(value).unwrap_or(i64::MAX));
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        let dropped = ConstCounter::new(self.audit.get().map_or(0, AuditLog::dropped));
        dropped.encode(encoder.encode_descriptor(
            "toolmesh_audit_records_dropped",
            "Audit records dropped: queue full, log closed, or a failed write.",
            None,
            dropped.metric_type(),
        )?)
    }
}
