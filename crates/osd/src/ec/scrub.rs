//! Scrubbing one stripe: parity recomputed and the one disagreeing chunk located.

use super::chunk::{put_chunk, read_chunk};
use super::read::decode_stripe;
use super::EcPg;
use crate::daemon::Osd;
use basalt_proto::{ObjectId, Status, Version};
use bytes::Bytes;
use std::sync::Arc;

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
    if super::unfound::is_unfound(osd, ctx.pg, stripe) {
        // Its newest write is on down OSDs: nothing to compare or repair until it is found
        // or given up.
        return Ok(StripeScrub::Unrepaired);
    }
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
