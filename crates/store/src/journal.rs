//! The journal: the in-RAM tail of the WAL, group commit (one fdatasync for every writer
//! waiting), copying durable records into their slots, and checkpoints.
//!
//! Only the *leader* (whoever holds `Store::leader`) writes the WAL region, syncs and applies;
//! writers only append encoded records to [`WalBuffer`] under its mutex. A checkpoint (whoever
//! holds `Store::checkpointer`) needs the leader only to take its cut and make the records
//! before it durable and applied: batches after the cut commit while it writes the table.

use crate::checkpoint::{AreaWriter, CheckpointHeader};
use crate::crc_pages;
use crate::device::InFlightWrite;
use crate::error::StoreError;
use crate::index::{CutPage, BLOCK, CUT_SCAN_SLOTS_MAX};
use crate::store::{lock, read, write, Store};
use crate::wal::{self, WalBody, COMMIT_RECORD_BYTES};
use basalt_proto::{ObjectId, Version};
use std::sync::atomic::Ordering;

/// A checkpoint is due once the written part of the WAL passes this share of its size
/// (percent): the store's owner runs it in the background ([`Store::checkpoint_wanted`]).
pub(crate) const CHECKPOINT_TRIGGER_PERCENT: u64 = 50;
/// Past this share (percent), or with dirty crcs at twice their bound, the flush that sees it
/// checkpoints itself: an owner that runs no checkpoints, or one that fell behind.
pub(crate) const CHECKPOINT_INLINE_PERCENT: u64 = 75;
/// Crc pages a checkpoint reads, composes and writes at a time (bounds its buffer: 1 MiB of
/// 4 KiB pages).
const CRC_PAGES_PER_WRITE: usize = 256;

/// A record did not fit in the WAL: the caller checkpoints and retries.
pub(crate) struct WalFull;

/// Whether a checkpoint should run, as a flush sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CheckpointNeed {
    No,
    /// Due: the owner may run it in the background.
    Due,
    /// Now, by the flush that found it (WAL or crc memory close to full).
    Now,
}

/// Records appended but not yet written, and where the log stands.
///
/// Positions are logical byte offsets that only grow; the file offset is
/// `wal_offset + pos % wal_bytes`. Invariant: `tail_pos <= pending_pos <= head_pos` and
/// `batch_end(head_pos) - tail_pos <= wal_bytes` (the live log fits, with room for the
/// commit record that closes the next batch and its padding). Batches start at block
/// boundaries: `pending_pos` is a multiple of the block size.
pub(crate) struct WalBuffer {
    pending: Vec<u8>,
    next_lsn: u64,
    head_pos: u64,
    pending_pos: u64,
    tail_pos: u64,
    wal_bytes: u64,
    store_id: u64,
    /// Whole-object writes whose remap records are pending: the batch that carries those
    /// records waits for them to complete before its fdatasync (the data must be durable
    /// with the record that names it).
    in_flight: Vec<(u32, InFlightWrite)>,
    in_flight_bytes: u64,
}

impl WalBuffer {
    pub fn new(store_id: u64, wal_bytes: u64, tail_pos: u64, head_pos: u64, next_lsn: u64) -> Self {
        assert!(tail_pos <= head_pos && head_pos - tail_pos <= wal_bytes);
        WalBuffer {
            pending: Vec::new(),
            next_lsn,
            head_pos,
            pending_pos: head_pos,
            tail_pos,
            wal_bytes,
            store_id,
            in_flight: Vec::new(),
            in_flight_bytes: 0,
        }
    }

