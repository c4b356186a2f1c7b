//! Goal: a writer killed with SIGKILL at a random moment loses nothing it flushed. After
//! recovery no read fails its checksum, the stats are consistent, and every block holds what
//! the last op up to the last reported flush left there, or what some later op left there.
//!
//! The writer is this test binary re-executed (`crash_child`, ignored unless run with the
//! `BASALT_CRASH_CHILD` environment variable). It performs seeded random ops whose content is
//! derived from the op number, flushes every few ops and prints `durable N` after each flush.

mod common;

use basalt_proto::ObjectId;
use basalt_store::{IoOptions, Store};
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUNDS: u64 = 25;
/// 16 blocks per object.
const OBJ: u32 = 64 << 10;
const OBJECTS: u64 = 12;
/// A child that is never killed stops by itself after this many ops.
const CHILD_OPS_MAX: u64 = 100_000;
/// Kill delay bounds after the child reports its first flush.
const KILL_DELAY_MS_MAX: u64 = 60;
/// Bound on the whole test, so a hung child cannot hang CI.
const TEST_DURATION_MAX: Duration = Duration::from_secs(120);
const CHILD_ENV: &str = "BASALT_CRASH_CHILD";

#[derive(Clone, Copy, Debug)]
enum CrashOp {
    Write {
        obj: u64,
        offset: usize,
        len: usize,
    },
    Trim {
        obj: u64,
        offset: usize,
        len: usize,
    },
    Delete {
        obj: u64,
    },
    Promote {
        from: u64,
        to: u64,
    },
    /// `Store::merge` of `n` blocks (0: a version-only bump); skipped when `to` is absent.
    Merge {
        from: u64,
        to: u64,
        block: u32,
        n: u32,
    },
}

/// Op number `n` of the run seeded `seed`: the same in the child and the parent.
fn op(seed: u64, n: u64) -> CrashOp {
    let mut r = Rng(mix(seed ^ n.wrapping_mul(0x2545_f491_4f6c_dd1d)));
    let obj = r.below(OBJECTS);
    let size = OBJ as u64;
    let blocks = size / BLOCK as u64;
    match r.below(100) {
        0..=44 => {
            let offset = r.below(size);
            let len = 1 + r.below((size - offset).min(3 * BLOCK as u64));
            CrashOp::Write {
                obj,
                offset: offset as usize,
                len: len as usize,
            }
        }
        45..=59 => {
            let first = r.below(blocks);
            let n = 1 + r.below(blocks - first);
            let (offset, len) = ((first * BLOCK as u64) as usize, (n * BLOCK as u64) as usize);
            CrashOp::Write { obj, offset, len }
        }
        60..=74 => CrashOp::Write {
            obj,
            offset: 0,
            len: OBJ as usize,
        },
        75..=91 => {
            let offset = r.below(size);
            let len = 1 + r.below(size - offset);
            CrashOp::Trim {
                obj,
                offset: offset as usize,
                len: len as usize,
            }
        }
        92..=93 => {
            let block = r.below(blocks) as u32;
            CrashOp::Merge {
                from: obj,
                to: (obj + 1 + r.below(OBJECTS - 1)) % OBJECTS,
                block,
                n: r.below(blocks - block as u64 + 1) as u32,
            }
        }
        94..=96 => CrashOp::Promote {
            from: obj,
            to: (obj + 1 + r.below(OBJECTS - 1)) % OBJECTS,
        },
        _ => CrashOp::Delete { obj },
    }
}

fn id(obj: u64) -> ObjectId {
    ObjectId::new(5, obj)
}

/// Apply op `n` to the store (the child) or to the model (the parent).
fn apply_to_store(store: &Store, seed: u64, n: u64) {
    let v = ver(seed, n);
    let result = match op(seed, n) {
        CrashOp::Write { obj, offset, len } => {
            store.write(id(obj), offset as u32, &content(n, offset, len), v)
        }
        CrashOp::Trim { obj, offset, len } => store.trim(id(obj), offset as u32, len as u32, v),
        CrashOp::Delete { obj } => store.delete(id(obj), v),
        CrashOp::Promote { from, to } => store.promote(id(from), id(to)).map(|_| ()),
        CrashOp::Merge { to, .. } if store.version(id(to)).is_none() => Ok(()),
        CrashOp::Merge { from, to, block, n } => {
            store.merge(id(from), block, id(to), block, n).map(|_| ())
        }
    };
    result.unwrap_or_else(|e| panic!("op {n}: {e}"));
}

