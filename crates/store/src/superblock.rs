//! The superblock: the store's geometry, computed once at create time and never rewritten.
//!
//! Byte layout: `docs/design.md`, "Local store" → "Superblock".

use crate::checkpoint;
use crate::crc_pages::CrcGeometry;
use crate::error::StoreError;
use crate::options::{
    StoreOptions, BLOCK_BYTES, MAX_OBJECT_BYTES, MAX_WAL_BYTES, MIN_OBJECT_BYTES, MIN_WAL_BYTES,
};
use crate::wal::{u32_at, u64_at};
use basalt_proto::size::human_bytes;

/// Bytes reserved for the superblock at offset 0.
pub const SUPERBLOCK_BYTES: u64 = 4096;
/// Format version of the superblock layout written now: 2, block crcs in crc regions on
/// disk. Version 1 (crcs in RAM and in the checkpoints) is still opened.
pub const SUPERBLOCK_FORMAT_VERSION: u32 = 2;
const MAGIC: [u8; 8] = *b"BSLTSTOR";
/// Bytes of a version-1 superblock, its crc included.
const ENCODED_V1_BYTES: usize = 92;
/// Bytes of a version-2 superblock, its crc included.
const ENCODED_V2_BYTES: usize = 116;
/// Most slots [`StoreLayout::compute`] adds one by one past its conservative estimate.
const FIT_STEPS_MAX: u64 = 1 << 16;
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
    /// File offsets of the two crc regions; None for a store of format version 1, whose
    /// crcs live in RAM and in its checkpoints.
    pub crc_region_offsets: Option<[u64; 2]>,
}

/// Whether `b` (a medium's first bytes) starts with the superblock magic: the medium is meant
/// to hold a store, valid or not.
pub(crate) fn has_magic(b: &[u8]) -> bool {
    b.len() >= MAGIC.len() && b[..MAGIC.len()] == MAGIC
}

impl StoreLayout {
    /// Place the regions of a new store (format version 2) for `opts`: superblock, WAL, two
    /// checkpoint areas sized for a full table, two crc regions, then as many slots as fit.
    pub fn compute(opts: &StoreOptions, store_id: u64) -> Result<StoreLayout, StoreError> {
        StoreLayout::compute_version(opts, store_id, SUPERBLOCK_FORMAT_VERSION)
    }

