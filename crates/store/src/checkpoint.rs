//! The checkpoint format: the whole in-RAM object table, written to one of two alternating
//! areas so that a torn checkpoint always leaves the previous one intact.
//!
//! Byte layout: `docs/design.md`, "Local store" → "Checkpoint area".

use crate::error::StoreError;
use crate::wal::{u32_at, u64_at};
use basalt_proto::{ObjectId, Version};

/// Size of the checkpoint header at the start of an area.
pub(crate) const HEADER_BYTES: usize = 64;
/// Format version of the checkpoint layout written now. Version 2 has the layout of version 1
/// and says that the WAL after it is written in block-aligned batches (each batch starts at
/// a 4 KiB boundary; replay continues at the next boundary after a commit record). Version 1
/// checkpoints (byte-packed batches) are still read.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The oldest version still read.
const OLDEST_VERSION: u32 = 1;
const MAGIC: [u8; 8] = *b"BSLTCKPT";
const ENTRY_FIXED_BYTES: usize = 40;
const FLAG_CLEAN: u32 = 1;
const AREA_ALIGN_BYTES: u64 = 4096;

/// What a checkpoint says besides its table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CheckpointHeader {
    /// Increases by one per checkpoint; the area is `seq % 2`.
    pub seq: u64,
    /// Logical WAL position replay starts from.
    pub wal_pos: u64,
    /// LSN the record at `wal_pos` must carry.
    pub next_lsn: u64,
    /// Number of table entries (filled in by [`encode`]).
    pub entry_count: u64,
    /// Written by `close()`: nothing follows in the WAL.
    pub clean: bool,
    /// Batches after `wal_pos` start at 4 KiB boundaries (format version 2).
    pub aligned_batches: bool,
}

/// One object as a checkpoint records it.
pub(crate) struct EntryRef<'a> {
    pub obj: ObjectId,
    pub version: Version,
    pub slot: u32,
    /// Allocation bitmap, `words_per_slot` words.
    pub alloc: &'a [u64],
    /// crc32c of every block of the slot (0 for holes).
    pub crcs: &'a [u32],
}

/// Bytes of one table entry for slots of `blocks_per_slot` blocks (8-byte aligned).
pub(crate) fn entry_bytes(blocks_per_slot: u32) -> usize {
    let words = (blocks_per_slot as usize).div_ceil(64);
    (ENTRY_FIXED_BYTES + 8 * words + 4 * blocks_per_slot as usize).next_multiple_of(8)
}

/// Bytes reserved for each of the two areas: room for a full table of `slot_count` entries.
pub(crate) fn area_bytes(slot_count: u64, blocks_per_slot: u32) -> u64 {
    (HEADER_BYTES as u64 + slot_count * entry_bytes(blocks_per_slot) as u64)
        .next_multiple_of(AREA_ALIGN_BYTES)
}

/// Encode a checkpoint (header + table) into `out`, replacing its contents.
pub(crate) fn encode<'a>(
    out: &mut Vec<u8>,
    header: &CheckpointHeader,
    blocks_per_slot: u32,
    entries: impl Iterator<Item = EntryRef<'a>>,
) {
    let entry_len = entry_bytes(blocks_per_slot);
    out.clear();
    out.resize(HEADER_BYTES, 0);
    let mut count = 0u64;
    for e in entries {
        let start = out.len();
        debug_assert_eq!(e.crcs.len(), blocks_per_slot as usize);
        for v in [e.obj.inode, e.obj.index, e.version.epoch, e.version.counter] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&e.slot.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        for w in e.alloc {
            out.extend_from_slice(&w.to_le_bytes());
        }
        for c in e.crcs {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out.resize(start + entry_len, 0);
        count += 1;
    }
    let flags = if header.clean { FLAG_CLEAN } else { 0 };
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&flags.to_le_bytes());
    h[16..24].copy_from_slice(&header.seq.to_le_bytes());
    h[24..32].copy_from_slice(&header.wal_pos.to_le_bytes());
    h[32..40].copy_from_slice(&header.next_lsn.to_le_bytes());
    h[40..48].copy_from_slice(&count.to_le_bytes());
    h[48..52].copy_from_slice(&(entry_len as u32).to_le_bytes());
    h[52..56].copy_from_slice(&blocks_per_slot.to_le_bytes());
    out[..HEADER_BYTES].copy_from_slice(&h);
    let crc = area_crc(out);
    out[56..60].copy_from_slice(&crc.to_le_bytes());
}

/// A header that looks like one of ours, not yet checked against its crc.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ParsedHeader {
    pub header: CheckpointHeader,
    /// Bytes of header + table, the span the crc covers.
    pub total_bytes: u64,
}

