//! Partial-stripe writes (docs/design.md, "Partial-stripe writes"): a small WRITE stashes
//! only the blocks it changes — its data blocks, parity over the *parity range* computed
//! from deltas, and a metadata-only *bump* on the untouched data positions — each naming
//! the base version it applies to; the promotes then merge them into the committed chunks.

use super::chunk::{put_partial_stash, read_chunk};
use super::write::{assign_version, join_all};
use super::EcPg;
use crate::daemon::Osd;
use basalt_placement::NO_OSD;
use basalt_proto::{ObjectId, Status, Version, IMAGE_BLOCK_BYTES};
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

const BLOCK: usize = IMAGE_BLOCK_BYTES;
/// Bytes of a partial stash's header: block 0 of the stash object.
pub(super) const HEADER_BYTES: usize = BLOCK;
const MAGIC: u32 = u32::from_le_bytes(*b"BECP");
const FORMAT_VERSION: u16 = 1;
/// Largest parity range a partial write takes, in blocks: the stash's header and its
/// blocks fit one store record (64 blocks), and its merge one record (63).
const MAX_RANGE_BLOCKS: u32 = 63;

/// Block 0 of a partial stash: the version it applies to and where its blocks go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct StashHeader {
    /// The committed version the stash's blocks are merged into (and only into).
    pub base: Version,
    /// First chunk-local block the stash's blocks replace.
    pub first_block: u32,
    /// Blocks following the header (0: a bump, the version only).
    pub blocks: u32,
}

impl StashHeader {
    /// The 4 KiB header block (docs/design.md, "Partial-stripe writes").
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[8..16].copy_from_slice(&self.base.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.base.counter.to_le_bytes());
        b[24..28].copy_from_slice(&self.first_block.to_le_bytes());
        b[28..32].copy_from_slice(&self.blocks.to_le_bytes());
        let crc = crc32c::crc32c(&b[..32]);
        b[32..36].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The header in `block` (at least its first 36 bytes), if intact and of this format.
    pub(super) fn decode(block: &[u8]) -> Option<StashHeader> {
        let u32_at = |o: usize| Some(u32::from_le_bytes(block.get(o..o + 4)?.try_into().ok()?));
        let u64_at = |o: usize| Some(u64::from_le_bytes(block.get(o..o + 8)?.try_into().ok()?));
        if u32_at(0)? != MAGIC || block.get(4..6)? != FORMAT_VERSION.to_le_bytes() {
            return None;
        }
        if crc32c::crc32c(block.get(..32)?) != u32_at(32)? {
            return None;
        }
        let header = StashHeader {
            base: Version::new(u64_at(8)?, u64_at(16)?),
            first_block: u32_at(24)?,
            blocks: u32_at(28)?,
        };
        (header.blocks <= MAX_RANGE_BLOCKS).then_some(header)
    }
}

/// Where a write of stripe bytes `offset..offset + len` lands, in chunk-local blocks.
#[derive(Debug, PartialEq, Eq)]
struct Shape {
    /// Per data chunk, the blocks the write touches (None: untouched, a bump).
    touched: Vec<Option<Range<u32>>>,
    /// The smallest range covering every touched range: the parity that changes.
    parity: Range<u32>,
}

/// The shape of a write, when the partial path is worth taking: its parity range is at
/// most half a chunk and fits a stash record (larger writes are cheaper whole).
fn shape(k: usize, chunk_bytes: u32, offset: u64, len: u64) -> Option<Shape> {
    let per_chunk = chunk_bytes as u64 / BLOCK as u64;
    let (first, end) = (offset / BLOCK as u64, (offset + len).div_ceil(BLOCK as u64));
    if len == 0 || end > per_chunk * k as u64 {
        return None;
    }
    let touched: Vec<Option<Range<u32>>> = (0..k as u64)
        .map(|i| {
            let (lo, hi) = (first.max(i * per_chunk), end.min((i + 1) * per_chunk));
            (lo < hi).then(|| (lo - i * per_chunk) as u32..(hi - i * per_chunk) as u32)
        })
        .collect();
    let (lo, hi) = touched.iter().flatten().fold((u32::MAX, 0), |(lo, hi), r| {
        (lo.min(r.start), hi.max(r.end))
    });
    let blocks = hi.checked_sub(lo)?;
    let parity = lo..hi;
    (blocks as u64 * 2 <= per_chunk && blocks <= MAX_RANGE_BLOCKS)
        .then_some(Shape { touched, parity })
}

