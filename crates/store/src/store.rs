//! The store: the public API, and the read and write paths.
//!
//! Locks, always taken in this order: an object's stripe (serializes the writers of one
//! object) → the checkpoint role (`checkpointer`) → the leader role (`leader`) → `gate` →
//! `index` → `wal`. The index lock is held only
//! to look up or change metadata and append to the WAL buffer, never during slot I/O.

use crate::device::{DataFile, Disk};
use crate::error::StoreError;
use crate::index::{Block, Index, BLOCK};
use crate::journal::{Leader, WalBuffer, WalFull};
use crate::options::{IoOptions, StoreOptions, MAX_BLOCKS_PER_OBJECT};
use crate::prefetch::{EdgeBlocks, Stripe, StripeGuard};
use crate::recovery;
use crate::superblock::StoreLayout;
use crate::wal::MAX_RECORD_BLOCKS;
use basalt_proto::{ObjectId, Version};
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Writer stripes: writers of objects hashing to one stripe run one at a time.
const STRIPE_COUNT: usize = 256;
/// Blocks looked up per index-lock hold on the read path (bounds stack use and hold time).
const READ_CHUNK_BLOCKS: usize = 64;
/// Ceiling on bytes appended to the WAL but not yet written: past it, an async caller
/// flushes (awaited) before it writes, and past twice it a write flushes first itself.
/// (The effective limit is also at most an eighth of the WAL.)
const UNFLUSHED_LIMIT_MAX_BYTES: u64 = 16 << 20;
/// Ceiling on bytes of whole-object writes in flight (held in RAM until the flush that
/// waits for them): past it, a writer flushes first. Larger than the WAL's bound: these
/// bytes cost no WAL space, and large sequential writes keep this much queued on the device.
const IN_FLIGHT_LIMIT_BYTES: u64 = 64 << 20;
/// Attempts of one record append that has to free WAL space or slots first.
const COMMIT_RETRIES_MAX: usize = 4;
const MAX_RECORD: usize = MAX_RECORD_BLOCKS as usize;
static ZERO_BLOCK: Block = [0; BLOCK];

/// Space and object counts of a store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Size of the data file.
    pub capacity_bytes: u64,
    /// Allocated 4 KiB blocks, in bytes.
    pub used_bytes: u64,
    /// Number of object slots.
    pub slots_total: u64,
    /// Slots not holding an object (some may await a flush before reuse).
    pub slots_free: u64,
    /// Number of objects.
    pub objects: u64,
}

/// One OSD's local store: fixed-size object slots in one file, metadata in RAM, persisted as
/// a write-ahead log plus checkpoints. All methods take `&self` and may run concurrently.
///
/// Dropping a store without [`Store::close`] is like a crash: writes not yet flushed may be
/// lost, and the next open replays the log.
pub struct Store {
    pub(crate) layout: StoreLayout,
    pub(crate) file: DataFile,
    pub(crate) index: RwLock<Index>,
    pub(crate) wal: Mutex<WalBuffer>,
    pub(crate) leader: Mutex<Leader>,
    /// The checkpoint role, held across a checkpoint: the sequence number of the newest
    /// durable checkpoint.
    pub(crate) checkpointer: Mutex<u64>,
    /// Held shared by every write into the slot region, and exclusively by a reader that saw
    /// a checksum mismatch and must tell a race with a concurrent write from real damage.
    pub(crate) gate: RwLock<()>,
    pub(crate) stripes: Box<[Stripe]>,
    /// Newest LSN known durable.
    pub(crate) durable_lsn: AtomicU64,
    /// Mirror of the WAL buffer's pending bytes (records and whole-object writes in
    /// flight), read without its lock.
    pub(crate) unflushed_bytes: AtomicU64,
    /// The part of `unflushed_bytes` that is whole-object writes in flight.
    pub(crate) in_flight_bytes: AtomicU64,
    unflushed_limit_bytes: u64,
    /// When the store was opened, and milliseconds after it of the last checkpoint (0: none
    /// this run), read without the leader's lock (which a flush holds across fdatasync).
    opened: std::time::Instant,
    pub(crate) last_checkpoint_ms: AtomicU64,
    /// Checkpoints written since open, and the microseconds they took (batches wait only
    /// while one takes its cut).
    pub(crate) checkpoints: AtomicU64,
    pub(crate) checkpoint_us: AtomicU64,
    /// Blocks of small writes copied into their slots since open, and blocks whose copy was
    /// saved because a newer record of the same batch rewrote them.
    pub(crate) blocks_applied: AtomicU64,
    pub(crate) blocks_merged: AtomicU64,
    /// Partial blocks of writes and trims read under the stripe (not prefetched, or a
    /// racing writer made the prefetch stale).
    edge_reads_inline: AtomicU64,
    /// Flushes run by a write past twice the unflushed bound.
    writer_flushes: AtomicU64,
}

/// How full the write-ahead log is, and how old its last checkpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalStats {
    /// Bytes of the log a replay would read: from the last checkpoint's position to the
    /// newest appended record. A checkpoint empties it.
    pub used_bytes: u64,
    /// Size of the WAL region.
    pub capacity_bytes: u64,
    /// Milliseconds since the last checkpoint of this run, or since the store was opened
    /// when there was none yet.
    pub checkpoint_age_ms: u64,
    /// 4 KiB blocks of small writes copied from the log into their slots since open.
    pub blocks_applied: u64,
    /// Blocks of small writes never copied because a newer write in the same batch replaced
    /// them (each block is copied once per batch).
    pub blocks_merged: u64,
    /// Partial blocks of writes and trims read while holding the writer's stripe (the
    /// caller waits on the device): not read ahead by [`Store::prefetch_edges`], or a racing
    /// writer of the same stripe made what was read ahead stale.
    pub edge_reads_inline: u64,
    /// Flushes a write ran itself, the caller waiting on the device, because the store was
    /// past twice its unflushed bound ([`Store::write_would_flush`] tells callers to flush
    /// before that).
    pub writer_flushes: u64,
    /// Checkpoints written since open.
    pub checkpoints: u64,
    /// Microseconds those checkpoints took, in total (batches wait only while one takes its
    /// cut).
    pub checkpoint_micros: u64,
}

