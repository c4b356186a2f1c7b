//! NVMe/TCP end to end: the Linux kernel's own initiator, in a QEMU guest, attaches a
//! volume of `basalt up --nvmf-listen` on the host (10.0.2.2 through QEMU user networking):
//! it connects the discovery controller (and nvme-cli reads the discovery log), then the
//! volume with header and data digests,
//! writes a pattern and reads it back, trims, runs fio with verify over two paths (kernel
//! native multipath, both ANA optimized) of which one is removed mid-run, sees the
//! namespace grow when the host resizes the volume, and disconnects. The data is then checked from
//! the host through NBD. The guest's /init is scripts/guest-nvmf-init.sh.
//!
//! Multipath: on the multi-host cluster (etcd, 3 hosts × 2 OSDs in network namespaces), two
//! `basalt nvmf` gateways on their own hosts serve the same volume; the guest connects one
//! path to each (ANA optimized on both), and the first gateway is killed (SIGKILL) while
//! fio writes and verifies through the kernel's native multipath: I/O continues on the
//! second and the data reads back through NBD.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use basalt_testcluster::ProcessSpec;
use common::*;
use multihost::{basalt_bin, Layout, MultiHost, DAEMON_START};
use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// Longest a guest may run (TCG: ~80 s alone: a verify run, 8 fio runs of 3 s).
const VM_TIMEOUT: Duration = Duration::from_secs(300);
const GIB: u64 = 1 << 30;
const MIB: usize = 1 << 20;

/// The NVMe/TCP address from `basalt up`'s ready file.
fn nvmf_addr(cluster: &Cluster) -> SocketAddr {
    cluster
        .nvmf_addr
        .expect("the ready file names the NVMe/TCP target (--nvmf-listen)")
}

