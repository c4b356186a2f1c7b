//! Health checks of a status report, as Ceph's `health detail` words them: each has a code,
//! a one-line summary, the OSDs or PGs concerned, and the command or action that clears it.
//! The cluster's health is the worst check an operator has not muted.

use crate::cluster::OsdStats;
use crate::status::StatusReport;
use basalt_meta::schema::ClusterSettings;
use serde::{Deserialize, Serialize};

/// How bad a check is: a warning (the cluster serves, something needs attention) or an
/// error (I/O blocks, data is unreadable, writes are about to fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warn,
    Err,
}

/// One thing wrong with the cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HealthCheck {
    /// Stable name for scripts and `basalt health mute` (`OSD_DOWN`, `OSD_NEARFULL`, ...).
    pub code: String,
    pub severity: Severity,
    pub summary: String,
    /// One line per OSD, PG or pool concerned.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detail: Vec<String>,
    /// What clears it.
    pub fix: String,
    /// Muted by an operator: shown, but not counted in the health.
    #[serde(default)]
    pub muted: bool,
}

/// Every code a check may have, for `basalt health mute` to refuse a typo.
pub const CODES: [&str; 12] = [
    "NOOUT",
    "VERSIONS_MIXED",
    "HOST_LOCATION_MIXED",
    "PG_INACTIVE",
    "PG_UNFOUND",
    "OSD_DOWN",
    "OSD_FULL",
    "OSD_NEARFULL",
    "PG_NOT_CLEAN",
    "POOL_UNPLACEABLE",
    "SLOW_OPS",
    "OSD_NO_STATS",
];

/// How full an OSD is: the fraction of its object slots in use. Every object takes a whole
/// slot, so slots run out before bytes do when objects are partly written; a write that
/// needs a new object fails with ENOSPC once none is free.
pub fn fullness(stats: &OsdStats) -> f64 {
    if stats.slots_total > 0 {
        stats.slots_total.saturating_sub(stats.slots_free) as f64 / stats.slots_total as f64
    } else if stats.capacity_bytes > 0 {
        stats.used_bytes as f64 / stats.capacity_bytes as f64
    } else {
        0.0
    }
}

/// The checks that fail in `r`, worst first, with the mutes of `settings` in force at
/// `now` (seconds since the Unix epoch) applied.
pub fn checks(r: &StatusReport, settings: &ClusterSettings, now: u64) -> Vec<HealthCheck> {
    let mut out = Vec::new();
    pg_checks(r, &mut out);
    osd_checks(r, &mut out);
    fullness_checks(r, settings, &mut out);
    if !r.unplaceable.is_empty() {
        out.push(check(
            "POOL_UNPLACEABLE",
            Severity::Warn,
            format!(
                "{} pools cannot place all their copies",
                r.unplaceable.len()
            ),
            r.unplaceable.clone(),
            "add OSDs or hosts in the failure domains the pool needs, or create the pool \
             with a smaller size",
        ));
    }
    let slow = r.slow_ops_in_flight();
    if !slow.is_empty() {
        let detail = slow
            .iter()
            .map(|(osd, op)| {
                format!(
                    "osd.{osd}: {} of {} in pg {} for {:.1} s, in '{}'",
                    op.op,
                    op.object,
                    op.pg,
                    op.age_ms as f64 / 1000.0,
                    op.stage_text()
                )
            })
            .collect();
        out.push(check(
            "SLOW_OPS",
            Severity::Warn,
            format!("{} operations slow", slow.len()),
            detail,
            "look at the OSDs named (their logs, `basalt osd ls`): a slow or failing disk, an \
             overloaded host, or a peer that stopped answering",
        ));
    }
    versions_check(r, &mut out);
    locations_check(r, &mut out);
    if settings.noout {
        out.push(check(
            "NOOUT",
            Severity::Warn,
            "the noout flag is set: OSDs that stay down are never marked out, and their data \
             is not re-replicated"
                .into(),
            Vec::new(),
            "`basalt cluster unset noout` once the maintenance is over",
        ));
    }
    for c in &mut out {
        c.muted = settings
            .mutes
            .iter()
            .any(|m| m.code == c.code && m.until.is_none_or(|until| now < until));
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.severity));
    out
}

/// `HEALTH_OK`, `HEALTH_WARN` or `HEALTH_ERR`: the worst check not muted.
pub fn health_word(checks: &[HealthCheck]) -> &'static str {
    match checks.iter().filter(|c| !c.muted).map(|c| c.severity).max() {
        None => "HEALTH_OK",
        Some(Severity::Warn) => "HEALTH_WARN",
        Some(Severity::Err) => "HEALTH_ERR",
    }
}

