//! Metrics of the OSDs of one process: counters and latency histograms kept with relaxed
//! atomics where the work happens, reported in STAT replies (for `basalt status`) and, through
//! [`OsdCollector`], on the process's `/metrics` (docs/metrics.md lists every series).

use crate::daemon::Osd;
use crate::pg::PgPhase;
use crate::recovery::PushKind;
use basalt_metrics::prometheus_client::collector::Collector;
use basalt_metrics::prometheus_client::encoding::DescriptorEncoder;
use basalt_metrics::{counter, family, gauge, gauge_f64, Kind, LatencyHistogram};
use basalt_proto::{PoolId, Status};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Pools counted under their own id; the rest share the label `pool="other"`, which bounds
/// the series an OSD exports however many pools the cluster has.
pub const MAX_POOLS_LABELLED: usize = 64;

/// Reply statuses (`Status as u8`), for errors by kind.
const STATUSES: usize = Status::Denied as usize + 1;
/// Kinds of whole-object pushes.
const PUSH_KINDS: usize = PushKind::ALL.len();

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
    /// The same errors by reply status (index: `Status as u8`).
    errors_by_status: [AtomicU64; STATUSES],
    /// Mutations applied as a replica.
    pub replica_ops: AtomicU64,
    /// Objects pushed to replicas (recovery and stale copies), and their bytes.
    pub pushed_objects: AtomicU64,
    pub pushed_bytes: AtomicU64,
    /// The same pushes by why they were made (index: [`PushKind`] order).
    push_objects: [AtomicU64; PUSH_KINDS],
    push_bytes: [AtomicU64; PUSH_KINDS],
    /// PGs whose recovery (or backfill) runs on this OSD as primary now.
    recovering_pgs: AtomicU64,
    /// Objects pulled from an authoritative copy while peering.
    pub pulled_objects: AtomicU64,
    /// Object-class calls (KV table updates, gets and lists) received as primary, and those
    /// answered Conflict (a condition did not hold; not counted as errors).
    pub kv_calls: AtomicU64,
    pub kv_conflicts: AtomicU64,
    /// Liveness lease renewals that succeeded, and attempts that failed.
    pub lease_renewals: AtomicU64,
    pub lease_renewal_failures: AtomicU64,
    /// Heartbeat peers this OSD reported unreachable to the monitor.
    pub failure_reports: AtomicU64,
    /// Client requests refused because a member's peer lease had lapsed.
    pub peer_lease_refusals: AtomicU64,
    /// Gateway reads this OSD served from its copy as a replica (LOCAL_READ), and those it
    /// declined (the gateway then read from the primary).
    pub local_reads: AtomicU64,
    pub local_read_refusals: AtomicU64,
    /// Client operations and bytes by pool.
    pub pools: PoolCounters,
    /// Where the time of requests goes.
    pub latency: OsdLatency,
}

/// Latency histograms of one OSD's stages.
#[derive(Default, Debug)]
pub struct OsdLatency {
    /// From a request decoded to its handler running (in-flight slot and runtime queue).
    pub queue_wait: LatencyHistogram,
    /// A read of the local store (client reads as primary).
    pub store_read: LatencyHistogram,
    /// A mutation applied to the local store (as primary or replica).
    pub store_write: LatencyHistogram,
    /// A store flush: the WAL's group commit (fdatasync), from FUA, FLUSH or the background
    /// flusher.
    pub store_flush: LatencyHistogram,
    /// From a mutation queued to its replicas to the last replica's acknowledgement.
    pub replication: LatencyHistogram,
    /// Liveness lease renewals: one round trip to the metadata store (etcd).
    pub meta_round_trip: LatencyHistogram,
}

impl OsdCounters {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Count a client request answered `status` (an error).
    pub fn error(&self, status: Status) {
        Self::add(&self.errors, 1);
        Self::add(&self.errors_by_status[status as usize], 1);
    }

    /// A client read of `bytes` served as primary for `pool`.
    pub fn read(&self, pool: PoolId, bytes: u64) {
        Self::add(&self.reads, 1);
        Self::add(&self.read_bytes, bytes);
        let p = self.pools.slot(pool);
        Self::add(&p.reads, 1);
        Self::add(&p.read_bytes, bytes);
    }

    /// A client mutation of `bytes` acknowledged as primary for `pool`.
    pub fn write(&self, pool: PoolId, bytes: u64) {
        Self::add(&self.writes, 1);
        Self::add(&self.write_bytes, bytes);
        let p = self.pools.slot(pool);
        Self::add(&p.writes, 1);
        Self::add(&p.write_bytes, bytes);
    }

