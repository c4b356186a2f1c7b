//! The block crc32c values as the index sees them: all in RAM (stores of format version 1),
//! or on disk in crc regions with only recent changes and a bounded cache in RAM (format
//! version 2; docs/design.md, "Block crc32c values on disk").

use crate::crc_pages::CrcGeometry;
use crate::index::FastHash;
use crate::zeroed::ZeroedArray;
use std::collections::HashMap;
use std::sync::Mutex;

/// Bytes of dirty crcs past which a flush checkpoints (4 MiB: 87,000 slots changed by small
/// writes, their crcs inline, or 26,000 whole objects of 32 blocks; a 256 MiB WAL holds
/// 31,000 4 KiB writes between the checkpoints it triggers itself)...
const CRC_DIRTY_BYTES_MIN_BOUND: usize = 4 << 20;
/// ...but at least this many slots' records, so stores of large objects (4 KiB of crcs per
/// 4 MiB slot) do not checkpoint every thousand small writes.
const CRC_DIRTY_SLOTS_MIN_BOUND: usize = 4096;

/// Bytes of clean crc pages cached.
pub(crate) const CRC_CACHE_BYTES: usize = 16 << 20;

/// Where a block's crc is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CrcLookup {
    /// Here it is.
    Known(u32),
    /// In this page of the newest crc region, not in RAM.
    InPage(u32),
}

/// Every slot's block crcs.
pub(crate) enum CrcTable {
    /// `blocks_per_slot` values per slot, 0 for holes.
    InRam {
        blocks: usize,
        crcs: ZeroedArray<u32>,
    },
    /// On disk; see [`PagedCrcs`].
    Paged(Box<PagedCrcs>),
}

impl CrcTable {
    /// The table of a store: in RAM without `geometry`, else paged, its newest region the
    /// one of checkpoint `seq`, `carry` the pages that checkpoint wrote.
    pub fn new(
        slot_count: u32,
        blocks: usize,
        geometry: Option<CrcGeometry>,
        seq: u64,
        carry: Vec<u32>,
    ) -> CrcTable {
        match geometry {
            None => CrcTable::InRam {
                blocks,
                crcs: ZeroedArray::new(slot_count as usize * blocks),
            },
            Some(geometry) => CrcTable::Paged(Box::new(PagedCrcs::new(geometry, seq, carry))),
        }
    }

    /// The crc of block `block` of `slot` (allocated, in a used slot).
    pub fn get(&self, slot: u32, block: usize) -> CrcLookup {
        match self {
            CrcTable::InRam { blocks, crcs } => {
                CrcLookup::Known(crcs[slot as usize * blocks + block])
            }
            CrcTable::Paged(p) => p.get(slot, block),
        }
    }

    /// Set the crc of block `block` of `slot`.
    pub fn set(&mut self, slot: u32, block: usize, crc: u32) {
        match self {
            CrcTable::InRam { blocks, crcs } => crcs[slot as usize * *blocks + block] = crc,
            CrcTable::Paged(p) => p.dirty.set(slot, block, crc, p.interval),
        }
    }

    /// Block `block` of `slot` became a hole.
    pub fn clear(&mut self, slot: u32, block: usize) {
        match self {
            CrcTable::InRam { blocks, crcs } => crcs[slot as usize * *blocks + block] = 0,
            CrcTable::Paged(p) => p.dirty.forget_block(slot, block),
        }
    }

    /// `slot` holds nothing any more.
    pub fn clear_slot(&mut self, slot: u32) {
        match self {
            CrcTable::InRam { blocks, crcs } => {
                let at = slot as usize * *blocks;
                crcs[at..at + *blocks].fill(0);
            }
            CrcTable::Paged(p) => p.dirty.remove(slot),
        }
    }

    /// Every crc of `slot` (in-RAM stores only: what their checkpoints record).
    pub fn slot_crcs(&self, slot: u32) -> Option<&[u32]> {
        match self {
            CrcTable::InRam { blocks, crcs } => {
                let at = slot as usize * blocks;
                Some(&crcs[at..at + blocks])
            }
            CrcTable::Paged(_) => None,
        }
    }

    /// The paged table, if this is one.
    pub fn paged(&self) -> Option<&PagedCrcs> {
        match self {
            CrcTable::InRam { .. } => None,
            CrcTable::Paged(p) => Some(p),
        }
    }

