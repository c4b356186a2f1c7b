//! Goal: the store behaves like a plain map of byte arrays (the reference model) across random
//! sequences of writes, reads, trims, deletes, promotes, flushes, clean reopens and crashes (drop
//! without close), keeping at least everything flushed across a crash; in both store formats
//! (block crcs on disk, and in RAM as before format version 2).

mod common;

use basalt_proto::ObjectId;
use basalt_store::{IoOptions, Store, StoreError};
use common::*;
use proptest::prelude::*;

/// 8 blocks per object: small enough to hit every edge, big enough for multi-block writes.
const OBJ: u32 = 32 << 10;
const OBJECTS: u64 = 5;

#[derive(Clone, Debug)]
enum Op {
    Write {
        obj: u64,
        offset: u32,
        len: u32,
    },
    Read {
        obj: u64,
        offset: u32,
        len: u32,
    },
    Trim {
        obj: u64,
        offset: u32,
        len: u32,
    },
    Delete {
        obj: u64,
    },
    Promote {
        from: u64,
        to: u64,
    },
    Merge {
        from: u64,
        to: u64,
        from_block: u32,
        to_block: u32,
        n: u32,
    },
    Flush,
    Reopen,
    Crash,
}

/// Ranges biased toward the interesting shapes: arbitrary, block-aligned, whole object, and
/// small pieces of one block.
fn range() -> impl Strategy<Value = (u32, u32)> {
    let b = BLOCK as u32;
    prop_oneof![
        3 => (0..OBJ).prop_flat_map(|o| (Just(o), 1..=OBJ - o)),
        3 => (0..8u32, 1..=8u32).prop_map(move |(first, n)| (first * b, n.min(8 - first) * b)),
        2 => Just((0, OBJ)),
        2 => (0..8u32, 0..b, 1..=64u32).prop_map(move |(blk, o, n)| (blk * b + o, n.min(b - o))),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let obj = 0..OBJECTS;
    prop_oneof![
        8 => (obj.clone(), range()).prop_map(|(obj, (offset, len))| Op::Write { obj, offset, len }),
        4 => (obj.clone(), range()).prop_map(|(obj, (offset, len))| Op::Read { obj, offset, len }),
        3 => (obj.clone(), range()).prop_map(|(obj, (offset, len))| Op::Trim { obj, offset, len }),
        1 => obj.clone().prop_map(|obj| Op::Delete { obj }),
        2 => (obj.clone(), 1..OBJECTS).prop_map(|(from, d)| Op::Promote { from, to: (from + d) % OBJECTS }),
        2 => (obj.clone(), 1..OBJECTS, 0..8u32, 0..8u32, 0..=8u32).prop_map(|(from, d, fb, tb, n)| {
            let n = n.min(8 - fb).min(8 - tb);
            Op::Merge { from, to: (from + d) % OBJECTS, from_block: fb, to_block: tb, n }
        }),
        2 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => Just(Op::Crash),
    ]
}

fn id(obj: u64) -> ObjectId {
    ObjectId::new(9, obj)
}

/// After a crash every block (and every version) must be one the model went through since
/// the last durable point: nothing older, nothing that was never written.
fn check_after_crash(store: &Store, since_durable: &[Model]) -> Result<(), TestCaseError> {
    let mut data = vec![0; OBJ as usize];
    for n in 0..OBJECTS {
        let obj = id(n);
        store
            .read(obj, 0, &mut data)
            .map_err(|e| TestCaseError::fail(format!("read: {e}")))?;
        let alloc = allocation_bits(store, obj);
        for b in 0..OBJ as usize / BLOCK {
            let got = (&data[b * BLOCK..(b + 1) * BLOCK], alloc[b]);
            prop_assert!(
                since_durable.iter().any(|m| m.block(obj, b) == got),
                "object {n} block {b} after crash matches no state since the last flush"
            );
        }
        let version = store.version(obj);
        prop_assert!(since_durable.iter().any(|m| m.version(obj) == version));
    }
    assert_stats_consistent(store);
    Ok(())
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    run_with(ops, IoOptions::default(), Format::Current)
}

/// Which store format a run creates.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    /// Block crcs in crc regions on disk (format version 2).
    Current,
    /// Block crcs in RAM and in the checkpoints (version 1, still opened).
    Version1,
}

