//! The target's own cost per I/O, without a kernel initiator: the test initiator drives
//! 4 KiB random reads and writes at queue depth 32 over loopback against an in-memory
//! volume, one I/O queue, for a few seconds each, and prints IOPS.
//!
//! `cargo run --release -p basalt-nvmf --example loopback_iops [SECONDS]`
// An example may unwrap (it is a measurement tool, not library code).
#![allow(clippy::unwrap_used)]

// Not every helper of the test initiator is used here.
#[allow(dead_code)]
#[path = "../tests/initiator/mod.rs"]
mod initiator;

use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt_nbd::{ExportMap, MemDevice};
use basalt_nvmf::command::*;
use basalt_nvmf::pdu::Digests;
use basalt_nvmf::{volume_nqn, Target};
use bytes::Bytes;
use initiator::Initiator;

const DEPTH: u64 = 32;
const BLOCKS: u64 = 64 << 8; // 64 MiB of 4 KiB blocks

#[tokio::main]
async fn main() {
    let secs: u64 = std::env::args().nth(1).map_or(5, |s| s.parse().unwrap());
    let map = Arc::new(ExportMap::new());
    map.insert("v", "", Arc::new(MemDevice::new(BLOCKS * 4096)));
    let target = Target::new(map);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(target.serve_tcp(listener));
    let nqn = volume_nqn("v");
    for digests in [
        Digests::default(),
        Digests {
            header: true,
            data: true,
        },
    ] {
        let a = Initiator::admin(addr, &nqn, digests, 0).await;
        let mut q = Initiator::connect(addr, digests).await;
        assert!(q
            .fabrics_connect(1, 127, &nqn, a.cntlid, 0)
            .await
            .status
            .is_success());
        for op in [NVM_WRITE, NVM_READ] {
            let data = Bytes::from(vec![0x5au8; 4096]);
            let mut lba = 12345u64;
            let mut next = move || {
                lba = (lba * 6_364_136_223_846_793_005 + 1_442_695_040_888_963_407) % BLOCKS;
                lba
            };
            let until = Instant::now() + Duration::from_secs(secs);
            let mut done = 0u64;
            for _ in 0..DEPTH {
                let sqe = q.nvm(op, next(), 1, 0);
                let d = (op == NVM_WRITE).then(|| data.clone());
                q.submit(sqe, d, true, 4096).await;
            }
            // Loop bound: the deadline; then the queue drains.
            let mut inflight = DEPTH;
            while inflight > 0 {
                let (cqe, _) = q.next_completion().await;
                assert!(cqe.status.is_success());
                done += 1;
                inflight -= 1;
                if Instant::now() < until {
                    let sqe = q.nvm(op, next(), 1, 0);
                    let d = (op == NVM_WRITE).then(|| data.clone());
                    q.submit(sqe, d, true, 4096).await;
                    inflight += 1;
                }
            }
            let name = if op == NVM_WRITE {
                "randwrite"
            } else {
                "randread"
            };
            println!(
                "4k {name} QD{DEPTH}, digests {}: {:.0} IOPS",
                if digests.header { "on" } else { "off" },
                done as f64 / secs as f64
            );
        }
    }
}