    pub fn paged_mut(&mut self) -> Option<&mut PagedCrcs> {
        match self {
            CrcTable::InRam { .. } => None,
            CrcTable::Paged(p) => Some(p),
        }
    }
}

/// The crcs of a store with crc regions: the changes since the last checkpoint's cut, the
/// pages that checkpoint wrote, and a cache of clean pages. A crc not in `dirty` is, in the
/// cache's copy of its page or else in the newest region, current (docs/design.md).
pub(crate) struct PagedCrcs {
    pub geometry: CrcGeometry,
    pub dirty: DirtyCrcs,
    /// The checkpoint that will write the changes made now (the newest one's seq + 1).
    pub interval: u64,
    /// Seq of the newest durable checkpoint: its region (`seq % 2`) is the one read.
    pub newest_seq: u64,
    /// Pages the newest checkpoint wrote, ascending: the next one copies them over.
    pub carry: Vec<u32>,
    /// Clean pages, behind their own lock so readers holding the table's read lock can
    /// fill it.
    pub cache: Mutex<PageCache>,
}

impl PagedCrcs {
    fn new(geometry: CrcGeometry, seq: u64, carry: Vec<u32>) -> PagedCrcs {
        let frames = (CRC_CACHE_BYTES / geometry.page_bytes as usize).max(1);
        PagedCrcs {
            dirty: DirtyCrcs::new(geometry.blocks_per_slot as usize),
            interval: seq + 1,
            newest_seq: seq,
            carry,
            cache: Mutex::new(PageCache::new(geometry.page_bytes as usize, frames)),
            geometry,
        }
    }

    fn get(&self, slot: u32, block: usize) -> CrcLookup {
        if let Some(crc) = self.dirty.get(slot, block) {
            return CrcLookup::Known(crc);
        }
        let page = self.geometry.page_of(slot);
        let mut cache = lock(&self.cache);
        match cache.get(page) {
            Some(image) => CrcLookup::Known(self.geometry.get(image, slot, block)),
            None => CrcLookup::InPage(page),
        }
    }

    /// Region holding the newest pages.
    pub fn newest_region(&self) -> usize {
        (self.newest_seq % 2) as usize
    }

    /// Cache `image` (valid page `page`, read from the region of checkpoint `read_seq`)
    /// unless a checkpoint completed since: then dirty crcs written by it may have been
    /// dropped after the read, and the image could lack them.
    pub fn offer(&self, page: u32, image: &[u8], read_seq: u64) {
        if read_seq == self.newest_seq {
            lock(&self.cache).insert(page, image);
        }
    }

    /// Bytes held by dirty crcs.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty.bytes()
    }

    /// Past this many bytes of dirty crcs, a flush checkpoints.
    pub fn dirty_bytes_max(&self) -> usize {
        CRC_DIRTY_BYTES_MIN_BOUND.max(CRC_DIRTY_SLOTS_MIN_BOUND * self.dirty.record_bytes())
    }
}

/// Crcs a slot's record holds inline before it moves to a slab record (one small write
/// touches one to three blocks).
const FEW: usize = 3;

/// Per slot changed since a checkpoint's cut: which blocks' crcs were set, their values, and
/// the checkpoint that first writes them. A record of up to [`FEW`] crcs sits in the map
/// itself; a larger one (a whole-object write) in one slab of full records (a bitmap of set
/// blocks, then a value per block), so there is no allocation per slot.
pub(crate) struct DirtyCrcs {
    blocks: usize,
    /// u32s per full record: bitmap (2 per 64 blocks), then values.
    stride: usize,
    at: HashMap<u32, Dirty, FastHash>,
    slab: Vec<u32>,
    free: Vec<u32>,
}

/// One slot's record.
#[derive(Clone, Copy)]
struct Dirty {
    /// The checkpoint that first writes these crcs.
    interval: u64,
    crcs: Crcs,
}

#[derive(Clone, Copy)]
enum Crcs {
    /// `n` (block, crc) pairs.
    Few {
        n: u8,
        blocks: [u16; FEW],
        crcs: [u32; FEW],
    },
    /// Record `r` of the slab.
    Full(u32),
}

