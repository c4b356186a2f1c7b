//! The write-ahead log record format: a pure encoder and decoder, no I/O (fuzzed).
//!
//! A record is a 32-byte header, a metadata part covered by the header's crc32c and, for
//! writes only, whole 4 KiB data blocks, each covered by its own crc32c listed in the
//! metadata (so the data is hashed once, and a torn data block is caught like a torn header).
//! Byte layout: `docs/design.md`, "Local store" → "WAL record".

use crate::options::{BLOCK_BYTES, MAX_BLOCKS_PER_OBJECT};
use basalt_proto::{ObjectId, Version};

/// First four bytes of every record ("BWAL").
pub const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"BWAL");
/// Format version of the record layout this code writes and reads.
pub const RECORD_FORMAT_VERSION: u16 = 1;
/// Size of the fixed record header.
pub const RECORD_HEADER_BYTES: usize = 32;
/// Most data blocks one write record carries; longer writes are split into several records,
/// so that one record stays far below the smallest WAL.
pub const MAX_RECORD_BLOCKS: u32 = 64;
/// Size of a commit record (header only): every batch of records ends with one.
pub const COMMIT_RECORD_BYTES: usize = RECORD_HEADER_BYTES;

const BLOCK: usize = BLOCK_BYTES as usize;
const OBJ_VERSION_BYTES: usize = 32;
const WRITE_META_FIXED_BYTES: usize = OBJ_VERSION_BYTES + 12;
const REMAP_META_FIXED_BYTES: usize = OBJ_VERSION_BYTES + 8;
const TRIM_META_BYTES: usize = OBJ_VERSION_BYTES + 12;
const DELETE_META_BYTES: usize = OBJ_VERSION_BYTES + 4;
const MOVE_META_BYTES: usize = OBJ_VERSION_BYTES + 4 + 16;
const MERGE_META_FIXED_BYTES: usize = OBJ_VERSION_BYTES + 12 + 16 + 4;
/// Largest metadata part of any record (a remap of a 4 MiB object).
pub const MAX_META_BYTES: usize = REMAP_META_FIXED_BYTES + 4 * MAX_BLOCKS_PER_OBJECT as usize;

const KIND_WRITE: u16 = 1;
const KIND_REMAP: u16 = 2;
const KIND_TRIM: u16 = 3;
const KIND_DELETE: u16 = 4;
const KIND_COMMIT: u16 = 5;
const KIND_MOVE: u16 = 6;
const KIND_MERGE: u16 = 7;

/// One decoded record: its place in the log and what it does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalRecord<'a> {
    /// Log sequence number: +1 per record, never reused, across laps of the circular log.
    pub lsn: u64,
    /// Identity of the store that wrote it (records of another store never replay).
    pub store_id: u64,
    /// The operation.
    pub body: WalBody<'a>,
}

/// The operation a record logs. `obj` is the object, `version` the version the operation
/// gives it, `slot` the slot holding it (or, for a new object, taking it).
#[allow(missing_docs)] // the fields are named by the variant docs above and docs/design.md
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalBody<'a> {
    /// Whole blocks `first_block..first_block + crcs.len()` of `obj` now hold `data` (one 4 KiB
    /// block per crc).
    Write {
        obj: ObjectId,
        version: Version,
        slot: u32,
        first_block: u32,
        crcs: BlockCrcs<'a>,
        data: &'a [u8],
    },
    /// `obj` now lives, whole, in `slot`, whose blocks have `crcs` (the data went straight to
    /// the slot, not to the log); the previous slot is freed.
    Remap {
        obj: ObjectId,
        version: Version,
        slot: u32,
        crcs: BlockCrcs<'a>,
    },
    /// Blocks `first_block..first_block + block_count` of `obj` become holes (count may be 0:
    /// a version-only update); an object left without blocks is removed and its slot freed.
    Trim {
        obj: ObjectId,
        version: Version,
        slot: u32,
        first_block: u32,
        block_count: u32,
    },
    /// `obj` is removed and its slot freed.
    Delete {
        obj: ObjectId,
        version: Version,
        slot: u32,
    },
    /// `from` (which lives in `slot` at `version`) becomes `obj`: the slot and its blocks
    /// move to the new key, `from` is gone, and `obj`'s previous slot (if any) is freed. One
    /// record, so the switch is atomic (an erasure-coded chunk's stash becomes the committed
    /// chunk; docs/design.md, "Erasure-coded pools").
    Move {
        obj: ObjectId,
        version: Version,
        slot: u32,
        from: ObjectId,
    },
    /// Blocks `first_block..first_block + crcs.len()` of `obj` (which exists, in `slot`) now
    /// hold `data`, `obj`'s version becomes `version`, and `from` (in `from_slot`, at
    /// `version`) is removed. One record, so an erasure-coded partial stash merges into its
    /// committed chunk atomically; no blocks is a version-only bump (docs/design.md,
    /// "Erasure-coded pools").
    Merge {
        obj: ObjectId,
        version: Version,
        slot: u32,
        first_block: u32,
        from: ObjectId,
        from_slot: u32,
        crcs: BlockCrcs<'a>,
        data: &'a [u8],
    },
    /// End of a batch written by one flush. A record followed by a later batch was durable
    /// before that batch was written (recovery uses this to skip verifying remaps).
    Commit,
}

