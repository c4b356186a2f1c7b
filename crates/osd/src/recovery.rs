//! Moving whole objects between OSDs: reading and applying object images, pushing an object
//! to a replica, and the background recovery that brings a PG's replicas up to date.
//!
//! Recovery compares the primary's list of the PG's objects with a replica's (object,
//! version) by (object, version) and pushes every object that differs (an object the primary
//! lacks is pushed as a deletion). A push is queued under the PG lock with the primary's
//! current copy, so it is ordered with the PG's writes: whatever the replica receives last
//! is the primary's newest state. When a replica's list equals the primary's, the primary
//! records it as complete in the PG record.

use crate::daemon::Osd;
use crate::decide::diff;
use crate::error::PgError;
use crate::handler::{local_list, REPLICA_TIMEOUT};
use crate::pg::PgPhase;
use basalt_client::Connection;
use basalt_meta::schema::{pg_key, CompleteCopy, PgRecord};
use basalt_proto::image::decode_list;
use basalt_proto::{
    Flags, Header, ObjectId, ObjectImage, Opcode, OsdId, PgId, Status, Version, IMAGE_BLOCK_BYTES,
    LIST_MAX_ENTRIES,
};
use basalt_store::StoreError;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use std::time::Duration;

/// How fast background recovery may move data.
#[derive(Clone, Copy, Debug)]
pub struct RecoveryConfig {
    /// Bytes per second when no client request arrived lately.
    pub idle_bytes_per_sec: u64,
    /// Bytes per second while clients are active (recovery yields to them).
    pub busy_bytes_per_sec: u64,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            idle_bytes_per_sec: 256 << 20,
            busy_bytes_per_sec: 32 << 20,
        }
    }
}

/// Client requests within this many milliseconds make recovery use the busy rate.
const CLIENT_BUSY_WINDOW_MS: u64 = 500;
/// Rounds of list-compare-push per replica before recovery starts over later.
const RECOVERY_ROUNDS_MAX: usize = 8;
/// Pause before retrying a recovery that failed (a replica unreachable, metadata down).
const RECOVERY_RETRY_MS: u64 = 1_000;
/// Update the PG record's count of objects left to recover at most this often.
const PROGRESS_INTERVAL_MS: u128 = 2_000;

/// What a whole-object read needs: the object's version, its image with an empty data
/// part, and the buffer its allocated runs are read into; None when absent.
fn image_plan(
    osd: &Osd,
    obj: ObjectId,
) -> Result<Option<(Version, ObjectImage, BytesMut)>, StoreError> {
    let Some(version) = osd.store.version(obj) else {
        return Ok(None);
    };
    let bitmap = osd.store.allocation(obj)?;
    let blocks = osd.store.object_size() / IMAGE_BLOCK_BYTES as u32;
    let image = ObjectImage {
        blocks,
        bitmap,
        data: Bytes::new(),
    };
    let total: usize = image
        .runs()
        .iter()
        .map(|r| r.1 as usize * IMAGE_BLOCK_BYTES)
        .sum();
    Ok(Some((version, image, BytesMut::zeroed(total))))
}

/// The whole object and its version; None when absent.
pub(crate) fn read_image(
    osd: &Osd,
    obj: ObjectId,
) -> Result<Option<(Version, ObjectImage)>, StoreError> {
    let Some((version, mut image, mut data)) = image_plan(osd, obj)? else {
        return Ok(None);
    };
    for (first, count, off) in image.runs() {
        let len = count as usize * IMAGE_BLOCK_BYTES;
        let offset = first * IMAGE_BLOCK_BYTES as u32;
        osd.store.read(obj, offset, &mut data[off..off + len])?;
    }
    image.data = data.freeze();
    Ok(Some((version, image)))
}

/// [`read_image`] with the reads awaited (a store whose I/O waits on a device: no runtime
/// thread waits for it).
pub(crate) async fn read_image_async(
    osd: &Osd,
    obj: ObjectId,
) -> Result<Option<(Version, ObjectImage)>, StoreError> {
    if !osd.store.awaits_io() {
        return read_image(osd, obj);
    }
    let Some((version, mut image, mut data)) = image_plan(osd, obj)? else {
        return Ok(None);
    };
    for (first, count, off) in image.runs() {
        let len = count as usize * IMAGE_BLOCK_BYTES;
        let offset = first * IMAGE_BLOCK_BYTES as u32;
        osd.store
            .read_async(obj, offset, &mut data[off..off + len])
            .await?;
    }
    image.data = data.freeze();
    Ok(Some((version, image)))
}

