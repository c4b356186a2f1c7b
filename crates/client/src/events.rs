//! Cluster events (`basalt status --watch`, like `ceph -w`): what changed between two status
//! reports — OSDs up, down, in, out; PG state changes; recovery starting and finishing;
//! slow operations, each once (OSDs keep reporting them, finished ones for a minute).

use crate::status::{SlowOpStatus, StatusReport};
use std::collections::HashMap;

/// One change between two reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    OsdUp {
        osd: u32,
    },
    OsdDown {
        osd: u32,
    },
    OsdIn {
        osd: u32,
    },
    OsdOut {
        osd: u32,
    },
    /// An OSD the previous report did not have.
    OsdNew {
        osd: u32,
    },
    /// A PG changed state (`from` None: the PG is new).
    PgState {
        pg: String,
        from: Option<String>,
        to: String,
    },
    /// Object copies to recover appeared.
    RecoveryStarted {
        degraded_objects: u64,
    },
    /// Nothing is left to recover.
    RecoveryFinished,
    MapEpoch {
        epoch: u32,
    },
    /// An operation an OSD reports slow, not in the previous report.
    SlowOp {
        osd: u32,
        op: SlowOpStatus,
    },
}

impl std::fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterEvent::OsdUp { osd } => write!(f, "osd.{osd} up"),
            ClusterEvent::OsdDown { osd } => write!(f, "osd.{osd} down"),
            ClusterEvent::OsdIn { osd } => write!(f, "osd.{osd} in"),
            ClusterEvent::OsdOut { osd } => write!(f, "osd.{osd} out"),
            ClusterEvent::OsdNew { osd } => write!(f, "osd.{osd} joined"),
            ClusterEvent::PgState { pg, from, to } => match from {
                Some(from) => write!(f, "pg {pg}: {from} -> {to}"),
                None => write!(f, "pg {pg}: {to}"),
            },
            ClusterEvent::RecoveryStarted { degraded_objects } => {
                write!(
                    f,
                    "recovery started: {degraded_objects} object copies to recover"
                )
            }
            ClusterEvent::RecoveryFinished => write!(f, "recovery finished"),
            ClusterEvent::MapEpoch { epoch } => write!(f, "map epoch {epoch}"),
            ClusterEvent::SlowOp { osd, op } => {
                write!(
                    f,
                    "slow op on osd.{osd}: {}{} obj {}",
                    if op.replica { "replica " } else { "" },
                    op.op,
                    op.object
                )?;
                if let Some(volume) = &op.volume {
                    write!(f, " (volume {volume})")?;
                }
                write!(
                    f,
                    " pg {}, {:.1} s in '{}'",
                    op.pg,
                    op.age_ms as f64 / 1000.0,
                    op.stage_text()
                )?;
                if !op.in_flight {
                    f.write_str(" (finished since)")?;
                }
                Ok(())
            }
        }
    }
}