impl Store {
    /// Create a new store file at `path` (which must not exist).
    pub fn create(path: &Path, opts: &StoreOptions) -> Result<Store, StoreError> {
        Store::create_with(path, opts, &IoOptions::default())
    }

    /// [`Store::create`], its I/O done as `io` says.
    pub fn create_with(
        path: &Path,
        opts: &StoreOptions,
        io: &IoOptions,
    ) -> Result<Store, StoreError> {
        recovery::create(path, opts, io)
    }

    /// Open an existing store, recovering from a crash if there was one.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, &IoOptions::default())
    }

    /// [`Store::open`], its I/O done as `io` says.
    pub fn open_with(path: &Path, io: &IoOptions) -> Result<Store, StoreError> {
        recovery::open(path, io)
    }

    /// The engine running this store's I/O and whether it is direct (None: buffered syscalls
    /// on the caller's thread, on a file or on a [`Disk`] such as the simulator's).
    pub fn io_engine(&self) -> Option<(crate::engine::EngineKind, bool)> {
        self.file.engine()
    }

    /// How this store's I/O runs, as operators read it: `direct uring`, `buffered threads`,
    /// `buffered inline` (syscalls on the caller's thread, or a [`Disk`] such as the
    /// simulator's).
    pub fn io_mode(&self) -> String {
        match self.io_engine() {
            None => "buffered inline".to_string(),
            Some((kind, direct)) => {
                let cache = if direct { "direct" } else { "buffered" };
                format!("{cache} {}", kind.name())
            }
        }
    }

    /// Does this store's I/O go through an engine whose completions are awaited? Then
    /// async callers use [`Store::read_async`]; otherwise a read runs inline at no extra
    /// cost (page cache or memory).
    pub fn awaits_io(&self) -> bool {
        self.file.awaits()
    }

    /// Create a new store on `disk` (the simulator's [`crate::MemDisk`], or any [`Disk`]).
    pub fn create_on(disk: Arc<dyn Disk>, opts: &StoreOptions) -> Result<Store, StoreError> {
        recovery::create_on(disk, opts)
    }

    /// Open the store on `disk`, recovering from a crash if there was one.
    pub fn open_on(disk: Arc<dyn Disk>) -> Result<Store, StoreError> {
        recovery::open_on(disk)
    }

    /// Open the store at `path`, or create it with `opts` when there is no file.
    pub fn open_or_create(path: &Path, opts: &StoreOptions) -> Result<Store, StoreError> {
        Store::open_or_create_with(path, opts, &IoOptions::default())
    }

    /// [`Store::open_or_create`], its I/O done as `io` says.
    pub fn open_or_create_with(
        path: &Path,
        opts: &StoreOptions,
        io: &IoOptions,
    ) -> Result<Store, StoreError> {
        match std::fs::metadata(path) {
            Ok(_) => Store::open_with(path, io),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Store::create_with(path, opts, io)
            }
            Err(source) => Err(StoreError::Io {
                op: "stat store file",
                source,
            }),
        }
    }

    pub(crate) fn assemble(
        layout: StoreLayout,
        file: DataFile,
        index: Index,
        wal: WalBuffer,
        leader: Leader,
        checkpoint_seq: u64,
    ) -> Store {
        let durable_lsn = wal.last_lsn();
        Store {
            layout,
            file,
            index: RwLock::new(index),
            wal: Mutex::new(wal),
            leader: Mutex::new(leader),
            checkpointer: Mutex::new(checkpoint_seq),
            gate: RwLock::new(()),
            stripes: (0..STRIPE_COUNT).map(|_| Stripe::new()).collect(),
            durable_lsn: AtomicU64::new(durable_lsn),
            unflushed_bytes: AtomicU64::new(0),
            in_flight_bytes: AtomicU64::new(0),
            unflushed_limit_bytes: (layout.wal_bytes / 8).min(UNFLUSHED_LIMIT_MAX_BYTES),
            opened: std::time::Instant::now(),
            last_checkpoint_ms: AtomicU64::new(0),
            checkpoints: AtomicU64::new(0),
            checkpoint_us: AtomicU64::new(0),
            blocks_applied: AtomicU64::new(0),
            edge_reads_inline: AtomicU64::new(0),
            writer_flushes: AtomicU64::new(0),
            blocks_merged: AtomicU64::new(0),
        }
    }

    /// Size of every object.
    pub fn object_size(&self) -> u32 {
        self.layout.object_size_bytes
    }

    /// Where everything lives in the file (for tools and fault-injection tests).
    pub fn layout(&self) -> StoreLayout {
        self.layout
    }

    /// File offset of the slot holding `obj` (None: absent). Blocks whose newest contents
    /// still wait in the WAL are not there yet. For tools and fault-injection tests.
    pub fn object_offset(&self, obj: ObjectId) -> Option<u64> {
        let meta = read(&self.index).object(obj)?;
        Some(self.layout.slot_offset(meta.slot))
    }

    /// File offset where the next WAL batch will be written: the durable log ends here.
    /// For tools and fault-injection tests.
    pub fn wal_write_offset(&self) -> u64 {
        let pos = lock(&self.wal).pending_pos();
        self.layout.wal_offset + pos % self.layout.wal_bytes
    }

    /// Write `data` at byte `offset` of `obj` and set its version. Visible to reads at once,
    /// durable once a later [`Store::flush`] returns. A write covering part of a block
    /// reads the rest of it here: async callers prefetch it ([`Store::write_prefetched`]).
    pub fn write(
        &self,
        obj: ObjectId,
        offset: u32,
        data: &[u8],
        version: Version,
    ) -> Result<(), StoreError> {
        self.write_prefetched(obj, offset, data, version, &mut EdgeBlocks::default())
    }

    /// [`Store::write`] with its partial blocks read ahead by [`Store::prefetch_edges`] (used
    /// if no writer of the object's stripe ran since; otherwise read again here). Once it
    /// returns, `edges` holds the partial blocks as written, merged with `data`: see
    /// [`EdgeBlocks::aligned_write`].
    pub fn write_prefetched(
        &self,
        obj: ObjectId,
        offset: u32,
        data: &[u8],
        version: Version,
        edges: &mut EdgeBlocks,
    ) -> Result<(), StoreError> {
        self.check_range(offset, data.len() as u64)?;
        self.file.check_writable()?;
        if data.is_empty() {
            return Ok(());
        }
        if self.over_unflushed_bound(2) {
            // The caller did not flush when told to (or many writers raced past the bound
            // together): the memory bound holds all the same, at the cost of this wait.
            self.writer_flushes.fetch_add(1, Ordering::Relaxed);
            self.flush()?;
        }
        let stripe = self.stripe(obj);
        if offset == 0 && data.len() == self.layout.object_size_bytes as usize {
            self.write_whole(obj, data, version)
        } else {
            let merged = {
                let edges = Edges::new(edges, stripe.generation());
                self.write_blocks(obj, offset as usize, data, version, &edges)?
            };
            edges.set_merged(merged);
            Ok(())
        }
    }

    /// Fill `buf` from byte `offset` of `obj`. Absent objects and holes read as zeros; a
    /// damaged block fails with [`StoreError::Checksum`] instead of returning its data.
    pub fn read(&self, obj: ObjectId, offset: u32, buf: &mut [u8]) -> Result<(), StoreError> {
        self.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let start = offset as usize;
        let (first, end) = (start / BLOCK, (start + buf.len() - 1) / BLOCK + 1);
        let mut chunk = first;
        while chunk < end {
            let chunk_end = (chunk + READ_CHUNK_BLOCKS).min(end);
            self.read_chunk(obj, start, buf, chunk..chunk_end)?;
            chunk = chunk_end;
        }
        Ok(())
    }

    /// [`Store::read`] for async callers: the slot reads of the whole request are submitted
    /// to the I/O engine together and awaited, so the calling task never blocks on the
    /// device. (A store on a [`Disk`] reads inline; a checksum mismatch, which needs every
    /// writer excluded to tell a race from damage, re-reads its block synchronously.)
    pub async fn read_async(
        &self,
        obj: ObjectId,
        offset: u32,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        if !self.file.awaits() {
            return self.read(obj, offset, buf);
        }
        self.check_range(offset, buf.len() as u64)?;
        if buf.is_empty() {
            return Ok(());
        }
        let start = offset as usize;
        let (first, end) = (start / BLOCK, (start + buf.len() - 1) / BLOCK + 1);
        let mut reads = Vec::new();
        let mut chunk = first;
        while chunk < end {
            let chunk_end = (chunk + READ_CHUNK_BLOCKS).min(end);
            if let Some(plan) = self.plan_chunk(obj, start, buf, chunk..chunk_end) {
                let base = self.layout.slot_offset(plan.slot);
                // A crc page the plan needs is read beside the data, not after it.
                let page = plan
                    .page
                    .as_ref()
                    .and_then(|p| self.file.submit_read(p.offset, p.bytes));
                let runs: Vec<_> = plan
                    .runs()
                    .filter_map(|run| {
                        let at = base + (run.start * BLOCK) as u64;
                        Some((run.clone(), self.file.submit_read(at, run.len() * BLOCK)?))
                    })
                    .collect();
                reads.push((plan, page, runs));
            }
            chunk = chunk_end;
        }
        for (mut plan, page, runs) in reads {
            if let Some(done) = page {
                let image = self.file.finish_read(done.await, "read crc page");
                self.resolve_crcs(&mut plan, image.ok().as_ref().map(|b| b.as_slice()));
            }
            for (run, done) in runs {
                let data = self.file.finish_read(done.await, "read object blocks")?;
                for b in run.clone() {
                    let at = (b - run.start) * BLOCK;
                    self.deliver(obj, &plan, b, &data.as_slice()[at..at + BLOCK], start, buf)?;
                }
            }
        }
        Ok(())
    }

    /// Deallocate `offset..offset + len`: whole blocks become holes, partial edge blocks are
    /// zero-filled. An object left with no block is removed (its version forgotten too).
    pub fn trim(
        &self,
        obj: ObjectId,
        offset: u32,
        len: u32,
        version: Version,
    ) -> Result<(), StoreError> {
        self.trim_prefetched(obj, offset, len, version, &EdgeBlocks::NONE)
    }

    /// [`Store::trim`] with its partial blocks read ahead by [`Store::prefetch_edges`].
    pub fn trim_prefetched(
        &self,
        obj: ObjectId,
        offset: u32,
        len: u32,
        version: Version,
        edges: &EdgeBlocks,
    ) -> Result<(), StoreError> {
        self.check_range(offset, len as u64)?;
        self.file.check_writable()?;
        if len == 0 {
            return Ok(());
        }
        let stripe = self.stripe(obj);
        if read(&self.index).object(obj).is_none() {
            return Ok(());
        }
        let edges = Edges::new(edges, stripe.generation());
        let (start, end) = (offset as usize, offset as usize + len as usize);
        let (first_full, end_full) = (start.div_ceil(BLOCK), end / BLOCK);
        if first_full > end_full {
            self.zero_fill(obj, start, end, version, &edges)?;
        } else {
            if !start.is_multiple_of(BLOCK) {
                self.zero_fill(obj, start, first_full * BLOCK, version, &edges)?;
            }
            if !end.is_multiple_of(BLOCK) {
                self.zero_fill(obj, end_full * BLOCK, end, version, &edges)?;
            }
        }
        let count = end_full.saturating_sub(first_full) as u32;
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            let Some(meta) = index.object(obj) else {
                return Ok(());
            };
            let mut wal = lock(&self.wal);
            match wal.append_trim(obj, version, meta.slot, first_full as u32, count) {
                Ok(lsn) => {
                    self.note_unflushed(&wal);
                    drop(wal);
                    index.trim(obj, first_full as u32, count, version, Some(lsn));
                    return Ok(());
                }
                Err(WalFull) => {
                    drop((wal, index));
                    self.checkpoint(false)?;
                }
            }
        }
        Err(StoreError::NoSpace)
    }

    /// Make `from` become `obj` in one record: `from`'s slot, blocks and version move to the
    /// key `obj`, whose previous contents (if any) are freed. Atomic: after a crash the store
    /// holds either both old objects or the moved one. Returns false (nothing done) when
    /// `from` is absent. Used to commit an erasure-coded chunk's stash.
    pub fn promote(&self, from: ObjectId, obj: ObjectId) -> Result<bool, StoreError> {
        if from == obj {
            return Err(StoreError::bad_options("promote of an object onto itself"));
        }
        self.file.check_writable()?;
        let (a, b) = (self.stripe_index(from), self.stripe_index(obj));
        let _first = self.stripes[a.min(b)].lock();
        let _second = (a != b).then(|| self.stripes[a.max(b)].lock());
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            let Some(meta) = index.object(from) else {
                return Ok(false);
            };
            let mut wal = lock(&self.wal);
            match wal.append_move(obj, meta.version, meta.slot, from) {
                Ok(lsn) => {
                    self.note_unflushed(&wal);
                    drop(wal);
                    index.rename(from, obj, Some(lsn));
                    return Ok(true);
                }
                Err(WalFull) => {
                    drop((wal, index));
                    self.checkpoint(false)?;
                }
            }
        }
        Err(StoreError::NoSpace)
    }

    /// Copy blocks `from_block..from_block + count` of `from` into `obj` at `to_block`, give
    /// `obj` the version `from` has, and remove `from`, in one record: after a crash the
    /// store holds either both old objects or the merged one. `count` 0 changes only the
    /// version (a *bump*). Returns false (nothing done) when `from` is absent; `obj` must
    /// exist. Used to merge an erasure-coded chunk's partial stash (docs/design.md,
    /// "Erasure-coded pools"). The blocks are read, crc-checked, and logged with the record.
    pub fn merge(
        &self,
        from: ObjectId,
        from_block: u32,
        obj: ObjectId,
        to_block: u32,
        count: u32,
    ) -> Result<bool, StoreError> {
        if from == obj {
            return Err(StoreError::bad_options("merge of an object into itself"));
        }
        if count as usize > MAX_RECORD {
            return Err(StoreError::bad_options(
                "merge of more blocks than a record holds",
            ));
        }
        let bytes = count as u64 * BLOCK as u64;
        self.check_range(from_block * BLOCK as u32, bytes)?;
        self.check_range(to_block * BLOCK as u32, bytes)?;
        self.file.check_writable()?;
        let (a, b) = (self.stripe_index(from), self.stripe_index(obj));
        let _first = self.stripes[a.min(b)].lock();
        let _second = (a != b).then(|| self.stripes[a.max(b)].lock());
        if read(&self.index).object(from).is_none() {
            return Ok(false);
        }
        // Under both objects' stripes: no writer changes these blocks before the record.
        let mut data = vec![0u8; bytes as usize];
        self.read(from, from_block * BLOCK as u32, &mut data)?;
        let blocks: Vec<&[u8]> = data.chunks_exact(BLOCK).collect();
        let crcs: Vec<u32> = blocks.iter().map(|b| crc32c::crc32c(b)).collect();
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            let Some(stash) = index.object(from) else {
                return Ok(false);
            };
            let Some(target) = index.object(obj) else {
                return Err(StoreError::bad_options("merge into an absent object"));
            };
            let mut wal = lock(&self.wal);
            let from_at = (from, stash.slot);
            let (version, slot) = (stash.version, target.slot);
            match wal.append_merge(obj, version, slot, to_block, from_at, &crcs, &blocks) {
                Ok(lsn) => {
                    self.note_unflushed(&wal);
                    drop(wal);
                    index.write_blocks(obj, slot, version, to_block, &crcs, Some((lsn, &blocks)));
                    index.delete(from, Some(lsn));
                    return Ok(true);
                }
                Err(WalFull) => {
                    drop((wal, index));
                    self.checkpoint(false)?;
                }
            }
        }
        Err(StoreError::NoSpace)
    }

    /// Remove `obj` (a no-op when absent). Its slot is reused once the removal is durable.
    pub fn delete(&self, obj: ObjectId, version: Version) -> Result<(), StoreError> {
        self.file.check_writable()?;
        let _stripe = self.stripe(obj);
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            let Some(meta) = index.object(obj) else {
                return Ok(());
            };
            let mut wal = lock(&self.wal);
            match wal.append_delete(obj, version, meta.slot) {
                Ok(lsn) => {
                    self.note_unflushed(&wal);
                    drop(wal);
                    index.delete(obj, Some(lsn));
                    return Ok(());
                }
                Err(WalFull) => {
                    drop((wal, index));
                    self.checkpoint(false)?;
                }
            }
        }
        Err(StoreError::NoSpace)
    }

    /// Group commit: every write, trim and delete that returned before this call is durable
    /// when it returns. Concurrent callers share one fdatasync.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.flush_inner()
    }

    /// Is the store past its unflushed bound? A caller that must not wait on the device
    /// then flushes off its thread (awaited) before it writes. A write flushes first itself
    /// only past twice the bound, so callers that flush when told never have a write wait on
    /// the device, even when many of them pass this check at once.
    pub fn write_would_flush(&self) -> bool {
        self.over_unflushed_bound(1)
    }

    /// Past `times` the bound on unflushed records or on whole-object writes in flight?
    fn over_unflushed_bound(&self, times: u64) -> bool {
        let in_flight = self.in_flight_bytes.load(Ordering::Relaxed);
        let records = self
            .unflushed_bytes
            .load(Ordering::Relaxed)
            .saturating_sub(in_flight);
        records > times * self.unflushed_limit_bytes || in_flight > times * IN_FLIGHT_LIMIT_BYTES
    }

    /// Bytes written since the last flush started (what a crash could still lose). Lets the
    /// owner flush in the background before `write` has to flush inline.
    pub fn unflushed_bytes(&self) -> u64 {
        self.unflushed_bytes.load(Ordering::Relaxed)
    }

    /// Slots freed by rewrites and deletes that are not reusable yet: they become free once
    /// the record that freed them is durable and confirmed by a later durable batch. Lets
    /// the owner confirm them in the background ([`Store::confirm_freed_slots`]) so rewrites
    /// reuse recently freed slots instead of spreading over the whole file.
    pub fn pending_freed_slots(&self) -> usize {
        read(&self.index).pending_frees()
    }

    /// Make every slot freed so far reusable now (up to two small durable batches).
    pub fn confirm_freed_slots(&self) -> Result<(), StoreError> {
        self.file.check_writable()?;
        self.reclaim_slots()
    }

    /// Bitmap of allocated 4 KiB blocks of `obj` (block `i` is bit `i % 64` of word `i / 64`);
    /// all zero when the object is absent.
    pub fn allocation(&self, obj: ObjectId) -> Result<Vec<u64>, StoreError> {
        let index = read(&self.index);
        Ok(match index.object(obj) {
            Some(meta) => index.alloc_words(meta.slot).to_vec(),
            None => vec![0; self.layout.alloc_words()],
        })
    }

    /// Version of `obj`'s last write, trim or remap; `None` when absent.
    pub fn version(&self, obj: ObjectId) -> Option<Version> {
        read(&self.index).object(obj).map(|m| m.version)
    }

    /// Objects and allocated bytes of each of `inodes` in this store, from counters the
    /// store keeps (no walk of its objects).
    pub fn usage(&self, inodes: &[basalt_proto::InodeId]) -> Vec<(u64, u64)> {
        let index = read(&self.index);
        inodes
            .iter()
            .map(|&i| {
                let (objects, blocks) = index.usage(i);
                (objects, blocks * BLOCK as u64)
            })
            .collect()
    }

    /// Every object and its version, sorted by object id.
    pub fn objects(&self) -> Vec<(ObjectId, Version)> {
        read(&self.index).objects()
    }

    /// Space and object counts.
    pub fn stats(&self) -> StoreStats {
        let index = read(&self.index);
        let slots = self.layout.slot_count as u64;
        StoreStats {
            capacity_bytes: self.layout.capacity_bytes,
            used_bytes: index.used_blocks() * BLOCK as u64,
            slots_total: slots,
            slots_free: slots - index.object_count(),
            objects: index.object_count(),
        }
    }

    /// Fill of the WAL and age of the last checkpoint (takes the WAL buffer's lock briefly).
    pub fn wal_stats(&self) -> WalStats {
        let (used_bytes, capacity_bytes) = lock(&self.wal).fill();
        let now_ms = self.opened.elapsed().as_millis() as u64;
        WalStats {
            used_bytes,
            capacity_bytes,
            checkpoint_age_ms: now_ms
                .saturating_sub(self.last_checkpoint_ms.load(Ordering::Relaxed)),
            blocks_applied: self.blocks_applied.load(Ordering::Relaxed),
            blocks_merged: self.blocks_merged.load(Ordering::Relaxed),
            edge_reads_inline: self.edge_reads_inline.load(Ordering::Relaxed),
            writer_flushes: self.writer_flushes.load(Ordering::Relaxed),
            checkpoints: self.checkpoints.load(Ordering::Relaxed),
            checkpoint_micros: self.checkpoint_us.load(Ordering::Relaxed),
        }
    }

    /// Milliseconds since the store was opened (checkpoint stamps).
    pub(crate) fn opened_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    /// Checkpoint and sync, so the next open replays nothing.
    pub fn close(self) -> Result<(), StoreError> {
        self.file.check_writable()?;
        self.checkpoint(true)
    }

    /// Check the table's internal invariants (O(slots); panics on violation). For tests.
    #[doc(hidden)]
    pub fn check_invariants(&self) {
        read(&self.index).check_invariants();
    }

    pub(crate) fn check_range(&self, offset: u32, len: u64) -> Result<(), StoreError> {
        let object_size = self.layout.object_size_bytes;
        if offset as u64 + len > object_size as u64 {
            return Err(StoreError::OutOfRange {
                offset: offset as u64,
                len,
                object_size,
            });
        }
        Ok(())
    }

    fn stripe(&self, obj: ObjectId) -> StripeGuard<'_> {
        self.stripes[self.stripe_index(obj)].lock()
    }

    pub(crate) fn stripe_index(&self, obj: ObjectId) -> usize {
        const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
        let h = (obj.inode.wrapping_mul(MIX) ^ obj.index).wrapping_mul(MIX);
        (h >> 32) as usize % STRIPE_COUNT
    }

    fn note_unflushed(&self, wal: &WalBuffer) {
        self.in_flight_bytes
            .store(wal.in_flight_bytes(), Ordering::Relaxed);
        self.unflushed_bytes
            .store(wal.pending_bytes(), Ordering::Relaxed);
    }

    /// Resolve blocks `blocks` (at most READ_CHUNK_BLOCKS) of a read of `buf.len()` bytes at
    /// object offset `start` under the index lock: holes, overlay blocks and blocks of a
    /// write still in flight are copied into `buf` at once; what must come from the slot is
    /// returned as a plan (None: nothing).
    fn plan_chunk(
        &self,
        obj: ObjectId,
        start: usize,
        buf: &mut [u8],
        blocks: Range<usize>,
    ) -> Option<SlotReads> {
        let mut plan = SlotReads {
            slot: 0,
            first: blocks.start,
            wanted: 0,
            crcs: [0; READ_CHUNK_BLOCKS],
            in_page: 0,
            page: None,
        };
        let index = read(&self.index);
        let Some(meta) = index.object(obj) else {
            let lo = span(start, buf.len(), blocks.start).0.start;
            let hi = span(start, buf.len(), blocks.end - 1).0.end;
            buf[lo..hi].fill(0);
            return None;
        };
        plan.slot = meta.slot;
        let in_flight = index.in_flight(meta.slot);
        for b in blocks.clone() {
            let (in_buf, in_block) = span(start, buf.len(), b);
            if !index.is_allocated(meta.slot, b) {
                buf[in_buf].fill(0);
            } else if let Some(data) = index.overlay_block(meta.slot, b) {
                buf[in_buf].copy_from_slice(&data[in_block]);
            } else if let Some(data) = in_flight {
                let at = b * BLOCK;
                buf[in_buf].copy_from_slice(&data.as_slice()[at..at + BLOCK][in_block]);
            } else {
                plan.wanted |= 1 << (b - blocks.start);
                self.plan_crc(&index, &mut plan, b);
            }
        }
        (plan.wanted != 0).then_some(plan)
    }

    /// Read blocks `blocks` of a read of `buf.len()` bytes at object offset `start`:
    /// metadata and overlay under the index lock, slot data after, on this thread.
    fn read_chunk(
        &self,
        obj: ObjectId,
        start: usize,
        buf: &mut [u8],
        blocks: Range<usize>,
    ) -> Result<(), StoreError> {
        let Some(mut plan) = self.plan_chunk(obj, start, buf, blocks) else {
            return Ok(());
        };
        self.resolve_crcs_sync(&mut plan);
        let base = self.layout.slot_offset(plan.slot);
        for run in plan.runs() {
            let mut b = run.start;
            while b < run.end {
                if span(start, buf.len(), b).1.len() < BLOCK {
                    // A partial edge block: read it whole, keep the part.
                    let mut tmp = [0u8; BLOCK];
                    self.file
                        .read_at(&mut tmp, base + (b * BLOCK) as u64, "read object block")?;
                    self.deliver(obj, &plan, b, &tmp, start, buf)?;
                    b += 1;
                    continue;
                }
                // Whole blocks go straight into `buf` in one pread.
                let mut whole_end = b + 1;
                while whole_end < run.end && span(start, buf.len(), whole_end).1.len() == BLOCK {
                    whole_end += 1;
                }
                let in_buf = span(start, buf.len(), b).0.start;
                let into = in_buf..in_buf + (whole_end - b) * BLOCK;
                self.file.read_at(
                    &mut buf[into],
                    base + (b * BLOCK) as u64,
                    "read object blocks",
                )?;
                for k in b..whole_end {
                    let at = in_buf + (k - b) * BLOCK;
                    if !plan.verifies(k, &buf[at..at + BLOCK]) {
                        self.read_block_stable(obj, k, start, buf)?;
                    }
                }
                b = whole_end;
            }
        }
        Ok(())
    }

    /// Copy the part of block `b` (read from the slot as `data`) that the read wants into
    /// `buf`, after checking its crc; a mismatch is settled by a stable re-read.
    fn deliver(
        &self,
        obj: ObjectId,
        plan: &SlotReads,
        b: usize,
        data: &[u8],
        start: usize,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        if !plan.verifies(b, data) {
            return self.read_block_stable(obj, b, start, buf);
        }
        let (in_buf, in_block) = span(start, buf.len(), b);
        buf[in_buf].copy_from_slice(&data[in_block]);
        Ok(())
    }

    /// Re-read one block with every slot writer excluded and the table held still. A
    /// mismatch seen outside the locks may be a race (the block was being rewritten, or the
    /// object moved); a mismatch seen here is real damage.
    fn read_block_stable(
        &self,
        obj: ObjectId,
        b: usize,
        start: usize,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let _gate = write(&self.gate);
        let index = read(&self.index);
        let (in_buf, in_block) = span(start, buf.len(), b);
        let Some(meta) = index.object(obj) else {
            buf[in_buf].fill(0);
            return Ok(());
        };
        if !index.is_allocated(meta.slot, b) {
            buf[in_buf].fill(0);
        } else if let Some(data) = index.overlay_block(meta.slot, b) {
            buf[in_buf].copy_from_slice(&data[in_block]);
        } else if let Some(data) = index.in_flight(meta.slot) {
            let at = b * BLOCK;
            buf[in_buf].copy_from_slice(&data.as_slice()[at..at + BLOCK][in_block]);
        } else {
            let mut tmp = [0u8; BLOCK];
            let at = self.layout.slot_offset(meta.slot) + (b * BLOCK) as u64;
            self.file.read_at(&mut tmp, at, "re-read object block")?;
            if crc32c::crc32c(&tmp) != self.stable_crc(&index, meta.slot, b)? {
                return Err(StoreError::Checksum {
                    obj,
                    block: b as u32,
                });
            }
            buf[in_buf].copy_from_slice(&tmp[in_block]);
        }
        Ok(())
    }

    /// A write through the WAL: whole-block images (partial edge blocks merged with their
    /// current contents), logged and kept in the overlay until the leader applies them.
    /// The caller holds the object's stripe, so the merged contents cannot change under us.
    fn write_blocks(
        &self,
        obj: ObjectId,
        offset: usize,
        data: &[u8],
        version: Version,
        edges: &Edges,
    ) -> Result<Merged, StoreError> {
        let end = offset + data.len();
        let (first, last) = (offset / BLOCK, (end - 1) / BLOCK);
        let head_partial =
            !offset.is_multiple_of(BLOCK) || (first == last && !end.is_multiple_of(BLOCK));
        let tail_partial = last != first && !end.is_multiple_of(BLOCK);
        let mut head = [0u8; BLOCK];
        let mut tail = [0u8; BLOCK];
        if head_partial {
            self.merge_edge(obj, first, offset, data, &mut head, edges)?;
        }
        if tail_partial {
            self.merge_edge(obj, last, offset, data, &mut tail, edges)?;
        }
        let image = WriteImage {
            offset,
            data,
            head: head_partial.then_some((first, &head)),
            tail: tail_partial.then_some((last, &tail)),
        };
        let mut blocks: [&[u8]; MAX_RECORD] = [&[]; MAX_RECORD];
        let mut crcs = [0u32; MAX_RECORD];
        let mut c0 = first;
        while c0 <= last {
            let n = (last + 1 - c0).min(MAX_RECORD);
            for i in 0..n {
                blocks[i] = image.block(c0 + i);
                crcs[i] = crc32c::crc32c(blocks[i]);
            }
            self.commit_write(obj, version, c0 as u32, &crcs[..n], &blocks[..n])?;
            c0 += n;
        }
        Ok([
            head_partial.then(|| (first, Box::new(head))),
            tail_partial.then(|| (last, Box::new(tail))),
        ])
    }

    fn merge_edge(
        &self,
        obj: ObjectId,
        b: usize,
        offset: usize,
        data: &[u8],
        out: &mut Block,
        edges: &Edges,
    ) -> Result<(), StoreError> {
        match edges.prefetched.block(obj, edges.generation, b) {
            Some(block) => out.copy_from_slice(block),
            None => {
                self.edge_reads_inline.fetch_add(1, Ordering::Relaxed);
                self.read(obj, (b * BLOCK) as u32, out)?;
            }
        }
        let (in_data, in_block) = span(offset, data.len(), b);
        out[in_block].copy_from_slice(&data[in_data]);
        Ok(())
    }

    /// Zero `start..end` (inside one block) if that block holds data; a hole stays a hole.
    fn zero_fill(
        &self,
        obj: ObjectId,
        start: usize,
        end: usize,
        version: Version,
        edges: &Edges,
    ) -> Result<(), StoreError> {
        let allocated = {
            let index = read(&self.index);
            index
                .object(obj)
                .is_some_and(|m| index.is_allocated(m.slot, start / BLOCK))
        };
        if allocated {
            self.write_blocks(obj, start, &ZERO_BLOCK[..end - start], version, edges)?;
        }
        Ok(())
    }

    /// Log one write record and publish it in the table and overlay, both under the index
    /// lock, so the leader can never apply and forget a block before its overlay exists.
    fn commit_write(
        &self,
        obj: ObjectId,
        version: Version,
        first: u32,
        crcs: &[u32],
        blocks: &[&[u8]],
    ) -> Result<(), StoreError> {
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            let (slot, fresh) = match index.object(obj) {
                Some(meta) => (meta.slot, false),
                None => match index.reserve_free_slot() {
                    Some(slot) => (slot, true),
                    None => {
                        let pending = index.has_pending_frees();
                        drop(index);
                        if !pending {
                            return Err(StoreError::NoSpace);
                        }
                        self.reclaim_slots()?;
                        continue;
                    }
                },
            };
            let mut wal = lock(&self.wal);
            match wal.append_write(obj, version, slot, first, crcs, blocks) {
                Ok(lsn) => {
                    self.note_unflushed(&wal);
                    drop(wal);
                    index.write_blocks(obj, slot, version, first, crcs, Some((lsn, blocks)));
                    return Ok(());
                }
                Err(WalFull) => {
                    if fresh {
                        index.unreserve(slot);
                    }
                    drop((wal, index));
                    self.checkpoint(false)?;
                }
            }
        }
        Err(StoreError::NoSpace)
    }

    /// A whole-object write: data straight into a fresh slot, then a small remap record (no
    /// double write). Without a free slot, an existing object is rewritten through the WAL.
    fn write_whole(&self, obj: ObjectId, data: &[u8], version: Version) -> Result<(), StoreError> {
        let Some(slot) = self.reserve_slot()? else {
            return self
                .write_blocks(obj, 0, data, version, &Edges::NONE)
                .map(drop);
        };
        let blocks = self.layout.blocks_per_slot() as usize;
        let mut crc_buf = [0u32; MAX_BLOCKS_PER_OBJECT as usize];
        let crcs = &mut crc_buf[..blocks];
        for (b, crc) in crcs.iter_mut().enumerate() {
            *crc = crc32c::crc32c(&data[b * BLOCK..(b + 1) * BLOCK]);
        }
        // Data before record: one fdatasync at the next flush covers both, and recovery
        // drops a remap whose slot does not hold the data it names. Through an engine the
        // write is only started here: until the leader sees it complete (before the fdatasync
        // of the batch carrying the remap), reads of the slot are served from its bytes.
        let at = self.layout.slot_offset(slot);
        let started = {
            let _gate = read(&self.gate);
            self.file
                .start_write(data, at, "write object into a fresh slot")
        };
        let mut in_flight = match started {
            Ok(in_flight) => in_flight,
            Err(e) => {
                write(&self.index).unreserve(slot);
                return Err(e);
            }
        };
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            let mut wal = lock(&self.wal);
            match wal.append_remap(obj, version, slot, crcs) {
                Ok(lsn) => {
                    index.remap(obj, slot, version, crcs, Some(lsn));
                    if let Some(w) = in_flight.take() {
                        index.add_in_flight(slot, w.buf.clone());
                        wal.add_in_flight(slot, w);
                    }
                    self.note_unflushed(&wal);
                    return Ok(());
                }
                Err(WalFull) => {
                    drop((wal, index));
                    self.checkpoint(false)?;
                }
            }
        }
        // The slot goes back only once nothing writes into it any more.
        if let Some(w) = in_flight {
            self.file.finish_write(w.done, w.op)?;
        }
        write(&self.index).unreserve(slot);
        Err(StoreError::NoSpace)
    }

    /// A free slot, after making freed ones reusable if needed; `None` when there is none.
    fn reserve_slot(&self) -> Result<Option<u32>, StoreError> {
        for _ in 0..COMMIT_RETRIES_MAX {
            let mut index = write(&self.index);
            if let Some(slot) = index.reserve_free_slot() {
                return Ok(Some(slot));
            }
            if !index.has_pending_frees() {
                return Ok(None);
            }
            drop(index);
            self.reclaim_slots()?;
        }
        Ok(None)
    }
}