/// Replace the local object with `image` at `version`.
pub(crate) fn apply_image(
    osd: &Osd,
    obj: ObjectId,
    version: Version,
    image: &ObjectImage,
) -> Result<(), StoreError> {
    let blocks = osd.store.object_size() / IMAGE_BLOCK_BYTES as u32;
    if image.blocks != blocks {
        return Err(StoreError::OutOfRange {
            offset: 0,
            len: image.blocks as u64 * IMAGE_BLOCK_BYTES as u64,
            object_size: osd.store.object_size(),
        });
    }
    osd.store.delete(obj, version)?;
    for (first, count, off) in image.runs() {
        let len = count as usize * IMAGE_BLOCK_BYTES;
        osd.store.write(
            obj,
            first * IMAGE_BLOCK_BYTES as u32,
            &image.data[off..off + len],
            version,
        )?;
    }
    Ok(())
}

/// Replace the local object with `image`, or delete it when `image` is None.
pub(crate) fn apply_image_or_delete(
    osd: &Osd,
    obj: ObjectId,
    version: Version,
    image: Option<&ObjectImage>,
) -> Result<(), StoreError> {
    match image {
        Some(image) => apply_image(osd, obj, version, image),
        None => osd.store.delete(obj, version),
    }
}

/// Why an object is pushed whole to a replica (counted apart in `/metrics`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushKind {
    /// Recovery of a replica that holds an older state of the PG (a returning OSD), or an
    /// erasure-coded position's chunk rebuilt in the background.
    Recovery,
    /// Backfill of a replica that held nothing of the PG (a new or emptied OSD).
    Backfill,
    /// A client write found the replica's copy stale (it is being recovered).
    Stale,
    /// Scrub repaired a damaged or differing copy (or, on an erasure-coded pool, a read
    /// found a chunk missing, stale or damaged and rewrote it).
    Repair,
}

impl PushKind {
    pub const ALL: [PushKind; 4] = [
        PushKind::Recovery,
        PushKind::Backfill,
        PushKind::Stale,
        PushKind::Repair,
    ];

    /// The `kind` label.
    pub fn label(self) -> &'static str {
        match self {
            PushKind::Recovery => "recovery",
            PushKind::Backfill => "backfill",
            PushKind::Stale => "stale",
            PushKind::Repair => "repair",
        }
    }
}

/// Push the primary's current copy of `obj` to a replica, queued under the PG lock so it is
/// ordered with the PG's writes; only while this OSD is still the active primary of
/// `interval`. Returns the replica's answer.
pub(crate) async fn push_object(
    osd: &Arc<Osd>,
    pg: PgId,
    interval: u32,
    obj: ObjectId,
    conn: &Connection,
    fua: bool,
    kind: PushKind,
) -> Status {
    // Read ahead, awaited; used under the PG lock (which orders the push with the PG's
    // writes) if no writer came in between, else read again there.
    let token = osd.store.write_token(obj);
    let mut ahead = match osd.store.awaits_io() {
        true => read_image_async(osd, obj).await.ok(),
        false => None,
    };
    let pending = {
        let shard = osd.pgs.shard(pg).lock().expect("pg shard lock");
        match shard.get(&pg) {
            Some(e) if e.phase == PgPhase::Active && e.interval == interval => {}
            _ => return Status::NotPrimary,
        }
        let read = match ahead.take() {
            Some(image) if osd.store.unchanged_since(obj, token) => Ok(image),
            _ => read_image(osd, obj),
        };
        let (version, payload) = match read {
            Ok(Some((v, image))) => (v, image.encode()),
            Ok(None) => (Version::ZERO, Bytes::new()),
            Err(e) => {
                tracing::error!(osd = osd.id, object = %obj, "read for push failed: {e}");
                return crate::handler::status_of(&e);
            }
        };
        osd.counters.pushed(kind, payload.len() as u64);
        let mut h = Header::request(Opcode::Push, 0, obj);
        h.flags = Flags(Flags::REPLICA | if fua { Flags::FUA } else { 0 });
        h.version = version;
        h.map_epoch = interval;
        h.pg = pg;
        conn.start(h, payload)
    };
    match tokio::time::timeout(REPLICA_TIMEOUT, pending).await {
        Ok(Ok(r)) => r.header.status,
        _ => Status::Unavailable,
    }
}

/// Send a replica request to a peer and wait (bounded) for a successful reply.
pub(crate) async fn call_peer(
    conn: &Connection,
    op: &'static str,
    h: Header,
    payload: Bytes,
) -> Result<basalt_client::Reply, PgError> {
    let peer = || conn.addr().to_string();
    let reply = tokio::time::timeout(REPLICA_TIMEOUT, conn.start(h, payload))
        .await
        .map_err(|_| PgError::PeerTimeout { op, peer: peer() })?
        .map_err(|source| PgError::Peer {
            op,
            peer: peer(),
            source,
        })?;
    match reply.header.status {
        Status::Ok => Ok(reply),
        status => Err(PgError::PeerStatus {
            op,
            peer: peer(),
            status,
        }),
    }
}

