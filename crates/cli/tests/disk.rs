//! Goal: `basalt disk prepare` and `basalt disk ls` on real loop devices, through the binary:
//! what prepare prints and makes, what ls lists (table and --json), the exit code and the
//! message of a refusal, and what --force overrides.
//!
//! Needs root and `losetup` (util-linux): without them the test fails, it is not skipped.

// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// A loop device over a sparse file, zeros except `init` at its offsets; detached on drop.
struct LoopDevice {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl LoopDevice {
    fn new(size_bytes: u64, init: &[(u64, &[u8])]) -> LoopDevice {
        let dir = tempfile::tempdir().unwrap();
        let backing = dir.path().join("backing.img");
        let file = std::fs::File::create(&backing).unwrap();
        file.set_len(size_bytes).unwrap();
        for (offset, bytes) in init {
            std::os::unix::fs::FileExt::write_all_at(&file, bytes, *offset).unwrap();
        }
        drop(file);
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&backing)
            .output()
            .unwrap_or_else(|e| panic!("this test needs losetup (util-linux) and root: {e}"));
        assert!(
            out.status.success(),
            "losetup failed (this test needs root): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        LoopDevice { path, _dir: dir }
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}

fn basalt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn disk_prepare_makes_a_store_that_disk_ls_lists() {
    let dev = LoopDevice::new(64 << 20, &[]);
    let out = basalt(&["disk", "prepare", &dev.name()]);
    assert!(out.status.success(), "prepare failed: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!(
            "prepared {}: a Basalt store of 64.0 MiB (store id ",
            dev.name()
        )),
        "{text}"
    );
    assert!(
        text.contains("object size 128.0 KiB, WAL 8.0 MiB"),
        "{text}"
    );
    assert!(
        text.contains(&format!("basalt osd --device {}", dev.name())),
        "{text}"
    );

    let out = basalt(&["disk", "ls", "--json"]);
    assert!(out.status.success(), "ls failed: {}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = list
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == dev.name())
        .unwrap_or_else(|| panic!("{} not in disk ls: {list}", dev.name()));
    assert_eq!(entry["size_bytes"], 64 << 20);
    assert_eq!(entry["object_size_bytes"], 128 << 10);
    assert_eq!(entry["wal_bytes"], 8 << 20);
    assert_eq!(entry["osd"], serde_json::Value::Null);
    let store_id = entry["store_id"].as_str().unwrap().to_owned();
    assert!(
        text.contains(&store_id),
        "prepare printed another id: {text}"
    );

    let out = basalt(&["disk", "ls"]);
    let table = stdout(&out);
    let line = table
        .lines()
        .find(|l| l.starts_with(&dev.name()))
        .unwrap_or_else(|| panic!("{} not in the table: {table}", dev.name()));
    assert!(
        line.contains(&store_id) && line.contains("64.0 MiB"),
        "{line}"
    );

    // Prepared already: refused, exit 1, even with --force.
    let out = basalt(&["disk", "prepare", &dev.name(), "--force"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "{} already holds a Basalt store (id {store_id})",
            dev.name()
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn disk_prepare_refuses_a_partition_table_unless_forced() {
    let dev = LoopDevice::new(64 << 20, &[(510, &[0x55, 0xaa])]);
    let out = basalt(&["disk", "prepare", &dev.name(), "--object-size", "64K"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!(
            "{} holds an MBR partition table (or a boot sector); its partitions' data would be \
             lost (--force overrides)",
            dev.name()
        )),
        "{}",
        stderr(&out)
    );
    let out = basalt(&[
        "disk",
        "prepare",
        &dev.name(),
        "--object-size",
        "64K",
        "--force",
    ]);
    assert!(out.status.success(), "forced prepare: {}", stderr(&out));
    assert!(stdout(&out).contains("object size 64.0 KiB"));
}

#[test]
fn disk_prepare_help_says_what_it_checks_and_what_force_overrides() {
    let out = basalt(&["disk", "prepare", "--help"]);
    let help = stdout(&out);
    for needle in [
        "is mounted",
        "O_EXCL",
        "partition table",
        "ext2/3/4, XFS, btrfs",
        "--force overrides only the partition-table and signature checks",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}: {help}");
    }
}
