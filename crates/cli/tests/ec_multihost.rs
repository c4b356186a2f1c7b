//! Erasure-coded pools on a multi-host cluster (hosts in network namespaces, etcd, `basalt
//! osd` processes, an NBD gateway): the failure scenarios of issue 3 on 2+1 and 4+2 pools,
//! with every volume verified afterwards against fio's crc32c verify headers.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{wait_child, Fio, Layout, MultiHost};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Bound on one fio run in these tests.
const FIO_TIMEOUT: Duration = Duration::from_secs(300);

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("basalt-ec-mh-")
        .tempdir()
        .expect("scratch directory")
}

/// fio writing `size` MiB from `offset` MiB with blocks of 4k..=128k (mostly partial
/// stripes) and crc32c verify headers.
fn write_job(offset_mib: u64, size_mib: u64, verify: bool) -> Vec<String> {
    vec![
        "--rw=randwrite".into(),
        "--bsrange=4k-128k".into(),
        "--randseed=42".into(),
        format!("--offset={offset_mib}m"),
        format!("--size={size_mib}m"),
        "--iodepth=8".into(),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        format!("--do_verify={}", u8::from(verify)),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(|s| s.as_str()).collect()
}

/// Check what [`write_job`] wrote there (no writes).
fn verify(mh: &MultiHost, dir: &std::path::Path, name: &str, offset_mib: u64, size_mib: u64) {
    let mut job = write_job(offset_mib, size_mib, true);
    job.push("--verify_only=1".into());
    Fio::new(&mh.uri("vol"), dir, name, &strs(&job)).run_ok(FIO_TIMEOUT);
    no_lost_chunks(mh);
}

/// No OSD found a chunk missing or stale at a position its PG counted current: the read
/// still answers right (it decodes), so only the log tells that peering or recovery let a
/// position go unrebuilt.
fn no_lost_chunks(mh: &MultiHost) {
    for o in &mh.osds {
        let log = o.proc.log();
        let lost: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("a position counted current lacks"))
            .take(5)
            .collect();
        assert!(lost.is_empty(), "osd.{}: {lost:#?}", o.id);
    }
}

/// Check the four 8 MiB regions a [`multihost::Loader`] wrote (4k blocks, verify headers).
fn verify_loader_regions(mh: &MultiHost, dir: &std::path::Path) {
    for r in 0..4u64 {
        let job = vec![
            "--rw=randwrite".to_string(),
            "--bs=4k".into(),
            "--iodepth=8".into(),
            format!("--offset={}m", r * 8),
            "--size=8m".into(),
            "--verify=crc32c".into(),
            "--verify_fatal=1".into(),
            "--do_verify=1".into(),
            "--verify_only=1".into(),
        ];
        Fio::new(&mh.uri("vol"), dir, &format!("verify{r}"), &strs(&job)).run_ok(FIO_TIMEOUT);
    }
    no_lost_chunks(mh);
}

fn ec_layout(code: &str, min_size: u32, domain: &str) -> Layout {
    Layout {
        ec: Some((code.into(), min_size, domain.into())),
        ..Layout::default()
    }
}

/// Scenario a on a 2+1 pool (min_size 3, failure domain host, 3 hosts × 2 OSDs): kill -9
/// the primary of a busy PG under verified partial-stripe writes. I/O pauses until the OSD
/// is marked out and its positions move to the other OSD of its host, which is rebuilt
/// from the two chunks left; no error reaches fio and everything verifies. When the OSD
/// returns, its positions move back, the cluster is clean, and the data verifies again.
#[test]
fn ec_kill_primary_under_write_load() {
    let dir = scratch();
    let mh = MultiHost::start(Layout {
        out_after_secs: 4,
        ..ec_layout("2+1", 3, "host")
    });
    mh.cli_ok(&["volume", "create", "vol", "--size", "256M"]);
    let primary = mh.locate("vol", 0)["primary"].as_u64().unwrap() as u32;
    let size_mib = 48;
    let fio = Fio::new(
        &mh.uri("vol"),
        dir.path(),
        "a",
        &strs(&write_job(0, size_mib, true)),
    );
    let child = fio.spawn();
    std::thread::sleep(Duration::from_secs(2));
    let killed_at = Instant::now();
    mh.osd(primary).proc.kill9().expect("kill the primary");
    let out = wait_child(child, FIO_TIMEOUT);
    let v = fio.check(&out);
    assert_eq!(
        v["jobs"][0]["write"]["io_bytes"].as_u64(),
        Some(size_mib * MIB),
        "all written"
    );
    eprintln!("fio finished {:?} after the kill", killed_at.elapsed());
    mh.wait_clean(Duration::from_secs(120));
    verify(&mh, dir.path(), "a-degraded", 0, size_mib);
    let p = &mh.osd(primary).proc;
    p.restart().expect("restart the OSD");
    p.wait_for_line("serving on", multihost::DAEMON_START)
        .expect("OSD back");
    mh.wait_clean(Duration::from_secs(120));
    verify(&mh, dir.path(), "a-verify", 0, size_mib);
}

