//! Erasure-coded PGs (docs/design.md, "Erasure-coded pools"): the primary's write and read
//! paths, a member's promote, and peering and recovery of stripes.
//!
//! A stripe is one volume object of `object_size` bytes, cut into k data chunks of
//! `object_size / k` bytes plus m parity chunks; chunk i lives at position i of the PG, in
//! the store key `stripe.chunk(i, false)`. Every write of a stripe rewrites all its chunks
//! at one version, in two phases: each live position stashes its chunk durably
//! (`stripe.chunk(i, true)`, a whole-object write with FUA), then each promotes the stash to
//! the committed key (one store record). A stripe's writes, reads and repairs at the primary
//! hold the stripe's lock, so readers never see a stripe half promoted. After a crash,
//! peering settles every stripe with a stash with [`basalt_ec::decide::decide`].

use crate::daemon::Osd;
use crate::error::PgError;
use crate::handler::{flush, primary_gate, status_of, REPLICA_TIMEOUT};
use crate::pg::PgPhase;
use crate::recovery::{call_peer, list_remote, read_record, PushKind};
use basalt_client::Connection;
use basalt_ec::decide::{decide, Plan, PositionState};
use basalt_ec::Scheme;
use basalt_meta::schema::{pg_key, CompleteCopy, PgRecord};
use basalt_placement::{ClusterMap, NO_OSD};
use basalt_proto::{
    Flags, Header, ObjectId, ObjectImage, Opcode, OsdId, PgId, Status, Version, IMAGE_BLOCK_BYTES,
};
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Per-stripe async locks; an entry lives while someone holds or waits for it.
#[derive(Default)]
pub(crate) struct StripeLocks {
    table: Arc<Mutex<HashMap<ObjectId, Arc<tokio::sync::Mutex<()>>>>>,
}

/// A held stripe lock; released (and its entry forgotten when unused) on drop.
pub(crate) struct StripeGuard {
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
    table: Arc<Mutex<HashMap<ObjectId, Arc<tokio::sync::Mutex<()>>>>>,
    stripe: ObjectId,
}

impl StripeLocks {
    /// Lock `stripe` — and with it the same stripe of every layer of its clone family, so a
    /// write that reads an ancestor's stripe never races a copy-up or merge of that index.
    pub(crate) async fn lock(&self, stripe: ObjectId) -> StripeGuard {
        let stripe = ObjectId::new(basalt_proto::inode_family(stripe.inode) << 16, stripe.index);
        let lock = {
            let mut table = self.table.lock().expect("stripe lock table");
            table.entry(stripe).or_default().clone()
        };
        StripeGuard {
            guard: Some(lock.lock_owned().await),
            table: self.table.clone(),
            stripe,
        }
    }
}

impl Drop for StripeGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut table = self.table.lock().expect("stripe lock table");
        if table
            .get(&self.stripe)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            table.remove(&self.stripe);
        }
    }
}

/// What the primary needs to know of an erasure-coded PG for one request.
#[derive(Clone)]
pub(crate) struct EcPg {
    pub pg: PgId,
    pub interval: u32,
    pub scheme: Scheme,
    /// Bytes of a stripe (the pool's object size) and of one chunk.
    pub stripe_bytes: u32,
    pub chunk_bytes: u32,
    /// The OSD at each position ([`NO_OSD`]: a hole).
    pub positions: Vec<OsdId>,
    pub min_size: u32,
}

impl EcPg {
    /// The PG's code and positions in `map`, when its pool is erasure coded and its chunks
    /// fit this OSD's store.
    pub(crate) fn of(osd: &Osd, map: &ClusterMap, pg: PgId) -> Result<Option<EcPg>, Status> {
        let Some(pool) = map.pools.get(&pg.pool) else {
            return Err(Status::Invalid);
        };
        let Some(profile) = pool.ec else {
            return Ok(None);
        };
        let scheme = Scheme::new(profile.k, profile.m).map_err(|_| Status::Invalid)?;
        let chunk_bytes = scheme
            .chunk_bytes(pool.object_size)
            .map_err(|_| Status::Invalid)?;
        if chunk_bytes != osd.store.object_size() {
            tracing::error!(
                osd = osd.id,
                pool = pool.name,
                "chunks of {chunk_bytes} bytes do not match this store's {}-byte objects: \
                 the pool's object size must be k × the OSDs' object size",
                osd.store.object_size()
            );
            return Err(Status::Invalid);
        }
        let positions = map.positions(pg).map_err(|_| Status::Invalid)?;
        Ok(Some(EcPg {
            pg,
            interval: map.interval(pg),
            scheme,
            stripe_bytes: pool.object_size,
            chunk_bytes,
            positions,
            min_size: pool.min_size,
        }))
    }

    fn live(&self) -> impl Iterator<Item = (usize, OsdId)> + '_ {
        self.positions
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, o)| *o != NO_OSD)
    }
}

/// Is `pg`'s pool erasure coded (in this OSD's map)?
pub(crate) fn is_ec(osd: &Osd, pg: PgId) -> bool {
    osd.map()
        .pools
        .get(&pg.pool)
        .is_some_and(|p| p.ec.is_some())
}

/// The context of a client request to an erasure-coded PG, checked: this OSD is its active
/// primary in the current interval and the object is a stripe.
fn client_context(osd: &Osd, h: &Header) -> Result<EcPg, Status> {
    let interval = primary_gate(osd, h)?;
    if !h.object.is_stripe() {
        return Err(Status::Invalid);
    }
    let map = osd.map();
    let ctx = EcPg::of(osd, &map, h.pg)?.ok_or(Status::Invalid)?;
    if ctx.interval != interval {
        return Err(Status::Unavailable);
    }
    Ok(ctx)
}

/// One position's chunk of a stripe as read: its version (None: absent) and bytes.
type ChunkRead = Result<(Option<Version>, Bytes), Status>;

/// A peer's connection for a position's OSD.
async fn connect(osd: &Osd, peer: OsdId) -> Result<Arc<Connection>, Status> {
    let map = osd.map();
    let addr = map.osd(peer).map_err(|_| Status::Unavailable)?.addr.clone();
    osd.peers.get(peer, &addr).await.map_err(|e| {
        tracing::warn!(osd = osd.id, peer, "EC member unreachable: {e}");
        Status::Unavailable
    })
}

fn member_header(ctx: &EcPg, opcode: Opcode, key: ObjectId, version: Version) -> Header {
    let mut h = Header::request(opcode, 0, key);
    h.pg = ctx.pg;
    h.map_epoch = ctx.interval;
    h.version = version;
    h.flags = Flags(Flags::REPLICA);
    h
}

async fn wait(
    osd: &Osd,
    peer: OsdId,
    p: basalt_client::conn::Pending,
) -> Result<basalt_client::Reply, Status> {
    crate::slow::stage(basalt_proto::slowop::SlowStage::Chunks, Some(peer));
    match tokio::time::timeout(REPLICA_TIMEOUT, p).await {
        Ok(Ok(r)) if r.header.status == Status::Ok => Ok(r),
        Ok(Ok(r)) => Err(r.header.status),
        Ok(Err(e)) => {
            tracing::warn!(osd = osd.id, peer, "EC member request failed: {e}");
            Err(Status::Unavailable)
        }
        Err(_) => Err(Status::Unavailable),
    }
}

