//! Goal: many threads writing, reading and flushing at once see exactly their own writes on
//! their own objects, never a torn block or a spurious checksum error on shared ones (even
//! while blocks are applied in place and objects move between slots), and everything
//! acknowledged survives a reopen.

mod common;

use basalt_proto::ObjectId;
use basalt_store::Store;
use common::*;
use std::sync::atomic::{AtomicBool, Ordering};

/// 8 blocks per object.
const OBJ: u32 = 32 << 10;
const WRITERS: u64 = 4;
const OWN_OBJECTS: u64 = 3;
const WRITER_OPS: u64 = 400;
const READERS: u64 = 2;

fn own(t: u64, n: u64) -> ObjectId {
    ObjectId::new(10 + t, n)
}

/// Object every writer shares, each on its own two blocks.
const SHARED: ObjectId = ObjectId::new(99, 0);
/// Object every writer rewrites whole blocks of (or all of), with uniform contents.
const CONTENDED: ObjectId = ObjectId::new(99, 1);

/// A block whose 8-byte words all carry `tag`: a torn read would mix two tags.
fn uniform_block(tag: u64) -> Vec<u8> {
    tag.to_le_bytes().repeat(BLOCK / 8)
}

fn is_uniform(block: &[u8]) -> bool {
    // Equal to itself shifted by one word: every word is the same.
    block[..block.len() - 8] == block[8..]
}

fn writer(store: &Store, t: u64) -> Model {
    let mut model = Model::new(OBJ);
    let mut rng = Rng(1000 + t);
    let mut buf = vec![0; OBJ as usize];
    for i in 0..WRITER_OPS {
        let tag = (t << 32) | i;
        let o = own(t, rng.below(OWN_OBJECTS));
        let v = ver(1, i);
        match rng.below(10) {
            0..=4 => {
                let offset = rng.below(OBJ as u64) as usize;
                let len =
                    1 + rng.below((OBJ as u64 - offset as u64).min(3 * BLOCK as u64)) as usize;
                let data = content(tag, offset, len);
                store.write(o, offset as u32, &data, v).expect("write");
                model.write(o, offset, &data, v);
            }
            5 => {
                let data = content(tag, 0, OBJ as usize);
                store.write(o, 0, &data, v).expect("whole write");
                model.write(o, 0, &data, v);
            }
            6 => {
                let offset = rng.below(OBJ as u64) as usize;
                let len = 1 + rng.below(OBJ as u64 - offset as u64) as usize;
                store.trim(o, offset as u32, len as u32, v).expect("trim");
                model.trim(o, offset, len, v);
            }
            7 => store.flush().expect("flush"),
            _ => {
                let b = (2 * t + rng.below(2)) as usize;
                store
                    .write(SHARED, (b * BLOCK) as u32, &uniform_block(tag), v)
                    .expect("shared");
                model.write(SHARED, b * BLOCK, &uniform_block(tag), v);
            }
        }
        // Contended object: whole blocks or the whole object, from every writer.
        if rng.below(3) == 0 {
            let data = if rng.below(4) == 0 {
                uniform_block(tag).repeat(OBJ as usize / BLOCK)
            } else {
                uniform_block(tag)
            };
            let offset = if data.len() == BLOCK {
                rng.below(8) as usize * BLOCK
            } else {
                0
            };
            store
                .write(CONTENDED, offset as u32, &data, v)
                .expect("contended write");
        }
        store.read(o, 0, &mut buf).expect("read own object");
        let want = model
            .objects
            .get(&o)
            .map_or(vec![0; OBJ as usize], |m| m.data.clone());
        assert!(
            buf == want,
            "writer {t} op {i}: own object {o} differs from its model"
        );
    }
    model
}

fn reader(store: &Store, stop: &AtomicBool) -> u64 {
    let mut reads = 0;
    let mut buf = vec![0; OBJ as usize];
    while !stop.load(Ordering::Relaxed) {
        for obj in [CONTENDED, SHARED] {
            store
                .read(obj, 0, &mut buf)
                .expect("no checksum error under concurrency");
            for (b, block) in buf.chunks_exact(BLOCK).enumerate() {
                assert!(is_uniform(block), "torn block {b} of {obj}");
            }
            reads += 1;
        }
    }
    reads
}

