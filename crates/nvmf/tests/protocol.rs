//! Protocol tests of the NVMe/TCP target over loopback, driven by a small Rust initiator:
//! Connect, properties, Identify, the logs and features, I/O with in-capsule and R2T data,
//! many commands in flight completing out of order, the discovery controller, the
//! namespace-changed event, keep-alive expiry, and bad PDUs.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod initiator;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use basalt_nbd::{BlockDevice, DeviceError, ExportMap, Extent, MemDevice};
use basalt_nvmf::command::*;
use basalt_nvmf::pdu::{self, Digests, Pdu};
use basalt_nvmf::{volume_nqn, Target, TargetConfig, DISCOVERY_NQN};
use bytes::Bytes;
use initiator::{Ended, Initiator};

const MIB: u64 = 1 << 20;
const BLOCK: usize = 4096;

/// A memory device whose size can change under the target and whose reads can be slowed.
struct TestDevice {
    inner: MemDevice,
    size: AtomicU64,
    /// Reads at offset o wait (64 - o/4096) * this many ms (earlier blocks finish later).
    read_delay_ms: AtomicU64,
}

impl TestDevice {
    fn new(size: u64) -> Arc<Self> {
        Arc::new(Self {
            inner: MemDevice::new(64 * MIB),
            size: AtomicU64::new(size),
            read_delay_ms: AtomicU64::new(0),
        })
    }
}

#[async_trait]
impl BlockDevice for TestDevice {
    fn size(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    fn identity(&self) -> Option<u64> {
        Some(0x1234)
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError> {
        let ms = self.read_delay_ms.load(Ordering::Relaxed);
        if ms > 0 {
            let rank = 64u64.saturating_sub(offset / BLOCK as u64);
            tokio::time::sleep(Duration::from_millis(rank * ms)).await;
        }
        self.inner.read(offset, len).await
    }
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.inner.write(offset, data, fua).await
    }
    async fn flush(&self) -> Result<(), DeviceError> {
        self.inner.flush().await
    }
    async fn trim(&self, offset: u64, len: u32, fua: bool) -> Result<(), DeviceError> {
        self.inner.trim(offset, len, fua).await
    }
    async fn write_zeroes(&self, o: u64, l: u32, t: bool, f: bool) -> Result<(), DeviceError> {
        self.inner.write_zeroes(o, l, t, f).await
    }
    async fn block_status(&self, offset: u64, len: u32) -> Result<Vec<Extent>, DeviceError> {
        self.inner.block_status(offset, len).await
    }
}

/// A target serving `devices` on an ephemeral loopback port.
async fn start(
    devices: &[(&str, Arc<dyn BlockDevice>)],
    config: TargetConfig,
) -> (Arc<Target>, SocketAddr) {
    let map = Arc::new(ExportMap::new());
    for (name, dev) in devices {
        map.insert(*name, "", dev.clone());
    }
    let target = Target::with_config(map, config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(target.clone().serve_tcp(listener));
    (target, addr)
}

fn pattern(seed: u8, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|i| seed.wrapping_add((i / 7) as u8))
            .collect::<Vec<_>>(),
    )
}

/// Connect an I/O queue `qid` of controller `cntlid`.
async fn io_queue(
    addr: SocketAddr,
    subnqn: &str,
    cntlid: u16,
    qid: u16,
    digests: Digests,
) -> Initiator {
    let mut q = Initiator::connect(addr, digests).await;
    let cqe = q.fabrics_connect(qid, 127, subnqn, cntlid, 0).await;
    assert!(
        cqe.status.is_success(),
        "I/O queue {qid} connect: {:?}",
        cqe.status
    );
    q
}

