//! Unfound stripes at the primary (docs/design.md, "Unfound stripes"): peering notes them
//! in the PG's entry, their I/O answers Unavailable until they are found again (a new
//! peering) or given up, and MARK_UNFOUND_LOST gives them up: each is rewritten at a new
//! version with the newest contents that still decode ([`basalt_ec::unfound::give_up`]).

use super::read::{chunks_at, committed_versions, layered_stripe, read_all_chunks};
use super::write::{promote_stripe, stash_stripe};
use super::{ChunkRead, EcPg};
use crate::daemon::Osd;
use crate::handler::primary_gate;
use basalt_ec::decide::{decide, PositionState};
use basalt_proto::unfound::{GiveUpReply, GivenUp, Outcome, GIVE_UP_BATCH_STRIPES};
use basalt_proto::{Header, ObjectId, PgId, Status, Version};
use bytes::Bytes;
use std::sync::Arc;

/// Is `stripe` one of `pg`'s unfound stripes (its I/O waits)?
pub(super) fn is_unfound(osd: &Osd, pg: PgId, stripe: ObjectId) -> bool {
    osd.pgs.with(pg, |e| e.ec_unfound.contains(&stripe))
}

/// MARK_UNFOUND_LOST of PG `h.pg` (this OSD its active primary): give up a batch of its
/// unfound stripes and say what became of each. Invalid when it has none (or is not
/// erasure coded); a retryable status when none could be given up because the PG is
/// changing.
pub(crate) async fn mark_unfound_lost(osd: &Arc<Osd>, h: Header) -> (Status, Bytes) {
    let interval = match primary_gate(osd, &h) {
        Ok(i) => i,
        Err(s) => return (s, Bytes::new()),
    };
    let map = osd.map();
    let ctx = match EcPg::of(osd, &map, h.pg) {
        Ok(Some(ctx)) if ctx.interval == interval => ctx,
        Ok(Some(_)) => return (Status::Unavailable, Bytes::new()),
        Ok(None) | Err(_) => return (Status::Invalid, Bytes::new()),
    };
    let batch: Vec<ObjectId> = osd.pgs.with(ctx.pg, |e| {
        e.ec_unfound
            .iter()
            .take(GIVE_UP_BATCH_STRIPES)
            .copied()
            .collect()
    });
    if batch.is_empty() {
        return (Status::Invalid, Bytes::new());
    }
    let mut reply = GiveUpReply::default();
    let mut failed = None;
    for stripe in batch {
        match give_up_stripe(osd, &ctx, stripe).await {
            Ok(Some(given)) => {
                tracing::warn!(
                    osd = osd.id, pg = %ctx.pg, %stripe, lost = %given.lost,
                    kept = ?given.kept, outcome = ?given.outcome,
                    "unfound stripe given up by the operator"
                );
                reply.stripes.push(given);
            }
            Ok(None) => {}
            Err(status) => {
                tracing::warn!(osd = osd.id, pg = %ctx.pg, %stripe, ?status, "giving up an unfound stripe failed; it stays unfound");
                failed = Some(status);
            }
        }
    }
    let left = osd.pgs.with(ctx.pg, |e| e.ec_unfound.len());
    if reply.stripes.is_empty() {
        if let Some(status) = failed.filter(|s| s.is_retryable()) {
            return (status, Bytes::new());
        }
    }
    reply.still_unfound = u32::try_from(left).unwrap_or(u32::MAX);
    let result = crate::recovery::update_record(osd, ctx.pg, interval, |rec| {
        rec.unfound_objects = left as u64;
        if left == 0 {
            rec.unfound_waiting.clear();
        }
    })
    .await;
    if let Err(e) = result {
        // The stripes are given up all the same; the next peering records the count.
        tracing::warn!(osd = osd.id, pg = %ctx.pg, "recording the unfound count: {e}");
    }
    (Status::Ok, reply.encode())
}

