//! The map the cluster's records imply: a pure function, so it is tested without a cluster.

use basalt_meta::schema::{AliveRecord, FailureReport, OsdRecord, PoolRecord};
use basalt_placement::{ClusterMap, FailureDomain, OsdInfo, PoolSpec};
use basalt_proto::OsdId;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// When the monitor first saw each OSD down (monitor-local: a new monitor starts counting
/// afresh, which only delays marking an OSD out).
#[derive(Default, Debug)]
pub struct DownClock {
    since_ms: HashMap<OsdId, u64>,
}

impl DownClock {
    /// When the out timer of an OSD that `map` shows down and still in ends (None: no such
    /// OSD, or no timer: `noout`).
    pub fn next_out(&self, map: &ClusterMap, out_after_ms: Option<u64>) -> Option<u64> {
        let after = out_after_ms?;
        self.since_ms
            .iter()
            .filter(|(id, _)| map.osds.get(id).is_some_and(|o| !o.up && o.is_in))
            .map(|(_, since)| since.saturating_add(after))
            .min()
    }
}

/// Placement weight of an OSD: its capacity in GiB, at least 1.
fn weight(capacity_bytes: u64) -> u64 {
    (capacity_bytes >> 30).max(1)
}

fn pool_spec(p: &PoolRecord) -> PoolSpec {
    PoolSpec {
        id: p.id,
        name: p.name.clone(),
        size: p.size,
        min_size: p.min_size,
        pg_count: p.pg_count,
        // A record names a valid domain (checked when written); anything else is read as
        // the safest, host.
        failure_domain: FailureDomain::parse(&p.failure_domain).unwrap_or(FailureDomain::Host),
        object_size: p.object_size,
        ec: p.ec,
        device_class: p.device_class.clone(),
        pg_count_since: 0,
        pg_count_before: 0,
    }
}

/// `p`'s spec in the map following `current` (at `epoch`): a PG count that differs from
/// the current map's begins a new era there (docs/design.md, "PG split and merge"); an
/// unchanged one keeps its era.
fn pool_spec_at(p: &PoolRecord, current: &ClusterMap, epoch: u32) -> PoolSpec {
    let mut spec = pool_spec(p);
    if let Some(old) = current.pools.get(&p.id) {
        if old.pg_count == p.pg_count {
            spec.pg_count_since = old.pg_count_since;
            spec.pg_count_before = old.pg_count_before;
        } else {
            spec.pg_count_since = epoch;
            spec.pg_count_before = old.pg_count;
        }
    }
    spec
}

/// What placement depends on of one OSD: id, host, weight, location and device class.
type PlacementOsd<'a> = (OsdId, &'a str, u64, &'a BTreeMap<String, String>, &'a str);

/// What placement depends on: the OSDs that are in and the pools.
fn placement_inputs(m: &ClusterMap) -> (Vec<PlacementOsd<'_>>, Vec<&PoolSpec>) {
    let osds = m
        .osds
        .values()
        .filter(|o| o.is_in)
        .map(|o| {
            (
                o.id,
                o.host.as_str(),
                o.weight,
                &o.location,
                o.class.as_str(),
            )
        })
        .collect();
    (osds, m.pools.values().collect())
}

