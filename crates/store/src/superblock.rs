//! The superblock: the store's geometry, computed once at create time and never rewritten.
//!
//! Byte layout: `docs/design.md`, "Local store" → "Superblock".

use crate::checkpoint;
use crate::error::StoreError;
use crate::options::{
    StoreOptions, BLOCK_BYTES, MAX_OBJECT_BYTES, MAX_WAL_BYTES, MIN_OBJECT_BYTES, MIN_WAL_BYTES,
};
use crate::wal::{u32_at, u64_at};

/// Bytes reserved for the superblock at offset 0.
pub const SUPERBLOCK_BYTES: u64 = 4096;
/// Format version of the superblock layout.
pub const SUPERBLOCK_FORMAT_VERSION: u32 = 1;
const MAGIC: [u8; 8] = *b"BSLTSTOR";
const ENCODED_BYTES: usize = 92;
/// Slot numbers are u32; the largest one is kept free as a sentinel for future use.
const MAX_SLOTS: u64 = u32::MAX as u64 - 1;

/// Where everything lives in the data file. Exposed for tools and fault-injection tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLayout {
    /// Length of the data file.
    pub capacity_bytes: u64,
    /// Object and slot size.
    pub object_size_bytes: u32,
    /// Random identity written into every WAL record.
    pub store_id: u64,
    /// File offset of the circular WAL region.
    pub wal_offset: u64,
    /// Size of the WAL region.
    pub wal_bytes: u64,
    /// File offsets of the two checkpoint areas.
    pub checkpoint_offsets: [u64; 2],
    /// Size of each checkpoint area.
    pub checkpoint_bytes: u64,
    /// File offset of slot 0.
    pub slots_offset: u64,
    /// Number of object slots.
    pub slot_count: u32,
}

/// Whether `b` (a medium's first bytes) starts with the superblock magic: the medium is meant
/// to hold a store, valid or not.
pub(crate) fn has_magic(b: &[u8]) -> bool {
    b.len() >= MAGIC.len() && b[..MAGIC.len()] == MAGIC
}

impl StoreLayout {
    /// Place the regions for `opts`: superblock, WAL, two checkpoint areas sized for a full
    /// table, then as many slots as fit.
    pub fn compute(opts: &StoreOptions, store_id: u64) -> Result<StoreLayout, StoreError> {
        let object = opts.object_size_bytes;
        if !object.is_power_of_two() || !(MIN_OBJECT_BYTES..=MAX_OBJECT_BYTES).contains(&object) {
            return Err(StoreError::bad_options(format!(
                "object size {object} is not a power of two from {MIN_OBJECT_BYTES} to {MAX_OBJECT_BYTES}"
            )));
        }
        let wal_bytes = opts.effective_wal_bytes();
        if !wal_bytes.is_multiple_of(BLOCK_BYTES as u64)
            || !(MIN_WAL_BYTES..=MAX_WAL_BYTES).contains(&wal_bytes)
        {
            return Err(StoreError::bad_options(format!(
                "WAL size {wal_bytes} is not a multiple of 4 KiB from {MIN_WAL_BYTES} to {MAX_WAL_BYTES}"
            )));
        }
        let blocks = object / BLOCK_BYTES;
        let entry = checkpoint::entry_bytes(blocks) as u64;
        let fixed = SUPERBLOCK_BYTES + wal_bytes;
        // Each area rounds up to 4 KiB: reserve that slack, then every slot costs its data
        // plus one entry in each area.
        let slack = 2 * (checkpoint::HEADER_BYTES as u64 + 4095);
        let usable = opts.capacity_bytes.saturating_sub(fixed + slack);
        let slot_count = (usable / (object as u64 + 2 * entry)).min(MAX_SLOTS);
        if slot_count == 0 {
            return Err(StoreError::bad_options(format!(
                "capacity {} holds no {object}-byte slot beside a {wal_bytes}-byte WAL",
                opts.capacity_bytes
            )));
        }
        let checkpoint_bytes = checkpoint::area_bytes(slot_count, blocks);
        let ckpt0 = fixed;
        let layout = StoreLayout {
            capacity_bytes: opts.capacity_bytes,
            object_size_bytes: object,
            store_id,
            wal_offset: SUPERBLOCK_BYTES,
            wal_bytes,
            checkpoint_offsets: [ckpt0, ckpt0 + checkpoint_bytes],
            checkpoint_bytes,
            slots_offset: ckpt0 + 2 * checkpoint_bytes,
            slot_count: slot_count as u32,
        };
        assert!(layout.slot_offset(layout.slot_count) <= layout.capacity_bytes);
        Ok(layout)
    }

    /// 4 KiB blocks per object.
    pub fn blocks_per_slot(&self) -> u32 {
        self.object_size_bytes / BLOCK_BYTES
    }

