//! Draining and removing OSDs and hosts (`basalt osd drain/rm`, `basalt host drain/rm`;
//! docs/design.md, "Draining and removing OSDs").
//!
//! Draining marks an OSD out and waits until no PG needs it any more: placement moved its
//! PGs elsewhere, their primaries recovered the data there and re-recorded the PGs without
//! it. Removal then forgets the OSD for good: its record, its liveness key and the failure
//! reports about it are deleted, and a [`RemovedOsdRecord`] keeps its id from ever being
//! used again. It is refused while the OSD runs, or while a PG record still needs it (the
//! only complete copy, or chunks an erasure-coded PG cannot rebuild without), unless forced.

use crate::error::ClientError;
use crate::status::{pg_states, PgStatus};
use basalt_meta::schema::{
    alive_key, osd_key, parse_failure_key, removed_osd_key, OsdRecord, PgRecord, RemovedOsdRecord,
    FAILURES_PREFIX, OSDS_PREFIX, PGS_PREFIX,
};
use basalt_meta::{MetaStore, Revision};
use basalt_placement::{ClusterMap, PoolSpec, NO_OSD};
use basalt_proto::{OsdId, PgId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a drain looks at the PG records again (and reports progress).
pub const DRAIN_POLL_MS: u64 = 1_000;
/// PGs named in one error message or progress line; the rest are counted.
const PGS_NAMED_MAX: usize = 16;

/// A PG that still needs OSDs about to be removed, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgNeed {
    /// `POOL.INDEX` as `basalt pg ls` shows it.
    pub pg: String,
    pub pool: String,
    /// What the removal would take from it, e.g. "osd.3 is its only complete copy".
    pub reason: String,
    /// Objects its primary still had to recover when it last recorded the PG.
    pub degraded_objects: u64,
    /// Erasure-coded stripes already unfound (their I/O waits).
    pub unfound_objects: u64,
}

/// The PG records by PG (records of keys that do not parse are skipped).
pub fn parse_pg_records(records: &HashMap<String, PgRecord>) -> HashMap<PgId, &PgRecord> {
    records
        .iter()
        .filter_map(|(key, rec)| {
            let (pool, index) = key.split_once('.')?;
            let pg = PgId {
                pool: pool.parse().ok()?,
                index: index.parse().ok()?,
            };
            Some((pg, rec))
        })
        .collect()
}

/// Every OSD a PG's record names as holding (or possibly holding) its data.
fn named_by_record(rec: &PgRecord) -> BTreeSet<OsdId> {
    let mut named: BTreeSet<OsdId> = rec.acting.iter().copied().collect();
    named.extend(rec.complete.iter().map(|c| c.osd));
    named.extend(rec.holders.iter().map(|c| c.osd));
    named.extend(rec.ec_sources.iter().flatten().copied());
    named.extend(rec.unfound_waiting.iter().copied());
    named.remove(&NO_OSD);
    named
}

/// The PGs that still name any of `osds`: in the map's placement or acting set, or in
/// their record (acting set, complete copies, holders, EC sources, unfound stripes'
/// OSDs). A drained OSD is named by none.
pub fn pgs_naming(
    osds: &BTreeSet<OsdId>,
    map: &ClusterMap,
    records: &HashMap<String, PgRecord>,
) -> BTreeSet<PgId> {
    let records = parse_pg_records(records);
    map.all_pgs()
        .filter(|pg| {
            let in_map =
                |a: Result<&[OsdId], _>| a.is_ok_and(|a| a.iter().any(|o| osds.contains(o)));
            in_map(map.placement(*pg))
                || in_map(map.acting(*pg))
                || records
                    .get(pg)
                    .is_some_and(|r| !named_by_record(r).is_disjoint(osds))
        })
        .collect()
}

