//! Unit tests of the store that need its internals (the fault-injection hook).

use super::*;
use std::sync::atomic::Ordering;

const A: ObjectId = ObjectId::new(1, 0);
const B: ObjectId = ObjectId::new(1, 1);

fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

fn opts() -> StoreOptions {
    StoreOptions {
        capacity_bytes: 8 << 20,
        object_size_bytes: 16 << 10,
        wal_bytes: 4 << 20,
    }
}

fn v(n: u64) -> Version {
    Version::new(1, n)
}

#[test]
fn a_failed_sync_stops_writes_and_flushes_but_not_reads() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &opts()).expect("create");
    store.write(A, 0, &[1; BLOCK], v(1)).expect("write");
    store.flush().expect("flush");
    store
        .write(A, BLOCK as u32, &[2; BLOCK], v(2))
        .expect("write");
    store.file.inject_failure.store(true, Ordering::Release);
    assert!(matches!(store.flush(), Err(StoreError::Io { .. })));
    // Even if the disk seems fine again, the store stays stopped.
    store.file.inject_failure.store(false, Ordering::Release);
    assert!(matches!(
        store.write(A, 0, &[3; 10], v(3)),
        Err(StoreError::Failed)
    ));
    assert!(matches!(
        store.write(B, 0, &[3; 16 << 10], v(3)),
        Err(StoreError::Failed)
    ));
    assert!(matches!(
        store.trim(A, 0, 10, v(3)),
        Err(StoreError::Failed)
    ));
    assert!(matches!(store.delete(A, v(3)), Err(StoreError::Failed)));
    assert!(matches!(store.flush(), Err(StoreError::Failed)));
    let mut buf = vec![0; 2 * BLOCK];
    store.read(A, 0, &mut buf).expect("reads go on");
    assert!(buf[..BLOCK].iter().all(|&b| b == 1) && buf[BLOCK..].iter().all(|&b| b == 2));
    assert!(matches!(store.close(), Err(StoreError::Failed)));
    let store = Store::open(&path).expect("reopen");
    store.read(A, 0, &mut buf).expect("read");
    assert!(
        buf[..BLOCK].iter().all(|&b| b == 1),
        "the flushed write survived"
    );
    assert!(store.version(A).is_some_and(|v| v.counter >= 1));
    store.check_invariants();
}

#[test]
fn a_failed_slot_write_of_a_whole_object_stops_the_store() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &opts()).expect("create");
    store.file.inject_failure.store(true, Ordering::Release);
    let whole = vec![7; 16 << 10];
    assert!(matches!(
        store.write(A, 0, &whole, v(1)),
        Err(StoreError::Io { .. })
    ));
    store.file.inject_failure.store(false, Ordering::Release);
    assert!(matches!(
        store.write(A, 0, &whole, v(1)),
        Err(StoreError::Failed)
    ));
    assert_eq!(store.version(A), None, "nothing half-done is visible");
    store.check_invariants();
    drop(store);
    let store = Store::open(&path).expect("reopen");
    assert!(store.objects().is_empty());
    store.close().expect("close");
}

