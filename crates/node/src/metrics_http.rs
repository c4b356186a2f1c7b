//! The metrics of a Basalt process: one registry (basalt_metrics, on prometheus-client)
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

/// `basalt_build_info`, then `process_cpu_seconds_total` (user + system time of every
/// thread, from /proc/self/stat) and `process_resident_memory_bytes`, named and typed as
/// Prometheus's process collector does (nothing when /proc cannot be read).
#[derive(Debug)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let build = crate::build::info();
        let (wire, store_format) = (build.wire.to_string(), build.store_format.to_string());
        family(
            &mut enc,
            "basalt_build_info",
            "The release and commit of this process's binary, and the wire and store formats \
             it speaks (always 1)",
            Kind::Gauge,
            [(
                [
                    ("version", build.version.as_str()),
                    ("wire", wire.as_str()),
                    ("store_format", store_format.as_str()),
                ],
                gauge(1),
            )],
        )?;
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

/// A running `/metrics` endpoint: its address and its task.
pub type MetricsTask = (std::net::SocketAddr, tokio::task::JoinHandle<()>);

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

/// Serve `registry` at `addr` (from [`metrics_addr`]), if any.
pub async fn start_if(
    addr: Option<std::net::SocketAddr>,
    registry: Registry,
) -> anyhow::Result<Option<MetricsTask>> {
    match addr {
        Some(addr) => Ok(Some(start(addr, registry).await?)),
        None => Ok(None),
    }
}

/// The metrics address: given, "off" (`None`), or by default loopback with the data-plane
/// port `listen` + 1000 (metrics reveal volume names and load: exposing them to the network
/// is a choice); `basalt up` has its own default and passes its flag always.
pub fn metrics_addr(
    arg: Option<&str>,
    listen: Option<std::net::SocketAddr>,
) -> anyhow::Result<Option<std::net::SocketAddr>> {
    use anyhow::Context;
    match (arg, listen) {
        (Some("off"), _) => Ok(None),
        (Some(a), _) => Ok(Some(a.parse().with_context(|| {
            format!("--metrics-listen {a}: expected IP:PORT or \"off\"")
        })?)),
        (None, Some(listen)) => Ok(Some(std::net::SocketAddr::new(
            std::net::Ipv4Addr::LOCALHOST.into(),
            listen.port().checked_add(1000).unwrap_or(0),
        ))),
        (None, None) => anyhow::bail!("--metrics-listen: expected IP:PORT or \"off\""),
    }
}

/// A collector shared with its owner, who keeps adding to it after it is registered (the
/// OSDs of a process start after its `/metrics` does, so they can register its address).
#[derive(Debug)]
pub struct Shared<C>(pub Arc<C>);

impl<C: Collector> Collector for Shared<C> {
    fn encode(&self, enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(enc)
    }
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
