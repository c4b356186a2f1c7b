//! The cluster map: OSDs, pools and the PG → OSD table, all tagged with one epoch.

use crate::hash::hash2;
use crate::rendezvous::{place_pg, place_pg_positions};
use basalt_proto::{inode_family, EcProfile, ObjectId, OsdId, PgId, PoolId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use thiserror::Error;

/// Where replicas of one PG must not meet: no two copies (or chunks) of a PG share one.
/// Rack and zone come from the OSDs' locations (`--location zone=z1,rack=r2`); an OSD
/// without that key is not a candidate for a pool with that failure domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureDomain {
    Osd,
    Host,
    Rack,
    Zone,
}

impl FailureDomain {
    /// Every failure domain, smallest first.
    pub const ALL: [FailureDomain; 4] = [Self::Osd, Self::Host, Self::Rack, Self::Zone];

    /// The name used in pool records and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Osd => "osd",
            Self::Host => "host",
            Self::Rack => "rack",
            Self::Zone => "zone",
        }
    }

    /// The failure domain called `name` ("osd", "host", "rack" or "zone").
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl std::fmt::Display for FailureDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The keys an OSD's location may have, largest first. The host is not one of them: it is
/// the OSD's `--host`.
pub const LOCATION_KEYS: [&str; 2] = ["zone", "rack"];

/// Parse a location as `--location` gives it: `zone=z1,rack=r2` (either key may be left
/// out; empty for none). Names are 1 to 64 letters, digits, '.', '_' or '-'.
pub fn parse_location(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut location = BTreeMap::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once('=') else {
            return Err(format!(
                "location \"{part}\" is not KEY=NAME (for example zone=z1,rack=r2)"
            ));
        };
        let (key, value) = (key.trim(), value.trim());
        if !LOCATION_KEYS.contains(&key) {
            return Err(format!(
                "unknown location key \"{key}\": the keys are {} (the host is the OSD's --host)",
                LOCATION_KEYS.join(" and ")
            ));
        }
        if !valid_name(value) {
            return Err(format!(
                "location {key}=\"{value}\": a name is 1 to 64 letters, digits, '.', '_' or '-'"
            ));
        }
        if location
            .insert(key.to_string(), value.to_string())
            .is_some()
        {
            return Err(format!("location key \"{key}\" is given twice"));
        }
    }
    Ok(location)
}

/// A location as `--location` takes it (`zone=z1,rack=r2`); empty for none.
pub fn format_location(location: &BTreeMap<String, String>) -> String {
    LOCATION_KEYS
        .iter()
        .filter_map(|k| location.get(*k).map(|v| format!("{k}={v}")))
        .collect::<Vec<_>>()
        .join(",")
}

/// A device class name (`nvme`, `ssd`, `hdd`, or an operator's own): 1 to 32 lowercase
/// letters, digits or '-'; not `any`, which `pool set NAME device-class any` reads as "no
/// class".
pub fn check_device_class(class: &str) -> Result<(), String> {
    if class == "any" {
        return Err(
            "device class \"any\" is reserved: `basalt pool set NAME device-class any` lifts a \
             pool's class"
                .into(),
        );
    }
    let ok = !class.is_empty()
        && class.len() <= 32
        && class
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "device class \"{class}\" must be 1 to 32 lowercase letters, digits or '-' (nvme, \
             ssd, hdd, ...)"
        ))
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// One OSD as the cluster knows it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdInfo {
    pub id: OsdId,
    /// Failure-domain name of the machine it runs on.
    pub host: String,
    /// Data-plane address, "IP:PORT".
    pub addr: String,
    /// Relative share of data (capacity in GiB, at least 1).
    pub weight: u64,
    /// Alive right now.
    pub up: bool,
    /// Counted in placement (an OSD that is down but still in keeps its PGs, degraded).
    pub is_in: bool,
    /// Identifies one run of the OSD process (new at every start): a PG's record of which
    /// copies are complete names (OSD, incarnation), so a restarted OSD, which may have lost
    /// writes it acknowledged but had not flushed, is not mistaken for a complete copy.
    #[serde(default)]
    pub incarnation: u64,
    /// How its store's I/O runs (`direct uring`, `buffered inline`, ...); empty when the
    /// OSD did not say (an older OSD).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub io: String,
    /// The epoch of the map in which this OSD last came up (0: unknown, an older monitor).
    /// Peers promise a peer lease only to the run of the OSD their map shows up: a process
    /// that missed its own down-and-up cannot use promises meant for the next run.
    #[serde(default)]
    pub up_from: u32,
    /// Down by its peers' reports while still running (its liveness record stands), and not
    /// yet known to have flushed its store since: it may hold the only copies of acknowledged
    /// writes not yet durable, so a FLUSH must reach it (or wait until it says it flushed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unflushed: bool,
    /// Where it stands above its host: `zone` and `rack` (either may be absent).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub location: BTreeMap<String, String>,
    /// Its device class (`nvme`, `ssd`, `hdd`, ...); empty from an older OSD.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub class: String,
}