/// Goal: past the unflushed bound the store tells callers to flush (`write_would_flush`),
/// and a write flushes by itself only past twice the bound, so callers that flush when told
/// never have a write wait on the device; one that never does is still bounded (counted).
#[test]
fn a_write_flushes_itself_only_past_twice_the_unflushed_bound() {
    let dir = scratch();
    let store = Store::create(&dir.path().join("store"), &opts()).expect("create");
    let bound = store.layout().wal_bytes / 8;
    let mut n = 0u64;
    let mut write = |store: &Store| {
        let obj = ObjectId::new(3, n % 16);
        let block = ((n / 16) % 4) as u32;
        store
            .write(obj, block * BLOCK as u32, &[n as u8; BLOCK], v(n + 1))
            .expect("write");
        n += 1;
    };
    // A caller that flushes when told: never a flush inside a write.
    for _ in 0..2000 {
        if store.write_would_flush() {
            store.flush().expect("flush");
        }
        write(&store);
    }
    assert_eq!(store.wal_stats().writer_flushes, 0);
    // One that ignores it: the store flushes inside the write, past twice the bound.
    let mut told_at = None;
    let mut flushed_at = None;
    for i in 0..2000u64 {
        if told_at.is_none() && store.write_would_flush() {
            told_at = Some(i);
        }
        write(&store);
        if store.wal_stats().writer_flushes > 0 {
            flushed_at = Some(i);
            break;
        }
    }
    let (told_at, flushed_at) = (
        told_at.expect("told to flush"),
        flushed_at.expect("the write flushed"),
    );
    assert_eq!(store.wal_stats().writer_flushes, 1);
    assert!(
        store.unflushed_bytes() < bound,
        "the write's own flush emptied the buffer"
    );
    // Between being told and the write's own flush, about another bound's worth of writes.
    let records_per_bound = bound / (BLOCK as u64 + 128);
    assert!(
        flushed_at - told_at >= records_per_bound / 2,
        "the store flushed itself {} writes after the bound ({records_per_bound} per bound)",
        flushed_at - told_at
    );
    store.close().expect("close");
}

#[test]
fn group_commit_and_checkpoints_keep_the_wal_bounded() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &opts()).expect("create");
    let wal_bytes = store.layout().wal_bytes;
    // Several laps of the circular log, through checkpoints and the unflushed-bytes limit.
    for i in 0..3000u64 {
        let obj = ObjectId::new(2, i % 7);
        let block = (i % 4) as u32;
        store
            .write(obj, block * BLOCK as u32, &[i as u8; BLOCK], v(i))
            .expect("write");
        if i % 50 == 0 {
            store.flush().expect("flush");
        }
        // A caller that never flushes when told to (`write_would_flush`) meets the hard
        // bound: twice the bound, which is an eighth of the WAL.
        let wal = lock(&store.wal);
        assert!(
            wal.pending_bytes() <= 2 * (wal_bytes / 8) + (64 << 10),
            "unflushed bytes bounded"
        );
    }
    store.flush().expect("flush");
    let mut buf = [0u8; BLOCK];
    for i in 3000 - 28..3000u64 {
        store
            .read(
                ObjectId::new(2, i % 7),
                (i % 4) as u32 * BLOCK as u32,
                &mut buf,
            )
            .expect("read");
        assert!(buf.iter().all(|&b| b == i as u8));
    }
    store.check_invariants();
}

#[test]
fn a_store_can_be_shared_between_threads() {
    fn shareable<T: Send + Sync>() {}
    shareable::<Store>();
}

#[test]
fn freed_slots_are_reused_once_confirmed() {
    // Goal: slots freed by whole-object rewrites wait for confirmation, and
    // `confirm_freed_slots` makes them reusable at once, so a rewrite loop that confirms
    // regularly cycles through a few slots instead of walking the whole file.
    let dir = scratch();
    let store = Store::create(&dir.path().join("store"), &opts()).expect("create");
    let whole = vec![7u8; 16 << 10];
    store.write(A, 0, &whole, v(1)).expect("write");
    store.write(A, 0, &whole, v(2)).expect("rewrite");
    assert_eq!(store.pending_freed_slots(), 1);
    store.confirm_freed_slots().expect("confirm");
    assert_eq!(store.pending_freed_slots(), 0);
    let slot_of_a = || read(&store.index).object(A).expect("A exists").slot;
    let mut used = std::collections::BTreeSet::new();
    for n in 3..200 {
        store.write(A, 0, &whole, v(n)).expect("rewrite");
        used.insert(slot_of_a());
        store.confirm_freed_slots().expect("confirm");
    }
    // The store has ~250 slots; A alternates between the two most recently freed.
    assert!(used.len() <= 2, "rewrites used slots {used:?}");
    let mut buf = vec![0u8; 16 << 10];
    store.read(A, 0, &mut buf).expect("read");
    assert_eq!(buf, whole);
}

