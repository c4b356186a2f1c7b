//! Counters of one OSD, reported in STAT replies (for `basalt status`) and as Prometheus
//! text (for `/metrics`).

use crate::daemon::Osd;
use crate::pg::PgPhase;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Monotonic counters since the OSD started. Relaxed atomics: they are statistics.
#[derive(Default, Debug)]
pub struct OsdCounters {
    /// Client reads served as primary, and their bytes.
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    /// Client mutations (write, trim, delete) acknowledged as primary, and written bytes.
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Client requests answered with an error (retryable ones included).
    pub errors: AtomicU64,
    /// Mutations applied as a replica.
    pub replica_ops: AtomicU64,
    /// Objects pushed to replicas (recovery and stale copies), and their bytes.
    pub pushed_objects: AtomicU64,
    pub pushed_bytes: AtomicU64,
    /// Objects pulled from an authoritative copy while peering.
    pub pulled_objects: AtomicU64,
    /// Object-class calls (KV table updates, gets and lists) received as primary, and those
    /// answered Conflict (a condition did not hold; not counted as errors).
    pub kv_calls: AtomicU64,
    pub kv_conflicts: AtomicU64,
}

impl OsdCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// The counters in STAT reply order (after the store's five words).
    pub fn stat_words(&self) -> [u64; 6] {
        [
            Self::get(&self.reads),
            Self::get(&self.writes),
            Self::get(&self.read_bytes),
            Self::get(&self.write_bytes),
            Self::get(&self.pushed_objects),
            Self::get(&self.pushed_bytes),
        ]
    }
}

/// The OSD's metrics in the Prometheus text exposition format.
pub fn render(osd: &Osd) -> String {
    let c = &osd.counters;
    let st = osd.store.stats();
    let mut phases = [0u64; 4];
    for (_, e) in osd.pgs.snapshot() {
        let i = match e.phase {
            PgPhase::Replica => 0,
            PgPhase::Peering => 1,
            PgPhase::Active => 2,
            PgPhase::Incomplete => 3,
        };
        phases[i] += 1;
    }
    let id = osd.id;
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP basalt_osd_{name} {help}");
        let _ = writeln!(out, "# TYPE basalt_osd_{name} {kind}");
        let _ = writeln!(out, "basalt_osd_{name}{{osd=\"{id}\"}} {value}");
    };
    let g = OsdCounters::get;
    metric(
        "reads_total",
        "counter",
        "Client reads served as primary.",
        g(&c.reads),
    );
    metric(
        "read_bytes_total",
        "counter",
        "Bytes of client reads.",
        g(&c.read_bytes),
    );
    metric(
        "writes_total",
        "counter",
        "Client mutations acknowledged as primary.",
        g(&c.writes),
    );
    metric(
        "write_bytes_total",
        "counter",
        "Bytes of client writes.",
        g(&c.write_bytes),
    );
    metric(
        "errors_total",
        "counter",
        "Client requests answered with an error.",
        g(&c.errors),
    );
    metric(
        "replica_ops_total",
        "counter",
        "Mutations applied as a replica.",
        g(&c.replica_ops),
    );
    metric(
        "pushed_objects_total",
        "counter",
        "Objects pushed to replicas.",
        g(&c.pushed_objects),
    );
    metric(
        "pushed_bytes_total",
        "counter",
        "Bytes pushed to replicas.",
        g(&c.pushed_bytes),
    );
    metric(
        "pulled_objects_total",
        "counter",
        "Objects pulled while peering.",
        g(&c.pulled_objects),
    );
    metric(
        "kv_calls_total",
        "counter",
        "Object-class (KV table) calls received.",
        g(&c.kv_calls),
    );
    metric(
        "kv_conflicts_total",
        "counter",
        "KV table updates refused because a condition did not hold.",
        g(&c.kv_conflicts),
    );
    metric(
        "capacity_bytes",
        "gauge",
        "Size of the store file.",
        st.capacity_bytes,
    );
    metric(
        "used_bytes",
        "gauge",
        "Bytes in allocated blocks.",
        st.used_bytes,
    );
    metric("objects", "gauge", "Objects in the store.", st.objects);
    metric(
        "unflushed_bytes",
        "gauge",
        "Bytes written but not yet durable.",
        osd.store.unflushed_bytes(),
    );
    metric(
        "fenced",
        "gauge",
        "1 while the OSD cannot renew its liveness lease.",
        u64::from(osd.fenced()),
    );
    metric(
        "map_epoch",
        "gauge",
        "Epoch of the newest map seen.",
        osd.map().epoch as u64,
    );
    let a = &osd.auth_counters;
    metric(
        "auth_accepted_total",
        "counter",
        "Data-plane handshakes accepted.",
        g(&a.accepted),
    );
    metric(
        "auth_denied_requests_total",
        "counter",
        "Requests refused as outside the connection's capabilities.",
        g(&a.denied_requests),
    );
    metric(
        "auth_revoked_sessions_total",
        "counter",
        "Open connections closed because their key was revoked.",
        g(&a.revoked_sessions),
    );
    let _ = writeln!(
        out,
        "# HELP basalt_osd_auth_refused_total Data-plane connections refused, by reason."
    );
    let _ = writeln!(out, "# TYPE basalt_osd_auth_refused_total counter");
    for (i, reason) in crate::auth::REFUSAL_LABELS.iter().enumerate() {
        let _ = writeln!(
            out,
            "basalt_osd_auth_refused_total{{osd=\"{id}\",reason=\"{reason}\"}} {}",
            g(&a.refused[i])
        );
    }
    let _ = writeln!(
        out,
        "# HELP basalt_osd_pgs PGs of this OSD by role and phase."
    );
    let _ = writeln!(out, "# TYPE basalt_osd_pgs gauge");
    for (i, phase) in ["replica", "peering", "active", "incomplete"]
        .iter()
        .enumerate()
    {
        let _ = writeln!(
            out,
            "basalt_osd_pgs{{osd=\"{id}\",phase=\"{phase}\"}} {}",
            phases[i]
        );
    }
    out
}
