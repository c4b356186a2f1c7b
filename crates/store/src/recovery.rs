//! Creating a store file, and opening one: superblock, newest valid checkpoint, WAL replay.
//!
//! Replay runs in three passes over the live log: (1) scan records from the checkpoint's
//! position while each is intact, has the next LSN and this store's id; (2) verify the remaps
//! of the last, unconfirmed batch against their slots, cutting the log at the first whose data
//! did not land; (3) apply the surviving records to the table, then copy into place the newest
//! logged contents of each block whose slot still belongs to its writer. (Redoing every logged
//! write in order would be wrong: a slot freed later in the log may since hold a whole-object
//! write, whose data is only in the slot.)

use crate::checkpoint::{self, CheckpointHeader};
use crate::device::{DataFile, Disk};
use crate::engine::EngineKind;
use crate::error::{io_err, StoreError};
use crate::index::{Index, BLOCK};
use crate::journal::{Leader, WalBuffer};
use crate::medium::{device_capacity_bytes, BlockDevice, DeviceError};
use crate::options::{IoOptions, StoreOptions};
use crate::store::Store;
use crate::superblock::{StoreLayout, SUPERBLOCK_BYTES, SUPERBLOCK_FORMAT_VERSION};
use crate::wal::{
    self, BlockCrcs, WalBody, WalError, WalRecord, MAX_RECORD_BLOCKS, RECORD_HEADER_BYTES,
};
use basalt_proto::ObjectId;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

/// LSN of the first record a new store writes.
const FIRST_LSN: u64 = 1;
/// The WAL is read in pieces of this size during replay.
const WAL_READ_CHUNK_BYTES: usize = 1 << 20;
/// Decode attempts per record: header, metadata, then data may each need a longer read.
const DECODE_ATTEMPTS_MAX: usize = 4;

/// Create a new store file, fully allocated (docs/design.md, "Honest capacity"); on failure
/// the half-made file is removed again.
pub(crate) fn create(
    path: &Path,
    opts: &StoreOptions,
    io: &IoOptions,
) -> Result<Store, StoreError> {
    create_file(path, opts, io, Allocation::Full, SUPERBLOCK_FORMAT_VERSION)
}

/// Create a new store file whose slot region stays sparse: its capacity is a ceiling, not a
/// reservation (`basalt up` and tests on a developer's machine).
pub(crate) fn create_sparse(
    path: &Path,
    opts: &StoreOptions,
    io: &IoOptions,
) -> Result<Store, StoreError> {
    create_file(
        path,
        opts,
        io,
        Allocation::Sparse,
        SUPERBLOCK_FORMAT_VERSION,
    )
}

fn create_file(
    path: &Path,
    opts: &StoreOptions,
    io: &IoOptions,
    allocation: Allocation,
    version: u32,
) -> Result<Store, StoreError> {
    let layout = StoreLayout::compute_version(opts, new_store_id(), version)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(io_err("create store file"))?;
    let result = prepare_file(path, &file, &layout, allocation)
        .and_then(|()| engine_file(path, file, io))
        .and_then(|data| format(data, layout))
        .and_then(|store| sync_parent_dir(path).map(|()| store));
    if result.is_err() {
        let _ = std::fs::remove_file(path);
    }
    result
}

/// Create a new store on the block device `device` (opened exclusively): the whole device
/// unless `opts` asks for less. A device exists already: nothing is sized or removed, and
/// it has no holes to allocate.
pub(crate) fn create_device(
    device: BlockDevice,
    opts: &StoreOptions,
    io: &IoOptions,
) -> Result<Store, StoreError> {
    let opts = StoreOptions {
        capacity_bytes: device_capacity_bytes(opts, device.size_bytes()),
        ..opts.clone()
    };
    let layout = StoreLayout::compute(&opts, new_store_id())?;
    let file = device.into_data_file(io)?;
    // A device may hold an older store's second checkpoint area, which would outrank this
    // store's first checkpoint (checkpoints carry no store id): erase its header.
    file.write_at(
        &[0u8; BLOCK],
        layout.checkpoint_offsets[1],
        "erase the second checkpoint area",
    )?;
    format(file, layout)
}