fn check(
    code: &str,
    severity: Severity,
    summary: String,
    detail: Vec<String>,
    fix: &str,
) -> HealthCheck {
    HealthCheck {
        code: code.into(),
        severity,
        summary,
        detail,
        fix: fix.into(),
        muted: false,
    }
}

fn pg_checks(r: &StatusReport, out: &mut Vec<HealthCheck>) {
    if r.pgs_inactive > 0 {
        out.push(check(
            "PG_INACTIVE",
            Severity::Err,
            format!(
                "{} PGs have fewer than min_size OSDs up: their I/O waits",
                r.pgs_inactive
            ),
            r.below_min_size.clone(),
            "start the down OSDs they wait for (`basalt osd ls`)",
        ));
    }
    if r.unfound_objects > 0 {
        out.push(check(
            "PG_UNFOUND",
            Severity::Err,
            format!(
                "{} erasure-coded stripes lack chunks of their newest write: their I/O waits",
                r.unfound_objects
            ),
            r.unfound.clone(),
            "start the OSDs they wait for, or give the stripes up with `basalt pg \
             mark-unfound-lost PG`",
        ));
    }
    let not_clean = r
        .pgs_total
        .saturating_sub(r.pgs_active_clean + r.pgs_inactive);
    if not_clean > 0 {
        let mut parts = Vec::new();
        for (n, state) in [
            (r.pgs_recovering, "recovering"),
            (r.pgs_degraded, "degraded"),
            (r.pgs_peering, "peering"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {state}"));
            }
        }
        let mut summary = format!("{not_clean} PGs not active+clean ({})", parts.join(", "));
        if r.degraded_objects > 0 {
            summary.push_str(&format!(
                ", {} object copies to recover",
                r.degraded_objects
            ));
        }
        out.push(check(
            "PG_NOT_CLEAN",
            Severity::Warn,
            summary,
            Vec::new(),
            "recovery runs by itself; PGs stay degraded while their OSDs are down and in \
             (they are marked out after --out-after, or now with `basalt osd out ID`)",
        ));
    }
}

fn osd_checks(r: &StatusReport, out: &mut Vec<HealthCheck>) {
    let down: Vec<String> = r
        .osds
        .iter()
        .filter(|o| !o.up && o.error.is_none())
        .map(|o| {
            let state = if o.is_in { "in" } else { "out" };
            format!("osd.{} on host {} is down ({state})", o.id, o.host)
        })
        .collect();
    if !down.is_empty() {
        out.push(check(
            "OSD_DOWN",
            Severity::Warn,
            format!("{} OSDs down", down.len()),
            down,
            "start it again (`systemctl start basalt-osd@NAME` on its host); one gone for \
             good: `basalt osd drain ID`, then `basalt osd rm ID` (docs/operations.md, \
             \"Removing a disk or a host\")",
        ));
    }
    let silent: Vec<String> = r
        .osds
        .iter()
        .filter_map(|o| {
            Some(format!(
                "osd.{} on host {}: {}",
                o.id,
                o.host,
                o.error.as_ref()?
            ))
        })
        .collect();
    if !silent.is_empty() {
        out.push(check(
            "OSD_NO_STATS",
            Severity::Warn,
            format!("{} OSDs up in the map did not answer", silent.len()),
            silent,
            "check the OSD's host and logs: a frozen or overloaded OSD is marked down by its \
             peers if it stays so",
        ));
    }
}

fn fullness_checks(r: &StatusReport, s: &ClusterSettings, out: &mut Vec<HealthCheck>) {
    let mut full = Vec::new();
    let mut nearfull = Vec::new();
    for o in &r.osds {
        let Some(stats) = &o.stats else { continue };
        let f = fullness(stats);
        let line = format!(
            "osd.{} on host {} is {:.1}% full ({} of {} object slots in use)",
            o.id,
            o.host,
            f * 100.0,
            stats.slots_total.saturating_sub(stats.slots_free),
            stats.slots_total
        );
        if f >= s.full_ratio {
            full.push(line);
        } else if f >= s.nearfull_ratio {
            nearfull.push(line);
        }
    }
    let more_room = "add OSDs (docs/operations.md, \"Adding a disk or a host\") or remove \
                     volumes, snapshots or objects";
    if !full.is_empty() {
        out.push(check(
            "OSD_FULL",
            Severity::Err,
            format!(
                "{} OSDs at or past the full ratio ({:.0}%): writes that need new objects \
                 fail with ENOSPC",
                full.len(),
                s.full_ratio * 100.0
            ),
            full,
            more_room,
        ));
    }
    if !nearfull.is_empty() {
        out.push(check(
            "OSD_NEARFULL",
            Severity::Warn,
            format!(
                "{} OSDs at or past the near-full ratio ({:.0}%)",
                nearfull.len(),
                s.nearfull_ratio * 100.0
            ),
            nearfull,
            more_room,
        ));
    }
}

