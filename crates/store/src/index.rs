//! The in-RAM object table: object → slot and version, per-slot allocation bitmaps and block
//! crcs, slot states and the free slots, and the overlay of blocks whose WAL records are not
//! yet copied into their slot. Pure bookkeeping (no I/O), checked by assertions on every change.
//!
//! Everything per slot lives in slot-indexed arrays mapped as zeros, and free slots are
//! handed out lowest first, so memory grows with the objects stored, not with the slots
//! (docs/design.md, "Memory").

use crate::checkpoint::EntryRef;
use crate::crc_pages::CrcGeometry;
use crate::crcs::{CrcLookup, CrcTable};
use crate::engine::AlignedBuf;
use crate::free_slots::FreeSlots;
use crate::objects::ObjectTable;
use crate::options::BLOCK_BYTES;
use crate::zeroed::ZeroedArray;
use basalt_proto::{InodeId, ObjectId, Version};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// One 4 KiB block.
pub(crate) const BLOCK: usize = BLOCK_BYTES as usize;
/// A block buffer.
pub(crate) type Block = [u8; BLOCK];
/// Overlay buffers kept for reuse once their block is applied (bounds the pool at 4 MiB).
const BLOCK_POOL_MAX: usize = 1024;
pub(crate) use cut::{CutPage, CUT_SCAN_SLOTS_MAX};

mod cut;

/// Where an object lives and its last version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ObjectMeta {
    pub slot: u32,
    pub version: Version,
}

/// The life of a slot: `Free → Reserved → Used → Pending → Free`. Kept as one byte per
/// slot; 0 is `Free`, so an array of zeros is a table of free slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum SlotState {
    /// Holds nothing anyone needs; may be handed out (at run time).
    Free = 0,
    /// Handed to a writer that is about to attach it to an object.
    Reserved,
    /// Holds an object.
    Used,
    /// Freed by a record that is not yet confirmed durable: reusing it now could destroy data
    /// that recovery might still need.
    Pending,
}

impl SlotState {
    fn from_byte(b: u8) -> SlotState {
        match b {
            0 => SlotState::Free,
            1 => SlotState::Reserved,
            2 => SlotState::Used,
            3 => SlotState::Pending,
            _ => unreachable!("only SlotState values are stored"),
        }
    }
}

/// A block's newest contents, waiting for its WAL record to become durable and be applied.
struct OverlayBlock {
    lsn: u64,
    data: Box<Block>,
}

/// The object table. Not synchronized: the store wraps it in a lock.
pub(crate) struct Index {
    blocks_per_slot: usize,
    words_per_slot: usize,
    objects: ObjectTable,
    /// Per slot, its [`SlotState`] as a byte.
    state: ZeroedArray<u8>,
    crcs: CrcTable,
    alloc: ZeroedArray<u64>,
    /// Mirrors `state == Free`, searchable for the lowest free slot.
    free: FreeSlots,
    pending_free: VecDeque<(u64, u32)>,
    overlay: HashMap<(u32, u32), OverlayBlock, FastHash>,
    /// Whole-object writes handed to the I/O engine whose completion the leader has not yet
    /// seen: reads of these slots are served from the bytes being written (slot → data).
    in_flight: HashMap<u32, Arc<AlignedBuf>, FastHash>,
    pool: Vec<Box<Block>>,
    used_blocks: u64,
    /// Per inode with objects here: (objects, allocated blocks). Kept as objects change, so
    /// a volume's usage is read without walking the table (`Store::usage`).
    usage: HashMap<InodeId, (u64, u64), FastHash>,
    /// The checkpoint being written, if any (see [`Index::begin_cut`]).
    cut: Option<cut::Cut>,
}