    /// LSN of the newest appended record.
    pub fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
    }

    /// Bytes of live log (from the replay position to the newest appended record,
    /// pending ones included) and the WAL's size.
    pub fn fill(&self) -> (u64, u64) {
        (self.head_pos - self.tail_pos, self.wal_bytes)
    }

    /// Bytes appended but not yet handed to the leader, and bytes of whole-object writes in
    /// flight with them (both wait for the next flush).
    pub fn pending_bytes(&self) -> u64 {
        self.pending.len() as u64 + self.in_flight_bytes
    }

    /// Bytes of whole-object writes in flight (part of [`WalBuffer::pending_bytes`]).
    pub fn in_flight_bytes(&self) -> u64 {
        self.in_flight_bytes
    }

    /// The whole-object write into `slot`, whose remap record was just appended, is in
    /// flight: the batch carrying the record waits for it.
    pub fn add_in_flight(&mut self, slot: u32, write: InFlightWrite) {
        assert!(!self.pending.is_empty(), "its remap record is pending");
        self.in_flight_bytes += write.buf.len() as u64;
        self.in_flight.push((slot, write));
    }

    /// Logical position where the next batch will be written.
    pub fn pending_pos(&self) -> u64 {
        self.pending_pos
    }

    #[allow(clippy::too_many_arguments)]
    pub fn append_write(
        &mut self,
        obj: ObjectId,
        version: Version,
        slot: u32,
        first_block: u32,
        crcs: &[u32],
        blocks: &[&[u8]],
    ) -> Result<u64, WalFull> {
        let len = wal::write_record_bytes(blocks.len());
        let lsn = self.reserve(len)?;
        let (id, out) = (self.store_id, &mut self.pending);
        wal::encode_write(out, lsn, id, obj, version, slot, first_block, crcs, blocks);
        self.check_appended(len);
        Ok(lsn)
    }

    pub fn append_remap(
        &mut self,
        obj: ObjectId,
        version: Version,
        slot: u32,
        crcs: &[u32],
    ) -> Result<u64, WalFull> {
        let len = wal::remap_record_bytes(crcs.len());
        let lsn = self.reserve(len)?;
        wal::encode_remap(
            &mut self.pending,
            lsn,
            self.store_id,
            obj,
            version,
            slot,
            crcs,
        );
        self.check_appended(len);
        Ok(lsn)
    }

    pub fn append_trim(
        &mut self,
        obj: ObjectId,
        version: Version,
        slot: u32,
        first_block: u32,
        block_count: u32,
    ) -> Result<u64, WalFull> {
        let lsn = self.reserve(wal::TRIM_RECORD_BYTES)?;
        let (id, out) = (self.store_id, &mut self.pending);
        wal::encode_trim(out, lsn, id, obj, version, slot, first_block, block_count);
        self.check_appended(wal::TRIM_RECORD_BYTES);
        Ok(lsn)
    }

    pub fn append_delete(
        &mut self,
        obj: ObjectId,
        version: Version,
        slot: u32,
    ) -> Result<u64, WalFull> {
        let lsn = self.reserve(wal::DELETE_RECORD_BYTES)?;
        wal::encode_delete(&mut self.pending, lsn, self.store_id, obj, version, slot);
        self.check_appended(wal::DELETE_RECORD_BYTES);
        Ok(lsn)
    }

    pub fn append_move(
        &mut self,
        obj: ObjectId,
        version: Version,
        slot: u32,
        from: ObjectId,
    ) -> Result<u64, WalFull> {
        let lsn = self.reserve(wal::MOVE_RECORD_BYTES)?;
        wal::encode_move(
            &mut self.pending,
            lsn,
            self.store_id,
            obj,
            version,
            slot,
            from,
        );
        self.check_appended(wal::MOVE_RECORD_BYTES);
        Ok(lsn)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn append_merge(
        &mut self,
        obj: ObjectId,
        version: Version,
        slot: u32,
        first_block: u32,
        from: (ObjectId, u32),
        crcs: &[u32],
        blocks: &[&[u8]],
    ) -> Result<u64, WalFull> {
        let len = wal::merge_record_bytes(blocks.len());
        let lsn = self.reserve(len)?;
        let (id, out) = (self.store_id, &mut self.pending);
        wal::encode_merge(
            out,
            lsn,
            id,
            obj,
            version,
            slot,
            first_block,
            from,
            crcs,
            blocks,
        );
        self.check_appended(len);
        Ok(lsn)
    }

    fn has_room_for_commit(&self) -> bool {
        batch_end(self.head_pos) - self.tail_pos <= self.wal_bytes
    }

    /// Close the pending batch with a commit record, then zeros up to the next block
    /// boundary, where the next batch starts (so a block holding committed records is never
    /// written again, and every batch write is block-aligned for direct I/O). Every appender
    /// left room for both.
    fn append_commit(&mut self) {
        assert!(
            self.has_room_for_commit(),
            "room for the commit record was reserved"
        );
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        let end = batch_end(self.head_pos);
        self.head_pos += COMMIT_RECORD_BYTES as u64;
        wal::encode_commit(&mut self.pending, lsn, self.store_id);
        self.check_appended(COMMIT_RECORD_BYTES);
        let pad = (end - self.head_pos) as usize;
        self.pending.resize(self.pending.len() + pad, 0);
        self.head_pos = end;
    }

    /// Hand the pending records to the leader (swapping buffers, so neither side allocates).
    /// Returns the batch's logical position and its last LSN.
    fn take_batch(
        &mut self,
        into: &mut Vec<u8>,
        in_flight: &mut Vec<(u32, InFlightWrite)>,
    ) -> (u64, u64) {
        assert!(into.is_empty() && in_flight.is_empty());
        std::mem::swap(&mut self.pending, into);
        std::mem::swap(&mut self.in_flight, in_flight);
        self.in_flight_bytes = 0;
        let start = self.pending_pos;
        self.pending_pos = self.head_pos;
        assert_eq!(
            start + into.len() as u64,
            self.head_pos,
            "batch spans its positions"
        );
        (start, self.last_lsn())
    }

    fn reserve(&mut self, len: usize) -> Result<u64, WalFull> {
        let live = batch_end(self.head_pos + len as u64) - self.tail_pos;
        if live > self.wal_bytes {
            return Err(WalFull);
        }
        let lsn = self.next_lsn;
        self.next_lsn += 1;
        self.head_pos += len as u64;
        Ok(lsn)
    }

    fn check_appended(&self, len: usize) {
        assert_eq!(
            self.pending_pos + self.pending.len() as u64,
            self.head_pos,
            "encoded record of {len} bytes matches its reservation"
        );
    }
}

