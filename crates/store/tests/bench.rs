//! Goal: a rough single-thread cost figure for the hot paths on tmpfs. Ignored by default;
//! run with `cargo test --release -p basalt-store --test bench -- --ignored --nocapture`.

mod common;

use basalt_proto::ObjectId;
use basalt_store::{Store, StoreOptions};
use common::*;
use std::time::Instant;

const OBJECTS: u64 = 1024;
const OPS: u64 = 200_000;

fn report(what: &str, ops: u64, started: Instant) {
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{what:<44} {:>10.0} ops/s {:>8.2} us/op",
        ops as f64 / secs,
        secs * 1e6 / ops as f64
    );
}

#[test]
#[ignore = "benchmark; run explicitly in release mode"]
fn bench_hot_paths() {
    let dir = scratch();
    let opts = StoreOptions {
        capacity_bytes: 256 << 20,
        object_size_bytes: 128 << 10,
        wal_bytes: 0,
    };
    let store = Store::create(&dir.path().join("store"), &opts).expect("create");
    let block = vec![0xa5u8; BLOCK];
    let mut rng = Rng(1);
    let mut buf = vec![0u8; BLOCK];
    let at = |r: &mut Rng| {
        (
            ObjectId::new(1, r.below(OBJECTS)),
            (r.below(32) * BLOCK as u64) as u32,
        )
    };

    for pass in ["first touch of sparse slots", "steady state"] {
        let t = Instant::now();
        for i in 0..OPS {
            let (o, off) = at(&mut rng);
            store.write(o, off, &block, ver(1, i)).expect("write");
            if i % 64 == 63 {
                store.flush().expect("flush");
            }
        }
        store.flush().expect("flush");
        report(&format!("4 KiB random write, flush/64 ({pass})"), OPS, t);
    }

    let t = Instant::now();
    for _ in 0..OPS {
        let (o, off) = at(&mut rng);
        store.read(o, off, &mut buf).expect("read");
    }
    report("4 KiB random read (from slots)", OPS, t);

    let t = Instant::now();
    for i in 0..OPS / 10 {
        let (o, off) = at(&mut rng);
        store.write(o, off, &block, ver(2, i)).expect("write");
        store.flush().expect("flush");
    }
    report("4 KiB random write + flush each", OPS / 10, t);

    let t = Instant::now();
    for i in 0..OPS / 10 {
        let (o, off) = at(&mut rng);
        store.write(o, off, &block, ver(3, i)).expect("write");
        store.read(o, off, &mut buf).expect("read");
        if i % 64 == 63 {
            store.flush().expect("flush");
        }
    }
    report("4 KiB write then read it (overlay)", OPS / 10, t);

    let whole = vec![0x5au8; 128 << 10];
    let t = Instant::now();
    for i in 0..OPS / 20 {
        store
            .write(ObjectId::new(1, rng.below(OBJECTS)), 0, &whole, ver(4, i))
            .expect("whole");
        if i % 16 == 15 {
            store.flush().expect("flush");
        }
    }
    report("128 KiB whole-object write, flush every 16", OPS / 20, t);

    let t = Instant::now();
    let threads = 2u64;
    std::thread::scope(|s| {
        for th in 0..threads {
            let store = &store;
            let block = &block;
            s.spawn(move || {
                let mut rng = Rng(100 + th);
                for i in 0..OPS / 20 {
                    let o = ObjectId::new(2 + th, rng.below(OBJECTS / 4));
                    store
                        .write(o, (rng.below(32) * BLOCK as u64) as u32, block, ver(5, i))
                        .expect("write");
                    store.flush().expect("flush");
                }
            });
        }
    });
    report(
        "4 KiB write + flush each, 2 threads (total)",
        threads * OPS / 20,
        t,
    );
    store.close().expect("close");
}
