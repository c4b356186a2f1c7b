//! The checkpoint format: the whole in-RAM object table, written to one of two alternating
//! areas so that a torn checkpoint always leaves the previous one intact. A checkpoint is
//! written as a stream of bounded pieces ([`AreaWriter`]), never built whole in RAM.
//!
//! Byte layout: `docs/design.md`, "Local store" → "Checkpoint area".

use crate::crc_pages::CrcGeometry;
use crate::error::StoreError;
use crate::wal::{u32_at, u64_at};
use basalt_proto::{ObjectId, Version};

/// Size of the checkpoint header at the start of an area.
pub(crate) const HEADER_BYTES: usize = 64;
/// Format version of the checkpoints of a store with crcs in RAM (superblock version 1).
/// Version 2 has the layout of version 1 and says that the WAL after it is written in
/// block-aligned batches (each batch starts at a 4 KiB boundary; replay continues at the
/// next boundary after a commit record). Version 1 checkpoints (byte-packed batches) are
/// still read.
const IN_RAM_VERSION: u32 = 2;
/// The oldest version still read (stores with crcs in RAM).
const OLDEST_VERSION: u32 = 1;
/// Format version of the checkpoints of a store with crc regions (superblock version 2):
/// entries without crcs, then the list of crc pages written; WAL batches block-aligned.
const PAGED_VERSION: u32 = 3;
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
    /// Number of table entries.
    pub entry_count: u64,
    /// Number of crc pages listed after the entries (format version 3; else 0).
    pub page_count: u32,
    /// Written by `close()`: nothing follows in the WAL.
    pub clean: bool,
    /// Batches after `wal_pos` start at 4 KiB boundaries (format version 2).
    pub aligned_batches: bool,
}

/// One object as a checkpoint records it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct EntryRef<'a> {
    pub obj: ObjectId,
    pub version: Version,
    pub slot: u32,
    /// Allocation bitmap, `words_per_slot` words.
    pub alloc: &'a [u64],
    /// crc32c of every block of the slot (0 for holes); None in a store whose crcs live in
    /// crc regions.
    pub crcs: Option<&'a [u32]>,
}

/// What a store's checkpoint tables hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TableFormat {
    pub blocks_per_slot: u32,
    /// Crcs in crc regions (format version 3: no crcs in the entries, a page list after
    /// them), not in the table.
    pub paged: bool,
}

impl TableFormat {
    /// Bytes of one table entry (8-byte aligned).
    pub fn entry_bytes(&self) -> usize {
        let words = (self.blocks_per_slot as usize).div_ceil(64);
        let crcs = if self.paged {
            0
        } else {
            4 * self.blocks_per_slot as usize
        };
        (ENTRY_FIXED_BYTES + 8 * words + crcs).next_multiple_of(8)
    }

    fn words(&self) -> usize {
        (self.blocks_per_slot as usize).div_ceil(64)
    }

    /// The version its checkpoints are written with.
    fn version(&self) -> u32 {
        if self.paged {
            PAGED_VERSION
        } else {
            IN_RAM_VERSION
        }
    }

    /// Versions read for it.
    fn reads(&self, version: u32) -> bool {
        if self.paged {
            version == PAGED_VERSION
        } else {
            (OLDEST_VERSION..=IN_RAM_VERSION).contains(&version)
        }
    }
}

/// Bytes reserved for each of the two areas: room for a full table of `slot_count` entries
/// and, for a paged store, a list of every crc page.
pub(crate) fn area_bytes(slot_count: u64, format: TableFormat) -> u64 {
    let pages = if format.paged {
        4 * CrcGeometry::new(slot_count as u32, format.blocks_per_slot).pages as u64
    } else {
        0
    };
    (HEADER_BYTES as u64 + slot_count * format.entry_bytes() as u64 + pages)
        .next_multiple_of(AREA_ALIGN_BYTES)
}