#[test]
fn wal_stats_follow_writes_and_checkpoints() {
    // Goal: the WAL's used bytes grow with writes, never pass its size, fall back at a
    // checkpoint; the checkpoint age restarts at a checkpoint, which is counted and timed.
    let dir = scratch();
    let store = Store::create(&dir.path().join("store"), &opts()).expect("create");
    let before = store.wal_stats();
    assert_eq!(before.capacity_bytes, store.layout().wal_bytes);
    for i in 0..8u64 {
        store
            .write(ObjectId::new(3, i), 0, &[1; BLOCK], v(i + 1))
            .expect("write");
    }
    store.flush().expect("flush");
    let written = store.wal_stats();
    assert!(
        written.used_bytes >= before.used_bytes + 8 * BLOCK as u64,
        "{before:?} -> {written:?}"
    );
    assert!(written.used_bytes <= written.capacity_bytes);
    // The age grows at least as fast as time passes (a sleep lasts at least its time)...
    std::thread::sleep(std::time::Duration::from_millis(30));
    let aged = store.wal_stats().checkpoint_age_ms;
    assert!(aged >= 30, "{aged} ms after a 30 ms sleep");
    // ...and restarts at a checkpoint: it is then at most the time since the call began
    // (+1 ms: both ends are whole milliseconds), however long the machine stalls in between.
    let checkpoint_called = std::time::Instant::now();
    store.checkpoint(false).expect("checkpoint");
    let after = store.wal_stats();
    let since_call_ms = checkpoint_called.elapsed().as_millis() as u64;
    assert!(after.used_bytes < written.used_bytes, "{after:?}");
    assert_eq!(after.checkpoints, written.checkpoints + 1, "{after:?}");
    assert!(
        after.checkpoint_micros > written.checkpoint_micros
            && after.checkpoint_micros - written.checkpoint_micros <= since_call_ms * 1000 + 1000,
        "{written:?} -> {after:?}"
    );
    assert!(
        after.checkpoint_age_ms <= since_call_ms + 1,
        "{after:?}, {since_call_ms} ms since the checkpoint was called"
    );
}

/// Goal: a store from before block-aligned batches (newest checkpoint of format version 1,
/// its log's batches byte-packed) replays every flushed write, and what it writes next
/// (aligned) survives another crash.
#[test]
fn a_version_1_log_of_packed_batches_replays() {
    use crate::wal::{decode_wal_record, WalBody};
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create_version_1(&path, &opts(), &IoOptions::default()).expect("create");
    let layout = store.layout();
    assert_eq!(layout.format_version(), 1);
    store.write(A, 0, &[1; BLOCK], v(1)).expect("write A");
    store.flush().expect("flush");
    store.write(B, 100, &[2; 5000], v(1)).expect("write B");
    store.flush().expect("flush");
    drop(store); // a crash: no checkpoint since the one at create (area 0)

    // Repack the log as version 1 wrote it: each batch right after the previous one.
    let mut file = std::fs::read(&path).expect("read");
    let wal = layout.wal_offset as usize;
    let (mut at, mut packed, mut commits) = (wal, Vec::new(), 0);
    while let Ok((rec, len)) = decode_wal_record(&file[at..]) {
        packed.extend_from_slice(&file[at..at + len]);
        at += len;
        if rec.body == WalBody::Commit {
            commits += 1;
            at = at.next_multiple_of(BLOCK);
        }
    }
    assert_eq!(commits, 2, "two batches");
    assert!(packed.len() < at - wal, "the batches were padded");
    file[wal..at].fill(0);
    file[wal..wal + packed.len()].copy_from_slice(&packed);
    let area = layout.checkpoint_offsets[0] as usize;
    crate::checkpoint::downgrade_to_version_1(
        &mut file[area..area + layout.checkpoint_bytes as usize],
    );
    std::fs::write(&path, &file).expect("write");

    let read = |store: &Store, obj, offset: u32, len: usize| {
        let mut buf = vec![0; len];
        store.read(obj, offset, &mut buf).expect("read");
        buf
    };
    let store = Store::open(&path).expect("open a version-1 store");
    assert!(read(&store, A, 0, BLOCK) == vec![1; BLOCK], "A at 0");
    assert!(read(&store, B, 100, 5000) == vec![2; 5000], "B at 100");
    store
        .write(A, BLOCK as u32, &[3; BLOCK], v(2))
        .expect("write");
    store.flush().expect("flush");
    drop(store);
    let store = Store::open(&path).expect("reopen");
    assert!(read(&store, A, 0, BLOCK) == vec![1; BLOCK], "A at 0");
    assert!(
        read(&store, A, BLOCK as u32, BLOCK) == vec![3; BLOCK],
        "A at 4096"
    );
    assert!(read(&store, B, 100, 5000) == vec![2; 5000], "B at 100");
}

