//! The pure decisions of peering and serving, apart from any I/O so they can be checked
//! against tables: which copy of a PG is authoritative, whether a client request may be
//! served, which objects differ between two copies.

use crate::error::PgError;
use crate::pg::{PgEntry, PgPhase};
use basalt_meta::schema::{CompleteCopy, PgRecord};
use basalt_placement::ClusterMap;
use basalt_proto::{ObjectId, OsdId, Status, Version};
use std::collections::BTreeMap;

/// Where the authoritative contents of a PG are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This OSD's own copy.
    Local,
    /// This OSD, as long as it is still this incarnation (0: a restarted copy, any run).
    Remote(OsdId, u64),
}

/// Choose the authoritative copy among the last activated interval's complete copies, for
/// the primary `me` (this run of it) under `map`.
///
/// In order: our own copy if this very run of us was complete; else a complete copy on an
/// OSD that is up and still the same run; else (every complete copy's OSD restarted: a power
/// cut or crashes) a restarted copy, which still holds every flushed write, ours first. With
/// none up the PG is incomplete.
pub fn choose_source(
    me: CompleteCopy,
    map: &ClusterMap,
    record: Option<&PgRecord>,
) -> Result<Source, PgError> {
    let Some(rec) = record else {
        return Ok(Source::Local); // A new PG: nobody ever wrote to it.
    };
    if rec.complete.contains(&me) {
        return Ok(Source::Local);
    }
    let up = |c: &CompleteCopy| map.osds.get(&c.osd).is_some_and(|o| o.up);
    let same_run =
        |c: &CompleteCopy| map.osds.get(&c.osd).map(|o| o.incarnation) == Some(c.incarnation);
    if let Some(c) = rec.complete.iter().find(|c| up(c) && same_run(c)) {
        // Pulled from only if the process that answers is still that incarnation: the map
        // may not show a restart yet.
        return Ok(Source::Remote(c.osd, c.incarnation));
    }
    // Every complete copy restarted: a holder that kept running still has every
    // acknowledged write, a restarted copy only the flushed ones.
    if rec.holders.contains(&me) {
        return Ok(Source::Local);
    }
    if let Some(c) = rec.holders.iter().find(|c| up(c) && same_run(c)) {
        return Ok(Source::Remote(c.osd, c.incarnation));
    }
    if rec.complete.iter().any(|c| c.osd == me.osd) {
        return Ok(Source::Local);
    }
    if let Some(c) = rec.complete.iter().find(|c| up(c)) {
        return Ok(Source::Remote(c.osd, 0));
    }
    Err(PgError::Incomplete {
        interval: rec.epoch,
        copies: rec.complete.iter().map(|c| c.osd).collect(),
    })
}

/// The members of the new interval's `acting` set (with incarnations) that hold every
/// acknowledged write without being known complete: complete or holders in the previous
/// activated interval's record as this same run.
pub fn carried_holders(
    previous: Option<&PgRecord>,
    acting: &[(OsdId, u64)],
    complete: &[CompleteCopy],
) -> Vec<CompleteCopy> {
    let Some(prev) = previous else {
        return Vec::new();
    };
    acting
        .iter()
        .map(|&(osd, incarnation)| CompleteCopy { osd, incarnation })
        .filter(|c| !complete.contains(c))
        .filter(|c| prev.complete.contains(c) || prev.holders.contains(c))
        .collect()
}

/// The record's complete copies and holders less those that are down or restarted, when
/// `me` (this run) is complete and some are; None when nothing changes. An undersized
/// primary narrows the record so that, should it restart too, the next primary does not
/// take a copy that crashed earlier (and may lack writes flushed since) for the authority.
pub fn narrowed(
    rec: &PgRecord,
    map: &ClusterMap,
    me: CompleteCopy,
) -> Option<(Vec<CompleteCopy>, Vec<CompleteCopy>)> {
    if !rec.complete.contains(&me) {
        return None;
    }
    let running = |c: &&CompleteCopy| {
        map.osds
            .get(&c.osd)
            .is_some_and(|o| o.up && o.incarnation == c.incarnation)
            || **c == me
    };
    let complete: Vec<CompleteCopy> = rec.complete.iter().filter(running).copied().collect();
    let holders: Vec<CompleteCopy> = rec.holders.iter().filter(running).copied().collect();
    (complete.len() != rec.complete.len() || holders.len() != rec.holders.len())
        .then_some((complete, holders))
}