/// Direct I/O through io_uring: whole-object writes stay in flight past their return, reads
/// are awaited (alternately with the synchronous read, which must agree), and every other
/// write and trim has its partial blocks read ahead.
fn run_direct(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let io = IoOptions {
        engine: basalt_store::engine::EngineKind::Uring,
        direct: true,
    };
    run_with(ops, io, Format::Current)
}

fn run_with(ops: Vec<Op>, io: IoOptions, format: Format) -> Result<(), TestCaseError> {
    // tmpfs refuses O_DIRECT: a direct store lives on the real disk's filesystem.
    let dir = match io.direct {
        true => tempfile::tempdir().expect("tempdir on disk"),
        false => scratch(),
    };
    let path = dir.path().join("store");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let created = match format {
        Format::Current => Store::create_with(&path, &small_opts(OBJ, 24), &io),
        Format::Version1 => Store::create_version_1(&path, &small_opts(OBJ, 24), &io),
    };
    let mut store = Some(created.expect("create"));
    let version = store.as_ref().map(|s| s.layout().format_version());
    prop_assert_eq!(version, Some(if format == Format::Current { 2 } else { 1 }));
    if io.direct {
        let engine = store.as_ref().and_then(|s| s.io_engine());
        prop_assert_eq!(
            engine,
            Some((io.engine, true)),
            "direct I/O through the engine"
        );
    }
    let mut model = Model::new(OBJ);
    let mut since_durable = vec![model.clone()];
    for (i, op) in ops.into_iter().enumerate() {
        let s = store.as_ref().expect("open store");
        let v = ver(1, i as u64);
        match op {
            Op::Write { obj, offset, len } => {
                let data = content(i as u64, offset as usize, len as usize);
                if io.direct && i % 2 == 0 {
                    // As an OSD writes: partial blocks read ahead, awaited, then the write.
                    let mut edges = runtime
                        .block_on(s.prefetch_edges(id(obj), offset, len))
                        .expect("prefetch");
                    s.write_prefetched(id(obj), offset, &data, v, &mut edges)
                        .expect("write");
                    model.write(id(obj), offset as usize, &data, v);
                    // What a primary forwards: the write widened to whole blocks, equal to
                    // those blocks as the write left them.
                    if let Some((at, widened)) = edges.aligned_write(offset, &data) {
                        let (at, end) = (at as usize, at as usize + widened.len());
                        let want = &model.objects[&id(obj)].data[at..end];
                        prop_assert!(widened == want, "widened write at {} of {}", at, obj);
                    }
                } else {
                    s.write(id(obj), offset, &data, v).expect("write");
                    model.write(id(obj), offset as usize, &data, v);
                }
                since_durable.push(model.clone());
            }
            Op::Read { obj, offset, len } => {
                let mut buf = vec![0xee; len as usize];
                if io.direct && i % 2 == 0 {
                    runtime
                        .block_on(s.read_async(id(obj), offset, &mut buf))
                        .expect("read");
                } else {
                    s.read(id(obj), offset, &mut buf).expect("read");
                }
                let want = model
                    .objects
                    .get(&id(obj))
                    .map_or(vec![0; len as usize], |o| {
                        o.data[offset as usize..(offset + len) as usize].to_vec()
                    });
                prop_assert_eq!(buf, want, "read {} at {}+{}", obj, offset, len);
                prop_assert_eq!(
                    allocation_bits(s, id(obj)),
                    model
                        .objects
                        .get(&id(obj))
                        .map_or(vec![false; OBJ as usize / BLOCK], |o| o.alloc.clone())
                );
                prop_assert_eq!(s.version(id(obj)), model.version(id(obj)));
            }
            Op::Trim { obj, offset, len } => {
                if io.direct && i % 2 == 0 {
                    let edges = runtime
                        .block_on(s.prefetch_edges(id(obj), offset, len))
                        .expect("prefetch");
                    s.trim_prefetched(id(obj), offset, len, v, &edges)
                        .expect("trim");
                } else {
                    s.trim(id(obj), offset, len, v).expect("trim");
                }
                model.trim(id(obj), offset as usize, len as usize, v);
                since_durable.push(model.clone());
            }
            Op::Delete { obj } => {
                s.delete(id(obj), v).expect("delete");
                model.delete(id(obj));
                since_durable.push(model.clone());
            }
            Op::Promote { from, to } => {
                let moved = s.promote(id(from), id(to)).expect("promote");
                prop_assert_eq!(moved, model.objects.contains_key(&id(from)));
                model.promote(id(from), id(to));
                since_durable.push(model.clone());
            }
            Op::Merge {
                from,
                to,
                from_block,
                to_block,
                n,
            } => {
                let (f, t) = (id(from), id(to));
                let result = s.merge(f, from_block, t, to_block, n);
                let present = (
                    model.objects.contains_key(&f),
                    model.objects.contains_key(&t),
                );
                match present {
                    (true, false) => prop_assert!(result.is_err(), "merge into an absent object"),
                    _ => {
                        let merged = result.expect("merge");
                        let (fb, tb) = (from_block as usize, to_block as usize);
                        prop_assert_eq!(merged, model.merge(f, fb, t, tb, n as usize));
                        since_durable.push(model.clone());
                    }
                }
            }
            Op::Flush => {
                s.flush().expect("flush");
                since_durable = vec![model.clone()];
            }
            Op::Reopen => {
                store.take().expect("store").close().expect("close");
                let s = Store::open_with(&path, &io).expect("reopen");
                assert_store_matches(&s, &model);
                store = Some(s);
                since_durable = vec![model.clone()];
            }
            Op::Crash => {
                drop(store.take());
                let s = Store::open_with(&path, &io).expect("recover");
                check_after_crash(&s, &since_durable)?;
                model = Model::read_from(&s);
                store = Some(s);
                since_durable = vec![model.clone()];
            }
        }
        store.as_ref().expect("store").check_invariants();
    }
    let s = store.take().expect("store");
    assert_store_matches(&s, &model);
    s.close().expect("close");
    let s = Store::open(&path).expect("final reopen");
    assert_store_matches(&s, &model);
    Ok(())
}