/// The PG count a LIST is made under, as the lister's map has it: the count, the count
/// before its last change and the epoch of that change (docs/design.md, "PG split and
/// merge"). The member lists under `count` (its own map may be older) and seals the PG's
/// predecessors at `since`. Carried in the request's `prev_version` (epoch `since`, counter
/// `before << 32 | count`); zero from an older OSD, which lists under its own map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ListScope {
    pub count: u32,
    pub before: u32,
    pub since: u32,
}

impl ListScope {
    /// The scope of `pool` in `map` (count 0 when the map lacks the pool).
    pub fn of(map: &basalt_placement::ClusterMap, pool: basalt_proto::PoolId) -> Self {
        map.pools.get(&pool).map_or(
            Self {
                count: 0,
                before: 0,
                since: 0,
            },
            |p| Self {
                count: p.pg_count,
                before: p.pg_count_before,
                since: p.pg_count_since,
            },
        )
    }

    pub fn encode(self) -> Version {
        Version::new(
            self.since as u64,
            ((self.before as u64) << 32) | self.count as u64,
        )
    }

    /// The scope a LIST names: None for none (an older OSD: list under this OSD's map),
    /// Err for one no pool can have (a count of 0, counts that are not multiples, `pg`
    /// outside the count).
    pub fn decode(v: Version, pg: PgId) -> Result<Option<Self>, ()> {
        if v == Version::ZERO {
            return Ok(None);
        }
        let scope = Self {
            count: v.counter as u32,
            before: (v.counter >> 32) as u32,
            since: u32::try_from(v.epoch).map_err(|_| ())?,
        };
        let related = scope.before == 0
            || scope.count.is_multiple_of(scope.before)
            || scope.before.is_multiple_of(scope.count);
        if scope.count == 0 || pg.index >= scope.count || !related {
            return Err(());
        }
        Ok(Some(scope))
    }

    /// The predecessors of `index` (see [`basalt_placement::pg_predecessors`]).
    pub fn predecessors(self, index: u32) -> Vec<u32> {
        basalt_placement::pg_predecessors(index, self.count, self.before)
    }
}

/// LIST a PG on a peer (which also seals it below `epoch`, and its predecessors below the
/// scope's `since`), following the cursor. The peer must be the process `incarnation` (0:
/// any).
pub(crate) async fn list_remote(
    conn: &Connection,
    pg: PgId,
    epoch: u32,
    incarnation: u64,
    scope: ListScope,
) -> Result<Vec<(ObjectId, Version)>, PgError> {
    let mut out = Vec::new();
    let mut from = ObjectId::new(0, 0);
    // Bound: one round per LIST_MAX_ENTRIES objects; a PG never holds 2^32 objects.
    for _ in 0..(1u64 << 32) / LIST_MAX_ENTRIES as u64 {
        let mut h = Header::request(Opcode::List, 0, from);
        h.pg = pg;
        h.map_epoch = epoch;
        h.version = Version::new(incarnation, 0);
        h.prev_version = scope.encode();
        h.flags = Flags(Flags::REPLICA);
        let reply = call_peer(conn, "LIST", h, Bytes::new()).await?;
        let entries = decode_list(&reply.payload).map_err(|e| PgError::BadReply {
            op: "LIST",
            peer: conn.addr().to_string(),
            reason: e.to_string(),
        })?;
        let full = entries.len() >= LIST_MAX_ENTRIES;
        if let Some((last, _)) = entries.last() {
            from = ObjectId::new(last.inode, last.index.wrapping_add(1));
        }
        out.extend(entries);
        if !full {
            return Ok(out);
        }
    }
    Err(PgError::TooManyObjects {
        pg: pg.to_string(),
        peer: conn.addr().to_string(),
    })
}

/// Every local object of `pg` with its version.
pub(crate) fn list_local(osd: &Osd, pg: PgId) -> Vec<(ObjectId, Version)> {
    let map = osd.map();
    local_list(osd, &map, pg, ObjectId::new(0, 0), usize::MAX).unwrap_or_default()
}

/// Is `generation` still `pg`'s current one with this OSD its active primary?
pub(crate) fn still_active(osd: &Osd, pg: PgId, generation: u64) -> bool {
    osd.pgs.with(pg, |e| {
        e.generation == generation && e.phase == PgPhase::Active
    })
}