/// Read `len` bytes at `offset` of the chunk key `key` at position holder `peer`.
async fn read_chunk(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    key: ObjectId,
    offset: u32,
    len: u32,
) -> ChunkRead {
    if peer == osd.id {
        let version = osd.store.version(key);
        let mut buf = BytesMut::zeroed(len as usize);
        return match osd.store.read(key, offset, &mut buf) {
            Ok(()) => Ok((version, buf.freeze())),
            Err(e) => {
                tracing::error!(osd = osd.id, object = %key, "chunk read failed: {e}");
                Err(status_of(&e))
            }
        };
    }
    let conn = connect(osd, peer).await?;
    let mut h = member_header(ctx, Opcode::Read, key, Version::ZERO);
    h.offset = offset;
    h.length = len;
    let r = wait(osd, peer, conn.start(h, Bytes::new())).await?;
    if r.payload.len() != len as usize {
        return Err(Status::Io);
    }
    let version = (r.header.version != Version::ZERO).then_some(r.header.version);
    Ok((version, r.payload))
}

/// A whole chunk as an object image (every block allocated).
fn full_image(ctx: &EcPg, data: Bytes) -> Bytes {
    let blocks = ctx.chunk_bytes / IMAGE_BLOCK_BYTES as u32;
    let mut bitmap = vec![0u64; (blocks as usize).div_ceil(64)];
    for b in 0..blocks {
        bitmap[(b / 64) as usize] |= 1 << (b % 64);
    }
    ObjectImage {
        blocks,
        bitmap,
        data,
    }
    .encode()
}

/// Replace the chunk key `key` at `peer` with `data` at `version` (None: delete it), made
/// durable first when `durable`.
async fn put_chunk(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    key: ObjectId,
    version: Version,
    data: Option<Bytes>,
    durable: bool,
) -> Result<(), Status> {
    if peer == osd.id {
        let store = osd.store.clone();
        let result = osd
            .store_call(move || {
                match &data {
                    Some(d) => store.write(key, 0, d, version)?,
                    None => store.delete(key, version)?,
                }
                if durable {
                    store.flush()?;
                }
                Ok(())
            })
            .await;
        return result.map_err(|e| {
            tracing::error!(osd = osd.id, object = %key, "chunk write failed: {e}");
            status_of(&e)
        });
    }
    let conn = connect(osd, peer).await?;
    let mut h = member_header(ctx, Opcode::Push, key, version);
    if durable {
        h.flags = Flags(h.flags.0 | Flags::FUA);
    }
    let payload = data.map(|d| full_image(ctx, d)).unwrap_or_default();
    wait(osd, peer, conn.start(h, payload)).await.map(|_| ())
}

/// Promote the stash of `stripe` at position `pos` (held by `peer`) at `version`.
async fn promote_chunk(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    stripe: ObjectId,
    pos: usize,
    version: Version,
) -> Result<(), Status> {
    let stash = stripe.chunk(pos, true);
    if peer == osd.id {
        return promote_local(osd, stash, version);
    }
    let conn = connect(osd, peer).await?;
    let h = member_header(ctx, Opcode::Promote, stash, version);
    wait(osd, peer, conn.start(h, Bytes::new()))
        .await
        .map(|_| ())
}

/// Make the stash `stash` at `version` the committed chunk (idempotent).
fn promote_local(osd: &Osd, stash: ObjectId, version: Version) -> Result<(), Status> {
    let Some((pos, true)) = stash.chunk_position() else {
        return Err(Status::Invalid);
    };
    let key = stash.stripe().chunk(pos, false);
    match osd.store.version(stash) {
        Some(v) if v == version => match osd.store.promote(stash, key) {
            Ok(_) => Ok(()),
            Err(e) => Err(status_of(&e)),
        },
        Some(_) => Err(Status::Stale),
        None if osd.store.version(key) == Some(version) => Ok(()),
        None => Err(Status::Stale),
    }
}

/// As a member: PROMOTE from the PG's primary, if it belongs to the current interval.
pub(crate) fn member_promote(osd: &Osd, h: &Header) -> Status {
    let map = osd.map();
    if map.osds.get(&osd.id).map(|o| o.incarnation) != Some(osd.incarnation) {
        return Status::Unavailable;
    }
    let shard = osd.pgs.shard(h.pg).lock().expect("pg shard lock");
    if shard.get(&h.pg).is_some_and(|e| h.map_epoch < e.sealed) {
        return Status::NotPrimary;
    }
    match promote_local(osd, h.object, h.version) {
        Ok(()) => Status::Ok,
        Err(s) => s,
    }
}

/// Each position's whole committed chunk of `stripe`: what its holder answered (None: a
/// hole), and the best chunk found for it — the newest version among its holder and, for a
/// position still being rebuilt, the OSDs that held it before (`ec_sources` of the PG).
async fn read_all_chunks(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
) -> Vec<(Option<ChunkRead>, Option<ChunkRead>)> {
    let (behind, sources) = osd
        .pgs
        .with(ctx.pg, |e| (e.ec_behind, e.ec_sources.clone()));
    let mut out = Vec::with_capacity(ctx.positions.len());
    for (pos, &peer) in ctx.positions.iter().enumerate() {
        let key = stripe.chunk(pos, false);
        let holder = match peer {
            NO_OSD => None,
            _ => Some(read_chunk(osd, ctx, peer, key, 0, ctx.chunk_bytes).await),
        };
        let mut best = holder.clone();
        let rebuilding = behind & (1 << pos) != 0 || peer == NO_OSD;
        if rebuilding {
            for &other in sources.get(pos).into_iter().flatten() {
                if other == peer || !osd.map().osds.get(&other).is_some_and(|o| o.up) {
                    continue;
                }
                let found = read_chunk(osd, ctx, other, key, 0, ctx.chunk_bytes).await;
                let newer = match (&best, &found) {
                    (_, Err(_)) | (_, Ok((None, _))) => false,
                    (Some(Ok((Some(a), _))), Ok((Some(b), _))) => b > a,
                    _ => true,
                };
                if newer {
                    best = Some(found);
                }
            }
        }
        out.push((holder, best));
    }
    out
}

/// The stripe's current contents decoded from whatever positions answer: the newest
/// version that k chunks agree on (None: the stripe does not exist). Chunks at other
/// versions, or unreadable ones (a bad checksum), are rewritten from the decoded stripe
/// when `repair` (the caller holds the stripe lock).
async fn decode_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    repair: bool,
) -> Result<Option<(Version, Vec<u8>)>, Status> {
    let decoded = decode_and_repair(osd, ctx, stripe, repair.then_some(PushKind::Repair)).await?;
    Ok(decoded.map(|d| (d.version, d.object)))
}