/// Goal: the in-place copies of one batch write each block once, from its newest record;
/// reads see the newest bytes while the copies are deferred and after a crash that leaves
/// them unfinished or never started (replay redoes them).
#[test]
fn small_writes_to_one_block_in_a_batch_are_copied_once() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &opts()).expect("create");
    store.write(A, 0, &[1; BLOCK], v(1)).expect("write");
    store.write(A, 0, &[2; BLOCK], v(2)).expect("write");
    store.write(A, 0, &[3; 2 * BLOCK], v(3)).expect("write");
    store
        .write(B, BLOCK as u32, &[4; BLOCK], v(1))
        .expect("write");
    store.flush().expect("flush");
    let stats = store.wal_stats();
    // Logged: 1 + 1 + 2 + 1 blocks; copied: A's blocks 0 and 1, B's block 1.
    assert_eq!(
        (stats.blocks_applied, stats.blocks_merged),
        (3, 2),
        "{stats:?}"
    );
    let mut buf = vec![0; 2 * BLOCK];
    store.read(A, 0, &mut buf).expect("read");
    assert!(
        buf.iter().all(|&x| x == 3),
        "newest bytes while copies are deferred"
    );
    // A later batch rewrites block 1 of A while the first batch's copies may be in flight.
    store
        .write(A, BLOCK as u32, &[5; BLOCK], v(4))
        .expect("write");
    store.flush().expect("flush");
    store.read(A, 0, &mut buf).expect("read");
    assert!(buf[..BLOCK].iter().all(|&x| x == 3) && buf[BLOCK..].iter().all(|&x| x == 5));
    // Dropped without close: a crash. The log replays into the same contents.
    drop(store);
    let store = Store::open(&path).expect("reopen");
    store.read(A, 0, &mut buf).expect("read");
    assert!(buf[..BLOCK].iter().all(|&x| x == 3) && buf[BLOCK..].iter().all(|&x| x == 5));
    let mut one = vec![0; BLOCK];
    store.read(B, BLOCK as u32, &mut one).expect("read");
    assert!(one.iter().all(|&x| x == 4));
    store.close().expect("close");
}