/// Kill M OSDs at once on a 4+2 pool (failure domain osd, min_size 4, six OSDs on three
/// hosts): both OSDs of one host die together (a host failure). Reads decode from the four
/// chunks left, writes go on, and when the host's OSDs return they are rebuilt; all data
/// verifies throughout.
#[test]
fn ec_4_2_survives_two_osds_lost_at_once() {
    let dir = scratch();
    let mh = MultiHost::start(ec_layout("4+2", 4, "osd"));
    mh.cli_ok(&["volume", "create", "vol", "--size", "256M"]);
    let mut job = write_job(0, 32, true);
    job.push("--end_fsync=1".into());
    Fio::new(&mh.uri("vol"), dir.path(), "m1", &strs(&job)).run_ok(FIO_TIMEOUT);
    let host0: Vec<u32> = mh
        .osds
        .iter()
        .filter(|o| o.host == 0)
        .map(|o| o.id)
        .collect();
    assert_eq!(host0.len(), 2);
    for &id in &host0 {
        mh.osd(id).proc.kill9().expect("kill an OSD");
    }
    mh.wait_status("the host's OSDs down", Duration::from_secs(60), |st| {
        st["osds"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["up"].as_bool() == Some(false))
            .count()
            == 2
    });
    verify(&mh, dir.path(), "m1-degraded", 0, 32);
    let mut job = write_job(64, 32, true);
    job.push("--end_fsync=1".into());
    Fio::new(&mh.uri("vol"), dir.path(), "m2", &strs(&job)).run_ok(FIO_TIMEOUT);
    for &id in &host0 {
        mh.osd(id).proc.restart().expect("restart an OSD");
    }
    for &id in &host0 {
        mh.osd(id)
            .proc
            .wait_for_line("serving on", multihost::DAEMON_START)
            .expect("OSD back");
    }
    mh.wait_clean(Duration::from_secs(120));
    verify(&mh, dir.path(), "m1-verify", 0, 32);
    verify(&mh, dir.path(), "m2-verify", 64, 32);
}

/// Power cut on a 2+1 pool: write and flush, kill -9 every OSD at once, restart them:
/// everything flushed verifies and the cluster becomes clean.
#[test]
fn ec_power_cut_keeps_flushed_writes() {
    let dir = scratch();
    let mh = MultiHost::start(ec_layout("2+1", 3, "host"));
    mh.cli_ok(&["volume", "create", "vol", "--size", "128M"]);
    let mut job = write_job(0, 32, false);
    job.push("--end_fsync=1".into());
    Fio::new(&mh.uri("vol"), dir.path(), "g", &strs(&job)).run_ok(FIO_TIMEOUT);
    for o in &mh.osds {
        o.proc.kill9().expect("kill an OSD");
    }
    for o in &mh.osds {
        o.proc.restart().expect("restart an OSD");
    }
    for o in &mh.osds {
        o.proc
            .wait_for_line("serving on", multihost::DAEMON_START)
            .expect("OSD back");
    }
    mh.wait_clean(Duration::from_secs(120));
    verify(&mh, dir.path(), "g-verify", 0, 32);
}

/// Rolling restarts on a 2+1 pool: kill -9 and restart every OSD in turn under a verified
/// write load; every fio job succeeds and verifies, and all data verifies at the end.
#[test]
fn ec_restart_every_osd_in_turn_under_load() {
    let dir = scratch();
    let mh = MultiHost::start(ec_layout("2+1", 3, "host"));
    mh.cli_ok(&["volume", "create", "vol", "--size", "128M"]);
    let loader = multihost::Loader::start(mh.uri("vol"), dir.path().to_path_buf(), 4, 8);
    for o in &mh.osds {
        std::thread::sleep(Duration::from_secs(1));
        o.proc.kill9().expect("kill an OSD");
        std::thread::sleep(Duration::from_millis(500));
        o.proc.restart().expect("restart it");
        o.proc
            .wait_for_line("serving on", multihost::DAEMON_START)
            .expect("OSD back");
        mh.wait_clean(Duration::from_secs(120));
    }
    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs ran during the restarts");
    mh.wait_clean(Duration::from_secs(60));
    verify_loader_regions(&mh, dir.path());
}

/// Host out on a 2+1 pool: an OSD taken out for good (still running) has its positions
/// moved to the other OSD of its host, which is rebuilt from the chunks left (the out OSD
/// among the sources); the out OSD then drops its chunks, is killed, and everything still
/// verifies with the cluster clean.
#[test]
fn ec_osd_out_is_rebuilt_elsewhere() {
    let dir = scratch();
    let mh = MultiHost::start(ec_layout("2+1", 3, "host"));
    mh.cli_ok(&["volume", "create", "vol", "--size", "128M"]);
    let mut job = write_job(0, 32, false);
    job.push("--end_fsync=1".into());
    Fio::new(&mh.uri("vol"), dir.path(), "d", &strs(&job)).run_ok(FIO_TIMEOUT);
    let victim = mh.locate("vol", 0)["primary"].as_u64().unwrap() as u32;
    mh.mark_out(victim);
    let st = mh.wait_clean(Duration::from_secs(180));
    for p in st["pgs"].as_array().unwrap() {
        let acting = p["acting"].as_array().unwrap();
        assert_eq!(acting.len(), 3, "PG at full width: {p}");
        assert!(
            !acting.contains(&serde_json::json!(victim)),
            "out OSD still serves {p}"
        );
    }
    mh.wait_status("the out OSD holds nothing", Duration::from_secs(90), |st| {
        st["osds"].as_array().unwrap().iter().any(|o| {
            o["id"].as_u64() == Some(victim as u64) && o["stats"]["objects"].as_u64() == Some(0)
        })
    });
    mh.osd(victim).proc.kill9().expect("kill the out OSD");
    mh.wait_clean(Duration::from_secs(60));
    verify(&mh, dir.path(), "d-verify", 0, 32);
}