/// Where a batch whose records end at `pos` ends: after its commit record, rounded up to
/// the next block boundary.
pub(crate) fn batch_end(pos: u64) -> u64 {
    (pos + COMMIT_RECORD_BYTES as u64).next_multiple_of(BLOCK as u64)
}

/// State only the leader touches, kept between batches so buffers are reused.
pub(crate) struct Leader {
    /// Last LSN of the previous durable batch: once another batch is durable, recovery will
    /// trust every record up to here without checks, so slots they freed may be reused.
    prev_batch_last_lsn: u64,
    batch: Vec<u8>,
    /// Whole-object writes the batch being committed waits for.
    in_flight: Vec<(u32, InFlightWrite)>,
    /// Slots of those writes, once complete.
    completed: Vec<u32>,
    /// In-place copies of the last durable batch, still in flight: they finish while the
    /// next batch is written (before its fdatasync) or before a checkpoint.
    copies: Vec<InFlightWrite>,
    /// Write records of that batch, (slot, first block, block count): their overlay blocks
    /// are forgotten once the copies are done (unless rewritten since).
    copied: Vec<(u32, u32, u32)>,
    /// Last LSN of that batch.
    copied_lsn: u64,
}

impl Leader {
    pub fn new(last_lsn: u64) -> Leader {
        Leader {
            prev_batch_last_lsn: last_lsn,
            batch: Vec::new(),
            in_flight: Vec::new(),
            completed: Vec::new(),
            copies: Vec::new(),
            copied: Vec::new(),
            copied_lsn: 0,
        }
    }
}

