//! The crc regions of a store of format version 2: where each slot's block crc32c values sit
//! on disk, and the format of a crc page (a 16-byte header, then the values of a run of
//! slots). Byte layout: `docs/design.md`, "Block crc32c values on disk".

use crate::wal::{u32_at, u64_at};
use std::ops::Range;

/// Bytes of a page's header: crc32c, page number, seq of the checkpoint that wrote it.
pub(crate) const PAGE_HEADER_BYTES: usize = 16;
const ALIGN_BYTES: usize = 4096;

/// How slots map onto crc pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrcGeometry {
    /// 4 KiB blocks per slot.
    pub blocks_per_slot: u32,
    /// Bytes of a page (a multiple of 4 KiB).
    pub page_bytes: u32,
    /// Slots whose values one page holds.
    pub slots_per_page: u32,
    /// Pages in a region.
    pub pages: u32,
    slot_count: u32,
}

impl CrcGeometry {
    /// The pages of a store of `slot_count` slots of `blocks_per_slot` blocks.
    pub fn new(slot_count: u32, blocks_per_slot: u32) -> CrcGeometry {
        let slot_bytes = 4 * blocks_per_slot as usize;
        let page_bytes = (PAGE_HEADER_BYTES + slot_bytes).next_multiple_of(ALIGN_BYTES);
        let slots_per_page = ((page_bytes - PAGE_HEADER_BYTES) / slot_bytes) as u32;
        CrcGeometry {
            blocks_per_slot,
            page_bytes: page_bytes as u32,
            slots_per_page,
            pages: slot_count.div_ceil(slots_per_page),
            slot_count,
        }
    }

    /// Bytes of one region.
    pub fn region_bytes(&self) -> u64 {
        self.pages as u64 * self.page_bytes as u64
    }

    /// The page holding `slot`'s values.
    pub fn page_of(&self, slot: u32) -> u32 {
        slot / self.slots_per_page
    }

    /// The slots whose values page `page` holds.
    pub fn slots_of(&self, page: u32) -> Range<u32> {
        let first = page * self.slots_per_page;
        first..(first + self.slots_per_page).min(self.slot_count)
    }

    /// Byte offset, within its page, of block `block` of `slot`.
    fn at(&self, slot: u32, block: usize) -> usize {
        let in_page = (slot % self.slots_per_page) as usize;
        PAGE_HEADER_BYTES + 4 * (in_page * self.blocks_per_slot as usize + block)
    }

    /// The value of block `block` of `slot` in its page `page`.
    pub fn get(&self, page: &[u8], slot: u32, block: usize) -> u32 {
        u32_at(page, self.at(slot, block))
    }

    /// Set the value of block `block` of `slot` in its page `page`.
    pub fn set(&self, page: &mut [u8], slot: u32, block: usize, crc: u32) {
        let at = self.at(slot, block);
        page[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// Stamp `page` as page number `number` written by checkpoint `seq`, and seal it with its
/// crc32c.
pub(crate) fn seal(page: &mut [u8], number: u32, seq: u64) {
    page[4..8].copy_from_slice(&number.to_le_bytes());
    page[8..16].copy_from_slice(&seq.to_le_bytes());
    let crc = crc32c::crc32c(&page[4..]);
    page[0..4].copy_from_slice(&crc.to_le_bytes());
}

/// Is `page`, read as page `number` of region `region`, a whole page that a checkpoint no
/// newer than `newest_seq` wrote there?
pub(crate) fn is_valid(page: &[u8], number: u32, region: usize, newest_seq: u64) -> bool {
    if page.len() < PAGE_HEADER_BYTES {
        return false;
    }
    let seq = u64_at(page, 8);
    u32_at(page, 0) == crc32c::crc32c(&page[4..])
        && u32_at(page, 4) == number
        && seq % 2 == region as u64
        && seq <= newest_seq
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_hold_whole_slots_and_checked_headers() {
        // Goal: a page holds a whole number of slots for every object size (31 at 32
        // blocks, one at 1024 in an 8 KiB page), values land where the spec says, and a
        // page is valid only as the page, region and checkpoint that wrote it.
        let g = CrcGeometry::new(100, 32);
        assert_eq!((g.page_bytes, g.slots_per_page, g.pages), (4096, 31, 4));
        assert_eq!(g.slots_of(3), 93..100);
        assert_eq!(g.page_of(62), 2);
        let big = CrcGeometry::new(10, 1024);
        assert_eq!(
            (big.page_bytes, big.slots_per_page, big.pages),
            (8192, 1, 10)
        );
        let one = CrcGeometry::new(5000, 1);
        assert_eq!(
            (one.page_bytes, one.slots_per_page, one.pages),
            (4096, 1020, 5)
        );
        let mut page = vec![0u8; 4096];
        g.set(&mut page, 33, 5, 0xdead_beef);
        assert_eq!(u32_at(&page, 16 + 4 * (2 * 32 + 5)), 0xdead_beef);
        assert_eq!(g.get(&page, 33, 5), 0xdead_beef);
        seal(&mut page, 1, 7);
        assert!(is_valid(&page, 1, 1, 7));
        assert!(!is_valid(&page, 2, 1, 7), "another page number");
        assert!(!is_valid(&page, 1, 0, 7), "the other region");
        assert!(
            !is_valid(&page, 1, 1, 6),
            "newer than the newest checkpoint"
        );
        page[100] ^= 1;
        assert!(!is_valid(&page, 1, 1, 7), "a flipped bit");
        assert!(!is_valid(&[0u8; 4096], 0, 0, 0), "a page never written");
    }
}