proptest! {
    // 200 cases by default; PROPTEST_CASES overrides for longer hunts.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(200),
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_the_reference_model(ops in prop::collection::vec(op(), 1..80)) {
        run(ops)?;
    }
}

proptest! {
    // Fewer cases: the older format's own code is only its crcs in RAM and in checkpoints.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_store_of_format_version_1_matches_the_reference_model(
        ops in prop::collection::vec(op(), 1..80)
    ) {
        run_with(ops, IoOptions::default(), Format::Version1)?;
    }
}

proptest! {
    // Fewer cases: each one creates a direct-I/O store on the real disk.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]

    #[test]
    fn store_matches_the_reference_model_with_direct_io_through_io_uring(
        ops in prop::collection::vec(op(), 1..80)
    ) {
        run_direct(ops)?;
    }
}

/// Regression (found by the model test): a whole object written into a fresh slot, promoted
/// to another key, then written under its new name and flushed must survive a crash —
/// recovery had taken the later write for another object's and dropped the flushed log.
#[test]
fn a_promoted_object_written_under_its_new_name_survives_a_crash() {
    run(vec![
        Op::Write {
            obj: 1,
            offset: 0,
            len: OBJ,
        },
        Op::Promote { from: 1, to: 3 },
        Op::Write {
            obj: 3,
            offset: 0,
            len: 1,
        },
        Op::Flush,
        Op::Crash,
    ])
    .expect("the flushed writes survive");
}

/// Goal: out-of-range requests are refused with OutOfRange, never a panic.
#[test]
fn out_of_range_is_an_error_not_a_panic() {
    let dir = scratch();
    let s = Store::create(&dir.path().join("store"), &small_opts(OBJ, 4)).expect("create");
    let mut big = vec![0; OBJ as usize + 1];
    let v = ver(1, 1);
    assert!(matches!(
        s.read(id(0), 0, &mut big),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.read(id(0), OBJ, &mut [0]),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.write(id(0), 1, &big[..OBJ as usize], v),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.write(id(0), u32::MAX, &[1], v),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.trim(id(0), OBJ - 1, 2, v),
        Err(StoreError::OutOfRange { .. })
    ));
    assert!(matches!(
        s.trim(id(0), u32::MAX, u32::MAX, v),
        Err(StoreError::OutOfRange { .. })
    ));
    s.read(id(0), OBJ, &mut [])
        .expect("an empty read at the end is fine");
    assert!(s.objects().is_empty());
}
