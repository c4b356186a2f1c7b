//! What a block frontend (NBD, NVMe/TCP) counts: requests, bytes, errors and latency by
//! operation class, for all volumes and, opt-in and bounded, for each volume.

use crate::{counter, family, Kind, LatencyHistogram};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Operation classes of a block frontend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    /// Trim, discard, write-zeroes (what deallocates or zeroes without a payload).
    Trim,
    /// Everything else a client may send (block status, cache hints, admin commands).
    Other,
}

impl Op {
    const ALL: [Op; 5] = [Op::Read, Op::Write, Op::Flush, Op::Trim, Op::Other];

    /// The `op` label.
    pub fn label(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Trim => "trim",
            Op::Other => "other",
        }
    }
}

/// Counters of one operation class.
#[derive(Debug, Default)]
pub struct OpCounters {
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub latency: LatencyHistogram,
}

/// Counters by operation class (of a frontend, or of one volume on it).
#[derive(Debug, Default)]
pub struct OpStats {
    ops: [OpCounters; 5],
}

impl OpStats {
    /// The counters of `op`.
    pub fn op(&self, op: Op) -> &OpCounters {
        &self.ops[op as usize]
    }

    fn record(&self, op: Op, bytes: u64, start: Option<Instant>, ok: bool) {
        let c = self.op(op);
        c.requests.fetch_add(1, Ordering::Relaxed);
        if ok {
            c.bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
        c.latency.observe_since(start);
    }
}

/// The counters of one frontend (label `frontend`), shared by its connections.
#[derive(Debug)]
pub struct FrontendStats {
    frontend: &'static str,
    all: OpStats,
    /// Volumes counted on their own, at most `per_volume_limit` (0: none).
    volumes: Mutex<HashMap<String, Arc<OpStats>>>,
    per_volume_limit: usize,
}

impl FrontendStats {
    /// Counters for `frontend` ("nbd", "nvmf"), with per-volume series for the first
    /// `per_volume_limit` volumes opened (0: totals only). The bound keeps the series a
    /// scrape returns independent of how many volumes the cluster has.
    pub fn new(frontend: &'static str, per_volume_limit: usize) -> Arc<Self> {
        Arc::new(Self {
            frontend,
            all: OpStats::default(),
            volumes: Mutex::new(HashMap::new()),
            per_volume_limit,
        })
    }

    /// The recorder of one connection to `volume` (looked up once per connection: the
    /// requests that follow touch atomics only).
    pub fn connection(self: &Arc<Self>, volume: &str) -> Recorder {
        let volume = if self.per_volume_limit == 0 {
            None
        } else {
            let mut volumes = self.volumes.lock().unwrap_or_else(|e| e.into_inner());
            match volumes.get(volume) {
                Some(v) => Some(v.clone()),
                None if volumes.len() < self.per_volume_limit => {
                    let v = Arc::new(OpStats::default());
                    volumes.insert(volume.to_string(), v.clone());
                    Some(v)
                }
                None => None,
            }
        };
        Recorder {
            frontend: self.clone(),
            volume,
        }
    }

    /// Counters over every volume.
    pub fn all(&self) -> &OpStats {
        &self.all
    }

