//! Goal: a torn or garbled WAL tail costs only what was never acknowledged. Recovery stops at
//! the first bad record, keeps everything flushed before it, drops a remap whose slot data did
//! not land, never replays stale records found past the recovered end, and the store works
//! afterwards. Torn states are built from snapshots of a real store file, as a power cut in
//! the middle of a batch write would leave them.

mod common;

use basalt_proto::ObjectId;
use basalt_store::wal::{decode_wal_record, encode_wal_record, WalBody, WalRecord};
use basalt_store::Store;
use common::*;
use std::path::Path;

/// 4 blocks per object.
const OBJ: u32 = 16 << 10;

fn obj(n: u64) -> ObjectId {
    ObjectId::new(3, n)
}

fn snapshot(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("read store file")
}

fn restore(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).expect("write store file");
}

/// Flushed phase A: partial, multi-block and whole-object writes, and a trim.
fn write_a(store: &Store, model: &mut Model) {
    let ops: [(u64, usize, usize); 5] = [
        (0, 100, 5000),
        (1, 0, OBJ as usize),
        (2, 4096, 8192),
        (3, 0, 10),
        (1, 8192, 4096),
    ];
    for (i, &(o, offset, len)) in ops.iter().enumerate() {
        let data = content(100 + i as u64, offset, len);
        store
            .write(obj(o), offset as u32, &data, ver(1, i as u64))
            .expect("write A");
        model.write(obj(o), offset, &data, ver(1, i as u64));
    }
    store.trim(obj(2), 4096, 4096, ver(1, 9)).expect("trim A");
    model.trim(obj(2), 4096, 4096, ver(1, 9));
    store.flush().expect("flush A");
}

/// Apply `writes` (object, offset, len, tag) to the store and the model.
fn write_more(store: &Store, model: &mut Model, writes: &[(u64, usize, usize, u64)]) {
    for &(o, offset, len, tag) in writes {
        let data = content(tag, offset, len);
        store
            .write(obj(o), offset as u32, &data, ver(2, tag))
            .expect("write");
        model.write(obj(o), offset, &data, ver(2, tag));
    }
}

/// The store still works after recovery: write, flush, close, reopen, compare.
fn still_works(path: &Path, mut model: Model) {
    let store = Store::open(path).expect("reopen");
    write_more(
        &store,
        &mut model,
        &[(7, 0, 6000, 900), (0, 0, OBJ as usize, 901)],
    );
    store.flush().expect("flush");
    assert_store_matches(&store, &model);
    store.close().expect("close");
    let store = Store::open(path).expect("reopen after close");
    assert_store_matches(&store, &model);
}

#[test]
fn garbage_past_the_durable_end_is_ignored() {
    for variant in 0..3u64 {
        let dir = scratch();
        let path = dir.path().join("store");
        let store = Store::create(&path, &small_opts(OBJ, 16)).expect("create");
        let mut model = Model::new(OBJ);
        write_a(&store, &mut model);
        let end = store.wal_write_offset();
        let layout = store.layout();
        // Unflushed writes, lost with the crash.
        write_more(
            &store,
            &mut model.clone(),
            &[(0, 0, 4096, 50), (5, 0, 9000, 51)],
        );
        drop(store);
        let mut file = snapshot(&path);
        let tail = &mut file[end as usize..end as usize + 3 * BLOCK];
        match variant {
            0 => tail
                .iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = mix(i as u64) as u8),
            // A plausible header (our magic, version and store id) with a wrong crc.
            1 => {
                tail[..8].copy_from_slice(b"BWAL\x01\x00\x01\x00");
                tail[16..24].copy_from_slice(&layout.store_id.to_le_bytes());
                tail[24..28].copy_from_slice(&48u32.to_le_bytes());
            }
            _ => tail.fill(0xff),
        }
        restore(&path, &file);
        let store = Store::open(&path).expect("recover");
        assert_store_matches(&store, &model);
        drop(store);
        still_works(&path, model);
    }
}

#[test]
fn a_record_torn_in_half_is_dropped_with_everything_after_it() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 16)).expect("create");
    let mut model_a = Model::new(OBJ);
    write_a(&store, &mut model_a);
    let before = snapshot(&path);
    let p1 = store.wal_write_offset() as usize;
    let b_writes = [(4, 0, 3 * BLOCK, 60), (0, 200, 300, 61)];
    let mut model_b1 = model_a.clone();
    write_more(&store, &mut model_b1, &b_writes[..1]);
    let mut model_b = model_b1.clone();
    write_more(&store, &mut model_b, &b_writes[1..]);
    store.flush().expect("flush B");
    let p2 = store.wal_write_offset() as usize;
    let after = snapshot(&path);
    drop(store);
    let (_, len1) = decode_wal_record(&after[p1..]).expect("first B record");
    let (_, len2) = decode_wal_record(&after[p1 + len1..]).expect("second B record");
    // The batch reached the disk up to `cut`; nothing was applied in place (that happens
    // only after the batch's fdatasync returns).
    let cases = [
        (p1 + len1 / 2, &model_a),
        (p1 + len1 + len2 / 2, &model_b1),
        (p2, &model_b),
    ];
    for (cut, expected) in cases {
        let mut file = before.clone();
        file[p1..cut].copy_from_slice(&after[p1..cut]);
        restore(&path, &file);
        let store = Store::open(&path).expect("recover");
        assert_store_matches(&store, expected);
    }
    still_works(&path, model_b);
}