/// A stripe decoded by [`decode_and_repair`].
struct Decoded {
    version: Version,
    object: Vec<u8>,
    /// Live positions whose holder is not known to hold `version` afterwards: unreachable,
    /// its chunk missing, stale or damaged and not rewritten (no repair asked, or the
    /// rewrite failed).
    unsettled: usize,
}

/// [`decode_stripe`], also telling how many live positions were left without the
/// stripe's version — what recovery must see as zero before it counts a position rebuilt.
/// Chunks rewritten are counted as pushes of `repair`'s kind.
async fn decode_and_repair(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    repair: Option<PushKind>,
) -> Result<Option<Decoded>, Status> {
    let read = read_all_chunks(osd, ctx, stripe).await;
    let chunks: Vec<Option<ChunkRead>> = read.iter().map(|r| r.1.clone()).collect();
    let k = ctx.scheme.k();
    let mut versions: Vec<Version> = chunks
        .iter()
        .filter_map(|c| c.as_ref()?.as_ref().ok()?.0)
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let holding = |v: Version| {
        chunks
            .iter()
            .filter(|c| matches!(c, Some(Ok((Some(x), _))) if *x == v))
            .count()
    };
    let unreachable = chunks
        .iter()
        .any(|c| matches!(c, Some(Err(Status::Unavailable))));
    let Some(target) = versions.iter().rev().copied().find(|&v| holding(v) >= k) else {
        if versions.is_empty() && chunks.iter().flatten().all(|c| c.is_ok()) {
            return Ok(None);
        }
        if unreachable {
            // A member is down or restarting: the next interval's peering settles it.
            return Err(Status::Unavailable);
        }
        tracing::error!(
            osd = osd.id, pg = %ctx.pg, %stripe,
            "stripe unreadable: no version is held by {k} readable chunks"
        );
        return Err(Status::Io);
    };
    if let Some(&newest) = versions.last() {
        if newest > target && unreachable {
            return Err(Status::Unavailable);
        }
        if newest > target {
            tracing::error!(
                osd = osd.id, pg = %ctx.pg, %stripe, %newest,
                "stripe unfound: version {newest} has fewer than {k} chunks"
            );
            return Err(Status::Io);
        }
    }
    let usable: Vec<Option<&[u8]>> = chunks
        .iter()
        .map(|c| match c {
            Some(Ok((Some(v), data))) if *v == target => Some(&data[..]),
            _ => None,
        })
        .collect();
    let object = ctx.scheme.decode(&usable).map_err(|e| {
        tracing::error!(osd = osd.id, %stripe, "decode: {e}");
        Status::Io
    })?;
    // Holders not answering: their chunk is unknown, and cannot be repaired now.
    let mut unsettled = read
        .iter()
        .filter(|(holder, _)| matches!(holder, Some(Err(Status::Unavailable))))
        .count();
    // Holders whose own chunk is missing, stale or damaged.
    let bad: Vec<usize> = read
        .iter()
        .enumerate()
        .filter(|(_, (holder, _))| match holder {
            None | Some(Err(Status::Unavailable)) => false,
            Some(Ok((Some(v), _))) => *v != target,
            _ => true,
        })
        .map(|(i, _)| i)
        .collect();
    if let Some(kind) = repair {
        if !bad.is_empty() {
            let fresh = ctx.scheme.encode(&object).map_err(|_| Status::Io)?;
            for pos in bad {
                let peer = ctx.positions[pos];
                let data = Bytes::from(fresh[pos].clone());
                match put_chunk(
                    osd,
                    ctx,
                    peer,
                    stripe.chunk(pos, false),
                    target,
                    Some(data),
                    false,
                )
                .await
                {
                    Ok(()) => {
                        osd.counters.pushed(kind, ctx.chunk_bytes as u64);
                        if kind == PushKind::Recovery {
                            // Expected while rebuilding a position: the round logs progress.
                            tracing::debug!(osd = osd.id, pg = %ctx.pg, %stripe, pos, peer, "rebuilt a chunk");
                        } else {
                            tracing::warn!(
                                osd = osd.id, pg = %ctx.pg, %stripe, pos, peer,
                                "rebuilt a missing, stale or damaged chunk"
                            );
                        }
                    }
                    Err(s) => {
                        unsettled += 1;
                        tracing::warn!(osd = osd.id, %stripe, pos, peer, "chunk repair: {s:?}");
                    }
                }
            }
        }
    } else {
        unsettled += bad.len();
    }
    Ok(Some(Decoded {
        version: target,
        object,
        unsettled,
    }))
}

/// A client READ of an erasure-coded stripe: the data chunks the range covers when every
/// one is healthy and at one version; else decode the stripe from any k chunks (and repair
/// what was missing or damaged).
pub(crate) async fn client_read(osd: &Arc<Osd>, h: Header) -> (Status, Bytes) {
    let ctx = match client_context(osd, &h) {
        Ok(c) => c,
        Err(s) => return (s, Bytes::new()),
    };
    if osd.layers.is_frozen(h.object.inode) && !h.flags.has(Flags::SNAPSHOT) {
        // A reader that has not learnt of a snapshot must not see the old head.
        return (Status::Frozen, Bytes::new());
    }
    let end = h.offset as u64 + h.length as u64;
    if end > ctx.stripe_bytes as u64 {
        return (Status::Invalid, Bytes::new());
    }
    if h.length == 0 {
        return (Status::Ok, Bytes::new());
    }
    let chain = match osd.layers.chain(osd.meta.as_ref(), h.object.inode).await {
        Ok(chain) => chain,
        Err(_) => return (Status::Unavailable, Bytes::new()),
    };
    let _stripe = osd.stripes.lock(h.object).await;
    if !chain.is_empty() {
        // A layer with ancestors: the first layer of the chain holding the stripe answers.
        return match layered_stripe(osd, &ctx, h.object, &chain).await {
            Ok(Some((_, object))) => (
                Status::Ok,
                Bytes::copy_from_slice(&object[h.offset as usize..end as usize]),
            ),
            Ok(None) => (Status::Ok, Bytes::from(vec![0; h.length as usize])),
            Err(s) => (s, Bytes::new()),
        };
    }
    let behind = osd.pgs.with(ctx.pg, |e| e.ec_behind);
    let c = ctx.chunk_bytes as u64;
    let (first, last) = (h.offset as u64 / c, (end - 1) / c);
    let mut pieces = Vec::new();
    let mut version: Option<Option<Version>> = None;
    // The position that ended the fast path with a chunk at another version (or none),
    // though counted current (not being rebuilt); the ones before it all held `version`.
    let mut mismatch: Option<(usize, Option<Version>)> = None;
    let mut healthy = true;
    for i in first..=last {
        let pos = i as usize;
        let peer = ctx.positions[pos];
        if peer == NO_OSD || behind & (1 << pos) != 0 {
            healthy = false;
            break;
        }
        let lo = (h.offset as u64).max(i * c) - i * c;
        let hi = end.min((i + 1) * c) - i * c;
        match read_chunk(
            osd,
            &ctx,
            peer,
            h.object.chunk(pos, false),
            lo as u32,
            (hi - lo) as u32,
        )
        .await
        {
            // A chunk its holder does not have at all cannot be told from a stripe never
            // written (both read as zeros) without the other chunks: decode below, which
            // weighs every position's version, rather than answer zeros for data that
            // exists (seen once: a position moved back to a returning OSD, read before its
            // chunk was rebuilt).
            Ok((v @ Some(_), data)) if version.is_none_or(|seen| seen == v) => {
                version = Some(v);
                pieces.push(data);
            }
            Ok((v, _)) => {
                mismatch = Some((pos, v));
                healthy = false;
                break;
            }
            Err(_) => {
                healthy = false;
                break;
            }
        }
    }
    if healthy {
        if pieces.len() == 1 {
            return (Status::Ok, pieces.pop().expect("one piece"));
        }
        let mut out = BytesMut::with_capacity(h.length as usize);
        for p in pieces {
            out.extend_from_slice(&p);
        }
        return (Status::Ok, out.freeze());
    }
    match decode_stripe(osd, &ctx, h.object, true).await {
        Ok(Some((target, object))) => {
            // A position counted current must hold the stripe's version: one that does
            // not means a chunk was lost or never promoted without the PG knowing (a
            // bug, or a disk that lost acknowledged data). The read is still right
            // (decoded, and the chunk repaired), but say so loudly.
            let read_before = (first as usize..)
                .take(pieces.len())
                .map(|pos| (pos, version.flatten()));
            for (pos, v) in read_before.chain(mismatch) {
                if v != Some(target) {
                    tracing::error!(
                        osd = osd.id, pg = %ctx.pg, stripe = %h.object, pos,
                        holder = ctx.positions[pos], found = ?v, version = %target,
                        "EC read: a position counted current lacks the stripe's version"
                    );
                }
            }
            (
                Status::Ok,
                Bytes::copy_from_slice(&object[h.offset as usize..end as usize]),
            )
        }
        Ok(None) => (Status::Ok, Bytes::from(vec![0; h.length as usize])),
        Err(s) => (s, Bytes::new()),
    }
}

