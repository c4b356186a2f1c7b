//! Scrub: the primary of a PG reads every copy of a batch of its objects and repairs what
//! disagrees (docs/design.md, "Scrub").
//!
//! Replicated PGs: every replica's whole object (version and image) is compared with the
//! primary's; a replica whose copy fails its checksums or differs at the same version is
//! sent the primary's copy, and a primary whose own copy is damaged takes a replica's.
//! Copies at another version are being written right now and are left alone. Erasure-coded
//! PGs: every position's chunk of each stripe is read (under the stripe lock); missing,
//! stale or damaged chunks are rebuilt by decoding the stripe, and when all chunks read
//! cleanly the parity is recomputed from the data chunks and compared: a chunk that
//! disagrees is found by decoding without each chunk in turn (it needs m ≥ 2 to be told
//! apart; with m = 1 a mismatch is reported, not guessed at).

use crate::daemon::Osd;
use crate::ec::EcPg;
use crate::handler::{local_list, REPLICA_TIMEOUT};
use crate::recovery::{apply_image, push_object, PushKind};
use basalt_placement::NO_OSD;
use basalt_proto::{
    Flags, Header, ObjectId, ObjectImage, Opcode, PgId, Status, Version, SCRUB_BATCH_OBJECTS,
};
use bytes::{BufMut, Bytes, BytesMut};
use std::sync::Arc;

/// What one scrub request found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrubBatch {
    /// Objects (stripes) checked.
    pub checked: u64,
    /// Objects with a copy or chunk that was missing, damaged or different.
    pub inconsistent: u64,
    /// Of those, repaired.
    pub repaired: u64,
    /// Where to continue (None: the PG is done).
    pub next: Option<ObjectId>,
}

impl ScrubBatch {
    /// Reply payload: checked, inconsistent, repaired, done (0/1), next inode, next index;
    /// little-endian u64 each.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(48);
        let next = self.next.unwrap_or(ObjectId::new(0, 0));
        for v in [
            self.checked,
            self.inconsistent,
            self.repaired,
            u64::from(self.next.is_none()),
            next.inode,
            next.index,
        ] {
            out.put_u64_le(v);
        }
        out.freeze()
    }
}

/// SCRUB of a batch of `h.pg`'s objects from `h.object` on (this OSD is its active primary).
pub(crate) async fn scrub(osd: &Arc<Osd>, h: Header) -> (Status, Bytes) {
    let interval = match crate::handler::primary_gate(osd, &h) {
        Ok(i) => i,
        Err(s) => return (s, Bytes::new()),
    };
    let map = osd.map();
    let result = match EcPg::of(osd, &map, h.pg) {
        Ok(Some(ctx)) if ctx.interval == interval => scrub_ec(osd, &ctx, h.object).await,
        Ok(Some(_)) => Err(Status::Unavailable),
        Ok(None) => scrub_replicated(osd, h.pg, interval, h.object).await,
        Err(s) => Err(s),
    };
    match result {
        Ok(batch) => (Status::Ok, batch.encode()),
        Err(s) => (s, Bytes::new()),
    }
}

/// The next batch of the primary's objects of `pg` from `from`, and the cursor after it.
fn batch(
    osd: &Osd,
    pg: PgId,
    from: ObjectId,
    keep: impl Fn(ObjectId) -> Option<ObjectId>,
) -> (Vec<ObjectId>, Option<ObjectId>) {
    let map = osd.map();
    let mut objects: Vec<ObjectId> = local_list(osd, &map, pg, from, usize::MAX)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(o, _)| keep(o))
        .collect();
    objects.dedup();
    let next = objects.get(SCRUB_BATCH_OBJECTS).copied();
    objects.truncate(SCRUB_BATCH_OBJECTS);
    (objects, next)
}

async fn scrub_replicated(
    osd: &Arc<Osd>,
    pg: PgId,
    interval: u32,
    from: ObjectId,
) -> Result<ScrubBatch, Status> {
    let (objects, next) = batch(osd, pg, from, Some);
    let map = osd.map();
    let acting = map.acting(pg).map_err(|_| Status::Invalid)?.to_vec();
    let mut conns = Vec::new();
    for &peer in acting.iter().filter(|&&p| p != osd.id) {
        let addr = map.osd(peer).map_err(|_| Status::Unavailable)?.addr.clone();
        let conn = osd
            .peers
            .get(peer, &addr)
            .await
            .map_err(|_| Status::Unavailable)?;
        conns.push((peer, conn));
    }
    let mut out = ScrubBatch {
        next,
        ..ScrubBatch::default()
    };
    for obj in objects {
        out.checked += 1;
        let mut verdicts = compare_replicas(osd, pg, interval, obj, &conns).await?;
        if verdicts.needs_look() {
            // A copy at another version may be a write in flight: look once more.
            tokio::time::sleep(std::time::Duration::from_millis(RECHECK_MS)).await;
            verdicts = compare_replicas(osd, pg, interval, obj, &conns).await?;
        }
        if !verdicts.damaged_here && verdicts.bad.is_empty() {
            continue;
        }
        out.inconsistent += 1;
        let mut fixed = true;
        if verdicts.damaged_here {
            tracing::warn!(osd = osd.id, %pg, %obj, "scrub: the primary's copy is damaged");
            fixed = match &verdicts.good {
                Some((v, image)) => {
                    let _lock = osd.pgs.shard(pg).lock().expect("pg shard lock");
                    apply_image(osd, obj, *v, image).is_ok()
                }
                None => false,
            };
        }
        for i in verdicts.bad {
            let (peer, conn) = &conns[i];
            tracing::warn!(osd = osd.id, %pg, %obj, peer, "scrub: repairing the replica's copy");
            if !fixed
                || push_object(osd, pg, interval, obj, conn, false, PushKind::Repair).await
                    != Status::Ok
            {
                fixed = false;
            }
        }
        if fixed {
            out.repaired += 1;
        }
    }
    Ok(out)
}

