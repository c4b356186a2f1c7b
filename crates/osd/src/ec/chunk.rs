//! One chunk at one position: read, replaced (stash, partial stash, rewrite, delete) or
//! promoted, on this OSD's own store or through the position's OSD; and a member's side of
//! PROMOTE and STASH.

use super::partial::{StashHeader, HEADER_BYTES};
use super::{ChunkRead, EcPg};
use crate::daemon::Osd;
use crate::handler::{await_member, status_of, MemberReply};
use basalt_client::{Connection, ReplySink};
use basalt_proto::{
    Flags, Header, ObjectId, ObjectImage, Opcode, OsdId, PgId, Status, Version, IMAGE_BLOCK_BYTES,
};
use basalt_store::Store;
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::sync::OwnedSemaphorePermit;

/// Change this OSD's chunks (`mutate`, run under the PG's lock) for work of `interval` — a
/// primary's request as a member, or its own work on its own position — only while this
/// run may write and no newer interval sealed the copy ([`crate::decide::copy_gate`]). A
/// peering, recovery or write of an interval that has ended must not touch chunks a newer
/// interval's writes own: a superseded peering once dropped the newer interval's stash of
/// an acknowledged write here (its own position), leaving the stripe unfound.
fn under_own_seal<T>(
    osd: &Osd,
    pg: PgId,
    interval: u32,
    mutate: impl FnOnce() -> Result<T, Status>,
) -> Result<T, Status> {
    let shard = osd.pgs.shard(pg).lock().expect("pg shard lock");
    let may_write = crate::handler::member_may_write(osd, interval);
    crate::decide::copy_gate(shard.get(&pg).map(|e| e.sealed), interval, may_write)?;
    mutate()
}

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

/// A member's reply to a request of `ctx`'s interval ([`await_member`]). A member that did
/// not answer — timed out, or a newer interval began first — is Unavailable: its chunk may
/// still return, so a stripe short of chunks waits instead of failing (`read.rs` tells a
/// chunk that may return from a damaged one by exactly this status), and clients retry it.
async fn wait(
    osd: &Osd,
    ctx: &EcPg,
    peer: OsdId,
    p: basalt_client::conn::Pending,
) -> Result<basalt_client::Reply, Status> {
    crate::slow::stage(basalt_proto::slowop::SlowStage::Chunks, Some(peer));
    match await_member(osd, ctx.pg, ctx.interval, p).await {
        MemberReply::Answered(Ok(r)) if r.header.status == Status::Ok => Ok(r),
        MemberReply::Answered(Ok(r)) => Err(r.header.status),
        MemberReply::Answered(Err(e)) => {
            tracing::warn!(osd = osd.id, peer, "EC member request failed: {e}");
            Err(Status::Unavailable)
        }
        MemberReply::TimedOut => Err(Status::Unavailable),
        MemberReply::Superseded => Err(Status::Unavailable),
    }
}