/// Open the store on the block device `device` (opened exclusively) and recover it.
pub(crate) fn open_device(device: BlockDevice, io: &IoOptions) -> Result<Store, StoreError> {
    let head = device.read_head(SUPERBLOCK_BYTES as usize)?;
    if !crate::superblock::has_magic(&head) {
        return Err(DeviceError::NoStore {
            device: device.path().to_owned(),
        }
        .into());
    }
    recover(device.into_data_file(io)?)
}

/// Create a new store on `disk`, which must be at least `opts.capacity_bytes` long.
pub(crate) fn create_on(disk: Arc<dyn Disk>, opts: &StoreOptions) -> Result<Store, StoreError> {
    let layout = StoreLayout::compute(opts, new_store_id())?;
    let len = disk.size_bytes().map_err(io_err("size of the disk"))?;
    if len < layout.capacity_bytes {
        return Err(StoreError::bad_options(format!(
            "the disk holds {len} bytes, the store needs {}",
            layout.capacity_bytes
        )));
    }
    format(DataFile::new(disk), layout)
}

/// Lock a new file, size it and allocate it as `allocation` says.
fn prepare_file(
    path: &Path,
    file: &File,
    layout: &StoreLayout,
    allocation: Allocation,
) -> Result<(), StoreError> {
    lock_file(file)?;
    file.set_len(layout.capacity_bytes)
        .map_err(io_err("size store file"))?;
    match allocation {
        Allocation::Full => allocate(path, file, layout.capacity_bytes, "the store"),
        Allocation::Sparse => allocate(
            path,
            file,
            layout.slots_offset,
            "the store's WAL and metadata (its data region stays sparse)",
        ),
    }
}

/// Write an empty store's first checkpoint and superblock, durably.
fn format(file: DataFile, layout: StoreLayout) -> Result<Store, StoreError> {
    let index = Index::new(
        layout.slot_count,
        layout.blocks_per_slot(),
        layout.crc_geometry(),
        0,
        Vec::new(),
    );
    let header = CheckpointHeader {
        seq: 0,
        wal_pos: 0,
        next_lsn: FIRST_LSN,
        entry_count: 0,
        page_count: 0,
        clean: true,
        aligned_batches: true,
    };
    let mut image = Vec::new();
    checkpoint::encode(
        &mut image,
        &header,
        layout.table_format(),
        std::iter::empty(),
        &[],
    );
    file.write_at(
        &image,
        layout.checkpoint_offsets[0],
        "write first checkpoint",
    )?;
    // The checkpoint is durable before the superblock that makes the file a store.
    file.sync("fdatasync first checkpoint")?;
    file.write_at(&layout.encode(), 0, "write superblock")?;
    file.sync_all("fsync new store file")?;
    let wal = WalBuffer::new(layout.store_id, layout.wal_bytes, 0, 0, FIRST_LSN);
    let leader = Leader::new(FIRST_LSN - 1);
    Ok(Store::assemble(layout, file, index, wal, leader, 0))
}

/// Open a store and recover it; a store file created sparse (before stores were allocated
/// in full) is allocated now, under the rule of [`create`].
pub(crate) fn open(path: &Path, io: &IoOptions) -> Result<Store, StoreError> {
    open_file(path, io, Allocation::Full)
}

/// Open a store and recover it, leaving its file as sparse as it is (see [`create_sparse`]).
pub(crate) fn open_sparse(path: &Path, io: &IoOptions) -> Result<Store, StoreError> {
    open_file(path, io, Allocation::Sparse)
}

fn open_file(path: &Path, io: &IoOptions, allocation: Allocation) -> Result<Store, StoreError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io_err("open store file"))?;
    lock_file(&file)?;
    if allocation == Allocation::Full {
        let len = file.metadata().map_err(io_err("stat store file"))?.len();
        allocate(path, &file, len, "the store")?;
    }
    recover(engine_file(path, file, io)?)
}

