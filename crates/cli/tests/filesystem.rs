//! A real filesystem on a Basalt volume: nbdfuse exposes the export as a file, losetup turns
//! it into a block device, and mkfs.ext4, mount, fsck.ext4 and a remount must all agree.
//!
//! They need FUSE, nbdfuse, loop devices and root; without one they fail, naming it.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// How long nbdfuse may take to write its pid file (it does once it serves).
const NBDFUSE_READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Fails the test, naming what is missing, unless this machine can attach a volume as a
/// block device and mount it: /dev/fuse, nbdfuse, loop devices, root.
fn require_block_stack() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need FUSE"
    );
    require_tool("nbdfuse", "nbdfuse");
    require_tool("losetup", "mount");
    assert!(
        Path::new("/dev/loop-control").exists(),
        "/dev/loop-control is missing: these tests need loop devices"
    );
    let uid = run(Command::new("id").arg("-u"), CLIENT_TIMEOUT);
    assert_eq!(
        String::from_utf8_lossy(&uid.stdout).trim(),
        "0",
        "not root: losetup and mount need root"
    );
}

/// The nbdfuse process serving `dir/disk`; unmounted and reaped on drop.
struct FuseGuard {
    dir: PathBuf,
    child: Option<Child>,
}

impl Drop for FuseGuard {
    fn drop(&mut self) {
        // Unmounting makes nbdfuse exit; fall back to killing it.
        let _ = Command::new("umount").arg(&self.dir).output();
        if let Some(mut child) = self.child.take() {
            if wait_timeout(&mut child, Duration::from_secs(10)).is_none() {
                let _ = Command::new("umount").arg("-l").arg(&self.dir).output();
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// A loop device attached to a file; detached on drop.
struct LoopGuard {
    dev: String,
}

impl Drop for LoopGuard {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).output();
    }
}

/// A mounted filesystem; unmounted on drop unless already unmounted.
struct MountGuard {
    dir: PathBuf,
    mounted: bool,
}

impl MountGuard {
    fn mount(dev: &str, dir: &Path) -> MountGuard {
        let out = run(Command::new("mount").arg(dev).arg(dir), CLIENT_TIMEOUT);
        assert_ok(&out, &format!("mount {dev} {}", dir.display()));
        MountGuard {
            dir: dir.to_path_buf(),
            mounted: true,
        }
    }

    fn umount(&mut self) {
        let out = run(Command::new("umount").arg(&self.dir), CLIENT_TIMEOUT);
        assert_ok(&out, &format!("umount {}", self.dir.display()));
        self.mounted = false;
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        let unmounted = || {
            Command::new("umount")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success())
        };
        if self.mounted && !unmounted() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Files written to the filesystem: (relative path, content).
fn files() -> Vec<(String, Vec<u8>)> {
    let mut v = vec![
        ("big.bin".to_string(), pseudo_random(1, 3 << 20)),
        ("odd.bin".to_string(), pseudo_random(2, 4097)),
        ("empty".to_string(), Vec::new()),
        (
            "dir/nested.txt".to_string(),
            b"hello from basalt\n".to_vec(),
        ),
    ];
    for i in 0..50 {
        v.push((
            format!("dir/many/{i}.bin"),
            pseudo_random(100 + i, 1000 + i as usize * 37),
        ));
    }
    v
}

/// The volume as a block device: nbdfuse serving `fuse_dir/disk`, and a loop device on it.
/// Dropped in reverse order: loop device first, then the FUSE mount.
struct Attached {
    dev: String,
    _loop: LoopGuard,
    _fuse: FuseGuard,
}

/// Attach export `uri` of `size_bytes` as a loop device through nbdfuse; no free loop
/// device fails the test.
fn attach(uri: &str, size_bytes: u64, work: &Path) -> Attached {
    attach_as(uri, size_bytes, work, false)
}

/// `attach`, read-only when `read_only` (nbdfuse -r, losetup -r).
fn attach_as(uri: &str, size_bytes: u64, work: &Path, read_only: bool) -> Attached {
    let nbdfuse = require_tool("nbdfuse", "nbdfuse");
    let losetup = require_tool("losetup", "mount");
    let fuse_dir = work.join("fuse");
    std::fs::create_dir_all(&fuse_dir).expect("create fuse dir");
    let pidfile = work.join("nbdfuse.pid");
    let _ = std::fs::remove_file(&pidfile);
    let disk = fuse_dir.join("disk");
    let mut cmd = Command::new(nbdfuse);
    if read_only {
        cmd.arg("-r");
    }
    let child = cmd
        .arg("-P")
        .arg(&pidfile)
        .arg(&disk)
        .arg(uri)
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("spawn nbdfuse");
    let mut fuse = FuseGuard {
        dir: fuse_dir.clone(),
        child: Some(child),
    };
    let deadline = Instant::now() + NBDFUSE_READY_TIMEOUT;
    while !pidfile.exists() {
        if let Some(status) = fuse
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!("nbdfuse exited early with {status}");
        }
        assert!(
            Instant::now() < deadline,
            "nbdfuse did not become ready within {NBDFUSE_READY_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let meta = std::fs::metadata(&disk).expect("nbdfuse disk file");
    assert_eq!(meta.len(), size_bytes, "size of the nbdfuse file");
    let mut cmd = Command::new(&losetup);
    if read_only {
        cmd.arg("-r");
    }
    let out = run(cmd.args(["-f", "--show"]).arg(&disk), CLIENT_TIMEOUT);
    assert_ok(&out, "losetup -f --show (a free loop device)");
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(dev.starts_with("/dev/loop"), "losetup printed {dev:?}");
    Attached {
        dev: dev.clone(),
        _loop: LoopGuard { dev },
        _fuse: fuse,
    }
}

fn fsck_clean(dev: &str) {
    let fsck = require_tool("fsck.ext4", "e2fsprogs");
    let out = run(
        Command::new(&fsck).args(["-f", "-n"]).arg(dev),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, "fsck.ext4 -fn (a clean filesystem exits 0)");
}

fn check_files(dev: &str, mnt: &Path, files: &[(String, Vec<u8>)]) {
    let mut m = MountGuard::mount(dev, mnt);
    for (rel, content) in files {
        let p = mnt.join(rel);
        let got = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        assert_same_bytes(&got, content, &format!("file {rel} after remount"));
    }
    m.umount();
}

/// mkfs.ext4 on a volume (through nbdfuse + a loop device), mount, write files, umount,
/// fsck.ext4 -fn reports it clean, a remount reads every file back intact, and so does a
/// fresh attachment after the cluster restarted.
#[test]
fn ext4_on_nbdfuse_loop_device() {
    require_block_stack();
    let mkfs = require_tool("mkfs.ext4", "e2fsprogs");
    require_tool("fsck.ext4", "e2fsprogs");
    require_tool("mount", "mount");
    require_tool("umount", "mount");

    let mut cluster = Cluster::start();
    let size_bytes: u64 = 128 << 20;
    cluster.volume_ok(&["create", "fs", "--size", "128M"]);
    let scratch = cluster.scratch();
    let mnt = scratch.join("mnt");
    std::fs::create_dir_all(&mnt).expect("create mount dir");
    let files = files();
    {
        let a = attach(&cluster.uri("fs"), size_bytes, &scratch);
        let out = run(
            Command::new(&mkfs).args(["-q", "-F"]).arg(&a.dev),
            CLIENT_TIMEOUT,
        );
        assert_ok(&out, "mkfs.ext4");
        let mut m = MountGuard::mount(&a.dev, &mnt);
        for (rel, content) in &files {
            let p = mnt.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir in the fs");
            std::fs::write(&p, content).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        }
        let out = run(&mut Command::new("sync"), CLIENT_TIMEOUT);
        assert_ok(&out, "sync");
        m.umount();
        fsck_clean(&a.dev);
        check_files(&a.dev, &mnt, &files);
    }
    // The ext4 superblock (at 1024) carries the magic 0xEF53, little-endian, at offset 56.
    qemu_io_ok(
        &cluster.uri("fs"),
        &["read -P 0x53 1080 1", "read -P 0xef 1081 1"],
    );

    // Everything detached: restart the cluster and attach afresh.
    cluster.stop();
    cluster.restart();
    let a = attach(&cluster.uri("fs"), size_bytes, &scratch);
    fsck_clean(&a.dev);
    check_files(&a.dev, &mnt, &files);
}

/// ext4 on a clone (read-write) while its parent's snapshot is mounted read-only on another
/// attachment: the clone's changes stay its own, both file systems check clean, and the
/// snapshot keeps reading exactly the files it was taken with.
#[test]
fn ext4_on_a_clone_while_its_snapshot_is_mounted_read_only() {
    require_block_stack();
    let mkfs = require_tool("mkfs.ext4", "e2fsprogs");
    let cluster = Cluster::start();
    let size_bytes: u64 = 128 << 20;
    cluster.volume_ok(&["create", "fs", "--size", "128M"]);
    let scratch = cluster.scratch();
    let files = files();
    let (snap_mnt, clone_mnt) = (scratch.join("snap-mnt"), scratch.join("clone-mnt"));
    std::fs::create_dir_all(&snap_mnt).expect("mkdir");
    std::fs::create_dir_all(&clone_mnt).expect("mkdir");
    {
        let a = attach(&cluster.uri("fs"), size_bytes, &scratch.join("orig"));
        assert_ok(
            &run(
                Command::new(&mkfs).args(["-q", "-F"]).arg(&a.dev),
                CLIENT_TIMEOUT,
            ),
            "mkfs.ext4",
        );
        let mut m = MountGuard::mount(&a.dev, &clone_mnt);
        for (rel, content) in &files {
            let p = clone_mnt.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir in the fs");
            std::fs::write(&p, content).expect("write a file");
        }
        m.umount();
    }
    cluster.volume_ok(&["snapshot", "fs@golden"]);
    cluster.volume_ok(&["clone", "fs@golden", "work"]);
    let snap = attach_as(
        &cluster.uri("fs@golden"),
        size_bytes,
        &scratch.join("snap"),
        true,
    );
    // Read-only: no journal replay (noload).
    let out = run(
        Command::new("mount")
            .args(["-o", "ro,noload"])
            .arg(&snap.dev)
            .arg(&snap_mnt),
        CLIENT_TIMEOUT,
    );
    assert_ok(&out, "mount the snapshot read-only");
    let mut snap_mount = MountGuard {
        dir: snap_mnt.clone(),
        mounted: true,
    };
    {
        let c = attach(&cluster.uri("work"), size_bytes, &scratch.join("clone"));
        let mut m = MountGuard::mount(&c.dev, &clone_mnt);
        std::fs::write(clone_mnt.join("clone-only.txt"), b"written in the clone\n")
            .expect("write in the clone");
        std::fs::remove_file(clone_mnt.join("big.bin")).expect("remove in the clone");
        std::fs::write(clone_mnt.join("odd.bin"), b"changed").expect("rewrite in the clone");
        assert_ok(&run(&mut Command::new("sync"), CLIENT_TIMEOUT), "sync");
        // Meanwhile the snapshot still reads every original file.
        for (rel, content) in &files {
            let got = std::fs::read(snap_mnt.join(rel)).expect("read from the snapshot");
            assert_same_bytes(&got, content, &format!("snapshot file {rel}"));
        }
        m.umount();
        fsck_clean(&c.dev);
        let mut m = MountGuard::mount(&c.dev, &clone_mnt);
        assert_eq!(
            std::fs::read(clone_mnt.join("clone-only.txt")).expect("clone file"),
            b"written in the clone\n"
        );
        assert!(!clone_mnt.join("big.bin").exists());
        m.umount();
    }
    snap_mount.umount();
    fsck_clean(&snap.dev);
    drop(snap);
    // The origin volume was never touched by either.
    let a = attach(&cluster.uri("fs"), size_bytes, &scratch.join("orig2"));
    check_files(&a.dev, &clone_mnt, &files);
}