    /// Counters of `volume`, when it is counted on its own.
    pub fn volume(&self, volume: &str) -> Option<Arc<OpStats>> {
        let volumes = self.volumes.lock().unwrap_or_else(|e| e.into_inner());
        volumes.get(volume).cloned()
    }
}

/// Records the requests of one connection.
#[derive(Clone, Debug)]
pub struct Recorder {
    frontend: Arc<FrontendStats>,
    volume: Option<Arc<OpStats>>,
}

impl Recorder {
    /// Count a request of class `op` moving `bytes`, started at `start` (from
    /// [`crate::now`]: `None` when latency recording is off), that succeeded or not.
    pub fn record(&self, op: Op, bytes: u64, start: impl Into<Option<Instant>>, ok: bool) {
        let start = start.into();
        self.frontend.all.record(op, bytes, start, ok);
        if let Some(v) = &self.volume {
            v.record(op, bytes, start, ok);
        }
    }
}

/// Exports the frontends of a process: `basalt_frontend_*` over all volumes and
/// `basalt_volume_*` for the volumes counted on their own.
#[derive(Debug, Default)]
pub struct FrontendCollector {
    frontends: Vec<Arc<FrontendStats>>,
}

impl FrontendCollector {
    /// Export `frontends`.
    pub fn new(frontends: Vec<Arc<FrontendStats>>) -> Self {
        Self { frontends }
    }
}

type Field = fn(&OpCounters) -> &AtomicU64;

impl Collector for FrontendCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let fields: [(&str, &str, Field); 3] = [
            ("requests", "Requests answered", |c| &c.requests),
            (
                "bytes",
                "Bytes read or written by successful requests",
                |c| &c.bytes,
            ),
            ("errors", "Requests answered with an error", |c| &c.errors),
        ];
        for (name, help, field) in fields {
            family(
                &mut enc,
                &format!("basalt_frontend_{name}"),
                &format!("{help}, by frontend and operation"),
                Kind::Counter,
                self.frontends.iter().flat_map(|f| {
                    Op::ALL.iter().map(move |&op| {
                        (
                            [("frontend", f.frontend), ("op", op.label())],
                            counter(load(field(f.all.op(op)))),
                        )
                    })
                }),
            )?;
        }
        family(
            &mut enc,
            "basalt_frontend_request_seconds",
            "Latency of requests from decoded to answered, by frontend and operation",
            Kind::Histogram,
            self.frontends.iter().flat_map(|f| {
                Op::ALL.iter().map(move |&op| {
                    (
                        [("frontend", f.frontend), ("op", op.label())],
                        f.all.op(op).latency.clone(),
                    )
                })
            }),
        )?;
        let volumes: Vec<(&'static str, String, Arc<OpStats>)> = self
            .frontends
            .iter()
            .flat_map(|f| {
                let v = f.volumes.lock().unwrap_or_else(|e| e.into_inner());
                v.iter()
                    .map(|(name, s)| (f.frontend, name.clone(), s.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        for (name, help, field) in fields {
            family(
                &mut enc,
                &format!("basalt_volume_{name}"),
                &format!("{help}, by volume (opt-in, bounded), frontend and operation"),
                Kind::Counter,
                volumes.iter().flat_map(|(frontend, volume, s)| {
                    Op::ALL.iter().map(move |&op| {
                        (
                            [
                                ("frontend", *frontend),
                                ("volume", volume.as_str()),
                                ("op", op.label()),
                            ],
                            counter(load(field(s.op(op)))),
                        )
                    })
                }),
            )?;
        }
        family(
            &mut enc,
            "basalt_volume_request_seconds",
            "Latency of requests, by volume (opt-in, bounded), frontend and operation",
            Kind::Histogram,
            volumes.iter().flat_map(|(frontend, volume, s)| {
                Op::ALL.iter().map(move |&op| {
                    (
                        [
                            ("frontend", *frontend),
                            ("volume", volume.as_str()),
                            ("op", op.label()),
                        ],
                        s.op(op).latency.clone(),
                    )
                })
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Registry;

    #[test]
    fn volumes_past_the_limit_count_in_the_totals_only() {
        // Goal: per-volume series exist for the first N volumes only; every request counts
        // in the frontend totals; errors count requests but no bytes.
        let f = FrontendStats::new("nbd", 1);
        let a = f.connection("a");
        let b = f.connection("b");
        let t = Instant::now();
        a.record(Op::Write, 4096, t, true);
        b.record(Op::Write, 4096, t, true);
        b.record(Op::Read, 512, t, false);
        assert_eq!(f.all().op(Op::Write).bytes.load(Ordering::Relaxed), 8192);
        assert_eq!(f.all().op(Op::Read).errors.load(Ordering::Relaxed), 1);
        assert_eq!(f.all().op(Op::Read).bytes.load(Ordering::Relaxed), 0);
        assert!(f.volume("b").is_none());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(FrontendCollector::new(vec![f])));
        let text = crate::render(&registry);
        assert!(
            text.contains("basalt_frontend_requests_total{frontend=\"nbd\",op=\"write\"} 2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "basalt_volume_bytes_total{frontend=\"nbd\",volume=\"a\",op=\"write\"} 4096\n"
            ),
            "{text}"
        );
        assert!(!text.contains("volume=\"b\""), "{text}");
        assert!(text
            .contains("basalt_frontend_request_seconds_count{frontend=\"nbd\",op=\"write\"} 2\n"));
    }
}