fn apply_to_model(model: &mut Model, seed: u64, n: u64) {
    let v = ver(seed, n);
    match op(seed, n) {
        CrashOp::Write { obj, offset, len } => {
            model.write(id(obj), offset, &content(n, offset, len), v)
        }
        CrashOp::Trim { obj, offset, len } => model.trim(id(obj), offset, len, v),
        CrashOp::Delete { obj } => model.delete(id(obj)),
        CrashOp::Promote { from, to } => model.promote(id(from), id(to)),
        CrashOp::Merge { to, .. } if !model.objects.contains_key(&id(to)) => {}
        CrashOp::Merge { from, to, block, n } => {
            let (b, n) = (block as usize, n as usize);
            model.merge(id(from), b, id(to), b, n);
        }
    }
}

/// The writer process. Not a test on its own: without the environment variable it returns.
#[test]
#[ignore = "run by crash_recovery_keeps_every_flushed_write as its child process"]
fn crash_child() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = spec.split(';').collect();
    let path = std::path::Path::new(parts[0]);
    let seed: u64 = parts[1].parse().expect("seed");
    let first_op: u64 = parts[2].parse().expect("first op");
    let flush_every: u64 = parts[3].parse().expect("flush interval");
    let store = Store::open_with(path, &io_options(parts[4])).expect("child opens the store");
    // As an OSD does: due checkpoints run on a thread of their own, beside the writes and
    // flushes (kills then land in checkpoints racing batches); else the flushes run them.
    let background = parts[5] == "background";
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        if background {
            s.spawn(|| {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    if store.checkpoint_wanted() {
                        store.checkpoint_due().expect("background checkpoint");
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
        }
        let mut out = std::io::stdout().lock();
        for n in first_op..first_op + CHILD_OPS_MAX {
            apply_to_store(&store, seed, n);
            if (n - first_op + 1).is_multiple_of(flush_every) {
                store.flush().expect("flush");
                writeln!(out, "durable {n}").expect("report");
                out.flush().expect("report");
            }
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    store.close().expect("close");
}

/// The I/O a round's child and its check use: `inline` (buffered, the caller's thread),
/// `uring` or `threads` (direct).
fn io_options(name: &str) -> IoOptions {
    match name {
        "inline" => IoOptions::default(),
        "uring" | "threads" => IoOptions {
            engine: name.parse().expect("engine name"),
            direct: true,
        },
        other => panic!("unknown I/O mode {other}"),
    }
}

/// How a round kills its child.
struct Kill {
    /// Start the delay only once the child reported its first flush (else: from spawn).
    after_first_flush: bool,
    delay: Duration,
}

/// Run one child until killed; returns the last op it reported durable (`first_op - 1` if
/// none).
fn run_child(
    path: &std::path::Path,
    io: &str,
    background_checkpoints: bool,
    seed: u64,
    first_op: u64,
    flush_every: u64,
    kill: Kill,
) -> u64 {
    let mut child = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "crash_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            CHILD_ENV,
            format!(
                "{};{seed};{first_op};{flush_every};{io};{}",
                path.display(),
                if background_checkpoints {
                    "background"
                } else {
                    "inline"
                }
            ),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().expect("child stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut last = None;
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            // libtest may print on the same line; find our report anywhere in it.
            if let Some(at) = line.find("durable ") {
                let n: u64 = line[at + 8..].trim().parse().expect("durable op number");
                if last.is_none() {
                    let _ = tx.send(());
                }
                last = Some(n);
            }
        }
        last
    });
    if kill.after_first_flush {
        let _ = rx.recv_timeout(Duration::from_secs(10));
    }
    std::thread::sleep(kill.delay);
    let _ = child.kill(); // SIGKILL
    let status = child.wait().expect("wait child");
    let last = reader.join().expect("reader thread");
    assert!(
        status.code().is_none_or(|c| c == 0),
        "child failed on its own: {status:?}"
    );
    last.unwrap_or(first_op - 1)
}

/// Check the recovered store against the model: for every block, the contents it had after
/// op `durable` or after some later op up to `started_max`.
fn check_round(
    store: &Store,
    start: &Model,
    seed: u64,
    first_op: u64,
    durable: u64,
    started_max: u64,
) {
    let mut model = start.clone();
    for n in first_op..=durable {
        apply_to_model(&mut model, seed, n);
    }
    let mut candidates = vec![model.clone()];
    for n in durable + 1..=started_max {
        apply_to_model(&mut model, seed, n);
        candidates.push(model.clone());
    }
    let mut data = vec![0; OBJ as usize];
    for o in 0..OBJECTS {
        let obj = id(o);
        store
            .read(obj, 0, &mut data)
            .unwrap_or_else(|e| panic!("read of {obj} after recovery: {e}"));
        let alloc = allocation_bits(store, obj);
        for b in 0..OBJ as usize / BLOCK {
            let got = (&data[b * BLOCK..(b + 1) * BLOCK], alloc[b]);
            let which = candidates.iter().position(|m| m.block(obj, b) == got);
            assert!(
                which.is_some(),
                "object {obj} block {b}: matches no state from op {durable} to {started_max}"
            );
        }
        let version = store.version(obj);
        assert!(
            candidates.iter().any(|m| m.version(obj) == version),
            "version of {obj}"
        );
    }
    assert_stats_consistent(store);
}

#[test]
fn crash_recovery_keeps_every_flushed_write() {
    let dir = scratch();
    crash_rounds(dir.path(), &["inline"]);
}

/// The same with direct I/O (on the build's filesystem: tmpfs refuses O_DIRECT), rounds
/// alternating between the io_uring and the thread-pool engines.
#[test]
fn crash_recovery_with_direct_io_keeps_every_flushed_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    crash_rounds(dir.path(), &["uring", "threads"]);
}