/// What [`stash_partial`] did.
pub(super) enum Outcome {
    /// Every position holds its partial stash at this version, durably: promote them.
    Stashed(Version),
    /// Not taken, nothing written: write the stripe whole.
    NotTaken,
    /// Some stashes may be written but not all: write the stripe whole, at a newer version
    /// (the partial stashes left are dropped by a later stash or by peering, never merged:
    /// none names the version the stripe ends at).
    Failed(Status),
    /// Refused before anything was written (the interval ended): answer the client.
    Refused(Status),
}

/// Phase 1 of a partial write of `data` at stripe byte `offset`: read the old blocks, build
/// each position's partial stash, and stash them all durably. The caller holds the stripe
/// lock and falls back to the whole-stripe path unless [`Outcome::Stashed`].
pub(super) async fn stash_partial(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    offset: u32,
    data: &[u8],
) -> Outcome {
    let k = ctx.scheme.k();
    let Some(shape) = shape(k, ctx.chunk_bytes, offset as u64, data.len() as u64) else {
        return Outcome::NotTaken;
    };
    let behind = osd.pgs.with(ctx.pg, |e| e.ec_behind);
    if behind != 0 || ctx.positions.contains(&NO_OSD) {
        return Outcome::NotTaken;
    }
    let Some((base, old)) = read_old(osd, ctx, stripe, &shape).await else {
        return Outcome::NotTaken;
    };
    let Some(blocks) = new_blocks(ctx, &shape, offset, data, &old) else {
        return Outcome::NotTaken;
    };
    let version = match assign_version(osd, ctx, Some(base)) {
        Ok(v) => v,
        Err(s) => return Outcome::Refused(s),
    };
    let stashes = ctx.live().map(|(pos, peer)| {
        let (first_block, bytes) = &blocks[pos];
        let header = StashHeader {
            base,
            first_block: *first_block,
            blocks: (bytes.len() / BLOCK) as u32,
        };
        let mut payload = header.encode();
        payload.extend_from_slice(bytes);
        let payload = Bytes::from(payload);
        async move { put_partial_stash(osd, ctx, peer, stripe, pos, version, base, payload).await }
    });
    for result in join_all(stashes).await {
        if let Err(s) = result {
            return Outcome::Failed(s);
        }
    }
    Outcome::Stashed(version)
}

/// The old blocks a partial write needs, all at one version (None: some position did not
/// answer one, or the stripe does not exist — the whole-stripe path decodes and repairs):
/// per position, the touched blocks of a data chunk, the parity range of a parity chunk.
async fn read_old(
    osd: &Arc<Osd>,
    ctx: &EcPg,
    stripe: ObjectId,
    shape: &Shape,
) -> Option<(Version, Vec<Option<Bytes>>)> {
    let k = ctx.scheme.k();
    let range = |pos: usize| match pos < k {
        true => shape.touched[pos].clone(),
        false => Some(shape.parity.clone()),
    };
    let reads = join_all(ctx.live().map(|(pos, peer)| {
        let r = range(pos);
        async move {
            let r = r?;
            let (at, len) = (r.start * BLOCK as u32, (r.end - r.start) * BLOCK as u32);
            Some(read_chunk(osd, ctx, peer, stripe.chunk(pos, false), at, len).await)
        }
    }))
    .await;
    let mut base = None;
    let mut old = Vec::with_capacity(reads.len());
    for read in reads {
        match read {
            None => old.push(None),
            Some(Ok((Some(v), bytes))) if base.is_none_or(|b| b == v) => {
                base = Some(v);
                old.push(Some(bytes));
            }
            Some(_) => return None,
        }
    }
    Some((base?, old))
}

