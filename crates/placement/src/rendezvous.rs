//! Weighted rendezvous hashing ("straw2"): each candidate OSD draws a straw whose length
//! depends on hash(pg, osd) and its weight; the longest straws win. Adding or removing an OSD
//! only moves the PGs whose winning straw changes, which is the minimal movement.

use crate::hash::hash2;
use crate::map::{FailureDomain, OsdInfo};
use basalt_proto::{OsdId, PgId};

/// The straw of `osd` for `pg`: ln(u) / weight with u uniform in (0, 1]; larger is better.
fn straw(pg: PgId, osd: &OsdInfo) -> f64 {
    straw_of(hash2(pg_key(pg), osd.id as u64), osd.weight)
}

/// A PG as one hash input.
fn pg_key(pg: PgId) -> u64 {
    ((pg.pool as u64) << 32) | pg.index as u64
}

/// ln(u) / weight, with u uniform in (0, 1] from the 53 high bits of the hash `h`.
fn straw_of(h: u64, weight: u64) -> f64 {
    let u = ((h >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    u.ln() / weight.max(1) as f64
}

/// Choose up to `size` OSDs for `pg` among `candidates` (already filtered to usable ones),
/// best first, never two in the same failure domain.
pub fn place_pg(
    pg: PgId,
    size: usize,
    domain: FailureDomain,
    candidates: &[&OsdInfo],
) -> Vec<OsdId> {
    let mut ranked: Vec<(f64, &OsdInfo, String)> = candidates
        .iter()
        .filter_map(|o| Some((straw(pg, o), *o, o.domain(domain)?)))
        .collect();
    // Longest straw first; ties broken by id so the order is total and deterministic.
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    // The first OSD of each domain in this order wins it: the longest of a domain's straws
    // is distributed as one straw of the domain's total weight, so domains are chosen in
    // proportion to their weight as a hierarchy of buckets would choose them, and a domain
    // leaving moves only the PGs that had one of its OSDs.
    let mut chosen: Vec<(OsdId, String)> = Vec::with_capacity(size);
    for (_, osd, key) in ranked {
        if chosen.len() == size {
            break;
        }
        if !chosen.iter().any(|(_, k)| *k == key) {
            chosen.push((osd.id, key));
        }
    }
    chosen.into_iter().map(|(id, _)| id).collect()
}

/// The straw of `osd` for position `position` of `pg` (erasure-coded PGs).
fn positional_straw(pg: PgId, position: usize, osd: &OsdInfo) -> f64 {
    let h = hash2(hash2(pg_key(pg), position as u64), osd.id as u64);
    straw_of(h, osd.weight)
}

/// Choose the OSD of each of `width` positions of an erasure-coded `pg` (chunk `i` lives at
/// position `i`; docs/design.md, "Erasure-coded pools"); `None` where no candidate is left.
///
/// Every position ranks the candidates by straws of its own, and positions claim OSDs by
/// deferred acceptance: a position asks for its best OSD; a failure domain (an OSD or a
/// host) keeps the claim with the longest straw and turns the other away, which then asks
/// for its next choice. The result is the same in whatever order positions ask, and it is
/// stable: when an OSD goes away, its position and the positions it outbids in turn move,
/// the others keep their OSD (unlike [`place_pg`], whose order shifts). With hosts to
/// spare, ~99 % of the other positions stay; when every host must hold a position, ~92 %.
pub fn place_pg_positions(
    pg: PgId,
    width: usize,
    domain: FailureDomain,
    candidates: &[&OsdInfo],
) -> Vec<Option<OsdId>> {
    // prefs[i]: candidates by position i's straws, longest first (ties: lower id first).
    // Candidates without a domain of this kind take no part.
    let candidates: Vec<(&OsdInfo, String)> = candidates
        .iter()
        .filter_map(|o| Some((*o, o.domain(domain)?)))
        .collect();
    let prefs: Vec<Vec<(f64, &OsdInfo, &str)>> = (0..width)
        .map(|i| {
            let mut ranked: Vec<(f64, &OsdInfo, &str)> = candidates
                .iter()
                .map(|(o, key)| (positional_straw(pg, i, o), *o, key.as_str()))
                .collect();
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
            ranked
        })
        .collect();
    let mut next = vec![0usize; width];
    // Failure domain → (position, straw) holding it.
    let mut held: std::collections::BTreeMap<&str, (usize, f64)> = Default::default();
    let mut out: Vec<Option<OsdId>> = vec![None; width];
    let mut waiting: Vec<usize> = (0..width).rev().collect();
    // Bound: each position asks each candidate at most once.
    while let Some(i) = waiting.pop() {
        while let Some(&(straw, osd, k)) = prefs[i].get(next[i]) {
            next[i] += 1;
            match held.get(&k) {
                Some(&(j, other)) if other > straw || (other == straw && j < i) => continue,
                Some(&(j, _)) => {
                    out[j] = None;
                    waiting.push(j);
                }
                None => {}
            }
            held.insert(k, (i, straw));
            out[i] = Some(osd.id);
            break;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn osd(id: u32, host: &str, weight: u64) -> OsdInfo {
        OsdInfo {
            id,
            host: host.to_string(),
            addr: String::new(),
            weight,
            up: true,
            is_in: true,
            incarnation: 0,
            io: String::new(),
            up_from: 0,
            unflushed: false,
            ..OsdInfo::default()
        }
    }

    /// Goal: replicas of one PG never share a host when the domain is Host.
    #[test]
    fn host_domain_separates_replicas() {
        let osds: Vec<OsdInfo> = (0..6).map(|i| osd(i, &format!("h{}", i / 2), 1)).collect();
        let refs: Vec<&OsdInfo> = osds.iter().collect();
        for i in 0..256 {
            let set = place_pg(PgId { pool: 1, index: i }, 3, FailureDomain::Host, &refs);
            assert_eq!(set.len(), 3);
            let mut hosts: Vec<&str> = set
                .iter()
                .map(|id| osds[*id as usize].host.as_str())
                .collect();
            hosts.sort();
            hosts.dedup();
            assert_eq!(hosts.len(), 3, "pg {i} set {set:?}");
        }
    }

    /// Goal: removing one of N OSDs moves only the PGs that had it (minimal movement).
    #[test]
    fn removal_moves_only_affected_pgs() {
        let osds: Vec<OsdInfo> = (0..8).map(|i| osd(i, &format!("h{i}"), 1)).collect();
        let all: Vec<&OsdInfo> = osds.iter().collect();
        let fewer: Vec<&OsdInfo> = osds.iter().filter(|o| o.id != 3).collect();
        for i in 0..512 {
            let pg = PgId { pool: 1, index: i };
            let before = place_pg(pg, 3, FailureDomain::Host, &all);
            let after = place_pg(pg, 3, FailureDomain::Host, &fewer);
            if !before.contains(&3) {
                assert_eq!(before, after);
            }
        }
    }

    /// Over 512 PGs of 6 positions, how many positions not held by osd.5 keep their OSD
    /// when osd.5 leaves `osds`: (kept, total).
    fn positions_kept(osds: &[OsdInfo]) -> (usize, usize) {
        let all: Vec<&OsdInfo> = osds.iter().collect();
        let fewer: Vec<&OsdInfo> = osds.iter().filter(|o| o.id != 5).collect();
        let (mut kept, mut others) = (0usize, 0usize);
        for i in 0..512 {
            let pg = PgId { pool: 2, index: i };
            let before = place_pg_positions(pg, 6, FailureDomain::Host, &all);
            let after = place_pg_positions(pg, 6, FailureDomain::Host, &fewer);
            for (b, a) in before.iter().zip(&after) {
                if *b != Some(5) {
                    others += 1;
                    kept += usize::from(b == a);
                }
            }
        }
        (kept, others)
    }

    /// Goal: positional placement fills every position with distinct OSDs on distinct
    /// hosts, leaves positions empty when the hosts run out, and when an OSD leaves, the
    /// positions it did not hold almost all keep their OSD (chunks stay put).
    #[test]
    fn positions_are_stable_when_an_osd_leaves() {
        let osds: Vec<OsdInfo> = (0..12).map(|i| osd(i, &format!("h{}", i / 2), 1)).collect();
        let all: Vec<&OsdInfo> = osds.iter().collect();
        for i in 0..512 {
            let pg = PgId { pool: 2, index: i };
            let placed = place_pg_positions(pg, 6, FailureDomain::Host, &all);
            let mut hosts: Vec<&str> = placed
                .iter()
                .map(|o| {
                    osds[o.expect("six hosts for six positions") as usize]
                        .host
                        .as_str()
                })
                .collect();
            hosts.sort();
            hosts.dedup();
            assert_eq!(hosts.len(), 6, "pg {i}: {placed:?}");
            // Seven positions cannot fit on six hosts.
            let wide = place_pg_positions(pg, 7, FailureDomain::Host, &all);
            assert_eq!(wide.len(), 7);
            assert_eq!(wide.iter().filter(|o| o.is_none()).count(), 1);
        }
        // Every host holds a position here, so the freed position's new OSD often has to
        // come from a host another position held: 92 % kept when written.
        let (kept, others) = positions_kept(&osds);
        assert!(
            kept as f64 >= 0.85 * others as f64,
            "only {kept} of {others} unaffected positions kept their OSD (6 hosts)"
        );
        // With hosts to spare: 98.7 % kept when written.
        let many: Vec<OsdInfo> = (0..24).map(|i| osd(i, &format!("h{}", i / 2), 1)).collect();
        let (kept, others) = positions_kept(&many);
        assert!(
            kept as f64 >= 0.97 * others as f64,
            "only {kept} of {others} unaffected positions kept their OSD (12 hosts)"
        );
    }
}