    /// A whole object of `bytes` pushed to a replica for `kind`.
    pub fn pushed(&self, kind: PushKind, bytes: u64) {
        Self::add(&self.pushed_objects, 1);
        Self::add(&self.pushed_bytes, bytes);
        Self::add(&self.push_objects[kind as usize], 1);
        Self::add(&self.push_bytes[kind as usize], bytes);
    }

    /// Objects and bytes pushed for `kind` since start.
    pub fn pushes(&self, kind: PushKind) -> (u64, u64) {
        (
            Self::get(&self.push_objects[kind as usize]),
            Self::get(&self.push_bytes[kind as usize]),
        )
    }

    /// Count a PG as recovering until the guard drops.
    pub(crate) fn recovering(&self) -> RecoveringPg<'_> {
        Self::add(&self.recovering_pgs, 1);
        RecoveringPg(&self.recovering_pgs)
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

/// A PG counted in `recovering_pgs` while it lives.
pub(crate) struct RecoveringPg<'a>(&'a AtomicU64);

impl Drop for RecoveringPg<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Client operations of one pool.
#[derive(Default, Debug)]
pub struct PoolOps {
    pub reads: AtomicU64,
    pub read_bytes: AtomicU64,
    pub writes: AtomicU64,
    pub write_bytes: AtomicU64,
}

/// Per-pool counters in a fixed table indexed by pool id: no lock or lookup per request.
#[derive(Debug)]
pub struct PoolCounters {
    /// Pools 0..MAX_POOLS_LABELLED, then the slot of every other pool.
    slots: Box<[PoolOps]>,
}

impl Default for PoolCounters {
    fn default() -> Self {
        Self {
            slots: (0..=MAX_POOLS_LABELLED)
                .map(|_| PoolOps::default())
                .collect(),
        }
    }
}

impl PoolCounters {
    fn slot(&self, pool: PoolId) -> &PoolOps {
        let i = (pool as usize).min(MAX_POOLS_LABELLED);
        &self.slots[i]
    }

    /// (label, counters) of every pool with traffic.
    fn active(&self) -> impl Iterator<Item = (String, &PoolOps)> {
        self.slots.iter().enumerate().filter_map(|(i, p)| {
            let busy = p.reads.load(Ordering::Relaxed) + p.writes.load(Ordering::Relaxed) > 0;
            let label = if i == MAX_POOLS_LABELLED {
                "other".to_string()
            } else {
                i.to_string()
            };
            busy.then_some((label, p))
        })
    }
}

/// The label value of a reply status.
fn status_label(i: usize) -> &'static str {
    const LABELS: [&str; STATUSES] = [
        "ok",
        "io",
        "no_space",
        "invalid",
        "not_primary",
        "failed",
        "unavailable",
        "peering",
        "stale",
        "conflict",
        "frozen",
        "denied",
    ];
    LABELS[i]
}

/// Exports the OSDs of this process on its registry: every family once, a sample per OSD
/// (label `osd`). Holds the OSDs weakly: a stopped OSD disappears from the next scrape.
#[derive(Default)]
pub struct OsdCollector {
    osds: Mutex<Vec<Weak<Osd>>>,
}

impl std::fmt::Debug for OsdCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OsdCollector").finish_non_exhaustive()
    }
}

impl OsdCollector {
    /// Export `osd` from now on.
    pub fn add(&self, osd: &Arc<Osd>) {
        let mut osds = self.osds.lock().expect("osd collector lock");
        osds.retain(|o| o.strong_count() > 0);
        osds.push(Arc::downgrade(osd));
    }

    fn live(&self) -> Vec<Arc<Osd>> {
        let osds = self.osds.lock().expect("osd collector lock");
        osds.iter().filter_map(Weak::upgrade).collect()
    }
}

impl Collector for OsdCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_osds(&self.live(), &mut enc)
    }
}

/// Accessors of the values a family reads from each OSD.
type CounterField = fn(&OsdCounters) -> &AtomicU64;
type PoolField = fn(&PoolOps) -> &AtomicU64;
type LatencyField = fn(&OsdLatency) -> &LatencyHistogram;
type GaugeField = fn(&Osd, &(basalt_store::StoreStats, basalt_store::WalStats)) -> u64;
type AuthField = fn(&crate::auth::AuthCounters) -> &AtomicU64;