/// Pause before looking again at a copy at another version than the primary's.
const RECHECK_MS: u64 = 200;

/// How the copies of one object compare with the primary's.
#[derive(Default)]
struct Verdicts {
    /// The primary's own copy fails its checksums.
    damaged_here: bool,
    /// Replicas (indexes into the connections) whose copy is damaged, missing, stale or
    /// different.
    bad: Vec<usize>,
    /// Replicas at another version than the primary (maybe a write in flight).
    other_version: usize,
    /// The newest good replica copy (to repair a damaged primary).
    good: Option<(Version, ObjectImage)>,
}

impl Verdicts {
    fn needs_look(&self) -> bool {
        self.other_version > 0
    }
}

async fn compare_replicas(
    osd: &Arc<Osd>,
    pg: PgId,
    interval: u32,
    obj: ObjectId,
    conns: &[(u32, Arc<basalt_client::Connection>)],
) -> Result<Verdicts, Status> {
    let mine = crate::recovery::read_image_async(osd, obj).await;
    let mut v = Verdicts {
        damaged_here: mine.is_err(),
        ..Verdicts::default()
    };
    for (i, (peer, conn)) in conns.iter().enumerate() {
        let mut h = Header::request(Opcode::Pull, 0, obj);
        h.pg = pg;
        h.map_epoch = interval;
        h.flags = Flags(Flags::REPLICA);
        let reply = match tokio::time::timeout(REPLICA_TIMEOUT, conn.start(h, Bytes::new())).await {
            Ok(Ok(r)) => r,
            _ => return Err(Status::Unavailable),
        };
        let theirs = match reply.header.status {
            Status::Ok if reply.payload.is_empty() => None,
            Status::Ok => match ObjectImage::decode(&reply.payload) {
                Ok(image) => Some((reply.header.version, image)),
                Err(_) => {
                    v.bad.push(i);
                    continue;
                }
            },
            Status::Io => {
                tracing::warn!(osd = osd.id, %pg, %obj, peer, "scrub: the replica's copy is damaged");
                v.bad.push(i);
                continue;
            }
            s => return Err(s),
        };
        match (&mine, theirs) {
            (Ok(Some((mv, image))), Some((tv, t))) if tv == *mv => {
                if t != *image {
                    v.bad.push(i);
                }
            }
            (Ok(None), None) => {}
            (Ok(_), _) => {
                v.other_version += 1;
                v.bad.push(i);
            }
            (Err(_), Some((tv, t))) => {
                if v.good.as_ref().is_none_or(|(gv, _)| tv > *gv) {
                    v.good = Some((tv, t));
                }
            }
            (Err(_), None) => {}
        }
    }
    Ok(v)
}

async fn scrub_ec(osd: &Arc<Osd>, ctx: &EcPg, from: ObjectId) -> Result<ScrubBatch, Status> {
    let me = ctx
        .positions
        .iter()
        .position(|&p| p == osd.id)
        .ok_or(Status::NotPrimary)?;
    // The primary's position holds a chunk of every stripe of a clean PG.
    let (stripes, next) = batch(osd, ctx.pg, from, |o| match o.chunk_position() {
        Some((p, false)) if p == me => Some(o.stripe()),
        _ => None,
    });
    let mut out = ScrubBatch {
        next: next.map(|s| s.chunk(me, false)),
        ..ScrubBatch::default()
    };
    for stripe in stripes {
        out.checked += 1;
        match crate::ec::scrub_stripe(osd, ctx, stripe).await? {
            StripeScrub::Clean => {}
            StripeScrub::Repaired => {
                out.inconsistent += 1;
                out.repaired += 1;
            }
            StripeScrub::Unrepaired => out.inconsistent += 1,
        }
    }
    Ok(out)
}

/// The outcome of scrubbing one stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StripeScrub {
    Clean,
    Repaired,
    Unrepaired,
}

/// Is `pos` a hole of the PG (nothing to read there)?
pub(crate) fn is_hole(ctx: &EcPg, pos: usize) -> bool {
    ctx.positions[pos] == NO_OSD
}