/// Goal: the whole life of a volume controller as the Linux host drives it — Connect,
/// properties, Identify (controller, namespace, lists, descriptors), features, logs — then
/// Read/Write (in-capsule and R2T), Flush, FUA, Write Zeroes and Dataset Management reach
/// the device, with and without digests; wrong commands get NVMe errors, not a hang.
#[tokio::test]
async fn volume_controller_serves_admin_and_io_commands() {
    for digests in [
        Digests::default(),
        Digests {
            header: true,
            data: true,
        },
    ] {
        let mem = Arc::new(MemDevice::new(64 * MIB));
        let (_t, addr) = start(&[("vol0", mem.clone())], TargetConfig::default()).await;
        let nqn = volume_nqn("vol0");
        let mut a = Initiator::admin(addr, &nqn, digests, 5000).await;
        assert_eq!(a.property_get(0x08, false).await, 0x0001_0300, "VS");

        let (cqe, id) = a.admin_cmd(ADMIN_IDENTIFY, 0, &[(10, 1)], 4096).await;
        assert!(cqe.status.is_success());
        assert_eq!(id.len(), 4096);
        assert_eq!(u16::from_le_bytes([id[78], id[79]]), a.cntlid, "CNTLID");
        assert_eq!(&id[768..768 + nqn.len()], nqn.as_bytes());
        assert_eq!(id[77], 5, "MDTS 128 KiB");
        let (cqe, ns) = a.admin_cmd(ADMIN_IDENTIFY, 1, &[(10, 0)], 4096).await;
        assert!(cqe.status.is_success());
        assert_eq!(
            u64::from_le_bytes(ns[0..8].try_into().unwrap()),
            64 * MIB / 4096
        );
        let (_, list) = a.admin_cmd(ADMIN_IDENTIFY, 0, &[(10, 2)], 4096).await;
        assert_eq!(&list[0..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
        let (_, descs) = a.admin_cmd(ADMIN_IDENTIFY, 1, &[(10, 3)], 4096).await;
        assert_eq!((descs[0], descs[1]), (2, 16), "NGUID first");
        assert_eq!(
            &descs[4..20],
            &ns[104..120],
            "the NGUID matches Identify Namespace"
        );
        let (cqe, _) = a.admin_cmd(ADMIN_IDENTIFY, 7, &[(10, 0)], 4096).await;
        assert_eq!(cqe.status, Status::INVALID_NAMESPACE);
        let (cqe, _) = a.admin_cmd(ADMIN_IDENTIFY, 0, &[(10, 0x42)], 4096).await;
        assert_eq!(cqe.status, Status::INVALID_FIELD);

        // Number of queues: ask for 4, get 4 (0's based).
        let (cqe, _) = a
            .admin_cmd(ADMIN_SET_FEATURES, 0, &[(10, 0x07), (11, 3 | (3 << 16))], 0)
            .await;
        assert!(cqe.status.is_success());
        assert_eq!(cqe.result, 3 | (3 << 16));
        let (cqe, _) = a.admin_cmd(ADMIN_GET_FEATURES, 0, &[(10, 0x0f)], 0).await;
        assert_eq!(cqe.result, 5000, "KATO from Connect");
        let (cqe, _) = a.admin_cmd(ADMIN_GET_FEATURES, 0, &[(10, 0x80)], 0).await;
        assert_eq!(
            cqe.status,
            Status::INVALID_FIELD,
            "an unknown feature is refused"
        );
        let (cqe, smart) = a.get_log(0x02, 0xffff_ffff, 512).await;
        assert!(cqe.status.is_success());
        assert_eq!(smart[3], 100, "available spare");
        let (cqe, ana) = a.get_log(0x0c, 0xffff_ffff, 52).await;
        assert!(cqe.status.is_success());
        assert_eq!(
            (ana[16], ana[32], ana[48]),
            (1, 1, 1),
            "group 1 optimized, namespace 1"
        );
        assert_eq!(
            u32::from_le_bytes(ns[92..96].try_into().unwrap()),
            1,
            "ANAGRPID"
        );
        let (cqe, _) = a.get_log(0x42, 0, 512).await;
        assert_eq!(cqe.status, Status::INVALID_LOG_PAGE);
        let (cqe, _) = a.admin_cmd(ADMIN_KEEP_ALIVE, 0, &[], 0).await;
        assert!(cqe.status.is_success());
        let (cqe, _) = a.admin_cmd(0x80, 0, &[], 0).await;
        assert_eq!(
            cqe.status,
            Status::INVALID_OPCODE,
            "format NVM is not implemented"
        );

        let mut q = io_queue(addr, &nqn, a.cntlid, 1, digests).await;
        // In-capsule 4 KiB at block 0; R2T 128 KiB at block 16.
        let small = pattern(1, BLOCK);
        let sqe = q.nvm(NVM_WRITE, 0, 1, 0);
        assert!(q
            .run(sqe, Some(small.clone()), true, 0)
            .await
            .0
            .status
            .is_success());
        let big = pattern(2, 128 << 10);
        let sqe = q.nvm(NVM_WRITE, 16, 32, 0);
        assert!(q
            .run(sqe, Some(big.clone()), false, 0)
            .await
            .0
            .status
            .is_success());
        let sqe = q.nvm(NVM_READ, 0, 1, 0);
        let (cqe, got) = q.run(sqe, None, false, BLOCK as u32).await;
        assert!(cqe.status.is_success());
        assert_eq!(got, small);
        let sqe = q.nvm(NVM_READ, 16, 32, 0);
        assert_eq!(q.run(sqe, None, false, 128 << 10).await.1, big);
        assert_eq!(
            mem.read(16 * 4096, 128 << 10).await.unwrap(),
            big,
            "on the device"
        );

        // FUA and Flush reach the device's durability calls.
        let (fua, flushes) = (mem.fua_count(), mem.flush_count());
        let sqe = q.nvm(NVM_WRITE, 1, 1, 1 << 30);
        assert!(q
            .run(sqe, Some(pattern(3, BLOCK)), true, 0)
            .await
            .0
            .status
            .is_success());
        assert_eq!(
            mem.fua_count(),
            fua + 1,
            "a FUA write is a FUA write on the device"
        );
        let sqe = q.nvm(NVM_FLUSH, 0, 1, 0);
        assert!(q.run(sqe, None, false, 0).await.0.status.is_success());
        assert_eq!(mem.flush_count(), flushes + 1);

        // Write Zeroes over block 16, deallocate of blocks 17..49.
        let sqe = q.nvm(NVM_WRITE_ZEROES, 16, 1, 0);
        assert!(q.run(sqe, None, false, 0).await.0.status.is_success());
        let mut range = vec![0u8; 16];
        range[4..8].copy_from_slice(&32u32.to_le_bytes());
        range[8..16].copy_from_slice(&17u64.to_le_bytes());
        let mut sqe = q.nvm(NVM_DSM, 0, 1, 0);
        sqe.set_cdw(10, 0);
        sqe.set_cdw(11, 1 << 2);
        sqe.set_cdw(12, 0);
        assert!(q
            .run(sqe, Some(Bytes::from(range)), true, 0)
            .await
            .0
            .status
            .is_success());
        let sqe = q.nvm(NVM_READ, 16, 32, 0);
        let got = q.run(sqe, None, false, 128 << 10).await.1;
        assert!(
            got.iter().all(|b| *b == 0),
            "zeroed and deallocated blocks read as zeroes"
        );

        // Errors: past the end, wrong namespace, unknown opcode, length mismatch.
        let sqe = q.nvm(NVM_READ, 64 * MIB / 4096 - 1, 2, 0);
        assert_eq!(
            q.run(sqe, None, false, 2 * BLOCK as u32).await.0.status,
            Status::LBA_OUT_OF_RANGE
        );
        let mut sqe = q.nvm(NVM_READ, 0, 1, 0);
        sqe.set_nsid(2);
        assert_eq!(
            q.run(sqe, None, false, BLOCK as u32).await.0.status,
            Status::INVALID_NAMESPACE
        );
        let sqe = q.nvm(0x05, 0, 1, 0);
        assert_eq!(
            q.run(sqe, None, false, 0).await.0.status,
            Status::INVALID_OPCODE,
            "compare"
        );
        let sqe = q.nvm(NVM_READ, 0, 2, 0);
        assert_eq!(
            q.run(sqe, None, false, BLOCK as u32).await.0.status,
            Status::SGL_LENGTH_INVALID
        );

        // A second I/O queue works beside the first; queue 5 is beyond the 4 granted.
        let mut q2 = io_queue(addr, &nqn, a.cntlid, 2, digests).await;
        let sqe = q2.nvm(NVM_READ, 0, 1, 0);
        assert_eq!(q2.run(sqe, None, false, BLOCK as u32).await.1, small);
        let mut q5 = Initiator::connect(addr, digests).await;
        let cqe = q5.fabrics_connect(5, 127, &nqn, a.cntlid, 0).await;
        assert_eq!(cqe.status, Status::CONNECT_INVALID_PARAMETERS);
        assert_eq!(cqe.result, 42, "the qid field is named");
    }
}

/// Goal: many commands in flight on one queue complete out of order (a slow early read
/// does not hold back later ones) and each carries its own data.
#[tokio::test]
async fn many_commands_in_flight_complete_out_of_order() {
    let dev = TestDevice::new(32 * MIB);
    let (_t, addr) = start(&[("v", dev.clone())], TargetConfig::default()).await;
    let nqn = volume_nqn("v");
    let a = Initiator::admin(addr, &nqn, Digests::default(), 0).await;
    let mut q = io_queue(addr, &nqn, a.cntlid, 1, Digests::default()).await;
    const N: u64 = 64;
    for b in 0..N {
        let sqe = q.nvm(NVM_WRITE, b, 1, 0);
        q.submit(sqe, Some(pattern(b as u8, BLOCK)), b % 2 == 0, 0)
            .await;
    }
    for _ in 0..N {
        assert!(q.next_completion().await.0.status.is_success());
    }
    dev.read_delay_ms.store(3, Ordering::Relaxed);
    let mut by_cid = std::collections::HashMap::new();
    for b in 0..N {
        let sqe = q.nvm(NVM_READ, b, 1, 0);
        by_cid.insert(sqe.cid(), b);
        q.submit(sqe, None, false, BLOCK as u32).await;
    }
    let mut order = Vec::new();
    for _ in 0..N {
        let (cqe, data) = q.next_completion().await;
        assert!(cqe.status.is_success());
        let b = by_cid[&cqe.cid];
        assert_eq!(data, pattern(b as u8, BLOCK), "block {b}'s own data");
        order.push(b);
    }
    assert_ne!(
        order,
        (0..N).collect::<Vec<_>>(),
        "completions came out of order"
    );
    assert!(
        order[0] > order[N as usize - 1],
        "the slowest (first) read finished last-ish: {order:?}"
    );
}

/// Goal: the discovery controller lists one subsystem per volume at the address the host
/// reached, and refuses what a discovery controller has no business doing.
#[tokio::test]
async fn discovery_lists_every_volume() {
    let a_dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB));
    let b_dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB));
    let (_t, addr) = start(
        &[("alpha", a_dev), ("beta", b_dev)],
        TargetConfig::default(),
    )
    .await;
    let mut d = Initiator::admin(addr, DISCOVERY_NQN, Digests::default(), 0).await;
    let (_, id) = d.admin_cmd(ADMIN_IDENTIFY, 0, &[(10, 1)], 4096).await;
    assert_eq!(id[111], 2, "CNTRLTYPE discovery");
    let (cqe, log) = d.get_log(0x70, 0, 3 * 1024).await;
    assert!(cqe.status.is_success(), "{:?}", cqe.status);
    assert_eq!(
        u64::from_le_bytes(log[8..16].try_into().unwrap()),
        2,
        "two records"
    );
    for (i, name) in ["alpha", "beta"].iter().enumerate() {
        let e = &log[1024 * (i + 1)..1024 * (i + 2)];
        assert_eq!((e[0], e[1], e[2]), (3, 1, 2), "TCP, IPv4, NVMe subsystem");
        let nqn = volume_nqn(name);
        assert_eq!(&e[256..256 + nqn.len()], nqn.as_bytes());
        assert_eq!(&e[512..521], b"127.0.0.1");
        let port = addr.port().to_string();
        assert_eq!(&e[32..32 + port.len()], port.as_bytes());
    }
    let (cqe, _) = d.admin_cmd(ADMIN_IDENTIFY, 1, &[(10, 0)], 4096).await;
    assert_eq!(cqe.status, Status::INVALID_FIELD, "no namespaces here");
    let mut io = Initiator::connect(addr, Digests::default()).await;
    let cqe = io.fabrics_connect(1, 31, DISCOVERY_NQN, d.cntlid, 0).await;
    assert_eq!(
        cqe.status,
        Status::CONNECT_INVALID_PARAMETERS,
        "no I/O queues"
    );
    // Unknown subsystem, bad host NQN.
    let mut x = Initiator::connect(addr, Digests::default()).await;
    let cqe = x
        .fabrics_connect(0, 31, &volume_nqn("nope"), 0xffff, 0)
        .await;
    assert_eq!(
        (cqe.status, cqe.result),
        (Status::CONNECT_INVALID_PARAMETERS, 256 | (1 << 16))
    );
}

