//! The checkpoint format: the whole in-RAM object table, written to one of two alternating
//! areas so that a torn checkpoint always leaves the previous one intact. A checkpoint is
//! written as a stream of bounded pieces ([`AreaWriter`]), never built whole in RAM.
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
const BLOCK_BYTES: usize = crate::options::BLOCK_BYTES as usize;
/// Bytes of a checkpoint gathered before they are written (the leader's buffer; also what
/// the table's lock is held for while entries are encoded).
pub(crate) const STREAM_CHUNK_BYTES: usize = 1 << 20;

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

/// Encode a small checkpoint (header + table) into `out`, replacing its contents, padded to
/// whole blocks. Store code streams its checkpoints instead ([`AreaWriter`]).
pub(crate) fn encode<'a>(
    out: &mut Vec<u8>,
    header: &CheckpointHeader,
    blocks_per_slot: u32,
    entries: impl Iterator<Item = EntryRef<'a>> + Clone,
) {
    let header = CheckpointHeader {
        entry_count: entries.clone().count() as u64,
        ..*header
    };
    let mut w = AreaWriter::new(&header, blocks_per_slot, 0, std::mem::take(out));
    for e in entries {
        w.push_entry(&e);
    }
    let mut image = Vec::new();
    let no_error = w.finish(|bytes, at| {
        image.resize(at as usize + bytes.len(), 0);
        image[at as usize..].copy_from_slice(bytes);
        Ok::<(), std::convert::Infallible>(())
    });
    let Ok(_) = no_error;
    *out = image;
}

