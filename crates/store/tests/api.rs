//! Goal: the store's contract at its edges: damaged data is refused (never returned), a full
//! store says NoSpace without harming anything and recovers space on delete, files are
//! created and opened as documented, and the log survives many laps of its circle.

mod common;

use basalt_proto::ObjectId;
use basalt_store::{Store, StoreError, StoreOptions};
use common::*;

const OBJ: u32 = 16 << 10;

fn obj(n: u64) -> ObjectId {
    ObjectId::new(4, n)
}

#[test]
fn a_flipped_bit_in_a_data_block_fails_its_read_and_only_its_read() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 8)).expect("create");
    let data = content(1, 0, OBJ as usize);
    store.write(obj(1), 0, &data, ver(1, 1)).expect("write");
    store
        .write(obj(2), 0, &content(2, 0, 8192), ver(1, 2))
        .expect("write");
    let layout = store.layout();
    store.close().expect("close");
    // Find block 2 of object 1 in the slot region by its contents.
    let file = std::fs::read(&path).expect("read file");
    let needle = &data[2 * BLOCK..3 * BLOCK];
    let slots = &file[layout.slots_offset as usize..];
    let at = slots
        .chunks_exact(BLOCK)
        .position(|b| b == needle)
        .expect("block in a slot")
        * BLOCK;
    flip_bit(&path, layout.slots_offset + at as u64 + 1000, 3);

    let store = Store::open(&path).expect("open");
    let mut buf = vec![0; OBJ as usize];
    match store.read(obj(1), 0, &mut buf) {
        Err(StoreError::Checksum { obj: o, block: 2 }) if o == obj(1) => {}
        other => panic!("expected a checksum error on block 2, got {other:?}"),
    }
    let mut small = [0u8; 10];
    assert!(matches!(
        store.read(obj(1), 2 * BLOCK as u32 + 5, &mut small),
        Err(StoreError::Checksum { .. })
    ));
    for b in [0, 1, 3] {
        let mut block = vec![0; BLOCK];
        store
            .read(obj(1), (b * BLOCK) as u32, &mut block)
            .expect("other blocks read fine");
        assert_eq!(block, data[b * BLOCK..(b + 1) * BLOCK]);
    }
    let mut other = vec![0; 8192];
    store
        .read(obj(2), 0, &mut other)
        .expect("other objects read fine");
    // A partial write must not launder the damage into a fresh checksum...
    let partial = store.write(obj(1), 2 * BLOCK as u32 + 1, &[9; 10], ver(1, 3));
    assert!(matches!(partial, Err(StoreError::Checksum { .. })));
    // ...but rewriting the whole block replaces it.
    store
        .write(obj(1), 2 * BLOCK as u32, &[7; BLOCK], ver(1, 4))
        .expect("overwrite");
    store.read(obj(1), 0, &mut buf).expect("read after repair");
    assert!(buf[2 * BLOCK..3 * BLOCK].iter().all(|&b| b == 7));
}