/// A borrowed little-endian array of block crc32c values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BlockCrcs<'a>(&'a [u8]);

impl<'a> BlockCrcs<'a> {
    /// Number of crcs.
    pub fn len(&self) -> usize {
        self.0.len() / 4
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The `i`-th crc. Panics when `i >= len()`.
    pub fn get(&self, i: usize) -> u32 {
        u32_at(self.0, 4 * i)
    }

    /// All crcs in order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        let bytes = self.0;
        (0..bytes.len() / 4).map(move |i| u32_at(bytes, 4 * i))
    }

    /// The raw little-endian bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }
}

impl std::fmt::Debug for BlockCrcs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Why bytes are not a valid record. Replay treats any of these as the end of the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    /// The input ends before the record does.
    #[error("record needs {need} bytes, only {have} available")]
    Truncated {
        /// Bytes required from the record start (at least; a longer read may reveal more).
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Not a record (or not one written by this format).
    #[error("bad record magic {found:#x}")]
    BadMagic {
        /// The first four bytes, as a little-endian u32.
        found: u32,
    },
    /// A record format version this code does not read.
    #[error("unsupported record format version {found}")]
    BadVersion {
        /// The version found.
        found: u16,
    },
    /// An unknown record kind.
    #[error("unknown record kind {kind}")]
    BadKind {
        /// The kind found.
        kind: u16,
    },
    /// The metadata length or a count inside it is impossible for the record kind.
    #[error("record kind {kind} has impossible metadata length {meta_len}")]
    BadLength {
        /// The record kind.
        kind: u16,
        /// The metadata length found.
        meta_len: u32,
    },
    /// The header and metadata do not match their crc32c: torn, stale or damaged.
    #[error("record crc {stored:#x} does not match computed {computed:#x}")]
    BadCrc {
        /// The crc in the header.
        stored: u32,
        /// The crc of the bytes.
        computed: u32,
    },
    /// A field is out of its bounds (block range beyond the largest object).
    #[error("record field out of bounds: {what}")]
    BadField {
        /// Which bound.
        what: &'static str,
    },
    /// A data block does not match its crc: a torn or stale write.
    #[error("record data block {index} does not match its crc")]
    BadBlock {
        /// Index of the block within the record.
        index: u32,
    },
}

/// Decode the record at the start of `bytes`, verifying everything (header crc, bounds, and
/// every data block's crc). Returns the record and its encoded length. Never panics.
pub fn decode_wal_record(bytes: &[u8]) -> Result<(WalRecord<'_>, usize), WalError> {
    decode_record(bytes, true)
}