impl Index {
    /// An empty table for `slot_count` slots, every slot free; its crcs in RAM, or (with a
    /// crc `geometry`) in the crc region of checkpoint `seq`, which wrote pages `carry`.
    pub fn new(
        slot_count: u32,
        blocks_per_slot: u32,
        geometry: Option<CrcGeometry>,
        seq: u64,
        carry: Vec<u32>,
    ) -> Index {
        let blocks = blocks_per_slot as usize;
        let words = blocks.div_ceil(64);
        let n = slot_count as usize;
        Index {
            blocks_per_slot: blocks,
            words_per_slot: words,
            objects: ObjectTable::new(slot_count),
            state: ZeroedArray::new(n),
            crcs: CrcTable::new(slot_count, blocks, geometry, seq, carry),
            alloc: ZeroedArray::new(n * words),
            free: FreeSlots::new(slot_count),
            pending_free: VecDeque::new(),
            overlay: HashMap::default(),
            in_flight: HashMap::default(),
            pool: Vec::new(),
            used_blocks: 0,
            usage: HashMap::default(),
            cut: None,
        }
    }

    pub fn object(&self, obj: ObjectId) -> Option<ObjectMeta> {
        let slot = self.objects.find(obj)?;
        Some(ObjectMeta {
            slot,
            version: self.objects.record(slot).1,
        })
    }

    pub fn is_allocated(&self, slot: u32, block: usize) -> bool {
        debug_assert!(block < self.blocks_per_slot);
        self.alloc[slot as usize * self.words_per_slot + block / 64] & (1 << (block % 64)) != 0
    }

    /// The crc of block `block` of `slot` (allocated, in a used slot), or the crc page
    /// that holds it.
    pub fn block_crc(&self, slot: u32, block: usize) -> CrcLookup {
        self.crcs.get(slot, block)
    }

    /// The crcs in RAM.
    pub fn crcs(&self) -> &CrcTable {
        &self.crcs
    }

    /// RAM taken by the crcs set since the last checkpoint's cut, in percent of what they
    /// may take (0 when every crc lives in RAM).
    pub fn crc_dirty_percent(&self) -> u64 {
        self.crcs.paged().map_or(0, |p| {
            (p.dirty_bytes() as u64 * 100) / (p.dirty_bytes_max() as u64).max(1)
        })
    }

    pub fn alloc_words(&self, slot: u32) -> &[u64] {
        let s = slot as usize * self.words_per_slot;
        &self.alloc[s..s + self.words_per_slot]
    }

    /// The unapplied newest contents of a block, if any.
    pub fn overlay_block(&self, slot: u32, block: usize) -> Option<&Block> {
        if self.overlay.is_empty() {
            return None;
        }
        self.overlay.get(&(slot, block as u32)).map(|o| &*o.data)
    }

    /// The bytes of a whole-object write still in flight to `slot`, if any.
    pub fn in_flight(&self, slot: u32) -> Option<&AlignedBuf> {
        if self.in_flight.is_empty() {
            return None;
        }
        self.in_flight.get(&slot).map(|b| &**b)
    }

    /// A whole-object write of `data` into `slot` (just remapped) is in flight.
    pub fn add_in_flight(&mut self, slot: u32, data: Arc<AlignedBuf>) {
        assert_eq!(self.state(slot), SlotState::Used);
        let old = self.in_flight.insert(slot, data);
        assert!(old.is_none(), "one write in flight per slot");
    }

    /// The write into `slot` completed: its slot holds the bytes now.
    pub fn remove_in_flight(&mut self, slot: u32) {
        let removed = self.in_flight.remove(&slot);
        assert!(removed.is_some(), "a completed write was in flight");
    }

    pub fn has_pending_frees(&self) -> bool {
        !self.pending_free.is_empty()
    }

    /// Slots freed by a record that are not yet reusable (awaiting two durable batches).
    pub fn pending_frees(&self) -> usize {
        self.pending_free.len()
    }

    /// Take the lowest free slot for a writer (`Free → Reserved`).
    pub fn reserve_free_slot(&mut self) -> Option<u32> {
        let slot = self.free.lowest()?;
        assert_eq!(
            self.state(slot),
            SlotState::Free,
            "free bitmap holds slot {slot}"
        );
        debug_assert!(self.alloc_words(slot).iter().all(|&w| w == 0));
        self.set_state(slot, SlotState::Reserved);
        Some(slot)
    }