    /// u64 words in an allocation bitmap.
    pub fn alloc_words(&self) -> usize {
        (self.blocks_per_slot() as usize).div_ceil(64)
    }

    /// File offset of `slot` (or of the end of the slot region for `slot == slot_count`).
    pub fn slot_offset(&self, slot: u32) -> u64 {
        self.slots_offset + slot as u64 * self.object_size_bytes as u64
    }

    /// The superblock bytes describing this layout.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(SUPERBLOCK_BYTES as usize);
        b.extend_from_slice(&MAGIC);
        for v in [
            SUPERBLOCK_FORMAT_VERSION,
            BLOCK_BYTES,
            self.object_size_bytes,
            self.slot_count,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for v in [
            self.capacity_bytes,
            self.store_id,
            self.wal_offset,
            self.wal_bytes,
            self.checkpoint_offsets[0],
            self.checkpoint_offsets[1],
            self.checkpoint_bytes,
            self.slots_offset,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(b.len(), ENCODED_BYTES);
        b.resize(SUPERBLOCK_BYTES as usize, 0);
        b
    }

    /// Parse and check a superblock: its crc, and that its geometry is exactly what
    /// [`StoreLayout::compute`] yields for its capacity, object size and WAL size.
    pub(crate) fn decode(b: &[u8]) -> Result<StoreLayout, StoreError> {
        if b.len() < ENCODED_BYTES || b[0..8] != MAGIC {
            return Err(StoreError::corrupt("no store superblock (bad magic)"));
        }
        let stored = u32_at(b, ENCODED_BYTES - 4);
        if crc32c::crc32c(&b[..ENCODED_BYTES - 4]) != stored {
            return Err(StoreError::corrupt("superblock crc mismatch"));
        }
        let version = u32_at(b, 8);
        if version != SUPERBLOCK_FORMAT_VERSION {
            return Err(StoreError::corrupt(format!(
                "superblock format version {version}, this build reads {SUPERBLOCK_FORMAT_VERSION}"
            )));
        }
        if u32_at(b, 12) != BLOCK_BYTES {
            return Err(StoreError::corrupt("superblock block size is not 4096"));
        }
        let found = StoreLayout {
            object_size_bytes: u32_at(b, 16),
            slot_count: u32_at(b, 20),
            capacity_bytes: u64_at(b, 24),
            store_id: u64_at(b, 32),
            wal_offset: u64_at(b, 40),
            wal_bytes: u64_at(b, 48),
            checkpoint_offsets: [u64_at(b, 56), u64_at(b, 64)],
            checkpoint_bytes: u64_at(b, 72),
            slots_offset: u64_at(b, 80),
        };
        let opts = StoreOptions {
            capacity_bytes: found.capacity_bytes,
            object_size_bytes: found.object_size_bytes,
            wal_bytes: found.wal_bytes,
        };
        let expected = StoreLayout::compute(&opts, found.store_id)
            .map_err(|e| StoreError::corrupt(format!("superblock geometry: {e}")))?;
        if expected != found {
            return Err(StoreError::corrupt(format!(
                "superblock geometry {found:?} differs from the computed {expected:?}"
            )));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_fits_capacity_and_roundtrips() {
        for (cap, obj) in [(5 << 20, 4096), (64 << 20, 128 << 10), (1 << 40, 4 << 20)] {
            let opts = StoreOptions {
                capacity_bytes: cap,
                object_size_bytes: obj,
                wal_bytes: 0,
            };
            let l = StoreLayout::compute(&opts, 42).expect("layout");
            assert!(l.slot_offset(l.slot_count) <= cap);
            let entry = checkpoint::entry_bytes(l.blocks_per_slot()) as u64;
            let waste_max = 2 * (8192 + entry);
            assert!(
                l.slot_offset(l.slot_count + 1) + waste_max > cap,
                "wastes only the slack"
            );
            assert_eq!(l.slots_offset % 4096, 0);
            assert_eq!(StoreLayout::decode(&l.encode()).expect("decode"), l);
        }
    }

    #[test]
    fn bad_options_and_damaged_superblocks_are_refused() {
        let bad = |o: u32, c: u64| {
            StoreLayout::compute(
                &StoreOptions {
                    capacity_bytes: c,
                    object_size_bytes: o,
                    wal_bytes: 0,
                },
                1,
            )
        };
        assert!(matches!(
            bad(3000, 1 << 30),
            Err(StoreError::BadOptions { .. })
        ));
        assert!(matches!(
            bad(8 << 20, 1 << 30),
            Err(StoreError::BadOptions { .. })
        ));
        assert!(matches!(
            bad(4096, 4 << 20),
            Err(StoreError::BadOptions { .. })
        ));
        let l = bad(4096, 8 << 20).expect("layout");
        let mut b = l.encode();
        b[30] ^= 1;
        assert!(matches!(
            StoreLayout::decode(&b),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