/// Read `len` bytes at `offset` of the chunk key `key` at position holder `peer`.
pub(super) async fn read_chunk(
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
        return match osd.store.read_async(key, offset, &mut buf).await {
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
    let r = wait(osd, ctx, peer, conn.start(h, Bytes::new())).await?;
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
pub(super) async fn put_chunk(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    key: ObjectId,
    version: Version,
    data: Option<Bytes>,
    durable: bool,
) -> Result<(), Status> {
    if peer == osd.id {
        let (own, pg, interval) = (osd.clone(), ctx.pg, ctx.interval);
        let result = osd
            .store_call(move || {
                let store = &own.store;
                let changed = under_own_seal(&own, pg, interval, || {
                    match &data {
                        Some(d) => store.write(key, 0, d, version),
                        None => store.delete(key, version),
                    }
                    .map_err(|e| status_of(&e))
                });
                if changed.is_ok() && durable {
                    store.flush()?;
                }
                Ok(changed)
            })
            .await;
        return result.unwrap_or_else(|e| {
            tracing::error!(osd = osd.id, object = %key, "chunk write failed: {e}");
            Err(status_of(&e))
        });
    }
    let conn = connect(osd, peer).await?;
    let mut h = member_header(ctx, Opcode::Push, key, version);
    if durable {
        h.flags = Flags(h.flags.0 | Flags::FUA);
    }
    let payload = data.map(|d| full_image(ctx, d)).unwrap_or_default();
    wait(osd, ctx, peer, conn.start(h, payload))
        .await
        .map(|_| ())
}

/// Stash `payload` (a partial stash: header block, then blocks) of `stripe` at position
/// `pos` (held by `peer`) at `version` over the committed chunk at `base`, durably.
#[allow(clippy::too_many_arguments)]
pub(super) async fn put_partial_stash(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    stripe: ObjectId,
    pos: usize,
    version: Version,
    base: Version,
    payload: Bytes,
) -> Result<(), Status> {
    let key = stripe.partial_stash(pos);
    if peer == osd.id {
        let (own, pg, interval) = (osd.clone(), ctx.pg, ctx.interval);
        return osd
            .store_call(move || {
                let store = &own.store;
                let stashed = under_own_seal(&own, pg, interval, || {
                    match stash_local(store, key, version, base, &payload) {
                        Status::Ok => Ok(()),
                        status => Err(status),
                    }
                });
                if let Err(status) = stashed {
                    return Ok(Err(status));
                }
                store.flush().map(|()| Ok(()))
            })
            .await
            .unwrap_or_else(|e| {
                tracing::error!(osd = osd.id, object = %key, "partial stash failed: {e}");
                Err(status_of(&e))
            });
    }
    let conn = connect(osd, peer).await?;
    let mut h = member_header(ctx, Opcode::Stash, key, version);
    h.prev_version = base;
    h.flags = Flags(h.flags.0 | Flags::FUA);
    wait(osd, ctx, peer, conn.start(h, payload))
        .await
        .map(|_| ())
}

/// Store the partial stash `key` at `version` (`payload`: header block and blocks) if the
/// committed chunk of its position is at `base` (else Stale), replacing any stash of the
/// position; not flushed. The PG's writes to this OSD are serialized by its primary.
fn stash_local(
    store: &Store,
    key: ObjectId,
    version: Version,
    base: Version,
    payload: &[u8],
) -> Status {
    let Some((pos, true)) = key.chunk_position().filter(|_| key.is_partial_stash()) else {
        return Status::Invalid;
    };
    let header = payload.get(..HEADER_BYTES).and_then(StashHeader::decode);
    let fits = header
        .is_some_and(|h| h.base == base && payload.len() == HEADER_BYTES * (1 + h.blocks as usize));
    if !fits || version <= base || payload.len() > store.object_size() as usize {
        return Status::Invalid;
    }
    let chunk = key.stripe().chunk(pos, false);
    if store.version(chunk) != Some(base) {
        return Status::Stale;
    }
    // Any older stash of the position goes first: the log is a prefix, so a crash leaves
    // the old stashes, none, or the new one alone.
    let whole = key.stripe().chunk(pos, true);
    let result = (|| {
        for old in [whole, key] {
            if store.version(old).is_some() {
                store.delete(old, version)?;
            }
        }
        store.write(key, 0, payload, version)
    })();
    match result {
        Ok(()) => Status::Ok,
        Err(e) => {
            tracing::error!(object = %key, "partial stash failed: {e}");
            status_of(&e)
        }
    }
}

/// As a member: STASH from the PG's primary, if it belongs to the current interval;
/// answered once durable (FUA).
pub(crate) fn member_stash(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let status = {
        let stashed = under_own_seal(osd, h.pg, h.map_epoch, || {
            match stash_local(&osd.store, h.object, h.version, h.prev_version, &payload) {
                Status::Ok => Ok(()),
                status => Err(status),
            }
        });
        stashed.err().unwrap_or(Status::Ok)
    };
    if status != Status::Ok || !h.flags.has(Flags::FUA) {
        sink.send(h.reply(status), Bytes::new());
        return;
    }
    let osd = osd.clone();
    tokio::spawn(async move {
        let status = crate::handler::flush(&osd).await;
        sink.send(h.reply(status), Bytes::new());
        drop(permit);
    });
}

/// The header of the partial stash of `stripe` at position `pos` on `peer`, if it has one
/// that is intact (peering needs its base).
pub(super) async fn partial_header(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    stripe: ObjectId,
    pos: usize,
) -> Option<StashHeader> {
    let key = stripe.partial_stash(pos);
    let (version, block) = read_chunk(osd, ctx, peer, key, 0, HEADER_BYTES as u32)
        .await
        .ok()?;
    version?;
    StashHeader::decode(&block)
}

/// Promote the stash of `stripe` at position `pos` (held by `peer`) at `version`: its
/// whole stash, or its partial one (merged into the committed chunk) when `partial`.
pub(super) async fn promote_chunk(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    peer: OsdId,
    stripe: ObjectId,
    pos: usize,
    version: Version,
    partial: bool,
) -> Result<(), Status> {
    let stash = match partial {
        true => stripe.partial_stash(pos),
        false => stripe.chunk(pos, true),
    };
    if peer == osd.id && partial {
        // A merge reads the stash's blocks: off the runtime threads.
        let (own, pg, interval) = (osd.clone(), ctx.pg, ctx.interval);
        let key = stripe.chunk(pos, false);
        let merged = osd
            .store_call(move || {
                Ok(under_own_seal(&own, pg, interval, || {
                    merge_local(&own.store, stash, key, version)
                }))
            })
            .await;
        return merged.unwrap_or_else(|e| Err(status_of(&e)));
    }
    if peer == osd.id {
        return under_own_seal(osd, ctx.pg, ctx.interval, || {
            promote_local(osd, stash, version)
        });
    }
    let conn = connect(osd, peer).await?;
    let h = member_header(ctx, Opcode::Promote, stash, version);
    wait(osd, ctx, peer, conn.start(h, Bytes::new()))
        .await
        .map(|_| ())
}

/// Make the stash `stash` at `version` the committed chunk (idempotent).
fn promote_local(osd: &Osd, stash: ObjectId, version: Version) -> Result<(), Status> {
    let Some((pos, true)) = stash.chunk_position() else {
        return Err(Status::Invalid);
    };
    let key = stash.stripe().chunk(pos, false);
    if stash.is_partial_stash() {
        return merge_local(&osd.store, stash, key, version);
    }
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

/// Merge the partial stash `stash` at `version` into the committed chunk `key`, only if
/// that is at the stash's base (else Stale); idempotent.
fn merge_local(
    store: &Store,
    stash: ObjectId,
    key: ObjectId,
    version: Version,
) -> Result<(), Status> {
    match store.version(stash) {
        Some(v) if v == version => {}
        Some(_) => return Err(Status::Stale),
        None if store.version(key) == Some(version) => return Ok(()),
        None => return Err(Status::Stale),
    }
    let mut block = vec![0u8; HEADER_BYTES];
    store
        .read(stash, 0, &mut block)
        .map_err(|e| status_of(&e))?;
    let Some(header) = StashHeader::decode(&block) else {
        tracing::error!(object = %stash, "a partial stash with a damaged header: not merged");
        return Err(Status::Io);
    };
    if store.version(key) != Some(header.base) {
        return Err(Status::Stale);
    }
    match store.merge(stash, 1, key, header.first_block, header.blocks) {
        Ok(true) => Ok(()),
        Ok(false) => Err(Status::Stale),
        Err(e) => Err(status_of(&e)),
    }
}

/// As a member: PROMOTE from the PG's primary, if it belongs to the current interval.
pub(crate) fn member_promote(osd: &Osd, h: &Header) -> Status {
    under_own_seal(osd, h.pg, h.map_epoch, || {
        promote_local(osd, h.object, h.version)
    })
    .err()
    .unwrap_or(Status::Ok)
}

/// As a member: PROMOTE of a partial stash (a merge, which reads the stash's blocks) on the
/// blocking pool, answered from there; the interval is checked under the PG's lock there,
/// as [`member_promote`] does.
pub(crate) fn member_merge(
    osd: &Arc<Osd>,
    h: Header,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let osd = osd.clone();
    tokio::spawn(async move {
        let member = osd.clone();
        let status = osd
            .store_call(move || Ok(member_promote(&member, &h)))
            .await
            .unwrap_or_else(|e| status_of(&e));
        sink.send(h.reply(status), Bytes::new());
        drop(permit);
    });
}