/// One slot's dirty crcs as saved at a checkpoint's cut: a full record (bitmap, values).
pub(crate) type SavedCrcs = Box<[u32]>;

impl DirtyCrcs {
    fn new(blocks: usize) -> DirtyCrcs {
        DirtyCrcs {
            blocks,
            stride: 2 * blocks.div_ceil(64) + blocks,
            at: HashMap::default(),
            slab: Vec::new(),
            free: Vec::new(),
        }
    }

    fn full(&self, r: u32) -> &[u32] {
        let at = r as usize * self.stride;
        &self.slab[at..at + self.stride]
    }

    fn full_mut(&mut self, r: u32) -> &mut [u32] {
        let at = r as usize * self.stride;
        &mut self.slab[at..at + self.stride]
    }

    fn value_at(&self, block: usize) -> usize {
        2 * self.blocks.div_ceil(64) + block
    }

    /// Every (block, crc) of a record.
    fn each(&self, d: &Dirty, mut f: impl FnMut(usize, u32)) {
        match d.crcs {
            Crcs::Few { n, blocks, crcs } => {
                for i in 0..n as usize {
                    f(blocks[i] as usize, crcs[i]);
                }
            }
            Crcs::Full(r) => self.each_saved(self.full(r), f),
        }
    }

    /// Every (block, crc) of a full record.
    fn each_saved(&self, rec: &[u32], mut f: impl FnMut(usize, u32)) {
        for b in 0..self.blocks {
            if is_set(rec, b) {
                f(b, rec[self.value_at(b)]);
            }
        }
    }

    /// The crc set for block `block` of `slot` since the cut, if any.
    pub fn get(&self, slot: u32, block: usize) -> Option<u32> {
        let d = self.at.get(&slot)?;
        match d.crcs {
            Crcs::Few { n, blocks, crcs } => (0..n as usize)
                .find(|&i| blocks[i] as usize == block)
                .map(|i| crcs[i]),
            Crcs::Full(r) => {
                let rec = self.full(r);
                is_set(rec, block).then(|| rec[self.value_at(block)])
            }
        }
    }

    fn set(&mut self, slot: u32, block: usize, crc: u32, interval: u64) {
        let mut d = self.at.get(&slot).copied().unwrap_or(Dirty {
            interval,
            crcs: Crcs::Few {
                n: 0,
                blocks: [0; FEW],
                crcs: [0; FEW],
            },
        });
        d.interval = interval;
        d.crcs = match d.crcs {
            Crcs::Few {
                mut n,
                mut blocks,
                mut crcs,
            } => match (0..n as usize).find(|&i| blocks[i] as usize == block) {
                Some(i) => {
                    crcs[i] = crc;
                    Crcs::Few { n, blocks, crcs }
                }
                None if (n as usize) < FEW => {
                    blocks[n as usize] = block as u16;
                    crcs[n as usize] = crc;
                    n += 1;
                    Crcs::Few { n, blocks, crcs }
                }
                None => {
                    let r = self.new_full();
                    for i in 0..FEW {
                        self.set_full(r, blocks[i] as usize, crcs[i]);
                    }
                    Crcs::Full(r)
                }
            },
            full => full,
        };
        if let Crcs::Full(r) = d.crcs {
            self.set_full(r, block, crc);
        }
        self.at.insert(slot, d);
    }

    fn new_full(&mut self) -> u32 {
        let r = match self.free.pop() {
            Some(r) => r,
            None => {
                self.slab.resize(self.slab.len() + self.stride, 0);
                (self.slab.len() / self.stride - 1) as u32
            }
        };
        self.full_mut(r).fill(0);
        r
    }

    fn set_full(&mut self, r: u32, block: usize, crc: u32) {
        let value_at = self.value_at(block);
        let rec = self.full_mut(r);
        rec[block / 32] |= 1 << (block % 32);
        rec[value_at] = crc;
    }

    fn forget_block(&mut self, slot: u32, block: usize) {
        let Some(d) = self.at.get_mut(&slot) else {
            return;
        };
        match &mut d.crcs {
            Crcs::Few { n, blocks, crcs } => {
                if let Some(i) = (0..*n as usize).find(|&i| blocks[i] as usize == block) {
                    let last = *n as usize - 1;
                    blocks[i] = blocks[last];
                    crcs[i] = crcs[last];
                    *n -= 1;
                }
            }
            &mut Crcs::Full(r) => self.full_mut(r)[block / 32] &= !(1 << (block % 32)),
        }
    }

