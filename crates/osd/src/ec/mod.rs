//! Erasure-coded PGs (docs/design.md, "Erasure-coded pools"): the primary's write and read
//! paths, a member's promote, and peering and recovery of stripes.
//!
//! A stripe is one volume object of `object_size` bytes, cut into k data chunks of
//! `object_size / k` bytes plus m parity chunks; chunk i lives at position i of the PG, in
//! the store key `stripe.chunk(i, false)`. Every write of a stripe ends with all its chunks
//! at one version, in two phases: each live position stashes durably — its whole chunk
//! (`stripe.chunk(i, true)`), or for a small write only the blocks that change over the
//! chunk's base version (`stripe.partial_stash(i)`, [`partial`]) — then each promotes the
//! stash into the committed key (one store record). A stripe's writes, reads and repairs at the primary
//! hold the stripe's lock, so readers never see a stripe half promoted. After a crash,
//! peering settles every stripe with a stash with [`basalt_ec::decide::decide`].
//!
//! By phase (as Vitastor splits its OSD): [`write`] (client writes, the two phases),
//! [`read`] (client reads, decode and repair), [`peering`] (settling cut writes),
//! [`recovery`] (rebuilding positions behind), [`scrub`] (one stripe's parity), [`partial`]
//! (small writes: partial stashes and bumps), [`unfound`] (stripes whose newest write is
//! on down OSDs: their I/O waits, and an operator may give them up); beneath
//! them [`chunk`] (one chunk at one position) and [`lock`] (per-stripe locks).

mod chunk;
mod lock;
mod partial;
mod peering;
mod read;
mod recovery;
mod scrub;
mod unfound;
mod write;

use crate::daemon::Osd;
use crate::handler::primary_gate;
use basalt_ec::Scheme;
use basalt_placement::{ClusterMap, NO_OSD};
use basalt_proto::{Header, OsdId, PgId, Status, Version};
use bytes::Bytes;

pub(crate) use chunk::{member_merge, member_promote, member_stash};
pub(crate) use lock::StripeLocks;
pub(crate) use peering::peer;
pub(crate) use read::{client_allocation, client_read};
pub(crate) use recovery::recover;
pub(crate) use scrub::scrub_stripe;
pub(crate) use unfound::mark_unfound_lost;
pub(crate) use write::{client_copy_up, client_mutation};

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
        if positions.len() != scheme.width() {
            // The placement pads every EC PG to its code's width (holes: NO_OSD); chunk i
            // must be position i, or chunks would be read and written at the wrong OSDs.
            tracing::error!(
                osd = osd.id, %pg,
                "the map places {} positions for a {}-wide code", positions.len(), scheme.width()
            );
            return Err(Status::Invalid);
        }
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