/// Encode a small checkpoint (header, table, page list) into `out`, replacing its contents,
/// padded to whole blocks. Store code streams its checkpoints instead ([`AreaWriter`]).
pub(crate) fn encode<'a>(
    out: &mut Vec<u8>,
    header: &CheckpointHeader,
    format: TableFormat,
    entries: impl Iterator<Item = EntryRef<'a>> + Clone,
    pages: &[u32],
) {
    let header = CheckpointHeader {
        entry_count: entries.clone().count() as u64,
        page_count: pages.len() as u32,
        ..*header
    };
    let mut w = AreaWriter::new(&header, format, 0, std::mem::take(out));
    for e in entries {
        w.push_entry(&e);
    }
    w.push_pages(pages);
    let mut image = Vec::new();
    let no_error = w.finish(|bytes, at| {
        image.resize(at as usize + bytes.len(), 0);
        image[at as usize..].copy_from_slice(bytes);
        Ok::<(), std::convert::Infallible>(())
    });
    let Ok(_) = no_error;
    *out = image;
}

/// Encode one entry into `out` (exactly [`TableFormat::entry_bytes`] long); its crcs only
/// if `out` has room for them (an in-RAM store's format).
pub(crate) fn encode_entry(out: &mut [u8], e: &EntryRef<'_>) {
    let words = e.alloc.len();
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
    if let Some(crcs) = e.crcs.filter(|_| out.len() > crc_base) {
        for (i, c) in crcs.iter().enumerate() {
            out[crc_base + 4 * i..crc_base + 4 * i + 4].copy_from_slice(&c.to_le_bytes());
        }
    }
}

/// The header of `header.entry_count` entries, its crc field zero.
fn header_bytes(header: &CheckpointHeader, format: TableFormat) -> [u8; HEADER_BYTES] {
    let flags = if header.clean { FLAG_CLEAN } else { 0 };
    let entry_len = format.entry_bytes() as u32;
    let mut h = [0u8; HEADER_BYTES];
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&format.version().to_le_bytes());
    h[12..16].copy_from_slice(&flags.to_le_bytes());
    h[16..24].copy_from_slice(&header.seq.to_le_bytes());
    h[24..32].copy_from_slice(&header.wal_pos.to_le_bytes());
    h[32..40].copy_from_slice(&header.next_lsn.to_le_bytes());
    h[40..48].copy_from_slice(&header.entry_count.to_le_bytes());
    h[48..52].copy_from_slice(&entry_len.to_le_bytes());
    h[52..56].copy_from_slice(&format.blocks_per_slot.to_le_bytes());
    h[60..64].copy_from_slice(&header.page_count.to_le_bytes());
    h
}

/// A checkpoint written into its area as a stream: the caller pushes the entries (exactly
/// the header's `entry_count`), then the page list, and writes the whole blocks gathered
/// whenever
/// [`AreaWriter::wants_write`] says so; [`AreaWriter::finish`] writes the rest, then the
/// first block last, since it holds the crc32c of everything. Offsets given to the write
/// function are area offsets plus the area's start, block-aligned; the bytes whole blocks.
pub(crate) struct AreaWriter {
    area_offset: u64,
    entry_len: usize,
    expected: u64,
    count: u64,
    expected_pages: u32,
    pages: u32,
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
        format: TableFormat,
        area_offset: u64,
        mut buf: Vec<u8>,
    ) -> AreaWriter {
        let head = header_bytes(header, format);
        buf.clear();
        buf.extend_from_slice(&head);
        AreaWriter {
            area_offset,
            entry_len: format.entry_bytes(),
            expected: header.entry_count,
            count: 0,
            expected_pages: header.page_count,
            pages: 0,
            buf,
            buf_at: 0,
            first_block: Vec::new(),
            crc: crc32c::crc32c(&head),
        }
    }

    /// Append an entry encoded by [`encode_entry`].
    pub fn push_encoded(&mut self, entry: &[u8]) {
        assert_eq!(entry.len(), self.entry_len, "an encoded entry");
        assert_eq!(self.pages, 0, "entries come before the page list");
        self.buf.extend_from_slice(entry);
        self.crc = crc32c::crc32c_append(self.crc, entry);
        self.count += 1;
    }

    /// Append an entry.
    pub fn push_entry(&mut self, e: &EntryRef<'_>) {
        assert_eq!(self.pages, 0, "entries come before the page list");
        let start = self.buf.len();
        self.buf.resize(start + self.entry_len, 0);
        encode_entry(&mut self.buf[start..], e);
        self.crc = crc32c::crc32c_append(self.crc, &self.buf[start..]);
        self.count += 1;
    }

    /// Append the numbers of the crc pages this checkpoint wrote (after every entry).
    pub fn push_pages(&mut self, pages: &[u32]) {
        let start = self.buf.len();
        for p in pages {
            self.buf.extend_from_slice(&p.to_le_bytes());
        }
        self.crc = crc32c::crc32c_append(self.crc, &self.buf[start..]);
        self.pages += pages.len() as u32;
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
            (self.count, self.pages),
            (self.expected, self.expected_pages),
            "a checkpoint holds the entries and pages its header counts"
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
    /// Bytes of header, table and page list: the span the crc covers.
    pub total_bytes: u64,
}