/// May the primary serve a client request sent under map epoch `client_epoch`, given its
/// entry for the PG? Only as the active primary of the current interval, whose own copy is
/// sealed at that interval — and not beyond it: a newer interval's primary sealed it, so
/// that primary may be serving already even if this OSD's map does not say so yet.
/// Returns the interval.
pub fn client_gate(e: &PgEntry, client_epoch: u32) -> Result<u32, Status> {
    match e.phase {
        PgPhase::Active if e.sealed > e.interval => Err(Status::NotPrimary),
        PgPhase::Active if client_epoch >= e.interval => {
            // Peering sealed our copy at the interval before activating it.
            assert!(
                e.sealed >= e.interval,
                "active in interval {} with the copy sealed only at {}",
                e.interval,
                e.sealed
            );
            Ok(e.interval)
        }
        PgPhase::Active | PgPhase::Replica => Err(Status::NotPrimary),
        PgPhase::Peering | PgPhase::Incomplete => Err(Status::Peering),
    }
}

/// Why a member declines a gateway's LOCAL_READ (the gateway then reads from the primary).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalReadRefusal {
    /// This OSD is (or is becoming) the PG's primary, or holds no interval of it.
    NotReplica,
    /// Its map puts the PG at another interval, or outside this OSD: its entry is stale.
    IntervalMoved,
    /// A newer interval's primary sealed this copy.
    Sealed,
    /// The primary has not said this copy is complete in the interval (recovering).
    NotComplete,
    /// A peer lease from another member lapsed: that member may be sealing for a new
    /// interval that drops this copy.
    NoLeases,
}

/// May this OSD, a member of the PG but not its primary, serve a gateway's LOCAL_READ from
/// its own copy (docs/design.md, "Reads from a local replica")? Only while its entry is at
/// the interval its current map gives the PG (`map_interval`, with this OSD in the acting
/// set: `in_map_acting`), nothing newer sealed it, its primary said it is complete in that
/// interval, and it holds a live peer lease from every other member (`leases`). Returns
/// the interval.
pub fn local_read_gate(
    e: &PgEntry,
    me: OsdId,
    map_interval: u32,
    in_map_acting: bool,
    leases: bool,
) -> Result<u32, LocalReadRefusal> {
    if e.phase != PgPhase::Replica || e.interval == 0 || !e.acting.iter().any(|a| a.0 == me) {
        return Err(LocalReadRefusal::NotReplica);
    }
    if e.interval != map_interval || !in_map_acting {
        return Err(LocalReadRefusal::IntervalMoved);
    }
    if e.sealed > e.interval {
        return Err(LocalReadRefusal::Sealed);
    }
    if e.complete_in != e.interval {
        return Err(LocalReadRefusal::NotComplete);
    }
    if !leases {
        return Err(LocalReadRefusal::NoLeases);
    }
    Ok(e.interval)
}

/// May a copy of a PG take a mutation of the interval that began at `interval` — a member's
/// from its primary, or the primary's own position from its own work of that interval
/// (a write, a peering, a recovery)? Not when `may_write` is false
/// ([`crate::handler::member_may_write`]: this run is not in the map, or its map shows it
/// down since): Unavailable. Not when a newer interval sealed the copy (`sealed`, from its
/// PG entry if it has one): NotPrimary — that interval's primary has read, or is reading,
/// this copy, and its writes own it now.
pub fn copy_gate(sealed: Option<u32>, interval: u32, may_write: bool) -> Result<(), Status> {
    if !may_write {
        return Err(Status::Unavailable);
    }
    if sealed.is_some_and(|s| interval < s) {
        return Err(Status::NotPrimary);
    }
    Ok(())
}