impl Store {
    /// Group commit: make everything appended before this call durable, sharing one
    /// fdatasync with every concurrent caller.
    pub(crate) fn flush_inner(&self) -> Result<(), StoreError> {
        self.file.check_writable()?;
        let target = lock(&self.wal).last_lsn();
        if self.durable_lsn.load(Ordering::Acquire) >= target {
            return Ok(());
        }
        // While we wait for the leader role, its holder may write a batch that covers us.
        let need = {
            let mut leader = lock(&self.leader);
            self.file.check_writable()?;
            if self.durable_lsn.load(Ordering::Acquire) >= target {
                return Ok(());
            }
            self.flush_batch(&mut leader, false)?
        };
        self.checkpoint_if_now(need)
    }

    /// Make slots freed by earlier records reusable: one batch makes the freeing records
    /// durable, a second (possibly just a commit record) confirms them.
    pub(crate) fn reclaim_slots(&self) -> Result<(), StoreError> {
        for _ in 0..2 {
            let need = self.flush_batch(&mut lock(&self.leader), true)?;
            self.checkpoint_if_now(need)?;
        }
        Ok(())
    }

    /// Take a checkpoint now (`clean` when closing), after any in progress.
    pub(crate) fn checkpoint(&self, clean: bool) -> Result<(), StoreError> {
        let mut seq = lock(&self.checkpointer);
        self.checkpoint_locked(&mut seq, clean)
    }

    /// The checkpoint a flush found needed now, run by the flusher once it let go of the
    /// leader role (the checkpoint takes it back only for its cut).
    fn checkpoint_if_now(&self, need: CheckpointNeed) -> Result<(), StoreError> {
        match need {
            CheckpointNeed::Now => self.checkpoint(false),
            CheckpointNeed::No | CheckpointNeed::Due => Ok(()),
        }
    }

    /// Is a checkpoint due, and none running? The store's owner then runs
    /// [`Store::checkpoint_due`] off its latency-sensitive threads; batches go on committing
    /// meanwhile.
    pub fn checkpoint_wanted(&self) -> bool {
        match self.checkpointer.try_lock() {
            Ok(_running) => self.checkpoint_need() != CheckpointNeed::No,
            Err(_) => false,
        }
    }

    /// Run a checkpoint if one is due (see [`Store::checkpoint_wanted`]); a no-op otherwise.
    pub fn checkpoint_due(&self) -> Result<(), StoreError> {
        self.file.check_writable()?;
        let mut seq = lock(&self.checkpointer);
        if self.checkpoint_need() == CheckpointNeed::No {
            return Ok(());
        }
        self.checkpoint_locked(&mut seq, false)
    }

    /// How full the WAL and the dirty crcs are, as a checkpoint need.
    fn checkpoint_need(&self) -> CheckpointNeed {
        let wal_percent = {
            let wal = lock(&self.wal);
            (wal.pending_pos - wal.tail_pos) * 100 / wal.wal_bytes
        };
        // Dirty crcs leave RAM at the checkpoint that writes them.
        let crc_percent = read(&self.index).crc_dirty_percent();
        if wal_percent > CHECKPOINT_INLINE_PERCENT || crc_percent > 200 {
            CheckpointNeed::Now
        } else if wal_percent > CHECKPOINT_TRIGGER_PERCENT || crc_percent > 100 {
            CheckpointNeed::Due
        } else {
            CheckpointNeed::No
        }
    }

