//! Partial blocks read ahead of a write, so that no writer reads the device under a lock.
//!
//! A write or trim that covers part of a 4 KiB block must merge the block's old contents
//! (the WAL and the slots hold whole blocks). Reading them while holding the object's stripe,
//! as [`Store::write`] does, blocks the calling thread on the device; an OSD calls it under
//! its PG lock on a runtime thread. So the caller reads the edge blocks first, awaited and
//! with no lock held ([`Store::prefetch_edges`]), and passes them to
//! [`Store::write_prefetched`] / [`Store::trim_prefetched`].
//!
//! Every writer of a stripe bumps its generation when it lets the stripe go. A prefetch
//! notes the generation before it reads; the write uses the blocks only if the generation is
//! unchanged once it holds the stripe — no writer of any object of that stripe ran since
//! the read began, so the blocks are the current contents. Otherwise (a racing writer, rare)
//! it reads them again under the stripe, as without a prefetch.

use crate::error::StoreError;
use crate::index::{Block, BLOCK};
use crate::store::Store;
use basalt_proto::ObjectId;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// One writer stripe: its lock and how many times a writer has let it go.
pub(crate) struct Stripe {
    lock: Mutex<()>,
    generation: AtomicU64,
}

impl Stripe {
    pub fn new() -> Stripe {
        Stripe {
            lock: Mutex::new(()),
            generation: AtomicU64::new(0),
        }
    }

    /// Hold the stripe; the generation moves on when the guard is dropped.
    pub fn lock(&self) -> StripeGuard<'_> {
        StripeGuard {
            _guard: crate::store::lock(&self.lock),
            stripe: self,
        }
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The generation once no writer holds the stripe (taken and let go without moving it).
    fn generation_when_idle(&self) -> u64 {
        let _idle = crate::store::lock(&self.lock);
        self.generation()
    }
}

/// A held stripe (see [`Stripe::lock`]).
pub(crate) struct StripeGuard<'a> {
    _guard: MutexGuard<'a, ()>,
    stripe: &'a Stripe,
}

impl StripeGuard<'_> {
    /// The stripe's generation, as of this holder (no writer can move it meanwhile).
    pub fn generation(&self) -> u64 {
        self.stripe.generation.load(Ordering::Acquire)
    }
}