/// The store file at `path`, whose lock `locked` holds, with its I/O run as `io` says:
/// opened once more with O_DIRECT if asked and the filesystem allows it.
fn engine_file(path: &Path, locked: File, io: &IoOptions) -> Result<DataFile, StoreError> {
    if io.engine == EngineKind::Inline && !io.direct {
        // Buffered syscalls on the caller's thread need no engine and no aligned bounce
        // buffer: the file is the medium, as before the engine existed.
        return Ok(DataFile::new(Arc::new(locked)));
    }
    let (io_file, direct) = if io.direct {
        let (io_file, direct) =
            crate::engine::open_direct(path).map_err(io_err("open store file for direct I/O"))?;
        if !direct {
            // The filesystem refused O_DIRECT (tmpfs): its I/O is memory copies that never
            // wait on a device, so the caller's thread runs them at a fraction of an engine's
            // cost (three thread hops per operation), as before the engine.
            drop(io_file);
            return Ok(DataFile::new(Arc::new(locked)));
        }
        (io_file, direct)
    } else {
        let again = locked.try_clone().map_err(io_err("open store file"))?;
        (again, false)
    };
    DataFile::with_engine(locked, io_file, direct, io)
}

/// Open the store on `disk` and recover it.
pub(crate) fn open_on(disk: Arc<dyn Disk>) -> Result<Store, StoreError> {
    recover(DataFile::new(disk))
}

/// Recover the store in `file`.
fn recover(file: DataFile) -> Result<Store, StoreError> {
    let len = file.size_bytes("stat store file")?;
    if len < SUPERBLOCK_BYTES {
        return Err(StoreError::corrupt("file is shorter than a superblock"));
    }
    // Whatever a killed predecessor left in the page cache becomes durable before we rely on
    // it, so a power cut after this open cannot take back what recovery built on.
    file.sync("fdatasync at open")?;
    let mut sb = vec![0u8; SUPERBLOCK_BYTES as usize];
    file.read_at(&mut sb, 0, "read superblock")?;
    let layout = StoreLayout::decode(&sb)?;
    if len < layout.capacity_bytes {
        return Err(StoreError::corrupt(format!(
            "file is {len} bytes, its superblock says {}",
            layout.capacity_bytes
        )));
    }
    let (header, mut index) = load_checkpoint(&file, &layout)?;
    let replay = replay_wal(&file, &layout, &header, &mut index)?;
    index.finish_recovery();
    if cfg!(debug_assertions) {
        index.check_invariants();
    }
    // Records beyond the replayed end may still be intact (a torn batch whose first record
    // did not land, even in a session after a clean close). New records start a WAL-size LSN
    // gap later, more than the region can hold records, so none of those can ever pass for a
    // successor; the checkpoint below makes the gap durable before anything is appended.
    let next_lsn = replay.end_lsn + layout.wal_bytes;
    // New batches start at a block boundary (a version-1 log may end anywhere). Nothing is
    // appended before the checkpoint below moves the replay position there, so the live log
    // starts there too.
    let head = replay.end_pos.next_multiple_of(BLOCK as u64);
    let wal = WalBuffer::new(layout.store_id, layout.wal_bytes, head, head, next_lsn);
    let store = Store::assemble(
        layout,
        file,
        index,
        wal,
        Leader::new(next_lsn - 1),
        header.seq,
    );
    store.checkpoint(false)?;
    Ok(store)
}