    /// Give back a reserved slot that was not used (`Reserved → Free`).
    pub fn unreserve(&mut self, slot: u32) {
        assert_eq!(self.state(slot), SlotState::Reserved);
        self.set_state(slot, SlotState::Free);
    }

    /// Replay: take the slot a record names, which must be free (`Free → Reserved`).
    pub fn claim_slot(&mut self, slot: u32) -> bool {
        debug_assert!(self.cut.is_none(), "replay writes no checkpoint");
        let free = self.state.get(slot as usize) == Some(&(SlotState::Free as u8));
        if free {
            self.set_state(slot, SlotState::Reserved);
        }
        free
    }

    /// Blocks `first..first + crcs.len()` of `obj` now hold new data with `crcs`. A new object
    /// takes `slot`, which the caller reserved. With `overlay = (lsn, blocks)` the data is also
    /// kept in RAM until the record at `lsn` is durable and applied.
    pub fn write_blocks(
        &mut self,
        obj: ObjectId,
        slot: u32,
        version: Version,
        first: u32,
        crcs: &[u32],
        overlay: Option<(u64, &[&[u8]])>,
    ) {
        self.touch(slot);
        self.uncount(obj);
        match self.objects.find(obj) {
            Some(at) => {
                assert_eq!(at, slot, "write record names the object's slot");
                self.objects.set_version(slot, version);
            }
            None => {
                assert_eq!(self.state(slot), SlotState::Reserved);
                assert!(self.alloc_words(slot).iter().all(|&w| w == 0));
                self.set_state(slot, SlotState::Used);
                self.objects.insert(obj, slot, version);
            }
        }
        let first = first as usize;
        assert!(
            first + crcs.len() <= self.blocks_per_slot,
            "write beyond the object"
        );
        for (i, &crc) in crcs.iter().enumerate() {
            self.set_block(slot, first + i, crc);
        }
        self.count(obj);
        if let Some((lsn, blocks)) = overlay {
            for (i, data) in blocks.iter().enumerate() {
                self.put_overlay(slot, (first + i) as u32, lsn, data);
            }
        }
    }

    /// `obj` now lives whole in the reserved `slot` with `crcs`; its old slot (if any) is freed.
    pub fn remap(
        &mut self,
        obj: ObjectId,
        slot: u32,
        version: Version,
        crcs: &[u32],
        free_lsn: Option<u64>,
    ) {
        assert_eq!(self.state(slot), SlotState::Reserved);
        assert_eq!(
            crcs.len(),
            self.blocks_per_slot,
            "remap covers the whole object"
        );
        self.touch(slot);
        self.uncount(obj);
        if let Some(old) = self.objects.remove(obj) {
            self.touch(old);
            self.release_slot(old, free_lsn);
        }
        self.set_state(slot, SlotState::Used);
        for (b, &crc) in crcs.iter().enumerate() {
            self.set_block(slot, b, crc);
        }
        self.objects.insert(obj, slot, version);
        self.count(obj);
    }

    /// Blocks `first..first + count` of `obj` become holes. An object left with no block is
    /// removed and its slot freed. Returns false if `obj` does not exist.
    pub fn trim(
        &mut self,
        obj: ObjectId,
        first: u32,
        count: u32,
        version: Version,
        free_lsn: Option<u64>,
    ) -> bool {
        let Some(slot) = self.objects.find(obj) else {
            return false;
        };
        self.touch(slot);
        self.uncount(obj);
        self.objects.set_version(slot, version);
        let (first, end) = (first as usize, (first + count) as usize);
        assert!(end <= self.blocks_per_slot, "trim beyond the object");
        for b in first..end {
            if self.is_allocated(slot, b) {
                self.alloc[slot as usize * self.words_per_slot + b / 64] &= !(1 << (b % 64));
                self.used_blocks -= 1;
            }
            self.crcs.clear(slot, b);
            self.drop_overlay(slot, b as u32);
        }
        if self.alloc_words(slot).iter().all(|&w| w == 0) {
            self.objects.remove(obj);
            self.release_slot(slot, free_lsn);
        }
        self.count(obj);
        true
    }