/// Every OSD family, a sample per OSD of `osds`.
fn encode_osds(osds: &[Arc<Osd>], enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let g = OsdCounters::get;
    let counters: [(&str, &str, CounterField); 17] = [
        ("reads", "Client reads served as primary", |c| &c.reads),
        ("read_bytes", "Bytes of client reads", |c| &c.read_bytes),
        ("writes", "Client mutations acknowledged as primary", |c| {
            &c.writes
        }),
        ("write_bytes", "Bytes of client writes", |c| &c.write_bytes),
        ("errors", "Client requests answered with an error", |c| {
            &c.errors
        }),
        ("replica_ops", "Mutations applied as a replica", |c| {
            &c.replica_ops
        }),
        (
            "pushed_objects",
            "Objects pushed to replicas (recovery, stale copies)",
            |c| &c.pushed_objects,
        ),
        (
            "pushed_bytes",
            "Bytes pushed to replicas (recovery, stale copies)",
            |c| &c.pushed_bytes,
        ),
        ("pulled_objects", "Objects pulled while peering", |c| {
            &c.pulled_objects
        }),
        ("kv_calls", "Object-class (KV table) calls received", |c| {
            &c.kv_calls
        }),
        (
            "kv_conflicts",
            "KV table updates refused because a condition did not hold",
            |c| &c.kv_conflicts,
        ),
        (
            "lease_renewals",
            "Liveness lease renewals that succeeded",
            |c| &c.lease_renewals,
        ),
        (
            "lease_renewal_failures",
            "Liveness lease renewals that failed",
            |c| &c.lease_renewal_failures,
        ),
        (
            "failure_reports",
            "Heartbeat peers reported unreachable to the monitor",
            |c| &c.failure_reports,
        ),
        (
            "peer_lease_refusals",
            "Client requests refused (retried) because a PG member's peer lease had lapsed",
            |c| &c.peer_lease_refusals,
        ),
        (
            "local_reads",
            "Gateway reads served from this OSD's copy as a replica (LOCAL_READ)",
            |c| &c.local_reads,
        ),
        (
            "local_read_refusals",
            "Gateway reads declined as a replica (not complete, interval moved, leases \
             lapsed); the gateway read from the primary",
            |c| &c.local_read_refusals,
        ),
    ];
    for (name, help, field) in counters {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Counter,
            osds.iter()
                .map(|o| ([("osd", o.id)], counter(g(field(&o.counters))))),
        )?;
    }
    family(
        enc,
        "basalt_osd_errors_by_kind",
        "Client requests answered with an error, by reply status",
        Kind::Counter,
        osds.iter().flat_map(|o| {
            o.counters
                .errors_by_status
                .iter()
                .enumerate()
                .filter(|(_, n)| g(n) > 0)
                .map(|(i, n)| {
                    (
                        [("osd", o.id.to_string()), ("kind", status_label(i).into())],
                        counter(g(n)),
                    )
                })
        }),
    )?;
    for (name, help, bytes) in [
        (
            "push_objects",
            "Objects pushed whole to replicas, by kind: recovery, backfill, stale, repair",
            false,
        ),
        (
            "push_bytes",
            "Bytes pushed to replicas, by kind: recovery, backfill, stale, repair",
            true,
        ),
    ] {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Counter,
            osds.iter().flat_map(|o| {
                PushKind::ALL.into_iter().map(move |k| {
                    let (objects, b) = o.counters.pushes(k);
                    (
                        [("osd", o.id.to_string()), ("kind", k.label().into())],
                        counter(if bytes { b } else { objects }),
                    )
                })
            }),
        )?;
    }
    family(
        enc,
        "basalt_osd_slow_ops",
        "Operations in flight longer than the slow-op threshold (at the last scan)",
        Kind::Gauge,
        osds.iter()
            .map(|o| ([("osd", o.id)], gauge(o.slow.slow_now() as i64))),
    )?;
    family(
        enc,
        "basalt_osd_slow_ops_found",
        "Operations found slow (each counted once)",
        Kind::Counter,
        osds.iter()
            .map(|o| ([("osd", o.id)], counter(o.slow.slow_total()))),
    )?;
    family(
        enc,
        "basalt_osd_slow_op_threshold_seconds",
        "Age at which an operation is reported slow",
        Kind::Gauge,
        osds.iter().map(|o| {
            (
                [("osd", o.id)],
                gauge_f64(o.slow.threshold_ms() as f64 / 1000.0),
            )
        }),
    )?;
    let pool_counters: [(&str, &str, PoolField); 4] = [
        (
            "pool_reads",
            "Client reads served as primary, by pool",
            |p| &p.reads,
        ),
        ("pool_read_bytes", "Bytes of client reads, by pool", |p| {
            &p.read_bytes
        }),
        (
            "pool_writes",
            "Client mutations acknowledged as primary, by pool",
            |p| &p.writes,
        ),
        ("pool_write_bytes", "Bytes of client writes, by pool", |p| {
            &p.write_bytes
        }),
    ];
    for (name, help, field) in pool_counters {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Counter,
            osds.iter().flat_map(|o| {
                o.counters.pools.active().map(|(pool, p)| {
                    (
                        [("osd", o.id.to_string()), ("pool", pool)],
                        counter(g(field(p))),
                    )
                })
            }),
        )?;
    }
    let histograms: [(&str, &str, LatencyField); 6] = [
        (
            "queue_wait_seconds",
            "Time from a request decoded to its handler running",
            |l| &l.queue_wait,
        ),
        (
            "store_read_seconds",
            "Reads of the local store (client reads as primary)",
            |l| &l.store_read,
        ),
        (
            "store_write_seconds",
            "Mutations applied to the local store (primary and replica)",
            |l| &l.store_write,
        ),
        (
            "store_flush_seconds",
            "Store flushes: the WAL group commit with its fdatasync",
            |l| &l.store_flush,
        ),
        (
            "replication_seconds",
            "Round trip of a mutation to every replica, as primary",
            |l| &l.replication,
        ),
        (
            "meta_round_trip_seconds",
            "Liveness lease renewals: one round trip to the metadata store",
            |l| &l.meta_round_trip,
        ),
    ];
    for (name, help, field) in histograms {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Histogram,
            osds.iter()
                .map(|o| ([("osd", o.id)], field(&o.counters.latency).clone())),
        )?;
    }
    let stats: Vec<_> = osds
        .iter()
        .map(|o| (o.store.stats(), o.store.wal_stats()))
        .collect();
    let gauges: [(&str, &str, GaugeField); 12] = [
        ("capacity_bytes", "Size of the store file", |_, s| {
            s.0.capacity_bytes
        }),
        ("used_bytes", "Bytes in allocated blocks", |_, s| {
            s.0.used_bytes
        }),
        ("objects", "Objects in the store", |_, s| s.0.objects),
        ("slots", "Object slots of the store", |_, s| s.0.slots_total),
        ("free_slots", "Object slots holding no object", |_, s| {
            s.0.slots_free
        }),
        (
            "wal_used_bytes",
            "Live bytes of the write-ahead log (since the last checkpoint)",
            |_, s| s.1.used_bytes,
        ),
        (
            "wal_capacity_bytes",
            "Size of the write-ahead log",
            |_, s| s.1.capacity_bytes,
        ),
        (
            "degraded_pgs",
            "PGs this OSD is primary of with a replica being recovered or backfilled",
            |o, _| OsdCounters::get(&o.counters.recovering_pgs),
        ),
        (
            "unflushed_bytes",
            "Bytes written but not yet durable",
            |o, _| o.store.unflushed_bytes(),
        ),
        (
            "fenced",
            "1 while the OSD cannot renew its liveness lease",
            |o, _| u64::from(o.fenced()),
        ),
        ("map_epoch", "Epoch of the newest map seen", |o, _| {
            o.map().epoch as u64
        }),
        (
            "store_direct_io",
            "1 when the store's I/O bypasses the page cache (O_DIRECT), 0 when buffered",
            |o, _| u64::from(o.store.io_engine().is_some_and(|(_, direct)| direct)),
        ),
    ];
    for (name, help, value) in gauges {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Gauge,
            osds.iter()
                .zip(&stats)
                .map(|(o, s)| ([("osd", o.id)], gauge(value(o, s) as i64))),
        )?;
    }
    type WalField = fn(&basalt_store::WalStats) -> u64;
    let applied: [(&str, &str, WalField); 5] = [
        (
            "store_blocks_applied",
            "Blocks of small writes copied from the write-ahead log into their slots",
            |w| w.blocks_applied,
        ),
        (
            "store_blocks_merged",
            "Blocks of small writes not copied: a newer write in the same batch replaced them",
            |w| w.blocks_merged,
        ),
        (
            "store_edge_reads_inline",
            "Partial blocks of writes and trims read while the writer waits (not read ahead)",
            |w| w.edge_reads_inline,
        ),
        (
            "store_writer_flushes",
            "Flushes a write ran itself, waiting on the device, past twice the unflushed bound",
            |w| w.writer_flushes,
        ),
        (
            "store_checkpoints",
            "Checkpoints the store wrote since it opened",
            |w| w.checkpoints,
        ),
    ];
    for (name, help, value) in applied {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Counter,
            osds.iter()
                .zip(&stats)
                .map(|(o, s)| ([("osd", o.id)], counter(value(&s.1)))),
        )?;
    }
    family(
        enc,
        "basalt_osd_store_checkpoint_seconds",
        "Time the store's checkpoints took (batches commit meanwhile, but for the cut)",
        Kind::Counter,
        osds.iter().zip(&stats).map(|(o, s)| {
            let seconds = s.1.checkpoint_micros as f64 / 1e6;
            ([("osd", o.id)], basalt_metrics::counter_f64(seconds))
        }),
    )?;
    family(
        enc,
        "basalt_osd_checkpoint_age_seconds",
        "Time since the store's last checkpoint (or since it opened)",
        Kind::Gauge,
        osds.iter().zip(&stats).map(|(o, s)| {
            (
                [("osd", o.id)],
                gauge_f64(s.1.checkpoint_age_ms as f64 / 1000.0),
            )
        }),
    )?;
    family(
        enc,
        "basalt_osd_undersized_pgs",
        "Active PGs this OSD is primary of with fewer members than the pool's size",
        Kind::Gauge,
        osds.iter()
            .map(|o| ([("osd", o.id)], gauge(undersized_pgs(o)))),
    )?;
    let auth: [(&str, &str, AuthField); 3] = [
        ("auth_accepted", "Data-plane handshakes accepted", |a| {
            &a.accepted
        }),
        (
            "auth_denied_requests",
            "Requests refused as outside the connection's capabilities",
            |a| &a.denied_requests,
        ),
        (
            "auth_revoked_sessions",
            "Open connections closed because their key was revoked",
            |a| &a.revoked_sessions,
        ),
    ];
    for (name, help, field) in auth {
        family(
            enc,
            &format!("basalt_osd_{name}"),
            help,
            Kind::Counter,
            osds.iter()
                .map(|o| ([("osd", o.id)], counter(g(field(&o.auth_counters))))),
        )?;
    }
    family(
        enc,
        "basalt_osd_auth_refused",
        "Data-plane connections refused, by reason",
        Kind::Counter,
        osds.iter().flat_map(|o| {
            crate::auth::REFUSAL_LABELS
                .iter()
                .zip(&o.auth_counters.refused)
                .map(|(reason, n)| {
                    (
                        [("osd", o.id.to_string()), ("reason", (*reason).into())],
                        counter(g(n)),
                    )
                })
        }),
    )?;
    family(
        enc,
        "basalt_osd_pgs",
        "PGs of this OSD by role and phase",
        Kind::Gauge,
        osds.iter().flat_map(|o| {
            pg_phases(o)
                .into_iter()
                .zip(["replica", "peering", "active", "incomplete"])
                .map(|(n, phase)| {
                    (
                        [("osd", o.id.to_string()), ("phase", phase.into())],
                        gauge(n),
                    )
                })
        }),
    )
}

/// Active PGs `osd` is primary of whose acting set is smaller than their pool's size.
fn undersized_pgs(osd: &Osd) -> i64 {
    let map = osd.map();
    let mut n = 0;
    for (pg, e) in osd.pgs.snapshot() {
        let Some(pool) = map.pools.get(&pg.pool) else {
            continue;
        };
        let members = e
            .acting
            .iter()
            .filter(|(o, _)| *o != basalt_placement::NO_OSD)
            .count();
        if e.phase == PgPhase::Active && (members as u32) < pool.size {
            n += 1;
        }
    }
    n
}

/// PGs of `osd` by phase: replica, peering, active, incomplete.
fn pg_phases(osd: &Osd) -> [i64; 4] {
    let mut phases = [0; 4];
    for (_, e) in osd.pgs.snapshot() {
        let i = match e.phase {
            PgPhase::Replica => 0,
            PgPhase::Peering => 1,
            PgPhase::Active => 2,
            PgPhase::Incomplete => 3,
        };
        phases[i] += 1;
    }
    phases
}