/// The newest checkpoint whose header and crc are intact, loaded into a table.
fn load_checkpoint(
    file: &DataFile,
    layout: &StoreLayout,
) -> Result<(CheckpointHeader, Index), StoreError> {
    let format = layout.table_format();
    let mut best: Option<(CheckpointHeader, Vec<u8>)> = None;
    for (area, &offset) in layout.checkpoint_offsets.iter().enumerate() {
        let mut head = [0u8; checkpoint::HEADER_BYTES];
        file.read_at(&mut head, offset, "read checkpoint header")?;
        let Some(parsed) = checkpoint::parse_header(&head, format, layout.checkpoint_bytes) else {
            continue;
        };
        let newer = best.as_ref().is_none_or(|(h, _)| h.seq < parsed.header.seq);
        if parsed.header.seq % 2 != area as u64 || !newer {
            continue;
        }
        let mut bytes = vec![0u8; parsed.total_bytes as usize];
        file.read_at(&mut bytes, offset, "read checkpoint")?;
        if checkpoint::crc_matches(&bytes) {
            best = Some((parsed.header, bytes));
        }
    }
    let Some((header, bytes)) = best else {
        return Err(StoreError::corrupt(
            "neither checkpoint area holds a valid checkpoint",
        ));
    };
    let carry = checkpoint::pages(&bytes, &header, format);
    let geometry = layout.crc_geometry();
    if let Some(g) = geometry {
        let ascending = carry.windows(2).all(|w| w[0] < w[1]);
        if !ascending || carry.last().is_some_and(|&p| p >= g.pages) {
            return Err(StoreError::corrupt(format!(
                "checkpoint {}: its crc page list is out of order or out of range",
                header.seq
            )));
        }
    }
    let mut index = Index::new(
        layout.slot_count,
        layout.blocks_per_slot(),
        geometry,
        header.seq,
        carry,
    );
    checkpoint::for_each_entry(&bytes, &header, format, |e| {
        index
            .load_entry(e)
            .map_err(|what| StoreError::corrupt(format!("checkpoint {}: {what}", header.seq)))
    })?;
    Ok((header, index))
}

/// Where replay ended.
struct Replay {
    /// Logical WAL position after the last applied record.
    end_pos: u64,
    /// LSN the next record would have carried.
    end_lsn: u64,
}

/// One intact record found by the scan: its offset and length in the linear log, its LSN.
struct Loc {
    off: usize,
    len: usize,
    lsn: u64,
    commit: bool,
}

fn replay_wal(
    file: &DataFile,
    layout: &StoreLayout,
    header: &CheckpointHeader,
    index: &mut Index,
) -> Result<Replay, StoreError> {
    let mut reader = WalReader {
        file,
        layout,
        start_pos: header.wal_pos,
        buf: Vec::new(),
    };
    let locs = scan(&mut reader, header.next_lsn, header.aligned_batches)?;
    let confirmed = confirmed_lsn(&locs, header.next_lsn.saturating_sub(1));
    let cut = surviving_records(file, layout, &reader.buf, &locs, confirmed)?;
    let mut newest = NewestData::default();
    for (i, loc) in locs[..cut].iter().enumerate() {
        let (rec, _) = decode_known(&reader.buf, loc)?;
        apply_record(layout, index, &rec, i, &mut newest)?;
    }
    let mut blocks: Vec<_> = newest.into_iter().collect();
    blocks.sort_unstable();
    for ((slot, block), (i, k)) in blocks {
        let (rec, _) = decode_known(&reader.buf, &locs[i])?;
        let (WalBody::Write { data, .. } | WalBody::Merge { data, .. }) = rec.body else {
            unreachable!("only write and merge records carry data");
        };
        let at = layout.slot_offset(slot) + block as u64 * BLOCK as u64;
        file.write_at(
            &data[k * BLOCK..(k + 1) * BLOCK],
            at,
            "replay WAL data into its slot",
        )?;
    }
    let end_off = locs[..cut].last().map_or(0, |l| l.off + l.len);
    Ok(Replay {
        end_pos: header.wal_pos + end_off as u64,
        end_lsn: header.next_lsn + cut as u64,
    })
}