/// Give up one unfound stripe under its lock: read every position's committed chunk,
/// decide what is kept, and rewrite the stripe at a new version. None: it is no longer in
/// the set (given up meanwhile, or the interval changed).
async fn give_up_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
) -> Result<Option<GivenUp>, Status> {
    let chain = osd
        .layers
        .chain(osd.meta.as_ref(), stripe.inode)
        .await
        .map_err(|_| Status::Unavailable)?;
    if (ctx.live().count() as u32) < ctx.min_size {
        return Err(Status::Unavailable);
    }
    let _lock = osd.stripes.lock(stripe).await;
    if !is_unfound(osd, ctx.pg, stripe) {
        return Ok(None);
    }
    let chunks: Vec<Option<ChunkRead>> = read_all_chunks(osd, ctx, stripe)
        .await
        .into_iter()
        .map(|(_, best)| best)
        .collect();
    if chunks
        .iter()
        .any(|c| matches!(c, Some(Err(Status::Unavailable))))
    {
        // A member did not answer: what it holds is unknown, so is what would be kept.
        return Err(Status::Unavailable);
    }
    let (versions, ranked) = ranked_committed(&chunks);
    let version = |rank: u64| versions[rank as usize - 1];
    let k = ctx.scheme.k();
    let Some(gu) = basalt_ec::unfound::give_up(k, &ranked) else {
        // It decodes now (an earlier holder answered): nothing to lose. Lagging positions
        // are recovery's, as for any stripe.
        let target = decide(k, &ranked).target.map(version);
        forget(osd, ctx.pg, stripe);
        let newest = versions.last().copied().unwrap_or(Version::ZERO);
        return Ok(Some(GivenUp {
            stripe,
            lost: newest,
            kept: target,
            outcome: Outcome::Found,
        }));
    };
    let lost = version(gu.lost);
    let kept = gu.keep.map(version);
    let (object, outcome) = match kept {
        Some(v) => (decode_at(ctx, &chunks, v)?, Outcome::Kept),
        None => match ancestor_stripe(osd, ctx, stripe, &chain).await? {
            Some(object) => (object, Outcome::Ancestor),
            None => (vec![0u8; ctx.stripe_bytes as usize], Outcome::Zeros),
        },
    };
    let new = stash_stripe(osd, ctx, stripe, kept, &object).await?;
    // The rewrite must supersede the lost version wherever its chunks are (versions only
    // grow across intervals, and within this one only this primary assigns them).
    assert!(
        new > lost,
        "osd.{} pg {} {stripe}: giving up {lost} wrote the older {new}",
        osd.id,
        ctx.pg
    );
    promote_stripe(osd, ctx, stripe, new, false).await?;
    forget(osd, ctx.pg, stripe);
    Ok(Some(GivenUp {
        stripe,
        lost,
        kept,
        outcome,
    }))
}

/// `stripe` is no longer unfound in `pg`.
fn forget(osd: &Osd, pg: PgId, stripe: ObjectId) {
    osd.pgs.with(pg, |e| e.ec_unfound.remove(&stripe));
}

/// The committed versions the chunks hold, ascending, and each position's state with
/// versions ranked (index + 1) for the decision; unreadable positions count as holes.
fn ranked_committed(chunks: &[Option<ChunkRead>]) -> (Vec<Version>, Vec<Option<PositionState>>) {
    let versions = committed_versions(chunks);
    let rank = |v: Version| versions.binary_search(&v).expect("listed") as u64 + 1;
    let ranked = chunks
        .iter()
        .map(|c| match c {
            Some(Ok((v, _))) => Some(PositionState {
                committed: v.map(rank),
                stash: None,
                partial: None,
            }),
            _ => None,
        })
        .collect();
    (versions, ranked)
}

/// The stripe decoded from the chunks at `version` (k of them, by the decision).
fn decode_at(
    ctx: &EcPg,
    chunks: &[Option<ChunkRead>],
    version: Version,
) -> Result<Vec<u8>, Status> {
    let usable = chunks_at(chunks, version);
    assert!(
        usable.iter().flatten().count() >= ctx.scheme.k(),
        "pg {}: keeping {version}, held by fewer than k chunks",
        ctx.pg
    );
    ctx.scheme.decode(&usable).map_err(|e| {
        tracing::error!(pg = %ctx.pg, "decode of a kept version: {e}");
        Status::Io
    })
}

/// What `stripe` reads as without its own layer's chunks: the nearest ancestor's stripe
/// (None: no ancestor holds it).
async fn ancestor_stripe(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    chain: &[basalt_proto::InodeId],
) -> Result<Option<Vec<u8>>, Status> {
    let Some((&parent, rest)) = chain.split_first() else {
        return Ok(None);
    };
    let at = ObjectId::new(parent, stripe.index);
    Ok(layered_stripe(osd, ctx, at, rest).await?.map(|(_, o)| o))
}
