//! NVMe/TCP end to end: the Linux kernel's own initiator, in a QEMU guest, attaches a
//! volume of `basalt up --nvmf-listen` on the host (10.0.2.2 through QEMU user networking):
//! it connects the discovery controller, then the volume with header and data digests,
//! writes a pattern and reads it back, trims, runs fio with verify, sees the namespace
//! grow when the host resizes the volume, and disconnects. The data is then checked from
//! the host through NBD. The guest's /init is scripts/guest-nvmf-init.sh.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a guest may run (TCG: ~80 s alone: a verify run, 8 fio runs of 3 s).
const VM_TIMEOUT: Duration = Duration::from_secs(300);
const GIB: u64 = 1 << 30;
const MIB: usize = 1 << 20;

/// The NVMe/TCP address from `basalt up`'s banner.
fn nvmf_addr(cluster: &Cluster) -> SocketAddr {
    let out = cluster.stdout_text();
    let line = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("NVMe/TCP:"))
        .unwrap_or_else(|| panic!("no NVMe/TCP line in the banner:\n{out}"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

/// Boot the NVMe/TCP guest against the target's `port` (and the NBD server's `nbd_port`,
/// for the IOPS comparison); the guest image rides along as /dev/vda (read-write
/// snapshot: fio runs from it).
fn boot_nvmf_guest(
    guest: &Path,
    (port, nbd_port): (u16, u16),
    vol: &str,
    fio_s: u32,
    grow: u64,
    console: &Path,
) -> Child {
    require_tool("qemu-system-x86_64", "qemu-system-x86");
    Command::new("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-m",
            "512",
            "-smp",
            "1",
            "-nographic",
            "-no-reboot",
        ])
        .arg("-kernel")
        .arg(guest.join("vmlinux"))
        .arg("-initrd")
        .arg(guest.join("nvmf-initrd.cpio"))
        .arg("-append")
        .arg(format!(
            "console=ttyS0 quiet panic=-1 basalt.port={port} basalt.vol={vol} \
             basalt.fio={fio_s} basalt.grow={grow} basalt.nbd={nbd_port}"
        ))
        .args([
            "-netdev",
            "user,id=n0",
            "-device",
            "virtio-net-pci,netdev=n0,romfile=",
        ])
        .arg("-drive")
        .arg(format!(
            "file={},format=qcow2,if=virtio,snapshot=on",
            guest.join("disk.qcow2").display()
        ))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(console).expect("console file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start qemu")
}

/// Goal: a Linux kernel attaches a Basalt volume over NVMe/TCP and everything it writes is
/// in the volume (checked through NBD); trim, fio verify and an online resize work.
#[test]
fn linux_initiator_attaches_a_volume_over_nvme_tcp() {
    let guest = guest_image();
    let cluster = Cluster::start_with(&["--nvmf-listen", "127.0.0.1:0"]);
    let addr = nvmf_addr(&cluster);
    let console = cluster.scratch().join("nvmf.console");
    let started = Instant::now();
    let ports = (addr.port(), cluster.nbd_addr.port());
    let mut vm = boot_nvmf_guest(&guest, ports, "vol0", 3, 2 * GIB, &console);
    let deadline = started + VM_TIMEOUT;
    let read_console = || std::fs::read_to_string(&console).unwrap_or_default();
    // The guest says when it waits for the resize. Loop bound: VM_TIMEOUT.
    loop {
        let text = read_console();
        if text.contains("basalt-guest: waiting for size") {
            break;
        }
        let exited = vm.try_wait().unwrap().is_some();
        if exited || Instant::now() > deadline || text.contains("FAILED") {
            let _ = vm.kill();
            let _ = vm.wait();
            panic!(
                "the guest did not reach the resize step:\n{}",
                read_console()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = cluster.volume_ok(&["resize", "vol0", "2G"]);
    assert!(out.contains("resized"), "{out}");
    let status = wait_timeout(&mut vm, deadline.saturating_duration_since(Instant::now()));
    if status.is_none() {
        let _ = vm.kill();
        let _ = vm.wait();
    }
    let text = read_console();
    assert!(
        status.is_some(),
        "the guest did not power off within {VM_TIMEOUT:?}:\n{text}"
    );
    assert!(!text.contains("FAILED"), "{text}");
    for line in [
        "basalt-guest: discovery nqn.2014-08.org.nvmexpress.discovery model Basalt discovery",
        "basalt-guest: connected nvme0n1 tcp Basalt volume",
        "size 1073741824 lbs 4096",
        "basalt-guest: pattern ok",
        "basalt-guest: trim ok",
        "basalt-guest: fio verify ok",
        "basalt-guest: grew to 2147483648",
        "basalt-guest: disconnected",
        "basalt-guest: done",
    ] {
        assert!(text.contains(line), "no {line:?} on the console:\n{text}");
    }
    // The guest ran 4k QD16 fio over NVMe/TCP and over its kernel NBD client to the same
    // volume, alternating (TCG guests are CPU-bound: a sanity figure, not a benchmark).
    for rw in ["randwrite", "randread"] {
        let sum = |proto: &str| -> f64 {
            let key = format!("basalt-guest: fio {proto} {rw} iops=");
            let v: Vec<f64> = text
                .lines()
                .filter_map(|l| l.trim().strip_prefix(key.as_str()))
                .map(|n| n.trim().parse::<f64>().unwrap())
                .collect();
            assert_eq!(v.len(), 2, "two {proto} {rw} rounds:\n{text}");
            assert!(v.iter().all(|x| *x > 0.0), "{proto} {rw} made progress");
            v.iter().sum()
        };
        let (nvmf, nbd) = (sum("nvmf"), sum("nbd"));
        eprintln!(
            "guest 4k QD16 {rw}: NVMe/TCP {:.0} IOPS, kernel NBD {:.0} IOPS, ratio {:.2}",
            nvmf / 2.0,
            nbd / 2.0,
            nvmf / nbd
        );
    }
    eprintln!("NVMe/TCP guest run: {:?}", started.elapsed());
    assert!(
        cluster.wait_for_stderr("namespace size changed", Duration::from_secs(10)),
        "the target saw the resize"
    );

    // From the host, through NBD: 0xa5, then the guest's random bytes (their hash), and
    // the discarded MiB at 16 MiB reads as zeroes.
    let uri = cluster.uri("vol0");
    assert_eq!(nbd_size(&uri), 2 * GIB, "the volume grew");
    let bytes = read_export_prefix(&uri, 17, &cluster.scratch().join("prefix.raw"));
    assert!(
        bytes[..4 * MIB].iter().all(|b| *b == 0xa5),
        "the 0xa5 pattern"
    );
    let hash = hex::encode(Sha256::digest(&bytes[4 * MIB..8 * MIB]));
    let want = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("basalt-guest: pattern ok sha256 "))
        .unwrap()
        .trim();
    assert_eq!(hash, want, "the guest's random 4 MiB, byte for byte");
    assert!(
        bytes[16 * MIB..17 * MIB].iter().all(|b| *b == 0),
        "the trimmed MiB"
    );
}