/// [`decode_wal_record`], optionally skipping the data-block crcs (for batches this process
/// just encoded, where they are only re-checked in debug builds).
pub(crate) fn decode_record(
    bytes: &[u8],
    verify_data: bool,
) -> Result<(WalRecord<'_>, usize), WalError> {
    let have = bytes.len();
    if have < RECORD_HEADER_BYTES {
        return Err(WalError::Truncated {
            need: RECORD_HEADER_BYTES,
            have,
        });
    }
    let magic = u32_at(bytes, 0);
    if magic != RECORD_MAGIC {
        return Err(WalError::BadMagic { found: magic });
    }
    let version = u16_at(bytes, 4);
    if version != RECORD_FORMAT_VERSION {
        return Err(WalError::BadVersion { found: version });
    }
    let kind = u16_at(bytes, 6);
    let lsn = u64_at(bytes, 8);
    let store_id = u64_at(bytes, 16);
    let meta_len_u32 = u32_at(bytes, 24);
    let stored_crc = u32_at(bytes, 28);
    let meta_len = meta_len_u32 as usize;
    let bad_length = WalError::BadLength {
        kind,
        meta_len: meta_len_u32,
    };
    let fixed_ok = match kind {
        KIND_WRITE => meta_len >= WRITE_META_FIXED_BYTES,
        KIND_REMAP => meta_len >= REMAP_META_FIXED_BYTES,
        KIND_TRIM => meta_len == TRIM_META_BYTES,
        KIND_DELETE => meta_len == DELETE_META_BYTES,
        KIND_COMMIT => meta_len == 0,
        KIND_MOVE => meta_len == MOVE_META_BYTES,
        KIND_MERGE => meta_len >= MERGE_META_FIXED_BYTES,
        _ => return Err(WalError::BadKind { kind }),
    };
    if !fixed_ok || meta_len > MAX_META_BYTES {
        return Err(bad_length);
    }
    let meta_end = RECORD_HEADER_BYTES + meta_len;
    if have < meta_end {
        return Err(WalError::Truncated {
            need: meta_end,
            have,
        });
    }
    let computed = record_crc(
        &bytes[..RECORD_HEADER_BYTES],
        &bytes[RECORD_HEADER_BYTES..meta_end],
    );
    if computed != stored_crc {
        return Err(WalError::BadCrc {
            stored: stored_crc,
            computed,
        });
    }
    let meta = &bytes[RECORD_HEADER_BYTES..meta_end];
    let mut end = meta_end;
    let body = match kind {
        KIND_WRITE => {
            let (obj, version) = obj_version_at(meta);
            let slot = u32_at(meta, 32);
            let first_block = u32_at(meta, 36);
            let count = u32_at(meta, 40);
            if count == 0 || count > MAX_RECORD_BLOCKS {
                return Err(bad_length);
            }
            if meta_len != WRITE_META_FIXED_BYTES + 4 * count as usize {
                return Err(bad_length);
            }
            check_block_range(first_block, count)?;
            let crcs = BlockCrcs(&meta[WRITE_META_FIXED_BYTES..]);
            let data = logged_blocks(bytes, meta_end, crcs, verify_data)?;
            end = meta_end + data.len();
            WalBody::Write {
                obj,
                version,
                slot,
                first_block,
                crcs,
                data,
            }
        }
        KIND_REMAP => {
            let (obj, version) = obj_version_at(meta);
            let slot = u32_at(meta, 32);
            let count = u32_at(meta, 36);
            if count == 0 || count > MAX_BLOCKS_PER_OBJECT {
                return Err(bad_length);
            }
            if meta_len != REMAP_META_FIXED_BYTES + 4 * count as usize {
                return Err(bad_length);
            }
            WalBody::Remap {
                obj,
                version,
                slot,
                crcs: BlockCrcs(&meta[REMAP_META_FIXED_BYTES..]),
            }
        }
        KIND_TRIM => {
            let (obj, version) = obj_version_at(meta);
            let first_block = u32_at(meta, 36);
            let block_count = u32_at(meta, 40);
            check_block_range(first_block, block_count)?;
            WalBody::Trim {
                obj,
                version,
                slot: u32_at(meta, 32),
                first_block,
                block_count,
            }
        }
        KIND_DELETE => {
            let (obj, version) = obj_version_at(meta);
            WalBody::Delete {
                obj,
                version,
                slot: u32_at(meta, 32),
            }
        }
        KIND_MOVE => {
            let (obj, version) = obj_version_at(meta);
            let from = ObjectId::new(u64_at(meta, 36), u64_at(meta, 44));
            if from == obj {
                return Err(WalError::BadField {
                    what: "move of an object onto itself",
                });
            }
            WalBody::Move {
                obj,
                version,
                slot: u32_at(meta, 32),
                from,
            }
        }
        KIND_MERGE => {
            let (obj, version) = obj_version_at(meta);
            let first_block = u32_at(meta, 36);
            let count = u32_at(meta, 40);
            let from = ObjectId::new(u64_at(meta, 44), u64_at(meta, 52));
            if count > MAX_RECORD_BLOCKS || meta_len != MERGE_META_FIXED_BYTES + 4 * count as usize
            {
                return Err(bad_length);
            }
            if from == obj {
                return Err(WalError::BadField {
                    what: "merge of an object into itself",
                });
            }
            check_block_range(first_block, count)?;
            let crcs = BlockCrcs(&meta[MERGE_META_FIXED_BYTES..]);
            let data = logged_blocks(bytes, meta_end, crcs, verify_data)?;
            end = meta_end + data.len();
            WalBody::Merge {
                obj,
                version,
                slot: u32_at(meta, 32),
                first_block,
                from,
                from_slot: u32_at(meta, 60),
                crcs,
                data,
            }
        }
        _ => WalBody::Commit,
    };
    Ok((
        WalRecord {
            lsn,
            store_id,
            body,
        },
        end,
    ))
}