/// Pass 1: every intact record in LSN order, stopping at the first torn, stale (wrong LSN)
/// or foreign (other store id) one.
/// With `aligned_batches`, the record after a commit starts at the next block boundary.
fn scan(
    reader: &mut WalReader<'_>,
    first_lsn: u64,
    aligned_batches: bool,
) -> Result<Vec<Loc>, StoreError> {
    enum Step {
        Record {
            lsn: u64,
            id: u64,
            len: usize,
            commit: bool,
        },
        Need(usize),
        End,
    }
    let store_id = reader.layout.store_id;
    let records_max = reader.layout.wal_bytes as usize / RECORD_HEADER_BYTES;
    let mut locs: Vec<Loc> = Vec::new();
    let mut off = 0;
    'records: while locs.len() < records_max {
        let mut want = RECORD_HEADER_BYTES;
        for _ in 0..DECODE_ATTEMPTS_MAX {
            if !reader.fill(off + want)? {
                break 'records;
            }
            let step = match wal::decode_wal_record(&reader.buf[off..]) {
                Ok((rec, len)) => Step::Record {
                    lsn: rec.lsn,
                    id: rec.store_id,
                    len,
                    commit: rec.body == WalBody::Commit,
                },
                Err(WalError::Truncated { need, .. }) => Step::Need(need),
                Err(_) => Step::End,
            };
            match step {
                Step::Record {
                    lsn,
                    id,
                    len,
                    commit,
                } => {
                    let expected = first_lsn + locs.len() as u64;
                    if lsn != expected || id != store_id {
                        break 'records;
                    }
                    locs.push(Loc {
                        off,
                        len,
                        lsn,
                        commit,
                    });
                    off += len;
                    if commit && aligned_batches {
                        let pos = reader.start_pos + off as u64;
                        off += (pos.next_multiple_of(BLOCK as u64) - pos) as usize;
                    }
                    continue 'records;
                }
                Step::Need(need) if need > want => want = need,
                Step::Need(_) | Step::End => break 'records,
            }
        }
        break;
    }
    Ok(locs)
}

/// Newest LSN known durable before the crash: a record followed by a *later* batch was
/// durable before that batch was written, since each batch is written only after the
/// previous one's fdatasync returned. `base` is the checkpoint's last LSN.
fn confirmed_lsn(locs: &[Loc], base: u64) -> u64 {
    let mut commits = locs.iter().rev().filter(|l| l.commit);
    if locs.last().is_some_and(|l| l.commit) {
        commits.next(); // the final batch is complete but not known durable
    }
    commits.next().map_or(base, |l| l.lsn)
}

/// Pass 2: how many records survive. An unconfirmed remap survives if every block of its
/// slot holds the remapped data, or is covered by a later *surviving* write record of that
/// object in that slot (under its name then: a move record renames the object, slot and
/// all): such a block's final contents come from the log, and the leader (or an earlier,
/// interrupted recovery) may already have copied them in place, possibly torn.
/// The first remap that fails cuts the log: that write was never acknowledged, nor anything
/// after it. Scanning backwards makes "surviving" exact, since a cut only drops remaps that
/// were scanned before it.
fn surviving_records(
    file: &DataFile,
    layout: &StoreLayout,
    buf: &[u8],
    locs: &[Loc],
    confirmed: u64,
) -> Result<usize, StoreError> {
    let first = locs.partition_point(|l| l.lsn <= confirmed);
    let unconfirmed = &locs[first..];
    // Which later write records cover each (slot, block): (record index, object); and the
    // moves of each slot: (record index, from, to).
    let mut writes: HashMap<(u32, u32), Vec<(usize, ObjectId)>> = HashMap::new();
    let mut moves: HashMap<u32, Vec<(usize, ObjectId, ObjectId)>> = HashMap::new();
    for (k, loc) in unconfirmed.iter().enumerate() {
        let (rec, _) = decode_known(buf, loc)?;
        match rec.body {
            WalBody::Write {
                obj,
                slot,
                first_block,
                crcs,
                ..
            }
            | WalBody::Merge {
                obj,
                slot,
                first_block,
                crcs,
                ..
            } => {
                for b in first_block..first_block + crcs.len() as u32 {
                    writes.entry((slot, b)).or_default().push((first + k, obj));
                }
            }
            WalBody::Move {
                obj, slot, from, ..
            } => {
                moves.entry(slot).or_default().push((first + k, from, obj));
            }
            _ => {}
        }
    }
    // The name the object remapped by record `i` into `slot` has at record `j` (> i).
    let name_at = |i: usize, slot: u32, obj: ObjectId, j: usize| {
        let mut name = obj;
        for &(m, from, to) in moves.get(&slot).into_iter().flatten() {
            if m > i && m < j && from == name {
                name = to;
            }
        }
        name
    };
    let mut cut = locs.len();
    let mut slot_data = Vec::new();
    for i in (first..locs.len()).rev() {
        let (rec, _) = decode_known(buf, &locs[i])?;
        let WalBody::Remap {
            obj, slot, crcs, ..
        } = rec.body
        else {
            continue;
        };
        if slot >= layout.slot_count || crcs.len() != layout.blocks_per_slot() as usize {
            cut = i;
            continue;
        }
        slot_data.resize(layout.object_size_bytes as usize, 0);
        file.read_at(
            &mut slot_data,
            layout.slot_offset(slot),
            "read remapped slot",
        )?;
        let covered_later = |b: usize| {
            writes.get(&(slot, b as u32)).is_some_and(|w| {
                w.iter()
                    .any(|&(j, o)| j > i && j < cut && o == name_at(i, slot, obj, j))
            })
        };
        let landed = slot_data
            .chunks_exact(BLOCK)
            .enumerate()
            .all(|(b, block)| crc32c::crc32c(block) == crcs.get(b) || covered_later(b));
        if !landed {
            cut = i;
        }
    }
    Ok(cut)
}

