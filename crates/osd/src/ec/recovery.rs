//! Background rebuild of the positions peering found behind, and the removal of chunks
//! left at positions their OSDs no longer hold.

use super::chunk::put_chunk;
use super::peering::list_at;
use super::read::decode_and_repair;
use super::EcPg;
use crate::daemon::Osd;
use crate::error::PgError;
use crate::handler::flush;
use crate::recovery::{call_peer, PushKind};
use basalt_meta::schema::CompleteCopy;
use basalt_placement::{ClusterMap, NO_OSD};
use basalt_proto::{Header, ObjectId, Opcode, OsdId, PgId, Status};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// Pause before retrying a failed EC recovery round.
const EC_RECOVERY_RETRY_MS: u64 = 1_000;

/// How a recovery round ended.
enum Round {
    /// Every position rebuilt and recorded.
    Done,
    /// Something is left: run again.
    Again,
    /// Everything is rebuilt but `n` unfound stripes, which wait for their OSDs (a new
    /// peering) or a give-up: nothing to do while the PG's unfound set stays this size.
    Unfound(usize),
}

/// Rebuild, in the background, every stripe of the PG whose chunk at a position in
/// `behind` is missing or stale: list the PG on the primary's position (its committed
/// chunks name every stripe), and decode-and-repair each stripe under its lock. Clears the
/// behind positions and records the PG clean when done (never while stripes are unfound);
/// runs while the interval lasts.
pub(crate) async fn recover(osd: Arc<Osd>, pg: PgId, generation: u64) {
    let _recovering = osd.counters.recovering();
    // Bound: rounds go on while the interval lasts; each failed one waits EC_RECOVERY_RETRY_MS.
    while crate::recovery::still_active(&osd, pg, generation) && !osd.stopping() {
        match recover_round(&osd, pg, generation).await {
            Ok(Round::Done) => return,
            Ok(Round::Again) => {}
            Ok(Round::Unfound(n)) => {
                tracing::info!(osd = osd.id, %pg, unfound = n, "EC recovery: every stripe rebuilt but the unfound ones, which wait");
                // Bound: the interval, polled every EC_RECOVERY_RETRY_MS (in memory only).
                while crate::recovery::still_active(&osd, pg, generation)
                    && !osd.stopping()
                    && osd.pgs.with(pg, |e| e.ec_unfound.len()) == n
                {
                    tokio::time::sleep(Duration::from_millis(EC_RECOVERY_RETRY_MS)).await;
                }
            }
            Err(e) => tracing::debug!(osd = osd.id, %pg, "EC recovery: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(EC_RECOVERY_RETRY_MS)).await;
    }
}

async fn recover_round(osd: &Arc<Osd>, pg: PgId, generation: u64) -> Result<Round, PgError> {
    let map = osd.map();
    let Ok(Some(ctx)) = EcPg::of(osd, &map, pg) else {
        return Ok(Round::Again);
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
    // Every listing is filtered to the PG: a stripe of another PG rebuilt here would have
    // its chunks written at this PG's positions.
    if let Some(pool) = map.pools.get(&pg.pool) {
        for &stripe in &stripes {
            assert_eq!(
                ClusterMap::pg_of(pool, stripe),
                pg,
                "osd.{}: EC recovery of pg {pg} listed {stripe} of another PG",
                osd.id
            );
        }
    }
    // Stripes some live position still lacks after this round: while any is left, the
    // behind positions stay behind (reads keep decoding) and the round is tried again.
    let mut unsettled = 0usize;
    let mut unfound = 0usize;
    for (done, stripe) in stripes.into_iter().enumerate() {
        if !crate::recovery::still_active(osd, pg, generation) {
            return Ok(Round::Again);
        }
        let _lock = osd.stripes.lock(stripe).await;
        if super::unfound::is_unfound(osd, pg, stripe) {
            unfound += 1;
            continue;
        }
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
        return Ok(Round::Again);
    }
    if unfound > 0 {
        // Their positions stay behind and the earlier holders recorded as sources; the
        // wait lasts while the PG's set keeps its size (it only shrinks within an interval).
        return Ok(Round::Unfound(osd.pgs.with(pg, |e| e.ec_unfound.len())));
    }
    // Everything written to the rebuilt positions must be durable before they count as
    // complete.
    for (_, peer) in ctx.live() {
        if peer == osd.id {
            if flush(osd).await != Status::Ok {
                return Ok(Round::Again);
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
    Ok(if cleared { Round::Done } else { Round::Again })
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
