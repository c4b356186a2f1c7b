//! Writing stripes: the client WRITE, TRIM, DELETE and COPYUP paths and the two phases of
//! a stripe write (a durable stash on every live position, then the promotes); small
//! writes stash only what they change ([`super::partial`]).

use super::chunk::{promote_chunk, put_chunk, read_chunk};
use super::partial::{stash_partial, Outcome};
use super::read::{decode_stripe, layered_stripe};
use super::unfound::is_unfound;
use super::{client_context, EcPg};
use crate::daemon::Osd;
use crate::pg::PgPhase;
use basalt_placement::NO_OSD;
use basalt_proto::{Header, ObjectId, Opcode, OsdId, Status, Version};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

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
    if is_unfound(osd, ctx.pg, h.object) {
        // Even a whole-stripe write waits: the stripe's lost write must be found or given
        // up first, or the count of unfound stripes would no longer say what is waiting.
        return Status::Unavailable;
    }
    let whole = offset == 0 && len == ctx.stripe_bytes as u64;
    if h.opcode == Opcode::Write && !whole && chain.is_empty() {
        match stash_partial(osd, &ctx, h.object, h.offset, &payload).await {
            Outcome::Stashed(version) => {
                finish_in_background(osd, ctx, h.object, version, true, guard);
                return Status::Ok;
            }
            Outcome::NotTaken => {}
            Outcome::Failed(status) => {
                tracing::debug!(osd = osd.id, stripe = %h.object, ?status, "partial EC write failed; writing the stripe whole");
            }
            Outcome::Refused(status) => return status,
        }
    }
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
    finish_in_background(osd, ctx, h.object, version, false, guard);
    Status::Ok
}

/// A stripe write durable on every live position is acknowledged now; its promotes (of
/// partial stashes when `partial`) finish under the stripe lock, held by `guard` until
/// then, so a reader of this stripe still finds every chunk committed at one version.
fn finish_in_background(
    osd: &Arc<Osd>,
    ctx: EcPg,
    stripe: ObjectId,
    version: Version,
    partial: bool,
    guard: impl Send + 'static,
) {
    let (osd2, pg, interval) = (osd.clone(), ctx.pg, ctx.interval);
    tokio::spawn(async move {
        if let Err(s) = promote_stripe(&osd2, &ctx, stripe, version, partial).await {
            // The stashes are durable: the next interval's peering promotes them.
            tracing::warn!(osd = osd2.id, %stripe, "EC promote after the acknowledgement: {s:?}");
        }
        drop(guard);
    });
    tracing::trace!(target: "basalt::invariant", osd = osd.id, pg = %pg, interval, "acknowledged");
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
    promote_stripe(osd, ctx, stripe, version, false).await
}

/// Phase 1 of a stripe write: assign a version, encode, stash every chunk durably on every
/// live position. Returns the version. The caller holds the stripe lock; `old_version` is
/// the stripe's version before (asserted to grow).
pub(super) async fn stash_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    old_version: Option<Version>,
    object: &[u8],
) -> Result<Version, Status> {
    assert_eq!(
        object.len(),
        ctx.stripe_bytes as usize,
        "osd.{} pg {} {stripe}: a stripe write of the wrong size",
        osd.id,
        ctx.pg
    );
    if ctx.live().count() < ctx.scheme.k() {
        // Fewer than k chunks cannot be decoded: such a write must not be acknowledged.
        return Err(Status::Unavailable);
    }
    let chunks = match ctx.scheme.encode(object) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(osd = osd.id, "encode: {e}");
            return Err(Status::Io);
        }
    };
    let version = assign_version(osd, ctx, old_version)?;
    // Chunk i goes to position i: k + m of each.
    assert_eq!(
        chunks.len(),
        ctx.positions.len(),
        "osd.{} pg {}: {} chunks encoded for {} positions",
        osd.id,
        ctx.pg,
        chunks.len(),
        ctx.positions.len()
    );
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

/// The version of a new write of a stripe at `old_version`, under the PG lock: refused
/// unless this is still the interval's active primary; asserted to grow.
pub(super) fn assign_version(
    osd: &Osd,
    ctx: &EcPg,
    old_version: Option<Version>,
) -> Result<Version, Status> {
    let version = {
        let mut shard = osd.pgs.shard(ctx.pg).lock().expect("pg shard lock");
        let entry = shard.entry(ctx.pg).or_default();
        if entry.interval != ctx.interval || entry.phase != PgPhase::Active {
            return Err(Status::Unavailable);
        }
        // Peering sealed this copy at the interval before activating it: an older
        // interval's primary can no longer stash or promote here.
        assert!(
            entry.sealed >= entry.interval,
            "osd.{} pg {}: writing in interval {} with the copy sealed only at {}",
            osd.id,
            ctx.pg,
            entry.interval,
            entry.sealed
        );
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
pub(super) async fn promote_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    version: Version,
    partial: bool,
) -> Result<(), Status> {
    let mut todo: Vec<(usize, OsdId)> = ctx.live().collect();
    let mut pause = Duration::from_millis(PROMOTE_RETRY_FIRST_MS);
    let mut attempt = 0u32;
    // Bound: runs while this interval lasts; each retry waits at least PROMOTE_RETRY_FIRST_MS.
    loop {
        let promotes = todo.iter().map(|&(pos, peer)| {
            let (osd, ctx) = (osd.clone(), ctx);
            async move { promote_chunk(&osd, ctx, peer, stripe, pos, version, partial).await }
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
    if is_unfound(osd, ctx.pg, h.object) {
        return Status::Unavailable;
    }
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
pub(super) async fn join_all<F: std::future::Future>(
    futs: impl Iterator<Item = F>,
) -> Vec<F::Output> {
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