/// A client ALLOCATION of an erasure-coded stripe: chunks are written whole, so a stripe
/// is allocated entirely or not at all. Unsure (this position is being rebuilt, or the
/// layer has ancestors it may read through to): allocated.
pub(crate) fn client_allocation(osd: &Osd, h: &Header) -> (Status, Bytes) {
    let ctx = match client_context(osd, h) {
        Ok(c) => c,
        Err(s) => return (s, Bytes::new()),
    };
    let me = ctx.positions.iter().position(|&p| p == osd.id);
    let behind = osd.pgs.with(ctx.pg, |e| e.ec_behind);
    // A layer with ancestors (or whose chain is not known yet) may read through to them.
    let flat = osd
        .layers
        .cached_chain(h.object.inode)
        .is_some_and(|c| c.is_empty());
    let present = match me {
        Some(pos) if flat && behind & (1 << pos) == 0 => {
            osd.store.version(h.object.chunk(pos, false)).is_some()
        }
        _ => true,
    };
    let blocks = ctx.stripe_bytes as usize / IMAGE_BLOCK_BYTES;
    let mut words = vec![0u64; blocks.div_ceil(64)];
    if present {
        for b in 0..blocks {
            words[b / 64] |= 1 << (b % 64);
        }
    }
    let mut out = BytesMut::with_capacity(words.len() * 8);
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
    (Status::Ok, out.freeze())
}

/// A client WRITE, TRIM or DELETE of an erasure-coded stripe: read what the write does not
/// cover, apply it, encode, stash every chunk durably on every live position, then promote
/// them all; acknowledged once every promote answered. TRIM and DELETE write zeros (the
/// space of an erasure-coded stripe is reclaimed only when its volume is removed).
pub(crate) async fn client_mutation(osd: &Arc<Osd>, h: Header, payload: Bytes) -> Status {
    // Held until answered, so a FENCE returns only after this write finished.
    let _fence = osd.layers.enter().await;
    let ctx = match client_context(osd, &h) {
        Ok(c) => c,
        Err(s) => return s,
    };
    if osd.layers.is_frozen(h.object.inode) {
        return Status::Frozen;
    }
    let chain = match osd.layers.chain(osd.meta.as_ref(), h.object.inode).await {
        Ok(chain) => chain,
        Err(_) => return Status::Unavailable,
    };
    let (offset, len) = match h.opcode {
        Opcode::Write => (h.offset as u64, payload.len() as u64),
        Opcode::Trim => (h.offset as u64, h.length as u64),
        _ => (0, ctx.stripe_bytes as u64),
    };
    if offset + len > ctx.stripe_bytes as u64 {
        return Status::Invalid;
    }
    if (ctx.live().count() as u32) < ctx.min_size {
        return Status::Unavailable;
    }
    let guard = osd.stripes.lock(h.object).await;
    let whole = offset == 0 && len == ctx.stripe_bytes as u64;
    let healthy = if whole {
        None
    } else {
        read_data_chunks(osd, &ctx, h.object).await
    };
    let (old_version, mut object) = if whole {
        (None, vec![0u8; ctx.stripe_bytes as usize])
    } else if let Some((Some(v), object)) = healthy {
        (Some(v), object)
    } else if healthy.is_some() && chain.is_empty() {
        // Every data chunk healthy and absent: a new stripe of a flat volume.
        (None, vec![0u8; ctx.stripe_bytes as usize])
    } else {
        // The head's stripe; when it has none, the nearest ancestor's (a copy-up: every EC
        // write is a whole-stripe write into the head anyway).
        match decode_stripe(osd, &ctx, h.object, true).await {
            Ok(Some((v, object))) => (Some(v), object),
            Ok(None) => match layered_stripe(osd, &ctx, h.object, &chain).await {
                Ok(Some((_, object))) => (None, object),
                Ok(None) => (None, vec![0u8; ctx.stripe_bytes as usize]),
                Err(s) => return s,
            },
            Err(s) => return s,
        }
    };
    let range = offset as usize..(offset + len) as usize;
    match h.opcode {
        Opcode::Write => object[range].copy_from_slice(&payload),
        _ => object[range].fill(0),
    }
    let version = match stash_stripe(osd, &ctx, h.object, old_version, &object).await {
        Ok(v) => v,
        Err(s) => return s,
    };
    // Durable on every live position: acknowledged now. The promotes finish under the
    // stripe lock, so a reader of this stripe still finds every chunk committed.
    let (osd2, stripe, pg, interval) = (osd.clone(), h.object, ctx.pg, ctx.interval);
    tokio::spawn(async move {
        if let Err(s) = promote_stripe(&osd2, &ctx, stripe, version).await {
            // The stashes are durable: the next interval's peering promotes them.
            tracing::warn!(osd = osd2.id, %stripe, "EC promote after the acknowledgement: {s:?}");
        }
        drop(guard);
    });
    tracing::trace!(target: "basalt::invariant", osd = osd.id, pg = %pg, interval, "acknowledged");
    Status::Ok
}