/// For each (slot, block), the newest write record holding its contents that the slot's
/// current owner still needs: (index of the record, block within the record).
type NewestData = HashMap<(u32, u32), (usize, usize)>;

/// Forget what was logged for a slot whose object left it.
fn forget_slot(newest: &mut NewestData, slot: u32, blocks: u32) {
    for b in 0..blocks {
        newest.remove(&(slot, b));
    }
}

/// Pass 3: apply record number `i` to the table, noting which logged blocks will need copying
/// into place; refuses anything a correct store never logs.
fn apply_record(
    layout: &StoreLayout,
    index: &mut Index,
    rec: &WalRecord<'_>,
    i: usize,
    newest: &mut NewestData,
) -> Result<(), StoreError> {
    let blocks = layout.blocks_per_slot();
    let corrupt = |what: &str| StoreError::corrupt(format!("WAL record {}: {what}", rec.lsn));
    let in_object = |first: u32, count: usize| first as usize + count <= blocks as usize;
    match rec.body {
        WalBody::Write {
            obj,
            version,
            slot,
            first_block,
            crcs,
            data,
        } => {
            if !in_object(first_block, crcs.len()) {
                return Err(corrupt("write beyond the object"));
            }
            match index.object(obj) {
                Some(meta) if meta.slot != slot => return Err(corrupt("write to another slot")),
                Some(_) => {}
                None if !index.claim_slot(slot) => {
                    return Err(corrupt("new object in a used slot"))
                }
                None => {}
            }
            debug_assert_eq!(data.len(), crcs.len() * BLOCK);
            replay_blocks(index, newest, i, (obj, version, slot, first_block), crcs);
        }
        WalBody::Remap {
            obj,
            version,
            slot,
            crcs,
        } => {
            if crcs.len() != blocks as usize {
                return Err(corrupt("remap does not cover the object"));
            }
            if !index.claim_slot(slot) {
                return Err(corrupt("remap to a used slot"));
            }
            if let Some(old) = index.object(obj) {
                forget_slot(newest, old.slot, blocks);
            }
            let all: Vec<u32> = crcs.iter().collect();
            index.remap(obj, slot, version, &all, None);
        }
        WalBody::Trim {
            obj,
            version,
            slot,
            first_block,
            block_count,
        } => {
            if !in_object(first_block, block_count as usize) {
                return Err(corrupt("trim beyond the object"));
            }
            if index.object(obj).map(|m| m.slot) != Some(slot) {
                return Err(corrupt("trim of an object not in that slot"));
            }
            index.trim(obj, first_block, block_count, version, None);
            for b in first_block..first_block + block_count {
                newest.remove(&(slot, b));
            }
            if index.object(obj).is_none() {
                forget_slot(newest, slot, blocks);
            }
        }
        WalBody::Delete { obj, slot, .. } => {
            if index.object(obj).map(|m| m.slot) != Some(slot) {
                return Err(corrupt("delete of an object not in that slot"));
            }
            index.delete(obj, None);
            forget_slot(newest, slot, blocks);
        }
        WalBody::Move {
            obj,
            version,
            slot,
            from,
        } => {
            match index.object(from) {
                Some(m) if m.slot == slot && m.version == version => {}
                _ => return Err(corrupt("move of an object not in that slot")),
            }
            if let Some(old) = index.object(obj) {
                forget_slot(newest, old.slot, blocks);
            }
            index.rename(from, obj, None);
        }
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
            if !in_object(first_block, crcs.len()) {
                return Err(corrupt("merge beyond the object"));
            }
            if index.object(obj).map(|m| m.slot) != Some(slot) {
                return Err(corrupt("merge into an object not in that slot"));
            }
            match index.object(from) {
                Some(m) if m.slot == from_slot && m.version == version && from_slot != slot => {}
                _ => return Err(corrupt("merge of an object not in that slot")),
            }
            debug_assert_eq!(data.len(), crcs.len() * BLOCK);
            replay_blocks(index, newest, i, (obj, version, slot, first_block), crcs);
            index.delete(from, None);
            forget_slot(newest, from_slot, blocks);
        }
        WalBody::Commit => {}
    }
    Ok(())
}

