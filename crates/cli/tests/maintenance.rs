//! Maintenance on a 3-host cluster in network namespaces (docs/operations.md): with the
//! `noout` flag an OSD can stay down past the out timer without its data moving; without
//! it, the same OSD is marked out and its data re-replicated.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{Layout, MultiHost};
use std::time::{Duration, Instant};

/// Seconds a down OSD stays in before it is marked out, in this test's cluster.
const OUT_AFTER_SECS: u64 = 3;

/// The OSD `id` of a status report.
fn osd(st: &serde_json::Value, id: u32) -> serde_json::Value {
    st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"].as_u64() == Some(id as u64))
        .cloned()
        .unwrap_or_else(|| panic!("osd.{id} not in the status: {st}"))
}

/// Objects the OSDs other than `except` pushed to others since they started (recovery).
fn pushed_by_others(st: &serde_json::Value, except: u32) -> u64 {
    st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["id"].as_u64() != Some(except as u64))
        .map(|o| o["stats"]["pushed_objects"].as_u64().unwrap_or(0))
        .sum()
}

fn checks(st: &serde_json::Value) -> Vec<String> {
    st["checks"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| c["code"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Goal: `basalt cluster set noout` lets an OSD stay down well past the out timer without
/// being marked out, and no object is pushed anywhere meanwhile nor when it returns (the
/// volume was not written while it was down); `status` warns NOOUT while the flag is set.
/// Without the flag, the same OSD down as long is marked out (the test's contrast: the
/// timer does run in this cluster).
#[test]
fn noout_keeps_a_down_osd_in_and_its_data_in_place() {
    let mh = MultiHost::start(Layout {
        out_after_secs: OUT_AFTER_SECS,
        ..Layout::default()
    });
    mh.cli_ok(&["volume", "create", "vol", "--size", "64M"]);
    common::qemu_io_ok(&mh.uri("vol"), &["write -P 0x3c 0 16M"]);
    let victim = mh.osds[0].id;
    let before = mh.wait_clean(Duration::from_secs(120));
    let pushed_before = pushed_by_others(&before, victim);

    mh.cli_ok(&["cluster", "set", "noout"]);
    let st = mh.status();
    assert!(
        checks(&st).contains(&"NOOUT".to_string()),
        "{:?}",
        checks(&st)
    );
    mh.osd(victim).proc.kill9().unwrap();
    mh.wait_status("the OSD is down", Duration::from_secs(30), |st| {
        osd(st, victim)["up"] == false
    });
    // Three times the out timer, polled: it must stay in throughout.
    let until = Instant::now() + Duration::from_secs(3 * OUT_AFTER_SECS);
    while Instant::now() < until {
        let st = mh.status();
        assert_eq!(osd(&st, victim)["is_in"], true, "marked out despite noout");
        std::thread::sleep(Duration::from_millis(500));
    }
    let p = &mh.osd(victim).proc;
    p.restart().unwrap();
    p.wait_for_line("serving on", multihost::DAEMON_START)
        .expect("OSD back");
    let after = mh.wait_clean(Duration::from_secs(120));
    assert_eq!(
        pushed_by_others(&after, victim),
        pushed_before,
        "objects were pushed although no data needed to move"
    );
    mh.cli_ok(&["cluster", "unset", "noout"]);
    assert!(!checks(&mh.status()).contains(&"NOOUT".to_string()));

    // The contrast: without the flag the out timer marks it out.
    mh.osd(victim).proc.kill9().unwrap();
    mh.wait_status(
        "the OSD is marked out by the timer",
        Duration::from_secs(30 + OUT_AFTER_SECS),
        |st| osd(st, victim)["is_in"] == false,
    );
    let p = &mh.osd(victim).proc;
    p.restart().unwrap();
    p.wait_for_line("serving on", multihost::DAEMON_START)
        .expect("OSD back");
    mh.wait_clean(Duration::from_secs(180));
    common::qemu_io_ok(&mh.uri("vol"), &["read -P 0x3c 0 16M"]);
}

/// Stop every Basalt daemon of the cluster (the NBD gateway, then the OSDs), cleanly.
fn stop_all(mh: &MultiHost) {
    if let Some(g) = &mh.gateway {
        g.terminate(Duration::from_secs(20)).unwrap();
    }
    for o in &mh.osds {
        o.proc.terminate(Duration::from_secs(30)).unwrap();
    }
}

/// Start every OSD and the gateway again, waiting until each serves.
fn start_all(mh: &MultiHost) {
    for o in &mh.osds {
        o.proc.restart().unwrap();
    }
    for o in &mh.osds {
        o.proc
            .wait_for_line("serving on", multihost::DAEMON_START)
            .unwrap_or_else(|e| panic!("osd.{} back: {e:#}\n{}", o.id, o.proc.log()));
    }
    let g = mh.gateway.as_ref().unwrap();
    g.restart().unwrap();
    g.wait_for_line("NBD gateway serving", multihost::DAEMON_START)
        .unwrap();
}

/// `etcdctl` (etcd-client) with `args`, which must succeed.
fn etcdctl(args: &[&str]) -> String {
    let tool = common::require_tool("etcdctl", "etcd-client");
    let out = common::run(
        std::process::Command::new(tool)
            .args(args)
            .env("ETCDCTL_API", "3"),
        Duration::from_secs(60),
    );
    common::assert_ok(&out, &format!("etcdctl {}", args.join(" ")));
    common::text(&out)
}

/// The metadata is lost and restored from `snapshot` as docs/operations.md says: etcd
/// stopped, its data directory replaced by `etcdctl snapshot restore`, etcd started again.
fn restore_etcd(mh: &MultiHost, snapshot: &std::path::Path) {
    let etcd = &mh.etcd;
    etcd.proc().kill9().unwrap();
    let data = etcd.data_dir().to_path_buf();
    std::fs::remove_dir_all(&data).unwrap();
    let name = format!("basalt-{}", mh.etcd_host.name);
    let peer = format!("http://{}:2380", mh.etcd_host.ip);
    etcdctl(&[
        "snapshot",
        "restore",
        snapshot.to_str().unwrap(),
        "--name",
        &name,
        "--data-dir",
        data.to_str().unwrap(),
        "--initial-cluster",
        &format!("{name}={peer}"),
        "--initial-advertise-peer-urls",
        &peer,
    ]);
    etcd.restart().unwrap();
}

/// Goal: etcd backed up with every Basalt daemon stopped restores a working cluster after
/// the metadata is lost (data written before the backup reads back; new writes work),
/// following docs/operations.md; and that same backup, stale once the cluster ran on
/// (new maps, new PG intervals), is refused by the OSDs: each exits naming both map epochs
/// and the procedure rather than serve from PG records that may name stale copies.
#[test]
fn etcd_backup_taken_stopped_restores_and_a_stale_one_is_refused() {
    let dir = tempfile::Builder::new()
        .prefix("basalt-etcdbackup-")
        .tempdir()
        .unwrap();
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&["volume", "create", "vol", "--size", "64M"]);
    common::qemu_io_ok(&mh.uri("vol"), &["write -P 0x5a 0 16M"]);
    mh.wait_clean(Duration::from_secs(120));

    stop_all(&mh);
    let snapshot = dir.path().join("basalt-etcd.db");
    let endpoint = mh.etcd.endpoint();
    etcdctl(&[
        "--endpoints",
        &endpoint,
        "snapshot",
        "save",
        snapshot.to_str().unwrap(),
    ]);
    restore_etcd(&mh, &snapshot);
    start_all(&mh);
    mh.wait_clean(Duration::from_secs(180));
    common::qemu_io_ok(&mh.uri("vol"), &["read -P 0x5a 0 16M"]);
    common::qemu_io_ok(&mh.uri("vol"), &["write -P 0x6b 16M 16M"]);
    mh.wait_clean(Duration::from_secs(120));

    // The cluster ran on since the backup: restoring it now would go back in time.
    stop_all(&mh);
    restore_etcd(&mh, &snapshot);
    let o = &mh.osds[0];
    o.proc.restart().unwrap();
    let deadline = Instant::now() + multihost::DAEMON_START;
    while o.proc.is_running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = o.proc.exit_status();
    assert!(
        status.is_some_and(|s| !s.success()),
        "osd.{} started on a stale metadata backup ({status:?}):\n{}",
        o.id,
        o.proc.log()
    );
    let log = o.proc.log();
    assert!(
        log.contains(&format!("is older than osd.{} has seen", o.id))
            && log.contains("Backing up etcd"),
        "{log}"
    );
}
