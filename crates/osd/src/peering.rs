//! Following the map's intervals and peering the PGs this OSD is primary of.
//!
//! On every new map, each PG whose acting set (members and incarnations) changed starts a
//! new interval at that epoch. Its primary then peers:
//!
//! 1. read the PG record: the last activated interval and the copies it knew complete;
//! 2. seal its own copy below the new interval (writes of older intervals are refused);
//! 3. choose the authoritative copy: its own if complete and never restarted since, else a
//!    complete copy on a live OSD that never restarted, else (every complete copy's OSD
//!    restarted: a power cut) a restarted one, which still holds every flushed write; with
//!    none reachable the PG is *incomplete* and waits;
//! 4. make its own copy equal to the authority (pull what differs, delete what it lacks);
//! 5. list every replica (which seals them too); replicas equal to it are complete;
//! 6. write the new PG record (CAS), activate, and recover the other replicas in the
//!    background while serving I/O.
//!
//! A write is acknowledged only once every member of the acting set applied it, so every
//! complete copy of the last activated interval holds every acknowledged write.

use crate::daemon::Osd;
use crate::decide::{carried_holders, choose_source, diff, narrowed, Source};
use crate::error::PgError;
use crate::pg::PgPhase;
use crate::recovery::{
    apply_image_or_delete, call_peer, list_local, list_remote, read_record, recover_pg, ListScope,
};
use basalt_meta::schema::{pg_key, CompleteCopy, PgRecord};
use basalt_placement::ClusterMap;
use basalt_proto::{Flags, Header, ObjectId, ObjectImage, Opcode, OsdId, PgId, Status, Version};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Pause between peering attempts of an incomplete or undersized PG.
const PEER_RETRY_MS: u64 = 500;
/// Attempts made at once, without the pause, after losing a race for a PG record.
const QUICK_RETRIES: u32 = 3;

/// Watch the map and start an interval for every PG whose acting set changed.
pub(crate) async fn follow_intervals(osd: Arc<Osd>, mut stop: watch::Receiver<bool>) {
    let mut maps = osd.maps();
    loop {
        let map = maps.borrow_and_update().clone();
        on_map(&osd, &map);
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            changed = maps.changed() => if changed.is_err() { return },
        }
    }
}

fn on_map(osd: &Arc<Osd>, map: &Arc<ClusterMap>) {
    let registered = map.osds.get(&osd.id).map(|o| o.incarnation) == Some(osd.incarnation);
    if let Some(me) = map.osds.get(&osd.id).filter(|o| registered && !o.up) {
        crate::liveness::flush_while_down(osd, map.epoch, me.up_from);
    }
    if map.pools.values().any(|p| p.pg_count_before > p.pg_count) {
        retire_merged(osd, map);
    }
    for pg in map.all_pgs() {
        // The interval comes from the map, not from the maps this OSD happened to see: it
        // may have missed some (cut off from the metadata, or slow), and an acting set that
        // changed and changed back is still a new interval another primary may have served.
        let interval = map.interval(pg);
        let acting = map.acting_with_incarnations(pg);
        let primary = registered && acting.first().map(|a| a.0) == Some(osd.id);
        let mut again = false;
        let started = osd.pgs.with(pg, |e| {
            if e.interval == interval {
                // Unfound stripes wait for OSDs that are not positions of the interval
                // (earlier holders): one back does not change it, so peer again here.
                again = primary
                    && e.phase == PgPhase::Active
                    && waited_osd_returned(&e.ec_waiting, map);
                if !again {
                    return None;
                }
                e.generation += 1;
                e.phase = PgPhase::Peering;
                return Some((e.interval, e.generation));
            }
            e.interval = interval;
            e.acting = acting.clone();
            e.since_active.extend(acting.iter().map(|a| a.0));
            e.generation += 1;
            e.counter = 0;
            e.ec_behind = 0;
            e.ec_sources = Vec::new();
            e.ec_unfound.clear();
            e.ec_waiting.clear();
            e.phase = if primary {
                PgPhase::Peering
            } else {
                PgPhase::Replica
            };
            primary.then_some((e.interval, e.generation))
        });
        if let Some((interval, generation)) = started {
            if again {
                tracing::info!(osd = osd.id, %pg, interval, "an OSD that unfound stripes wait for is up: peering again");
            }
            tokio::spawn(peer_pg(osd.clone(), pg, interval, generation, acting));
        }
    }
}