/// The k data chunks of `stripe` read whole from their holders when every one is healthy
/// (not a hole, not being rebuilt, readable) and all are at one version: the stripe's
/// version (None: absent) and bytes. None when the stripe must be decoded instead.
async fn read_data_chunks(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
) -> Option<(Option<Version>, Vec<u8>)> {
    let behind = osd.pgs.with(ctx.pg, |e| e.ec_behind);
    let k = ctx.scheme.k();
    if (0..k).any(|pos| ctx.positions[pos] == NO_OSD || behind & (1 << pos) != 0) {
        return None;
    }
    let reads = join_all((0..k).map(|pos| {
        let peer = ctx.positions[pos];
        read_chunk(osd, ctx, peer, stripe.chunk(pos, false), 0, ctx.chunk_bytes)
    }))
    .await;
    let mut version = None;
    let mut object = Vec::with_capacity(ctx.stripe_bytes as usize);
    for (i, r) in reads.into_iter().enumerate() {
        let (v, data) = r.ok()?;
        if i > 0 && v != version {
            return None;
        }
        version = v;
        object.extend_from_slice(&data);
    }
    Some((version, object))
}

/// Write `object` as stripe `stripe` at a new version, both phases (see [`stash_stripe`]
/// and [`promote_stripe`]). The caller holds the stripe lock.
async fn write_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    old_version: Option<Version>,
    object: &[u8],
) -> Result<(), Status> {
    let version = stash_stripe(osd, ctx, stripe, old_version, object).await?;
    promote_stripe(osd, ctx, stripe, version).await
}

/// Phase 1 of a stripe write: assign a version, encode, stash every chunk durably on every
/// live position. Returns the version. The caller holds the stripe lock; `old_version` is
/// the stripe's version before (asserted to grow).
async fn stash_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    old_version: Option<Version>,
    object: &[u8],
) -> Result<Version, Status> {
    let chunks = match ctx.scheme.encode(object) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(osd = osd.id, "encode: {e}");
            return Err(Status::Io);
        }
    };
    // The version, under the PG lock: still this interval's active primary.
    let version = {
        let mut shard = osd.pgs.shard(ctx.pg).lock().expect("pg shard lock");
        let entry = shard.entry(ctx.pg).or_default();
        if entry.interval != ctx.interval || entry.phase != PgPhase::Active {
            return Err(Status::Unavailable);
        }
        entry.counter += 1;
        Version::new(ctx.interval as u64, entry.counter)
    };
    if let Some(old) = old_version {
        assert!(
            version > old,
            "osd.{} pg {}: EC version {version} does not exceed the stripe's {old}",
            osd.id,
            ctx.pg
        );
    }
    // Phase 1: a durable stash on every live position.
    let chunks: Vec<Bytes> = chunks.into_iter().map(Bytes::from).collect();
    let stashes = ctx.live().map(|(pos, peer)| {
        let data = chunks[pos].clone();
        let (osd, ctx) = (osd.clone(), ctx);
        async move {
            put_chunk(
                &osd,
                ctx,
                peer,
                stripe.chunk(pos, true),
                version,
                Some(data),
                true,
            )
            .await
        }
    });
    for result in join_all(stashes).await {
        result?;
    }
    Ok(version)
}

/// Phase 2 of a stripe write: promote the stashes of `version` everywhere. The write is
/// durable already (peering rolls it forward); a reader of the stripe must find every
/// chunk committed at one version, so the caller holds the stripe lock until this is done.
///
/// A position whose promote fails is tried again (promotes are idempotent) until all
/// succeed or the interval ends (its next primary's peering then promotes the durable
/// stashes): given up earlier, the position would keep its old chunk, or none, while the
/// PG counts it current, and a read of it would answer the old bytes.
async fn promote_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    version: Version,
) -> Result<(), Status> {
    let mut todo: Vec<(usize, OsdId)> = ctx.live().collect();
    let mut pause = Duration::from_millis(PROMOTE_RETRY_FIRST_MS);
    let mut attempt = 0u32;
    // Bound: runs while this interval lasts; each retry waits at least PROMOTE_RETRY_FIRST_MS.
    loop {
        let promotes = todo.iter().map(|&(pos, peer)| {
            let (osd, ctx) = (osd.clone(), ctx);
            async move { promote_chunk(&osd, ctx, peer, stripe, pos, version).await }
        });
        let results = join_all(promotes).await;
        let mut last = Status::Ok;
        let failed: Vec<(usize, OsdId)> = todo
            .iter()
            .zip(results)
            .filter_map(|(&at, r)| {
                r.err().map(|s| {
                    last = s;
                    at
                })
            })
            .collect();
        if failed.is_empty() {
            return Ok(());
        }
        let current = osd.pgs.with(ctx.pg, |e| {
            e.interval == ctx.interval && e.phase == PgPhase::Active
        });
        if !current || osd.stopping() {
            return Err(last);
        }
        if attempt.is_multiple_of(10) {
            tracing::warn!(
                osd = osd.id, pg = %ctx.pg, %stripe, ?failed, status = ?last, attempt,
                "EC promote failed; trying again (the stripe stays locked meanwhile)"
            );
        }
        todo = failed;
        attempt = attempt.wrapping_add(1);
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(PROMOTE_RETRY_MAX_MS));
    }
}

/// First and longest pause between tries of a failed promote.
const PROMOTE_RETRY_FIRST_MS: u64 = 20;
const PROMOTE_RETRY_MAX_MS: u64 = 1_000;