/// The logged blocks of record `i` (a write or a merge) land in `obj` at `first_block` of
/// `slot`: noted as the newest contents of those blocks, and applied to the table.
fn replay_blocks(
    index: &mut Index,
    newest: &mut NewestData,
    i: usize,
    (obj, version, slot, first_block): (ObjectId, basalt_proto::Version, u32, u32),
    crcs: BlockCrcs<'_>,
) {
    for k in 0..crcs.len() {
        newest.insert((slot, first_block + k as u32), (i, k));
    }
    let mut buf = [0u32; MAX_RECORD_BLOCKS as usize];
    let crcs = collect_crcs(crcs, &mut buf);
    index.write_blocks(obj, slot, version, first_block, crcs, None);
}

fn collect_crcs<'b>(crcs: BlockCrcs<'_>, buf: &'b mut [u32]) -> &'b [u32] {
    let n = crcs.len();
    for (dst, crc) in buf.iter_mut().zip(crcs.iter()) {
        *dst = crc;
    }
    &buf[..n]
}

/// Re-decode a record the scan already verified (data crcs are not re-checked).
fn decode_known<'a>(buf: &'a [u8], loc: &Loc) -> Result<(WalRecord<'a>, usize), StoreError> {
    wal::decode_record(&buf[loc.off..loc.off + loc.len], false)
        .map_err(|e| StoreError::corrupt(format!("WAL record {} no longer decodes: {e}", loc.lsn)))
}

/// Reads the live log into a linear buffer (unwrapping the circle), a chunk at a time.
struct WalReader<'a> {
    file: &'a DataFile,
    layout: &'a StoreLayout,
    start_pos: u64,
    buf: Vec<u8>,
}

impl WalReader<'_> {
    /// Make the first `want` bytes of the log available; false when `want` exceeds the WAL
    /// (no record can extend past one full lap).
    fn fill(&mut self, want: usize) -> Result<bool, StoreError> {
        let wal_bytes = self.layout.wal_bytes;
        if want as u64 > wal_bytes {
            return Ok(false);
        }
        if self.buf.len() >= want {
            return Ok(true);
        }
        let target = want
            .max(self.buf.len() + WAL_READ_CHUNK_BYTES)
            .min(wal_bytes as usize);
        let mut at = self.buf.len();
        self.buf.resize(target, 0);
        while at < target {
            let phys = (self.start_pos + at as u64) % wal_bytes;
            let n = ((wal_bytes - phys) as usize).min(target - at);
            let offset = self.layout.wal_offset + phys;
            self.file
                .read_at(&mut self.buf[at..at + n], offset, "read WAL")?;
            at += n;
        }
        Ok(true)
    }
}