/// Goal: growing the volume raises a namespace-attribute-changed event on the held AER,
/// the changed namespace log names namespace 1 (once), and Identify shows the new size.
#[tokio::test]
async fn resize_raises_a_namespace_changed_event() {
    let dev = TestDevice::new(16 * MIB);
    let config = TargetConfig {
        size_poll: Duration::from_millis(20),
        ..TargetConfig::default()
    };
    let (_t, addr) = start(&[("v", dev.clone())], config).await;
    let mut a = Initiator::admin(addr, &volume_nqn("v"), Digests::default(), 0).await;
    let (cqe, _) = a
        .admin_cmd(ADMIN_SET_FEATURES, 0, &[(10, 0x0b), (11, 1 << 8)], 0)
        .await;
    assert!(cqe.status.is_success());
    let cid = a.cid();
    a.submit(Sqe::new(ADMIN_ASYNC_EVENT, cid), None, false, 0)
        .await;
    dev.size.store(48 * MIB, Ordering::Release);
    let (cqe, _) = a.next_completion().await;
    assert_eq!(cqe.cid, cid, "the held AER completes");
    assert_eq!(
        cqe.result, 0x0004_0002,
        "notice, namespace attribute changed, log 04h"
    );
    let (_, log) = a.get_log(0x04, 0xffff_ffff, 4096).await;
    assert_eq!(&log[0..8], &[1, 0, 0, 0, 0, 0, 0, 0]);
    let (_, log) = a.get_log(0x04, 0xffff_ffff, 4096).await;
    assert!(log.iter().all(|b| *b == 0), "reading the log cleared it");
    let (_, ns) = a.admin_cmd(ADMIN_IDENTIFY, 1, &[(10, 0)], 4096).await;
    assert_eq!(
        u64::from_le_bytes(ns[0..8].try_into().unwrap()),
        48 * MIB / 4096
    );
    // AERL: four held at most; the fifth is refused.
    for _ in 0..5 {
        let cid = a.cid();
        a.submit(Sqe::new(ADMIN_ASYNC_EVENT, cid), None, false, 0)
            .await;
    }
    let (cqe, _) = a.next_completion().await;
    assert_eq!(cqe.status, Status::AER_LIMIT);
}