    /// [`StoreLayout::compute`] for superblock format `version` (1 or 2).
    pub(crate) fn compute_version(
        opts: &StoreOptions,
        store_id: u64,
        version: u32,
    ) -> Result<StoreLayout, StoreError> {
        let object = opts.object_size_bytes;
        if !object.is_power_of_two() || !(MIN_OBJECT_BYTES..=MAX_OBJECT_BYTES).contains(&object) {
            return Err(StoreError::bad_options(format!(
                "object size {} is not a power of two from {} to {}",
                human_bytes(object as u64),
                human_bytes(MIN_OBJECT_BYTES as u64),
                human_bytes(MAX_OBJECT_BYTES as u64)
            )));
        }
        let wal_bytes = opts.effective_wal_bytes();
        if !wal_bytes.is_multiple_of(BLOCK_BYTES as u64)
            || !(MIN_WAL_BYTES..=MAX_WAL_BYTES).contains(&wal_bytes)
        {
            return Err(StoreError::bad_options(format!(
                "WAL size {} is not a multiple of 4 KiB from {} to {}",
                human_bytes(wal_bytes),
                human_bytes(MIN_WAL_BYTES),
                human_bytes(MAX_WAL_BYTES)
            )));
        }
        let paged = version >= 2;
        let blocks = object / BLOCK_BYTES;
        let format = checkpoint::TableFormat {
            blocks_per_slot: blocks,
            paged,
        };
        let fixed = SUPERBLOCK_BYTES + wal_bytes;
        let metadata = |slots: u64| {
            let crc_regions = if paged {
                2 * CrcGeometry::new(slots as u32, blocks).region_bytes()
            } else {
                0
            };
            2 * checkpoint::area_bytes(slots, format) + crc_regions
        };
        let fits =
            |slots: u64| fixed + metadata(slots) + slots * object as u64 <= opts.capacity_bytes;
        // A conservative estimate (every rounding charged), then one slot more while it fits.
        let entry = format.entry_bytes() as u64;
        let page = CrcGeometry::new(1, blocks);
        let crc_per_slot = if paged {
            2 * (page.page_bytes as u64).div_ceil(page.slots_per_page as u64)
        } else {
            0
        };
        let slack = 2 * (checkpoint::HEADER_BYTES as u64 + 4095) + 2 * page.page_bytes as u64;
        let usable = opts.capacity_bytes.saturating_sub(fixed + slack);
        let page_list = if paged { 8 } else { 0 };
        let mut slot_count =
            (usable / (object as u64 + 2 * entry + page_list + crc_per_slot)).min(MAX_SLOTS);
        for _ in 0..FIT_STEPS_MAX {
            if slot_count >= MAX_SLOTS || !fits(slot_count + 1) {
                break;
            }
            slot_count += 1;
        }
        if slot_count == 0 || !fits(slot_count) {
            return Err(StoreError::bad_options(format!(
                "capacity {} holds no {object}-byte slot beside a {wal_bytes}-byte WAL",
                opts.capacity_bytes
            )));
        }
        let checkpoint_bytes = checkpoint::area_bytes(slot_count, format);
        let ckpt0 = fixed;
        let crc0 = ckpt0 + 2 * checkpoint_bytes;
        let crc_bytes = if paged {
            CrcGeometry::new(slot_count as u32, blocks).region_bytes()
        } else {
            0
        };
        let layout = StoreLayout {
            capacity_bytes: opts.capacity_bytes,
            object_size_bytes: object,
            store_id,
            wal_offset: SUPERBLOCK_BYTES,
            wal_bytes,
            checkpoint_offsets: [ckpt0, ckpt0 + checkpoint_bytes],
            checkpoint_bytes,
            slots_offset: crc0 + 2 * crc_bytes,
            slot_count: slot_count as u32,
            crc_region_offsets: paged.then_some([crc0, crc0 + crc_bytes]),
        };
        assert!(layout.slot_offset(layout.slot_count) <= layout.capacity_bytes);
        Ok(layout)
    }

    /// The superblock format version of this store.
    pub fn format_version(&self) -> u32 {
        if self.crc_region_offsets.is_some() {
            2
        } else {
            1
        }
    }

    /// What its checkpoint tables hold.
    pub(crate) fn table_format(&self) -> checkpoint::TableFormat {
        checkpoint::TableFormat {
            blocks_per_slot: self.blocks_per_slot(),
            paged: self.crc_region_offsets.is_some(),
        }
    }