impl OsdInfo {
    /// The failure domain of `domain`'s kind this OSD is in; None when its location does
    /// not say (it is then no candidate for pools with that failure domain).
    pub fn domain(&self, domain: FailureDomain) -> Option<String> {
        match domain {
            FailureDomain::Osd => Some(format!("osd.{}", self.id)),
            FailureDomain::Host => Some(self.host.clone()),
            FailureDomain::Rack => self.location.get("rack").cloned(),
            FailureDomain::Zone => self.location.get("zone").cloned(),
        }
    }

    /// Whether a pool's PGs may be placed here: its device class (when the pool names one)
    /// and a location with the pool's failure domain.
    pub fn serves(&self, pool: &PoolSpec) -> bool {
        pool.device_class.as_ref().is_none_or(|c| *c == self.class)
            && self.domain(pool.failure_domain).is_some()
    }
}

/// A redundancy scheme and its placement settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolSpec {
    pub id: PoolId,
    pub name: String,
    /// Number of replicas.
    pub size: u32,
    /// Fewest live replicas that still accept I/O.
    pub min_size: u32,
    pub pg_count: u32,
    pub failure_domain: FailureDomain,
    /// Bytes per object of volumes in this pool (per stripe for an erasure-coded pool).
    pub object_size: u32,
    /// The erasure code of an erasure-coded pool (`size` is then `k + m`, and its PGs are
    /// placed by position: see [`ClusterMap::positions`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ec: Option<EcProfile>,
    /// Only OSDs of this device class hold its PGs (None: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<String>,
    /// The epoch at which `pg_count` last changed (0: never): every PG of the pool began
    /// an interval there, and a PG record older than it is of the previous count's era
    /// (docs/design.md, "PG split and merge").
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pg_count_since: u32,
    /// The PG count before that change (0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pg_count_before: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

impl PoolSpec {
    /// The PGs of the previous count whose objects a PG of this count holds now: its
    /// parent after a split, its children after a merge (itself among them when its index
    /// existed before). Empty when the count never changed.
    pub fn predecessors(&self, index: u32) -> Vec<u32> {
        pg_predecessors(index, self.pg_count, self.pg_count_before)
    }
}

/// The PGs of a pool of `before` PGs whose objects PG `index` of `now` PGs holds, when one
/// count is a multiple of the other: its parent after a split, its children after a merge.
/// Empty when `before` is 0 (no change) or the counts are not so related.
pub fn pg_predecessors(index: u32, now: u32, before: u32) -> Vec<u32> {
    if before == 0 || now == 0 || index >= now {
        return Vec::new();
    }
    if now.is_multiple_of(before) {
        vec![index % before]
    } else if before.is_multiple_of(now) {
        (0..before / now).map(|i| index + i * now).collect()
    } else {
        Vec::new()
    }
}

/// An empty position of an erasure-coded PG's placement (too few OSDs or failure domains)
/// or of its [`ClusterMap::positions`] (the OSD there is down).
pub const NO_OSD: OsdId = OsdId::MAX;

/// Problems with a map or a request against it.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum MapError {
    #[error("pool {pool} does not exist")]
    NoSuchPool { pool: PoolId },
    #[error("pool {pool} has {pgs} PGs; pg {index} is out of range")]
    NoSuchPg { pool: PoolId, pgs: u32, index: u32 },
    #[error("osd {osd} is not in the map")]
    NoSuchOsd { osd: OsdId },
}

