//! Goal: a power cut at any write, in particular in the middle of a checkpoint (its crc
//! pages, its table, its header), loses nothing flushed. A seeded workload runs on the
//! simulator's `MemDisk` (a power cut keeps an arbitrary subset of the unsynced pages); the
//! same workload runs again and again, the power cut each time at another of its writes;
//! after recovery every block holds a value it had since the last flush before the cut, and
//! the store works on (write, flush, crash, recover).

mod common;

use basalt_proto::{ObjectId, Version};
use basalt_store::{Disk, MemDisk, MemDiskHandle, Store, StoreOptions};
use common::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// 32 blocks per object: 31 objects to a crc page.
const OBJ: u32 = 128 << 10;
/// Objects written: spread over 4 crc pages.
const OBJECTS: u64 = 96;
const OPS: u64 = 2000;
/// Ops between flushes.
const FLUSH_EVERY: u64 = 6;
/// Power cuts tried per seed inside checkpoints (their writes and syncs), and elsewhere.
const CUTS_IN_CHECKPOINTS: usize = 24;
const CUTS_ELSEWHERE: usize = 4;

fn opts() -> StoreOptions {
    StoreOptions {
        capacity_bytes: 48 << 20,
        object_size_bytes: OBJ,
        wal_bytes: 4 << 20,
    }
}

/// A disk that loses power at its `cut_at`-th write or sync (which fails, and so does every
/// later one: the handle is dead), keeping unsynced pages as `seed` picks; it notes where
/// each write went (a sync: where the write before it went).
struct CuttingDisk {
    disk: Arc<MemDisk>,
    handle: Arc<MemDiskHandle>,
    cut_at: Option<usize>,
    seed: u64,
    events: Mutex<Vec<u64>>,
}

impl CuttingDisk {
    /// Note one more write (at `offset`) or sync (None), cutting the power if it is the one.
    fn event(&self, offset: Option<u64>) {
        let n = {
            let mut e = self.events.lock().expect("lock");
            let at = offset.or_else(|| e.last().copied()).unwrap_or(0);
            e.push(at);
            e.len()
        };
        if Some(n) == self.cut_at {
            let mut rng = Rng(self.seed ^ 0xc0ff_ee00);
            self.disk.power_cut(|_| rng.below(2) == 0);
        }
    }
}

impl Disk for CuttingDisk {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.handle.read_exact_at(buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.event(Some(offset));
        self.handle.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        self.event(None);
        self.handle.sync_data()
    }

    fn size_bytes(&self) -> std::io::Result<u64> {
        self.handle.size_bytes()
    }
}

fn id(n: u64) -> ObjectId {
    ObjectId::new(6, n)
}