/// Rounds of: a child writing until killed, then recovery checked against the model. Round
/// `r` runs with I/O mode `modes[r % modes.len()]`.
fn crash_rounds(dir: &std::path::Path, modes: &[&str]) {
    let began = Instant::now();
    let path = dir.join("store");
    Store::create(&path, &small_opts(OBJ, 40))
        .expect("create")
        .close()
        .expect("close");
    let mut rng = Rng(0x5eed_0000 + std::process::id() as u64);
    let mut model = Model::new(OBJ);
    let mut first_op = 1;
    let mut recovered_writes = 0;
    for round in 1..=ROUNDS {
        assert!(
            began.elapsed() < TEST_DURATION_MAX,
            "crash test is taking too long"
        );
        let seed = rng.next() >> 16;
        let flush_every = 1 + rng.below(16);
        let kill = Kill {
            after_first_flush: rng.below(5) != 0,
            delay: Duration::from_millis(rng.below(KILL_DELAY_MS_MAX + 1)),
        };
        let mode = modes[round as usize % modes.len()];
        // Every other round of each mode, checkpoints on a thread of their own (as in an OSD).
        let background = (round as usize / modes.len()).is_multiple_of(2);
        let durable = run_child(&path, mode, background, seed, first_op, flush_every, kill);
        // The child printed `durable N` after each flush before starting the next op, so it
        // cannot have started any op past the next flush point.
        let started_max = durable + flush_every;
        let io = io_options(mode);
        let store = Store::open_with(&path, &io)
            .unwrap_or_else(|e| panic!("round {round} ({mode}): recovery: {e}"));
        if io.direct {
            assert_eq!(
                store.io_engine(),
                Some((io.engine, true)),
                "{mode}: direct I/O on {}",
                dir.display()
            );
        }
        check_round(&store, &model, seed, first_op, durable, started_max);
        recovered_writes += durable + 1 - first_op;
        model = Model::read_from(&store);
        first_op = started_max + 1;
        store.close().expect("close after check");
    }
    assert!(
        recovered_writes > ROUNDS,
        "the children got real work done before being killed"
    );
}
