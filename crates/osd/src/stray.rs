//! Removing stray copies: objects of PGs this OSD no longer belongs to (it was marked out,
//! or a new OSD took its place). They are deleted only once the PG is clean elsewhere: its
//! current primary recorded a complete copy on every member of a full-size acting set, each
//! still the same run — so the stray copy is never the last good one.

use crate::daemon::Osd;
use crate::recovery::read_record;
use basalt_placement::ClusterMap;
use basalt_proto::{inode_pool, ObjectId, PgId, Version};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Scan for stray copies every `interval` until `stop`.
pub(crate) async fn remove_strays(
    osd: Arc<Osd>,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let removed = scan_once(&osd).await;
        if removed > 0 {
            tracing::info!(
                osd = osd.id,
                objects = removed,
                "removed stray copies of PGs this OSD left"
            );
        }
    }
}

/// Local objects grouped by the PG they belong to under `map`.
fn objects_by_pg(osd: &Osd, map: &ClusterMap) -> BTreeMap<PgId, Vec<ObjectId>> {
    let mut by_pg: BTreeMap<PgId, Vec<ObjectId>> = BTreeMap::new();
    for (obj, _) in osd.store.objects() {
        if let Some(pool) = map.pools.get(&inode_pool(obj.inode)) {
            by_pg
                .entry(ClusterMap::pg_of(pool, obj))
                .or_default()
                .push(obj);
        }
    }
    by_pg
}

/// Is `pg` clean without this OSD: a full-size acting set, not including us, every member
/// recorded complete as its current run by the PG's current primary (of the pool's current
/// PG count)?
async fn clean_elsewhere(osd: &Osd, map: &ClusterMap, pg: PgId) -> bool {
    let (Ok(placement), Ok(acting), Some(pool)) =
        (map.placement(pg), map.acting(pg), map.pools.get(&pg.pool))
    else {
        return false;
    };
    if placement.contains(&osd.id) || acting.contains(&osd.id) || (acting.len() as u32) < pool.size
    {
        return false;
    }
    let Ok(Some((rec, _))) = read_record(osd, pg).await else {
        return false;
    };
    // After a PG count change, only a record the PG's own primary wrote under the new
    // count says its copies are complete (an inherited one names its parent's copies).
    rec.inherited == 0
        && rec.epoch >= pool.pg_count_since
        && rec.acting == acting
        && acting.iter().all(|id| {
            let incarnation = map.osds.get(id).map(|o| o.incarnation);
            rec.complete
                .iter()
                .any(|c| c.osd == *id && Some(c.incarnation) == incarnation)
        })
}

/// Delete the local objects of pools `basalt pool rm` removed (recorded under
/// `REMOVED_POOLS_PREFIX` once the removal settled) that this OSD's map no longer has.
/// Pool ids are never reused, so such an object can belong to nothing else.
async fn remove_objects_of_removed_pools(osd: &Osd, map: &ClusterMap) -> usize {
    use basalt_meta::schema::REMOVED_POOLS_PREFIX;
    let listed = match osd.meta.list(REMOVED_POOLS_PREFIX).await {
        Ok(listed) => listed,
        Err(e) => {
            tracing::debug!(osd = osd.id, "list removed pools: {e}");
            return 0;
        }
    };
    let removed_pools: BTreeSet<u32> = listed
        .iter()
        .filter_map(|(key, _, _)| key.strip_prefix(REMOVED_POOLS_PREFIX)?.parse().ok())
        .filter(|id| !map.pools.contains_key(id))
        .collect();
    if removed_pools.is_empty() {
        return 0;
    }
    let mut removed = 0;
    for (obj, _) in osd.store.objects() {
        if removed_pools.contains(&inode_pool(obj.inode))
            && osd.store.delete(obj, Version::ZERO).is_ok()
        {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::info!(
            osd = osd.id,
            objects = removed,
            pools = ?removed_pools,
            "removed objects of pools that were removed"
        );
    }
    removed
}

/// One scan; returns the number of objects removed.
async fn scan_once(osd: &Arc<Osd>) -> usize {
    let map = osd.map();
    let mut removed = remove_objects_of_removed_pools(osd, &map).await;
    for (pg, objects) in objects_by_pg(osd, &map) {
        if !clean_elsewhere(osd, &map, pg).await {
            continue;
        }
        // Delete under the PG's lock, and only if no newer interval looked at this copy
        // meanwhile: a new primary's LIST seals the PG (under the same lock) before it
        // reads, so it sees either all of the copy or none of it, never a copy shrinking
        // after it was counted complete.
        let shard = osd.pgs.shard(pg).lock().expect("pg shard lock");
        let sealed = shard.get(&pg).map(|e| e.sealed).unwrap_or(0);
        if sealed > map.epoch || osd.map().epoch != map.epoch {
            return removed;
        }
        for obj in objects {
            if osd.store.delete(obj, Version::ZERO).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}