/// The map implied by the records, starting from `current`. Returns None when nothing
/// changed; otherwise the new map at `current.epoch + 1`.
///
/// An OSD is up while its liveness record exists. It is in while up (unless an operator
/// marked it out), and stays in while down until `out_after_ms` passed (None: never, the
/// cluster's `noout` flag), so a restart moves no data; once out, its PGs are placed elsewhere and recovered there. An OSD in
/// `reported` (taken down by its peers' reports, its liveness record still standing) is down
/// too, and `unflushed` until its record says it flushed its store after going down.
#[allow(clippy::too_many_arguments)] // One input per kind of record, and the clock.
pub fn derive_map(
    current: &ClusterMap,
    osds: &[OsdRecord],
    alive: &BTreeMap<OsdId, AliveRecord>,
    reported: &BTreeMap<OsdId, AliveRecord>,
    pools: &[PoolRecord],
    clock: &mut DownClock,
    now_ms: u64,
    out_after_ms: Option<u64>,
) -> Option<ClusterMap> {
    let mut m = current.clone();
    m.osds.retain(|id, _| osds.iter().any(|r| r.id == *id));
    for rec in osds {
        let info = m.osds.entry(rec.id).or_insert_with(|| OsdInfo {
            id: rec.id,
            host: rec.host.clone(),
            addr: String::new(),
            weight: weight(rec.capacity_bytes),
            up: false,
            is_in: false,
            incarnation: 0,
            io: String::new(),
            up_from: 0,
            unflushed: false,
            location: BTreeMap::new(),
            class: String::new(),
        });
        info.host = rec.host.clone();
        info.location = rec.location.clone();
        info.class = rec.class.clone();
        info.weight = weight(rec.capacity_bytes);
        match alive.get(&rec.id) {
            Some(a) => {
                clock.since_ms.remove(&rec.id);
                if !info.up || info.incarnation != a.incarnation || info.up_from == 0 {
                    info.up_from = current.epoch + 1;
                }
                info.up = true;
                info.addr = a.addr.clone();
                info.incarnation = a.incarnation;
                info.io = a.io.clone();
                info.is_in = !rec.admin_out;
                info.unflushed = false;
            }
            None => {
                let since = *clock.since_ms.entry(rec.id).or_insert(now_ms);
                info.up = false;
                // Still running, marked down by reports: it flushes once it sees that, and
                // says so with the epoch of a map newer than the one it came up in.
                info.unflushed = reported.get(&rec.id).is_some_and(|a| {
                    a.incarnation == info.incarnation && a.flushed_down <= info.up_from
                });
                let timed_out =
                    out_after_ms.is_some_and(|after| now_ms.saturating_sub(since) >= after);
                if rec.admin_out || timed_out {
                    info.is_in = false;
                }
            }
        }
    }
    m.pools = pools
        .iter()
        .map(|p| (p.id, pool_spec_at(p, current, current.epoch + 1)))
        .collect();
    if placement_inputs(&m) != placement_inputs(current) || m.pgs.len() != m.pools.len() {
        m.recompute();
    } else {
        m.update_acting();
    }
    m.epoch = current.epoch + 1;
    m.carry_intervals(current);
    let changed = ClusterMap {
        epoch: current.epoch,
        ..m.clone()
    } != *current;
    changed.then_some(m)
}

/// Failure reports as the monitor reads them: target → reporter → report.
pub type Reports = BTreeMap<OsdId, BTreeMap<OsdId, FailureReport>>;

/// The OSDs that are alive (their liveness record exists) but that enough of their peers
/// report unreachable: the monitor treats them as down. A report counts when it names the
/// target's current incarnation and its reporter is alive and not itself taken down. Enough
/// is `min_reporters`, lowered to the number of other alive OSDs, never below 1.
///
/// A partition makes both sides report each other; the side reported by more OSDs — the
/// smaller one — goes down: targets are judged most-reported first, and once one is down its
/// own reports no longer count. (An OSD cut off from three peers has three reporters, each
/// peer only its one; a host of two OSDs cut off from four has four each, the four only two.)
/// An even split takes down the side judged first (lowest ids); the peer leases keep either
/// outcome safe.
pub fn down_by_reports(
    alive: &BTreeMap<OsdId, AliveRecord>,
    reports: &Reports,
    min_reporters: usize,
) -> BTreeSet<OsdId> {
    let need = |target: OsdId| {
        let others = alive.keys().filter(|id| **id != target).count();
        min_reporters.min(others).max(1)
    };
    let reporters = |target: OsdId, down: &BTreeSet<OsdId>| -> usize {
        let Some(a) = alive.get(&target) else {
            return 0;
        };
        reports
            .get(&target)
            .into_iter()
            .flatten()
            .filter(|(reporter, r)| {
                **reporter != target
                    && alive.get(reporter).is_some_and(|ra| {
                        r.reporter_incarnation == 0 || r.reporter_incarnation == ra.incarnation
                    })
                    && !down.contains(reporter)
                    && r.target_incarnation == a.incarnation
            })
            .count()
    };
    let mut order: Vec<(usize, OsdId)> = reports
        .keys()
        .map(|t| (reporters(*t, &BTreeSet::new()), *t))
        .collect();
    order.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut down = BTreeSet::new();
    for (_, target) in order {
        if reporters(target, &down) >= need(target) {
            down.insert(target);
        }
    }
    down
}

