//! What both binaries' metrics share: the latency buckets, and families
//! exposed before their first series.

use std::fmt;

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder},
    metrics::{MetricType, histogram::Histogram},
};

/// Latency histogram buckets, in seconds: 0.5 ms to 30 s.
pub const LATENCY_BUCKETS: [f64; 15] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A latency histogram with [`LATENCY_BUCKETS`].
pub fn latency() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// A family whose `# TYPE` line is written even before its first series,
/// so a process that has served nothing yet already shows every metric it
/// has (dashboards and alerts can tell "none yet" from "not exported").
#[derive(Debug)]
pub struct Always<M>(pub M);

impl<M: EncodeMetric> EncodeMetric for Always<M> {
    fn encode(&self, encoder: MetricEncoder) -> Result<(), fmt::Error> {
        self.0.encode(encoder)
    }

    fn metric_type(&self) -> MetricType {
        self.0.metric_type()
    }
}