#[test]
fn a_damaged_superblock_is_refused_and_a_damaged_newest_checkpoint_falls_back() {
    let dir = scratch();
    let path = dir.path().join("store");
    let mut model = Model::new(OBJ);
    let store = Store::create(&path, &small_opts(OBJ, 8)).expect("create");
    let data = content(1, 0, 5000);
    store.write(obj(1), 0, &data, ver(1, 1)).expect("write");
    model.write(obj(1), 0, &data, ver(1, 1));
    let layout = store.layout();
    store.close().expect("close");
    let store = Store::open(&path).expect("open");
    let data = content(2, 3000, 9000);
    store.write(obj(2), 3000, &data, ver(1, 2)).expect("write");
    model.write(obj(2), 3000, &data, ver(1, 2));
    store.close().expect("close");
    // Damage whichever area holds the newest checkpoint: the older one plus the log (still
    // intact, nothing overwrote it) must give the same state.
    let file = std::fs::read(&path).expect("read");
    let seq = |area: usize| {
        let at = layout.checkpoint_offsets[area] as usize + 16;
        u64::from_le_bytes(file[at..at + 8].try_into().expect("8 bytes"))
    };
    let newest = if seq(0) > seq(1) { 0 } else { 1 };
    flip_bit(&path, layout.checkpoint_offsets[newest] + 70, 0);
    let store = Store::open(&path).expect("open from the older checkpoint");
    assert_store_matches(&store, &model);
    store.close().expect("close");
    flip_bit(&path, 20, 1);
    assert!(matches!(
        Store::open(&path),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn a_full_store_says_no_space_harms_nothing_and_recovers_space_on_delete() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 6)).expect("create");
    let slots = store.stats().slots_total;
    let mut model = Model::new(OBJ);
    for n in 0..slots {
        let data = content(n, 0, if n % 2 == 0 { OBJ as usize } else { 5000 });
        store.write(obj(n), 0, &data, ver(1, n)).expect("fill");
        model.write(obj(n), 0, &data, ver(1, n));
    }
    assert_eq!(store.stats().slots_free, 0);
    for (offset, len) in [(0, OBJ as usize), (100, 10)] {
        let err = store.write(obj(slots), offset, &vec![1; len], ver(2, 0));
        assert!(matches!(err, Err(StoreError::NoSpace)), "got {err:?}");
    }
    // Existing objects can still be rewritten, whole or in part, with no free slot.
    let data = content(77, 0, OBJ as usize);
    store
        .write(obj(0), 0, &data, ver(2, 1))
        .expect("whole rewrite when full");
    model.write(obj(0), 0, &data, ver(2, 1));
    let data = content(78, 10, 100);
    store
        .write(obj(1), 10, &data, ver(2, 2))
        .expect("partial write when full");
    model.write(obj(1), 10, &data, ver(2, 2));
    assert_store_matches(&store, &model);
    // Deleting frees a slot for a new object (the store flushes to reuse it).
    store.delete(obj(2), ver(2, 3)).expect("delete");
    model.delete(obj(2));
    let data = content(79, 0, OBJ as usize);
    store
        .write(obj(slots), 0, &data, ver(2, 4))
        .expect("write after delete");
    model.write(obj(slots), 0, &data, ver(2, 4));
    // Trimming an object to nothing frees its slot too.
    store.trim(obj(3), 0, OBJ, ver(2, 5)).expect("trim all");
    model.trim(obj(3), 0, OBJ as usize, ver(2, 5));
    store
        .write(obj(slots + 1), 4096, &[5; 100], ver(2, 6))
        .expect("write after trim");
    model.write(obj(slots + 1), 4096, &[5; 100], ver(2, 6));
    assert_store_matches(&store, &model);
    store.close().expect("close");
    let store = Store::open(&path).expect("reopen");
    assert_store_matches(&store, &model);
}

#[test]
fn the_log_survives_many_laps_and_a_crash_keeps_what_was_flushed() {
    let dir = scratch();
    let path = dir.path().join("store");
    let store = Store::create(&path, &small_opts(OBJ, 12)).expect("create");
    let mut model = Model::new(OBJ);
    let mut rng = Rng(7);
    // About 24 MiB through a 4 MiB WAL.
    for n in 0..3000u64 {
        let (o, b) = (rng.below(10), rng.below(4) as usize);
        let (offset, len) = (
            b * BLOCK + rng.below(100) as usize,
            1 + rng.below(6000) as usize,
        );
        let len = len.min(OBJ as usize - offset);
        let data = content(n, offset, len);
        store
            .write(obj(o), offset as u32, &data, ver(1, n))
            .expect("write");
        model.write(obj(o), offset, &data, ver(1, n));
        if rng.below(40) == 0 {
            store.flush().expect("flush");
        }
    }
    store.flush().expect("flush");
    drop(store);
    let store = Store::open(&path).expect("recover");
    assert_store_matches(&store, &model);
}