    /// Write, sync and apply the pending batch. `force` writes a batch even when nothing is
    /// pending (a lone commit record), to confirm the previous one. Returns whether a
    /// checkpoint is needed, for the caller to run once it let go of the leader role.
    fn flush_batch(&self, leader: &mut Leader, force: bool) -> Result<CheckpointNeed, StoreError> {
        self.file.check_writable()?;
        let mut batch = std::mem::take(&mut leader.batch);
        batch.clear();
        let taken = {
            let mut wal = lock(&self.wal);
            if wal.pending.is_empty() && !(force && wal.has_room_for_commit()) {
                None
            } else {
                Some(self.close_batch(&mut wal, &mut batch, &mut leader.in_flight))
            }
        };
        let result = match taken {
            Some((start_pos, last_lsn)) => self.commit_batch(leader, &batch, start_pos, last_lsn),
            None => Ok(()),
        };
        leader.batch = batch;
        result?;
        // A forced batch with no room for its commit record means the WAL is full: a
        // checkpoint confirms everything instead.
        if force && taken.is_none() {
            return Ok(CheckpointNeed::Now);
        }
        Ok(self.checkpoint_need())
    }

    /// Close the pending records with a commit record and take them (and the whole-object
    /// writes they wait for) as the next batch: its start position and last LSN.
    fn close_batch(
        &self,
        wal: &mut WalBuffer,
        batch: &mut Vec<u8>,
        in_flight: &mut Vec<(u32, InFlightWrite)>,
    ) -> (u64, u64) {
        wal.append_commit();
        self.unflushed_bytes.store(0, Ordering::Relaxed);
        self.in_flight_bytes.store(0, Ordering::Relaxed);
        wal.take_batch(batch, in_flight)
    }

    fn commit_batch(
        &self,
        leader: &mut Leader,
        batch: &[u8],
        start_pos: u64,
        last_lsn: u64,
    ) -> Result<(), StoreError> {
        // The remap records of this batch name slot data that must be on the device before
        // the fdatasync that makes them durable.
        leader.completed.clear();
        for (slot, write) in leader.in_flight.drain(..) {
            self.file.finish_write(write.done, write.op)?;
            leader.completed.push(slot);
        }
        // The batch goes out while the previous batch's in-place copies finish; one
        // fdatasync then makes the batch durable, together with the whole-object data that
        // writers put in fresh slots before appending their remap records.
        let wal_writes = self.start_wal(start_pos, batch)?;
        self.finish_deferred_copies(leader)?;
        for w in wal_writes.into_iter().flatten() {
            self.file.finish_write(w.done, w.op)?;
        }
        self.file.sync("fdatasync WAL batch")?;
        self.durable_lsn.store(last_lsn, Ordering::Release);
        self.apply_batch(leader, batch, last_lsn)?;
        let mut index = write(&self.index);
        for &slot in &leader.completed {
            index.remove_in_flight(slot);
        }
        index.release_confirmed(leader.prev_batch_last_lsn);
        drop(index);
        leader.prev_batch_last_lsn = last_lsn;
        Ok(())
    }

    /// Wait for every write of `copies`, all of them even after a failure; the first
    /// failure is returned.
    fn finish_copies(&self, copies: &mut Vec<InFlightWrite>) -> Result<(), StoreError> {
        let mut result = Ok(());
        for copy in copies.drain(..) {
            let done = self.file.finish_write(copy.done, copy.op);
            if result.is_ok() {
                result = done;
            }
        }
        result
    }

    /// Wait for the in-place copies of the last durable batch, then let reads of their
    /// blocks go to the slots. The first failure stops the store.
    fn finish_deferred_copies(&self, leader: &mut Leader) -> Result<(), StoreError> {
        self.finish_copies(&mut leader.copies)?;
        if !leader.copied.is_empty() {
            let mut index = write(&self.index);
            for &(slot, first, count) in &leader.copied {
                index.remove_applied_overlay(slot, first, count, leader.copied_lsn);
            }
            leader.copied.clear();
        }
        Ok(())
    }