/// The stripe `stripe` reads as in a layer whose ancestors are `chain` (nearest first): the
/// first layer holding it (the layer itself first), None when none does. The caller holds
/// the stripe lock (which covers every layer of the family).
async fn layered_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    chain: &[basalt_proto::InodeId],
) -> Result<Option<(Version, Vec<u8>)>, Status> {
    let layers = std::iter::once(stripe.inode).chain(chain.iter().copied());
    for inode in layers {
        let at = ObjectId::new(inode, stripe.index);
        if let Some(found) = decode_stripe(osd, ctx, at, inode == stripe.inode).await? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// COPYUP of an erasure-coded stripe: when the layer lacks it and an ancestor holds it,
/// write the nearest holder's stripe into the layer (both phases, like a write).
pub(crate) async fn client_copy_up(osd: &Arc<Osd>, h: Header) -> Status {
    let _fence = osd.layers.enter().await;
    let ctx = match client_context(osd, &h) {
        Ok(c) => c,
        Err(s) => return s,
    };
    let chain = match osd.layers.chain(osd.meta.as_ref(), h.object.inode).await {
        Ok(chain) => chain,
        Err(_) => return Status::Unavailable,
    };
    if chain.is_empty() {
        return Status::Ok;
    }
    let _stripe = osd.stripes.lock(h.object).await;
    match decode_stripe(osd, &ctx, h.object, true).await {
        Ok(Some(_)) => return Status::Ok,
        Ok(None) => {}
        Err(s) => return s,
    }
    let object = match layered_stripe(osd, &ctx, h.object, &chain).await {
        Ok(Some((_, object))) => object,
        Ok(None) => return Status::Ok,
        Err(s) => return s,
    };
    match write_stripe(osd, &ctx, h.object, None, &object).await {
        Ok(()) => Status::Ok,
        Err(s) => s,
    }
}

/// Run futures concurrently on this task and collect their outputs in order.
async fn join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter()
        .map(|o| o.expect("every future finished"))
        .collect()
}

/// Peer an erasure-coded PG as its new primary: list every live position (sealing them),
/// settle every stripe with a stash (promote, roll back, or drop), note the positions that
/// lack chunks for background recovery, record and activate. Returns the positions behind.
pub(crate) async fn peer(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    acting: &[(OsdId, u64)],
    generation: u64,
) -> Result<u32, PgError> {
    let pg = ctx.pg;
    let record = read_record(osd, pg).await?;
    let expected_rev = record.as_ref().map(|r| r.1).unwrap_or(0);
    if let Some((rec, _)) = &record {
        if rec.epoch > ctx.interval {
            return Err(PgError::RecordAhead {
                recorded: rec.epoch,
            });
        }
    }
    osd.pgs.with(pg, |e| e.sealed = e.sealed.max(ctx.interval));
    let map = osd.map();
    let width = ctx.positions.len();
    let incarnation = |peer: OsdId| {
        acting
            .iter()
            .find(|a| a.0 == peer)
            .map(|a| a.1)
            .or_else(|| map.osds.get(&peer).map(|o| o.incarnation))
            .unwrap_or(0)
    };
    // Where each position's chunks may be: its holder, and the OSDs that held it in
    // earlier intervals and were not rebuilt from yet (a placement change moved it).
    let previous: Vec<Vec<OsdId>> = record
        .as_ref()
        .map(|(r, _)| r.ec_sources.clone())
        .filter(|s| s.len() == width)
        .unwrap_or_else(|| vec![Vec::new(); width]);
    let members: std::collections::BTreeSet<OsdId> = ctx.live().map(|(_, o)| o).collect();
    let mut to_list = members.clone();
    to_list.extend(
        previous
            .iter()
            .flatten()
            .filter(|o| map.osds.get(o).is_some_and(|i| i.up)),
    );
    let mut seen: BTreeMap<ObjectId, Vec<Seen>> = BTreeMap::new();
    let mut found_elsewhere: Vec<Vec<OsdId>> = vec![Vec::new(); width];
    for &peer in &to_list {
        let listed = match list_at(osd, &map, ctx, peer, incarnation(peer)).await {
            Ok(l) => l,
            // A member must answer; an earlier holder is only a possible source.
            Err(e) if members.contains(&peer) => return Err(e),
            Err(e) => {
                tracing::warn!(osd = osd.id, %pg, peer, "earlier chunk holder did not list: {e}");
                continue;
            }
        };
        for (key, version) in listed {
            let Some((p, stash)) = key.chunk_position() else {
                continue;
            };
            if p >= width {
                continue;
            }
            let slot = seen
                .entry(key.stripe())
                .or_insert_with(|| vec![Seen::default(); width]);
            let (committed, stashed) = if ctx.positions[p] == peer {
                let h = &mut slot[p].holder;
                (&mut h.0, &mut h.1)
            } else {
                if !found_elsewhere[p].contains(&peer) {
                    found_elsewhere[p].push(peer);
                }
                let list = &mut slot[p].elsewhere;
                let i = match list.iter().position(|e| e.0 == peer) {
                    Some(i) => i,
                    None => {
                        list.push((peer, None, None));
                        list.len() - 1
                    }
                };
                let e = &mut list[i];
                (&mut e.1, &mut e.2)
            };
            let field = if stash { stashed } else { committed };
            *field = (*field).max(Some(version));
        }
    }
    let mut behind = 0u32;
    let mut rebuilds = 0u64;
    let mut unfound = 0u64;
    let (mut promoted, mut dropped) = (0u64, 0u64);
    for (stripe, state) in &seen {
        // The decision sees every chunk found for a position, wherever it is.
        let merged: Vec<Option<(Option<Version>, Option<Version>)>> = (0..width)
            .map(|p| {
                let s = &state[p];
                let live = ctx.positions[p] != NO_OSD;
                let committed = s.elsewhere.iter().map(|e| e.1).max().flatten();
                let stashed = s.elsewhere.iter().map(|e| e.2).max().flatten();
                (live || !s.elsewhere.is_empty())
                    .then_some((s.holder.0.max(committed), s.holder.1.max(stashed)))
            })
            .collect();
        let plan = plan_of(ctx.scheme.k(), &merged);
        if let Some(v) = plan.unfound {
            unfound += 1;
            tracing::error!(osd = osd.id, %pg, %stripe, "stripe unfound: a committed write (rank {v}) lost more chunks than the code tolerates");
            continue;
        }
        let target = plan.target.map(|t| version_of(&merged, t));
        // Chunks left on earlier holders are sources for the rebuild: a stash of the target
        // there is promoted (recovery reads committed chunks), any other stash dropped.
        for (pos, seen_at) in state.iter().enumerate() {
            for &(other, c, st) in &seen_at.elsewhere {
                let result = match (st, target) {
                    (Some(v), Some(t)) if v == t && c != Some(t) => {
                        promote_chunk(osd, ctx, other, *stripe, pos, t).await
                    }
                    (Some(v), _) => {
                        put_chunk(osd, ctx, other, stripe.chunk(pos, true), v, None, false).await
                    }
                    _ => Ok(()),
                };
                if let Err(status) = result {
                    tracing::warn!(osd = osd.id, %pg, %stripe, pos, other, "settling a chunk left on an earlier holder: {status:?}");
                }
            }
        }
        // What each holder does to end at the target (the chunks found elsewhere are only
        // sources: a holder lacking the target is rebuilt from them in the background).
        for (pos, peer) in ctx.live() {
            let (hc, hs) = state[pos].holder;
            match target {
                Some(t) => {
                    if hc != Some(t) {
                        if hs == Some(t) {
                            promote_chunk(osd, ctx, peer, *stripe, pos, t)
                                .await
                                .map_err(|status| peer_status("PROMOTE", peer, status))?;
                            promoted += 1;
                            continue;
                        }
                        behind |= 1 << pos;
                        rebuilds += 1;
                    }
                    if let Some(v) = hs.filter(|_| hs != Some(t) || hc == Some(t)) {
                        put_chunk(osd, ctx, peer, stripe.chunk(pos, true), v, None, false)
                            .await
                            .map_err(|status| peer_status("DROP", peer, status))?;
                        dropped += 1;
                    }
                }
                None => {
                    if let Some(v) = hs {
                        put_chunk(osd, ctx, peer, stripe.chunk(pos, true), v, None, false)
                            .await
                            .map_err(|status| peer_status("DROP", peer, status))?;
                        dropped += 1;
                    }
                    if let Some(v) = hc {
                        put_chunk(osd, ctx, peer, stripe.chunk(pos, false), v, None, false)
                            .await
                            .map_err(|status| peer_status("DELETE", peer, status))?;
                        dropped += 1;
                    }
                }
            }
        }
    }
    if promoted + dropped + rebuilds + unfound > 0 {
        tracing::info!(
            osd = osd.id, %pg, interval = ctx.interval, promoted, dropped, rebuilds, unfound,
            "EC peering settled the stripes of cut writes"
        );
    }
    if !crate::peering::is_current(osd, pg, generation) {
        return Err(PgError::TakenOver);
    }
    let sources: Vec<Vec<OsdId>> = (0..width)
        .map(|p| {
            let holder = ctx.positions[p];
            let mut v: Vec<OsdId> = (holder != NO_OSD).then_some(holder).into_iter().collect();
            if behind & (1 << p) != 0 || holder == NO_OSD {
                for &o in previous[p].iter().chain(&found_elsewhere[p]) {
                    if !v.contains(&o) {
                        v.push(o);
                    }
                }
            }
            v
        })
        .collect();
    let complete = ctx
        .live()
        .filter(|(pos, _)| behind & (1 << pos) == 0)
        .map(|(_, peer)| CompleteCopy {
            osd: peer,
            incarnation: incarnation(peer),
        })
        .collect();
    let rec = PgRecord {
        epoch: ctx.interval,
        primary: osd.id,
        acting: acting.iter().map(|a| a.0).collect(),
        complete,
        degraded_objects: rebuilds,
        holders: Vec::new(),
        unfound_objects: unfound,
        ec_sources: sources.clone(),
    };
    let value = serde_json::to_vec(&rec).expect("PG record serialises");
    match osd
        .meta
        .compare_and_swap(&pg_key(pg.pool, pg.index), expected_rev, value)
        .await
    {
        Ok(Some(_)) => {}
        Ok(None) => return Err(PgError::RecordChanged),
        Err(e) => return Err(PgError::Meta(e)),
    }
    osd.pgs.with(pg, |e| {
        if e.generation == generation {
            e.ec_sources = sources;
        }
    });
    Ok(behind)
}

/// What peering found of one position of a stripe: at its holder, and elsewhere (an OSD
/// that held the position in an earlier interval): (committed, stash) versions.
#[derive(Clone, Debug, Default)]
struct Seen {
    holder: (Option<Version>, Option<Version>),
    elsewhere: Vec<(OsdId, Option<Version>, Option<Version>)>,
}

/// Every object of the PG held by `peer` (this OSD's own store, or a LIST, which also seals
/// the PG there), which must be the run `incarnation` (0: any).
async fn list_at(
    osd: &Arc<Osd>,
    map: &ClusterMap,
    ctx: &EcPg,
    peer: OsdId,
    incarnation: u64,
) -> Result<Vec<(ObjectId, Version)>, PgError> {
    if peer == osd.id {
        return Ok(crate::recovery::list_local(osd, ctx.pg));
    }
    let conn = crate::peering::connect(osd, map, peer).await?;
    list_remote(&conn, ctx.pg, ctx.interval, incarnation).await
}

fn peer_status(op: &'static str, peer: OsdId, status: Status) -> PgError {
    PgError::PeerStatus {
        op,
        peer: format!("osd.{peer}"),
        status,
    }
}

/// Every version in a stripe's listed state, ascending: a version's rank is its index + 1.
fn listed_versions(state: &[Option<(Option<Version>, Option<Version>)>]) -> Vec<Version> {
    let mut all: Vec<Version> = state
        .iter()
        .flatten()
        .flat_map(|(c, s)| [*c, *s])
        .flatten()
        .collect();
    all.sort_unstable();
    all.dedup();
    all
}

/// The plan for one stripe's listed state, with versions ranked (the decision only
/// compares them).
fn plan_of(k: usize, state: &[Option<(Option<Version>, Option<Version>)>]) -> Plan {
    let all = listed_versions(state);
    let rank = |v: Option<Version>| v.map(|v| all.binary_search(&v).expect("listed") as u64 + 1);
    let positions: Vec<Option<PositionState>> = state
        .iter()
        .map(|p| {
            p.map(|(c, s)| PositionState {
                committed: rank(c),
                stash: rank(s),
            })
        })
        .collect();
    decide(k, &positions)
}

/// The version of rank `rank` in a stripe's listed state.
fn version_of(state: &[Option<(Option<Version>, Option<Version>)>], rank: u64) -> Version {
    listed_versions(state)[rank as usize - 1]
}

/// Pause before retrying a failed EC recovery round.
const EC_RECOVERY_RETRY_MS: u64 = 1_000;

/// Rebuild, in the background, every stripe of the PG whose chunk at a position in
/// `behind` is missing or stale: list the PG on the primary's position (its committed
/// chunks name every stripe), and decode-and-repair each stripe under its lock. Clears the
/// behind positions and records the PG clean when done; runs while the interval lasts.
pub(crate) async fn recover(osd: Arc<Osd>, pg: PgId, generation: u64) {
    let _recovering = osd.counters.recovering();
    // Bound: rounds go on while the interval lasts; each failed one waits EC_RECOVERY_RETRY_MS.
    while crate::recovery::still_active(&osd, pg, generation) && !osd.stopping() {
        match recover_round(&osd, pg, generation).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => tracing::debug!(osd = osd.id, %pg, "EC recovery: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(EC_RECOVERY_RETRY_MS)).await;
    }
}

async fn recover_round(osd: &Arc<Osd>, pg: PgId, generation: u64) -> Result<bool, PgError> {
    let map = osd.map();
    let Ok(Some(ctx)) = EcPg::of(osd, &map, pg) else {
        return Ok(false);
    };
    // Every stripe any holder, or earlier holder still counted as a source, has a chunk of.
    let sources = osd.pgs.with(pg, |e| e.ec_sources.clone());
    let mut to_list: std::collections::BTreeSet<OsdId> = ctx.live().map(|(_, o)| o).collect();
    to_list.extend(
        sources
            .iter()
            .flatten()
            .filter(|o| map.osds.get(o).is_some_and(|i| i.up)),
    );
    let mut stripes = std::collections::BTreeSet::new();
    for &peer in &to_list {
        let listed = list_at(osd, &map, &ctx, peer, 0).await?;
        stripes.extend(
            listed
                .into_iter()
                .filter(|(k, _)| matches!(k.chunk_position(), Some((_, false))))
                .map(|(k, _)| k.stripe()),
        );
    }
    let total = stripes.len();
    // Stripes some live position still lacks after this round: while any is left, the
    // behind positions stay behind (reads keep decoding) and the round is tried again.
    let mut unsettled = 0usize;
    for (done, stripe) in stripes.into_iter().enumerate() {
        if !crate::recovery::still_active(osd, pg, generation) {
            return Ok(false);
        }
        let _lock = osd.stripes.lock(stripe).await;
        match decode_and_repair(osd, &ctx, stripe, Some(PushKind::Recovery)).await {
            Ok(None) => {}
            Ok(Some(d)) if d.unsettled == 0 => {}
            Ok(Some(d)) => {
                unsettled += 1;
                tracing::debug!(osd = osd.id, %pg, %stripe, positions = d.unsettled, "EC recovery: a position not rebuilt yet");
            }
            Err(status) => {
                unsettled += 1;
                tracing::warn!(osd = osd.id, %pg, %stripe, "EC recovery of a stripe: {status:?}");
            }
        }
        crate::recovery::pace(osd, ctx.chunk_bytes as usize * ctx.scheme.k()).await;
        if done % 256 == 255 {
            tracing::debug!(osd = osd.id, %pg, done, total, "EC recovery progress");
        }
    }
    if unsettled > 0 {
        tracing::warn!(
            osd = osd.id, %pg, stripes = unsettled, total,
            "EC recovery round left stripes with a position not rebuilt (a member unreachable \
             or refusing); the PG stays degraded and the round runs again"
        );
        return Ok(false);
    }
    // Everything written to the rebuilt positions must be durable before they count as
    // complete.
    for (_, peer) in ctx.live() {
        if peer == osd.id {
            if flush(osd).await != Status::Ok {
                return Ok(false);
            }
            continue;
        }
        let conn = crate::peering::connect(osd, &map, peer).await?;
        let h = Header::request(Opcode::Flush, 0, ObjectId::new(0, 0));
        call_peer(&conn, "FLUSH", h, Bytes::new()).await?;
    }
    let cleared = osd.pgs.with(pg, |e| {
        if e.generation == generation {
            e.ec_behind = 0;
            true
        } else {
            false
        }
    });
    if cleared {
        let complete: Vec<CompleteCopy> = map
            .acting_with_incarnations(pg)
            .into_iter()
            .map(|(osd, incarnation)| CompleteCopy { osd, incarnation })
            .collect();
        let holders: Vec<Vec<OsdId>> = ctx
            .positions
            .iter()
            .map(|&o| (o != NO_OSD).then_some(o).into_iter().collect())
            .collect();
        crate::recovery::update_record(osd, pg, ctx.interval, |rec| {
            rec.complete = complete.clone();
            rec.degraded_objects = 0;
            rec.ec_sources = holders.clone();
        })
        .await?;
        osd.pgs.with(pg, |e| {
            if e.generation == generation {
                e.ec_sources = holders.clone();
            }
        });
        tracing::info!(osd = osd.id, %pg, stripes = total, "EC PG recovered");
        remove_misplaced_chunks(osd, &ctx, &map).await;
    }
    Ok(cleared)
}

/// Once every position is rebuilt: delete, on each member, the chunks it holds of
/// positions that are no longer its own (left by a placement change). Members that are
/// not part of the PG at all lose theirs through the stray scan, once the PG is clean.
async fn remove_misplaced_chunks(osd: &Arc<Osd>, ctx: &EcPg, map: &ClusterMap) {
    let mut removed = 0usize;
    for (pos, peer) in ctx.live() {
        let Ok(listed) = list_at(osd, map, ctx, peer, 0).await else {
            continue;
        };
        for (key, version) in listed {
            match key.chunk_position() {
                Some((p, _)) if p != pos => {}
                _ => continue,
            }
            if put_chunk(osd, ctx, peer, key, version, None, false)
                .await
                .is_ok()
            {
                removed += 1;
            }
        }
    }
    if removed > 0 {
        tracing::info!(osd = osd.id, pg = %ctx.pg, chunks = removed, "removed chunks of positions their OSDs no longer hold");
    }
}

/// Scrub one stripe (see [`crate::scrub`]): read every position's chunk; rebuild missing,
/// stale or damaged ones by decoding; when all read cleanly at one version, recompute the
/// parity and find a chunk that disagrees.
pub(crate) async fn scrub_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
) -> Result<crate::scrub::StripeScrub, Status> {
    use crate::scrub::StripeScrub;
    let _lock = osd.stripes.lock(stripe).await;
    let mut reads = Vec::with_capacity(ctx.positions.len());
    for (pos, &peer) in ctx.positions.iter().enumerate() {
        if crate::scrub::is_hole(ctx, pos) {
            reads.push(None);
            continue;
        }
        let r = read_chunk(osd, ctx, peer, stripe.chunk(pos, false), 0, ctx.chunk_bytes).await;
        if matches!(r, Err(Status::Unavailable)) {
            return Err(Status::Unavailable);
        }
        reads.push(Some(r));
    }
    let versions: Vec<Option<Version>> = reads
        .iter()
        .flatten()
        .map(|r| r.as_ref().ok().map(|(v, _)| *v).unwrap_or(None))
        .collect();
    let all_ok = reads.iter().flatten().all(|r| r.is_ok());
    let one_version = versions.windows(2).all(|w| w[0] == w[1]);
    if !all_ok || !one_version {
        tracing::warn!(osd = osd.id, pg = %ctx.pg, %stripe, "scrub: a chunk is missing, stale or damaged");
        return match decode_stripe(osd, ctx, stripe, true).await {
            Ok(_) => Ok(StripeScrub::Repaired),
            Err(Status::Io) => Ok(StripeScrub::Unrepaired),
            Err(s) => Err(s),
        };
    }
    if versions.first().copied().flatten().is_none() {
        return Ok(StripeScrub::Clean); // absent everywhere
    }
    let version = versions[0].expect("present");
    let chunks: Vec<Option<&[u8]>> = reads
        .iter()
        .map(|r| match r {
            Some(Ok((_, data))) => Some(&data[..]),
            _ => None,
        })
        .collect();
    // The chunks that disagree with a stripe decoded from `view`.
    let disagreeing = |view: &[Option<&[u8]>]| -> Option<(Vec<usize>, Vec<Vec<u8>>)> {
        let object = ctx.scheme.decode(view).ok()?;
        let fresh = ctx.scheme.encode(&object).ok()?;
        let bad = (0..chunks.len())
            .filter(|&i| chunks[i].is_some_and(|c| c != &fresh[i][..]))
            .collect();
        Some((bad, fresh))
    };
    let Some((bad, _)) = disagreeing(&chunks) else {
        return Ok(StripeScrub::Unrepaired);
    };
    if bad.is_empty() {
        return Ok(StripeScrub::Clean);
    }
    // Which single chunk, left out, makes all the others agree?
    let mut culprits = Vec::new();
    for i in (0..chunks.len()).filter(|&i| chunks[i].is_some()) {
        let mut view = chunks.clone();
        view[i] = None;
        if let Some((others_bad, fresh)) = disagreeing(&view) {
            if others_bad == [i] {
                culprits.push((i, fresh));
            }
        }
    }
    if culprits.len() != 1 {
        tracing::error!(
            osd = osd.id, pg = %ctx.pg, %stripe, candidates = culprits.len(),
            "scrub: the stripe's parity disagrees with its data and the wrong chunk cannot be told \
             (a code with m = 1 detects but cannot locate it)"
        );
        return Ok(StripeScrub::Unrepaired);
    }
    let (pos, fresh) = culprits.pop().expect("one culprit");
    tracing::warn!(osd = osd.id, pg = %ctx.pg, %stripe, pos, "scrub: rewriting a chunk that disagrees with the others");
    let data = Bytes::from(fresh[pos].clone());
    put_chunk(
        osd,
        ctx,
        ctx.positions[pos],
        stripe.chunk(pos, false),
        version,
        Some(data),
        false,
    )
    .await?;
    Ok(StripeScrub::Repaired)
}