#[test]
fn checkpoints_streamed_while_writers_change_the_table_recover_what_was_flushed() {
    // Goal: a checkpoint records the table of its cut even though writers create, rewrite,
    // delete and rename objects while it is encoded piece by piece (a table of 20,000
    // objects: several pieces); after a crash, the newest checkpoint plus the log give back
    // exactly what was flushed.
    const OBJECTS: u64 = 20_000;
    let dir = scratch();
    let path = dir.path().join("store");
    let object = 4096u32;
    let opts = StoreOptions {
        capacity_bytes: (OBJECTS + 5000) * (object as u64 + 2 * 56) + (8 << 20),
        object_size_bytes: object,
        wal_bytes: 4 << 20,
    };
    let store = Store::create(&path, &opts).expect("create");
    let mut model = std::collections::HashMap::new();
    for i in 0..OBJECTS {
        let obj = ObjectId::new(5, i);
        store.write(obj, 0, &[i as u8; BLOCK], v(1)).expect("write");
        model.insert(obj, (v(1), i as u8));
    }
    store.flush().expect("flush");
    let done = std::sync::atomic::AtomicBool::new(false);
    let (model, checkpoints) = std::thread::scope(|s| {
        let (store, done) = (&store, &done);
        let writer = s.spawn(move || {
            let mut x = 0x2545_f491_4f6c_dd1du64;
            for n in 2..6000u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let obj = ObjectId::new(5, x % (OBJECTS + 2000));
                match x >> 60 {
                    0 => {
                        store.delete(obj, v(n)).expect("delete");
                        model.remove(&obj);
                    }
                    1 => {
                        let to = ObjectId::new(5, (x >> 8) % (OBJECTS + 2000));
                        if to != obj && store.promote(obj, to).expect("promote") {
                            let moved = model.remove(&obj).expect("moved object existed");
                            model.insert(to, moved);
                        }
                    }
                    _ => {
                        store.write(obj, 0, &[n as u8; BLOCK], v(n)).expect("write");
                        model.insert(obj, (v(n), n as u8));
                    }
                }
                if n % 64 == 0 {
                    store.flush().expect("flush");
                }
            }
            store.flush().expect("flush");
            done.store(true, Ordering::Release);
            model
        });
        let mut checkpoints = 0;
        while !done.load(Ordering::Acquire) {
            store.checkpoint(false).expect("checkpoint");
            checkpoints += 1;
        }
        (writer.join().expect("writer"), checkpoints)
    });
    assert!(checkpoints >= 2, "checkpoints ran beside the writer");
    store.check_invariants();
    drop(store); // a crash: recovery starts from the newest checkpoint
    let store = Store::open(&path).expect("recover");
    store.check_invariants();
    assert_eq!(store.stats().objects, model.len() as u64);
    let mut buf = [0u8; BLOCK];
    for (&obj, &(version, byte)) in &model {
        assert_eq!(store.version(obj), Some(version), "version of {obj}");
        store.read(obj, 0, &mut buf).expect("read");
        assert!(buf.iter().all(|&b| b == byte), "data of {obj}");
    }
}

/// The bytes of `path`'s crc region `r`.
fn region_range(layout: &StoreLayout, r: usize) -> std::ops::Range<usize> {
    let regions = layout.crc_region_offsets.expect("a store with crc regions");
    let g = layout.crc_geometry().expect("crc geometry");
    regions[r] as usize..(regions[r] + g.region_bytes()) as usize
}

#[test]
fn a_torn_crc_region_write_is_rewritten_by_the_next_checkpoint() {
    // Goal (regression for torn crc-region writes): power fails while checkpoint 3 writes
    // its crc pages: they are torn, and the checkpoint never becomes valid. Recovery from
    // checkpoint 2 reads crcs from the other region; the checkpoint `open` writes rewrites
    // every page that could be torn, including pages only carried over from checkpoint 2
    // (no replayed record touches them): after another crash, recovery from that checkpoint
    // reads every block back.
    let dir = scratch();
    let path = dir.path().join("store");
    let opts = StoreOptions {
        capacity_bytes: 64 << 20,
        object_size_bytes: 128 << 10,
        wal_bytes: 4 << 20,
    };
    let store = Store::create(&path, &opts).expect("create");
    let layout = store.layout();
    let g = layout
        .crc_geometry()
        .expect("a new store keeps crcs on disk");
    assert_eq!(g.slots_per_page, 31);
    let obj = |i: u64| ObjectId::new(4, i);
    let mut want = std::collections::BTreeMap::new();
    let mut put = |store: &Store, i: u64, tag: u8| {
        store
            .write(obj(i), 0, &[tag; BLOCK], v(tag as u64))
            .expect("write");
        want.insert(i, tag);
    };
    // Interval 1: 100 objects over pages 0..=3. Checkpoint 1 (region 1) writes them all.
    for i in 0..100 {
        put(&store, i, 1);
    }
    store.flush().expect("flush");
    store.checkpoint(false).expect("checkpoint 1");
    // Intervals 2 and 3 touch page 0 only: checkpoints 2 and 3 write pages 1..=3 only
    // because the one before them did.
    put(&store, 0, 2);
    store.flush().expect("flush");
    store.checkpoint(false).expect("checkpoint 2");
    put(&store, 1, 3);
    store.flush().expect("flush");
    let before = std::fs::read(&path).expect("read the file");
    store.checkpoint(false).expect("checkpoint 3");
    let after = std::fs::read(&path).expect("read the file");
    drop(store);
    let torn_region = region_range(&layout, 1);
    let mut file = before.clone();
    let mut torn_pages = 0;
    for (page, (old, new)) in before[torn_region.clone()]
        .chunks_exact(g.page_bytes as usize)
        .zip(after[torn_region.clone()].chunks_exact(g.page_bytes as usize))
        .enumerate()
    {
        if old != new {
            // Half the new page, then garbage: a write cut short.
            let at = torn_region.start + page * g.page_bytes as usize;
            file[at..at + 2048].copy_from_slice(&new[..2048]);
            file[at + 2048..at + g.page_bytes as usize].fill(0x5a);
            torn_pages += 1;
        }
    }
    assert_eq!(torn_pages, 4, "checkpoint 3 wrote pages 0..=3");
    std::fs::write(&path, &file).expect("write the torn file");
    let check = |store: &Store| {
        let mut buf = [0u8; BLOCK];
        for (&i, &tag) in &want {
            store.read(obj(i), 0, &mut buf).expect("read");
            assert!(buf.iter().all(|&b| b == tag), "object {i}");
        }
        store.check_invariants();
    };
    let store = Store::open(&path).expect("recover from checkpoint 2");
    check(&store);
    drop(store); // a crash: the next recovery starts from the checkpoint `open` wrote
    let store = Store::open(&path).expect("recover again");
    check(&store);
    store.close().expect("close");
    let store = Store::open(&path).expect("reopen");
    check(&store);
}