#[test]
fn concurrent_writers_readers_and_flushers_stay_consistent() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 40)).expect("create");
    let stop = AtomicBool::new(false);
    let (models, reads) = std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                s.spawn({
                    let store = &store;
                    move || writer(store, t)
                })
            })
            .collect();
        let readers: Vec<_> = (0..READERS)
            .map(|_| s.spawn(|| reader(&store, &stop)))
            .collect();
        // Due checkpoints on a thread of their own, racing the writers' flushes (as in an
        // OSD); the writers' flushes still checkpoint inline when this one falls behind.
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                if store.checkpoint_wanted() {
                    store.checkpoint_due().expect("background checkpoint");
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
        });
        let models: Vec<Model> = writers
            .into_iter()
            .map(|w| w.join().expect("writer"))
            .collect();
        stop.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
        (models, reads)
    });
    assert!(reads > 0);
    // Each writer's own objects, and its blocks of the shared object, are exactly its model.
    let mut expected = Model::new(OBJ);
    for (t, m) in models.iter().enumerate() {
        for (obj, o) in &m.objects {
            if *obj != SHARED {
                expected.objects.insert(*obj, o.clone());
            }
        }
        if let Some(shared) = m.objects.get(&SHARED) {
            for b in [2 * t, 2 * t + 1] {
                if shared.alloc[b] {
                    let data = &shared.data[b * BLOCK..(b + 1) * BLOCK];
                    expected.write(SHARED, b * BLOCK, data, shared.version);
                }
            }
        }
    }
    let check = |store: &Store| {
        let mut buf = vec![0; OBJ as usize];
        for (obj, o) in &expected.objects {
            store.read(*obj, 0, &mut buf).expect("read");
            assert!(buf == o.data, "object {obj} differs after the run");
        }
        store.read(CONTENDED, 0, &mut buf).expect("read contended");
        assert!(buf.chunks_exact(BLOCK).all(is_uniform));
        assert_stats_consistent(store);
        buf
    };
    let contended = check(&store);
    assert!(
        store.wal_stats().checkpoints > 0,
        "the run raced checkpoints against the writers"
    );
    store.flush().expect("flush");
    drop(store); // a crash after the flush: nothing may be lost
    let store = Store::open(&path).expect("recover");
    assert_eq!(check(&store), contended);
    store.close().expect("close");
    let store = Store::open(&path).expect("reopen");
    assert_eq!(check(&store), contended);
}

/// Goal: a reader racing in-place applies and slot reuse of the very blocks it reads never
/// sees a torn block or a spurious checksum error (the store re-checks a mismatch with slot
/// writers excluded before calling it damage).
#[test]
fn readers_racing_applies_and_slot_reuse_see_no_false_damage() {
    const CYCLES: u64 = 1500;
    let dir = scratch();
    let store = Store::create(&dir.path().join("store"), &small_opts(OBJ, 8)).expect("create");
    let target = ObjectId::new(98, 0);
    store
        .write(target, 0, &uniform_block(0).repeat(8), ver(1, 0))
        .expect("first write");
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                s.spawn(|| {
                    let mut block = vec![0; 2 * BLOCK];
                    let mut reads = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        store
                            .read(target, 0, &mut block)
                            .expect("no false checksum error");
                        assert!(block.chunks_exact(BLOCK).all(is_uniform), "torn read");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        for i in 1..=CYCLES {
            if i % 4 == 0 {
                let whole = uniform_block(i).repeat(8);
                store
                    .write(target, 0, &whole, ver(1, i))
                    .expect("whole write");
            } else {
                store
                    .write(target, 0, &uniform_block(i).repeat(2), ver(1, i))
                    .expect("write");
            }
            store.flush().expect("flush");
        }
        stop.store(true, Ordering::Relaxed);
        let reads: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
        assert!(reads > CYCLES, "readers ran alongside");
    });
}