    /// Start writing a batch at WAL position `start_pos` (two writes where it wraps).
    fn start_wal(
        &self,
        start_pos: u64,
        bytes: &[u8],
    ) -> Result<[Option<InFlightWrite>; 2], StoreError> {
        let (wal_offset, wal_bytes) = (self.layout.wal_offset, self.layout.wal_bytes);
        let phys = start_pos % wal_bytes;
        let first_len = ((wal_bytes - phys) as usize).min(bytes.len());
        let first =
            self.file
                .start_write(&bytes[..first_len], wal_offset + phys, "write WAL batch")?;
        let second = if first_len < bytes.len() {
            self.file
                .start_write(&bytes[first_len..], wal_offset, "write WAL batch (wrapped)")?
        } else {
            None
        };
        Ok([first, second])
    }

    /// Start copying the batch's write records into their slots. Safe only now that they
    /// are durable: a power cut tearing these in-place writes is repaired by replaying the
    /// records. Each block is copied once, from the newest record of the batch that writes
    /// it (several small writes to one block cost one device write), so no two copies
    /// overlap and all go out together. They are not awaited here: they finish while the
    /// next batch is written, or before a checkpoint ([`Store::finish_deferred_copies`]);
    /// until then reads of those blocks are served from the overlay.
    fn apply_batch(
        &self,
        leader: &mut Leader,
        batch: &[u8],
        last_lsn: u64,
    ) -> Result<(), StoreError> {
        debug_assert!(leader.copies.is_empty() && leader.copied.is_empty());
        let _gate = read(&self.gate);
        let mut writes = Vec::new();
        let mut off = 0;
        while off < batch.len() {
            // Our own encoding; the data crcs are re-checked in debug builds only.
            let (rec, len) = wal::decode_record(&batch[off..], cfg!(debug_assertions))
                .expect("a batch this process encoded decodes");
            assert!(rec.lsn <= last_lsn && rec.lsn <= self.durable_lsn.load(Ordering::Acquire));
            match rec.body {
                WalBody::Write {
                    slot,
                    first_block,
                    crcs,
                    data,
                    ..
                }
                | WalBody::Merge {
                    slot,
                    first_block,
                    crcs,
                    data,
                    ..
                } if !crcs.is_empty() => {
                    debug_assert_eq!(data.len(), crcs.len() * BLOCK);
                    writes.push((slot, first_block, data));
                }
                _ => {}
            }
            if rec.body == WalBody::Commit {
                // The batch's end: only padding follows.
                break;
            }
            off += len;
        }
        let mut copied = std::collections::HashSet::new();
        let mut runs: Vec<(&[u8], u64)> = Vec::new();
        let mut logged = 0u64;
        for &(slot, first, data) in writes.iter().rev() {
            logged += (data.len() / BLOCK) as u64;
            let blocks = data.len() / BLOCK;
            let mut b = 0;
            // Bound: b advances on every pass of either loop.
            while b < blocks {
                if !copied.insert((slot, first + b as u32)) {
                    b += 1;
                    continue;
                }
                let run = b;
                b += 1;
                while b < blocks && copied.insert((slot, first + b as u32)) {
                    b += 1;
                }
                let at = self.layout.slot_offset(slot) + (first as u64 + run as u64) * BLOCK as u64;
                runs.push((&data[run * BLOCK..b * BLOCK], at));
                // A block already taken by a newer record ends the run; the loop goes on
                // past it (it is in `copied`, so the first branch skips it).
            }
            leader.copied.push((slot, first, blocks as u32));
        }
        leader.copied_lsn = last_lsn;
        // All at once: one submission for the batch's copies.
        let started = self.file.start_writes(&runs, "apply WAL record in place")?;
        leader.copies.extend(started);
        let applied = copied.len() as u64;
        self.blocks_applied.fetch_add(applied, Ordering::Relaxed);
        self.blocks_merged
            .fetch_add(logged - applied, Ordering::Relaxed);
        Ok(())
    }