/// Parse the header at the start of an area; `None` when it is not a checkpoint of a store
/// with this format (never written, torn, or garbage) or claims more than `area_bytes`.
pub(crate) fn parse_header(
    bytes: &[u8],
    format: TableFormat,
    area_bytes: u64,
) -> Option<ParsedHeader> {
    if bytes.len() < HEADER_BYTES || bytes[0..8] != MAGIC {
        return None;
    }
    let entry_len = u32_at(bytes, 48) as u64;
    let version = u32_at(bytes, 8);
    if !format.reads(version)
        || u32_at(bytes, 52) != format.blocks_per_slot
        || entry_len != format.entry_bytes() as u64
    {
        return None;
    }
    let entry_count = u64_at(bytes, 40);
    let page_count = if format.paged { u32_at(bytes, 60) } else { 0 };
    let total_bytes = entry_count
        .checked_mul(entry_len)?
        .checked_add(HEADER_BYTES as u64 + 4 * page_count as u64)?;
    if total_bytes > area_bytes {
        return None;
    }
    Some(ParsedHeader {
        header: CheckpointHeader {
            seq: u64_at(bytes, 16),
            wal_pos: u64_at(bytes, 24),
            next_lsn: u64_at(bytes, 32),
            entry_count,
            page_count,
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

/// Call `f` for every entry of a verified checkpoint of `header`.
pub(crate) fn for_each_entry(
    bytes: &[u8],
    header: &CheckpointHeader,
    format: TableFormat,
    mut f: impl FnMut(EntryRef<'_>) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let entry_len = format.entry_bytes();
    let words = format.words();
    let mut alloc = vec![0u64; words];
    let mut crcs = vec![0u32; format.blocks_per_slot as usize];
    let table = &bytes[HEADER_BYTES..HEADER_BYTES + header.entry_count as usize * entry_len];
    for e in table.chunks_exact(entry_len) {
        for (i, w) in alloc.iter_mut().enumerate() {
            *w = u64_at(e, ENTRY_FIXED_BYTES + 8 * i);
        }
        if !format.paged {
            let crc_base = ENTRY_FIXED_BYTES + 8 * words;
            for (i, c) in crcs.iter_mut().enumerate() {
                *c = u32_at(e, crc_base + 4 * i);
            }
        }
        f(EntryRef {
            obj: ObjectId::new(u64_at(e, 0), u64_at(e, 8)),
            version: Version::new(u64_at(e, 16), u64_at(e, 24)),
            slot: u32_at(e, 32),
            alloc: &alloc,
            crcs: (!format.paged).then_some(&crcs[..]),
        })?;
    }
    Ok(())
}

/// The crc pages listed after the entries of a verified checkpoint of `header`.
pub(crate) fn pages(bytes: &[u8], header: &CheckpointHeader, format: TableFormat) -> Vec<u32> {
    let start = HEADER_BYTES + header.entry_count as usize * format.entry_bytes();
    (0..header.page_count as usize)
        .map(|i| u32_at(bytes, start + 4 * i))
        .collect()
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

    const IN_RAM: TableFormat = TableFormat {
        blocks_per_slot: 4,
        paged: false,
    };
    const PAGED: TableFormat = TableFormat {
        blocks_per_slot: 4,
        paged: true,
    };

    #[test]
    fn a_streamed_checkpoint_holds_its_first_block_back_and_spans_many_pieces() {
        // Goal: a checkpoint larger than a piece is written as whole blocks at increasing
        // offsets inside its area, the first block (header and crc) last, and reads back as
        // a valid checkpoint with every entry and its page list.
        let format = TableFormat {
            blocks_per_slot: 1024,
            paged: false,
        };
        let words = [u64::MAX; 16];
        let crcs = [7u32; 1024];
        let count = 3 * STREAM_CHUNK_BYTES as u64 / format.entry_bytes() as u64;
        let header = CheckpointHeader {
            seq: 9,
            wal_pos: 4096,
            next_lsn: 5,
            entry_count: count,
            page_count: 0,
            clean: false,
            aligned_batches: true,
        };
        let base = 1 << 20;
        let mut w = AreaWriter::new(&header, format, base, Vec::new());
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
                crcs: Some(&crcs),
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
        let parsed = parse_header(area, format, area.len() as u64).expect("header");
        let bytes = &area[..parsed.total_bytes as usize];
        assert!(crc_matches(bytes));
        let mut n = 0;
        for_each_entry(bytes, &parsed.header, format, |e| {
            assert_eq!((e.obj, e.crcs), (ObjectId::new(3, n), Some(&crcs[..])));
            n += 1;
            Ok(())
        })
        .expect("entries");
        assert_eq!(n, count);
    }

    #[test]
    fn a_table_roundtrips_in_both_formats_and_a_flipped_bit_is_caught() {
        // Goal: the table (with crcs in RAM stores, with a page list in paged ones) reads
        // back as written; a format reads only its own versions; any flipped bit fails the
        // crc.
        let alloc = [0b1011u64];
        let crcs = [1u32, 2, 0, 4];
        for format in [IN_RAM, PAGED] {
            let header = CheckpointHeader {
                seq: 5,
                wal_pos: 12345,
                next_lsn: 77,
                entry_count: 0,
                page_count: 0,
                clean: true,
                aligned_batches: true,
            };
            let entries = (0..3).map(|i| EntryRef {
                obj: ObjectId::new(1, i),
                version: Version::new(2, i),
                slot: i as u32 * 2,
                alloc: &alloc,
                crcs: Some(&crcs),
            });
            let pages = if format.paged { vec![0, 3] } else { Vec::new() };
            let mut image = Vec::new();
            encode(&mut image, &header, format, entries, &pages);
            assert_eq!(image.len() % 4096, 0, "whole blocks");
            let area = area_bytes(10, format);
            let parsed = parse_header(&image, format, area).expect("header");
            let table = HEADER_BYTES + 3 * format.entry_bytes();
            assert_eq!(parsed.total_bytes, (table + 4 * pages.len()) as u64);
            assert_eq!(format.entry_bytes(), if format.paged { 48 } else { 64 });
            let mut out = image[..parsed.total_bytes as usize].to_vec();
            assert_eq!(
                parsed.header,
                CheckpointHeader {
                    entry_count: 3,
                    page_count: pages.len() as u32,
                    ..header
                }
            );
            assert!(crc_matches(&out));
            let mut seen = Vec::new();
            for_each_entry(&out, &parsed.header, format, |e| {
                let want = (!format.paged).then_some(&crcs[..]);
                assert_eq!((e.alloc, e.crcs), (&alloc[..], want));
                seen.push((e.obj, e.slot));
                Ok(())
            })
            .expect("entries");
            assert_eq!(seen[2], (ObjectId::new(1, 2), 4));
            assert_eq!(super::pages(&out, &parsed.header, format), pages);
            let other = TableFormat {
                paged: !format.paged,
                ..format
            };
            assert!(parse_header(&out, other, area).is_none(), "other format");
            let wider = TableFormat {
                blocks_per_slot: 8,
                ..format
            };
            assert!(parse_header(&out, wider, area).is_none(), "other geometry");
            let last = out.len() - 1;
            out[last] ^= 0x10;
            assert!(!crc_matches(&out));
        }
    }
}
