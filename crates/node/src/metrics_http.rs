//! The metrics of a `basalt` process: one registry (basalt_metrics, on prometheus-client)
//! into which each subsystem of the process registers its collector, served on `GET
//! /metrics` by basalt_metrics::http. Every registry also carries the standard process
//! metrics (CPU time, resident memory), as Prometheus client libraries export them, so
//! `basalt bench storage --cluster etcd://...` can charge each daemon's CPU to the work it
//! did.

use basalt_metrics::prometheus_client::collector::Collector;
use basalt_metrics::prometheus_client::encoding::DescriptorEncoder;
use basalt_metrics::prometheus_client::metrics::counter::ConstCounter;
use basalt_metrics::{family, gauge, Kind, Registry};
use std::sync::Arc;

/// `process_cpu_seconds_total` (user + system time of every thread, from /proc/self/stat)
/// and `process_resident_memory_bytes`, named and typed as Prometheus's process collector
/// does; nothing when /proc cannot be read.
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Ok(stat) = basalt_bench::procstat::read(std::process::id()) else {
            return Ok(());
        };
        family(
            &mut enc,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            Kind::Counter,
            [(
                basalt_metrics::NO_LABELS,
                ConstCounter::new(stat.cpu_seconds),
            )],
        )?;
        family(
            &mut enc,
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            Kind::Gauge,
            [(basalt_metrics::NO_LABELS, gauge(stat.resident_bytes as i64))],
        )
    }
}

/// A registry for this process, with the process metrics in it.
pub fn registry() -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(ProcessCollector));
    registry
}

/// Bind `addr` and serve `registry` there in the background.
pub async fn start(
    addr: std::net::SocketAddr,
    registry: Registry,
) -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    use anyhow::Context;
    basalt_metrics::http::start(addr, Arc::new(registry))
        .await
        .with_context(|| format!("listen for /metrics on {addr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_metrics_follow_the_prometheus_names() {
        // Goal: every /metrics carries the standard process CPU and memory series, as
        // numbers a scraper reads back.
        let text = basalt_metrics::render(&registry());
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        };
        assert!(
            text.contains("# TYPE process_cpu_seconds_total counter"),
            "{text}"
        );
        assert!(text.contains("# TYPE process_resident_memory_bytes gauge"));
        assert!(value("process_cpu_seconds_total ") >= 0.0);
        assert!(value("process_resident_memory_bytes ") > 0.0);
    }
}