/// Goal: an admin queue silent past twice its keep-alive timeout is closed by the target.
#[tokio::test]
async fn keep_alive_expiry_closes_the_admin_queue() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB));
    let (target, addr) = start(&[("v", dev)], TargetConfig::default()).await;
    let mut a = Initiator::admin(addr, &volume_nqn("v"), Digests::default(), 500).await;
    assert_eq!(target.controllers(), 1);
    let started = Instant::now();
    assert!(a.expect_end().await.is_none(), "closed without a TermReq");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(8),
        "{waited:?}"
    );
    assert_eq!(
        target.controllers(),
        0,
        "the controller went with its admin queue"
    );
}

/// Goal: malformed PDUs get a C2HTermReq naming the problem and a clean close, commands
/// before Connect and damaged data get NVMe errors, and the target keeps serving.
#[tokio::test]
async fn bad_pdus_get_a_term_req_or_an_error() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB));
    let (_t, addr) = start(&[("v", dev)], TargetConfig::default()).await;
    let nqn = volume_nqn("v");

    // First PDU not an ICReq.
    let mut c = Initiator::raw(addr).await;
    c.send_raw(&pdu::encode(
        &Pdu::CapsuleCmd {
            sqe: Sqe::new(0, 1),
            data: Bytes::new(),
        },
        Digests::default(),
        0,
    ))
    .await;
    let t = c.expect_end().await.expect("TermReq");
    assert_eq!((t.fes, t.fei), (pdu::FES_INVALID_HEADER_FIELD, 0));

    // ICReq with an unknown format version.
    let mut c = Initiator::raw(addr).await;
    let mut icreq = pdu::encode(
        &Pdu::IcReq(pdu::IcReq {
            pfv: 0,
            hpda: 0,
            digests: Digests::default(),
            maxr2t: 0,
        }),
        Digests::default(),
        0,
    );
    icreq[8] = 7;
    c.send_raw(&icreq).await;
    let t = c.expect_end().await.expect("TermReq");
    assert_eq!((t.fes, t.fei), (pdu::FES_UNSUPPORTED_PARAMETER, 8));

    // Unknown PDU type; wrong header length; a huge plen; H2CData nobody asked for.
    let cases: Vec<(Vec<u8>, u16, u32)> = vec![
        (
            vec![0x42, 0, 24, 0, 24, 0, 0, 0],
            pdu::FES_INVALID_HEADER_FIELD,
            0,
        ),
        (
            vec![0x04, 0, 30, 0, 72, 0, 0, 0],
            pdu::FES_INVALID_HEADER_FIELD,
            2,
        ),
        (
            vec![0x06, 0, 24, 0, 0xff, 0xff, 0xff, 0x7f],
            pdu::FES_DATA_LIMIT_EXCEEDED,
            0,
        ),
        (
            pdu::encode(
                &Pdu::H2cData(pdu::DataPdu {
                    cccid: 1,
                    ttag: 9,
                    offset: 0,
                    last: true,
                    success: false,
                    data: Bytes::from_static(&[1; 8]),
                }),
                Digests::default(),
                0,
            )
            .to_vec(),
            pdu::FES_INVALID_HEADER_FIELD,
            10,
        ),
    ];
    for (bytes, fes, fei) in cases {
        let mut c = Initiator::connect(addr, Digests::default()).await;
        c.send_raw(&bytes).await;
        let t = c.expect_end().await.expect("TermReq");
        assert_eq!((t.fes, t.fei), (fes, fei), "for {:?}", &bytes[..8]);
        assert_eq!(&t.quote[..8], &bytes[..8], "the TermReq quotes the header");
    }

    // A command before Connect: Command Sequence Error, the connection stays.
    let mut c = Initiator::connect(addr, Digests::default()).await;
    let (cqe, _) = c.admin_cmd(ADMIN_IDENTIFY, 0, &[(10, 1)], 4096).await;
    assert_eq!(cqe.status, Status::COMMAND_SEQUENCE);

    // A damaged data digest: Transient Transport Error, the queue goes on.
    let d = Digests {
        header: true,
        data: true,
    };
    let a = Initiator::admin(addr, &nqn, d, 0).await;
    let mut q = io_queue(addr, &nqn, a.cntlid, 1, d).await;
    let mut sqe = q.nvm(NVM_WRITE, 0, 1, 0);
    sqe.set_sgl(SGL_DATA_OFFSET, BLOCK as u32);
    let mut wire = pdu::encode(
        &Pdu::CapsuleCmd {
            sqe,
            data: pattern(9, BLOCK),
        },
        d,
        0,
    );
    let n = wire.len();
    wire[n - 8] ^= 0xff;
    q.send_raw(&wire).await;
    let (cqe, _) = q.next_completion().await;
    assert_eq!(
        (cqe.cid, cqe.status),
        (sqe.cid(), Status::TRANSIENT_TRANSPORT)
    );
    let sqe = q.nvm(NVM_READ, 0, 1, 0);
    let (cqe, data) = q.run(sqe, None, false, BLOCK as u32).await;
    assert!(cqe.status.is_success());
    assert!(
        data.iter().all(|b| *b == 0),
        "the damaged write did not land"
    );

    // Data beyond the R2T: TermReq, data out of range.
    let sqe = q.nvm(NVM_WRITE, 0, 1, 0);
    let mut s2 = sqe;
    s2.set_sgl(SGL_TRANSPORT, BLOCK as u32);
    q.send(&Pdu::CapsuleCmd {
        sqe: s2,
        data: Bytes::new(),
    })
    .await;
    let r2t = match q.read_pdu().await {
        Ok(Pdu::R2t(r)) => r,
        other => panic!("expected R2T: {other:?}"),
    };
    q.send(&Pdu::H2cData(pdu::DataPdu {
        cccid: r2t.cccid,
        ttag: r2t.ttag,
        offset: 0,
        last: true,
        success: false,
        data: pattern(1, 2 * BLOCK),
    }))
    .await;
    let t = q.expect_end().await.expect("TermReq");
    assert_eq!(t.fes, pdu::FES_DATA_OUT_OF_RANGE);
    let _ = Ended::Closed;

    // Still serving.
    let mut a2 = Initiator::admin(addr, &nqn, Digests::default(), 0).await;
    let (cqe, _) = a2.admin_cmd(ADMIN_KEEP_ALIVE, 0, &[], 0).await;
    assert!(cqe.status.is_success());
}