/// Boot the NVMe/TCP guest with `params` on its kernel command line (see
/// scripts/guest-nvmf-init.sh); the guest image rides along as /dev/vda (read-write
/// snapshot: fio runs from it).
fn boot_nvmf_guest(guest: &Path, params: &str, console: &Path) -> Child {
    require_tool("qemu-system-x86_64", "qemu-system-x86");
    basalt_bench::guest::nvmf_command(guest, params)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(console).expect("console file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("start qemu")
}

/// Wait (bounded by `deadline`) until the guest prints `line`; panic with its console if it
/// fails, exits or runs out of time first.
fn wait_for_console(vm: &mut Child, console: &Path, line: &str, deadline: Instant) {
    // Loop bound: the deadline.
    loop {
        let text = std::fs::read_to_string(console).unwrap_or_default();
        if text.contains(line) {
            return;
        }
        let exited = vm.try_wait().unwrap().is_some();
        if exited || Instant::now() > deadline || text.contains("FAILED") {
            let _ = vm.kill();
            let _ = vm.wait();
            panic!(
                "the guest did not print {line:?}:\n{}",
                std::fs::read_to_string(console).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Wait for the guest to power off (bounded by `deadline`); its console.
fn finish(vm: &mut Child, console: &Path, deadline: Instant) -> String {
    let status = wait_timeout(vm, deadline.saturating_duration_since(Instant::now()));
    if status.is_none() {
        let _ = vm.kill();
        let _ = vm.wait();
    }
    let text = std::fs::read_to_string(console).unwrap_or_default();
    assert!(
        status.is_some(),
        "the guest did not power off in time:\n{text}"
    );
    assert!(!text.contains("FAILED"), "{text}");
    text
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
    // The IOPS comparison with the kernel NBD client (`basalt.nbd=`) is the bench's `nvmf`
    // section, which the bench smoke test runs: not repeated here.
    // A volume only one host NQN may attach (the guest tries another first).
    cluster.volume_ok(&["create", "guarded", "--size", "16M"]);
    let allowed = "nqn.2014-08.org.nvmexpress:uuid:basalt-guest-allowed";
    let out = cluster.volume_ok(&["allow", "guarded", allowed]);
    assert!(out.contains(allowed), "{out}");
    let params = format!(
        "basalt.port={} basalt.vol=vol0 basalt.fio=3 basalt.grow={} basalt.paths=2 \
         basalt.guarded=guarded",
        addr.port(),
        2 * GIB,
    );
    let mut vm = boot_nvmf_guest(&guest, &params, &console);
    let deadline = started + VM_TIMEOUT;
    wait_for_console(
        &mut vm,
        &console,
        "basalt-guest: waiting for size",
        deadline,
    );
    let out = cluster.volume_ok(&["resize", "vol0", "2G"]);
    assert!(out.contains("resized"), "{out}");
    let text = finish(&mut vm, &console, deadline);
    for line in [
        "basalt-guest: discovery nqn.2014-08.org.nvmexpress.discovery model Basalt discovery",
        "basalt-guest: guarded refused nqn.2014-08.org.nvmexpress:uuid:basalt-guest-denied",
        "basalt-guest: guarded allowed nqn.2014-08.org.nvmexpress:uuid:basalt-guest-allowed",
        "basalt-guest: connected nvme0n1 tcp Basalt volume",
        "size 1073741824 lbs 4096",
        "basalt-guest: pattern ok",
        "basalt-guest: trim ok",
        // The discovery log lists every volume, guarded or not.
        "basalt-guest: nvme discover lists nqn.2026-01.io.basalt:guarded nqn.2026-01.io.basalt:vol0",
        // The kernel's own account of the refusal (Connect Invalid Host).
        "Connect for subsystem nqn.2026-01.io.basalt:guarded is not allowed",
        "basalt-guest: paths 2 ana optimized optimized",
        "basalt-guest: removed a path mid-fio",
        "basalt-guest: fio verify ok",
        "basalt-guest: grew to 2147483648",
        "basalt-guest: disconnected",
        "basalt-guest: done",
    ] {
        assert!(text.contains(line), "no {line:?} on the console:\n{text}");
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

/// Goal: a kernel host attached to a volume through two gateways survives the loss of one
/// mid-fio (native multipath fails over; fio verify passes), and the data is in the volume.
#[test]
fn multipath_survives_a_gateway_killed_mid_fio() {
    let guest = guest_image();
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&["volume", "create", "mp", "--size", "1G"]);
    let mut gateways = Vec::new();
    for name in ["gw1", "gw2"] {
        let host = mh.net.add_host(name).expect("add a gateway host");
        assert!(
            !host.ip.is_loopback(),
            "the guest reaches gateways on the test bridge: this test needs network namespaces"
        );
        let listen = format!("{}:4420", host.ip);
        let spec = ProcessSpec::new(basalt_bin())
            .env("BASALT_KEYRING", &mh.keyring)
            .args(["nvmf", "--meta", &mh.meta_url, "--listen", &listen]);
        let proc = mh.net.spawn(&host, spec).expect("start basalt nvmf");
        proc.wait_for_line("NVMe/TCP gateway serving", DAEMON_START)
            .unwrap_or_else(|e| panic!("{name} did not start: {e:#}\n{}", proc.log()));
        gateways.push((host, proc));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let console = dir.path().join("mp.console");
    let params = format!(
        "basalt.port=4420 basalt.vol=mp basalt.fio=3 basalt.paths=2 basalt.addr={} basalt.addr2={}",
        gateways[0].0.ip, gateways[1].0.ip
    );
    let started = Instant::now();
    let deadline = started + VM_TIMEOUT;
    let mut vm = boot_nvmf_guest(&guest, &params, &console);
    wait_for_console(
        &mut vm,
        &console,
        "basalt-guest: fio running on two gateways",
        deadline,
    );
    std::thread::sleep(Duration::from_secs(1));
    gateways[0].1.kill9().expect("kill the first gateway");
    let text = finish(&mut vm, &console, deadline);
    for line in [
        "basalt-guest: connected nvme0n1 tcp Basalt volume",
        "basalt-guest: pattern ok",
        "basalt-guest: nvme discover lists nqn.2026-01.io.basalt:mp",
        "basalt-guest: paths 2 ana optimized optimized",
        "basalt-guest: fio verify ok",
        "basalt-guest: done",
    ] {
        assert!(text.contains(line), "no {line:?} on the console:\n{text}");
    }
    eprintln!(
        "multipath guest run with a gateway killed: {:?}",
        started.elapsed()
    );
    let bytes = read_export_prefix(&mh.uri("mp"), 4, &dir.path().join("prefix.raw"));
    assert!(
        bytes.iter().all(|b| *b == 0xa5),
        "the pattern, read through NBD"
    );
}
