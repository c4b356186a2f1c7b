//! What one OSD knows of each PG: the current interval, its role in it, and the seal that
//! keeps writes of older intervals out.
//!
//! An *interval* is a run of map epochs in which a PG's acting set (members and their
//! incarnations) stays the same; it is named by the epoch that began it, which the monitor
//! records in the map (`ClusterMap::interval`) so every OSD agrees. The primary of an
//! interval serves I/O only once it has peered (found the authoritative contents and made its
//! own copy match them); versions it assigns are `(interval, counter)`, so they grow across
//! intervals.

use basalt_proto::{ObjectId, OsdId, PgId};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

/// Lock shards of the PG table; one shard's lock also orders a PG's mutations.
pub const PG_LOCK_SHARDS: usize = 64;

/// This OSD's role and progress in a PG's current interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgPhase {
    /// Not the primary (a replica, or not a member).
    Replica,
    /// The primary, peering: no I/O yet.
    Peering,
    /// The primary, peered: serving I/O.
    Active,
    /// The primary, but no copy known complete is reachable (or fewer than min_size members
    /// are up): I/O waits.
    Incomplete,
}

/// One PG on this OSD.
#[derive(Clone, Debug)]
pub struct PgEntry {
    /// Epoch that began the current interval (0: none seen yet).
    pub interval: u32,
    /// The acting set of the interval, with each member's incarnation.
    pub acting: Vec<(OsdId, u64)>,
    pub phase: PgPhase,
    /// Replica mutations sent under a map epoch below this are refused: a newer interval's
    /// primary has read (or is reading) this copy.
    pub sealed: u32,
    /// Version counter within the interval (as primary).
    pub counter: u64,
    /// Bumped at every interval change; background work of an older generation stops.
    pub generation: u64,
    /// Erasure-coded PGs, as primary: positions (bit i = position i) whose chunks may be
    /// missing or stale until recovery rebuilt them; reads treat them as holes.
    pub ec_behind: u32,
    /// Erasure-coded PGs, as primary: for each position, the OSDs that may hold its chunks
    /// (its holder first, then holders of earlier intervals not yet rebuilt from).
    pub ec_sources: Vec<Vec<OsdId>>,
    /// Erasure-coded PGs, as primary: stripes peering found unfound (their newest committed
    /// version on fewer than k positions it could list). Their I/O answers Unavailable
    /// until they are found again (a new peering) or given up (`crate::ec::unfound`).
    pub ec_unfound: BTreeSet<ObjectId>,
    /// The OSDs those stripes wait for, each with the run peering missed (None: it was
    /// down): when the map shows one up in another run, the primary peers again.
    pub ec_waiting: Vec<(OsdId, Option<u64>)>,
    /// Replicated PGs, as a member: the interval in which the primary said this copy is
    /// complete (COMPLETE; 0: not known complete). A gateway's LOCAL_READ is served from
    /// this copy only while it equals `interval` (docs/design.md, "Reads from a local
    /// replica").
    pub complete_in: u32,
    /// The members of the intervals this OSD saw since the PG was last activated under it
    /// (its own activation as primary, or the primary's COMPLETE, resets it to that
    /// interval's members): before sealing for a newer interval, those it drops must stop
    /// serving local reads ([`crate::heartbeat::wait_to_seal`]).
    pub since_active: BTreeSet<OsdId>,
}

impl Default for PgEntry {
    fn default() -> Self {
        Self {
            interval: 0,
            acting: Vec::new(),
            phase: PgPhase::Replica,
            sealed: 0,
            counter: 0,
            generation: 0,
            ec_behind: 0,
            ec_sources: Vec::new(),
            ec_unfound: BTreeSet::new(),
            ec_waiting: Vec::new(),
            complete_in: 0,
            since_active: BTreeSet::new(),
        }
    }
}

/// The PG table, sharded by PG.
pub struct PgTable {
    shards: Box<[Mutex<HashMap<PgId, PgEntry>>]>,
}

impl Default for PgTable {
    fn default() -> Self {
        Self {
            shards: (0..PG_LOCK_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        }
    }
}

impl PgTable {
    /// The shard holding `pg`. Its lock is never held across an await.
    pub fn shard(&self, pg: PgId) -> &Mutex<HashMap<PgId, PgEntry>> {
        let h = (pg.pool as usize).wrapping_mul(31) ^ pg.index as usize;
        &self.shards[h % PG_LOCK_SHARDS]
    }

    /// Run `f` on `pg`'s entry (created empty if missing) under its shard lock.
    pub fn with<R>(&self, pg: PgId, f: impl FnOnce(&mut PgEntry) -> R) -> R {
        let mut shard = self.shard(pg).lock().expect("pg shard lock");
        f(shard.entry(pg).or_default())
    }

    /// A copy of `pg`'s entry.
    pub fn get(&self, pg: PgId) -> PgEntry {
        self.with(pg, |e| e.clone())
    }

    /// Wait until every mutation holding a shard lock now has finished: one taking a lock
    /// afterwards sees whatever changed before this call (a new map).
    pub fn barrier(&self) {
        for shard in self.shards.iter() {
            drop(shard.lock().expect("pg shard lock"));
        }
    }

    /// Every PG entry (for status reports).
    pub fn snapshot(&self) -> Vec<(PgId, PgEntry)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().expect("pg shard lock");
            out.extend(shard.iter().map(|(k, v)| (*k, v.clone())));
        }
        out.sort_by_key(|(k, _)| *k);
        out
    }
}
