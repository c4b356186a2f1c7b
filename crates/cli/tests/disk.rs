//! Goal: `basalt disk prepare` and `basalt disk ls` on real loop devices, through the binary:
//! what prepare prints and makes, what ls lists (table and --json), the exit code and the
//! message of a refusal, and what --force overrides.
//!
//! Needs root and `losetup` (util-linux): without them the test fails, it is not skipped.

// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[path = "../../store/tests/support/loop_device.rs"]
mod loop_device;

use loop_device::LoopDevice;

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
    assert_eq!(entry["osd_known"], false, "no --meta: the OSD is not known");
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
        line.contains(&store_id) && line.contains("64.0 MiB") && line.contains(" ? "),
        "{line}"
    );
    assert!(table.contains("give --meta URL"), "{table}");

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

/// A free TCP port on loopback (free when asked; the daemons bind it soon after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed on drop (also when the test fails).
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A one-member etcd on loopback, its data in `dir`.
fn start_etcd(dir: &Path) -> (Daemon, String) {
    let (client, peer) = (free_port(), free_port());
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = Command::new("etcd")
        .arg(format!("--data-dir={}", dir.join("etcd").display()))
        .arg(format!("--listen-client-urls={client_url}"))
        .arg(format!("--advertise-client-urls={client_url}"))
        .arg(format!("--listen-peer-urls={peer_url}"))
        .arg(format!("--initial-advertise-peer-urls={peer_url}"))
        .arg(format!("--initial-cluster=default={peer_url}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("this test needs etcd (Debian package etcd-server): {e}"));
    let etcd = Daemon(child);
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", client)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "etcd did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (etcd, format!("etcd://127.0.0.1:{client}"))
}

/// `basalt osd` on `device` with `data`; Ok(the serving line) once it serves, or Err(its
/// stderr) when it exits first.
fn start_osd(
    meta: &str,
    keyring: &Path,
    data: &Path,
    device: &Path,
) -> Result<(Daemon, String), String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(["osd", "--meta", meta, "--keyring"])
        .arg(keyring)
        .arg("--data")
        .arg(data)
        .arg("--device")
        .arg(device)
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--metrics-listen", "off", "--no-monitor"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = std::io::BufReader::new(stdout).lines();
    match lines.next() {
        Some(Ok(line)) => Ok((Daemon(child), line)),
        _ => {
            let out = child.wait_with_output().unwrap();
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

#[test]
fn an_osd_runs_on_its_prepared_device_and_refuses_another_store() {
    let dir = tempfile::tempdir().unwrap();
    let (_etcd, meta) = start_etcd(dir.path());
    let keyring = dir.path().join("keyring");
    let out = basalt(&[
        "cluster",
        "init",
        "--meta",
        &meta,
        "--keyring",
        keyring.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "cluster init: {}", stderr(&out));
    let (first, second, blank) = (
        LoopDevice::new(64 << 20, &[]),
        LoopDevice::new(64 << 20, &[]),
        LoopDevice::new(64 << 20, &[]),
    );
    for d in [&first, &second] {
        let out = basalt(&["disk", "prepare", &d.name()]);
        assert!(out.status.success(), "prepare: {}", stderr(&out));
    }

    let data = dir.path().join("osd");
    let (osd, line) = start_osd(&meta, &keyring, &data, &first.path).unwrap();
    assert!(
        line.starts_with("osd.0 serving on") && line.contains(&format!("store {}", first.name())),
        "{line}"
    );
    drop(osd);
    let record = std::fs::read_to_string(data.join("store.json")).unwrap();
    assert!(record.contains(&first.name()), "{record}");

    // `disk ls` names the OSD of a store from the OSDs' records, stopped or not.
    let out = basalt(&["--meta", &meta, "disk", "ls", "--json"]);
    assert!(out.status.success(), "ls: {}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let entry = |dev: &LoopDevice| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|d| d["device"] == dev.name())
            .unwrap_or_else(|| panic!("{} not in disk ls: {list}", dev.name()))
            .clone()
    };
    assert_eq!(
        (
            entry(&first)["osd"].clone(),
            entry(&first)["osd_known"].clone()
        ),
        (0.into(), true.into())
    );
    assert_eq!(
        (
            entry(&second)["osd"].clone(),
            entry(&second)["osd_known"].clone()
        ),
        (serde_json::Value::Null, true.into())
    );
    let out = basalt(&["--meta", &meta, "disk", "ls"]);
    let table = stdout(&out);
    let line = |dev: &LoopDevice| {
        table
            .lines()
            .find(|l| l.starts_with(&dev.name()))
            .unwrap_or_else(|| panic!("{} not in the table: {table}", dev.name()))
            .to_owned()
    };
    assert!(line(&first).contains(" osd.0 "), "{table}");
    assert!(line(&second).contains(" - "), "{table}");

    let err = start_osd(&meta, &keyring, &data, &second.path)
        .err()
        .expect("another store");
    assert!(
        err.contains("but ") && err.contains("belongs to the OSD of store"),
        "{err}"
    );

    let fresh = dir.path().join("osd-fresh");
    let err = start_osd(&meta, &keyring, &fresh, &blank.path)
        .err()
        .expect("no store");
    assert!(
        err.contains(&format!(
            "{0} holds no Basalt store; run `basalt disk prepare {0}` first",
            blank.name()
        )),
        "{err}"
    );
}