/// After a merge, the PGs beyond a pool's count are gone: this OSD stops serving any it
/// was primary of (their objects belong to the PGs they merged into).
fn retire_merged(osd: &Osd, map: &ClusterMap) {
    for (pg, entry) in osd.pgs.snapshot() {
        let gone = map
            .pools
            .get(&pg.pool)
            .is_some_and(|p| pg.index >= p.pg_count);
        if gone && entry.phase != PgPhase::Replica {
            osd.pgs.with(pg, |e| {
                e.generation += 1;
                e.phase = PgPhase::Replica;
            });
        }
    }
}

/// Is an OSD that unfound stripes wait for (`waiting`: each with the run peering missed,
/// None when it was down) up in `map` in a run peering has not tried?
fn waited_osd_returned(waiting: &[(OsdId, Option<u64>)], map: &ClusterMap) -> bool {
    waiting.iter().any(|&(id, missed)| {
        map.osds
            .get(&id)
            .is_some_and(|o| o.up && missed != Some(o.incarnation))
    })
}

/// This OSD's liveness lease expired (it was cut off or stopped): the cluster may have moved
/// its PGs to other primaries meanwhile, while its own map may still be old. Stop serving
/// every PG it is primary of and peer them again under their current intervals: peering
/// finds a newer PG record when another primary took over (and waits for the map that says
/// so), or activates again when nobody did.
pub fn repeer_all(osd: &Arc<Osd>) {
    for (pg, entry) in osd.pgs.snapshot() {
        if entry.phase == PgPhase::Replica {
            continue;
        }
        let restarted = osd.pgs.with(pg, |e| {
            if e.generation != entry.generation {
                return None;
            }
            e.generation += 1;
            e.phase = PgPhase::Peering;
            Some((e.interval, e.generation, e.acting.clone()))
        });
        if let Some((interval, generation, acting)) = restarted {
            tokio::spawn(peer_pg(osd.clone(), pg, interval, generation, acting));
        }
    }
}

/// Why peering did not finish.
enum PeerError {
    /// A newer interval replaced this one.
    Superseded,
    /// Cannot finish now (incomplete, undersized, a peer or the metadata unreachable).
    Retry(PgError),
}

impl From<PgError> for PeerError {
    fn from(e: PgError) -> Self {
        PeerError::Retry(e)
    }
}

pub(crate) fn is_current(osd: &Osd, pg: PgId, generation: u64) -> bool {
    osd.pgs.with(pg, |e| e.generation == generation)
}

/// Peer until done or superseded, retrying what may heal.
async fn peer_pg(
    osd: Arc<Osd>,
    pg: PgId,
    interval: u32,
    generation: u64,
    acting: Vec<(OsdId, u64)>,
) {
    let mut attempts = 0u64;
    let mut quick = 0u32;
    // Bound: runs while the interval lasts (a new map bumps the generation and ends it).
    loop {
        match try_peer(&osd, pg, interval, generation, &acting).await {
            Ok(()) => return,
            Err(PeerError::Superseded) => return,
            // Another primary's write won a race for a record (a split parent giving its
            // children theirs, a fence): read again at once, a few times.
            Err(PeerError::Retry(PgError::RecordChanged)) if quick < QUICK_RETRIES => {
                quick += 1;
            }
            Err(PeerError::Retry(why)) => {
                let still = osd.pgs.with(pg, |e| {
                    if e.generation == generation {
                        e.phase = PgPhase::Incomplete;
                        true
                    } else {
                        false
                    }
                });
                if !still || osd.stopping() {
                    return;
                }
                if attempts.is_multiple_of(20) {
                    tracing::warn!(osd = osd.id, %pg, interval, "cannot activate yet: {why}");
                }
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(PEER_RETRY_MS)).await;
            }
        }
    }
}