#[test]
fn files_are_created_once_opened_alone_and_checked() {
    let dir = scratch();
    let path = dir.path().join("store");
    let opts = small_opts(OBJ, 4);
    let store = Store::open_or_create(&path, &opts).expect("create");
    assert_eq!(store.object_size(), OBJ);
    store.write(obj(1), 0, &[1; 10], ver(1, 1)).expect("write");
    assert!(
        Store::open(&path).is_err(),
        "a second open of a store in use is refused"
    );
    assert!(matches!(
        Store::create(&path, &opts),
        Err(StoreError::Io { .. })
    ));
    store.close().expect("close");
    let store = Store::open_or_create(&path, &StoreOptions::default()).expect("open");
    assert_eq!(store.version(obj(1)), Some(ver(1, 1)));
    assert_eq!(store.objects(), vec![(obj(1), ver(1, 1))]);
    let stats = store.stats();
    assert_eq!((stats.objects, stats.used_bytes), (1, BLOCK as u64));
    assert_eq!(stats.capacity_bytes, opts.capacity_bytes);
    drop(store);
    for bad in [
        StoreOptions {
            object_size_bytes: 3000,
            ..opts.clone()
        },
        StoreOptions {
            capacity_bytes: 1 << 20,
            ..opts.clone()
        },
        StoreOptions {
            wal_bytes: 4097,
            ..opts.clone()
        },
    ] {
        let p = dir.path().join("bad");
        assert!(matches!(
            Store::create(&p, &bad),
            Err(StoreError::BadOptions { .. })
        ));
        assert!(!p.exists(), "no file is left behind");
    }
    std::fs::write(dir.path().join("junk"), vec![0u8; 1 << 20]).expect("junk");
    assert!(matches!(
        Store::open(&dir.path().join("junk")),
        Err(StoreError::Corrupt { .. })
    ));
}

#[test]
fn holes_and_allocation_follow_writes_and_trims() {
    let dir = scratch();
    let store = Store::create(&dir.path().join("store"), &small_opts(OBJ, 4)).expect("create");
    assert_eq!(store.allocation(obj(1)).expect("alloc"), vec![0]);
    store
        .write(obj(1), 4096 + 10, &[3; 5000], ver(1, 1))
        .expect("write");
    assert_eq!(store.allocation(obj(1)).expect("alloc"), vec![0b0110]);
    let mut buf = vec![9; OBJ as usize];
    store.read(obj(1), 0, &mut buf).expect("read");
    assert!(
        buf[..4096 + 10].iter().all(|&b| b == 0) && buf[4096 + 10..9106].iter().all(|&b| b == 3)
    );
    store
        .trim(obj(1), 4096, 4096 + 100, ver(1, 2))
        .expect("trim");
    assert_eq!(store.allocation(obj(1)).expect("alloc"), vec![0b0100]);
    store.read(obj(1), 0, &mut buf).expect("read");
    assert!(
        buf[..8192 + 100].iter().all(|&b| b == 0) && buf[8192 + 100..9106].iter().all(|&b| b == 3)
    );
    assert_eq!(store.version(obj(1)), Some(ver(1, 2)));
    store
        .trim(obj(1), 8192, 4096, ver(1, 3))
        .expect("trim the rest");
    assert_eq!(
        store.version(obj(1)),
        None,
        "an object without blocks is gone"
    );
    assert_eq!(store.stats().objects, 0);
}