/// Why `pg` (record `rec`, pool `k` data chunks when erasure coded) cannot lose `removing`
/// while the OSDs of `remaining` stay, or None when it can.
fn need_of(
    removing: &BTreeSet<OsdId>,
    remaining: &BTreeSet<OsdId>,
    rec: &PgRecord,
    ec_k: Option<u32>,
) -> Option<String> {
    let names = |set: &BTreeSet<OsdId>| {
        set.iter()
            .map(|o| format!("osd.{o}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let waited: BTreeSet<OsdId> = rec
        .unfound_waiting
        .iter()
        .filter(|o| removing.contains(o))
        .copied()
        .collect();
    if !waited.is_empty() {
        return Some(format!("its unfound stripes wait for {}", names(&waited)));
    }
    match ec_k {
        None => {
            // Replicas: any complete copy that stays is an authority; holders are only a
            // fallback for when every complete copy restarted.
            let authorities: BTreeSet<OsdId> = rec
                .complete
                .iter()
                .chain(&rec.holders)
                .map(|c| c.osd)
                .filter(|o| removing.contains(o))
                .collect();
            let other_complete = rec.complete.iter().any(|c| remaining.contains(&c.osd));
            (!authorities.is_empty() && !other_complete)
                .then(|| format!("{} holds its only complete copy", names(&authorities)))
        }
        Some(k) => {
            // Chunks: every position with a source that stays can be read; fewer than k
            // such positions and the stripes cannot be decoded.
            let sources: Vec<BTreeSet<OsdId>> = if rec.ec_sources.is_empty() {
                rec.complete
                    .iter()
                    .map(|c| BTreeSet::from([c.osd]))
                    .collect()
            } else {
                rec.ec_sources
                    .iter()
                    .map(|s| s.iter().copied().filter(|o| *o != NO_OSD).collect())
                    .collect()
            };
            let touched: BTreeSet<OsdId> = sources
                .iter()
                .flatten()
                .filter(|o| removing.contains(o))
                .copied()
                .collect();
            let readable = sources.iter().filter(|s| !s.is_disjoint(remaining)).count() as u32;
            (!touched.is_empty() && readable < k).then(|| {
                format!(
                    "{} holds chunks it needs: {readable} of the {k} positions needed remain",
                    names(&touched)
                )
            })
        }
    }
}

/// The PGs whose records still need some OSD of `removing`: it is their only complete
/// copy (or a holder with no complete copy elsewhere), one of fewer than k chunk positions
/// left of an erasure-coded PG, or an OSD their unfound stripes wait for. `existing` is
/// every OSD with a record; those of `removing` do not count as remaining.
pub fn pgs_needing(
    removing: &BTreeSet<OsdId>,
    existing: &BTreeSet<OsdId>,
    map: &ClusterMap,
    records: &HashMap<String, PgRecord>,
) -> Vec<PgNeed> {
    let remaining: BTreeSet<OsdId> = existing.difference(removing).copied().collect();
    let parsed = parse_pg_records(records);
    let mut needs: Vec<(PgId, PgNeed)> = parsed
        .iter()
        .map(|(pg, rec)| (*pg, *rec))
        .filter_map(|(pg, rec)| {
            // A record of a removed pool needs nothing: the pool's data is given up.
            let pool = map.pools.get(&pg.pool)?;
            if !record_still_used(pool, pg, rec, &parsed) {
                return None;
            }
            let reason = need_of(removing, &remaining, rec, pool.ec.map(|e| e.k))?;
            Some((
                pg,
                PgNeed {
                    pg: pg.to_string(),
                    pool: pool.name.clone(),
                    reason,
                    degraded_objects: rec.degraded_objects,
                    unfound_objects: rec.unfound_objects,
                },
            ))
        })
        .collect();
    needs.sort_by_key(|(pg, _)| (pg.pool, pg.index));
    needs.into_iter().map(|(_, n)| n).collect()
}

/// Does `rec`, the record of `pg`, still say where data is, across PG count changes? A
/// record of the current count's era does; one of the era before does while a PG of the
/// current count that takes its objects has not peered yet; an older one (an index the
/// pool had two changes ago) does not.
fn record_still_used(
    pool: &PoolSpec,
    pg: PgId,
    rec: &PgRecord,
    records: &HashMap<PgId, &PgRecord>,
) -> bool {
    if pool.pg_count_before == 0 || (pg.index < pool.pg_count && rec.of_era(pool.pg_count_since)) {
        return true;
    }
    if pg.index >= pool.pg_count.max(pool.pg_count_before) {
        return false;
    }
    // A record of the previous era: needed by the PGs whose predecessor it is, until they
    // peered under the new count.
    let successors = (0..pool.pg_count)
        .filter(|i| pool.predecessors(*i).contains(&pg.index))
        .map(|index| PgId {
            pool: pg.pool,
            index,
        });
    successors.into_iter().any(|s| {
        records
            .get(&s)
            .is_none_or(|r| r.inherited != 0 || !r.of_era(pool.pg_count_since))
    })
}

/// Names of PGs for a message: the first [`PGS_NAMED_MAX`], then how many more.
fn pg_list(pgs: impl IntoIterator<Item = String>) -> String {
    let pgs: Vec<String> = pgs.into_iter().collect();
    let mut text = pgs
        .iter()
        .take(PGS_NAMED_MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if pgs.len() > PGS_NAMED_MAX {
        text.push_str(&format!(" and {} more", pgs.len() - PGS_NAMED_MAX));
    }
    text
}

/// `osd.1, osd.2`.
fn osd_list(ids: &[OsdId]) -> String {
    ids.iter()
        .map(|i| format!("osd.{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every PG record, by its key's `POOL.INDEX` (decimal, as `pg_key` writes it).
pub async fn read_pg_records(
    meta: &dyn MetaStore,
) -> Result<HashMap<String, PgRecord>, ClientError> {
    Ok(meta
        .list(PGS_PREFIX)
        .await?
        .into_iter()
        .filter_map(|(k, v, _)| {
            let rec = serde_json::from_slice(&v).ok()?;
            Some((k[PGS_PREFIX.len()..].to_string(), rec))
        })
        .collect())
}

/// Every OSD record with its revision.
async fn read_osd_records(meta: &dyn MetaStore) -> Result<Vec<(OsdRecord, Revision)>, ClientError> {
    let mut out = Vec::new();
    for (key, bytes, rev) in meta.list(OSDS_PREFIX).await? {
        let rec = serde_json::from_slice(&bytes).map_err(|e| ClientError::BadReply {
            reason: format!("the record {key}: {e}"),
        })?;
        out.push((rec, rev));
    }
    Ok(out)
}

/// The record of each OSD of `ids`, or NoSuchOsd (saying when it was removed already).
async fn records_of(
    meta: &dyn MetaStore,
    ids: &[OsdId],
) -> Result<Vec<(OsdRecord, Revision)>, ClientError> {
    let all = read_osd_records(meta).await?;
    let mut out = Vec::new();
    for id in ids {
        match all.iter().find(|(r, _)| r.id == *id) {
            Some(found) => out.push(found.clone()),
            None => {
                let removed = meta.get(&removed_osd_key(*id)).await?.is_some();
                return Err(ClientError::NoSuchOsd { id: *id, removed });
            }
        }
    }
    Ok(out)
}

/// The OSDs of host `name`, from their records (a host is known by its OSDs).
pub async fn host_osds(meta: &dyn MetaStore, name: &str) -> Result<Vec<OsdId>, ClientError> {
    let all = read_osd_records(meta).await?;
    let ids: Vec<OsdId> = all
        .iter()
        .filter(|(r, _)| r.host == name)
        .map(|(r, _)| r.id)
        .collect();
    if ids.is_empty() {
        let known: BTreeSet<&str> = all.iter().map(|(r, _)| r.host.as_str()).collect();
        return Err(ClientError::NoSuchHost {
            name: name.to_string(),
            known: known.into_iter().collect::<Vec<_>>().join(", "),
        });
    }
    Ok(ids)
}

/// Where a drain stands, reported once a poll.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainProgress {
    /// PGs that still name a draining OSD, or that it held and are not active+clean yet.
    pub pgs_left: Vec<String>,
    /// Objects those PGs still have to recover (as their primaries last recorded).
    pub degraded_objects: u64,
}

/// Where a drain stands given the map and records: `held` are the PGs that named the OSDs
/// when the drain began.
pub fn drain_progress(
    osds: &BTreeSet<OsdId>,
    held: &BTreeSet<PgId>,
    map: &ClusterMap,
    records: &HashMap<String, PgRecord>,
) -> DrainProgress {
    let naming = pgs_naming(osds, map, records);
    let states: HashMap<String, PgStatus> = pg_states(map, records)
        .into_iter()
        .map(|s| (s.pg.clone(), s))
        .collect();
    let mut left: Vec<PgId> = map
        .all_pgs()
        .filter(|pg| {
            naming.contains(pg)
                || held.contains(pg)
                    && states
                        .get(&pg.to_string())
                        .is_none_or(|s| s.state != "active+clean")
        })
        .collect();
    left.sort_by_key(|pg| (pg.pool, pg.index));
    let degraded_objects = left
        .iter()
        .filter_map(|pg| states.get(&pg.to_string()))
        .map(|s| s.degraded_objects)
        .sum();
    DrainProgress {
        pgs_left: left.iter().map(|pg| pg.to_string()).collect(),
        degraded_objects,
    }
}

/// Drain the OSDs `ids`: mark each out (as `osd out`), then with `wait` poll every
/// [`DRAIN_POLL_MS`] until no PG names them and every PG they held is active+clean
/// elsewhere, calling `progress` at each poll; past `wait`, fail with `NotDrained` (they
/// stay out, data keeps moving). Without `wait`, return once they are marked out.
pub async fn drain_osds(
    meta: Arc<dyn MetaStore>,
    ids: &[OsdId],
    wait: Option<Duration>,
    mut progress: impl FnMut(&DrainProgress),
) -> Result<(), ClientError> {
    records_of(meta.as_ref(), ids).await?;
    let started = Instant::now();
    let maps = crate::follow_map(meta.clone()).await?;
    let osds: BTreeSet<OsdId> = ids.iter().copied().collect();
    // What they held before placement moves anything (the map from before `out`).
    // (Cloned: the map's guard must not be held across the read below.)
    let before = maps.borrow().clone();
    let held = pgs_naming(&osds, &before, &read_pg_records(meta.as_ref()).await?);
    for id in ids {
        let left = wait.map(|w| w.saturating_sub(started.elapsed()));
        crate::osds::set_osd_out(meta.clone(), *id, true, left).await?;
    }
    let Some(wait) = wait else {
        return Ok(());
    };
    // Bound: `wait` of DRAIN_POLL_MS rounds.
    loop {
        let map = maps.borrow().clone();
        let now = drain_progress(&osds, &held, &map, &read_pg_records(meta.as_ref()).await?);
        progress(&now);
        if now.pgs_left.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= wait {
            return Err(ClientError::NotDrained {
                osds: osd_list(ids),
                timeout_ms: wait.as_millis() as u64,
                pgs_left: now.pgs_left.len(),
                pgs: pg_list(now.pgs_left),
                degraded_objects: now.degraded_objects,
            });
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
}

/// What removing some OSDs would do, checked before anything changes.
#[derive(Clone, Debug)]
pub struct RemovalPlan {
    /// The OSDs' records, with the revisions the removal deletes them at.
    pub osds: Vec<(OsdRecord, Revision)>,
    /// PGs that still need them (empty after a drain): removal loses these.
    pub needed: Vec<PgNeed>,
}

/// Check that the OSDs `ids` can be removed: each exists and is not running (its liveness
/// record is gone), and say which PGs still need them.
pub async fn plan_removal(
    meta: Arc<dyn MetaStore>,
    ids: &[OsdId],
) -> Result<RemovalPlan, ClientError> {
    let osds = records_of(meta.as_ref(), ids).await?;
    for id in ids {
        if meta.get(&alive_key(*id)).await?.is_some() {
            return Err(ClientError::OsdUp { id: *id });
        }
    }
    let map = crate::follow_map(meta.clone()).await?.borrow().clone();
    let existing: BTreeSet<OsdId> = read_osd_records(meta.as_ref())
        .await?
        .iter()
        .map(|(r, _)| r.id)
        .collect();
    let removing: BTreeSet<OsdId> = ids.iter().copied().collect();
    let records = read_pg_records(meta.as_ref()).await?;
    let needed = pgs_needing(&removing, &existing, &map, &records);
    Ok(RemovalPlan { osds, needed })
}

/// Remove the OSDs of `plan`: refused (OsdNeeded) while PGs need them unless `force`.
/// For each: the removed-OSD record first (so the OSD can no longer start), then its
/// record (compare-and-delete: an OSD that started meanwhile changed it, and is kept),
/// its liveness key and the failure reports by or about it. With `wait`, return once the
/// cluster map no longer has them.
pub async fn remove_osds(
    meta: Arc<dyn MetaStore>,
    plan: &RemovalPlan,
    force: bool,
    wait: Option<Duration>,
) -> Result<(), ClientError> {
    let ids: Vec<OsdId> = plan.osds.iter().map(|(r, _)| r.id).collect();
    if !plan.needed.is_empty() && !force {
        return Err(ClientError::OsdNeeded {
            osds: osd_list(&ids),
            pgs: pg_list(
                plan.needed
                    .iter()
                    .map(|n| format!("{} ({})", n.pg, n.reason)),
            ),
        });
    }
    let mut maps = crate::follow_map(meta.clone()).await?;
    for (record, rev) in &plan.osds {
        remove_one(
            meta.as_ref(),
            record,
            *rev,
            force && !plan.needed.is_empty(),
        )
        .await?;
    }
    if let Some(wait) = wait {
        let what = format!("{} are out of the cluster map", osd_list(&ids));
        crate::wait_for_map(&mut maps, &what, wait, |m| {
            ids.iter().all(|id| !m.osds.contains_key(id))
        })
        .await?;
    }
    Ok(())
}

/// Remove one OSD's keys (see [`remove_osds`]).
async fn remove_one(
    meta: &dyn MetaStore,
    record: &OsdRecord,
    rev: Revision,
    forced: bool,
) -> Result<(), ClientError> {
    let id = record.id;
    if meta.get(&alive_key(id)).await?.is_some() {
        return Err(ClientError::OsdUp { id });
    }
    let removed = RemovedOsdRecord {
        id,
        host: record.host.clone(),
        store_id: record.store_id.clone(),
        removed_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        forced,
    };
    let bytes = serde_json::to_vec(&removed).map_err(|e| ClientError::Invalid {
        reason: format!("encode the removal of osd.{id}: {e}"),
    })?;
    // Written first and unconditionally: a removal cut short is finished by running it
    // again, and an OSD starting from now on is refused.
    let tombstone_rev = meta.put(&removed_osd_key(id), bytes).await?;
    if !meta.compare_and_delete(&osd_key(id), rev).await? {
        // Started (or changed) since the check: keep it, and let it run.
        meta.compare_and_delete(&removed_osd_key(id), tombstone_rev)
            .await?;
        return Err(ClientError::ChangedConcurrently {
            what: format!("the record of osd.{id}"),
        });
    }
    if let Some((_, alive_rev)) = meta.get(&alive_key(id)).await? {
        meta.compare_and_delete(&alive_key(id), alive_rev).await?;
    }
    for (key, _, key_rev) in meta.list(FAILURES_PREFIX).await? {
        if parse_failure_key(&key).is_some_and(|(target, reporter)| target == id || reporter == id)
        {
            meta.compare_and_delete(&key, key_rev).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::schema::CompleteCopy;
    use basalt_placement::{FailureDomain, PoolSpec};
    use basalt_proto::EcProfile;

    fn copies(osds: &[OsdId]) -> Vec<CompleteCopy> {
        osds.iter()
            .map(|&osd| CompleteCopy {
                osd,
                incarnation: 7,
            })
            .collect()
    }

    fn record(acting: &[OsdId], complete: &[OsdId]) -> PgRecord {
        PgRecord {
            epoch: 5,
            primary: acting[0],
            acting: acting.to_vec(),
            complete: copies(complete),
            degraded_objects: 0,
            holders: Vec::new(),
            unfound_objects: 0,
            unfound_waiting: Vec::new(),
            ec_sources: Vec::new(),
            fence: 0,
            inherited: 0,
        }
    }

    /// A map with pool 1 (3 replicas) and pool 2 (EC 2+1), one PG each, no OSDs placed.
    fn map() -> ClusterMap {
        let mut m = ClusterMap::default();
        let pool = |id, name: &str, ec: Option<EcProfile>| PoolSpec {
            id,
            name: name.into(),
            size: 3,
            min_size: 2,
            pg_count: 1,
            failure_domain: FailureDomain::Osd,
            object_size: 1 << 17,
            ec,
            device_class: None,
            pg_count_since: 0,
            pg_count_before: 0,
        };
        m.pools.insert(1, pool(1, "rbd", None));
        m.pools
            .insert(2, pool(2, "cold", Some(EcProfile { k: 2, m: 1 })));
        m
    }

    fn needs(removing: &[OsdId], recs: &[(&str, PgRecord)]) -> Vec<(String, String)> {
        let existing: BTreeSet<OsdId> = (0..8).collect();
        let records = recs
            .iter()
            .map(|(k, r)| (k.to_string(), r.clone()))
            .collect();
        pgs_needing(
            &removing.iter().copied().collect(),
            &existing,
            &map(),
            &records,
        )
        .into_iter()
        .map(|n| (n.pg, n.reason))
        .collect()
    }

    /// Goal: a replicated PG needs an OSD only when no other complete copy stays; a
    /// holder counts only without a complete copy elsewhere; removing every complete copy
    /// at once (a host) is caught.
    #[test]
    fn replicated_pgs_need_their_last_complete_copy() {
        let table: &[(&[OsdId], PgRecord, bool)] = &[
            // Drained: not named at all.
            (&[3], record(&[0, 1, 2], &[0, 1, 2]), false),
            // One of three complete copies.
            (&[0], record(&[0, 1, 2], &[0, 1, 2]), false),
            // The only complete copy (the others still recovering).
            (&[0], record(&[0, 1, 2], &[0]), true),
            // Every complete copy at once.
            (&[0, 1], record(&[0, 1, 2], &[0, 1]), true),
            // A holder while a complete copy stays elsewhere.
            (
                &[4],
                PgRecord {
                    holders: copies(&[4]),
                    ..record(&[0, 1], &[0])
                },
                false,
            ),
            // A holder with no complete copy elsewhere.
            (
                &[4],
                PgRecord {
                    holders: copies(&[4]),
                    ..record(&[4, 1], &[4])
                },
                true,
            ),
        ];
        for (i, (removing, rec, needed)) in table.iter().enumerate() {
            let got = needs(removing, &[("1.0", rec.clone())]);
            assert_eq!(!got.is_empty(), *needed, "case {i}: {got:?}");
            if *needed {
                assert_eq!(got[0].0, "1.0");
                assert!(got[0].1.contains("only complete copy"), "{got:?}");
            }
        }
    }

    /// Goal: an erasure-coded PG needs an OSD when fewer than k positions would stay
    /// readable, or when its unfound stripes wait for it; a removed OSD no longer counts
    /// as a source, and records of pools out of the map need nothing.
    #[test]
    fn ec_pgs_need_k_positions_and_their_unfound_sources() {
        let ec = |sources: Vec<Vec<OsdId>>| PgRecord {
            ec_sources: sources,
            ..record(&[0, 1, 2], &[0, 1, 2])
        };
        // One position lost of three: two of k = 2 remain.
        assert!(needs(&[2], &[("2.0", ec(vec![vec![0], vec![1], vec![2]]))]).is_empty());
        // Two lost: one remains.
        let got = needs(&[1, 2], &[("2.0", ec(vec![vec![0], vec![1], vec![2]]))]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].1.contains("1 of the 2 positions"), "{got:?}");
        // A position with an older source elsewhere stays readable; a hole is no source.
        let rec = ec(vec![vec![0], vec![1, 5], vec![NO_OSD, 2]]);
        assert!(needs(&[1, 2], &[("2.0", rec.clone())]).is_empty());
        assert_eq!(needs(&[1, 2, 5], &[("2.0", rec)]).len(), 1);
        // Without sources, the complete copies are the positions.
        assert_eq!(
            needs(&[0, 1], &[("2.0", record(&[0, 1, 2], &[0, 1, 2]))]).len(),
            1
        );
        // Unfound stripes waiting for it.
        let waiting = PgRecord {
            unfound_objects: 3,
            unfound_waiting: vec![6],
            ..ec(vec![vec![0], vec![1], vec![2]])
        };
        let got = needs(&[6], &[("2.0", waiting)]);
        assert!(
            got[0].1.contains("unfound stripes wait for osd.6"),
            "{got:?}"
        );
        // A pool out of the map (removed): nothing needed.
        assert!(needs(&[0], &[("9.0", record(&[0], &[0]))]).is_empty());
    }

    /// Goal: a drain is done only when neither the map nor any record names the OSD and
    /// the PGs it held are active+clean; progress counts the PGs left and their objects.
    #[test]
    fn drain_progress_waits_for_records_and_clean_pgs() {
        let mut m = map();
        m.pools.remove(&2);
        for id in 0..4 {
            m.osds.insert(
                id,
                basalt_placement::OsdInfo {
                    id,
                    host: format!("h{id}"),
                    addr: String::new(),
                    weight: 1,
                    up: true,
                    is_in: id != 3,
                    incarnation: 7,
                    io: String::new(),
                    up_from: 1,
                    unflushed: false,
                    ..Default::default()
                },
            );
        }
        m.pgs.insert(1, vec![vec![0, 1, 2]]);
        m.acting.insert(1, vec![vec![0, 1, 2]]);
        m.intervals.insert(1, vec![5]);
        let osd3: BTreeSet<OsdId> = [3].into();
        let held: BTreeSet<PgId> = [PgId { pool: 1, index: 0 }].into();
        let recs = |rec: PgRecord| HashMap::from([("1.0".to_string(), rec)]);
        // The record still names osd.3 (the old interval's copy).
        let old = PgRecord {
            epoch: 4,
            ..record(&[0, 1, 3], &[0, 1, 3])
        };
        let p = drain_progress(&osd3, &held, &m, &recs(old));
        assert_eq!(p.pgs_left, vec!["1.0".to_string()]);
        // Re-recorded without it, still recovering onto osd.2.
        let recovering = PgRecord {
            degraded_objects: 12,
            ..record(&[0, 1, 2], &[0, 1])
        };
        let p = drain_progress(&osd3, &held, &m, &recs(recovering));
        assert_eq!((p.pgs_left.len(), p.degraded_objects), (1, 12));
        // Clean.
        let p = drain_progress(&osd3, &held, &m, &recs(record(&[0, 1, 2], &[0, 1, 2])));
        assert!(p.pgs_left.is_empty(), "{p:?}");
        // Still in the map's placement: not drained whatever the records say.
        m.pgs.insert(1, vec![vec![0, 1, 3]]);
        let p = drain_progress(&osd3, &held, &m, &recs(record(&[0, 1, 2], &[0, 1, 2])));
        assert_eq!(p.pgs_left.len(), 1);
    }

    /// Goal: removal works on the metadata alone — refused for an unknown id, a running
    /// OSD and a needed one (changing nothing), forced when asked; the tombstone stays and
    /// names the id as removed.
    #[tokio::test]
    async fn removal_checks_then_deletes_the_osd_keys() {
        let meta: Arc<dyn MetaStore> = Arc::new(basalt_meta::EmbeddedMeta::in_memory());
        let put = |key: String, value: Vec<u8>| {
            let meta = meta.clone();
            async move { meta.put(&key, value).await.expect("put") }
        };
        for id in 0..3 {
            let rec = OsdRecord {
                id,
                host: format!("h{}", id / 2),
                capacity_bytes: 1 << 30,
                admin_out: false,
                ..OsdRecord::default()
            };
            put(osd_key(id), serde_json::to_vec(&rec).expect("json")).await;
        }
        let mut m = map();
        m.pools.remove(&2);
        put(
            basalt_meta::schema::MAP_KEY.into(),
            serde_json::to_vec(&m).expect("json"),
        )
        .await;
        // osd.1 is the only complete copy of 1.0; osd.2 runs.
        let rec = record(&[1, 0], &[1]);
        put(
            basalt_meta::schema::pg_key(1, 0),
            serde_json::to_vec(&rec).expect("json"),
        )
        .await;
        put(alive_key(2), b"{}".to_vec()).await;
        put(basalt_meta::schema::failure_key(0, 2), b"{}".to_vec()).await;

        let err = plan_removal(meta.clone(), &[9]).await.expect_err("unknown");
        assert!(matches!(
            err,
            ClientError::NoSuchOsd {
                id: 9,
                removed: false
            }
        ));
        let err = plan_removal(meta.clone(), &[2]).await.expect_err("up");
        assert_eq!(err.kind(), crate::ErrorKind::Conflict);
        assert!(err.to_string().contains("osd.2 is up"), "{err}");
        let plan = plan_removal(meta.clone(), &[1]).await.expect("plan");
        assert_eq!(plan.needed.len(), 1);
        let err = remove_osds(meta.clone(), &plan, false, None)
            .await
            .expect_err("needed");
        assert_eq!(err.kind(), crate::ErrorKind::Conflict);
        assert!(
            err.to_string()
                .contains("1.0 (osd.1 holds its only complete copy)"),
            "{err}"
        );
        assert!(
            meta.get(&osd_key(1)).await.expect("get").is_some(),
            "changed nothing"
        );

        // osd.0 is not needed (a replica not known complete): removed, reports too.
        let plan = plan_removal(meta.clone(), &[0]).await.expect("plan");
        assert!(plan.needed.is_empty(), "{:?}", plan.needed);
        remove_osds(meta.clone(), &plan, false, None)
            .await
            .expect("rm");
        assert!(meta.get(&osd_key(0)).await.expect("get").is_none());
        assert!(meta.list(FAILURES_PREFIX).await.expect("list").is_empty());
        let err = plan_removal(meta.clone(), &[0]).await.expect_err("gone");
        assert!(err.to_string().contains("removed already"), "{err}");

        // Forced: removed although needed, and recorded as forced.
        let plan = plan_removal(meta.clone(), &[1]).await.expect("plan");
        remove_osds(meta.clone(), &plan, true, None)
            .await
            .expect("forced rm");
        let (bytes, _) = meta
            .get(&removed_osd_key(1))
            .await
            .expect("get")
            .expect("tombstone");
        let tomb: RemovedOsdRecord = serde_json::from_slice(&bytes).expect("json");
        assert!(tomb.forced);

        // Hosts: known by their OSDs.
        assert_eq!(host_osds(meta.as_ref(), "h1").await.expect("h1"), vec![2]);
        let err = host_osds(meta.as_ref(), "h9")
            .await
            .expect_err("unknown host");
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
        assert!(err.to_string().contains("hosts with OSDs: h1"), "{err}");
    }
}
