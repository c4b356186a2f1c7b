//! Draining and removing OSDs and hosts on a multi-host cluster (4 hosts in network
//! namespaces, 2 OSDs each, etcd, an NBD gateway): `basalt osd drain/rm` and `basalt host
//! drain/rm` under fio write+verify load, through the real CLI and daemons.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{Fio, Layout, MultiHost};
use std::time::Duration;

/// Bound on one fio run.
const FIO_TIMEOUT: Duration = Duration::from_secs(300);
/// Bound on a drain (passed as --wait-timeout) and on the cluster turning clean.
const DRAIN_SECS: u64 = 240;
/// Bound on an OSD being seen down after it was killed (lease TTL 3 s).
const DOWN_TIMEOUT: Duration = Duration::from_secs(60);
/// Loader regions (MiB each) written and verified.
const REGIONS: u64 = 4;
const REGION_MIB: u64 = 8;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("basalt-rm-")
        .tempdir()
        .expect("scratch directory")
}

/// `basalt ARGS` expected to fail with exit code `code`; returns its stderr.
fn cli_fails(mh: &MultiHost, args: &[&str], code: i32) -> String {
    let out = mh.0.cli(args).expect("run basalt");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "basalt {} should exit {code}:\n{}{stderr}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}

/// `basalt ARGS` (a removal) once the OSDs it names are down: retried while it is refused
/// because a killed OSD's liveness lease has not expired yet (TTL 3 s; bounded by 40
/// tries, 500 ms apart). Returns its output.
fn once_lease_expired(mh: &MultiHost, args: &[&str]) -> std::process::Output {
    // Bound: 40 tries.
    for _ in 0..40 {
        let out = mh.0.cli(args).expect("run basalt");
        if out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("is up") {
            return out;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("basalt {}: still refused as up after 20 s", args.join(" "));
}

/// [`once_lease_expired`], which must succeed; returns stdout.
fn rm_once_lease_expired(mh: &MultiHost, args: &[&str]) -> String {
    let out = once_lease_expired(mh, args);
    assert!(
        out.status.success(),
        "basalt {} failed: {}",
        args.join(" "),
        common::text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ids `osd ls --json` lists.
fn osd_ids(mh: &MultiHost) -> Vec<u64> {
    let out = mh.cli_ok(&["osd", "ls", "--json"]);
    let v = common::parse_json(out.as_bytes(), "osd ls --json");
    v.as_array()
        .expect("an array")
        .iter()
        .map(|o| o["id"].as_u64().expect("an id"))
        .collect()
}

/// Kill OSD `id` and wait until the cluster sees it down.
fn kill_and_wait_down(mh: &MultiHost, id: u32) {
    mh.osd(id).proc.kill9().expect("kill the OSD");
    mh.wait_status(&format!("osd.{id} down"), DOWN_TIMEOUT, |st| {
        st["osds"].as_array().is_some_and(|osds| {
            osds.iter()
                .any(|o| o["id"].as_u64() == Some(id as u64) && o["up"].as_bool() == Some(false))
        })
    });
}

/// Wait until the map (status) has none of `ids` and every PG is active+clean; then the
/// text status must say HEALTH_OK.
fn wait_gone_and_healthy(mh: &MultiHost, ids: &[u32]) {
    mh.wait_status(
        "the removed OSDs out of the map, every PG active+clean",
        Duration::from_secs(DRAIN_SECS),
        |st| {
            let osds = st["osds"].as_array().cloned().unwrap_or_default();
            let gone = osds
                .iter()
                .all(|o| !ids.iter().any(|id| o["id"].as_u64() == Some(*id as u64)));
            let total = st["pgs_total"].as_u64().unwrap_or(0);
            gone && total > 0 && st["pgs_active_clean"].as_u64() == Some(total)
        },
    );
    let text = mh.cli_ok(&["status", "--interval", "0"]);
    assert!(text.contains("health: HEALTH_OK"), "status:\n{text}");
    let listed = osd_ids(mh);
    for id in ids {
        assert!(
            !listed.contains(&(*id as u64)),
            "osd ls still lists osd.{id}: {listed:?}"
        );
    }
}

/// Check every region the loader wrote.
fn verify_regions(mh: &MultiHost, dir: &std::path::Path) {
    for r in 0..REGIONS {
        let job = [
            "--rw=randwrite".to_string(),
            "--bs=4k".into(),
            format!("--size={REGION_MIB}m"),
            format!("--offset={}m", r * REGION_MIB),
            "--iodepth=8".into(),
            "--verify=crc32c".into(),
            "--verify_fatal=1".into(),
            "--do_verify=1".into(),
            "--verify_only=1".into(),
        ];
        let job: Vec<&str> = job.iter().map(String::as_str).collect();
        Fio::new(&mh.uri("vol"), dir, &format!("verify{r}"), &job).run_ok(FIO_TIMEOUT);
    }
}

/// Goal: under fio write+verify load, `osd rm` refuses an up OSD and one a PG still needs
/// (changing nothing); `osd drain` empties an OSD, `osd rm` removes it (gone from `osd ls`
/// and the map, HEALTH_OK, every byte verifies), and the OSD started again with its old
/// data directory is refused; then `host drain` + `host rm` do the same for a whole host.
#[test]
fn drain_and_remove_osds_and_a_host_under_load() {
    let dir = scratch();
    let mh = MultiHost::start(Layout {
        hosts: 4,
        pgs: 16,
        ..Layout::default()
    });
    mh.cli_ok(&["volume", "create", "vol", "--size", "64M"]);
    let loader =
        multihost::Loader::start(mh.uri("vol"), dir.path().to_path_buf(), REGIONS, REGION_MIB);
    std::thread::sleep(Duration::from_secs(2));

    // Unknown id and unknown host: not found (3).
    let err = cli_fails(&mh, &["osd", "rm", "42"], 3);
    assert!(err.contains("osd.42 does not exist"), "{err}");
    let err = cli_fails(&mh, &["host", "drain", "nohost"], 3);
    assert!(err.contains("no OSD is on host \"nohost\""), "{err}");

    // An up OSD: refused (4), nothing changed.
    let err = cli_fails(&mh, &["osd", "rm", "0"], 4);
    assert!(err.contains("osd.0 is up"), "{err}");
    assert!(osd_ids(&mh).contains(&0));

    // Drain osd.0 under load, then stop and remove it.
    let out = mh.cli_ok(&[
        "osd",
        "drain",
        "0",
        "--wait-timeout",
        &DRAIN_SECS.to_string(),
    ]);
    assert!(out.contains("drained osd.0"), "{out}");
    kill_and_wait_down(&mh, 0);
    let out = rm_once_lease_expired(&mh, &["osd", "rm", "0", "--json"]);
    let v = common::parse_json(out.as_bytes(), "osd rm --json");
    assert_eq!(v["removed"], serde_json::json!([0]), "{v}");
    assert_eq!(v["forced"], serde_json::json!(false), "{v}");
    wait_gone_and_healthy(&mh, &[0]);
    let err = cli_fails(&mh, &["osd", "rm", "0"], 3);
    assert!(err.contains("removed already"), "{err}");

    // Started again with its old data directory (and --id 0): refused, not re-registered.
    let o = mh.osd(0);
    o.proc.restart().expect("restart the removed OSD");
    let status = o
        .proc
        .wait(Duration::from_secs(60))
        .expect("the removed OSD exits");
    assert!(!status.success(), "the removed OSD ran: {status}");
    let log = o.proc.current_log();
    assert!(log.contains("osd.0 was removed from the cluster"), "{log}");
    assert!(!osd_ids(&mh).contains(&0), "osd.0 re-registered");

    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs ran during the drain and removal");
    verify_regions(&mh, dir.path());

    // A PG that still needs an OSD: a one-replica pool's only copy. Its OSD stopped,
    // `osd rm` is refused naming the PG, and changes nothing.
    mh.cli_ok(&[
        "pool",
        "create",
        "single",
        "--size",
        "1",
        "--min-size",
        "1",
        "--pgs",
        "1",
    ]);
    let placed = mh.wait_status(
        "pg of pool single recorded",
        Duration::from_secs(60),
        |st| {
            st["pgs"].as_array().is_some_and(|pgs| {
                pgs.iter().any(|p| {
                    p["pg"].as_str().is_some_and(|n| n.ends_with(".0"))
                        && p["acting"].as_array().is_some_and(|a| a.len() == 1)
                        && p["state"] == "active+clean"
                        && p["interval"].as_u64() > Some(0)
                })
            }) && st["pgs_active_clean"] == st["pgs_total"]
        },
    );
    let pools = common::parse_json(mh.cli_ok(&["pool", "ls", "--json"]).as_bytes(), "pool ls");
    let single = pools
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "single")
        .expect("pool single")["id"]
        .as_u64()
        .unwrap();
    let pg = format!("{single}.0");
    let holder = placed["pgs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pg"] == pg.as_str())
        .expect("pg of single")["acting"][0]
        .as_u64()
        .unwrap() as u32;
    kill_and_wait_down(&mh, holder);
    let out = once_lease_expired(&mh, &["osd", "rm", &holder.to_string()]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!(
            "pg {pg} (osd.{holder} holds its only complete copy)"
        )),
        "{err}"
    );
    assert!(
        osd_ids(&mh).contains(&(holder as u64)),
        "the refused rm removed it"
    );
    mh.osd(holder).proc.restart().expect("restart the holder");
    mh.osd(holder)
        .proc
        .wait_for_line("serving on", multihost::DAEMON_START)
        .expect("the holder is back");
    mh.cli_ok(&["pool", "rm", "single"]);
    mh.wait_clean(Duration::from_secs(DRAIN_SECS));

    // A whole host under load: drain, stop its OSDs, remove.
    let loader =
        multihost::Loader::start(mh.uri("vol"), dir.path().to_path_buf(), REGIONS, REGION_MIB);
    let host = mh.hosts[3].name.clone();
    let ids: Vec<u32> = mh
        .osds
        .iter()
        .filter(|o| o.host == 3)
        .map(|o| o.id)
        .collect();
    let err = cli_fails(&mh, &["host", "rm", &host], 4);
    assert!(err.contains("is up"), "{err}");
    let out = mh.cli_ok(&[
        "host",
        "drain",
        &host,
        "--wait-timeout",
        &DRAIN_SECS.to_string(),
    ]);
    assert!(out.contains(&format!("drained host {host}")), "{out}");
    for id in &ids {
        kill_and_wait_down(&mh, *id);
    }
    rm_once_lease_expired(&mh, &["host", "rm", &host]);
    wait_gone_and_healthy(&mh, &ids);
    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs ran during the host drain and removal");
    verify_regions(&mh, dir.path());
}