    /// Write a checkpoint: the table as of the last appended record, after making every
    /// record up to it durable and applied; then let the WAL reuse the space before it.
    /// `seq` is the newest durable checkpoint's number, held (`Store::checkpointer`) for the
    /// whole checkpoint; the leader role only for the cut, so batches after the cut commit
    /// while the crc pages and the table are written.
    pub(crate) fn checkpoint_locked(&self, seq: &mut u64, clean: bool) -> Result<(), StoreError> {
        self.file.check_writable()?;
        let started = std::time::Instant::now();
        let new_seq = *seq + 1;
        let (header, pages) = {
            let mut leader = lock(&self.leader);
            let mut batch = std::mem::take(&mut leader.batch);
            batch.clear();
            let (taken, header, pages) = {
                // A consistent cut: writers update the table and append under the table's
                // write lock, so holding it stops them between records. The table is encoded
                // later, as of this moment: changes made meanwhile first save what they
                // replace.
                let mut index = write(&self.index);
                let mut wal = lock(&self.wal);
                let taken = if wal.pending.is_empty() {
                    None
                } else {
                    Some(self.close_batch(&mut wal, &mut batch, &mut leader.in_flight))
                };
                let pages = index.begin_cut(new_seq);
                let header = CheckpointHeader {
                    seq: new_seq,
                    wal_pos: wal.head_pos,
                    next_lsn: wal.next_lsn,
                    entry_count: index.object_count(),
                    page_count: pages.len() as u32,
                    clean,
                    aligned_batches: true,
                };
                (taken, header, pages)
            };
            // The records before the cut durable, and what they put in place written (made
            // durable by the checkpoint's first fdatasync): the new replay position may then
            // pass them. Later batches' copies are no concern of this checkpoint.
            let before_cut = match taken {
                Some((start_pos, last_lsn)) => {
                    self.commit_batch(&mut leader, &batch, start_pos, last_lsn)
                }
                None => Ok(()),
            }
            .and_then(|()| self.finish_deferred_copies(&mut leader));
            leader.batch = batch;
            if let Err(e) = before_cut {
                write(&self.index).end_cut();
                return Err(e);
            }
            (header, pages)
        };
        let result = self.write_checkpoint(&header, &pages);
        {
            // Done or failed, nothing keeps saving entries for this checkpoint.
            let mut index = write(&self.index);
            match result {
                Ok(()) => index.complete_cut(new_seq),
                Err(_) => index.end_cut(),
            }
        }
        result?;
        // What the table freed since the last checkpoint (dropped dirty crcs, a hash array
        // that doubled) goes back to the kernel rather than stay resident as free heap.
        crate::memory::release_free_heap();
        *seq = new_seq;
        self.last_checkpoint_ms
            .store(self.opened_ms(), Ordering::Relaxed);
        self.checkpoints.fetch_add(1, Ordering::Relaxed);
        self.checkpoint_us
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        // Replay starts at the cut now: the records before it are trusted, so the slots
        // they freed may be reused.
        lock(&self.wal).tail_pos = header.wal_pos;
        write(&self.index).release_confirmed(header.next_lsn - 1);
        Ok(())
    }

    /// Write the crc pages and the table of a checkpoint whose cut is taken, each made
    /// durable before the next (no leader role needed).
    fn write_checkpoint(
        &self,
        header: &CheckpointHeader,
        pages: &[CutPage],
    ) -> Result<(), StoreError> {
        self.write_crc_pages(header.seq, pages)?;
        // The records before the new replay position are about to be overwritable: what they
        // put in place must be durable first; so must the crc pages the checkpoint names.
        self.file.sync("fdatasync before checkpoint")?;
        let area = (header.seq % 2) as usize;
        let (start, end) = (
            self.layout.checkpoint_offsets[area],
            self.layout.checkpoint_offsets[area] + self.layout.checkpoint_bytes,
        );
        let mut write_at = |bytes: &[u8], at: u64| {
            assert!(at + bytes.len() as u64 <= end, "checkpoint fits its area");
            self.file.write_at(bytes, at, "write checkpoint")
        };
        // The buffers of a checkpoint (a piece of the table, a group of crc pages) are freed
        // after it: between checkpoints they would only be resident memory.
        let mut w = AreaWriter::new(header, self.layout.table_format(), start, Vec::new());
        // A piece at a time: encode under the table's lock, write without it.
        while !write(&self.index).encode_cut(&mut w, CUT_SCAN_SLOTS_MAX) {
            w.write_blocks(&mut write_at)?;
        }
        let numbers: Vec<u32> = pages.iter().map(|c| c.page).collect();
        w.push_pages(&numbers);
        w.finish(&mut write_at)?;
        self.file.sync("fdatasync checkpoint")
    }

