//! Property tests of placement: failure domains are honoured, data moves minimally when one
//! OSD joins or leaves, and shares follow weights.

use basalt_placement::{place_pg, place_pg_positions, FailureDomain, OsdInfo};
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
            ..OsdInfo::default()
        })
        .collect()
}

/// A cluster of `zones` zones of `racks` racks of `hosts` hosts of `per_host` OSDs, with
/// weights 1 to 4 drawn from `weights` (cycled).
fn tree(zones: u32, racks: u32, hosts: u32, per_host: u32, weights: &[u64]) -> Vec<OsdInfo> {
    let mut out = Vec::new();
    for z in 0..zones {
        for r in 0..racks {
            for h in 0..hosts {
                for _ in 0..per_host {
                    let id = out.len() as u32;
                    out.push(OsdInfo {
                        id,
                        host: format!("z{z}r{r}h{h}"),
                        weight: weights[id as usize % weights.len()],
                        up: true,
                        is_in: true,
                        location: [("zone", format!("z{z}")), ("rack", format!("z{z}r{r}"))]
                            .into_iter()
                            .map(|(k, v)| (k.to_string(), v))
                            .collect(),
                        ..OsdInfo::default()
                    });
                }
            }
        }
    }
    out
}

/// Positions of an erasure-coded placement of every PG, empty positions as None.
fn positional_table(
    osds: &[OsdInfo],
    width: usize,
    domain: FailureDomain,
) -> Vec<Vec<Option<u32>>> {
    let refs: Vec<&OsdInfo> = osds.iter().collect();
    (0..PGS)
        .map(|i| place_pg_positions(PgId { pool: 2, index: i }, width, domain, &refs))
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

    /// Goal: with failure domain host, rack or zone, no two copies of a replicated PG and
    /// no two chunks of an erasure-coded one share that domain, and every PG gets its full
    /// width whenever there are enough domains.
    #[test]
    fn copies_never_share_the_failure_domain(
        zones in 1u32..4,
        racks in 1u32..4,
        hosts in 1u32..3,
        per_host in 1u32..3,
        size in 1usize..5,
        domain in 1usize..4,
        weights in prop::collection::vec(1u64..5, 1..6),
    ) {
        let domain = FailureDomain::ALL[domain];
        let all = tree(zones, racks, hosts, per_host, &weights);
        let domains = all.iter().filter_map(|o| o.domain(domain)).collect::<BTreeSet<_>>().len();
        let refs: Vec<&OsdInfo> = all.iter().collect();
        for i in 0..128 {
            let pg = PgId { pool: 1, index: i };
            let set = place_pg(pg, size, domain, &refs);
            prop_assert_eq!(set.len(), size.min(domains));
            let keys: BTreeSet<String> =
                set.iter().filter_map(|id| all[*id as usize].domain(domain)).collect();
            prop_assert_eq!(keys.len(), set.len(), "{} pg {} set {:?}", domain, i, set);

            let placed = place_pg_positions(pg, size, domain, &refs);
            let filled: Vec<u32> = placed.iter().flatten().copied().collect();
            prop_assert_eq!(filled.len(), size.min(domains));
            let keys: BTreeSet<String> =
                filled.iter().filter_map(|id| all[*id as usize].domain(domain)).collect();
            prop_assert_eq!(keys.len(), filled.len(), "{} pg {} positions {:?}", domain, i, placed);
        }
    }

    /// Goal: when a whole rack leaves, the copies and chunks that move (replicated pools and
    /// erasure-coded ones, failure domain rack) are at most 1.3x those the rack held (which
    /// must move), and every one it held does move.
    #[test]
    fn a_rack_leaving_moves_little(
        racks in 5u32..10,
        hosts in 1u32..3,
        per_host in 1u32..3,
        size in 2usize..4,
        gone in 0u32..10,
        weights in prop::collection::vec(1u64..5, 1..4),
    ) {
        let all = tree(1, racks, hosts, per_host, &weights);
        let gone = format!("z0r{}", gone % racks);
        let left: Vec<OsdInfo> =
            all.iter().filter(|o| o.location["rack"] != gone).cloned().collect();
        let in_gone = |id: &u32| all[*id as usize].location["rack"] == gone;

        let before = table(&all, size, FailureDomain::Rack);
        let after = table(&left, size, FailureDomain::Rack);
        let ideal: usize = before.iter().map(|s| s.iter().filter(|id| in_gone(id)).count()).sum();
        let moved: usize = before.iter().zip(&after).map(|(b, a)| a.difference(b).count()).sum();
        prop_assert!(ideal > 0);
        prop_assert!(moved >= ideal, "replicated: {moved} moved, {ideal} were on the rack");
        prop_assert!(moved as f64 <= MOVEMENT_BOUND * ideal as f64,
            "replicated: {moved} copies moved, the rack held {ideal}");

        // Positions of a 2+1 to 3+2 code, with at least two racks to spare once the rack
        // left (`a_rack_leaving_a_tight_fit`: none or one to spare).
        let width = (size + 1).min(racks as usize - 3);
        let before = positional_table(&all, width, FailureDomain::Rack);
        let after = positional_table(&left, width, FailureDomain::Rack);
        let ideal: usize = before.iter().flatten().flatten().filter(|id| in_gone(id)).count();
        let moved: usize = before
            .iter()
            .zip(&after)
            .map(|(b, a)| b.iter().zip(a).filter(|(x, y)| x != y).count())
            .sum();
        prop_assert!(moved >= ideal);
        prop_assert!(moved as f64 <= MOVEMENT_BOUND * ideal as f64,
            "erasure-coded ({width} positions, {racks} racks): {moved} chunks moved, the rack held {ideal}");
    }
}