/// Partition on a 2+1 pool with min_size 2 (so I/O goes on with one position cut off):
/// the host of a primary is cut off from everyone for 20 s under a verified write load,
/// then healed; every fio job succeeds and verifies, the cut-off OSDs rejoin, their stale
/// chunks are rebuilt, and all data verifies.
#[test]
fn ec_partition_primary_host_then_heal() {
    let dir = scratch();
    let mh = MultiHost::start(ec_layout("2+1", 2, "host"));
    mh.cli_ok(&["volume", "create", "vol", "--size", "128M"]);
    let primary = mh.locate("vol", 0)["primary"].as_u64().unwrap() as u32;
    let loader = multihost::Loader::start(mh.uri("vol"), dir.path().to_path_buf(), 4, 8);
    std::thread::sleep(Duration::from_secs(2));
    let host = mh.hosts[mh.osd(primary).host].clone();
    mh.net
        .partition_all(&host)
        .expect("partition the primary's host");
    std::thread::sleep(Duration::from_secs(20));
    mh.net.heal(&host).expect("heal");
    let st = mh.wait_clean(Duration::from_secs(120));
    assert!(
        st["osds"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["up"].as_bool() == Some(true)),
        "every OSD rejoined: {st}"
    );
    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs ran across the partition");
    mh.wait_clean(Duration::from_secs(60));
    verify_loader_regions(&mh, dir.path());
}

/// Full cluster on a 2+1 pool: writes get ENOSPC through NBD, no daemon crashes, what was
/// written before verifies, and removing a volume frees its chunks for new writes.
#[test]
fn ec_full_cluster_gives_enospc_and_frees_on_delete() {
    let dir = scratch();
    let mh = MultiHost::start(Layout {
        osd_capacity: "64M".into(),
        ..ec_layout("2+1", 3, "host")
    });
    mh.cli_ok(&["volume", "create", "keep", "--size", "16M"]);
    mh.cli_ok(&["volume", "create", "fill", "--size", "1G"]);
    let mut job = write_job(0, 16, false);
    job.push("--end_fsync=1".into());
    Fio::new(&mh.uri("keep"), dir.path(), "h-keep", &strs(&job)).run_ok(FIO_TIMEOUT);
    let fill = Fio::new(
        &mh.uri("fill"),
        dir.path(),
        "h-fill",
        &["--rw=write", "--bs=1m", "--size=1g", "--iodepth=4"],
    );
    let out = common::run(
        std::process::Command::new(common::require_tool("fio", "fio"))
            .args(&fill.args)
            .current_dir(dir.path()),
        FIO_TIMEOUT,
    );
    let all = format!(
        "{}\n{}",
        common::text(&out),
        std::fs::read_to_string(&fill.json_path).unwrap_or_default()
    );
    assert!(!out.status.success(), "filling 1 GiB must fail:\n{all}");
    assert!(
        all.contains("No space left on device")
            || all.contains("error=28")
            || all.contains("\"error\" : 28"),
        "the failure is ENOSPC:\n{all}"
    );
    for o in &mh.osds {
        assert!(o.proc.is_running(), "osd.{} survived the full disk", o.id);
    }
    let mut keep = write_job(0, 16, true);
    keep.push("--verify_only=1".into());
    Fio::new(&mh.uri("keep"), dir.path(), "h-keep-verify", &strs(&keep)).run_ok(FIO_TIMEOUT);
    let used = |st: &serde_json::Value| -> u64 {
        st["osds"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| o["stats"]["used_bytes"].as_u64())
            .sum()
    };
    let before = used(&mh.status());
    mh.cli_ok(&["volume", "rm", "fill"]);
    let after = used(&mh.status());
    assert!(
        after < before / 2,
        "removing the volume frees its chunks: {before} -> {after} bytes used"
    );
    mh.cli_ok(&["volume", "create", "again", "--size", "32M"]);
    let mut again = write_job(0, 32, true);
    again.push("--end_fsync=1".into());
    Fio::new(&mh.uri("again"), dir.path(), "h-again", &strs(&again)).run_ok(FIO_TIMEOUT);
    Fio::new(&mh.uri("keep"), dir.path(), "h-keep-verify2", &strs(&keep)).run_ok(FIO_TIMEOUT);
}