/// What a read needs from one object's slot for one chunk of blocks: which blocks
/// (bit `b - first` of `wanted`) and the crc each must have.
struct SlotReads {
    slot: u32,
    first: usize,
    wanted: u64,
    crcs: [u32; READ_CHUNK_BLOCKS],
    /// Blocks whose crc is still to come from `page` (none unless the store keeps its crcs
    /// in crc regions).
    in_page: u64,
    page: Option<crc_reads::PageRead>,
}

impl SlotReads {
    /// Does `data` (block `b`) match its crc? A crc not known (its page unreadable or not
    /// valid) matches nothing: the block goes the stable way.
    fn verifies(&self, b: usize, data: &[u8]) -> bool {
        self.in_page & (1 << (b - self.first)) == 0
            && crc32c::crc32c(data) == self.crcs[b - self.first]
    }

    /// Runs of consecutive wanted blocks (one read each).
    fn runs(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let mut b = 0;
        std::iter::from_fn(move || {
            while b < READ_CHUNK_BLOCKS && self.wanted & (1 << b) == 0 {
                b += 1;
            }
            if b >= READ_CHUNK_BLOCKS {
                return None;
            }
            let run_start = b;
            while b < READ_CHUNK_BLOCKS && self.wanted & (1 << b) != 0 {
                b += 1;
            }
            Some(self.first + run_start..self.first + b)
        })
    }
}