    fn remove(&mut self, slot: u32) {
        if let Some(Dirty {
            crcs: Crcs::Full(r),
            ..
        }) = self.at.remove(&slot)
        {
            self.free.push(r);
        }
    }

    /// The interval of `slot`'s record.
    #[cfg(test)]
    pub fn interval(&self, slot: u32) -> Option<u64> {
        self.at.get(&slot).map(|d| d.interval)
    }

    /// A copy of `slot`'s record (None: the slot has none), to compose a page with later.
    pub fn save(&self, slot: u32) -> Option<SavedCrcs> {
        let d = self.at.get(&slot)?;
        let mut rec = vec![0u32; self.stride];
        self.each(d, |b, crc| {
            rec[b / 32] |= 1 << (b % 32);
            rec[self.value_at(b)] = crc;
        });
        Some(rec.into_boxed_slice())
    }

    /// Does `slot`'s record set every block of `alloc`?
    pub fn covers(&self, slot: u32, alloc: &[u64]) -> bool {
        (0..self.blocks)
            .all(|b| alloc[b / 64] & (1 << (b % 64)) == 0 || self.get(slot, b).is_some())
    }

    /// Write the crcs set in `slot`'s record (or in `saved`, when given) into `image`, the
    /// slot's page.
    pub fn write_into(
        &self,
        geometry: &CrcGeometry,
        image: &mut [u8],
        slot: u32,
        saved: Option<&[u32]>,
    ) {
        let mut put = |b: usize, crc: u32| geometry.set(image, slot, b, crc);
        match saved {
            Some(rec) => self.each_saved(rec, &mut put),
            None => {
                if let Some(d) = self.at.get(&slot) {
                    self.each(d, &mut put);
                }
            }
        }
    }

    /// Slots with a record, and their interval.
    pub fn slots(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.at.iter().map(|(&slot, d)| (slot, d.interval))
    }

    /// Drop the records of checkpoints up to `seq`, first calling `f(slot, block, crc)` for
    /// each crc they set.
    pub fn drop_through(&mut self, seq: u64, mut f: impl FnMut(u32, usize, u32)) {
        let old: Vec<u32> = self
            .slots()
            .filter(|&(_, interval)| interval <= seq)
            .map(|(slot, _)| slot)
            .collect();
        for slot in old {
            if let Some(d) = self.at.get(&slot) {
                self.each(d, |b, crc| f(slot, b, crc));
            }
            self.remove(slot);
        }
    }

    /// Bytes the records take (map and slab).
    pub fn bytes(&self) -> usize {
        let entry = std::mem::size_of::<(u32, Dirty)>() + 1;
        self.at.len() * entry + (self.slab.len() - self.free.len() * self.stride) * 4
    }

    /// Bytes of a full record and its map entry.
    fn record_bytes(&self) -> usize {
        4 * self.stride + std::mem::size_of::<(u32, Dirty)>() + 1
    }

    /// Records.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.at.len()
    }
}

/// Is block `block` set in a full record?
fn is_set(rec: &[u32], block: usize) -> bool {
    rec[block / 32] & (1 << (block % 32)) != 0
}

/// Clean crc pages, at most `frames` of them, evicted by CLOCK.
pub(crate) struct PageCache {
    page_bytes: usize,
    frames_max: usize,
    frames: Vec<Frame>,
    at: HashMap<u32, u32, FastHash>,
    hand: usize,
}

struct Frame {
    page: u32,
    referenced: bool,
    image: Box<[u8]>,
}

impl PageCache {
    fn new(page_bytes: usize, frames_max: usize) -> PageCache {
        PageCache {
            page_bytes,
            frames_max,
            frames: Vec::new(),
            at: HashMap::default(),
            hand: 0,
        }
    }

    /// The cached image of `page` (marked as used lately).
    pub fn get(&mut self, page: u32) -> Option<&[u8]> {
        let f = *self.at.get(&page)? as usize;
        self.frames[f].referenced = true;
        Some(&self.frames[f].image)
    }

    /// The cached image of `page`, to update in place.
    pub fn get_mut(&mut self, page: u32) -> Option<&mut [u8]> {
        let f = *self.at.get(&page)? as usize;
        Some(&mut self.frames[f].image)
    }