/// Hosts whose OSDs name different locations: a host stands in one rack of one zone, and
/// a pool with failure domain rack or zone could otherwise keep two copies on one host.
fn locations_check(r: &StatusReport, out: &mut Vec<HealthCheck>) {
    let mut by_host: std::collections::BTreeMap<&str, Vec<(u32, &str)>> = Default::default();
    for o in &r.osds {
        by_host
            .entry(o.host.as_str())
            .or_default()
            .push((o.id, o.location.as_str()));
    }
    let detail: Vec<String> = by_host
        .iter()
        .filter(|(_, osds)| osds.iter().any(|(_, l)| *l != osds[0].1))
        .map(|(host, osds)| {
            let each: Vec<String> = osds
                .iter()
                .map(|(id, l)| format!("osd.{id} {}", if l.is_empty() { "(none)" } else { l }))
                .collect();
            format!("host {host}: {}", each.join(", "))
        })
        .collect();
    if detail.is_empty() {
        return;
    }
    out.push(check(
        "HOST_LOCATION_MIXED",
        Severity::Warn,
        format!("{} hosts' OSDs disagree on their location", detail.len()),
        detail,
        "restart the host's OSDs with one --location (basalt.toml's [osd] location)",
    ));
}

/// OSDs running different releases, commits or formats: normal during a rolling upgrade,
/// worth a warning otherwise.
fn versions_check(r: &StatusReport, out: &mut Vec<HealthCheck>) {
    let mut by_version: std::collections::BTreeMap<String, Vec<u32>> = Default::default();
    for o in r.osds.iter().filter(|o| o.up && !o.version.is_empty()) {
        let key = format!(
            "{} (wire {}, store format {})",
            o.version, o.wire, o.store_format
        );
        by_version.entry(key).or_default().push(o.id);
    }
    if by_version.len() < 2 {
        return;
    }
    let detail = by_version
        .iter()
        .map(|(version, ids)| {
            let ids: Vec<String> = ids.iter().map(|id| format!("osd.{id}")).collect();
            format!("{version}: {}", ids.join(", "))
        })
        .collect();
    out.push(check(
        "VERSIONS_MIXED",
        Severity::Warn,
        format!("OSDs run {} different versions", by_version.len()),
        detail,
        "finish the upgrade host by host (docs/operations.md, \"Upgrading\")",
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::schema::HealthMute;

    /// A healthy report of three OSDs with `used` of 100 object slots in use each.
    fn report(used: [u64; 3]) -> StatusReport {
        let osds: Vec<serde_json::Value> = (0..3)
            .map(|id| {
                serde_json::json!({
                    "id": id, "host": format!("h{id}"), "addr": "a", "up": true, "is_in": true,
                    // Bytes say little: slots are what runs out.
                    "stats": {"capacity_bytes": 1000, "used_bytes": 1, "slots_total": 100,
                              "slots_free": 100 - used[id as usize], "objects": 2},
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "map_epoch": 1, "osds": osds, "pools": [], "pgs_total": 8,
            "pgs_active_clean": 8, "pgs_degraded": 0, "pgs_inactive": 0, "volumes": 0,
            "volume_bytes": 0,
        }))
        .expect("a minimal report parses")
    }

    fn codes(checks: &[HealthCheck]) -> Vec<(&str, bool)> {
        checks.iter().map(|c| (c.code.as_str(), c.muted)).collect()
    }

    /// Goal: the reported bug — writes failing with ENOSPC while status said HEALTH_OK at
    /// 87% of bytes — cannot happen: fullness counts object slots, an OSD at the near-full
    /// ratio warns and one at the full ratio is an error, with the ratios settable.
    #[test]
    fn full_and_nearfull_osds_by_slots() {
        let s = ClusterSettings::default();
        let r = report([50, 85, 100]);
        let c = checks(&r, &s, 0);
        assert_eq!(codes(&c), [("OSD_FULL", false), ("OSD_NEARFULL", false)]);
        assert_eq!(health_word(&c), "HEALTH_ERR");
        assert!(
            c[0].detail[0].starts_with("osd.2 on host h2 is 100.0% full"),
            "{c:?}"
        );
        assert!(
            c[0].summary.contains("(95%)") && c[0].summary.contains("ENOSPC"),
            "{c:?}"
        );
        assert!(
            c[1].detail[0].starts_with("osd.1 on host h1 is 85.0% full"),
            "{c:?}"
        );
        assert_eq!(
            health_word(&checks(&report([50, 84, 84]), &s, 0)),
            "HEALTH_OK"
        );
        let s = ClusterSettings {
            nearfull_ratio: 0.5,
            full_ratio: 0.9,
            ..s
        };
        let c = checks(&report([50, 84, 94]), &s, 0);
        assert_eq!(codes(&c), [("OSD_FULL", false), ("OSD_NEARFULL", false)]);
        assert_eq!(c[1].detail.len(), 2);
    }

    /// Goal: a muted check shows as muted and does not count toward the health until its
    /// mute ends; a mute of another code changes nothing.
    #[test]
    fn mutes_hide_a_check_until_they_end() {
        let mut r = report([10, 10, 10]);
        r.osds[1].up = false;
        let mut s = ClusterSettings::default();
        assert_eq!(health_word(&checks(&r, &s, 100)), "HEALTH_WARN");
        s.mutes.push(HealthMute {
            code: "OSD_DOWN".into(),
            until: Some(200),
        });
        let c = checks(&r, &s, 100);
        assert_eq!(codes(&c), [("OSD_DOWN", true)]);
        assert_eq!(health_word(&c), "HEALTH_OK");
        assert_eq!(
            health_word(&checks(&r, &s, 200)),
            "HEALTH_WARN",
            "mute ended"
        );
        s.mutes[0] = HealthMute {
            code: "OSD_FULL".into(),
            until: None,
        };
        assert_eq!(health_word(&checks(&r, &s, 100)), "HEALTH_WARN");
    }

    /// Goal: OSDs on two builds warn VERSIONS_MIXED naming which runs which; one build, or
    /// versions unknown (older OSDs), say nothing.
    #[test]
    fn mixed_versions_warn() {
        let mut r = report([1, 1, 1]);
        let s = ClusterSettings::default();
        assert!(checks(&r, &s, 0).is_empty());
        for o in &mut r.osds {
            o.version = "0.1.0 (aaaa)".into();
            o.wire = 2;
            o.store_format = 2;
        }
        assert!(checks(&r, &s, 0).is_empty());
        r.osds[2].version = "0.1.0 (bbbb)".into();
        let c = checks(&r, &s, 0);
        assert_eq!(codes(&c), [("VERSIONS_MIXED", false)]);
        assert_eq!(
            c[0].detail,
            [
                "0.1.0 (aaaa) (wire 2, store format 2): osd.0, osd.1",
                "0.1.0 (bbbb) (wire 2, store format 2): osd.2"
            ]
        );
    }

    /// Goal: every check says what clears it, and every code it can produce is one
    /// `basalt health mute` accepts.
    #[test]
    fn every_check_has_a_fix_and_a_known_code() {
        let mut r = report([100, 90, 10]);
        r.osds[2].up = false;
        r.pgs_inactive = 1;
        r.pgs_degraded = 2;
        r.pgs_active_clean = 5;
        r.unfound_objects = 3;
        r.unplaceable.push("pool x needs 3 hosts".into());
        r.osds[0].error = Some("no answer in 2000 ms".into());
        let c = checks(&r, &ClusterSettings::default(), 0);
        assert!(c.len() >= 7, "{c:?}");
        for check in &c {
            assert!(CODES.contains(&check.code.as_str()), "{}", check.code);
            assert!(
                !check.fix.is_empty() && !check.summary.is_empty(),
                "{check:?}"
            );
        }
        assert_eq!(c[0].severity, Severity::Err, "worst first");
    }

    /// Goal: OSDs of one host naming different locations are a warning naming each; one
    /// location per host is not.
    #[test]
    fn a_host_in_two_racks_is_a_warning() {
        let mut r = report([1, 1, 1]);
        for o in &mut r.osds {
            o.host = "h".into();
            o.location = "rack=r1".into();
        }
        assert!(checks(&r, &ClusterSettings::default(), 0).is_empty());
        r.osds[2].location = "rack=r2".into();
        let found = checks(&r, &ClusterSettings::default(), 0);
        assert_eq!(codes(&found), [("HOST_LOCATION_MIXED", false)]);
        assert_eq!(
            found[0].detail,
            ["host h: osd.0 rack=r1, osd.1 rack=r1, osd.2 rack=r2"]
        );
    }
}