#[test]
fn a_remap_whose_data_did_not_land_is_dropped() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 16)).expect("create");
    let mut model_a = Model::new(OBJ);
    write_a(&store, &mut model_a);
    let layout = store.layout();
    let before = snapshot(&path);
    let p1 = store.wal_write_offset() as usize;
    let mut model_c = model_a.clone();
    // Whole-object writes: an existing object and a new one go to fresh slots.
    write_more(
        &store,
        &mut model_c,
        &[(1, 0, OBJ as usize, 70), (6, 0, OBJ as usize, 71)],
    );
    store.flush().expect("flush C");
    let p2 = store.wal_write_offset() as usize;
    let after = snapshot(&path);
    drop(store);
    // The log landed, the slot data did not: the remaps must be dropped.
    let mut file = before.clone();
    file[p1..p2].copy_from_slice(&after[p1..p2]);
    restore(&path, &file);
    let store = Store::open(&path).expect("recover without slot data");
    assert_store_matches(&store, &model_a);
    drop(store);
    // The log and the slot data landed: both writes are there.
    let mut file = before;
    file[p1..p2].copy_from_slice(&after[p1..p2]);
    let slots = layout.slots_offset as usize..layout.slot_offset(layout.slot_count) as usize;
    let mut copied = 0;
    for page in slots.step_by(BLOCK) {
        if file[page..page + BLOCK] != after[page..page + BLOCK] {
            file[page..page + BLOCK].copy_from_slice(&after[page..page + BLOCK]);
            copied += 1;
        }
    }
    assert_eq!(
        copied,
        2 * OBJ as usize / BLOCK,
        "exactly the two objects' data differs"
    );
    restore(&path, &file);
    let store = Store::open(&path).expect("recover with slot data");
    assert_store_matches(&store, &model_c);
    drop(store);
    still_works(&path, model_c);
}

#[test]
fn a_remap_and_a_later_write_in_the_same_batch_both_survive() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 16)).expect("create");
    let mut model = Model::new(OBJ);
    // The write lands in place over the remapped slot after the batch's fdatasync; recovery
    // must not mistake that for remap data that never landed.
    write_more(
        &store,
        &mut model,
        &[
            (1, 0, OBJ as usize, 80),
            (1, 4096, 100, 81),
            (1, 8192, 4096, 82),
        ],
    );
    store.flush().expect("flush");
    drop(store);
    let store = Store::open(&path).expect("recover");
    assert_store_matches(&store, &model);
}

#[test]
fn stale_intact_records_beyond_a_recovered_end_never_replay() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 16)).expect("create");
    let layout = store.layout();
    let mut model = Model::new(OBJ);
    write_more(&store, &mut model, &[(0, 0, 4096, 90)]);
    store.flush().expect("flush");
    let end = store.wal_write_offset() as usize;
    drop(store);
    // The LSN of the last durable record (a fresh store's log starts at the WAL's start).
    let mut file = snapshot(&path);
    let (mut at, mut last_lsn) = (layout.wal_offset as usize, 0);
    while at < end {
        let (rec, len) = decode_wal_record(&file[at..]).expect("durable record");
        (at, last_lsn) = (at + len, rec.lsn);
        if rec.body == WalBody::Commit {
            // Batches start at block boundaries.
            at = at.next_multiple_of(BLOCK);
        }
    }
    // Past the end, a record as a torn batch could leave it: intact, though an earlier one
    // of its batch did not land. It sits exactly where, and carries exactly the LSN, that the
    // record after the next session's first batch (one 4 KiB write + commit, padded to a
    // block boundary) would have if LSNs simply continued.
    let stale_at = end + (4176 + 32usize).next_multiple_of(BLOCK);
    let stale = WalRecord {
        lsn: last_lsn + 3,
        store_id: layout.store_id,
        body: WalBody::Delete {
            obj: obj(0),
            version: ver(9, 9),
            slot: 0,
        },
    };
    let mut bytes = Vec::new();
    encode_wal_record(&mut bytes, &stale);
    file[stale_at..stale_at + bytes.len()].copy_from_slice(&bytes);
    restore(&path, &file);
    let store = Store::open(&path).expect("recover");
    assert_store_matches(&store, &model);
    write_more(&store, &mut model, &[(1, 0, 4096, 91)]);
    store.flush().expect("flush");
    assert_eq!(
        store.wal_write_offset() as usize,
        stale_at,
        "the next batch lines up with it"
    );
    drop(store);
    let store = Store::open(&path).expect("recover again");
    assert_store_matches(&store, &model);
}

#[test]
fn a_torn_in_place_copy_over_a_fresh_remap_is_repaired() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 16)).expect("create");
    let layout = store.layout();
    let mut model = Model::new(OBJ);
    // One batch: a whole-object write (remap), then a write over its block 1.
    write_more(
        &store,
        &mut model,
        &[(1, 0, OBJ as usize, 95), (1, BLOCK, BLOCK, 96)],
    );
    store.flush().expect("flush");
    drop(store);
    // Tear block 1 in the slot, as a power cut during the leader's in-place copy (or during
    // an earlier recovery's copy) would. The logged write still holds its contents.
    let mut file = snapshot(&path);
    let needle = content(96, BLOCK, BLOCK);
    let slots = layout.slots_offset as usize;
    let at = slots
        + file[slots..]
            .chunks_exact(BLOCK)
            .position(|b| b == &needle[..])
            .expect("block 1 in its slot")
            * BLOCK;
    file[at + 100..at + 2000].fill(0x33);
    restore(&path, &file);
    let store = Store::open(&path).expect("recover");
    assert_store_matches(&store, &model);
}