async fn try_peer(
    osd: &Arc<Osd>,
    pg: PgId,
    interval: u32,
    generation: u64,
    acting: &[(OsdId, u64)],
) -> Result<(), PeerError> {
    let began = tokio::time::Instant::now();
    let map = osd.map();
    let pool = map
        .pools
        .get(&pg.pool)
        .ok_or(PgError::NoPool { pool: pg.pool })?;
    if (acting.len() as u32) < pool.min_size {
        // No I/O until enough members are up; but if complete copies went down or
        // restarted, say so now: should this copy restart too, the record must not
        // send the next primary to a copy that crashed before this one (it may lack
        // writes flushed since).
        if let Err(e) = narrow_record(osd, &map, pg, interval).await {
            tracing::debug!(osd = osd.id, %pg, "narrow the PG record: {e}");
        }
        return Err(PgError::Undersized {
            up: acting.len(),
            min_size: pool.min_size,
        }
        .into());
    }
    if pool.ec.is_some() {
        return try_peer_ec(osd, &map, pg, interval, generation, acting, began).await;
    }
    let scope = ListScope::of(&map, pg.pool);
    let record = read_record(osd, pg).await?;
    let mut expected_rev = record.as_ref().map(|r| r.1).unwrap_or(0);
    if let Some((rec, _)) = &record {
        if rec.epoch > interval || rec.fence > interval {
            // Activated by a newer interval already (or taken by the PGs of a new PG
            // count): our map is behind; wait for it.
            return Err(PgError::RecordAhead {
                recorded: rec.epoch.max(rec.fence),
            }
            .into());
        }
    }
    // Promises to an old primary the map shows down, and to members this interval drops,
    // bind this copy too (see `crate::heartbeat`).
    let dropped = crate::heartbeat::dropped_by_seal(osd, pg, interval, Some(acting));
    crate::heartbeat::wait_to_seal(osd, &dropped, interval).await;
    osd.pgs.with(pg, |e| e.sealed = e.sealed.max(interval));
    seal_predecessors(osd, pg, scope).await;
    let me = CompleteCopy {
        osd: osd.id,
        incarnation: osd.incarnation,
    };
    // Where the contents come from: this PG's own record, or after a PG count change the
    // (fenced) records of its predecessors.
    let own = record.as_ref().map(|r| &r.0);
    let sources = match own {
        Some(rec) if rec.of_era(scope.since) => vec![(None, Some(rec.clone()))],
        None if scope.before == 0 => vec![(None, None)],
        _ => {
            let (sources, own_rev) = predecessor_records(osd, pg, scope).await?;
            // This PG's own old record was fenced (it is its own predecessor): our write
            // follows that.
            expected_rev = own_rev.unwrap_or(expected_rev);
            sources
        }
    };
    for (pred, rec) in &sources {
        let source = choose_source(me, &map, rec.as_ref())?;
        if let Source::Remote(src, incarnation) = source {
            let only = pred.map(|index| (scope.before, index));
            let from = (src, incarnation);
            sync_from(osd, &map, pg, interval, generation, from, scope, only).await?;
            // What was pulled may include writes the client already flushed on the source:
            // it must be durable here before the record names this copy complete (after a
            // power cut, any complete copy may become the authority).
            let flushed = crate::handler::flush(osd).await;
            if flushed != Status::Ok {
                return Err(PgError::Flush(flushed).into());
            }
        }
    }
    // Which replicas already equal us?
    let ours = list_local(osd, pg);
    let mut complete = vec![CompleteCopy {
        osd: osd.id,
        incarnation: osd.incarnation,
    }];
    let mut behind = Vec::new();
    let mut degraded = 0u64;
    for &(peer, incarnation) in &acting[1..] {
        let listed = match connect(osd, &map, peer).await {
            Ok(conn) => list_remote(&conn, pg, interval, incarnation, scope).await,
            Err(e) => Err(e),
        };
        match listed {
            Ok(theirs) => {
                let d = diff(&ours, &theirs).len() as u64;
                if d == 0 {
                    complete.push(CompleteCopy {
                        osd: peer,
                        incarnation,
                    });
                } else {
                    degraded += d;
                    behind.push((peer, incarnation));
                }
            }
            Err(e) => {
                // Up in the map but not answering: writes will fail until the map marks
                // it down; the PG activates degraded meanwhile.
                tracing::warn!(osd = osd.id, %pg, peer, "replica did not list: {e}");
                degraded += ours.len() as u64;
                behind.push((peer, incarnation));
            }
        }
    }
    if !is_current(osd, pg, generation) {
        return Err(PeerError::Superseded);
    }
    // Holders of every source's contents (with predecessors: of each of them).
    let holders = sources
        .iter()
        .map(|(_, rec)| carried_holders(rec.as_ref(), acting, &complete))
        .reduce(|a, b| a.into_iter().filter(|c| b.contains(c)).collect())
        .unwrap_or_default();
    let rec = PgRecord {
        epoch: interval,
        primary: osd.id,
        acting: acting.iter().map(|a| a.0).collect(),
        complete,
        degraded_objects: degraded,
        holders,
        unfound_objects: 0,
        unfound_waiting: Vec::new(),
        ec_sources: Vec::new(),
        fence: 0,
        inherited: 0,
    };
    // Before serving as primary, know every layer frozen so far: this OSD may have been
    // down, restarted or cut off when a snapshot fenced the others.
    if let Err(e) = osd.layers.reload_frozen(osd.meta.as_ref(), began).await {
        return Err(PgError::Meta(e).into());
    }
    // A split parent's old record is about to be overwritten: its children take their
    // copy of it first.
    if let [(Some(parent), Some(old))] = sources.as_slice() {
        if *parent == pg.index && scope.count > scope.before {
            inherit_to_children(osd, pg, scope, old).await?;
        }
    }
    let value = serde_json::to_vec(&rec).expect("PG record serialises");
    let key = pg_key(pg.pool, pg.index);
    match osd.meta.compare_and_swap(&key, expected_rev, value).await {
        Ok(Some(_)) => {}
        Ok(None) => return Err(PgError::RecordChanged.into()),
        Err(e) => return Err(PgError::Meta(e).into()),
    }
    let activated = osd.pgs.with(pg, |e| {
        if e.generation != generation {
            return false;
        }
        // The counter is not reset here: re-peering within one interval (after the lease
        // expired) keeps counting from where the interval was, or the same version would
        // name two different writes (found by the simulator, seed 12).
        e.phase = PgPhase::Active;
        e.since_active = acting.iter().map(|a| a.0).collect();
        true
    });
    if !activated {
        return Err(PeerError::Superseded);
    }
    tracing::debug!(osd = osd.id, %pg, interval, behind = behind.len(), "active");
    // For the simulator's split-brain check (see `crate::INVARIANT_EVENTS`).
    tracing::trace!(target: "basalt::invariant", osd = osd.id, pg = %pg, interval, "activated");
    // The complete replicas may serve gateways' local reads from now on.
    for c in rec.complete.iter().filter(|c| c.osd != osd.id) {
        let (osd, c) = (osd.clone(), *c);
        tokio::spawn(async move {
            crate::recovery::notify_complete(&osd, pg, interval, c.osd, c.incarnation).await;
        });
    }
    if !behind.is_empty() {
        tokio::spawn(recover_pg(osd.clone(), pg, interval, generation, behind));
    }
    Ok(())
}

