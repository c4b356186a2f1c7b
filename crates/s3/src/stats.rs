//! Counters of a gateway's work, rendered in the Prometheus text format (`basalt up
//! --metrics-listen`, `basalt s3 --metrics-listen`): what tests and operators need to see
//! what reached the gateway — object reads and their bytes, listings, writes.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// The counters (monotonic since the gateway started).
#[derive(Debug, Default)]
pub struct GatewayStats {
    get_object: AtomicU64,
    get_object_bytes: AtomicU64,
    head_object: AtomicU64,
    list: AtomicU64,
    put_object: AtomicU64,
    slow_down: AtomicU64,
}

/// What a counter counts.
#[derive(Clone, Copy, Debug)]
pub enum Counted {
    /// A GetObject answered with this many bytes of body.
    GetObject(u64),
    HeadObject,
    /// A ListObjects(V2), ListObjectVersions, ListMultipartUploads or ListParts.
    List,
    PutObject,
}

impl GatewayStats {
    /// Count one answered request.
    pub fn count(&self, what: Counted) {
        let c = match what {
            Counted::GetObject(bytes) => {
                self.get_object_bytes.fetch_add(bytes, Ordering::Relaxed);
                &self.get_object
            }
            Counted::HeadObject => &self.head_object,
            Counted::List => &self.list,
            Counted::PutObject => &self.put_object,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Count a connection refused with 503 SlowDown (at the connection cap).
    pub fn count_slow_down(&self) {
        self.slow_down.fetch_add(1, Ordering::Relaxed);
    }

    /// The counters in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP basalt_s3_requests_total S3 requests served, by operation (GetObject, HeadObject and PutObject once answered; listings once authorised).\n\
             # TYPE basalt_s3_requests_total counter"
        );
        for (op, c) in [
            ("GetObject", &self.get_object),
            ("HeadObject", &self.head_object),
            ("List", &self.list),
            ("PutObject", &self.put_object),
        ] {
            let _ = writeln!(out, "basalt_s3_requests_total{{op=\"{op}\"}} {}", load(c));
        }
        let _ = writeln!(
            out,
            "# HELP basalt_s3_get_object_bytes_total Bytes of object data GetObject answered.\n\
             # TYPE basalt_s3_get_object_bytes_total counter\n\
             basalt_s3_get_object_bytes_total {}",
            load(&self.get_object_bytes)
        );
        let _ = writeln!(
            out,
            "# HELP basalt_s3_connections_refused_total Connections answered 503 SlowDown at the connection cap.\n\
             # TYPE basalt_s3_connections_refused_total counter\n\
             basalt_s3_connections_refused_total {}",
            load(&self.slow_down)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: counts add up and render as Prometheus counters.
    #[test]
    fn counts_render() {
        let s = GatewayStats::default();
        s.count(Counted::GetObject(10));
        s.count(Counted::GetObject(5));
        s.count(Counted::List);
        let text = s.render();
        assert!(
            text.contains("basalt_s3_requests_total{op=\"GetObject\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("basalt_s3_requests_total{op=\"List\"} 1\n"));
        assert!(text.contains("basalt_s3_get_object_bytes_total 15\n"));
        assert!(text.contains("# TYPE basalt_s3_requests_total counter"));
    }
}