    /// Remove `obj` and free its slot. Returns false if it does not exist.
    pub fn delete(&mut self, obj: ObjectId, free_lsn: Option<u64>) -> bool {
        let Some(slot) = self.objects.find(obj) else {
            return false;
        };
        self.touch(slot);
        self.uncount(obj);
        self.objects.remove(obj);
        self.release_slot(slot, free_lsn);
        true
    }

    /// `from` becomes `obj`, keeping its slot, blocks and version; `obj`'s previous slot (if
    /// any) is freed. Returns false if `from` does not exist.
    pub fn rename(&mut self, from: ObjectId, obj: ObjectId, free_lsn: Option<u64>) -> bool {
        assert_ne!(from, obj, "rename onto itself");
        let Some(slot) = self.objects.find(from) else {
            return false;
        };
        self.touch(slot);
        self.uncount(from);
        self.uncount(obj);
        self.objects.remove(from);
        let (_, version) = self.objects.record(slot);
        if let Some(old) = self.objects.find(obj) {
            self.touch(old);
            self.objects.remove(obj);
            self.release_slot(old, free_lsn);
        }
        self.objects.insert(obj, slot, version);
        self.count(obj);
        true
    }

    /// After the records up to `last_lsn` are applied in place, forget overlay blocks of
    /// `slot` (`first..first + count`) that no later write replaced.
    pub fn remove_applied_overlay(&mut self, slot: u32, first: u32, count: u32, last_lsn: u64) {
        if self.overlay.is_empty() {
            return;
        }
        for b in first..first + count {
            if let Some(o) = self.overlay.get(&(slot, b)) {
                if o.lsn <= last_lsn {
                    self.drop_overlay(slot, b);
                }
            }
        }
    }

    /// Slots freed by records up to `confirmed_lsn` (now surely durable, and followed by a
    /// durable later batch) become reusable.
    pub fn release_confirmed(&mut self, confirmed_lsn: u64) {
        while let Some(&(lsn, slot)) = self.pending_free.front() {
            if lsn > confirmed_lsn {
                break;
            }
            self.pending_free.pop_front();
            assert_eq!(self.state(slot), SlotState::Pending);
            self.set_state(slot, SlotState::Free);
        }
    }

    /// After create or recovery, before serving: nothing awaits confirmation or waits in the
    /// overlay (replay frees slots at once and copies logged blocks in place).
    pub fn finish_recovery(&self) {
        assert!(self.pending_free.is_empty() && self.overlay.is_empty());
        assert!(self.in_flight.is_empty());
    }

    /// Recovery: add one checkpoint entry, refusing anything a correct store never writes.
    pub fn load_entry(&mut self, e: EntryRef<'_>) -> Result<(), String> {
        assert!(
            self.cut.is_none(),
            "no checkpoint is written while one is loaded"
        );
        let slot = e.slot;
        if !self.claim_slot(slot) {
            return Err(format!(
                "entry for {} names used or invalid slot {slot}",
                e.obj
            ));
        }
        if self.objects.find(e.obj).is_some() {
            return Err(format!("object {} appears twice", e.obj));
        }
        let crcs_in_ram = self.crcs.paged().is_none();
        let crcs_ok = e.crcs.map_or(!crcs_in_ram, |c| {
            crcs_in_ram && c.len() == self.blocks_per_slot
        });
        if e.alloc.len() != self.words_per_slot || !crcs_ok {
            return Err("entry geometry".into());
        }
        let tail_bits = self.blocks_per_slot % 64;
        let tail_ok = tail_bits == 0 || e.alloc[self.words_per_slot - 1] >> tail_bits == 0;
        if !tail_ok || e.alloc.iter().all(|&w| w == 0) {
            return Err(format!(
                "object {} has an impossible allocation bitmap",
                e.obj
            ));
        }
        self.set_state(slot, SlotState::Used);
        for b in 0..self.blocks_per_slot {
            if e.alloc[b / 64] & (1 << (b % 64)) != 0 {
                // A paged store's crcs stay in its crc region until a block changes.
                match e.crcs {
                    Some(crcs) => self.set_block(slot, b, crcs[b]),
                    None => self.allocate(slot, b),
                }
            }
        }
        self.objects.insert(e.obj, slot, e.version);
        self.count(e.obj);
        Ok(())
    }