/// Encode one entry into `out` (exactly [`entry_bytes`] long).
pub(crate) fn encode_entry(out: &mut [u8], e: &EntryRef<'_>) {
    let words = e.alloc.len();
    debug_assert_eq!(out.len(), entry_bytes(e.crcs.len() as u32));
    out.fill(0);
    for (i, v) in [e.obj.inode, e.obj.index, e.version.epoch, e.version.counter]
        .into_iter()
        .enumerate()
    {
        out[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    out[32..36].copy_from_slice(&e.slot.to_le_bytes());
    for (i, w) in e.alloc.iter().enumerate() {
        let at = ENTRY_FIXED_BYTES + 8 * i;
        out[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }
    let crc_base = ENTRY_FIXED_BYTES + 8 * words;
    for (i, c) in e.crcs.iter().enumerate() {
        out[crc_base + 4 * i..crc_base + 4 * i + 4].copy_from_slice(&c.to_le_bytes());
    }
}

/// The header of `header.entry_count` entries, its crc field zero.
fn header_bytes(header: &CheckpointHeader, blocks_per_slot: u32) -> [u8; HEADER_BYTES] {
    let flags = if header.clean { FLAG_CLEAN } else { 0 };
    let entry_len = entry_bytes(blocks_per_slot) as u32;
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&flags.to_le_bytes());
    h[16..24].copy_from_slice(&header.seq.to_le_bytes());
    h[24..32].copy_from_slice(&header.wal_pos.to_le_bytes());
    h[32..40].copy_from_slice(&header.next_lsn.to_le_bytes());
    h[40..48].copy_from_slice(&header.entry_count.to_le_bytes());
    h[48..52].copy_from_slice(&entry_len.to_le_bytes());
    h[52..56].copy_from_slice(&blocks_per_slot.to_le_bytes());
    h
}

/// A checkpoint written into its area as a stream: the caller pushes the entries (exactly
/// the header's `entry_count`) and writes the whole blocks gathered whenever
/// [`AreaWriter::wants_write`] says so; [`AreaWriter::finish`] writes the rest, then the
/// first block last, since it holds the crc32c of everything. Offsets given to the write
/// function are area offsets plus the area's start, block-aligned; the bytes whole blocks.
pub(crate) struct AreaWriter {
    area_offset: u64,
    entry_len: usize,
    expected: u64,
    count: u64,
    /// Bytes not yet written; `buf[0]` is at area offset `buf_at`.
    buf: Vec<u8>,
    buf_at: u64,
    /// The area's first block, held back until the crc is known (empty until then).
    first_block: Vec<u8>,
    crc: u32,
}

impl AreaWriter {
    /// Start the checkpoint `header` (its `entry_count` fixed) for the area at `area_offset`,
    /// reusing `buf`.
    pub fn new(
        header: &CheckpointHeader,
        blocks_per_slot: u32,
        area_offset: u64,
        mut buf: Vec<u8>,
    ) -> AreaWriter {
        let head = header_bytes(header, blocks_per_slot);
        buf.clear();
        buf.extend_from_slice(&head);
        AreaWriter {
            area_offset,
            entry_len: entry_bytes(blocks_per_slot),
            expected: header.entry_count,
            count: 0,
            buf,
            buf_at: 0,
            first_block: Vec::new(),
            crc: crc32c::crc32c(&head),
        }
    }

    /// Append an entry encoded by [`encode_entry`].
    pub fn push_encoded(&mut self, entry: &[u8]) {
        assert_eq!(entry.len(), self.entry_len, "an encoded entry");
        self.buf.extend_from_slice(entry);
        self.crc = crc32c::crc32c_append(self.crc, entry);
        self.count += 1;
    }

    /// Append an entry.
    pub fn push_entry(&mut self, e: &EntryRef<'_>) {
        let start = self.buf.len();
        self.buf.resize(start + self.entry_len, 0);
        encode_entry(&mut self.buf[start..], e);
        self.crc = crc32c::crc32c_append(self.crc, &self.buf[start..]);
        self.count += 1;
    }

    /// Enough is gathered to be written ([`STREAM_CHUNK_BYTES`]).
    pub fn wants_write(&self) -> bool {
        self.buf.len() >= STREAM_CHUNK_BYTES
    }

    /// Write the whole blocks gathered (the first block of the area is held back).
    pub fn write_blocks<E>(
        &mut self,
        mut write: impl FnMut(&[u8], u64) -> Result<(), E>,
    ) -> Result<(), E> {
        let whole = self.buf.len() / BLOCK_BYTES * BLOCK_BYTES;
        let mut from = 0;
        if self.buf_at == 0 && whole > 0 {
            self.first_block = self.buf[..BLOCK_BYTES].to_vec();
            from = BLOCK_BYTES;
        }
        if whole > from {
            write(
                &self.buf[from..whole],
                self.area_offset + self.buf_at + from as u64,
            )?;
        }
        self.buf.drain(..whole);
        self.buf_at += whole as u64;
        Ok(())
    }

    /// Write what is left (padded with zeros to whole blocks), then the first block with the
    /// crc; returns the buffer for reuse. Panics if the entries pushed are not the count the
    /// header announced: the table changed under a checkpoint, a store bug.
    pub fn finish<E>(
        mut self,
        mut write: impl FnMut(&[u8], u64) -> Result<(), E>,
    ) -> Result<Vec<u8>, E> {
        assert_eq!(
            self.count, self.expected,
            "a checkpoint holds the entries its header counts"
        );
        let crc = self.crc.to_le_bytes();
        let padded = self.buf.len().next_multiple_of(BLOCK_BYTES);
        self.buf.resize(padded, 0);
        if self.buf_at == 0 {
            self.buf[56..60].copy_from_slice(&crc);
            write(&self.buf, self.area_offset)?;
        } else {
            if !self.buf.is_empty() {
                write(&self.buf, self.area_offset + self.buf_at)?;
            }
            self.first_block[56..60].copy_from_slice(&crc);
            write(&self.first_block, self.area_offset)?;
        }
        Ok(self.buf)
    }
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
    fn a_streamed_checkpoint_holds_its_first_block_back_and_spans_many_pieces() {
        // Goal: a checkpoint larger than a piece is written as whole blocks at increasing
        // offsets inside its area, the first block (header and crc) last, and reads back as
        // a valid checkpoint with every entry.
        let words = [u64::MAX; 16];
        let crcs = [7u32; 1024];
        let count = 3 * STREAM_CHUNK_BYTES as u64 / entry_bytes(1024) as u64;
        let header = CheckpointHeader {
            seq: 9,
            wal_pos: 4096,
            next_lsn: 5,
            entry_count: count,
            clean: false,
            aligned_batches: true,
        };
        let base = 1 << 20;
        let mut w = AreaWriter::new(&header, 1024, base, Vec::new());
        let mut disk = vec![0u8; base as usize + 4 * STREAM_CHUNK_BYTES];
        let mut writes = Vec::new();
        let mut put = |bytes: &[u8], at: u64| {
            assert_eq!((bytes.len() % 4096, at % 4096), (0, 0), "whole blocks");
            disk[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
            writes.push(at);
            Ok::<(), ()>(())
        };
        for i in 0..count {
            let e = EntryRef {
                obj: ObjectId::new(3, i),
                version: Version::new(1, i),
                slot: i as u32,
                alloc: &words,
                crcs: &crcs,
            };
            w.push_entry(&e);
            if w.wants_write() {
                w.write_blocks(&mut put).expect("write");
            }
        }
        w.finish(&mut put).expect("finish");
        assert!(writes.len() > 3, "written in pieces: {writes:?}");
        assert_eq!(writes.last(), Some(&base), "the first block goes last");
        let area = &disk[base as usize..];
        let parsed = parse_header(area, 1024, area.len() as u64).expect("header");
        assert!(crc_matches(&area[..parsed.total_bytes as usize]));
        let mut n = 0;
        for_each_entry(&area[..parsed.total_bytes as usize], 1024, |e| {
            assert_eq!(e.obj, ObjectId::new(3, n));
            n += 1;
            Ok(())
        })
        .expect("entries");
        assert_eq!(n, count);
    }

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
        let mut image = Vec::new();
        encode(&mut image, &header, 4, entries);
        assert_eq!(image.len() % 4096, 0, "whole blocks");
        let area = area_bytes(10, 4);
        let parsed = parse_header(&image, 4, area).expect("header");
        assert_eq!(
            parsed.total_bytes,
            (HEADER_BYTES + 3 * entry_bytes(4)) as u64
        );
        let mut out = image[..parsed.total_bytes as usize].to_vec();
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