/// Each position's stash blocks (first chunk-local block, bytes): the touched data
/// positions' new blocks, the parity positions' old parity ⊕ the parity delta over the
/// parity range, nothing (a bump) for the untouched data positions.
fn new_blocks(
    ctx: &EcPg,
    shape: &Shape,
    offset: u32,
    data: &[u8],
    old: &[Option<Bytes>],
) -> Option<Vec<(u32, Vec<u8>)>> {
    let k = ctx.scheme.k();
    let chunk = ctx.chunk_bytes as usize;
    let parity_len = (shape.parity.end - shape.parity.start) as usize * BLOCK;
    let mut out = vec![(0u32, Vec::new()); ctx.positions.len()];
    let mut deltas: Vec<Option<Vec<u8>>> = vec![None; k];
    for (i, r) in shape.touched.iter().enumerate() {
        let Some(r) = r else { continue };
        let before = old[i].as_ref()?;
        let mut after = before.to_vec();
        // The client's bytes over this chunk's touched blocks.
        let at = i * chunk + r.start as usize * BLOCK;
        let (lo, hi) = (
            (offset as usize).max(at),
            (offset as usize + data.len()).min(at + after.len()),
        );
        after[lo - at..hi - at].copy_from_slice(&data[lo - offset as usize..hi - offset as usize]);
        let mut delta = vec![0u8; parity_len];
        let d = (r.start - shape.parity.start) as usize * BLOCK;
        delta[d..d + after.len()].copy_from_slice(&after);
        basalt_ec::xor_into(&mut delta[d..d + after.len()], before);
        deltas[i] = Some(delta);
        out[i] = (r.start, after);
    }
    let refs: Vec<Option<&[u8]>> = deltas.iter().map(|d| d.as_deref()).collect();
    let parity = match ctx.scheme.parity_delta(&refs) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(pg = %ctx.pg, "parity delta: {e}");
            return None;
        }
    };
    for (j, delta) in parity.into_iter().enumerate() {
        let mut p = old[k + j].as_ref()?.to_vec();
        basalt_ec::xor_into(&mut p, &delta);
        out[k + j] = (shape.parity.start, p);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a header survives its encoding, and a damaged or foreign one is refused.
    #[test]
    fn stash_headers_round_trip_and_damage_is_refused() {
        let h = StashHeader {
            base: Version::new(7, 42),
            first_block: 3,
            blocks: 2,
        };
        let b = h.encode();
        assert_eq!(b.len(), HEADER_BYTES);
        assert_eq!(StashHeader::decode(&b), Some(h));
        for at in [0, 5, 9, 25, 30, 33] {
            let mut bad = b.clone();
            bad[at] ^= 1;
            assert_eq!(StashHeader::decode(&bad), None, "flip at byte {at}");
        }
        assert_eq!(StashHeader::decode(&b[..20]), None);
    }

    /// Goal: small writes take the partial path with the right per-chunk blocks and parity
    /// range; writes whose parity range passes half a chunk go whole.
    #[test]
    fn the_partial_path_is_taken_for_small_writes_only() {
        let c = 128 << 10; // 32 blocks per chunk
        let s = shape(2, c, 4096 * 3 + 100, 10).expect("one block");
        assert_eq!(s.touched, vec![Some(3..4), None]);
        assert_eq!(s.parity, 3..4);
        // Across a chunk boundary the parity range is the whole chunk: whole.
        assert!(shape(2, c, c as u64 - 4096, 8192).is_none());
        // 64 KiB aligned inside one chunk: half a chunk, still partial; more is whole.
        assert!(shape(2, c, 0, 64 << 10).is_some());
        assert!(shape(2, c, 0, (64 << 10) + 1).is_none());
        assert!(shape(2, c, 0, 2 * c as u64).is_none());
        assert!(shape(4, c, 2 * c as u64 + 8192, 4096).is_some_and(|s| s.touched[2] == Some(2..3)));
    }
}