    /// Write checkpoint `seq`'s crc pages into its region as of its cut, a group at a time:
    /// the old contents of those that need them read from the newest region (which this
    /// checkpoint never writes), the crcs set in RAM composed over them under the table's
    /// lock, then all written together.
    fn write_crc_pages(&self, seq: u64, pages: &[CutPage]) -> Result<(), StoreError> {
        let (Some(regions), Some(g)) = (self.layout.crc_region_offsets, self.layout.crc_geometry())
        else {
            return Ok(());
        };
        let page_bytes = g.page_bytes as usize;
        let (base_region, base_seq) = (((seq - 1) % 2) as usize, seq - 1);
        let mut buf = Vec::new();
        for group in pages.chunks(CRC_PAGES_PER_WRITE) {
            buf.clear();
            buf.resize(group.len() * page_bytes, 0);
            self.read_crc_bases(group, regions[base_region], page_bytes, &mut buf)?;
            for (c, image) in group.iter().zip(buf.chunks_exact(page_bytes)) {
                if c.needs_base && !crc_pages::is_valid(image, c.page, base_region, base_seq) {
                    return Err(StoreError::corrupt(format!(
                        "crc page {} of region {base_region} fails its check: checkpoint \
                             {seq} cannot be written",
                        c.page
                    )));
                }
            }
            {
                let mut index = write(&self.index);
                for (c, image) in group.iter().zip(buf.chunks_exact_mut(page_bytes)) {
                    index.compose_cut_page(c.page, image);
                }
            }
            let region = regions[(seq % 2) as usize];
            for (c, image) in group.iter().zip(buf.chunks_exact_mut(page_bytes)) {
                crc_pages::seal(image, c.page, seq);
            }
            let writes: Vec<(&[u8], u64)> = group
                .iter()
                .zip(buf.chunks_exact(page_bytes))
                .map(|(c, image)| (image, region + c.page as u64 * page_bytes as u64))
                .collect();
            let mut started = self.file.start_writes(&writes, "write crc page")?;
            self.finish_copies(&mut started)?;
        }
        Ok(())
    }

    /// Read the old contents of the pages of `group` that need them from the region at
    /// `region_offset` into their places in `buf` (the others stay zero), all submitted
    /// before any is awaited.
    fn read_crc_bases(
        &self,
        group: &[CutPage],
        region_offset: u64,
        page_bytes: usize,
        buf: &mut [u8],
    ) -> Result<(), StoreError> {
        let mut pending = Vec::new();
        for (i, (c, image)) in group
            .iter()
            .zip(buf.chunks_exact_mut(page_bytes))
            .enumerate()
        {
            if !c.needs_base {
                continue;
            }
            let at = region_offset + c.page as u64 * page_bytes as u64;
            match self.file.submit_read(at, page_bytes) {
                Some(done) => pending.push((i, done)),
                None => self.file.read_at(image, at, "read crc page")?,
            }
        }
        for (i, done) in pending {
            let data = self.file.finish_read(done.wait(), "read crc page")?;
            buf[i * page_bytes..(i + 1) * page_bytes].copy_from_slice(data.as_slice());
        }
        Ok(())
    }
}
