//! Goal: once latency recording is off, histograms stay untouched and no clock is read for
//! them, while plain counters keep counting. (Its own test binary: the switch is
//! process-wide.)

use basalt_metrics::frontend::{FrontendStats, Op};
use basalt_metrics::LatencyHistogram;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[test]
fn off_means_histograms_untouched_and_counters_kept() {
    let h = LatencyHistogram::default();
    assert!(basalt_metrics::now().is_some());
    h.observe_since(basalt_metrics::now());
    assert_eq!(h.count(), 1, "recording is on by default");

    basalt_metrics::disable_latency();
    assert!(!basalt_metrics::latency_on());
    assert_eq!(basalt_metrics::now(), None, "no clock read when off");
    h.observe(Duration::from_millis(3));
    h.observe_since(Instant::now());
    h.observe_since(basalt_metrics::now());
    assert_eq!(h.count(), 1, "an observation counted while off");

    let f = FrontendStats::new("nbd", 0);
    f.connection("v")
        .record(Op::Write, 4096, basalt_metrics::now(), true);
    let w = f.all().op(Op::Write);
    assert_eq!(w.requests.load(Ordering::Relaxed), 1);
    assert_eq!(w.bytes.load(Ordering::Relaxed), 4096);
    assert_eq!(w.latency.count(), 0);
}