/// Peer an erasure-coded PG (see [`crate::ec::peer`]), then activate it and start
/// rebuilding the positions that lack chunks.
async fn try_peer_ec(
    osd: &Arc<Osd>,
    map: &ClusterMap,
    pg: PgId,
    interval: u32,
    generation: u64,
    acting: &[(OsdId, u64)],
    began: tokio::time::Instant,
) -> Result<(), PeerError> {
    let ctx = match crate::ec::EcPg::of(osd, map, pg) {
        Ok(Some(ctx)) if ctx.interval == interval => ctx,
        // The map moved on (a newer interval is coming) or the pool cannot be served here.
        _ => return Err(PgError::NoPool { pool: pg.pool }.into()),
    };
    if let Err(e) = osd.layers.reload_frozen(osd.meta.as_ref(), began).await {
        return Err(PgError::Meta(e).into());
    }
    let peered = match crate::ec::peer(osd, &ctx, acting, generation).await {
        Ok(p) => p,
        Err(PgError::TakenOver) => return Err(PeerError::Superseded),
        Err(e) => return Err(e.into()),
    };
    let behind = peered.behind;
    let activated = osd.pgs.with(pg, |e| {
        if e.generation != generation {
            return false;
        }
        e.phase = PgPhase::Active;
        e.since_active = acting.iter().map(|a| a.0).collect();
        e.ec_behind = behind;
        e.ec_unfound = peered.unfound;
        e.ec_waiting = peered.waiting;
        true
    });
    if !activated {
        return Err(PeerError::Superseded);
    }
    tracing::debug!(osd = osd.id, %pg, interval, behind, "active (erasure coded)");
    tracing::trace!(target: "basalt::invariant", osd = osd.id, pg = %pg, interval, "activated");
    if behind != 0 {
        tokio::spawn(crate::ec::recover(osd.clone(), pg, generation));
    }
    Ok(())
}