/// Everything a client or OSD needs to route I/O, at one epoch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterMap {
    pub epoch: u32,
    pub osds: BTreeMap<OsdId, OsdInfo>,
    pub pools: BTreeMap<PoolId, PoolSpec>,
    /// For each pool, the placement of each PG: the ordered OSD set computed from the OSDs
    /// that are `in` (down ones included).
    pub pgs: BTreeMap<PoolId, Vec<Vec<OsdId>>>,
    /// For each pool, the acting set of each PG: its placement without the OSDs that are
    /// down, in the same order. The first is the primary. Derived from `pgs` and `up`.
    #[serde(default)]
    pub acting: BTreeMap<PoolId, Vec<Vec<OsdId>>>,
    /// For each pool, the epoch that began each PG's current *interval*: the last epoch at
    /// which its acting set (members and their incarnations) changed. Carried in the map so
    /// that every OSD agrees on intervals even when it missed maps (cut off, or slow to
    /// follow): deriving them from the maps an OSD happened to see would let an A, B, A
    /// sequence look like no change at all.
    #[serde(default)]
    pub intervals: BTreeMap<PoolId, Vec<u32>>,
}

impl ClusterMap {
    /// The PG of an object. It hashes the inode's family key (shared by every layer of a
    /// clone family), so every layer of an object lands in the same PG, and any OSD can tell
    /// an object's PG from its id alone.
    pub fn pg_of(pool: &PoolSpec, obj: ObjectId) -> PgId {
        PgId {
            pool: pool.id,
            index: Self::pg_index(obj, pool.pg_count),
        }
    }

    /// The PG a request goes to under this map: for one about an object (`opcode`), the PG
    /// `object` is in now — `pg`, computed earlier, may predate a change of the pool's PG
    /// count; else `pg` itself (a request addressed to a PG).
    pub fn routed_pg(&self, pg: PgId, opcode: basalt_proto::Opcode, object: ObjectId) -> PgId {
        match self.pools.get(&pg.pool) {
            Some(pool) if opcode.addresses_object() => Self::pg_of(pool, object),
            _ => pg,
        }
    }

    /// The index of an object's PG in a pool of `pg_count` PGs (a count the pool had, or
    /// has, while its PGs split or merge).
    pub fn pg_index(obj: ObjectId, pg_count: u32) -> u32 {
        // A chunk key of an erasure-coded stripe lives in its stripe's PG.
        let obj = obj.stripe();
        let h = hash2(inode_family(obj.inode), obj.index);
        (h % pg_count.max(1) as u64) as u32
    }

    /// The live OSDs of a PG, primary first (empty when every OSD of the PG is down).
    pub fn acting(&self, pg: PgId) -> Result<&[OsdId], MapError> {
        Self::lookup(&self.acting, pg)
    }

