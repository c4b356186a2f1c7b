//! Weighted rendezvous hashing ("straw2"): each candidate OSD draws a straw whose length
//! depends on hash(pg, osd) and its weight; the longest straws win. Adding or removing an OSD
//! only moves the PGs whose winning straw changes, which is the minimal movement.

use crate::hash::hash2;
use crate::map::{FailureDomain, OsdInfo};
use basalt_proto::{OsdId, PgId};

/// The straw of `osd` for `pg`: ln(u) / weight with u uniform in (0, 1]; larger is better.
fn straw(pg: PgId, osd: &OsdInfo) -> f64 {
    let key = ((pg.pool as u64) << 32) | pg.index as u64;
    let h = hash2(key, osd.id as u64);
    // 53 random bits → u in (0, 1].
    let u = ((h >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    u.ln() / osd.weight.max(1) as f64
}

/// Choose up to `size` OSDs for `pg` among `candidates` (already filtered to usable ones),
/// best first, never two in the same failure domain.
pub fn place_pg(
    pg: PgId,
    size: usize,
    domain: FailureDomain,
    candidates: &[&OsdInfo],
) -> Vec<OsdId> {
    let mut ranked: Vec<(f64, &OsdInfo)> = candidates.iter().map(|o| (straw(pg, o), *o)).collect();
    // Longest straw first; ties broken by id so the order is total and deterministic.
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.id.cmp(&b.1.id)));
    let mut chosen: Vec<&OsdInfo> = Vec::with_capacity(size);
    for (_, osd) in ranked {
        if chosen.len() == size {
            break;
        }
        let clash = match domain {
            FailureDomain::Osd => false,
            FailureDomain::Host => chosen.iter().any(|c| c.host == osd.host),
        };
        if !clash {
            chosen.push(osd);
        }
    }
    chosen.iter().map(|o| o.id).collect()
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
}