impl Drop for StripeGuard<'_> {
    fn drop(&mut self) {
        // Before the lock is released (the guard's fields drop after this body).
        self.stripe.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The partial blocks of one write or trim range, read ahead (see the module's doc). Empty
/// when the range has none, or the store reads inline anyway. After
/// [`Store::write_prefetched`], the partial blocks as that write left them.
#[derive(Default)]
pub struct EdgeBlocks {
    obj: Option<ObjectId>,
    generation: u64,
    blocks: Vec<(usize, Box<Block>)>,
    /// `blocks` are the written ones (never taken for a prefetch again).
    merged: bool,
}

impl EdgeBlocks {
    /// No prefetch: partial blocks are read under the stripe.
    pub const NONE: EdgeBlocks = EdgeBlocks {
        obj: None,
        generation: 0,
        blocks: Vec::new(),
        merged: false,
    };

    /// The prefetched contents of block `b` of `obj`, if still current for a writer whose
    /// stripe is at `generation`.
    pub(crate) fn block(&self, obj: ObjectId, generation: u64, b: usize) -> Option<&Block> {
        if self.merged || self.obj != Some(obj) || self.generation != generation {
            return None;
        }
        self.blocks
            .iter()
            .find(|(at, _)| *at == b)
            .map(|(_, block)| block.deref())
    }

    /// Keep the partial blocks of a write as it wrote them.
    pub(crate) fn set_merged(&mut self, merged: [Option<(usize, Box<Block>)>; 2]) {
        self.blocks = merged.into_iter().flatten().collect();
        self.merged = true;
    }

    /// The write of `data` at `offset` that [`Store::write_prefetched`] just made, widened to
    /// whole blocks with its partial blocks as written: (offset, bytes). Another copy of the
    /// object at the same version that takes it ends up identical, without reading anything
    /// (a primary forwards it to its replicas). None when the write had no partial block or
    /// this is not the write's result.
    pub fn aligned_write(&self, offset: u32, data: &[u8]) -> Option<(u32, Vec<u8>)> {
        let partial: Vec<usize> = partial_blocks(offset as usize, data.len()).collect();
        if !self.merged || partial.is_empty() || partial.len() != self.blocks.len() {
            return None;
        }
        let (start, end) = (offset as usize, offset as usize + data.len());
        let first = start / BLOCK;
        let mut out = vec![0u8; end.next_multiple_of(BLOCK) - first * BLOCK];
        out[start - first * BLOCK..end - first * BLOCK].copy_from_slice(data);
        for &b in &partial {
            let (_, block) = self.blocks.iter().find(|(at, _)| *at == b)?;
            let at = (b - first) * BLOCK;
            out[at..at + BLOCK].copy_from_slice(&block[..]);
        }
        Some(((first * BLOCK) as u32, out))
    }

    /// How many blocks were read ahead.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Nothing was read ahead.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }
}

/// The blocks `offset..offset + len` covers only in part (at most two).
fn partial_blocks(offset: usize, len: usize) -> impl Iterator<Item = usize> {
    let end = offset + len;
    let (first, last) = (offset / BLOCK, (end.max(1) - 1) / BLOCK);
    let head = (len > 0
        && (!offset.is_multiple_of(BLOCK) || (first == last && !end.is_multiple_of(BLOCK))))
    .then_some(first);
    let tail = (len > 0 && last != first && !end.is_multiple_of(BLOCK)).then_some(last);
    head.into_iter().chain(tail)
}

/// Taken before reading an object ahead; [`Store::unchanged_since`] then tells whether any
/// writer of the object's stripe finished since — if none did, what was read is the
/// object's current contents, not a mix of two writes (a write of many blocks is several
/// records, and readers do not wait for writers).
#[derive(Clone, Copy, Debug)]
pub struct WriteToken {
    stripe: usize,
    generation: u64,
}

impl Store {
    /// See [`WriteToken`].
    pub fn write_token(&self, obj: ObjectId) -> WriteToken {
        let stripe = self.stripe_index(obj);
        WriteToken {
            stripe,
            generation: self.stripes[stripe].generation(),
        }
    }

    /// Has no writer of `obj`'s stripe finished since `token` was taken, and none is
    /// writing now? Waits for a writer in progress (CPU work under the stripe, normally).
    pub fn unchanged_since(&self, obj: ObjectId, token: WriteToken) -> bool {
        let stripe = self.stripe_index(obj);
        stripe == token.stripe && self.stripes[stripe].generation_when_idle() == token.generation
    }

    /// Read the partial blocks of a write or trim of `offset..offset + len` of `obj`, awaited
    /// with no lock held, for [`Store::write_prefetched`] or [`Store::trim_prefetched`].
    /// A range the store refuses yields no blocks (the write reports the error).
    pub async fn prefetch_edges(
        &self,
        obj: ObjectId,
        offset: u32,
        len: u32,
    ) -> Result<EdgeBlocks, StoreError> {
        if !self.file.awaits() || self.check_range(offset, len as u64).is_err() {
            return Ok(EdgeBlocks::NONE);
        }
        let generation = self.write_token(obj).generation;
        let mut blocks = Vec::new();
        for b in partial_blocks(offset as usize, len as usize) {
            let mut block = Box::new([0u8; BLOCK]);
            self.read_async(obj, (b * BLOCK) as u32, &mut block[..])
                .await?;
            blocks.push((b, block));
        }
        Ok(EdgeBlocks {
            obj: Some(obj),
            generation,
            blocks,
            merged: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::partial_blocks;

    #[test]
    fn partial_blocks_are_the_edges_a_range_covers_in_part() {
        let blocks = |offset, len| partial_blocks(offset, len).collect::<Vec<_>>();
        assert_eq!(blocks(0, 4096), Vec::<usize>::new());
        assert_eq!(blocks(0, 8192), Vec::<usize>::new());
        assert_eq!(blocks(0, 0), Vec::<usize>::new());
        assert_eq!(blocks(512, 512), vec![0]);
        assert_eq!(blocks(0, 512), vec![0]);
        assert_eq!(blocks(3584, 1024), vec![0, 1]);
        assert_eq!(blocks(4096, 4608), vec![2]);
        assert_eq!(blocks(512, 4096 * 3 - 512), Vec::<usize>::from([0]));
        assert_eq!(blocks(4096 + 1, 4096 * 2), vec![1, 3]);
    }
}