/// The data blocks after a record's metadata (ending at `meta_end`), one per crc, checked
/// against their crcs when `verify`.
fn logged_blocks<'a>(
    bytes: &'a [u8],
    meta_end: usize,
    crcs: BlockCrcs<'_>,
    verify: bool,
) -> Result<&'a [u8], WalError> {
    let end = meta_end + crcs.len() * BLOCK;
    let have = bytes.len();
    if have < end {
        return Err(WalError::Truncated { need: end, have });
    }
    let data = &bytes[meta_end..end];
    if verify {
        for (i, crc) in crcs.iter().enumerate() {
            if crc32c::crc32c(&data[i * BLOCK..(i + 1) * BLOCK]) != crc {
                return Err(WalError::BadBlock { index: i as u32 });
            }
        }
    }
    Ok(data)
}

/// Append the encoding of `record` to `out` (the exact inverse of [`decode_wal_record`]).
pub fn encode_wal_record(out: &mut Vec<u8>, record: &WalRecord<'_>) {
    let (lsn, id) = (record.lsn, record.store_id);
    match record.body {
        WalBody::Write {
            obj,
            version,
            slot,
            first_block,
            crcs,
            data,
        } => {
            let start = begin(out, KIND_WRITE, lsn, id, write_meta_bytes(crcs.len()));
            put_obj_version(out, obj, version);
            put_u32s(out, &[slot, first_block, crcs.len() as u32]);
            out.extend_from_slice(crcs.as_bytes());
            seal(out, start);
            out.extend_from_slice(data);
        }
        WalBody::Remap {
            obj,
            version,
            slot,
            crcs,
        } => {
            let start = begin(out, KIND_REMAP, lsn, id, remap_meta_bytes(crcs.len()));
            put_obj_version(out, obj, version);
            put_u32s(out, &[slot, crcs.len() as u32]);
            out.extend_from_slice(crcs.as_bytes());
            seal(out, start);
        }
        WalBody::Trim {
            obj,
            version,
            slot,
            first_block,
            block_count,
        } => encode_trim(out, lsn, id, obj, version, slot, first_block, block_count),
        WalBody::Delete { obj, version, slot } => encode_delete(out, lsn, id, obj, version, slot),
        WalBody::Move {
            obj,
            version,
            slot,
            from,
        } => encode_move(out, lsn, id, obj, version, slot, from),
        WalBody::Merge {
            obj,
            version,
            slot,
            first_block,
            from,
            from_slot,
            crcs,
            data,
        } => {
            let start = begin(out, KIND_MERGE, lsn, id, merge_meta_bytes(crcs.len()));
            put_obj_version(out, obj, version);
            put_u32s(out, &[slot, first_block, crcs.len() as u32]);
            put_from(out, from, from_slot);
            out.extend_from_slice(crcs.as_bytes());
            seal(out, start);
            out.extend_from_slice(data);
        }
        WalBody::Commit => encode_commit(out, lsn, id),
    }
}

/// Encoded size of a write record carrying `blocks` blocks.
pub(crate) fn write_record_bytes(blocks: usize) -> usize {
    RECORD_HEADER_BYTES + write_meta_bytes(blocks) + blocks * BLOCK
}

/// Encoded size of a remap record for an object of `blocks` blocks.
pub(crate) fn remap_record_bytes(blocks: usize) -> usize {
    RECORD_HEADER_BYTES + remap_meta_bytes(blocks)
}

/// Encoded size of a trim record.
pub(crate) const TRIM_RECORD_BYTES: usize = RECORD_HEADER_BYTES + TRIM_META_BYTES;
/// Encoded size of a delete record.
pub(crate) const DELETE_RECORD_BYTES: usize = RECORD_HEADER_BYTES + DELETE_META_BYTES;

