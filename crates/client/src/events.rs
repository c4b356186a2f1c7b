//! Cluster events (`basalt status --watch`, like `ceph -w`): what changed between two status
//! reports — OSDs up, down, in, out; PG state changes; recovery starting and finishing.

use crate::status::StatusReport;
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
        }
    }
}

/// What changed from `prev` to `next`, OSD events first, then PGs in PG order, recovery last.
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
                addr: "a".into(),
                up,
                is_in,
                incarnation: 0,
                stats: None,
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
}