#[test]
fn partial_blocks_read_ahead_are_used_unless_a_writer_ran_since() {
    // Goal: a write whose partial blocks were read ahead does not read them again under its
    // stripe; one whose read-ahead went stale (another write of the object in between) reads
    // them again and merges the current contents, never the stale ones. On direct I/O
    // through io_uring, as an OSD runs (tmpfs refuses O_DIRECT: the real disk's filesystem).
    let dir = tempfile::tempdir().expect("tempdir on disk");
    let io = basalt_store::IoOptions {
        engine: basalt_store::engine::EngineKind::Uring,
        direct: true,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let store =
        Store::create_with(&dir.path().join("store"), &small_opts(OBJ, 4), &io).expect("create");
    store
        .write(obj(1), 0, &[1; 8192], ver(1, 1))
        .expect("write");
    store.flush().expect("flush");
    let inline = |s: &Store| s.wal_stats().edge_reads_inline;

    // Fresh: 100 bytes inside block 0, and a range across blocks 0 and 1.
    let mut edges = runtime
        .block_on(store.prefetch_edges(obj(1), 100, 100))
        .expect("prefetch");
    assert_eq!(edges.len(), 1);
    store
        .write_prefetched(obj(1), 100, &[2; 100], ver(1, 2), &mut edges)
        .expect("write");
    let mut edges = runtime
        .block_on(store.prefetch_edges(obj(1), 4000, 200))
        .expect("prefetch");
    assert_eq!(edges.len(), 2);
    store
        .write_prefetched(obj(1), 4000, &[3; 200], ver(1, 3), &mut edges)
        .expect("write");
    assert_eq!(inline(&store), 0, "the read-ahead blocks were used");
    // The write widened to whole blocks, as written: blocks 0 and 1 as they are now.
    let (at, widened) = edges.aligned_write(4000, &[3; 200]).expect("aligned write");
    let mut now = vec![0u8; 8192];
    store.read(obj(1), 0, &mut now).expect("read");
    assert_eq!((at, widened.len()), (0, 8192));
    assert!(widened == now, "the widened write is the blocks as written");

    // Stale: block 0 rewritten after the read-ahead.
    let mut edges = runtime
        .block_on(store.prefetch_edges(obj(1), 10, 10))
        .expect("prefetch");
    store
        .write(obj(1), 300, &[4; 10], ver(1, 4))
        .expect("write");
    let before = inline(&store);
    store
        .write_prefetched(obj(1), 10, &[5; 10], ver(1, 5), &mut edges)
        .expect("write");
    assert_eq!(inline(&store), before + 1, "the stale block was read again");
    let (at, widened) = edges.aligned_write(10, &[5; 10]).expect("aligned write");
    store.read(obj(1), 0, &mut now[..4096]).expect("read");
    assert_eq!(at, 0);
    assert!(
        widened == now[..4096],
        "the widened write holds the re-read block"
    );

    // A token tells whether a writer of the object came in since it was taken.
    let token = store.write_token(obj(3));
    assert!(store.unchanged_since(obj(3), token));
    store
        .write(obj(3), 0, &[6; 4096], ver(1, 5))
        .expect("write");
    assert!(!store.unchanged_since(obj(3), token));

    // Another object's read-ahead is never used for this one.
    let other = runtime
        .block_on(store.prefetch_edges(obj(2), 10, 10))
        .expect("prefetch");
    let before = inline(&store);
    store
        .trim_prefetched(obj(1), 20, 4000, ver(1, 6), &other)
        .expect("trim");
    assert_eq!(inline(&store), before + 1);

    let mut want = vec![1u8; 8192];
    want[100..200].fill(2);
    want[4000..4200].fill(3);
    want[300..310].fill(4);
    want[10..20].fill(5);
    want[20..4020].fill(0);
    let mut got = vec![0u8; 8192];
    store.read(obj(1), 0, &mut got).expect("read");
    let wrong: Vec<usize> = (0..8192).filter(|&i| got[i] != want[i]).collect();
    assert!(
        wrong.is_empty(),
        "contents merge every write in order: {} wrong from {:?}: {:?}",
        wrong.len(),
        wrong.first(),
        wrong.first().map(|&i| (got[i], want[i]))
    );
}
