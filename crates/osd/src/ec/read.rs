//! Reading stripes: the client READ and ALLOCATION paths, decoding a stripe from any k
//! chunks and repairing the chunks found missing, stale or damaged, and reads through the
//! layers of a clone family.

use super::chunk::{put_chunk, read_chunk};
use super::unfound::is_unfound;
use super::{client_context, ChunkRead, EcPg};
use crate::daemon::Osd;
use crate::recovery::PushKind;
use basalt_placement::NO_OSD;
use basalt_proto::{Flags, Header, ObjectId, Status, Version, IMAGE_BLOCK_BYTES};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;

/// Each position's whole committed chunk of `stripe`: what its holder answered (None: a
/// hole), and the best chunk found for it — the newest version among its holder and, for a
/// position still being rebuilt, the OSDs that held it before (`ec_sources` of the PG).
pub(super) async fn read_all_chunks(
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

/// The committed versions the chunks read hold, ascending, each once.
pub(super) fn committed_versions(chunks: &[Option<ChunkRead>]) -> Vec<Version> {
    let mut versions: Vec<Version> = chunks
        .iter()
        .filter_map(|c| c.as_ref()?.as_ref().ok()?.0)
        .collect();
    versions.sort_unstable();
    versions.dedup();
    versions
}

/// The chunks read that hold `version`, by position (None: absent, another version or
/// unreadable): what a decode of that version may use.
pub(super) fn chunks_at(chunks: &[Option<ChunkRead>], version: Version) -> Vec<Option<&[u8]>> {
    chunks
        .iter()
        .map(|c| match c {
            Some(Ok((Some(v), data))) if *v == version => Some(&data[..]),
            _ => None,
        })
        .collect()
}

/// Is an earlier holder of a position being rebuilt (or of a hole) down? Its chunks may
/// return with it.
fn source_down(osd: &Osd, ctx: &EcPg) -> bool {
    let (behind, sources) = osd
        .pgs
        .with(ctx.pg, |e| (e.ec_behind, e.ec_sources.clone()));
    let map = osd.map();
    ctx.positions.iter().enumerate().any(|(pos, &peer)| {
        (behind & (1 << pos) != 0 || peer == NO_OSD)
            && sources
                .get(pos)
                .into_iter()
                .flatten()
                .any(|o| *o != peer && !map.osds.get(o).is_some_and(|i| i.up))
    })
}

/// The stripe's current contents decoded from whatever positions answer: the newest
/// version that k chunks agree on (None: the stripe does not exist). Chunks at other
/// versions, or unreadable ones (a bad checksum), are rewritten from the decoded stripe
/// when `repair` (the caller holds the stripe lock).
pub(super) async fn decode_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    repair: bool,
) -> Result<Option<(Version, Vec<u8>)>, Status> {
    let decoded = decode_and_repair(osd, ctx, stripe, repair.then_some(PushKind::Repair)).await?;
    Ok(decoded.map(|d| (d.version, d.object)))
}

/// A stripe decoded by [`decode_and_repair`].
pub(super) struct Decoded {
    pub version: Version,
    pub object: Vec<u8>,
    /// Live positions whose holder is not known to hold `version` afterwards: unreachable,
    /// its chunk missing, stale or damaged and not rewritten (no repair asked, or the
    /// rewrite failed).
    pub unsettled: usize,
}

/// [`decode_stripe`], also telling how many live positions were left without the
/// stripe's version — what recovery must see as zero before it counts a position rebuilt.
/// Chunks rewritten are counted as pushes of `repair`'s kind. An unfound stripe answers
/// Unavailable (its I/O waits), as does one found undecodable while a chunk may return.
pub(super) async fn decode_and_repair(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    repair: Option<PushKind>,
) -> Result<Option<Decoded>, Status> {
    if is_unfound(osd, ctx.pg, stripe) {
        return Err(Status::Unavailable);
    }
    let read = read_all_chunks(osd, ctx, stripe).await;
    let chunks: Vec<Option<ChunkRead>> = read.iter().map(|r| r.1.clone()).collect();
    let k = ctx.scheme.k();
    let versions = committed_versions(&chunks);
    let holding = |v: Version| {
        chunks
            .iter()
            .filter(|c| matches!(c, Some(Ok((Some(x), _))) if *x == v))
            .count()
    };
    // A chunk that may still show up: a hole, a holder not answering, or an earlier holder
    // of a position being rebuilt that is down. The stripe then waits rather than fails.
    let may_return = || {
        chunks
            .iter()
            .any(|c| matches!(c, Some(Err(Status::Unavailable))))
            || ctx.positions.contains(&NO_OSD)
            || source_down(osd, ctx)
    };
    let Some(target) = versions.iter().rev().copied().find(|&v| holding(v) >= k) else {
        if versions.is_empty() && chunks.iter().flatten().all(|c| c.is_ok()) {
            return Ok(None);
        }
        if may_return() {
            // The next peering (a member back) or a give-up settles it; I/O waits.
            return Err(Status::Unavailable);
        }
        tracing::error!(
            osd = osd.id, pg = %ctx.pg, %stripe,
            "stripe unreadable: no version is held by {k} readable chunks"
        );
        return Err(Status::Io);
    };
    if let Some(&newest) = versions.last() {
        if newest > target && may_return() {
            tracing::debug!(osd = osd.id, pg = %ctx.pg, %stripe, %newest, "stripe unfound at a read: waiting for its chunks");
            return Err(Status::Unavailable);
        }
        if newest > target {
            tracing::error!(
                osd = osd.id, pg = %ctx.pg, %stripe, %newest,
                "stripe unreadable: version {newest} has fewer than {k} readable chunks and \
                 no other chunk may return"
            );
            return Err(Status::Io);
        }
    }
    let usable = chunks_at(&chunks, target);
    // Decoded only from chunks of the one version chosen, k of them at least: chunks of
    // two versions would decode to bytes no write produced.
    assert!(
        usable.len() == ctx.positions.len() && usable.iter().flatten().count() >= k,
        "osd.{} pg {} {stripe}: decoding {target} from {} of {} chunks (k = {k})",
        osd.id,
        ctx.pg,
        usable.iter().flatten().count(),
        usable.len()
    );
    let object = ctx.scheme.decode(&usable).map_err(|e| {
        tracing::error!(osd = osd.id, %stripe, "decode: {e}");
        Status::Io
    })?;
    assert_eq!(
        object.len(),
        ctx.stripe_bytes as usize,
        "osd.{} pg {} {stripe}: decoded a stripe of the wrong size",
        osd.id,
        ctx.pg
    );
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
    if is_unfound(osd, ctx.pg, h.object) {
        // Its newest write is on OSDs that are down: wait for them (or a give-up).
        return (Status::Unavailable, Bytes::new());
    }
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
        // The pieces are the asked range exactly: one per data chunk it covers.
        assert_eq!(
            pieces.iter().map(|p| p.len()).sum::<usize>(),
            h.length as usize,
            "osd.{} pg {} {}: the fast read's pieces miss the asked range",
            osd.id,
            ctx.pg,
            h.object
        );
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

/// The stripe `stripe` reads as in a layer whose ancestors are `chain` (nearest first): the
/// first layer holding it (the layer itself first), None when none does. The caller holds
/// the stripe lock (which covers every layer of the family).
pub(super) async fn layered_stripe(
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