/// Append a write record whose data is `blocks` (each exactly 4 KiB, crcs precomputed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_write(
    out: &mut Vec<u8>,
    lsn: u64,
    store_id: u64,
    obj: ObjectId,
    version: Version,
    slot: u32,
    first_block: u32,
    crcs: &[u32],
    blocks: &[&[u8]],
) {
    debug_assert_eq!(crcs.len(), blocks.len());
    debug_assert!(!blocks.is_empty() && blocks.len() <= MAX_RECORD_BLOCKS as usize);
    let start = begin(out, KIND_WRITE, lsn, store_id, write_meta_bytes(crcs.len()));
    put_obj_version(out, obj, version);
    put_u32s(out, &[slot, first_block, crcs.len() as u32]);
    put_u32s(out, crcs);
    seal(out, start);
    for block in blocks {
        debug_assert_eq!(block.len(), BLOCK);
        out.extend_from_slice(block);
    }
}

/// Append a remap record.
pub(crate) fn encode_remap(
    out: &mut Vec<u8>,
    lsn: u64,
    store_id: u64,
    obj: ObjectId,
    version: Version,
    slot: u32,
    crcs: &[u32],
) {
    let start = begin(out, KIND_REMAP, lsn, store_id, remap_meta_bytes(crcs.len()));
    put_obj_version(out, obj, version);
    put_u32s(out, &[slot, crcs.len() as u32]);
    put_u32s(out, crcs);
    seal(out, start);
}

/// Append a trim record.
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_trim(
    out: &mut Vec<u8>,
    lsn: u64,
    store_id: u64,
    obj: ObjectId,
    version: Version,
    slot: u32,
    first_block: u32,
    block_count: u32,
) {
    let start = begin(out, KIND_TRIM, lsn, store_id, TRIM_META_BYTES);
    put_obj_version(out, obj, version);
    put_u32s(out, &[slot, first_block, block_count]);
    seal(out, start);
}

/// Append a delete record.
pub(crate) fn encode_delete(
    out: &mut Vec<u8>,
    lsn: u64,
    store_id: u64,
    obj: ObjectId,
    version: Version,
    slot: u32,
) {
    let start = begin(out, KIND_DELETE, lsn, store_id, DELETE_META_BYTES);
    put_obj_version(out, obj, version);
    put_u32s(out, &[slot]);
    seal(out, start);
}

/// Encoded size of a move record.
pub(crate) const MOVE_RECORD_BYTES: usize = RECORD_HEADER_BYTES + MOVE_META_BYTES;

/// Append a move record.
pub(crate) fn encode_move(
    out: &mut Vec<u8>,
    lsn: u64,
    store_id: u64,
    obj: ObjectId,
    version: Version,
    slot: u32,
    from: ObjectId,
) {
    let start = begin(out, KIND_MOVE, lsn, store_id, MOVE_META_BYTES);
    put_obj_version(out, obj, version);
    put_u32s(out, &[slot]);
    out.extend_from_slice(&from.inode.to_le_bytes());
    out.extend_from_slice(&from.index.to_le_bytes());
    seal(out, start);
}

/// Encoded size of a merge record carrying `blocks` blocks.
pub(crate) fn merge_record_bytes(blocks: usize) -> usize {
    RECORD_HEADER_BYTES + merge_meta_bytes(blocks) + blocks * BLOCK
}

/// Append a merge record whose data is `blocks` (each exactly 4 KiB, crcs precomputed; none
/// for a version-only bump).
#[allow(clippy::too_many_arguments)]
pub(crate) fn encode_merge(
    out: &mut Vec<u8>,
    lsn: u64,
    store_id: u64,
    obj: ObjectId,
    version: Version,
    slot: u32,
    first_block: u32,
    from: (ObjectId, u32),
    crcs: &[u32],
    blocks: &[&[u8]],
) {
    debug_assert_eq!(crcs.len(), blocks.len());
    debug_assert!(blocks.len() <= MAX_RECORD_BLOCKS as usize);
    let start = begin(out, KIND_MERGE, lsn, store_id, merge_meta_bytes(crcs.len()));
    put_obj_version(out, obj, version);
    put_u32s(out, &[slot, first_block, crcs.len() as u32]);
    put_from(out, from.0, from.1);
    put_u32s(out, crcs);
    seal(out, start);
    for block in blocks {
        debug_assert_eq!(block.len(), BLOCK);
        out.extend_from_slice(block);
    }
}