/// What changed from `prev` to `next`, OSD events first, then PGs in PG order, recovery,
/// then slow operations.
pub fn events(prev: &StatusReport, next: &StatusReport) -> Vec<ClusterEvent> {
    let mut out = Vec::new();
    if next.map_epoch != prev.map_epoch {
        out.push(ClusterEvent::MapEpoch {
            epoch: next.map_epoch,
        });
    }
    let before: HashMap<u32, (bool, bool)> =
        prev.osds.iter().map(|o| (o.id, (o.up, o.is_in))).collect();
    for o in &next.osds {
        let osd = o.id;
        match before.get(&osd) {
            None => out.push(ClusterEvent::OsdNew { osd }),
            Some(&(up, is_in)) => {
                if up != o.up {
                    out.push(if o.up {
                        ClusterEvent::OsdUp { osd }
                    } else {
                        ClusterEvent::OsdDown { osd }
                    });
                }
                if is_in != o.is_in {
                    out.push(if o.is_in {
                        ClusterEvent::OsdIn { osd }
                    } else {
                        ClusterEvent::OsdOut { osd }
                    });
                }
            }
        }
    }
    let states: HashMap<&str, &str> = prev
        .pgs
        .iter()
        .map(|p| (p.pg.as_str(), p.state.as_str()))
        .collect();
    for p in &next.pgs {
        let from = states.get(p.pg.as_str()).copied();
        if from != Some(p.state.as_str()) {
            out.push(ClusterEvent::PgState {
                pg: p.pg.clone(),
                from: from.map(String::from),
                to: p.state.clone(),
            });
        }
    }
    match (prev.degraded_objects, next.degraded_objects) {
        (0, n) if n > 0 => out.push(ClusterEvent::RecoveryStarted {
            degraded_objects: n,
        }),
        (n, 0) if n > 0 => out.push(ClusterEvent::RecoveryFinished),
        _ => {}
    }
    // An operation is known by its OSD, the OSD's run and its id within the run.
    let seen: std::collections::HashSet<(u32, u64, u64)> = prev
        .osds
        .iter()
        .flat_map(|o| o.slow_ops.iter().map(|op| (o.id, o.incarnation, op.id)))
        .collect();
    for o in &next.osds {
        for op in &o.slow_ops {
            if !seen.contains(&(o.id, o.incarnation, op.id)) {
                out.push(ClusterEvent::SlowOp {
                    osd: o.id,
                    op: op.clone(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::{OsdStatus, PgStatus};

    fn report(osds: &[(u32, bool, bool)], pgs: &[(&str, &str)], degraded: u64) -> StatusReport {
        let json = serde_json::json!({
            "map_epoch": 1, "osds": [], "pools": [], "pgs_total": 0, "pgs_active_clean": 0,
            "pgs_degraded": 0, "pgs_inactive": 0, "volumes": 0, "volume_bytes": 0,
        });
        let mut r: StatusReport = serde_json::from_value(json).unwrap();
        r.osds = osds
            .iter()
            .map(|&(id, up, is_in)| OsdStatus {
                id,
                host: "h".into(),
                location: String::new(),
                class: String::new(),
                addr: "a".into(),
                up,
                is_in,
                incarnation: 0,
                io: String::new(),
                unflushed: false,
                version: String::new(),
                wire: 0,
                store_format: 0,
                stats: None,
                slow_ops: Vec::new(),
                error: None,
            })
            .collect();
        r.pgs = pgs
            .iter()
            .map(|&(pg, state)| PgStatus {
                pg: pg.into(),
                state: state.into(),
                acting: vec![],
                interval: 1,
                degraded_objects: 0,
                unfound_objects: 0,
                unfound_waiting: Vec::new(),
            })
            .collect();
        r.degraded_objects = degraded;
        r
    }

    #[test]
    fn changes_become_events() {
        // Goal: an OSD going down and out, a PG degrading and recovery starting are each
        // one event; identical reports give none; recovery's end is reported.
        let a = report(
            &[(0, true, true), (1, true, true)],
            &[("1.0", "active+clean")],
            0,
        );
        let b = report(
            &[(0, true, true), (1, false, false)],
            &[("1.0", "active+degraded")],
            5,
        );
        assert!(events(&a, &a).is_empty());
        let e: Vec<String> = events(&a, &b).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            e,
            [
                "osd.1 down",
                "osd.1 out",
                "pg 1.0: active+clean -> active+degraded",
                "recovery started: 5 object copies to recover"
            ]
        );
        let e = events(&b, &a);
        assert!(e.contains(&ClusterEvent::RecoveryFinished), "{e:?}");
        assert!(e.contains(&ClusterEvent::OsdUp { osd: 1 }), "{e:?}");
    }

    #[test]
    fn a_slow_op_is_one_event() {
        // Goal: a slow op appearing in an OSD's report is one event naming the OSD, the
        // op, its object, volume, PG and stage; the same op in the next report is none.
        let a = report(&[(0, true, true), (1, true, true)], &[], 0);
        let mut b = report(&[(0, true, true), (1, true, true)], &[], 0);
        b.osds[1].slow_ops.push(SlowOpStatus {
            id: 9,
            op: "write".into(),
            replica: false,
            object: "1000000000003:4".into(),
            volume: Some("vol".into()),
            pg: "1.a".into(),
            stage: "replica".into(),
            peer: Some(0),
            age_ms: 6_200,
            in_flight: true,
        });
        let e: Vec<String> = events(&a, &b).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            e,
            [
                "slow op on osd.1: write obj 1000000000003:4 (volume vol) pg 1.a, 6.2 s in \
              'replica osd.0'"
            ]
        );
        let mut c = report(&[(0, true, true), (1, true, true)], &[], 0);
        c.osds[1].slow_ops = b.osds[1].slow_ops.clone();
        c.osds[1].slow_ops[0].age_ms = 9_000;
        assert!(events(&b, &c).is_empty(), "reported once");
    }
}