/// The block images of one write: whole blocks come from `data`, partial edge blocks from
/// the merged `head`/`tail` buffers.
/// The partial blocks of a write as written (block number, contents): head and tail.
type Merged = [Option<(usize, Box<Block>)>; 2];

/// What a write under its stripe knows of prefetched partial blocks.
struct Edges<'a> {
    prefetched: &'a EdgeBlocks,
    /// The stripe's generation while this writer holds it.
    generation: u64,
}

impl<'a> Edges<'a> {
    /// A whole, aligned write: it has no partial block.
    const NONE: Edges<'static> = Edges {
        prefetched: &EdgeBlocks::NONE,
        generation: 0,
    };

    fn new(prefetched: &'a EdgeBlocks, generation: u64) -> Edges<'a> {
        Edges {
            prefetched,
            generation,
        }
    }
}

struct WriteImage<'a> {
    offset: usize,
    data: &'a [u8],
    head: Option<(usize, &'a Block)>,
    tail: Option<(usize, &'a Block)>,
}

impl<'a> WriteImage<'a> {
    fn block(&self, b: usize) -> &'a [u8] {
        match (self.head, self.tail) {
            (Some((h, img)), _) if h == b => img,
            (_, Some((t, img))) if t == b => img,
            _ => {
                let s = b * BLOCK - self.offset;
                &self.data[s..s + BLOCK]
            }
        }
    }
}

/// Where block `b` meets the byte range `start..start + len`: (range in the caller's
/// buffer, range within the block).
fn span(start: usize, len: usize, b: usize) -> (Range<usize>, Range<usize>) {
    let block_start = b * BLOCK;
    let lo = start.max(block_start);
    let hi = (start + len).min(block_start + BLOCK);
    (lo - start..hi - start, lo - block_start..hi - block_start)
}

/// Lock helpers: a poisoned lock means a thread panicked mid-update, so the table may be
/// inconsistent; propagating the panic is the only safe answer.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().expect("store mutex poisoned by an earlier panic")
}

pub(crate) fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().expect("store lock poisoned by an earlier panic")
}

pub(crate) fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().expect("store lock poisoned by an earlier panic")
}

#[path = "crc_reads.rs"]
mod crc_reads;

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