/// Drop from the PG record the complete copies that are down or restarted, when this run
/// of this OSD is one of them and so stays (see [`narrowed`]).
async fn narrow_record(
    osd: &Osd,
    map: &ClusterMap,
    pg: PgId,
    interval: u32,
) -> Result<(), PgError> {
    let Some((mut rec, rev)) = read_record(osd, pg).await? else {
        return Ok(());
    };
    let me = CompleteCopy {
        osd: osd.id,
        incarnation: osd.incarnation,
    };
    if rec.epoch > interval || rec.fence > interval {
        return Ok(());
    }
    let Some((complete, holders)) = narrowed(&rec, map, me) else {
        return Ok(());
    };
    rec.complete = complete;
    rec.holders = holders;
    let value = serde_json::to_vec(&rec).expect("PG record serialises");
    let key = pg_key(pg.pool, pg.index);
    match osd.meta.compare_and_swap(&key, rev, value).await? {
        Some(_) => {
            tracing::info!(osd = osd.id, %pg, "PG record narrowed to the copies still running");
            Ok(())
        }
        None => Err(PgError::RecordChanged),
    }
}

pub(crate) async fn connect(
    osd: &Osd,
    map: &ClusterMap,
    peer: OsdId,
) -> Result<Arc<basalt_client::Connection>, PgError> {
    let addr = &map
        .osd(peer)
        .map_err(|_| PgError::NoOsd { osd: peer })?
        .addr;
    osd.peers
        .get(peer, addr)
        .await
        .map_err(|source| PgError::Peer {
            op: "connect",
            peer: format!("osd.{peer}"),
            source,
        })
}

/// Make our copy of the PG equal to `src`'s (`from`: the OSD and its run): pull every
/// object whose version differs, delete every object `src` lacks. With `only` (a count
/// before a PG count change and a predecessor's index), just the objects that were in that
/// predecessor. The PG is not active, so nothing writes to it meanwhile.
#[allow(clippy::too_many_arguments)] // The PG, its interval and generation, and the source.
async fn sync_from(
    osd: &Arc<Osd>,
    map: &ClusterMap,
    pg: PgId,
    interval: u32,
    generation: u64,
    (src, incarnation): (OsdId, u64),
    scope: ListScope,
    only: Option<(u32, u32)>,
) -> Result<(), PeerError> {
    let conn = connect(osd, map, src).await?;
    let in_scope = |list: Vec<(ObjectId, Version)>| -> Vec<(ObjectId, Version)> {
        match only {
            None => list,
            Some((count, index)) => list
                .into_iter()
                .filter(|(obj, _)| ClusterMap::pg_index(*obj, count) == index)
                .collect(),
        }
    };
    let theirs = in_scope(list_remote(&conn, pg, interval, incarnation, scope).await?);
    let ours = in_scope(list_local(osd, pg));
    let todo = diff(&theirs, &ours);
    if !todo.is_empty() {
        tracing::info!(osd = osd.id, %pg, src, objects = todo.len(), "pulling before activation");
    }
    for obj in todo {
        if !is_current(osd, pg, generation) {
            return Err(PeerError::Superseded);
        }
        let mut h = Header::request(Opcode::Pull, 0, obj);
        h.pg = pg;
        h.map_epoch = interval;
        h.version = basalt_proto::Version::new(incarnation, 0);
        h.flags = Flags(Flags::REPLICA);
        let reply = call_peer(&conn, "PULL", h, Bytes::new()).await?;
        let image = if reply.payload.is_empty() {
            None
        } else {
            let decoded = ObjectImage::decode(&reply.payload).map_err(|e| PgError::BadReply {
                op: "PULL",
                peer: conn.addr().to_string(),
                reason: e.to_string(),
            })?;
            Some(decoded)
        };
        // Under the PG's lock and only while no newer interval sealed this copy: a peering
        // that ended must not roll back what a newer interval's writes put here.
        {
            let shard = osd.pgs.shard(pg).lock().expect("pg shard lock");
            let may_write = crate::handler::member_may_write(osd, interval);
            let sealed = shard.get(&pg).map(|e| e.sealed);
            if crate::decide::copy_gate(sealed, interval, may_write).is_err() {
                return Err(PeerError::Superseded);
            }
            apply_image_or_delete(osd, obj, reply.header.version, image.as_ref())
                .map_err(PgError::Store)?;
        }
        crate::metrics::OsdCounters::add(&osd.counters.pulled_objects, 1);
    }
    Ok(())
}

