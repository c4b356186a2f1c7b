//! Goal: the I/O engines compared on this machine's disk with direct I/O: 4 KiB random
//! writes and reads at queue depth 32 (inline at depth 1, and inline on 32 threads: what
//! running store calls on a blocking pool gives), interleaved rounds, IOPS and CPU time per
//! operation. Ignored by default; run with
//! `cargo test --release -p basalt-store --test engine_bench -- --ignored --nocapture`.

use basalt_store::engine::{open_direct, AlignedBuf, Completion, Engine, EngineKind, Op, ALIGN};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

const FILE_BYTES: u64 = 1 << 30;
const DEPTH: usize = 32;
const PHASE: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;

/// User + system CPU seconds of this process so far.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage fills a zeroed struct of the right type.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

struct Rng(u64);
impl Rng {
    fn block(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % (FILE_BYTES / ALIGN as u64) * ALIGN as u64
    }
}

fn op(write: bool, rng: &mut Rng) -> Op {
    let offset = rng.block();
    let buf = AlignedBuf::zeroed(ALIGN);
    if write {
        Op::Write {
            offset,
            buf: buf.into(),
        }
    } else {
        Op::Read { offset, buf }
    }
}

/// Keep `depth` operations in flight on `engine` for PHASE; operations completed.
fn run_queue(engine: &Engine, write: bool, depth: usize, seed: u64) -> u64 {
    let mut rng = Rng(seed | 1);
    let mut queue: VecDeque<Completion> = (0..depth)
        .map(|_| engine.submit(op(write, &mut rng)))
        .collect();
    let started = Instant::now();
    let mut done = 0;
    while started.elapsed() < PHASE {
        let c = queue.pop_front().expect("queue");
        c.wait().result.expect("I/O");
        done += 1;
        queue.push_back(engine.submit(op(write, &mut rng)));
    }
    for c in queue {
        c.wait().result.expect("I/O");
    }
    done
}

/// `threads` threads each running inline operations one at a time for PHASE.
fn run_threads(engine: &Arc<Engine>, write: bool, threads: usize) -> u64 {
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let engine = engine.clone();
            std::thread::spawn(move || run_queue(&engine, write, 1, 1000 + t as u64))
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("thread")).sum()
}

/// `depth` tasks on a two-worker runtime, each awaiting one operation at a time for PHASE.
fn run_tasks(rt: &tokio::runtime::Runtime, engine: &Arc<Engine>, write: bool, depth: usize) -> u64 {
    rt.block_on(async {
        let tasks: Vec<_> = (0..depth)
            .map(|t| {
                let engine = engine.clone();
                tokio::spawn(async move {
                    let mut rng = Rng(2000 + t as u64);
                    let started = Instant::now();
                    let mut done = 0;
                    while started.elapsed() < PHASE {
                        engine
                            .submit(op(write, &mut rng))
                            .await
                            .result
                            .expect("I/O");
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let mut sum = 0;
        for t in tasks {
            sum += t.await.expect("task");
        }
        sum
    })
}

/// A file of FILE_BYTES whose blocks are all written (reads reach the device; an
/// allocated-but-unwritten extent reads as zeros without I/O, and writing it converts the
/// extent, which the kernel cannot do without blocking).
fn written_file(path: &std::path::Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create");
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..FILE_BYTES >> 20 {
        f.write_all(&chunk).expect("fill");
    }
    f.sync_all().expect("sync");
}

/// Where the bench file goes: `ENGINE_BENCH_DIR` or the build's filesystem.
fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("ENGINE_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).expect("tempdir in ENGINE_BENCH_DIR"),
        None => tempfile::tempdir().expect("tempdir"),
    }
}

#[test]
#[ignore = "benchmark; run explicitly in release mode"]
fn bench_engines_awaited_on_a_runtime() {
    let dir = bench_dir();
    let path = dir.path().join("medium");
    written_file(&path);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let modes: [(&str, EngineKind, usize); 4] = [
        ("uring tasks QD1", EngineKind::Uring, 1),
        (
            "threads(32) tasks QD1",
            EngineKind::Threads { threads: DEPTH },
            1,
        ),
        ("uring tasks QD32", EngineKind::Uring, DEPTH),
        (
            "threads(32) tasks QD32",
            EngineKind::Threads { threads: DEPTH },
            DEPTH,
        ),
    ];
    println!(
        "{:<8} {:<24} {:>10} {:>12} {:>10}",
        "op", "engine", "IOPS", "CPU us/op", "lat us"
    );
    for _round in 0..ROUNDS {
        for write in [true, false] {
            for (name, kind, depth) in modes {
                let (file, direct) = open_direct(&path).expect("open");
                let engine = {
                    let _context = rt.enter();
                    Arc::new(Engine::start(Arc::new(file), direct, kind).expect("engine"))
                };
                let cpu = cpu_secs();
                let t = Instant::now();
                let ops = run_tasks(&rt, &engine, write, depth);
                let secs = t.elapsed().as_secs_f64();
                let cpu = cpu_secs() - cpu;
                println!(
                    "{:<8} {:<24} {:>10.0} {:>12.1} {:>10.1}",
                    if write { "write" } else { "read" },
                    name,
                    ops as f64 / secs,
                    cpu * 1e6 / ops as f64,
                    secs * 1e6 * depth as f64 / ops as f64
                );
            }
        }
    }
}

#[test]
#[ignore = "benchmark; run explicitly in release mode"]
fn bench_engines() {
    let dir = bench_dir();
    let path = dir.path().join("medium");
    written_file(&path);
    let modes: [(&str, EngineKind, usize); 4] = [
        ("inline QD1", EngineKind::Inline, 1),
        ("inline on 32 threads", EngineKind::Inline, 0),
        (
            "threads(32) QD32",
            EngineKind::Threads { threads: DEPTH },
            DEPTH,
        ),
        ("uring QD32", EngineKind::Uring, DEPTH),
    ];
    println!(
        "{:<8} {:<22} {:>10} {:>12}",
        "op", "engine", "IOPS", "CPU us/op"
    );
    for round in 0..ROUNDS {
        for write in [true, false] {
            for (name, kind, depth) in modes {
                let (file, direct) = open_direct(&path).expect("open");
                assert!(direct, "direct I/O refused on {}", dir.path().display());
                let engine = Arc::new(Engine::start(Arc::new(file), true, kind).expect("engine"));
                let cpu = cpu_secs();
                let t = Instant::now();
                let ops = if depth == 0 {
                    run_threads(&engine, write, DEPTH)
                } else {
                    run_queue(&engine, write, depth, 7 + round as u64)
                };
                let secs = t.elapsed().as_secs_f64();
                let cpu = cpu_secs() - cpu;
                println!(
                    "{:<8} {:<22} {:>10.0} {:>12.1}",
                    if write { "write" } else { "read" },
                    name,
                    ops as f64 / secs,
                    cpu * 1e6 / ops as f64
                );
            }
        }
    }
}