/// Goal: `merge` copies a stash's blocks into an object, gives it the stash's version and
/// removes the stash, visible at once and after a flush and reopen; a bump (no blocks)
/// changes only the version; an absent stash is a no-op and an absent target an error.
#[test]
fn merge_moves_blocks_and_version_and_drops_the_stash() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &opts()).expect("create");
    let (chunk, stash, other) = (
        ObjectId::new(1, 1),
        ObjectId::new(1, 2),
        ObjectId::new(1, 3),
    );
    let size = store.object_size() as usize;
    store
        .write(chunk, 0, &vec![1u8; size], v(1))
        .expect("chunk");
    store
        .write(stash, 4096, &vec![2u8; 8192], v(2))
        .expect("stash");
    assert!(store.merge(stash, 1, chunk, 2, 2).expect("merge"));
    assert_eq!(store.version(stash), None);
    assert_eq!(store.version(chunk), Some(v(2)));
    let expect: Vec<u8> = (0..size / 4096)
        .flat_map(|b| vec![if (2..4).contains(&b) { 2u8 } else { 1 }; 4096])
        .collect();
    let mut got = vec![0u8; size];
    store.read(chunk, 0, &mut got).expect("read");
    assert!(got == expect, "merged blocks");
    assert!(!store.merge(stash, 0, chunk, 0, 1).expect("absent stash"));
    store
        .write(stash, 0, &[9u8; 4096], v(3))
        .expect("bump stash");
    assert!(store.merge(stash, 0, chunk, 0, 0).expect("bump"));
    assert_eq!(store.version(chunk), Some(v(3)));
    store
        .write(stash, 0, &[9u8; 4096], v(4))
        .expect("stash again");
    assert!(
        store.merge(stash, 0, other, 0, 1).is_err(),
        "into an absent object"
    );
    assert!(store.merge(chunk, 0, chunk, 0, 1).is_err(), "into itself");
    store.flush().expect("flush");
    drop(store);
    let store = Store::open(&path).expect("reopen after a crash");
    store.read(chunk, 0, &mut got).expect("read");
    assert!(got == expect, "merged blocks after replay");
    assert_eq!(store.version(chunk), Some(v(3)));
    assert_eq!(store.version(stash), Some(v(4)));
    store.check_invariants();
}