    /// Cache `image` as `page` (replacing a copy, or evicting a page not used lately).
    pub fn insert(&mut self, page: u32, image: &[u8]) {
        debug_assert_eq!(image.len(), self.page_bytes);
        if let Some(&f) = self.at.get(&page) {
            self.frames[f as usize].image.copy_from_slice(image);
            return;
        }
        if self.frames.len() < self.frames_max {
            self.at.insert(page, self.frames.len() as u32);
            self.frames.push(Frame {
                page,
                referenced: true,
                image: image.into(),
            });
            return;
        }
        // Bound: one lap clears every reference bit, the next finds a frame.
        loop {
            let f = &mut self.frames[self.hand];
            if !f.referenced {
                break;
            }
            f.referenced = false;
            self.hand = (self.hand + 1) % self.frames.len();
        }
        let victim = self.hand;
        self.hand = (self.hand + 1) % self.frames.len();
        let f = &mut self.frames[victim];
        self.at.remove(&f.page);
        f.page = page;
        f.referenced = true;
        f.image.copy_from_slice(image);
        self.at.insert(page, victim as u32);
    }

    /// Pages cached.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.at.len()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock()
        .expect("crc cache mutex poisoned by an earlier panic")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirty_records_set_forget_and_drop_by_interval() {
        // Goal: a slot's record keeps the crcs set since the cut (and which), inline up to
        // FEW and in the slab beyond, forgets a block or the whole slot, reuses freed slab
        // records, saves a full copy, and drops by checkpoint.
        let mut d = DirtyCrcs::new(70);
        d.set(5, 0, 11, 3);
        d.set(5, 69, 12, 4);
        d.set(9, 1, 13, 3);
        assert_eq!(
            (d.get(5, 0), d.get(5, 69), d.get(5, 1)),
            (Some(11), Some(12), None)
        );
        assert!(d.slab.is_empty(), "two crcs stay inline");
        assert_eq!(d.interval(5), Some(4), "the newest change's checkpoint");
        d.forget_block(5, 0);
        assert_eq!(d.get(5, 0), None);
        assert!(d.covers(5, &[0, 1 << 5]));
        assert!(!d.covers(5, &[1, 0]));
        let saved = d.save(5).expect("a record");
        assert_eq!(saved.len(), d.stride);
        let mut dropped = Vec::new();
        d.drop_through(3, |slot, block, crc| dropped.push((slot, block, crc)));
        assert_eq!(dropped, vec![(9, 1, 13)]);
        assert_eq!(d.len(), 1);
        // A whole object's crcs move to the slab, keeping the inline ones.
        d.set(20, 2, 14, 5);
        for b in 10..70 {
            d.set(20, b, b as u32, 5);
        }
        assert_eq!(d.slab.len(), d.stride, "one full record");
        assert_eq!(
            (d.get(20, 2), d.get(20, 69), d.get(20, 3)),
            (Some(14), Some(69), None)
        );
        d.forget_block(20, 69);
        assert_eq!(d.get(20, 69), None);
        d.remove(20);
        for b in 0..FEW + 1 {
            d.set(21, b, 1, 5);
        }
        assert_eq!(d.slab.len(), d.stride, "the freed record is reused");
        assert_eq!(d.get(5, 69), Some(12));
        d.drop_through(5, |_, _, _| {});
        assert_eq!((d.len(), d.bytes()), (0, 0));
    }

    #[test]
    fn the_cache_keeps_at_most_its_frames_and_evicts_the_unused() {
        // Goal: the cache never holds more than its bound, and a page used since the hand
        // last passed survives an eviction that a page not used does not.
        let mut c = PageCache::new(8, 3);
        for p in 0..3 {
            c.insert(p, &[p as u8; 8]);
        }
        c.insert(3, &[3; 8]); // clears every bit, evicts page 0
        assert_eq!(c.len(), 3);
        assert!(c.get(0).is_none());
        assert!(c.get(1).is_some());
        c.insert(4, &[4; 8]);
        assert!(c.get(1).is_some(), "a page used lately stays");
        assert_eq!(c.get(4), Some(&[4u8; 8][..]));
        assert_eq!(c.len(), 3);
    }
}