/// Parse the header at the start of an area; `None` when it is not a checkpoint of a store
/// with this geometry (never written, torn, or garbage) or claims more than `area_bytes`.
pub(crate) fn parse_header(
    bytes: &[u8],
    blocks_per_slot: u32,
    area_bytes: u64,
) -> Option<ParsedHeader> {
    if bytes.len() < HEADER_BYTES || bytes[0..8] != MAGIC {
        return None;
    }
    let entry_len = u32_at(bytes, 48) as u64;
    let version = u32_at(bytes, 8);
    if !(OLDEST_VERSION..=FORMAT_VERSION).contains(&version)
        || u32_at(bytes, 52) != blocks_per_slot
        || entry_len != entry_bytes(blocks_per_slot) as u64
    {
        return None;
    }
    let entry_count = u64_at(bytes, 40);
    let total_bytes = entry_count
        .checked_mul(entry_len)?
        .checked_add(HEADER_BYTES as u64)?;
    if total_bytes > area_bytes {
        return None;
    }
    Some(ParsedHeader {
        header: CheckpointHeader {
            seq: u64_at(bytes, 16),
            wal_pos: u64_at(bytes, 24),
            next_lsn: u64_at(bytes, 32),
            entry_count,
            clean: u32_at(bytes, 12) & FLAG_CLEAN != 0,
            aligned_batches: version >= 2,
        },
        total_bytes,
    })
}

/// True when `bytes` (exactly `total_bytes` long) carries a matching crc.
pub(crate) fn crc_matches(bytes: &[u8]) -> bool {
    bytes.len() >= HEADER_BYTES && u32_at(bytes, 56) == area_crc(bytes)
}

/// Call `f` for every entry of a verified checkpoint.
pub(crate) fn for_each_entry(
    bytes: &[u8],
    blocks_per_slot: u32,
    mut f: impl FnMut(EntryRef<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let entry_len = entry_bytes(blocks_per_slot);
    let words = (blocks_per_slot as usize).div_ceil(64);
    let mut alloc = vec![0u64; words];
    let mut crcs = vec![0u32; blocks_per_slot as usize];
    for e in bytes[HEADER_BYTES..].chunks_exact(entry_len) {
        for (i, w) in alloc.iter_mut().enumerate() {
            *w = u64_at(e, ENTRY_FIXED_BYTES + 8 * i);
        }
        let crc_base = ENTRY_FIXED_BYTES + 8 * words;
        for (i, c) in crcs.iter_mut().enumerate() {
            *c = u32_at(e, crc_base + 4 * i);
        }
        f(EntryRef {
            obj: ObjectId::new(u64_at(e, 0), u64_at(e, 8)),
            version: Version::new(u64_at(e, 16), u64_at(e, 24)),
            slot: u32_at(e, 32),
            alloc: &alloc,
            crcs: &crcs,
        })?;
    }
    Ok(())
}

/// Rewrite the checkpoint at the start of `area` as format version 1 (byte-packed WAL
/// batches), its crc recomputed: how a store written before block-aligned batches looks.
#[cfg(test)]
pub(crate) fn downgrade_to_version_1(area: &mut [u8]) {
    let total = HEADER_BYTES + (u64_at(area, 40) * u64::from(u32_at(area, 48))) as usize;
    area[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc = area_crc(&area[..total]);
    area[56..60].copy_from_slice(&crc.to_le_bytes());
}

/// crc32c over the area with the crc field (bytes 56..60) taken as zero.
fn area_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&bytes[..56]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, &bytes[60..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_roundtrips_and_a_flipped_bit_is_caught() {
        let alloc = [0b1011u64];
        let crcs = [1u32, 2, 0, 4];
        let header = CheckpointHeader {
            seq: 5,
            wal_pos: 12345,
            next_lsn: 77,
            entry_count: 0,
            clean: true,
            aligned_batches: true,
        };
        let entries = (0..3).map(|i| EntryRef {
            obj: ObjectId::new(1, i),
            version: Version::new(2, i),
            slot: i as u32 * 2,
            alloc: &alloc,
            crcs: &crcs,
        });
        let mut out = Vec::new();
        encode(&mut out, &header, 4, entries);
        let area = area_bytes(10, 4);
        let parsed = parse_header(&out, 4, area).expect("header");
        assert_eq!(parsed.total_bytes as usize, out.len());
        assert_eq!(
            parsed.header,
            CheckpointHeader {
                entry_count: 3,
                ..header
            }
        );
        assert!(crc_matches(&out));
        let mut seen = Vec::new();
        for_each_entry(&out, 4, |e| {
            assert_eq!((e.alloc, e.crcs), (&alloc[..], &crcs[..]));
            seen.push((e.obj, e.slot));
            Ok(())
        })
        .expect("entries");
        assert_eq!(seen[2], (ObjectId::new(1, 2), 4));
        assert!(parse_header(&out, 8, area).is_none(), "other geometry");
        let last = out.len() - 1;
        out[last] ^= 0x10;
        assert!(!crc_matches(&out));
    }
}
