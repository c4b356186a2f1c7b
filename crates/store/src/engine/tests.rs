use super::*;
use std::io::ErrorKind;

const KINDS: [EngineKind; 3] = [
    EngineKind::Inline,
    EngineKind::Uring,
    EngineKind::Threads { threads: 4 },
];

/// A file of `blocks` zeroed blocks in `dir`, opened as the store would open it.
fn medium(dir: &Path, blocks: u64) -> (File, bool) {
    let path = dir.join("medium");
    let f = File::create(&path).expect("create");
    f.set_len(blocks * ALIGN as u64).expect("size");
    drop(f);
    open_direct(&path).expect("open")
}

fn pattern(seed: u64) -> AlignedBuf {
    let mut b = AlignedBuf::zeroed(2 * ALIGN);
    for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
        *x = (seed.wrapping_mul(31).wrapping_add(i as u64 * 7) % 251) as u8;
    }
    b
}

/// The directories tests run in: the build's filesystem (direct I/O where it allows) and
/// tmpfs (which may refuse it: buffered).
fn dirs() -> Vec<tempfile::TempDir> {
    let mut out = vec![tempfile::tempdir().expect("tempdir")];
    if Path::new("/dev/shm").is_dir() {
        out.push(tempfile::tempdir_in("/dev/shm").expect("tempdir in /dev/shm"));
    }
    out
}

/// Whether `dir` is on ext4, XFS or btrfs (which accept direct I/O).
fn disk_filesystem(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes into a zeroed struct of the right type; the path is a valid
    // NUL-terminated string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    matches!(st.f_type as i64, 0xEF53 | 0x5846_5342 | 0x9123_683E)
}

/// Goal: with either engine, on either filesystem, 64 writes submitted together land where
/// they were aimed, survive a sync, and read back (reads submitted together too).
#[test]
fn many_operations_in_flight_read_back_what_was_written() {
    for dir in dirs() {
        for kind in KINDS {
            let (file, direct) = medium(dir.path(), 256);
            if disk_filesystem(dir.path()) {
                assert!(direct, "{}: O_DIRECT refused", dir.path().display());
            }
            let engine = Engine::start(Arc::new(file), direct, kind).expect("engine");
            // io_uring is there on the machines the suite runs on: a fallback is a failure.
            assert_eq!(engine.kind(), kind, "io_uring refused here");
            let writes: Vec<Completion> = (0..64u64)
                .map(|i| {
                    engine.submit(Op::Write {
                        offset: i * 4 * ALIGN as u64,
                        buf: pattern(i).into(),
                    })
                })
                .collect();
            for c in writes {
                c.wait().result.expect("write");
            }
            engine.submit(Op::Sync).wait().result.expect("sync");
            let reads: Vec<Completion> = (0..64u64)
                .map(|i| {
                    engine.submit(Op::Read {
                        offset: i * 4 * ALIGN as u64,
                        buf: AlignedBuf::zeroed(2 * ALIGN),
                    })
                })
                .collect();
            for (i, c) in reads.into_iter().enumerate() {
                let done = c.wait();
                done.result.expect("read");
                let got = done.buf.expect("the buffer comes back");
                assert_eq!(
                    got.as_slice(),
                    pattern(i as u64).as_slice(),
                    "block {i} ({kind:?}, direct {direct}, {})",
                    dir.path().display()
                );
            }
        }
    }
}

/// Goal: a read past the end is an error (UnexpectedEof), never zeros or a hang; an
/// unaligned offset under direct I/O is an error too (EINVAL), reported to its caller.
#[test]
fn bad_operations_fail_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    for kind in KINDS {
        let (file, direct) = medium(dir.path(), 4);
        let engine = Engine::start(Arc::new(file), direct, kind).expect("engine");
        let past = engine
            .submit(Op::Read {
                offset: 4 * ALIGN as u64,
                buf: AlignedBuf::zeroed(ALIGN),
            })
            .wait();
        assert_eq!(
            past.result.expect_err("read past the end").kind(),
            ErrorKind::UnexpectedEof,
            "{kind:?}"
        );
        let straddling = engine
            .submit(Op::Read {
                offset: 3 * ALIGN as u64,
                buf: AlignedBuf::zeroed(2 * ALIGN),
            })
            .wait();
        assert!(
            straddling.result.is_err(),
            "{kind:?}: a read across the end"
        );
        if direct {
            let unaligned = engine
                .submit(Op::Write {
                    offset: 100,
                    buf: AlignedBuf::zeroed(ALIGN).into(),
                })
                .wait();
            assert_eq!(
                unaligned.result.expect_err("unaligned").raw_os_error(),
                Some(libc::EINVAL),
                "{kind:?}"
            );
        }
    }
}