    /// Where its crc pages are (None: crcs in RAM, format version 1).
    pub(crate) fn crc_geometry(&self) -> Option<CrcGeometry> {
        self.crc_region_offsets
            .map(|_| CrcGeometry::new(self.slot_count, self.blocks_per_slot()))
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
            self.format_version(),
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
        if let Some(crc_regions) = self.crc_region_offsets {
            let crc_bytes = crc_regions[1] - crc_regions[0];
            for v in [crc_regions[0], crc_regions[1], crc_bytes] {
                b.extend_from_slice(&v.to_le_bytes());
            }
        }
        let crc = crc32c::crc32c(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(b.len(), self.encoded_bytes());
        b.resize(SUPERBLOCK_BYTES as usize, 0);
        b
    }

    fn encoded_bytes(&self) -> usize {
        if self.crc_region_offsets.is_some() {
            ENCODED_V2_BYTES
        } else {
            ENCODED_V1_BYTES
        }
    }

    /// Parse and check a superblock: its crc, and that its geometry is exactly what
    /// [`StoreLayout::compute`] yields for its capacity, object size and WAL size.
    pub(crate) fn decode(b: &[u8]) -> Result<StoreLayout, StoreError> {
        if b.len() < ENCODED_V2_BYTES || b[0..8] != MAGIC {
            return Err(StoreError::corrupt("no store superblock (bad magic)"));
        }
        let version = u32_at(b, 8);
        let encoded = match version {
            1 => ENCODED_V1_BYTES,
            2 => ENCODED_V2_BYTES,
            _ => {
                return Err(StoreError::corrupt(format!(
                    "superblock format version {version}, this build reads 1 and 2"
                )))
            }
        };
        let stored = u32_at(b, encoded - 4);
        if crc32c::crc32c(&b[..encoded - 4]) != stored {
            return Err(StoreError::corrupt("superblock crc mismatch"));
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
            crc_region_offsets: (version >= 2).then(|| [u64_at(b, 88), u64_at(b, 96)]),
        };
        if version >= 2 && u64_at(b, 104) != u64_at(b, 96).wrapping_sub(u64_at(b, 88)) {
            return Err(StoreError::corrupt("superblock crc region size"));
        }
        let opts = StoreOptions {
            capacity_bytes: found.capacity_bytes,
            object_size_bytes: found.object_size_bytes,
            wal_bytes: found.wal_bytes,
        };
        let expected = StoreLayout::compute_version(&opts, found.store_id, version)
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
        // Goal: in both formats the slots fill the capacity (one more would not fit), every
        // region is 4 KiB aligned and in order, and the superblock decodes to the layout.
        let cases = [
            (5 << 20, 4096),
            (64 << 20, 128 << 10),
            (1 << 40, 4 << 20),
            (1 << 40, 128 << 10),
        ];
        for version in [1, 2] {
            for (cap, obj) in cases {
                let opts = StoreOptions {
                    capacity_bytes: cap,
                    object_size_bytes: obj,
                    wal_bytes: 0,
                };
                let l = StoreLayout::compute_version(&opts, 42, version).expect("layout");
                assert_eq!(l.format_version(), version);
                assert!(l.slot_offset(l.slot_count) <= cap);
                let regions = l.crc_region_offsets.unwrap_or([l.slots_offset; 2]);
                let starts = [
                    l.wal_offset,
                    l.checkpoint_offsets[0],
                    l.checkpoint_offsets[1],
                    regions[0],
                    regions[1],
                    l.slots_offset,
                ];
                assert!(starts.windows(2).all(|w| w[0] <= w[1]), "{l:?}");
                assert!(starts.iter().all(|s| s % 4096 == 0), "{l:?}");
                assert_eq!(StoreLayout::decode(&l.encode()).expect("decode"), l);
            }
        }
    }

    #[test]
    fn one_slot_more_never_fits() {
        // Goal: the slot count is the largest that fits: the layout computed for the same
        // options with one slot more overflows the capacity.
        for version in [1, 2] {
            for (cap, obj) in [(5 << 20, 4096), (64 << 20, 128 << 10), (300 << 20, 4 << 20)] {
                let opts = StoreOptions {
                    capacity_bytes: cap,
                    object_size_bytes: obj,
                    wal_bytes: 0,
                };
                let l = StoreLayout::compute_version(&opts, 1, version).expect("layout");
                let format = l.table_format();
                let n = l.slot_count as u64 + 1;
                let regions = l.crc_geometry().map_or(0, |_| {
                    2 * CrcGeometry::new(n as u32, l.blocks_per_slot()).region_bytes()
                });
                let needed = SUPERBLOCK_BYTES
                    + l.wal_bytes
                    + 2 * checkpoint::area_bytes(n, format)
                    + regions
                    + n * obj as u64;
                assert!(
                    needed > cap,
                    "version {version}, {cap} B of {obj} B objects"
                );
            }
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