/// Seal this OSD's copies of `pg`'s predecessors (after a PG count change: see
/// [`ListScope`]) at the epoch of the change, once: writes of intervals before it name a
/// predecessor, and the new PG is about to take their objects. Promises of local reads to
/// members of their old intervals are waited out first (as for any seal).
pub(crate) async fn seal_predecessors(osd: &Osd, pg: PgId, scope: ListScope) {
    for index in scope.predecessors(pg.index) {
        let pred = PgId {
            pool: pg.pool,
            index,
        };
        if osd.pgs.with(pred, |e| e.sealed) >= scope.since {
            continue;
        }
        let dropped = crate::heartbeat::dropped_by_seal(osd, pred, scope.since, Some(&[]));
        crate::heartbeat::wait_to_seal(osd, &dropped, scope.since).await;
        osd.pgs.with(pred, |e| e.sealed = e.sealed.max(scope.since));
    }
}

/// What a PG's contents come from: each source's predecessor index (None: the PG's own
/// record of the current count) and record (None: never activated, so it held nothing).
type Sources = Vec<(Option<u32>, Option<PgRecord>)>;

/// The records `pg`'s contents come from after its pool's PG count changed: each
/// predecessor's index and its last record before the change, each fenced at the change
/// so that no interval before it can activate any more; and the new revision of `pg`'s own
/// record when it is among them (fenced here).
async fn predecessor_records(
    osd: &Osd,
    pg: PgId,
    scope: ListScope,
) -> Result<(Sources, Option<u64>), PeerError> {
    let mut out = Vec::new();
    let mut own_rev = None;
    for index in scope.predecessors(pg.index) {
        let pred = PgId {
            pool: pg.pool,
            index,
        };
        let Some((mut rec, rev)) = read_record(osd, pred).await? else {
            out.push((Some(index), None));
            continue;
        };
        if rec.of_era(scope.since) {
            // A split parent activated under the new count: it gave this child a record
            // first, which the next attempt reads.
            return Err(PgError::RecordChanged.into());
        }
        if rec.fence < scope.since {
            rec.fence = scope.since;
            let value = serde_json::to_vec(&rec).expect("PG record serialises");
            match osd
                .meta
                .compare_and_swap(&pg_key(pred.pool, pred.index), rev, value)
                .await
            {
                Ok(Some(new_rev)) if index == pg.index => own_rev = Some(new_rev),
                Ok(Some(_)) => {}
                Ok(None) => return Err(PgError::RecordChanged.into()),
                Err(e) => return Err(PgError::Meta(e).into()),
            }
        }
        out.push((Some(index), Some(rec)));
    }
    if out.is_empty() {
        return Err(PgError::NoPool { pool: pg.pool }.into());
    }
    Ok((out, own_rev))
}

/// Give each child of split parent `pg` that has no record of the new count's era a copy
/// of the parent's fenced last record before the split (`old`), marked inherited: the
/// parent is about to overwrite it with its own record of the new era.
async fn inherit_to_children(
    osd: &Osd,
    pg: PgId,
    scope: ListScope,
    old: &PgRecord,
) -> Result<(), PeerError> {
    let copy = PgRecord {
        inherited: scope.since,
        ..old.clone()
    };
    let value = serde_json::to_vec(&copy).expect("PG record serialises");
    for i in 1..scope.count / scope.before {
        let child = PgId {
            pool: pg.pool,
            index: pg.index + i * scope.before,
        };
        let key = pg_key(child.pool, child.index);
        let rev = match read_record(osd, child).await? {
            Some((rec, _)) if rec.of_era(scope.since) => continue,
            Some((_, rev)) => rev,
            None => 0,
        };
        match osd.meta.compare_and_swap(&key, rev, value.clone()).await {
            Ok(Some(_)) => {}
            // The child peered meanwhile (or another run of this primary did this): look
            // again on the next attempt.
            Ok(None) => return Err(PgError::RecordChanged.into()),
            Err(e) => return Err(PgError::Meta(e).into()),
        }
    }
    Ok(())
}
