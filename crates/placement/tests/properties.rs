//! Property tests of placement: failure domains are honoured, data moves minimally when one
//! OSD joins or leaves, and shares follow weights.

use basalt_placement::{place_pg, FailureDomain, OsdInfo};
use basalt_proto::PgId;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// PGs per check: enough that the measured fraction is close to its expectation.
const PGS: u32 = 2048;
/// Allowed ratio of measured to ideal movement (the bound).
const MOVEMENT_BOUND: f64 = 1.3;

fn osds(n: u32, per_host: u32, weight: impl Fn(u32) -> u64) -> Vec<OsdInfo> {
    (0..n)
        .map(|id| OsdInfo {
            id,
            host: format!("h{}", id / per_host.max(1)),
            addr: String::new(),
            weight: weight(id),
            up: true,
            is_in: true,
            incarnation: 0,
            io: String::new(),
            up_from: 0,
            unflushed: false,
        })
        .collect()
}

fn table(osds: &[OsdInfo], size: usize, domain: FailureDomain) -> Vec<BTreeSet<u32>> {
    let refs: Vec<&OsdInfo> = osds.iter().collect();
    (0..PGS)
        .map(|i| {
            place_pg(PgId { pool: 1, index: i }, size, domain, &refs)
                .into_iter()
                .collect()
        })
        .collect()
}

/// Fraction of replica slots whose OSD changed between two tables.
fn moved_fraction(before: &[BTreeSet<u32>], after: &[BTreeSet<u32>], size: usize) -> f64 {
    let moved: usize = before
        .iter()
        .zip(after)
        .map(|(b, a)| a.difference(b).count())
        .sum();
    moved as f64 / (before.len() * size) as f64
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Goal: with failure domain host, no two replicas of a PG share a host, and every PG gets
    /// its full size whenever there are enough hosts.
    #[test]
    fn replicas_never_share_a_host(n in 3u32..24, per_host in 1u32..4, size in 1usize..4) {
        let all = osds(n, per_host, |_| 1);
        let hosts = all.iter().map(|o| &o.host).collect::<BTreeSet<_>>().len();
        let refs: Vec<&OsdInfo> = all.iter().collect();
        for i in 0..256 {
            let set = place_pg(PgId { pool: 1, index: i }, size, FailureDomain::Host, &refs);
            prop_assert_eq!(set.len(), size.min(hosts));
            let set_hosts: BTreeSet<&str> =
                set.iter().map(|id| all[*id as usize].host.as_str()).collect();
            prop_assert_eq!(set_hosts.len(), set.len(), "pg {} set {:?}", i, set);
        }
    }

    /// Goal: adding one OSD to N (equal weights) moves at most 1.3x the ideal 1/(N+1) of the
    /// replica slots; removing one moves at most 1.3x the ideal 1/N.
    #[test]
    fn one_osd_change_moves_little(n in 4u32..16, size in 1usize..4, per_host in 1u32..3) {
        let domain = if per_host == 1 { FailureDomain::Host } else { FailureDomain::Osd };
        let grown = osds(n + 1, per_host, |_| 1);
        let before = table(&grown[..n as usize], size, domain);
        let after = table(&grown, size, domain);
        let added = moved_fraction(&before, &after, size);
        let ideal_add = 1.0 / (n + 1) as f64;
        prop_assert!(added <= MOVEMENT_BOUND * ideal_add,
            "add: moved {added:.4}, ideal {ideal_add:.4}");
        // And the newcomer does take its share (so "nothing moved" cannot pass).
        prop_assert!(added >= 0.7 * ideal_add, "add: moved only {added:.4}, ideal {ideal_add:.4}");

        let removed_osd = n / 2;
        let shrunk: Vec<OsdInfo> = grown[..n as usize]
            .iter()
            .filter(|o| o.id != removed_osd)
            .cloned()
            .collect();
        let after = table(&shrunk, size, domain);
        let removed = moved_fraction(&before, &after, size);
        let ideal_remove = 1.0 / n as f64;
        prop_assert!(removed <= MOVEMENT_BOUND * ideal_remove,
            "remove: moved {removed:.4}, ideal {ideal_remove:.4}");
    }

    /// Goal: with size 1, each OSD's share of PGs follows its weight (within sampling noise).
    #[test]
    fn shares_follow_weights(n in 3u32..10, heavy in 0u32..10) {
        let heavy = heavy % n;
        let all = osds(n, 1, |id| if id == heavy { 3 } else { 1 });
        let t = table(&all, 1, FailureDomain::Osd);
        let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
        for set in &t {
            for id in set {
                *counts.entry(*id).or_default() += 1;
            }
        }
        let total_weight = (n - 1 + 3) as f64;
        let expected = PGS as f64 * 3.0 / total_weight;
        let got = *counts.get(&heavy).unwrap_or(&0) as f64;
        prop_assert!((got - expected).abs() <= 0.2 * expected,
            "heavy osd got {got} PGs, expected about {expected:.0}");
    }
}