/// The block that write `tag` puts at block `b` of object `obj`.
fn block_data(obj: u64, b: usize, tag: u64) -> Vec<u8> {
    let mut data = vec![tag as u8; BLOCK];
    for (i, v) in [obj, b as u64, tag].into_iter().enumerate() {
        data[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
    }
    data
}

/// What a block holds: the object it was written as (a promote moves it) and the write.
type Written = (u64, u64);

/// For every (object, block), the values it may hold after a crash: what it held at the
/// last flush and everything written since (None: a hole, or no object).
#[derive(Default)]
struct Allowed {
    now: HashMap<(u64, usize), Written>,
    since_flush: HashMap<(u64, usize), Vec<Option<Written>>>,
}

impl Allowed {
    fn set(&mut self, obj: u64, b: usize, tag: Option<Written>) {
        let old = match tag {
            Some(t) => self.now.insert((obj, b), t),
            None => self.now.remove(&(obj, b)),
        };
        self.since_flush
            .entry((obj, b))
            .or_insert_with(|| vec![old])
            .push(tag);
    }

    fn flushed(&mut self) {
        self.since_flush.clear();
    }

    /// What `store` holds now, every block read back (each names the write it came from).
    fn read_from(store: &Store) -> Allowed {
        let mut allowed = Allowed::default();
        let mut data = vec![0u8; OBJ as usize];
        for obj in 0..OBJECTS {
            store.read(id(obj), 0, &mut data).expect("read");
            let alloc = allocation_bits(store, id(obj));
            for (b, block) in data.chunks_exact(BLOCK).enumerate() {
                if alloc[b] {
                    let word = |i: usize| {
                        u64::from_le_bytes(block[8 * i..8 * i + 8].try_into().expect("8 bytes"))
                    };
                    allowed.now.insert((obj, b), (word(0), word(2)));
                }
            }
        }
        allowed
    }

    fn may_be(&self, obj: u64, b: usize) -> Vec<Option<Written>> {
        match self.since_flush.get(&(obj, b)) {
            Some(values) => values.clone(),
            None => vec![self.now.get(&(obj, b)).copied()],
        }
    }
}

/// Run the workload of `seed` on `disk` until it ends or the disk fails; returns what may be
/// in the store and the number of writes `create` made.
fn workload(disk: Arc<CuttingDisk>, seed: u64) -> (Allowed, usize) {
    let mut allowed = Allowed::default();
    let Ok(store) = Store::create_on(disk.clone(), &opts()) else {
        return (allowed, 0);
    };
    let created = disk.events.lock().expect("lock").len();
    let mut rng = Rng(seed);
    let blocks = OBJ as usize / BLOCK;
    for n in 1..=OPS {
        let obj = rng.below(OBJECTS);
        let v = Version::new(1, n);
        let ok = match rng.below(20) {
            0..=13 => {
                let first = rng.below(blocks as u64) as usize;
                let end = (first + 1 + rng.below(4) as usize).min(blocks);
                let data: Vec<u8> = (first..end).flat_map(|b| block_data(obj, b, n)).collect();
                let done = store.write(id(obj), (first * BLOCK) as u32, &data, v);
                if done.is_ok() {
                    (first..end).for_each(|b| allowed.set(obj, b, Some((obj, n))));
                }
                done.is_ok()
            }
            14..=15 => {
                let data: Vec<u8> = (0..blocks).flat_map(|b| block_data(obj, b, n)).collect();
                let done = store.write(id(obj), 0, &data, v);
                if done.is_ok() {
                    (0..blocks).for_each(|b| allowed.set(obj, b, Some((obj, n))));
                }
                done.is_ok()
            }
            16..=17 => {
                let done = store.delete(id(obj), v);
                if done.is_ok() {
                    (0..blocks).for_each(|b| allowed.set(obj, b, None));
                }
                done.is_ok()
            }
            _ => {
                let to = (obj + 1 + rng.below(OBJECTS - 1)) % OBJECTS;
                match store.promote(id(obj), id(to)) {
                    Ok(moved) => {
                        if moved {
                            for b in 0..blocks {
                                let tag = allowed.now.get(&(obj, b)).copied();
                                allowed.set(to, b, tag);
                                allowed.set(obj, b, None);
                            }
                        }
                        true
                    }
                    Err(_) => false,
                }
            }
        };
        if !ok {
            break;
        }
        if n % FLUSH_EVERY == 0 {
            if store.flush().is_err() {
                break;
            }
            allowed.flushed();
        }
    }
    (allowed, created)
}

/// Every block holds one of the values it may hold.
fn check(store: &Store, allowed: &Allowed) {
    let blocks = OBJ as usize / BLOCK;
    let mut data = vec![0u8; OBJ as usize];
    for obj in 0..OBJECTS {
        store
            .read(id(obj), 0, &mut data)
            .expect("read after recovery");
        let alloc = allocation_bits(store, id(obj));
        for b in 0..blocks {
            let got = &data[b * BLOCK..(b + 1) * BLOCK];
            let fits = allowed.may_be(obj, b).into_iter().any(|tag| match tag {
                Some((o, t)) => alloc[b] && got == block_data(o, b, t),
                None => !alloc[b] && got.iter().all(|&x| x == 0),
            });
            assert!(fits, "object {obj} block {b} after the power cut");
        }
    }
    store.check_invariants();
}

fn cutting_disk(cut_at: Option<usize>, seed: u64) -> Arc<CuttingDisk> {
    let disk = MemDisk::new(opts().capacity_bytes);
    Arc::new(CuttingDisk {
        handle: disk.attach(),
        disk,
        cut_at,
        seed,
        events: Mutex::new(Vec::new()),
    })
}

#[test]
fn a_power_cut_in_a_checkpoint_loses_nothing_flushed() {
    for seed in [1u64, 2] {
        // A dry run finds where each write goes.
        let dry = cutting_disk(None, seed);
        let (_, created) = workload(dry.clone(), seed);
        let events = dry.events.lock().expect("lock").clone();
        let layout = Store::open_on(dry.disk.attach()).expect("open").layout();
        let regions = layout.crc_region_offsets.expect("crc regions");
        let in_checkpoint = |&(_, at): &(usize, u64)| {
            at >= layout.checkpoint_offsets[0] && at < layout.slots_offset
        };
        let indexed: Vec<(usize, u64)> = events
            .iter()
            .copied()
            .enumerate()
            .skip(created)
            .map(|(i, at)| (i + 1, at))
            .collect();
        let ckpt: Vec<(usize, u64)> = indexed.iter().copied().filter(in_checkpoint).collect();
        let crc_writes = ckpt.iter().filter(|(_, at)| *at >= regions[0]).count();
        assert!(
            crc_writes > 10 && ckpt.len() > crc_writes,
            "the workload checkpoints ({crc_writes} crc page writes of {} events)",
            ckpt.len()
        );
        let others: Vec<(usize, u64)> = indexed
            .iter()
            .copied()
            .filter(|w| !in_checkpoint(w))
            .collect();
        let pick = |v: &[(usize, u64)], n: usize| -> Vec<usize> {
            (0..n).map(|k| v[k * v.len() / n].0).collect()
        };
        let cuts = pick(&ckpt, CUTS_IN_CHECKPOINTS)
            .into_iter()
            .chain(pick(&others, CUTS_ELSEWHERE));
        for cut in cuts {
            let disk = cutting_disk(Some(cut), seed ^ cut as u64);
            let (allowed, _) = workload(disk.clone(), seed);
            let store = Store::open_on(disk.disk.attach())
                .unwrap_or_else(|e| panic!("seed {seed}, cut at write {cut}: recover: {e}"));
            check(&store, &allowed);
            // It works on: a write, a flush, a crash (the page cache survives), a recovery.
            let mut allowed = Allowed::read_from(&store);
            store
                .write(id(0), 0, &block_data(0, 0, 99_999), Version::new(2, 1))
                .expect("write");
            store.flush().expect("flush");
            drop(store);
            disk.disk.crash();
            let store = Store::open_on(disk.disk.attach()).expect("recover again");
            allowed.set(0, 0, Some((0, 99_999)));
            allowed.flushed();
            check(&store, &allowed);
        }
    }
}

/// Goal: a merge (an erasure-coded partial stash into its chunk, and a version-only bump) is
/// atomic under a power cut at any write or sync after its inputs were flushed: afterwards
/// the chunk holds its old blocks and version beside the untouched stash, or the merged
/// blocks and the stash's version with the stash gone — never a mix — and once the flush
/// after the merge returned, always the latter.
#[test]
fn a_power_cut_anywhere_leaves_a_merge_whole_or_undone() {
    let (chunk, stash, bump_chunk, bump_stash) = (id(1), id(2), id(3), id(4));
    let (old, new) = (Version::new(1, 1), Version::new(1, 2));
    let run = |cut_at: Option<usize>| -> (Arc<CuttingDisk>, usize, Option<usize>) {
        let disk = cutting_disk(cut_at, 7);
        let store = Store::create_on(disk.clone(), &opts()).expect("create");
        let whole: Vec<u8> = (0..32).flat_map(|b| block_data(1, b, 1)).collect();
        store.write(chunk, 0, &whole, old).expect("chunk");
        store.write(bump_chunk, 0, &whole, old).expect("bump chunk");
        let blocks: Vec<u8> = (2..5).flat_map(|b| block_data(1, b, 2)).collect();
        store.write(stash, 0, &blocks, new).expect("stash");
        store
            .write(bump_stash, 0, &block_data(4, 0, 2), new)
            .expect("bump");
        store.flush().expect("flush");
        let setup = disk.events.lock().expect("lock").len();
        let mut flushed = None;
        if store.merge(stash, 0, chunk, 2, 3).is_ok()
            && store.merge(bump_stash, 0, bump_chunk, 0, 0).is_ok()
        {
            // More traffic in the same batch, then the flush that makes the merges durable.
            let _ = store.write(id(9), 0, &block_data(9, 0, 3), new);
            if store.flush().is_ok() {
                flushed = Some(disk.events.lock().expect("lock").len());
            }
        }
        drop(store);
        (disk, setup, flushed)
    };
    let (dry, setup, flushed) = run(None);
    let events = dry.events.lock().expect("lock").len();
    let flushed = flushed.expect("the dry run flushes");
    assert!(
        events > setup + 1,
        "the merges write something ({setup}..{events})"
    );
    for cut in setup + 1..=events + 1 {
        let (disk, _, _) = run(Some(cut));
        disk.disk.crash();
        let store = Store::open_on(disk.disk.attach())
            .unwrap_or_else(|e| panic!("cut at {cut}: recover: {e}"));
        let mut data = vec![0u8; OBJ as usize];
        store.read(chunk, 0, &mut data).expect("read chunk");
        let tags: Vec<u64> = data
            .chunks_exact(BLOCK)
            .map(|b| u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")))
            .collect();
        let merged = store.version(stash).is_none();
        let want: Vec<u64> = (0..32)
            .map(|b| if merged && (2..5).contains(&b) { 2 } else { 1 })
            .collect();
        assert_eq!(tags, want, "cut at {cut}: chunk blocks (merged: {merged})");
        let expected = if merged { new } else { old };
        assert_eq!(
            store.version(chunk),
            Some(expected),
            "cut at {cut}: chunk version"
        );
        let bumped = store.version(bump_stash).is_none();
        let expected = if bumped { new } else { old };
        assert_eq!(
            store.version(bump_chunk),
            Some(expected),
            "cut at {cut}: bump"
        );
        if cut > flushed {
            assert!(
                merged && bumped,
                "cut at {cut}, after the flush at {flushed}: merges lost"
            );
        }
        store.check_invariants();
    }
}