    /// Every object as a checkpoint records it, in slot order.
    #[cfg(test)]
    pub fn entries(&self) -> impl Iterator<Item = EntryRef<'_>> + Clone {
        (0..self.state.len() as u32)
            .filter(|&slot| self.state(slot) == SlotState::Used)
            .map(move |slot| self.entry(slot))
    }

    /// The checkpoint entry of the object in the used `slot`.
    fn entry(&self, slot: u32) -> EntryRef<'_> {
        let (obj, version) = self.objects.record(slot);
        EntryRef {
            obj,
            version,
            slot,
            alloc: self.alloc_words(slot),
            crcs: self.crcs.slot_crcs(slot),
        }
    }

    /// Every object and its version, sorted by object id.
    pub fn objects(&self) -> Vec<(ObjectId, Version)> {
        let mut v: Vec<_> = self
            .objects
            .slots()
            .map(|s| self.objects.record(s))
            .collect();
        v.sort_unstable();
        v
    }

    pub fn object_count(&self) -> u64 {
        self.objects.len() as u64
    }

    pub fn used_blocks(&self) -> u64 {
        self.used_blocks
    }

    /// Objects and allocated blocks of `inode` in this store.
    pub fn usage(&self, inode: InodeId) -> (u64, u64) {
        self.usage.get(&inode).copied().unwrap_or((0, 0))
    }

    /// Take `obj`'s share out of its inode's usage (before a change to it).
    fn uncount(&mut self, obj: ObjectId) {
        if let Some(blocks) = self.blocks_of(obj) {
            let u = self.usage.get_mut(&obj.inode).expect("a counted object");
            *u = (u.0 - 1, u.1 - blocks);
            if u.0 == 0 {
                self.usage.remove(&obj.inode);
            }
        }
    }

    /// Add `obj`'s share to its inode's usage (after a change to it).
    fn count(&mut self, obj: ObjectId) {
        if let Some(blocks) = self.blocks_of(obj) {
            let u = self.usage.entry(obj.inode).or_default();
            *u = (u.0 + 1, u.1 + blocks);
        }
    }

    /// The allocated blocks of `obj`, None when it does not exist.
    fn blocks_of(&self, obj: ObjectId) -> Option<u64> {
        let slot = self.objects.find(obj)?;
        Some(
            self.alloc_words(slot)
                .iter()
                .map(|w| w.count_ones() as u64)
                .sum(),
        )
    }

    /// Check every cross-structure invariant (O(slots): tests and debug recovery only).
    pub fn check_invariants(&self) {
        self.objects.check_invariants();
        self.free.check_invariants();
        let used = self
            .state
            .iter()
            .filter(|&&s| s == SlotState::Used as u8)
            .count();
        assert_eq!(used, self.objects.len(), "one used slot per object");
        let mut blocks = 0u64;
        let mut usage: HashMap<InodeId, (u64, u64)> = HashMap::new();
        for slot in self.objects.slots() {
            assert_eq!(self.state(slot), SlotState::Used);
            let words = self.alloc_words(slot);
            assert!(words.iter().any(|&w| w != 0), "objects have a block");
            let n = words.iter().map(|w| w.count_ones() as u64).sum::<u64>();
            blocks += n;
            let u = usage.entry(self.objects.record(slot).0.inode).or_default();
            *u = (u.0 + 1, u.1 + n);
        }
        assert_eq!(blocks, self.used_blocks, "used block count");
        let kept: HashMap<InodeId, (u64, u64)> = self.usage.iter().map(|(k, v)| (*k, *v)).collect();
        assert_eq!(kept, usage, "per-inode usage");
        let mut free = 0u64;
        for slot in 0..self.state.len() as u32 {
            let state = self.state(slot);
            assert_eq!(
                self.free.is_free(slot),
                state == SlotState::Free,
                "free bitmap of slot {slot}"
            );
            free += u64::from(state == SlotState::Free);
            // Only a used slot's allocated blocks hold anything: the rest stays zero (as
            // the zeroed allocation left it), so slots never used cost no memory.
            if let Some(crcs) = self.crcs.slot_crcs(slot) {
                for (b, &crc) in crcs.iter().enumerate() {
                    if state != SlotState::Used || !self.is_allocated(slot, b) {
                        assert_eq!(crc, 0, "crc of slot {slot} hole {b}");
                    }
                }
            }
            if state != SlotState::Used {
                assert!(
                    self.alloc_words(slot).iter().all(|&w| w == 0),
                    "slot {slot} bits"
                );
            }
        }
        assert_eq!(free, self.free.free_count(), "free slot count");
        for &(_, s) in &self.pending_free {
            assert_eq!(self.state(s), SlotState::Pending);
        }
        if let Some(p) = self.crcs.paged() {
            for (slot, interval) in p.dirty.slots() {
                assert_eq!(
                    self.state(slot),
                    SlotState::Used,
                    "dirty crcs of a used slot"
                );
                assert!(
                    interval <= p.interval && interval > p.newest_seq,
                    "dirty crcs belong to a checkpoint not yet durable"
                );
            }
        }
        if let Some(cut) = &self.cut {
            cut.check_invariants();
        }
        for &slot in self.in_flight.keys() {
            assert!(
                matches!(self.state(slot), SlotState::Used | SlotState::Pending),
                "a write in flight is to a slot not yet reusable"
            );
        }
        for &(slot, block) in self.overlay.keys() {
            assert_eq!(self.state(slot), SlotState::Used, "overlay on a used slot");
            assert!(
                self.is_allocated(slot, block as usize),
                "overlay on an allocated block"
            );
        }
    }

    fn state(&self, slot: u32) -> SlotState {
        SlotState::from_byte(self.state[slot as usize])
    }

    /// Move `slot` to `new`, keeping the free bitmap in step.
    fn set_state(&mut self, slot: u32, new: SlotState) {
        let old = self.state(slot);
        if old == SlotState::Free && new != SlotState::Free {
            self.free.take(slot);
        } else if old != SlotState::Free && new == SlotState::Free {
            self.free.give(slot);
        }
        self.state[slot as usize] = new as u8;
    }

    fn set_block(&mut self, slot: u32, block: usize, crc: u32) {
        self.allocate(slot, block);
        self.crcs.set(slot, block, crc);
    }

    fn allocate(&mut self, slot: u32, block: usize) {
        let word = &mut self.alloc[slot as usize * self.words_per_slot + block / 64];
        if *word & (1 << (block % 64)) == 0 {
            *word |= 1 << (block % 64);
            self.used_blocks += 1;
        }
    }

    fn put_overlay(&mut self, slot: u32, block: u32, lsn: u64, data: &[u8]) {
        if let Some(o) = self.overlay.get_mut(&(slot, block)) {
            assert!(o.lsn < lsn, "overlay LSNs grow");
            o.lsn = lsn;
            o.data.copy_from_slice(data);
            return;
        }
        let mut buf = self.pool.pop().unwrap_or_else(|| Box::new([0; BLOCK]));
        buf.copy_from_slice(data);
        self.overlay
            .insert((slot, block), OverlayBlock { lsn, data: buf });
    }

    fn drop_overlay(&mut self, slot: u32, block: u32) {
        if self.overlay.is_empty() {
            return;
        }
        if let Some(o) = self.overlay.remove(&(slot, block)) {
            if self.pool.len() < BLOCK_POOL_MAX {
                self.pool.push(o.data);
            }
        }
    }

    /// The slot no longer holds an object: clear it and, at run time, park it until the
    /// freeing record (`free_lsn`) is confirmed; during replay (`None`) free it at once.
    fn release_slot(&mut self, slot: u32, free_lsn: Option<u64>) {
        assert_eq!(self.state(slot), SlotState::Used);
        let w = slot as usize * self.words_per_slot;
        for word in &mut self.alloc[w..w + self.words_per_slot] {
            self.used_blocks -= word.count_ones() as u64;
            *word = 0;
        }
        self.crcs.clear_slot(slot);
        for b in 0..self.blocks_per_slot as u32 {
            self.drop_overlay(slot, b);
        }
        match free_lsn {
            Some(lsn) => {
                debug_assert!(self.pending_free.back().is_none_or(|&(l, _)| l <= lsn));
                self.set_state(slot, SlotState::Pending);
                self.pending_free.push_back((lsn, slot));
            }
            None => self.set_state(slot, SlotState::Free),
        }
    }
}