fn put_from(out: &mut Vec<u8>, from: ObjectId, from_slot: u32) {
    out.extend_from_slice(&from.inode.to_le_bytes());
    out.extend_from_slice(&from.index.to_le_bytes());
    out.extend_from_slice(&from_slot.to_le_bytes());
}

/// Append a commit record (end of a flush batch).
pub(crate) fn encode_commit(out: &mut Vec<u8>, lsn: u64, store_id: u64) {
    let start = begin(out, KIND_COMMIT, lsn, store_id, 0);
    seal(out, start);
}

fn write_meta_bytes(blocks: usize) -> usize {
    WRITE_META_FIXED_BYTES + 4 * blocks
}

fn merge_meta_bytes(blocks: usize) -> usize {
    MERGE_META_FIXED_BYTES + 4 * blocks
}

fn remap_meta_bytes(blocks: usize) -> usize {
    REMAP_META_FIXED_BYTES + 4 * blocks
}

fn check_block_range(first_block: u32, count: u32) -> Result<(), WalError> {
    match first_block.checked_add(count) {
        Some(end) if end <= MAX_BLOCKS_PER_OBJECT => Ok(()),
        _ => Err(WalError::BadField {
            what: "block range beyond the largest object",
        }),
    }
}

/// Write the header with a zero crc; returns where the record starts.
fn begin(out: &mut Vec<u8>, kind: u16, lsn: u64, store_id: u64, meta_len: usize) -> usize {
    let start = out.len();
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&RECORD_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&store_id.to_le_bytes());
    out.extend_from_slice(&(meta_len as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    start
}

/// Fill in the crc of the record starting at `start` once its metadata is complete.
fn seal(out: &mut [u8], start: usize) {
    let meta_len = u32_at(out, start + 24) as usize;
    let header_end = start + RECORD_HEADER_BYTES;
    assert_eq!(out.len(), header_end + meta_len, "record metadata length");
    let crc = record_crc(&out[start..header_end], &out[header_end..]);
    out[start + 28..header_end].copy_from_slice(&crc.to_le_bytes());
}

/// crc32c over the header (crc field taken as zero) followed by the metadata.
fn record_crc(header: &[u8], meta: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&header[..28]);
    let crc = crc32c::crc32c_append(crc, &[0; 4]);
    crc32c::crc32c_append(crc, meta)
}

