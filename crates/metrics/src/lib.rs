//! Metrics of one Basalt process (docs/metrics.md lists every series).
//!
//! Built on `prometheus-client`: each process has one [`Registry`]; subsystems register their
//! metrics (or a collector that reads them at scrape time) and [`http::serve`] answers
//! `GET /metrics` with the registry in the Prometheus text format. What the library lacks is
//! here: [`LatencyHistogram`], a fixed-bucket histogram updated with two relaxed atomic adds
//! (the library's own histogram takes a lock per observation), and [`family`], which encodes
//! one metric family from values read at scrape time.
//!
//! A process that serves no `/metrics` turns latency recording off once at startup
//! ([`disable_latency`]): histograms are then never touched and the clock is not read for
//! them ([`now`] answers `None`). Plain counters keep counting: the wire STAT replies and
//! `basalt status` read them too.

pub mod frontend;
pub mod histogram;
pub mod http;
pub mod iostat;

pub use histogram::LatencyHistogram;
pub use prometheus_client;
pub use prometheus_client::registry::{Registry, Unit};

use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// Whether latency histograms record in this process (see [`disable_latency`]).
static LATENCY_ON: AtomicBool = AtomicBool::new(true);

/// Stop recording latency in this process, for good: called once at startup by a process
/// that serves no `/metrics` (`--metrics-listen off`), where nothing would ever read the
/// histograms. Counters are not affected.
pub fn disable_latency() {
    LATENCY_ON.store(false, Ordering::Relaxed);
}

/// Whether latency histograms record (a relaxed load: the flag is set once, before any I/O).
#[inline]
pub fn latency_on() -> bool {
    LATENCY_ON.load(Ordering::Relaxed)
}

/// The start of an operation to time for a histogram, or `None` when latency recording is
/// off (the clock read is part of what "off" saves). Pass it to
/// [`LatencyHistogram::observe_since`].
#[inline]
pub fn now() -> Option<Instant> {
    latency_on().then(Instant::now)
}

/// The registry in the Prometheus text format (version 0.0.4), as served on `/metrics`.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail; an encoder error would be a bug in a collector, and
    // a partial page is better than none for a scraper.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, registry) {
        tracing::error!("encode metrics: {e}");
    }
    out
}

/// The `Content-Type` of [`render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Encode one metric family of type `kind` from `samples` (label set, value) read at scrape
/// time: a collector's way to export values it owns (one family, however many OSDs or pools
/// of the process contribute a sample). Counters get `_total` appended to `name`.
pub fn family<L, M>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (L, M)>,
) -> Result<(), std::fmt::Error>
where
    L: EncodeLabelSet,
    M: EncodeMetric,
{
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

/// The label set of a sample without labels (for [`family`]).
pub const NO_LABELS: [(&str, &str); 0] = [];

/// A counter value read at scrape time (for [`family`]).
pub fn counter(v: u64) -> prometheus_client::metrics::counter::ConstCounter<u64> {
    prometheus_client::metrics::counter::ConstCounter::new(v)
}

/// A floating-point counter value read at scrape time (for [`family`]): seconds summed.
pub fn counter_f64(v: f64) -> prometheus_client::metrics::counter::ConstCounter<f64> {
    prometheus_client::metrics::counter::ConstCounter::new(v)
}

/// A gauge value read at scrape time (for [`family`]).
pub fn gauge(v: i64) -> prometheus_client::metrics::gauge::ConstGauge<i64> {
    prometheus_client::metrics::gauge::ConstGauge::new(v)
}

/// A floating-point gauge value read at scrape time (for [`family`]).
pub fn gauge_f64(v: f64) -> prometheus_client::metrics::gauge::ConstGauge<f64> {
    prometheus_client::metrics::gauge::ConstGauge::new(v)
}

pub use prometheus_client::metrics::MetricType as Kind;