/// Goal: Connect's data may also come by R2T (a host whose in-capsule size is smaller than
/// the 1 KiB of Connect data sends it so), and the queue then works.
#[tokio::test]
async fn connect_data_by_r2t() {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(MIB));
    let (_t, addr) = start(&[("v", dev)], TargetConfig::default()).await;
    let nqn = volume_nqn("v");
    let mut a = Initiator::connect(addr, Digests::default()).await;
    let cid = a.cid();
    let mut sqe = Sqe::new(FABRICS, cid);
    sqe.set_byte(4, FCTYPE_CONNECT);
    sqe.set_cdw(11, 31);
    let mut data = vec![0u8; 1024];
    data[16..18].copy_from_slice(&0xffffu16.to_le_bytes());
    data[256..256 + nqn.len()].copy_from_slice(nqn.as_bytes());
    data[512..512 + initiator::HOSTNQN.len()].copy_from_slice(initiator::HOSTNQN.as_bytes());
    let (cqe, _) = a.run(sqe, Some(Bytes::from(data)), false, 0).await;
    assert!(cqe.status.is_success(), "{:?}", cqe.status);
    let (cqe, id) = a.admin_cmd(ADMIN_IDENTIFY, 0, &[(10, 1)], 4096).await;
    assert!(cqe.status.is_success());
    assert_eq!(&id[768..768 + nqn.len()], nqn.as_bytes());
}