/// A fast hasher for small fixed-size keys (object ids, slot/block pairs): a multiply-rotate
/// mix, much cheaper than SipHash on the I/O path. Keys are not attacker-chosen hash floods:
/// they come from the cluster's own object naming.
#[derive(Default, Clone, Copy)]
pub(crate) struct FastHasher(u64);

pub(crate) type FastHash = BuildHasherDefault<FastHasher>;

impl FastHasher {
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(b as u64);
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }

    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: Version = Version::new(1, 1);

    #[test]
    fn slots_cycle_through_pending_before_reuse() {
        let mut ix = Index::new(2, 4, None, 0, Vec::new());
        let a = ObjectId::new(1, 0);
        let s0 = ix.reserve_free_slot().expect("slot");
        ix.write_blocks(
            a,
            s0,
            V,
            1,
            &[7, 8],
            Some((10, &[&[1; BLOCK], &[2; BLOCK]])),
        );
        assert_eq!(ix.used_blocks(), 2);
        assert_eq!(ix.overlay_block(s0, 2).map(|b| b[0]), Some(2));
        let s1 = ix.reserve_free_slot().expect("second slot");
        assert!(ix.reserve_free_slot().is_none());
        ix.remap(a, s1, V, &[1, 2, 3, 4], Some(11));
        assert!(
            ix.overlay_block(s0, 2).is_none(),
            "overlay of the old slot dropped"
        );
        assert_eq!(ix.used_blocks(), 4);
        assert!(ix.reserve_free_slot().is_none(), "old slot is pending");
        ix.release_confirmed(10);
        assert!(ix.reserve_free_slot().is_none());
        ix.release_confirmed(11);
        let again = ix.reserve_free_slot().expect("released");
        assert_eq!(again, s0);
        ix.unreserve(again);
        assert!(ix.trim(a, 0, 4, V, Some(12)), "trim of every block");
        assert!(ix.object(a).is_none(), "empty object removed");
        ix.check_invariants();
    }

    #[test]
    fn applied_overlay_is_forgotten_unless_rewritten() {
        let mut ix = Index::new(1, 2, None, 0, Vec::new());
        let a = ObjectId::new(1, 0);
        let s = ix.reserve_free_slot().expect("slot");
        ix.write_blocks(a, s, V, 0, &[1, 2], Some((5, &[&[1; BLOCK], &[2; BLOCK]])));
        ix.write_blocks(a, s, V, 1, &[3], Some((6, &[&[3; BLOCK]])));
        ix.remove_applied_overlay(s, 0, 2, 5);
        assert!(ix.overlay_block(s, 0).is_none());
        assert_eq!(
            ix.overlay_block(s, 1).map(|b| b[0]),
            Some(3),
            "newer write kept"
        );
        ix.check_invariants();
    }
}
