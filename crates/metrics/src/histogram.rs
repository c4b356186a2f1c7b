//! A latency histogram with fixed buckets, cheap enough for every I/O: an observation is a
//! bucket search over 18 bounds and two relaxed atomic adds, no lock, no allocation.

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Upper bounds of the buckets in nanoseconds: 25 µs to 10 s in 1-2.5-5 steps, which spans
/// a cached NVMe read to a stalled replica (past 10 s only `+Inf` counts).
pub const BUCKET_BOUNDS_NS: [u64; 18] = [
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

/// Buckets including `+Inf`.
const BUCKETS: usize = BUCKET_BOUNDS_NS.len() + 1;

#[derive(Debug, Default)]
struct Inner {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; BUCKETS],
    /// Sum of the observations in nanoseconds (u64 nanoseconds overflow after 584 years).
    sum_ns: AtomicU64,
}

/// A histogram of durations, exported in seconds. Clones share the same counts, so a handle
/// can be kept where the work happens and another registered for scraping.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram(Arc<Inner>);

impl LatencyHistogram {
    /// Count one operation that took `d` (nothing when latency recording is off).
    pub fn observe(&self, d: Duration) {
        if !crate::latency_on() {
            return;
        }
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let i = BUCKET_BOUNDS_NS.partition_point(|&bound| bound < ns);
        self.0.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.0.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Count one operation that started at `start` and ends now; `start` is an `Instant` or
    /// the `Option` of [`crate::now`] (`None`: recording is off, nothing is counted).
    #[inline]
    pub fn observe_since(&self, start: impl Into<Option<Instant>>) {
        if let Some(start) = start.into() {
            self.observe(start.elapsed());
        }
    }

    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.0
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .sum()
    }

    /// Sum of the observations so far.
    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.0.sum_ns.load(Ordering::Relaxed))
    }

    /// Observations per bucket, `+Inf` last (not cumulative).
    pub fn buckets(&self) -> [u64; BUCKETS] {
        std::array::from_fn(|i| self.0.buckets[i].load(Ordering::Relaxed))
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let counts = self.buckets();
        let mut buckets = [(0.0, 0u64); BUCKETS];
        for (i, n) in counts.iter().enumerate() {
            let bound = BUCKET_BOUNDS_NS
                .get(i)
                .map_or(f64::INFINITY, |&ns| ns as f64 / 1e9);
            buckets[i] = (bound, *n);
        }
        // The count is the buckets' total, so `_count` equals the `+Inf` bucket even while
        // observations race with the scrape.
        encoder.encode_histogram::<NoLabelSet>(
            self.sum().as_secs_f64(),
            counts.iter().sum(),
            &buckets,
            None,
        )
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    #[test]
    fn observations_land_in_their_buckets_and_render_cumulatively() {
        // Goal: a bound is inclusive (le), the exposition is cumulative, in seconds, and
        // _count/_sum agree with what was observed.
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(25));
        h.observe(Duration::from_micros(26));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60));
        assert_eq!(h.count(), 4);
        let b = h.buckets();
        assert_eq!((b[0], b[1], b[7], b[18]), (1, 1, 1, 1));
        let mut registry = Registry::default();
        registry.register("op_seconds", "Latency", h.clone());
        let text = crate::render(&registry);
        assert!(text.contains("# TYPE op_seconds histogram"), "{text}");
        assert!(
            text.contains("op_seconds_bucket{le=\"2.5e-05\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("op_seconds_bucket{le=\"0.005\"} 3\n"),
            "{text}"
        );
        assert!(text.contains("op_seconds_bucket{le=\"10\"} 3\n"), "{text}");
        assert!(
            text.contains("op_seconds_bucket{le=\"+Inf\"} 4\n"),
            "{text}"
        );
        assert!(text.contains("op_seconds_count 4\n"), "{text}");
        let sum: f64 = text
            .lines()
            .find_map(|l| l.strip_prefix("op_seconds_sum "))
            .and_then(|v| v.parse().ok())
            .expect("a _sum sample");
        assert!((sum - 60.003051).abs() < 1e-6, "{sum}");
    }
}