/// When each OSD first became a candidate of [`down_by_reports`] (monitor-local time).
///
/// The reports of the two sides of a partition land over a few heartbeats, not at once.
/// Judged on the first ones alone, the wrong side could go down: a healthy OSD reported by
/// the two OSDs of a cut-off host before the four reports on each of those have arrived.
/// A candidate is marked down only once it has stayed one for the settle time, by which the
/// whole picture is in; one that stops being a candidate is forgotten. After a kill the
/// settle time costs nothing: the new primary waits out the dead one's peer lease anyway.
#[derive(Default, Debug)]
pub struct ReportSettle {
    since_ms: BTreeMap<OsdId, u64>,
}

impl ReportSettle {
    /// The candidates that have been candidates for at least `settle_ms` at `now_ms`, and
    /// when the next of the others ripens (None: no other).
    pub fn ripe(
        &mut self,
        candidates: &BTreeSet<OsdId>,
        now_ms: u64,
        settle_ms: u64,
    ) -> (BTreeSet<OsdId>, Option<u64>) {
        self.since_ms.retain(|id, _| candidates.contains(id));
        for id in candidates {
            self.since_ms.entry(*id).or_insert(now_ms);
        }
        let mut ripe = BTreeSet::new();
        let mut next = None::<u64>;
        for (id, since) in &self.since_ms {
            let at = since.saturating_add(settle_ms);
            if at <= now_ms {
                ripe.insert(*id);
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        (ripe, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_proto::PgId;

    fn osd(id: OsdId, host: &str) -> OsdRecord {
        OsdRecord {
            id,
            host: host.into(),
            capacity_bytes: 8 << 30,
            admin_out: false,
            ..OsdRecord::default()
        }
    }

    fn alive(addr: &str, incarnation: u64) -> AliveRecord {
        AliveRecord {
            flushed_down: 0,
            addr: addr.into(),
            incarnation,
            started: 0,
            metrics_addr: None,
            io: String::new(),
            ..AliveRecord::default()
        }
    }

    fn pool() -> PoolRecord {
        PoolRecord {
            id: 1,
            name: "rbd".into(),
            size: 3,
            min_size: 2,
            pg_count: 16,
            failure_domain: "host".into(),
            object_size: 128 << 10,
            ec: None,
            device_class: None,
        }
    }

    fn all_alive(n: u32) -> BTreeMap<OsdId, AliveRecord> {
        (0..n)
            .map(|i| (i, alive(&format!("10.0.0.{i}:7000"), 1)))
            .collect()
    }

    /// Goal: OSDs that come up are in, PGs get three distinct hosts, and an unchanged input
    /// gives no new epoch.
    #[test]
    fn first_map_and_idempotence() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m = first_map(&osds, &mut clock, 4);
        assert_eq!(m.epoch, 1);
        assert!(m.osds.values().all(|o| o.up && o.is_in));
        for pg in m.all_pgs() {
            let set = m.acting(pg).unwrap();
            assert_eq!(set.len(), 3);
            let hosts: std::collections::BTreeSet<_> =
                set.iter().map(|id| m.osds[id].host.clone()).collect();
            assert_eq!(hosts.len(), 3);
        }
        assert!(next_map(&m, &osds, &all_alive(4), &mut clock, 10).is_none());
    }

    /// Goal: an OSD's location and device class reach the map, and a change of either
    /// places the PGs again (a rack-domain pool then spreads over the new racks; a class
    /// the pool does not take leaves it).
    #[test]
    fn locations_and_classes_place_again() {
        let mut osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        for (i, o) in osds.iter_mut().enumerate() {
            o.location.insert("rack".into(), format!("r{}", i / 2));
            o.class = "ssd".into();
        }
        let mut clock = DownClock::default();
        let pools = |fd: &str, class: Option<&str>| {
            vec![PoolRecord {
                failure_domain: fd.into(),
                device_class: class.map(str::to_string),
                size: 2,
                ..pool()
            }]
        };
        let derive = |cur: &ClusterMap, osds: &[OsdRecord], pools: &[PoolRecord], c: &mut _| {
            derive_map(
                cur,
                osds,
                &all_alive(4),
                &BTreeMap::new(),
                pools,
                c,
                0,
                None,
            )
        };
        let m1 = derive(
            &ClusterMap::default(),
            &osds,
            &pools("rack", None),
            &mut clock,
        )
        .unwrap();
        assert_eq!(m1.osds[&3].location["rack"], "r1");
        assert_eq!(m1.osds[&3].class, "ssd");
        for pg in m1.all_pgs() {
            let racks: std::collections::BTreeSet<_> = m1
                .placement(pg)
                .unwrap()
                .iter()
                .map(|id| m1.osds[id].location["rack"].clone())
                .collect();
            assert_eq!(racks.len(), 2, "{pg:?}");
        }
        // osd.3 moves to a rack of its own: placed again.
        osds[3].location.insert("rack".into(), "r2".into());
        let m2 = derive(&m1, &osds, &pools("rack", None), &mut clock).unwrap();
        assert_ne!(m2.pgs, m1.pgs);
        // osd.0 is an hdd now; a pool of ssd keeps off it.
        osds[0].class = "hdd".into();
        let m3 = derive(&m2, &osds, &pools("osd", Some("ssd")), &mut clock).unwrap();
        assert!(m3
            .all_pgs()
            .all(|pg| !m3.placement(pg).unwrap().contains(&0)));
    }

    /// Goal: a down OSD leaves the acting sets at once but stays in (no data moves) until
    /// the out timer, then leaves the placement; coming back puts it in again.
    #[test]
    fn down_then_out_then_back() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 4);
        let mut some_alive = all_alive(4);
        some_alive.remove(&2);
        let m2 = next_map(&m1, &osds, &some_alive, &mut clock, 100).unwrap();
        assert!(!m2.osds[&2].up && m2.osds[&2].is_in);
        assert_eq!(m2.pgs, m1.pgs, "placement unchanged while in");
        assert!(m2.all_pgs().all(|pg| !m2.acting(pg).unwrap().contains(&2)));
        assert!(next_map(&m2, &osds, &some_alive, &mut clock, 500).is_none());
        let m3 = next_map(&m2, &osds, &some_alive, &mut clock, 1200).unwrap();
        assert!(!m3.osds[&2].is_in);
        assert!(m3
            .all_pgs()
            .all(|pg| !m3.placement(pg).unwrap().contains(&2)));
        let m4 = next_map(&m3, &osds, &all_alive(4), &mut clock, 1300).unwrap();
        assert!(m4.osds[&2].up && m4.osds[&2].is_in);
        assert_eq!(m4.pgs, m1.pgs, "deterministic placement returns");
    }

    /// Goal: with the cluster's noout flag (no out timer), a down OSD stays in however long
    /// it is down and placement never changes; once the flag is cleared, an OSD down longer
    /// than the timer goes out at once.
    #[test]
    fn noout_keeps_a_down_osd_in() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 4);
        let mut some_alive = all_alive(4);
        some_alive.remove(&2);
        let noout = |cur: &ClusterMap, clock: &mut DownClock, now| {
            derive_map(
                cur,
                &osds,
                &some_alive,
                &BTreeMap::new(),
                &[pool()],
                clock,
                now,
                None,
            )
        };
        let m2 = noout(&m1, &mut clock, 100).unwrap();
        assert!(!m2.osds[&2].up && m2.osds[&2].is_in);
        assert!(
            noout(&m2, &mut clock, 3_600_000).is_none(),
            "an hour later: no change"
        );
        let m3 = next_map(&m2, &osds, &some_alive, &mut clock, 3_600_100).unwrap();
        assert!(!m3.osds[&2].is_in, "out once noout is cleared");
        assert_eq!(m2.pgs, m1.pgs);
    }

    /// Goal: a restart (new incarnation, same address) is a new map epoch with the same
    /// placement, so the OSD's PGs start new intervals.
    #[test]
    fn restart_changes_incarnation() {
        let osds: Vec<_> = (0..3).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 3);
        let mut restarted = all_alive(3);
        restarted.insert(1, alive("10.0.0.1:7000", 2));
        let m2 = next_map(&m1, &osds, &restarted, &mut clock, 10).unwrap();
        assert_eq!(m2.epoch, 2);
        assert_eq!(m2.osds[&1].incarnation, 2);
        assert_eq!(m2.pgs, m1.pgs);
        assert!(m2.all_pgs().all(|pg| m2.interval(pg) == 2));
    }

    /// Goal: an OSD that drops out and returns as the same run (its lease expired while it
    /// was cut off) starts new intervals for its PGs both times, so an OSD that missed the
    /// map in between still sees that its PGs changed hands (regression: such an OSD kept
    /// peering its old interval forever). PGs it is not in keep their interval.
    #[test]
    fn down_and_back_as_same_run_is_a_new_interval() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 4);
        let mut some_alive = all_alive(4);
        some_alive.remove(&2);
        let m2 = next_map(&m1, &osds, &some_alive, &mut clock, 100).unwrap();
        let m3 = next_map(&m2, &osds, &all_alive(4), &mut clock, 200).unwrap();
        assert_eq!(m3.epoch, 3);
        for pg in m3.all_pgs() {
            assert_eq!(m3.acting(pg).unwrap(), m1.acting(pg).unwrap());
            let expect = if m1.acting(pg).unwrap().contains(&2) {
                3
            } else {
                1
            };
            assert_eq!(m3.interval(pg), expect, "{pg}");
        }
    }

    /// Goal: a PG count change begins an era at its epoch: every PG of the pool starts an
    /// interval there (even those whose acting set is unchanged), the map remembers the
    /// count before, and later maps keep the era until the count changes again.
    #[test]
    fn pg_count_change_begins_an_era() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 4);
        let spec = |m: &ClusterMap| {
            let p = &m.pools[&1];
            (p.pg_count, p.pg_count_before, p.pg_count_since)
        };
        assert_eq!(spec(&m1), (16, 0, 0));
        let derive = |cur: &ClusterMap, pgs: u32, clock: &mut DownClock| {
            let pool = PoolRecord {
                pg_count: pgs,
                ..pool()
            };
            let alive = all_alive(4);
            let (none, pools) = (BTreeMap::new(), [pool]);
            derive_map(cur, &osds, &alive, &none, &pools, clock, 10, Some(1000)).unwrap()
        };
        let m2 = derive(&m1, 64, &mut clock);
        assert_eq!(spec(&m2), (64, 16, 2));
        assert_eq!(m2.all_pgs().count(), 64);
        assert!(m2.all_pgs().all(|pg| m2.interval(pg) == 2));
        // Parents keep their placement: only the count changed for them.
        for index in 0..16 {
            let pg = PgId { pool: 1, index };
            assert_eq!(m2.placement(pg).unwrap(), m1.placement(pg).unwrap());
        }
        // An OSD restarting later keeps the era.
        let mut restarted = all_alive(4);
        restarted.insert(1, alive("10.0.0.1:7000", 2));
        let pools = [PoolRecord {
            pg_count: 64,
            ..pool()
        }];
        let m3 = derive_map(
            &m2,
            &osds,
            &restarted,
            &BTreeMap::new(),
            &pools,
            &mut clock,
            20,
            None,
        )
        .unwrap();
        assert_eq!(spec(&m3), (64, 16, 2));
        let m4 = derive(&m3, 16, &mut clock);
        assert_eq!(spec(&m4), (16, 64, 4));
        assert!(m4.all_pgs().all(|pg| m4.interval(pg) == 4));
    }

    /// The map after `cur` with `alive` up (none down by reports), one pool, out after 1 s.
    fn next_map(
        cur: &ClusterMap,
        osds: &[OsdRecord],
        alive: &BTreeMap<OsdId, AliveRecord>,
        clock: &mut DownClock,
        now_ms: u64,
    ) -> Option<ClusterMap> {
        derive_map(
            cur,
            osds,
            alive,
            &BTreeMap::new(),
            &[pool()],
            clock,
            now_ms,
            Some(1000),
        )
    }

    /// The first map of `osds` with the first `alive` of them up.
    fn first_map(osds: &[OsdRecord], clock: &mut DownClock, alive: u32) -> ClusterMap {
        next_map(&ClusterMap::default(), osds, &all_alive(alive), clock, 0).expect("a first map")
    }

    fn report(incarnation: u64) -> FailureReport {
        FailureReport {
            target_incarnation: incarnation,
            reporter_incarnation: 0,
            reason: "no answer".into(),
            since: 0,
        }
    }

    fn reports(pairs: &[(OsdId, OsdId)]) -> Reports {
        let mut r = Reports::new();
        for (target, reporter) in pairs {
            r.entry(*target).or_default().insert(*reporter, report(1));
        }
        r
    }

    /// Goal: two agreeing reporters take an alive OSD down; one is not enough; a report of
    /// an earlier run or from a dead reporter counts for nothing.
    #[test]
    fn reports_agree_before_an_osd_goes_down() {
        let alive = all_alive(4);
        assert!(down_by_reports(&alive, &reports(&[(2, 0)]), 2).is_empty());
        assert_eq!(
            down_by_reports(&alive, &reports(&[(2, 0), (2, 1)]), 2),
            BTreeSet::from([2])
        );
        let mut stale = reports(&[(2, 0), (2, 1)]);
        stale
            .get_mut(&2)
            .unwrap()
            .get_mut(&1)
            .unwrap()
            .target_incarnation = 7;
        assert!(down_by_reports(&alive, &stale, 2).is_empty());
        let mut three = all_alive(4);
        three.remove(&1);
        assert!(down_by_reports(&three, &reports(&[(2, 0), (2, 1)]), 2).is_empty());
        // A reporter that restarted: its earlier run's reports (still under that run's lease
        // for up to a TTL) count for nothing; its current run's do.
        let mut restarted = reports(&[(2, 0), (2, 1)]);
        by_1_of(&mut restarted).reporter_incarnation = alive[&1].incarnation + 1;
        assert!(down_by_reports(&alive, &restarted, 2).is_empty());
        by_1_of(&mut restarted).reporter_incarnation = alive[&1].incarnation;
        assert_eq!(down_by_reports(&alive, &restarted, 2), BTreeSet::from([2]));
    }

    fn by_1_of(r: &mut Reports) -> &mut FailureReport {
        r.get_mut(&2).unwrap().get_mut(&1).unwrap()
    }

    /// Goal: an OSD cut off from its peers reports them all, and is the only one to go down.
    #[test]
    fn a_cut_off_osd_does_not_take_its_peers_down() {
        let alive = all_alive(4);
        let pairs = [(3, 0), (3, 1), (3, 2), (0, 3), (1, 3), (2, 3)];
        assert_eq!(
            down_by_reports(&alive, &reports(&pairs), 2),
            BTreeSet::from([3])
        );
    }

    /// Goal: a host of two OSDs cut off from the other four goes down, not the four it
    /// reports (each of them has two reporters too).
    #[test]
    fn a_cut_off_host_goes_down_not_the_rest() {
        let alive = all_alive(6);
        let mut pairs = Vec::new();
        for cut in [4, 5] {
            for other in 0..4 {
                pairs.push((cut, other));
                pairs.push((other, cut));
            }
        }
        assert_eq!(
            down_by_reports(&alive, &reports(&pairs), 2),
            BTreeSet::from([4, 5])
        );
    }

    /// Goal: with only two OSDs up one report is enough, and two that report each other
    /// do not both go down.
    #[test]
    fn two_osds_split_lose_one() {
        let alive = all_alive(2);
        assert_eq!(
            down_by_reports(&alive, &reports(&[(1, 0)]), 2),
            BTreeSet::from([1])
        );
        assert_eq!(
            down_by_reports(&alive, &reports(&[(1, 0), (0, 1)]), 2).len(),
            1
        );
    }

    /// Goal: the first reports of a partition, two on a healthy OSD from a cut-off host,
    /// do not take it down: the host's own reports arrive within the settle time and the
    /// host goes down instead.
    #[test]
    fn reports_settle_before_an_osd_goes_down() {
        let alive = all_alive(6);
        let mut settle = ReportSettle::default();
        // t=0: osd.4 and osd.5 (the cut-off host) report osd.0 first.
        let early = down_by_reports(&alive, &reports(&[(0, 4), (0, 5)]), 2);
        assert_eq!(early, BTreeSet::from([0]), "a candidate on partial reports");
        let (ripe, next) = settle.ripe(&early, 0, 300);
        assert!(ripe.is_empty(), "not marked down before the settle time");
        assert_eq!(next, Some(300));
        // t=150: the rest of the reports are in.
        let mut pairs = Vec::new();
        for cut in [4, 5] {
            for other in 0..4 {
                pairs.push((cut, other));
                pairs.push((other, cut));
            }
        }
        let full = down_by_reports(&alive, &reports(&pairs), 2);
        assert_eq!(full, BTreeSet::from([4, 5]));
        let (ripe, next) = settle.ripe(&full, 150, 300);
        assert!(ripe.is_empty());
        assert_eq!(
            next,
            Some(450),
            "osd.0 forgotten, the host's OSDs ripen at 450"
        );
        let (ripe, next) = settle.ripe(&full, 450, 300);
        assert_eq!(ripe, BTreeSet::from([4, 5]));
        assert_eq!(next, None);
    }

    /// Goal: `up_from` names the epoch in which an OSD last came up: set when it comes up
    /// or restarts, kept otherwise.
    #[test]
    fn up_from_names_the_epoch_an_osd_came_up() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 4);
        assert!(m1.osds.values().all(|o| o.up_from == 1));
        let mut some_alive = all_alive(4);
        some_alive.remove(&2);
        let m2 = next_map(&m1, &osds, &some_alive, &mut clock, 100).unwrap();
        let m3 = next_map(&m2, &osds, &all_alive(4), &mut clock, 200).unwrap();
        assert_eq!(m3.osds[&2].up_from, 3);
        assert_eq!(m3.osds[&1].up_from, 1);
        let mut restarted = all_alive(4);
        restarted.insert(1, alive("10.0.0.1:7000", 2));
        let m4 = next_map(&m3, &osds, &restarted, &mut clock, 300).unwrap();
        assert_eq!(m4.osds[&1].up_from, 4);
    }

    /// Goal: an OSD down by reports while its liveness record stands is `unflushed` until
    /// that record says it flushed after a map showed it down (an epoch newer than the one
    /// it came up in); a flush from an earlier time down does not count.
    #[test]
    fn reported_down_osds_are_unflushed_until_they_say_they_flushed() {
        let osds: Vec<_> = (0..4).map(|i| osd(i, &format!("h{i}"))).collect();
        let mut clock = DownClock::default();
        let m1 = first_map(&osds, &mut clock, 4);
        let mut rest = all_alive(4);
        let mut reported = BTreeMap::new();
        reported.insert(2, rest.remove(&2).unwrap());
        fn run(
            cur: &ClusterMap,
            osds: &[OsdRecord],
            alive: &BTreeMap<OsdId, AliveRecord>,
            reported: &BTreeMap<OsdId, AliveRecord>,
            clock: &mut DownClock,
            now: u64,
        ) -> Option<ClusterMap> {
            derive_map(
                cur,
                osds,
                alive,
                reported,
                &[pool()],
                clock,
                now,
                Some(1000),
            )
        }
        let m2 = run(&m1, &osds, &rest, &reported, &mut clock, 100).unwrap();
        assert!(!m2.osds[&2].up && m2.osds[&2].unflushed);
        assert!(m2.osds.values().filter(|o| o.id != 2).all(|o| !o.unflushed));
        // A flush it recorded while down before it came up last time says nothing now.
        reported.get_mut(&2).unwrap().flushed_down = m2.osds[&2].up_from;
        assert!(run(&m2, &osds, &rest, &reported, &mut clock, 150).is_none());
        reported.get_mut(&2).unwrap().flushed_down = m2.epoch;
        let m3 = run(&m2, &osds, &rest, &reported, &mut clock, 200).unwrap();
        assert!(!m3.osds[&2].up && !m3.osds[&2].unflushed);
        // Its liveness record gone (stopped, crashed or cut off): down, not unflushed.
        let m4 = run(&m3, &osds, &rest, &BTreeMap::new(), &mut clock, 300);
        assert!(m4.is_none_or(|m| !m.osds[&2].unflushed));
        // Back up: neither.
        let m5 = run(&m3, &osds, &all_alive(4), &BTreeMap::new(), &mut clock, 400).unwrap();
        assert!(m5.osds[&2].up && !m5.osds[&2].unflushed);
    }
}