fn put_obj_version(out: &mut Vec<u8>, obj: ObjectId, version: Version) {
    for v in [obj.inode, obj.index, version.epoch, version.counter] {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn put_u32s(out: &mut Vec<u8>, values: &[u32]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn obj_version_at(meta: &[u8]) -> (ObjectId, Version) {
    (
        ObjectId::new(u64_at(meta, 0), u64_at(meta, 8)),
        Version::new(u64_at(meta, 16), u64_at(meta, 24)),
    )
}

/// Little-endian reads; callers have checked the length, so a short slice is a bug.
pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut a = [0; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_le_bytes(a)
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJ: ObjectId = ObjectId::new(7, 9);
    const VER: Version = Version::new(3, 4);

    fn block(fill: u8) -> Vec<u8> {
        vec![fill; BLOCK]
    }

    #[test]
    fn every_kind_roundtrips_and_reencodes_identically() {
        let (a, b) = (block(1), block(2));
        let crcs = [crc32c::crc32c(&a), crc32c::crc32c(&b)];
        let mut out = Vec::new();
        encode_write(&mut out, 10, 99, OBJ, VER, 5, 3, &crcs, &[&a, &b]);
        encode_remap(&mut out, 11, 99, OBJ, VER, 6, &crcs);
        encode_trim(&mut out, 12, 99, OBJ, VER, 6, 1, 0);
        encode_delete(&mut out, 13, 99, OBJ, VER, 6);
        let stash = ObjectId::new(7, 10);
        encode_merge(
            &mut out,
            14,
            99,
            OBJ,
            VER,
            5,
            3,
            (stash, 8),
            &crcs,
            &[&a, &b],
        );
        encode_merge(&mut out, 15, 99, OBJ, VER, 5, 0, (stash, 8), &[], &[]);
        encode_commit(&mut out, 16, 99);
        assert_eq!(
            out.len(),
            write_record_bytes(2)
                + remap_record_bytes(2)
                + TRIM_RECORD_BYTES
                + DELETE_RECORD_BYTES
                + merge_record_bytes(2)
                + merge_record_bytes(0)
                + COMMIT_RECORD_BYTES
        );
        let mut off = 0;
        let mut lsns = Vec::new();
        while off < out.len() {
            let (rec, len) = decode_wal_record(&out[off..]).expect("valid record");
            let mut again = Vec::new();
            encode_wal_record(&mut again, &rec);
            assert_eq!(again, out[off..off + len]);
            lsns.push(rec.lsn);
            if let WalBody::Write {
                first_block,
                crcs: c,
                data,
                ..
            } = rec.body
            {
                assert_eq!((first_block, c.len(), data.len()), (3, 2, 2 * BLOCK));
                assert_eq!(c.get(1), crcs[1]);
            }
            if let WalBody::Merge {
                from,
                from_slot,
                crcs: c,
                data,
                ..
            } = rec.body
            {
                assert_eq!((from, from_slot), (stash, 8));
                assert_eq!(data.len(), c.len() * BLOCK);
                assert!(rec.lsn == 15 || data[BLOCK..] == b[..]);
            }
            off += len;
        }
        assert_eq!(lsns, [10, 11, 12, 13, 14, 15, 16]);
    }

    #[test]
    fn every_truncation_reports_truncated_and_every_bit_flip_is_rejected() {
        let a = block(0xab);
        let mut out = Vec::new();
        encode_write(&mut out, 1, 2, OBJ, VER, 0, 0, &[crc32c::crc32c(&a)], &[&a]);
        for cut in 0..out.len() {
            assert!(matches!(
                decode_wal_record(&out[..cut]),
                Err(WalError::Truncated { .. })
            ));
        }
        for bit in (0..out.len() * 8).step_by(7) {
            let mut bad = out.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_wal_record(&bad).is_err(),
                "flip of bit {bit} accepted"
            );
        }
    }

    /// Decode as the fuzz target does: never panic, and what decodes re-encodes identically.
    fn decode_like_the_fuzzer(bytes: &[u8]) {
        if let Ok((rec, len)) = decode_wal_record(bytes) {
            let mut again = Vec::new();
            encode_wal_record(&mut again, &rec);
            assert_eq!(again, bytes[..len]);
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_and_mutated_bytes_never_panic_the_decoder(
            noise in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
            flips in proptest::collection::vec((0usize..5000, 0u8..8), 0..4),
            cut in 0usize..5000,
        ) {
            decode_like_the_fuzzer(&noise);
            let a = block(7);
            let mut valid = Vec::new();
            encode_write(&mut valid, 5, 6, OBJ, VER, 1, 2, &[crc32c::crc32c(&a)], &[&a]);
            encode_trim(&mut valid, 6, 6, OBJ, VER, 1, 0, 3);
            encode_move(&mut valid, 7, 6, OBJ, VER, 1, ObjectId::new(9, 9));
            let stash = (ObjectId::new(9, 9), 2);
            encode_merge(&mut valid, 8, 6, OBJ, VER, 1, 4, stash, &[crc32c::crc32c(&a)], &[&a]);
            for (at, bit) in flips {
                let at = at % valid.len();
                valid[at] ^= 1 << bit;
            }
            decode_like_the_fuzzer(&valid[..cut.min(valid.len())]);
            decode_like_the_fuzzer(&valid);
        }
    }

    #[test]
    fn impossible_counts_are_rejected_before_reading_data() {
        let mut out = Vec::new();
        encode_trim(&mut out, 1, 2, OBJ, VER, 0, MAX_BLOCKS_PER_OBJECT, 1);
        assert!(matches!(
            decode_wal_record(&out),
            Err(WalError::BadField { .. })
        ));
        let mut out = Vec::new();
        encode_merge(&mut out, 1, 2, OBJ, VER, 0, 0, (OBJ, 1), &[], &[]);
        assert!(
            matches!(decode_wal_record(&out), Err(WalError::BadField { .. })),
            "a merge of an object into itself"
        );
        let mut out = Vec::new();
        encode_commit(&mut out, 1, 2);
        out[24] = 4; // metadata length on a commit
        assert!(matches!(
            decode_wal_record(&out),
            Err(WalError::BadLength { .. })
        ));
        out[24] = 0;
        out[6] = 42; // kind
        assert_eq!(decode_wal_record(&out), Err(WalError::BadKind { kind: 42 }));
    }
}