/// A random id for a new store: the process's random hasher keys mixed with the time and pid.
fn new_store_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(now);
    h.write_u32(std::process::id());
    h.finish()
}

/// Take an exclusive advisory lock: two stores on one file would corrupt it.
fn lock_file(file: &File) -> Result<(), StoreError> {
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(StoreError::Io {
            op: "lock store file (is another process using it?)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// How much of a new store file is allocated at create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Allocation {
    /// All of it: the capacity is really there (production OSDs).
    Full,
    /// The metadata regions only, so WAL and checkpoint writes never hit ENOSPC.
    Sparse,
}

/// Allocate the first `len` bytes of `file` (the store at `path`), so that no later write
/// meets ENOSPC. A full filesystem is refused naming the shortfall; filesystems without
/// fallocate (EOPNOTSUPP) keep the file sparse.
fn allocate(path: &Path, file: &File, len: u64, what: &'static str) -> Result<(), StoreError> {
    let dir = parent_dir(path);
    // Free space before the call: a failed posix_fallocate may leave part of the range
    // allocated, which would understate what was free.
    let free_bytes = free_bytes(dir);
    let off_len =
        libc::off_t::try_from(len).map_err(|_| StoreError::bad_options("file too large"))?;
    // fallocate(2) rather than posix_fallocate(3): where the filesystem lacks it, glibc's
    // posix_fallocate would write a byte into every block instead.
    // SAFETY: fallocate on a descriptor we own; no memory is involved.
    let rc = match unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, off_len) } {
        0 => 0,
        _ => std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO),
    };
    match rc {
        0 | libc::EOPNOTSUPP | libc::ENOSYS => Ok(()),
        libc::ENOSPC => Err(StoreError::NoRoom {
            what,
            dir: dir.to_owned(),
            needed_bytes: len,
            free_bytes: free_bytes.unwrap_or(0),
        }),
        errno => Err(StoreError::Io {
            op: "allocate store file",
            source: std::io::Error::from_raw_os_error(errno),
        }),
    }
}

/// Bytes of the filesystem holding `dir` that an unprivileged user may still allocate.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs only writes into the zeroed struct we pass; c_path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; both pointers are valid for the call.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// The directory holding `path` ("." for a bare file name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsync the directory so the new file's name is durable.
fn sync_parent_dir(path: &Path) -> Result<(), StoreError> {
    File::open(parent_dir(path))
        .and_then(|d| d.sync_all())
        .map_err(io_err("fsync store directory"))
}

impl Store {
    /// Create a new store file at `path` (which must not exist) whose slot region stays
    /// sparse: its capacity is a ceiling, not a reservation. For `basalt up` and tests on a
    /// developer's machine; production OSDs use [`Store::create_with`], which allocates it.
    pub fn create_sparse(
        path: &Path,
        opts: &StoreOptions,
        io: &IoOptions,
    ) -> Result<Store, StoreError> {
        create_sparse(path, opts, io)
    }

    /// Create a store file of format version 1 (block crcs in RAM and in its checkpoints),
    /// as stores were made before crc regions: for tests of that format, which every build
    /// still opens.
    #[doc(hidden)]
    pub fn create_version_1(
        path: &Path,
        opts: &StoreOptions,
        io: &IoOptions,
    ) -> Result<Store, StoreError> {
        create_file(path, opts, io, Allocation::Sparse, 1)
    }

    /// Open the store file at `path` and recover it, leaving the file sparse where it is
    /// ([`Store::open`] allocates it in full).
    pub fn open_sparse(path: &Path, io: &IoOptions) -> Result<Store, StoreError> {
        open_sparse(path, io)
    }
}