/// Sleep long enough that moving `bytes` keeps to the recovery rate.
pub(crate) async fn pace(osd: &Osd, bytes: usize) {
    let rate = if osd.client_idle_ms() < CLIENT_BUSY_WINDOW_MS {
        osd.recovery.busy_bytes_per_sec
    } else {
        osd.recovery.idle_bytes_per_sec
    };
    let micros = (bytes as u64).saturating_mul(1_000_000) / rate.max(1);
    if micros > 0 {
        tokio::time::sleep(Duration::from_micros(micros)).await;
    }
}

/// Bring every replica in `behind` up to date with this primary, then record each as
/// complete. Runs until done or until the PG's interval changes.
pub(crate) async fn recover_pg(
    osd: Arc<Osd>,
    pg: PgId,
    interval: u32,
    generation: u64,
    behind: Vec<(OsdId, u64)>,
) {
    let mut left = behind;
    let _recovering = osd.counters.recovering();
    // Bound: retries go on while the interval lasts; each round waits RECOVERY_RETRY_MS.
    while !left.is_empty() && still_active(&osd, pg, generation) && !osd.stopping() {
        let mut still_behind = Vec::new();
        for (peer, incarnation) in left {
            match recover_replica(&osd, pg, interval, generation, peer, incarnation).await {
                Ok(true) => {
                    if let Err(e) = mark_complete(&osd, pg, interval, peer, incarnation).await {
                        tracing::warn!(osd = osd.id, %pg, peer, "record recovery: {e}");
                        still_behind.push((peer, incarnation));
                    } else {
                        tracing::info!(osd = osd.id, %pg, peer, "replica recovered");
                        notify_complete(&osd, pg, interval, peer, incarnation).await;
                    }
                }
                Ok(false) => still_behind.push((peer, incarnation)),
                Err(e) => {
                    tracing::debug!(osd = osd.id, %pg, peer, "recovery: {e}");
                    still_behind.push((peer, incarnation));
                }
            }
        }
        left = still_behind;
        if !left.is_empty() {
            tokio::time::sleep(Duration::from_millis(RECOVERY_RETRY_MS)).await;
        }
    }
}

/// Tell `peer` (run `incarnation`) that its copy of replicated PG `pg` is complete in
/// `interval` (COMPLETE): it may then serve gateways' local reads while that interval
/// lasts. Best effort: a copy that never hears it sends those reads to the primary.
pub(crate) async fn notify_complete(
    osd: &Osd,
    pg: PgId,
    interval: u32,
    peer: OsdId,
    incarnation: u64,
) {
    let map = osd.map();
    let Ok(info) = map.osd(peer) else { return };
    let conn = match osd.peers.get(peer, &info.addr).await {
        Ok(conn) => conn,
        Err(e) => {
            tracing::debug!(osd = osd.id, %pg, peer, "COMPLETE not sent: {e}");
            return;
        }
    };
    let mut h = Header::request(
        Opcode::Complete,
        0,
        ObjectId::new(osd.id as u64, osd.incarnation),
    );
    h.pg = pg;
    h.map_epoch = interval;
    h.version = Version::new(incarnation, 0);
    h.flags = Flags(Flags::REPLICA);
    if let Err(e) = call_peer(&conn, "COMPLETE", h, Bytes::new()).await {
        tracing::debug!(osd = osd.id, %pg, peer, "COMPLETE not taken: {e}");
    }
}

/// Push every differing object to `peer` until its list equals ours. Ok(true) when it does.
async fn recover_replica(
    osd: &Arc<Osd>,
    pg: PgId,
    interval: u32,
    generation: u64,
    peer: OsdId,
    incarnation: u64,
) -> Result<bool, PgError> {
    let map = osd.map();
    let addr = map
        .osd(peer)
        .map_err(|_| PgError::NoOsd { osd: peer })?
        .addr
        .clone();
    let conn = osd
        .peers
        .get(peer, &addr)
        .await
        .map_err(|source| PgError::Peer {
            op: "connect",
            peer: format!("osd.{peer}"),
            source,
        })?;
    let mut last_progress = tokio::time::Instant::now();
    // A replica that held nothing of the PG at the first look is backfilled; one that held
    // an older state is recovered.
    let mut kind = None;
    for _ in 0..RECOVERY_ROUNDS_MAX {
        if !still_active(osd, pg, generation) {
            return Ok(false);
        }
        let scope = ListScope::of(&osd.map(), pg.pool);
        let theirs = list_remote(&conn, pg, interval, incarnation, scope).await?;
        let kind = *kind.get_or_insert(if theirs.is_empty() {
            PushKind::Backfill
        } else {
            PushKind::Recovery
        });
        let ours = list_local(osd, pg);
        let todo = diff(&ours, &theirs);
        if todo.is_empty() {
            // Pushed objects may carry writes the client flushed long ago: make them durable
            // on the replica before it is recorded complete.
            return flush_remote(&conn).await.map(|()| true);
        }
        let total = todo.len();
        for (done, obj) in todo.into_iter().enumerate() {
            if !still_active(osd, pg, generation) {
                return Ok(false);
            }
            let status = push_object(osd, pg, interval, obj, &conn, false, kind).await;
            if status != Status::Ok {
                return Err(PgError::PeerStatus {
                    op: "PUSH",
                    peer: format!("osd.{peer}"),
                    status,
                });
            }
            pace(osd, osd.store.object_size() as usize).await;
            if last_progress.elapsed().as_millis() > PROGRESS_INTERVAL_MS {
                last_progress = tokio::time::Instant::now();
                let _ = set_degraded(osd, pg, interval, (total - done) as u64).await;
            }
        }
    }
    Ok(false)
}