/// Goal: completions are futures: one task awaits many operations of both engines at once
/// on a single-threaded runtime (nothing blocks it).
#[test]
fn completions_are_awaited_without_blocking_the_runtime() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for kind in KINDS {
        let (file, direct) = medium(dir.path(), 64);
        let engine = Arc::new(Engine::start(Arc::new(file), direct, kind).expect("engine"));
        rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..32u64 {
                let engine = engine.clone();
                tasks.push(tokio::spawn(async move {
                    let offset = i * 2 * ALIGN as u64;
                    let w = engine
                        .submit(Op::Write {
                            offset,
                            buf: pattern(i).into(),
                        })
                        .await;
                    w.result.expect("write");
                    let r = engine
                        .submit(Op::Read {
                            offset,
                            buf: AlignedBuf::zeroed(2 * ALIGN),
                        })
                        .await;
                    r.result.expect("read");
                    assert_eq!(r.buf.expect("buf").as_slice(), pattern(i).as_slice());
                }));
            }
            for t in tasks {
                t.await.expect("task");
            }
        });
    }
}

/// Goal: dropping an engine runs every operation it accepted first (none is lost, none
/// left waiting), and the bytes are there afterwards.
#[test]
fn dropping_the_engine_completes_what_it_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    for kind in KINDS {
        let (file, direct) = medium(dir.path(), 128);
        let engine = Engine::start(Arc::new(file), direct, kind).expect("engine");
        let pending: Vec<Completion> = (0..60u64)
            .map(|i| {
                engine.submit(Op::Write {
                    offset: i * 2 * ALIGN as u64,
                    buf: pattern(i + 100).into(),
                })
            })
            .collect();
        drop(engine);
        for c in pending {
            c.wait()
                .result
                .expect("completed before the engine stopped");
        }
        let (file, _) = open_direct(&dir.path().join("medium")).expect("reopen");
        let mut buf = AlignedBuf::zeroed(2 * ALIGN);
        std::os::unix::fs::FileExt::read_exact_at(&file, buf.as_mut_slice(), 7 * 2 * ALIGN as u64)
            .expect("read");
        assert_eq!(buf.as_slice(), pattern(107).as_slice(), "{kind:?}");
    }
}

/// Goal: the engine names itself as the command line does, and parsing refuses unknown names.
#[test]
fn engine_names_parse() {
    assert_eq!("uring".parse::<EngineKind>(), Ok(EngineKind::Uring));
    assert_eq!(
        "threads".parse::<EngineKind>(),
        Ok(EngineKind::Threads {
            threads: EngineKind::DEFAULT_THREADS
        })
    );
    let err = "aio".parse::<EngineKind>().expect_err("unknown");
    assert!(err.contains("inline, uring or threads"), "{err}");
}

/// Goal: operations submitted together — more than the ring holds at once — all complete
/// and land where they were aimed, on every engine.
#[test]
fn operations_submitted_together_all_land() {
    let dir = tempfile::tempdir().expect("tempdir");
    for kind in KINDS {
        let (file, direct) = medium(dir.path(), 700);
        let engine = Engine::start(Arc::new(file), direct, kind).expect("engine");
        let writes = (0..300u64)
            .map(|i| Op::Write {
                offset: i * 2 * ALIGN as u64,
                buf: pattern(i + 500).into(),
            })
            .collect();
        for c in engine.submit_all(writes) {
            c.wait().result.expect("write");
        }
        let reads = (0..300u64)
            .map(|i| Op::Read {
                offset: i * 2 * ALIGN as u64,
                buf: AlignedBuf::zeroed(2 * ALIGN),
            })
            .collect();
        for (i, c) in engine.submit_all(reads).into_iter().enumerate() {
            let done = c.wait();
            done.result.expect("read");
            let got = done.buf.expect("buf");
            assert_eq!(
                got.as_slice(),
                pattern(i as u64 + 500).as_slice(),
                "{kind:?} op {i}"
            );
        }
    }
}