/// The objects whose (presence, version) differ between two lists, in object order.
pub fn diff(a: &[(ObjectId, Version)], b: &[(ObjectId, Version)]) -> Vec<ObjectId> {
    let mut both: BTreeMap<ObjectId, (Option<Version>, Option<Version>)> = BTreeMap::new();
    for (o, v) in a {
        both.entry(*o).or_default().0 = Some(*v);
    }
    for (o, v) in b {
        both.entry(*o).or_default().1 = Some(*v);
    }
    both.into_iter()
        .filter(|(_, (x, y))| x != y)
        .map(|(o, _)| o)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_placement::OsdInfo;

    fn copy(osd: OsdId, incarnation: u64) -> CompleteCopy {
        CompleteCopy { osd, incarnation }
    }

    /// A map of OSDs 0..4: (id, up, incarnation).
    fn map(osds: &[(OsdId, bool, u64)]) -> ClusterMap {
        let mut m = ClusterMap::default();
        for &(id, up, incarnation) in osds {
            let info = OsdInfo {
                id,
                host: format!("host{id}"),
                addr: String::new(),
                weight: 1,
                up,
                is_in: true,
                incarnation,
                io: String::new(),
                up_from: 0,
                unflushed: false,
                ..Default::default()
            };
            m.osds.insert(id, info);
        }
        m
    }

    fn record(complete: &[CompleteCopy]) -> PgRecord {
        PgRecord {
            unfound_objects: 0,
            unfound_waiting: Vec::new(),
            ec_sources: Vec::new(),
            epoch: 7,
            primary: complete.first().map_or(0, |c| c.osd),
            acting: complete.iter().map(|c| c.osd).collect(),
            complete: complete.to_vec(),
            degraded_objects: 0,
            holders: Vec::new(),
            fence: 0,
            inherited: 0,
        }
    }

    /// One row: name, the primary, the map, the PG record, the expected choice.
    type Case<'a> = (
        &'a str,
        CompleteCopy,
        ClusterMap,
        Option<&'a PgRecord>,
        Result<Source, ()>,
    );

    /// Goal: the authority is a copy known complete, preferring copies whose process never
    /// restarted; a restarted process is never taken for a complete copy while one that
    /// kept running is up (the bug the netns power-cut scenario found).
    #[test]
    fn choose_source_table() {
        use Source::*;
        let rec = record(&[copy(0, 10), copy(1, 11), copy(2, 12)]);
        let mut with_holders = record(&[copy(0, 10), copy(1, 11)]);
        with_holders.holders = vec![copy(3, 33)];
        let cases: Vec<Case> = vec![
            (
                "new PG",
                copy(0, 10),
                map(&[(0, true, 10)]),
                None,
                Ok(Local),
            ),
            (
                "we are complete, same run",
                copy(0, 10),
                map(&[(0, true, 10), (1, true, 11), (2, true, 12)]),
                Some(&rec),
                Ok(Local),
            ),
            (
                "we restarted; a running complete copy wins",
                copy(0, 99),
                map(&[(0, true, 99), (1, true, 11), (2, true, 12)]),
                Some(&rec),
                Ok(Remote(1, 11)),
            ),
            (
                "we restarted; osd.1 restarted too; osd.2 kept running",
                copy(0, 99),
                map(&[(0, true, 99), (1, true, 98), (2, true, 12)]),
                Some(&rec),
                Ok(Remote(2, 12)),
            ),
            (
                "a new member (not in the record); a complete copy is up",
                copy(3, 30),
                map(&[(1, true, 11), (3, true, 30)]),
                Some(&rec),
                Ok(Remote(1, 11)),
            ),
            (
                "every complete copy restarted; a holder kept running (seed 1000273)",
                copy(0, 99),
                map(&[(0, true, 99), (1, true, 98), (2, true, 12), (3, true, 33)]),
                Some(&with_holders),
                Ok(Remote(3, 33)),
            ),
            (
                "every complete copy restarted: ours (it kept every flushed write)",
                copy(0, 99),
                map(&[(0, true, 99), (1, true, 98), (2, true, 97)]),
                Some(&rec),
                Ok(Local),
            ),
            (
                "every complete copy restarted, we were never complete: any restarted one",
                copy(3, 30),
                map(&[(1, true, 98), (2, false, 12), (3, true, 30)]),
                Some(&rec),
                Ok(Remote(1, 0)),
            ),
            (
                "no complete copy up: incomplete",
                copy(3, 30),
                map(&[
                    (0, false, 10),
                    (1, false, 11),
                    (2, false, 12),
                    (3, true, 30),
                ]),
                Some(&rec),
                Err(()),
            ),
        ];
        for (name, me, map, rec, want) in cases {
            let got = choose_source(me, &map, rec).map_err(|_| ());
            assert_eq!(got, want, "{name}");
        }
    }

    /// Goal: holders carry over only as the same run, only while in the acting set, and
    /// only from the complete copies or holders of the previous record.
    #[test]
    fn carried_holders_table() {
        let mut prev = record(&[copy(0, 10), copy(1, 11)]);
        prev.holders = vec![copy(2, 12)];
        let acting = [(1, 11), (2, 12), (0, 99), (3, 30)];
        let complete = [copy(1, 11)];
        assert_eq!(
            carried_holders(Some(&prev), &acting, &complete),
            vec![copy(2, 12)],
            "osd.0 restarted, osd.3 never held everything, osd.1 is complete"
        );
        assert!(carried_holders(None, &acting, &complete).is_empty());
        assert!(carried_holders(Some(&prev), &[(1, 11)], &complete).is_empty());
    }

    /// Goal: an undersized complete primary drops down and restarted copies, keeps itself,
    /// and changes nothing when it is not complete or nothing is gone (seed 1001055).
    #[test]
    fn narrowed_table() {
        let rec = record(&[copy(0, 10), copy(1, 11), copy(2, 12)]);
        let m = map(&[(0, true, 10), (1, true, 99), (2, false, 12)]);
        assert_eq!(
            narrowed(&rec, &m, copy(0, 10)),
            Some((vec![copy(0, 10)], vec![]))
        );
        assert_eq!(
            narrowed(&rec, &m, copy(0, 77)),
            None,
            "not complete as this run"
        );
        let all_up = map(&[(0, true, 10), (1, true, 11), (2, true, 12)]);
        assert_eq!(narrowed(&rec, &all_up, copy(0, 10)), None);
    }

    /// Goal: only the active primary of the current interval serves, and only clients whose
    /// map has reached that interval.
    #[test]
    fn client_gate_table() {
        let entry = |phase, interval, sealed| PgEntry {
            interval,
            phase,
            sealed,
            ..PgEntry::default()
        };
        let cases = [
            (
                "active, client current",
                entry(PgPhase::Active, 5, 5),
                5,
                Ok(5),
            ),
            (
                "active, client newer",
                entry(PgPhase::Active, 5, 5),
                9,
                Ok(5),
            ),
            (
                "active, client behind",
                entry(PgPhase::Active, 5, 5),
                4,
                Err(Status::NotPrimary),
            ),
            (
                "active, sealed by a newer interval's primary",
                entry(PgPhase::Active, 5, 7),
                9,
                Err(Status::NotPrimary),
            ),
            (
                "replica",
                entry(PgPhase::Replica, 5, 5),
                5,
                Err(Status::NotPrimary),
            ),
            (
                "peering",
                entry(PgPhase::Peering, 5, 5),
                5,
                Err(Status::Peering),
            ),
            (
                "incomplete",
                entry(PgPhase::Incomplete, 5, 3),
                5,
                Err(Status::Peering),
            ),
        ];
        for (name, e, epoch, want) in cases {
            assert_eq!(client_gate(&e, epoch), want, "{name}");
        }
    }

    /// Goal: a replica serves a gateway's read only when its entry is current by its own
    /// map, unsealed, known complete in that interval, and it holds every member's lease;
    /// each missing condition alone refuses, with its reason.
    #[test]
    fn local_read_gate_table() {
        use LocalReadRefusal::*;
        let me = 2;
        let good = PgEntry {
            interval: 5,
            acting: vec![(1, 11), (2, 12), (3, 13)],
            phase: PgPhase::Replica,
            sealed: 5,
            complete_in: 5,
            ..PgEntry::default()
        };
        let with = |f: fn(&mut PgEntry)| {
            let mut e = good.clone();
            f(&mut e);
            e
        };
        // name, entry, map interval, in the map's acting set, leases held, expected
        let cases = [
            (
                "current, complete, leases",
                good.clone(),
                5,
                true,
                true,
                Ok(5),
            ),
            (
                "sealed at its own interval",
                with(|e| e.sealed = 3),
                5,
                true,
                true,
                Ok(5),
            ),
            ("leases lapsed", good.clone(), 5, true, false, Err(NoLeases)),
            (
                "map moved to a newer interval",
                good.clone(),
                7,
                true,
                true,
                Err(IntervalMoved),
            ),
            (
                "map dropped this OSD",
                good.clone(),
                5,
                false,
                true,
                Err(IntervalMoved),
            ),
            (
                "sealed by a newer interval",
                with(|e| e.sealed = 6),
                5,
                true,
                true,
                Err(Sealed),
            ),
            (
                "complete in an older interval",
                with(|e| e.complete_in = 4),
                5,
                true,
                true,
                Err(NotComplete),
            ),
            (
                "never said complete",
                with(|e| e.complete_in = 0),
                5,
                true,
                true,
                Err(NotComplete),
            ),
            (
                "primary",
                with(|e| e.phase = PgPhase::Active),
                5,
                true,
                true,
                Err(NotReplica),
            ),
            (
                "peering",
                with(|e| e.phase = PgPhase::Peering),
                5,
                true,
                true,
                Err(NotReplica),
            ),
            (
                "not a member of its entry",
                with(|e| e.acting.retain(|a| a.0 != 2)),
                5,
                true,
                true,
                Err(NotReplica),
            ),
            (
                "no interval yet",
                PgEntry::default(),
                0,
                true,
                true,
                Err(NotReplica),
            ),
        ];
        for (name, e, map_interval, member, leases, want) in cases {
            assert_eq!(
                local_read_gate(&e, me, map_interval, member, leases),
                want,
                "{name}"
            );
        }
    }

    /// Goal: a copy takes a mutation only of an interval no newer one sealed it past, and
    /// only while this run may write at all; the primary's own position is no exception
    /// (a superseded peering once dropped a newer interval's stash there).
    #[test]
    fn copy_gate_table() {
        let cases = [
            ("no entry yet", None, 5, true, Ok(())),
            ("sealed at its own interval", Some(5), 5, true, Ok(())),
            ("a newer interval's write", Some(5), 7, true, Ok(())),
            ("sealed past it", Some(8), 7, true, Err(Status::NotPrimary)),
            (
                "this run may not write",
                Some(5),
                5,
                false,
                Err(Status::Unavailable),
            ),
            ("both", Some(8), 7, false, Err(Status::Unavailable)),
        ];
        for (name, sealed, interval, may_write, want) in cases {
            assert_eq!(copy_gate(sealed, interval, may_write), want, "{name}");
        }
    }

    /// Goal: an active primary whose copy is not sealed at its interval is a bug, caught.
    #[test]
    #[should_panic(expected = "sealed only at")]
    fn client_gate_asserts_the_seal() {
        let e = PgEntry {
            interval: 5,
            phase: PgPhase::Active,
            sealed: 4,
            ..PgEntry::default()
        };
        let _ = client_gate(&e, 5);
    }

    /// Goal: diff names exactly the objects whose presence or version differ, in order.
    #[test]
    fn diff_table() {
        let o = |i| ObjectId::new(1, i);
        let v = |c| Version::new(3, c);
        let a = [(o(1), v(1)), (o(2), v(2)), (o(4), v(1))];
        let b = [(o(1), v(1)), (o(2), v(3)), (o(3), v(1))];
        assert_eq!(diff(&a, &b), vec![o(2), o(3), o(4)]);
        assert_eq!(diff(&a, &a), Vec::<ObjectId>::new());
        assert_eq!(diff(&[], &b), vec![o(1), o(2), o(3)]);
    }
}