    /// The acting set of `pg` with each member's incarnation (empty when unknown).
    pub fn acting_with_incarnations(&self, pg: PgId) -> Vec<(OsdId, u64)> {
        self.acting(pg)
            .map(|a| {
                a.iter()
                    .map(|id| (*id, self.osds.get(id).map(|o| o.incarnation).unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The OSD at each position of an erasure-coded PG, [`NO_OSD`] where the placed OSD is
    /// down or none was placed (chunk `i` of every stripe of the PG lives at position `i`).
    /// For a replicated PG: its placement with the same holes.
    pub fn positions(&self, pg: PgId) -> Result<Vec<OsdId>, MapError> {
        let up = |id: &OsdId| self.osds.get(id).is_some_and(|o| o.up);
        Ok(self
            .placement(pg)?
            .iter()
            .map(|id| if up(id) { *id } else { NO_OSD })
            .collect())
    }

    /// What names an interval of `pg`: the acting set with incarnations, and for an
    /// erasure-coded PG every position too (a member moving to another position holds other
    /// chunks: a new interval).
    pub fn interval_members(&self, pg: PgId) -> Vec<(OsdId, u64)> {
        let ec = self.pools.get(&pg.pool).is_some_and(|p| p.ec.is_some());
        if !ec {
            return self.acting_with_incarnations(pg);
        }
        self.positions(pg)
            .unwrap_or_default()
            .into_iter()
            .map(|id| (id, self.osds.get(&id).map(|o| o.incarnation).unwrap_or(0)))
            .collect()
    }

    /// The epoch that began `pg`'s current interval. A map without intervals (written by
    /// an older monitor, or built by hand) counts every epoch as a new interval: peering
    /// more often than needed is safe, missing an interval is not.
    pub fn interval(&self, pg: PgId) -> u32 {
        self.intervals
            .get(&pg.pool)
            .and_then(|v| v.get(pg.index as usize))
            .copied()
            .unwrap_or(self.epoch)
    }

    /// Set every PG's interval for this map, the successor of `previous`: kept where the
    /// acting set (with incarnations) is unchanged, else this map's epoch.
    pub fn carry_intervals(&mut self, previous: &ClusterMap) {
        let mut intervals = BTreeMap::new();
        for pool in self.pools.values() {
            let table = (0..pool.pg_count)
                .map(|index| {
                    let pg = PgId {
                        pool: pool.id,
                        index,
                    };
                    let kept = previous
                        .intervals
                        .get(&pg.pool)
                        .and_then(|v| v.get(index as usize));
                    // A PG count change starts an interval for every PG of the pool.
                    let same_count = previous
                        .pools
                        .get(&pool.id)
                        .is_some_and(|p| p.pg_count == pool.pg_count);
                    match kept {
                        Some(&since)
                            if same_count
                                && self.interval_members(pg) == previous.interval_members(pg) =>
                        {
                            since
                        }
                        _ => self.epoch,
                    }
                })
                .collect();
            intervals.insert(pool.id, table);
        }
        self.intervals = intervals;
    }

    /// The placement of a PG: its OSDs whether up or down, in order.
    pub fn placement(&self, pg: PgId) -> Result<&[OsdId], MapError> {
        Self::lookup(&self.pgs, pg)
    }

    fn lookup(table: &BTreeMap<PoolId, Vec<Vec<OsdId>>>, pg: PgId) -> Result<&[OsdId], MapError> {
        let pgs = table
            .get(&pg.pool)
            .ok_or(MapError::NoSuchPool { pool: pg.pool })?;
        pgs.get(pg.index as usize)
            .map(|v| v.as_slice())
            .ok_or(MapError::NoSuchPg {
                pool: pg.pool,
                pgs: pgs.len() as u32,
                index: pg.index,
            })
    }

    pub fn osd(&self, id: OsdId) -> Result<&OsdInfo, MapError> {
        self.osds.get(&id).ok_or(MapError::NoSuchOsd { osd: id })
    }

    /// Recompute every pool's PG table from the OSDs that are `in`, bump the epoch and start
    /// new intervals where acting sets changed.
    pub fn recompute(&mut self) {
        let previous = self.clone();
        let mut pgs = BTreeMap::new();
        for pool in self.pools.values() {
            let candidates: Vec<&OsdInfo> = self
                .osds
                .values()
                .filter(|o| o.is_in && o.serves(pool))
                .collect();
            let table = (0..pool.pg_count)
                .map(|index| {
                    let pg = PgId {
                        pool: pool.id,
                        index,
                    };
                    if pool.ec.is_some() {
                        place_pg_positions(pg, pool.size as usize, pool.failure_domain, &candidates)
                            .into_iter()
                            .map(|o| o.unwrap_or(NO_OSD))
                            .collect()
                    } else {
                        place_pg(pg, pool.size as usize, pool.failure_domain, &candidates)
                    }
                })
                .collect();
            pgs.insert(pool.id, table);
        }
        self.pgs = pgs;
        self.update_acting();
        self.epoch += 1;
        self.carry_intervals(&previous);
    }

    /// Recompute the acting sets from the placement and the OSDs' `up` flags (the epoch is
    /// the caller's to bump).
    pub fn update_acting(&mut self) {
        let up = |id: &OsdId| self.osds.get(id).is_some_and(|o| o.up);
        self.acting = self
            .pgs
            .iter()
            .map(|(&pool, table)| {
                let sets = table
                    .iter()
                    .map(|set| set.iter().copied().filter(up).collect())
                    .collect();
                (pool, sets)
            })
            .collect();
    }

    /// Every PG of every pool.
    pub fn all_pgs(&self) -> impl Iterator<Item = PgId> + '_ {
        self.pools
            .values()
            .flat_map(|p| (0..p.pg_count).map(move |index| PgId { pool: p.id, index }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a split PG's predecessor is its parent (`index mod before`), a merged PG's are
    /// its children (`index + i·now`), and every object of a PG under the new count was in
    /// one of its predecessors under the old one; unrelated counts and a pool that never
    /// changed have none.
    #[test]
    fn predecessors_hold_every_object_of_their_successor() {
        assert_eq!(pg_predecessors(37, 128, 32), vec![5]);
        assert_eq!(pg_predecessors(5, 32, 128), vec![5, 37, 69, 101]);
        assert_eq!(pg_predecessors(5, 32, 0), Vec::<u32>::new());
        assert_eq!(pg_predecessors(5, 48, 32), Vec::<u32>::new());
        assert_eq!(pg_predecessors(40, 32, 128), Vec::<u32>::new());
        for (now, before) in [(128, 32), (32, 128), (16, 8), (1, 4), (4, 1)] {
            for index in 0..2000u64 {
                let obj = ObjectId::new((0x77 << 40) | (index / 7), index);
                let new = ClusterMap::pg_index(obj, now);
                let old = ClusterMap::pg_index(obj, before);
                assert!(
                    pg_predecessors(new, now, before).contains(&old),
                    "{obj:?}: pg {new} of {now} does not name pg {old} of {before}"
                );
            }
        }
    }

    fn map_with(osds: u32, pool_size: u32) -> ClusterMap {
        let mut m = ClusterMap::default();
        for id in 0..osds {
            m.osds.insert(
                id,
                OsdInfo {
                    id,
                    host: "local".into(),
                    addr: format!("127.0.0.1:{}", 7000 + id),
                    weight: 1,
                    up: true,
                    is_in: true,
                    incarnation: 0,
                    io: String::new(),
                    up_from: 0,
                    unflushed: false,
                    ..OsdInfo::default()
                },
            );
        }
        m.pools.insert(
            1,
            PoolSpec {
                id: 1,
                name: "rbd".into(),
                size: pool_size,
                min_size: 2,
                pg_count: 16,
                failure_domain: FailureDomain::Osd,
                object_size: 128 << 10,
                ec: None,
                device_class: None,
                pg_count_since: 0,
                pg_count_before: 0,
            },
        );
        m.recompute();
        m
    }

    /// Goal: with 3 OSDs and size 3, every PG holds all three, and primaries are spread.
    #[test]
    fn three_osds_three_replicas() {
        let m = map_with(3, 3);
        assert_eq!(m.epoch, 1);
        let mut primaries = [0u32; 3];
        for i in 0..16 {
            let set = m.acting(PgId { pool: 1, index: i }).unwrap();
            let mut sorted = set.to_vec();
            sorted.sort();
            assert_eq!(sorted, vec![0, 1, 2]);
            primaries[set[0] as usize] += 1;
        }
        assert!(primaries.iter().all(|&n| n > 0), "{primaries:?}");
    }

    /// Goal: a down OSD leaves the acting sets (keeping the order of the rest) but not the
    /// placement.
    #[test]
    fn down_osd_leaves_acting_not_placement() {
        let mut m = map_with(3, 3);
        m.osds.get_mut(&1).unwrap().up = false;
        m.update_acting();
        for i in 0..16 {
            let pg = PgId { pool: 1, index: i };
            let placed = m.placement(pg).unwrap().to_vec();
            let acting = m.acting(pg).unwrap().to_vec();
            assert_eq!(placed.len(), 3);
            let expect: Vec<_> = placed.into_iter().filter(|&o| o != 1).collect();
            assert_eq!(acting, expect);
        }
    }

    /// Goal: an OSD that goes down and comes back as the same run starts a new interval at
    /// each change (A, B, A is two changes, not none), and unchanged PGs keep theirs.
    #[test]
    fn intervals_change_with_acting_sets_and_incarnations() {
        let m1 = map_with(4, 3);
        let pg_of_osd = |m: &ClusterMap, osd: OsdId, member: bool| {
            m.all_pgs()
                .find(|&pg| m.acting(pg).unwrap().contains(&osd) == member)
                .unwrap()
        };
        let with_1 = pg_of_osd(&m1, 1, true);
        let without_1 = pg_of_osd(&m1, 1, false);
        assert_eq!(m1.interval(with_1), 1);

        let mut m2 = m1.clone();
        m2.osds.get_mut(&1).unwrap().up = false;
        m2.update_acting();
        m2.epoch = 2;
        m2.carry_intervals(&m1);
        assert_eq!(m2.interval(with_1), 2, "osd.1 left the acting set");
        assert_eq!(m2.interval(without_1), 1, "untouched PG keeps its interval");

        let mut m3 = m2.clone();
        m3.osds.get_mut(&1).unwrap().up = true;
        m3.update_acting();
        m3.epoch = 3;
        m3.carry_intervals(&m2);
        assert_eq!(m3.acting(with_1).unwrap(), m1.acting(with_1).unwrap());
        assert_eq!(
            m3.interval(with_1),
            3,
            "back to the first acting set: still new"
        );
        assert_eq!(m3.interval(without_1), 1);

        let mut m4 = m3.clone();
        m4.osds.get_mut(&1).unwrap().incarnation = 7;
        m4.epoch = 4;
        m4.carry_intervals(&m3);
        assert_eq!(
            m4.interval(with_1),
            4,
            "a restarted member starts an interval"
        );
        assert_eq!(m4.interval(without_1), 1);

        let legacy = ClusterMap {
            intervals: BTreeMap::new(),
            ..m4.clone()
        };
        assert_eq!(
            legacy.interval(without_1),
            4,
            "no intervals: every epoch is one"
        );
    }

    /// Goal: an erasure-coded PG keeps its positions when a member goes down (a hole, never
    /// a shift), its acting set is the live positions in order, and a member going down or
    /// moving position starts a new interval.
    #[test]
    fn erasure_coded_pgs_keep_positions() {
        let mut m = map_with(5, 3);
        let mut pool = m.pools[&1].clone();
        pool.id = 2;
        pool.ec = Some(EcProfile { k: 2, m: 1 });
        m.pools.insert(2, pool);
        m.recompute();
        let pg = PgId { pool: 2, index: 3 };
        let placed = m.placement(pg).unwrap().to_vec();
        assert_eq!(placed.len(), 3);
        assert!(placed.iter().all(|&o| o != NO_OSD));
        assert_eq!(m.positions(pg).unwrap(), placed);
        let before = m.clone();
        let gone = placed[1];
        m.osds.get_mut(&gone).unwrap().up = false;
        m.update_acting();
        m.epoch += 1;
        m.carry_intervals(&before);
        assert_eq!(m.positions(pg).unwrap(), vec![placed[0], NO_OSD, placed[2]]);
        assert_eq!(m.acting(pg).unwrap(), &[placed[0], placed[2]]);
        assert_eq!(m.interval(pg), m.epoch);
        // A live member moving to another position keeps the acting set but is a new
        // interval.
        let before = m.clone();
        let table = m.pgs.get_mut(&2).unwrap();
        table[3].swap(1, 2);
        m.update_acting();
        m.epoch += 1;
        m.carry_intervals(&before);
        assert_eq!(m.acting(pg).unwrap(), before.acting(pg).unwrap());
        assert_eq!(m.interval(pg), m.epoch);
        // Chunk keys live in their stripe's PG.
        let stripe = ObjectId::new(2 << 48 | 1 << 16, 77);
        let spec = &m.pools[&2];
        assert_eq!(
            ClusterMap::pg_of(spec, stripe.chunk(2, true)),
            ClusterMap::pg_of(spec, stripe)
        );
    }

    /// Goal: locations and device classes as operators write them are read or refused
    /// with the reason: unknown or repeated keys, bad names, and the reserved class `any`.
    #[test]
    fn locations_and_classes_are_checked() {
        let l = parse_location(" rack=r2, zone=z1 ").unwrap();
        assert_eq!(format_location(&l), "zone=z1,rack=r2");
        assert!(parse_location("").unwrap().is_empty());
        for (bad, why) in [
            ("row=1", "unknown location key \"row\""),
            ("host=h1", "unknown location key \"host\""),
            ("rack=r1,rack=r2", "given twice"),
            ("rack", "is not KEY=NAME"),
            ("rack=r 1", "a name is 1 to 64"),
        ] {
            let err = parse_location(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        assert!(check_device_class("nvme").is_ok());
        assert!(check_device_class("NVMe")
            .unwrap_err()
            .contains("lowercase"));
        assert!(check_device_class("").is_err());
        assert!(check_device_class("any").unwrap_err().contains("reserved"));
    }

    /// Goal: an unknown PG or pool is an error, not a panic.
    #[test]
    fn unknown_pg_is_error() {
        let m = map_with(3, 3);
        assert!(matches!(
            m.acting(PgId { pool: 1, index: 99 }),
            Err(MapError::NoSuchPg { .. })
        ));
        assert!(matches!(
            m.acting(PgId { pool: 7, index: 0 }),
            Err(MapError::NoSuchPool { pool: 7 })
        ));
    }

    /// Goal: objects of one volume spread over all PGs.
    #[test]
    fn objects_spread_over_pgs() {
        let m = map_with(3, 3);
        let pool = &m.pools[&1];
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..1000 {
            seen.insert(ClusterMap::pg_of(pool, ObjectId::new(42 << 16, i)).index);
        }
        assert_eq!(seen.len(), 16);
    }
}
