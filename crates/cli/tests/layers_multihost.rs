//! Snapshots, clones and images on the multi-host cluster (3 hosts × 2 OSDs, etcd, a
//! `basalt nbd` gateway on its own host): an image imported with --meta, two VMs booted from
//! clones of it while an OSD holding their data is killed, a snapshot taken through the CLI
//! while fio writes through the gateway (another process, fenced by the OSDs), and a clone
//! of that snapshot reading exactly what it held.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use common::{assert_same_bytes, boot_guest, guest_image, require_tool, run, wait_timeout};
use multihost::{Fio, Layout, MultiHost};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Longest a guest may run (TCG boot, a short fio, a failover pause).
const VM_TIMEOUT: Duration = Duration::from_secs(300);

/// Where fio writes while the snapshot is taken, and how much (bytes).
const DURING_OFFSET: u64 = 220 << 20;
const DURING_BYTES: u64 = 32 << 20;
/// fio's block size there.
const FIO_BLOCK: u64 = 4096;

/// How many `FIO_BLOCK` blocks of `image[offset..offset + len]` hold fio's verify header
/// for their own position (magic 0xacca, the block's length, its offset): blocks fio wrote.
fn fio_blocks(image: &[u8], offset: u64, len: u64) -> u64 {
    let le_u64 = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap());
    (offset..offset + len)
        .step_by(FIO_BLOCK as usize)
        .filter(|&at| {
            let b = &image[at as usize..(at + FIO_BLOCK) as usize];
            b[..2] == [0xca, 0xac]
                && u32::from_le_bytes(b[4..8].try_into().unwrap()) as u64 == FIO_BLOCK
                && le_u64(&b[16..24]) == at
        })
        .count() as u64
}

fn copy_out(uri: &str, dest: &Path) -> Vec<u8> {
    let out = run(
        Command::new(require_tool("nbdcopy", "libnbd-bin"))
            .arg(uri)
            .arg(dest),
        Duration::from_secs(300),
    );
    common::assert_ok(&out, &format!("nbdcopy {uri}"));
    std::fs::read(dest).expect("read the copy")
}

#[test]
fn vms_boot_from_clones_through_an_osd_kill_and_snapshots_fence_other_gateways() {
    let guest = guest_image();
    let mh = MultiHost::start(Layout::default());
    let dir = tempfile::tempdir().expect("temp dir");

    // Import through this process's own gateway (--meta), then two O(1) clones.
    let out = mh.cli_ok(&[
        "image",
        "import",
        guest.join("disk.qcow2").to_str().unwrap(),
        "guest",
    ]);
    assert!(out.contains("imported image \"guest\""), "{out}");
    for vm in ["vm1", "vm2"] {
        mh.cli_ok(&["volume", "create", vm, "--from-image", "guest"]);
    }

    // Boot both; kill the primary of vm1's first object while they boot.
    let victim = mh.0.primary_of("vm1", 0).expect("primary of vm1");
    let started = Instant::now();
    let mut vms = Vec::new();
    for vm in ["vm1", "vm2"] {
        let console = dir.path().join(format!("{vm}.console"));
        vms.push((
            vm,
            boot_guest(&guest, &mh.uri(vm), vm, 2, &console),
            console,
        ));
    }
    std::thread::sleep(Duration::from_millis(1500));
    mh.osd(victim).proc.kill9().expect("kill -9 the primary");
    for (vm, mut child, console) in vms {
        let status = wait_timeout(&mut child, VM_TIMEOUT);
        let text = std::fs::read_to_string(&console).unwrap_or_default();
        if status.is_none() {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert!(status.is_some(), "{vm} did not finish:\n{text}");
        for line in [
            "basalt-guest: root image basalt-test-image-v1",
            "basalt-guest: fio ok",
            "basalt-guest: done",
        ] {
            assert!(text.contains(line), "{vm}: no {line:?}:\n{text}");
        }
    }
    eprintln!(
        "two guests booted through the loss of osd.{victim} in {:?}",
        started.elapsed()
    );

    // A snapshot from the CLI (its own process) while fio writes through the gateway: the
    // gateway's writes to the old head are refused by the OSDs and it follows the new head.
    let fio = Fio::new(
        &mh.uri("vm2"),
        dir.path(),
        "vm2-during",
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            &format!("--offset={DURING_OFFSET}"),
            &format!("--size={DURING_BYTES}"),
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
        ],
    );
    let child = fio.spawn();
    std::thread::sleep(Duration::from_millis(800));
    let out = mh.cli_ok(&["volume", "snapshot", "vm2@during"]);
    assert!(out.contains("took snapshot vm2@during"), "{out}");
    let out = multihost::wait_child(child, Duration::from_secs(300));
    fio.check(&out);

    // The snapshot's clone reads what the snapshot holds, and vm2's own data.
    mh.cli_ok(&["volume", "clone", "vm2@during", "vm3"]);
    let snap = copy_out(&mh.uri("vm2@during"), &dir.path().join("snap.raw"));
    // The snapshot was taken during fio's writes: it holds some of fio's blocks, not all
    // (fio writes each block of its region once, and verified every one at the end).
    let written = fio_blocks(&snap, DURING_OFFSET, DURING_BYTES);
    let blocks = DURING_BYTES / FIO_BLOCK;
    assert!(
        0 < written && written < blocks,
        "the snapshot holds {written} of fio's {blocks} blocks: it was not taken during the writes"
    );
    let clone = copy_out(&mh.uri("vm3"), &dir.path().join("vm3.raw"));
    assert_same_bytes(&clone, &snap, "the clone of vm2@during");
    let debugfs = run(
        Command::new(require_tool("debugfs", "e2fsprogs"))
            .args(["-R", "cat /vmdata"])
            .arg(dir.path().join("vm3.raw")),
        Duration::from_secs(60),
    );
    assert_eq!(String::from_utf8_lossy(&debugfs.stdout).trim(), "vm2");

    // Everything stays after the killed OSD returns and the cluster is clean again.
    mh.osd(victim).proc.restart().expect("restart the OSD");
    mh.wait_clean(Duration::from_secs(180));
    let again = copy_out(&mh.uri("vm3"), &dir.path().join("vm3-again.raw"));
    assert_same_bytes(&again, &snap, "the clone after recovery");
    let info = mh.cli_ok(&["volume", "info", "vm1"]);
    assert!(info.contains("parent:      image guest"), "{info}");
}