/// FLUSH a peer's store.
async fn flush_remote(conn: &Connection) -> Result<(), PgError> {
    let h = Header::request(Opcode::Flush, 0, ObjectId::new(0, 0));
    call_peer(conn, "FLUSH", h, Bytes::new()).await.map(|_| ())
}

/// Read the PG record (None when absent).
pub(crate) async fn read_record(osd: &Osd, pg: PgId) -> Result<Option<(PgRecord, u64)>, PgError> {
    let key = pg_key(pg.pool, pg.index);
    match osd.meta.get(&key).await? {
        None => Ok(None),
        Some((bytes, rev)) => serde_json::from_slice(&bytes)
            .map(|r| Some((r, rev)))
            .map_err(|e| PgError::BadRecord {
                key,
                reason: e.to_string(),
            }),
    }
}

/// Change the record of `interval` with `f` (CAS, retried a few times).
pub(crate) async fn update_record(
    osd: &Osd,
    pg: PgId,
    interval: u32,
    f: impl Fn(&mut PgRecord),
) -> Result<(), PgError> {
    let key = pg_key(pg.pool, pg.index);
    for _ in 0..8 {
        let Some((mut rec, rev)) = read_record(osd, pg).await? else {
            return Err(PgError::TakenOver);
        };
        if rec.epoch != interval || rec.primary != osd.id {
            return Err(PgError::TakenOver);
        }
        f(&mut rec);
        let value = serde_json::to_vec(&rec).expect("PG record serialises");
        if osd.meta.compare_and_swap(&key, rev, value).await?.is_some() {
            return Ok(());
        }
    }
    Err(PgError::RecordChanged)
}

async fn mark_complete(
    osd: &Osd,
    pg: PgId,
    interval: u32,
    peer: OsdId,
    incarnation: u64,
) -> Result<(), PgError> {
    update_record(osd, pg, interval, |rec| {
        if !rec.complete.iter().any(|c| c.osd == peer) {
            rec.complete.push(CompleteCopy {
                osd: peer,
                incarnation,
            });
        }
        if rec.complete.len() >= rec.acting.len() {
            rec.degraded_objects = 0;
        }
    })
    .await
}

async fn set_degraded(osd: &Osd, pg: PgId, interval: u32, objects: u64) -> Result<(), PgError> {
    update_record(osd, pg, interval, |rec| rec.degraded_objects = objects).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a LIST's scope survives its trip through the header, a zero one means "an
    /// older OSD: list under your own map", and a scope no pool can have is refused.
    #[test]
    fn list_scope_round_trips_and_refuses_nonsense() {
        let pg = PgId { pool: 3, index: 37 };
        let scope = ListScope {
            count: 128,
            before: 32,
            since: 912,
        };
        assert_eq!(ListScope::decode(scope.encode(), pg), Ok(Some(scope)));
        assert_eq!(scope.predecessors(37), vec![5]);
        assert_eq!(ListScope::decode(Version::ZERO, pg), Ok(None));
        let bad = |count: u32, before: u32| {
            let s = ListScope {
                count,
                before,
                since: 1,
            };
            ListScope::decode(s.encode(), pg)
        };
        assert_eq!(bad(0, 32), Err(()));
        assert_eq!(bad(32, 128), Err(()), "pg 37 is outside 32 PGs");
        assert_eq!(bad(128, 48), Err(()), "48 and 128 are not multiples");
        assert_eq!(bad(64, 0).map(|s| s.is_some()), Ok(true));
    }
}