/// Movement of an erasure-coded pool with failure domain rack when one of `racks` racks
/// (two hosts each, weights cycling through `weights`) leaves: (chunks moved, chunks the
/// rack held).
fn ec_rack_movement(racks: u32, width: usize, weights: &[u64]) -> (usize, usize) {
    let all = tree(1, racks, 2, 1, weights);
    let left: Vec<OsdInfo> = all
        .iter()
        .filter(|o| o.location["rack"] != "z0r0")
        .cloned()
        .collect();
    let before = positional_table(&all, width, FailureDomain::Rack);
    let after = positional_table(&left, width, FailureDomain::Rack);
    let ideal = before
        .iter()
        .flatten()
        .flatten()
        .filter(|id| all[**id as usize].location["rack"] == "z0r0")
        .count();
    let moved = before
        .iter()
        .zip(&after)
        .map(|(b, a)| b.iter().zip(a).filter(|(x, y)| x != y).count())
        .sum();
    (moved, ideal)
}

/// Goal (a known cost, bounded): when the racks left are as many as an erasure-coded PG's
/// positions, or one more, the positions the leaving rack did not hold move too (each
/// position ranks racks its own way, and the freed one may claim a rack another holds).
/// Measured (weights 1-2-3 / 4-1), no rack to spare: 1.21x/1.24x (3 positions), 1.29x/1.30x
/// (4), 1.40x/1.45x (6); one to spare: 1.14x/1.14x, 1.20x/1.21x, 1.31x/1.32x (and 1.31x in
/// a random tree of one OSD per rack). Bounded here at 1.5x; with two racks to spare the
/// 1.3x bound holds (the property above).
#[test]
fn a_rack_leaving_a_tight_fit() {
    for weights in [&[1u64, 2, 3][..], &[4, 1]] {
        for spare in [0u32, 1] {
            for width in [3usize, 4, 6] {
                let racks = width as u32 + 1 + spare;
                let (moved, ideal) = ec_rack_movement(racks, width, weights);
                eprintln!(
                    "weights {weights:?}, {width} positions on {racks} racks, one leaves: \
                     {moved} chunks moved, {ideal} held ({:.2}x)",
                    moved as f64 / ideal as f64
                );
                assert!(moved >= ideal);
                assert!(
                    moved as f64 <= 1.5 * ideal as f64,
                    "{moved} moved, {ideal} held"
                );
            }
        }
    }
}
