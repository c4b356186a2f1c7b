//! Failure scenarios of a multi-host cluster (3 hosts in network namespaces, 2 OSDs each,
//! etcd, an NBD gateway): real processes killed, restarted and cut off under fio load, and
//! every volume verified afterwards against what fio wrote (crc32c verify headers).

mod common;
mod multihost;

use multihost::{wait_child, Fio, Layout, MultiHost};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
/// Bound on one fio run in these tests.
const FIO_TIMEOUT: Duration = Duration::from_secs(300);

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("basalt-mh-")
        .tempdir()
        .expect("scratch directory")
}

/// fio options writing `size` MiB of 4 KiB random blocks with crc32c verify headers.
fn write_job(size_mib: u64, verify: bool) -> Vec<String> {
    vec![
        "--rw=randwrite".into(),
        "--bs=4k".into(),
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

/// The same job, reading back and checking what it wrote (no writes).
fn verify_job(size_mib: u64) -> Vec<String> {
    let mut v = write_job(size_mib, true);
    v.push("--verify_only=1".into());
    v
}

/// Scenario a: kill -9 the primary OSD of a busy PG under fio write load: I/O resumes after
/// a pause (no error reaches fio), every block verifies, and once the OSD is back the
/// cluster is clean and the data still verifies.
#[test]
fn kill_primary_under_write_load() {
    let dir = scratch();
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&["volume", "create", "vol", "--size", "256M"]);
    let primary = mh.locate("vol", 0)["primary"]
        .as_u64()
        .expect("offset 0 has a primary") as u32;

    let size_mib = 48;
    let fio = Fio::new(
        &mh.uri("vol"),
        dir.path(),
        "a",
        &strs(&write_job(size_mib, true)),
    );
    let child = fio.spawn();
    std::thread::sleep(Duration::from_secs(2));
    let killed_at = Instant::now();
    mh.osd(primary).proc.kill9().expect("kill the primary");
    let out = wait_child(child, FIO_TIMEOUT);
    let v = fio.check(&out);
    let job = &v["jobs"][0];
    assert_eq!(
        job["write"]["io_bytes"].as_u64(),
        Some(size_mib * MIB),
        "all written"
    );
    assert_eq!(
        job["read"]["io_bytes"].as_u64(),
        Some(size_mib * MIB),
        "all verified"
    );
    eprintln!("fio finished {:?} after the kill", killed_at.elapsed());

    // `basalt status` tells the truth: the killed OSD is down, its PGs moved on.
    let st = mh.status();
    let osd = st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"].as_u64() == Some(primary as u64))
        .expect("the killed OSD is listed")
        .clone();
    assert_eq!(
        osd["up"].as_bool(),
        Some(false),
        "killed OSD reported down: {osd}"
    );
    assert!(
        st["pgs"].as_array().unwrap().iter().all(|p| !p["acting"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(primary))),
        "no PG still counts on the killed OSD"
    );

    // The OSD returns, catches up, and everything is clean and intact.
    let p = &mh.osd(primary).proc;
    p.restart().expect("restart the OSD");
    p.wait_for_line("serving on", multihost::DAEMON_START)
        .expect("OSD back");
    mh.wait_clean(Duration::from_secs(120));
    Fio::new(
        &mh.uri("vol"),
        dir.path(),
        "a-verify",
        &strs(&verify_job(size_mib)),
    )
    .run_ok(FIO_TIMEOUT);
}

/// Scenario g: power cut. Write and flush, then kill -9 every OSD at once and restart them:
/// every write acknowledged before the flush is intact and the cluster becomes clean.
#[test]
fn power_cut_keeps_flushed_writes() {
    let dir = scratch();
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&["volume", "create", "vol", "--size", "128M"]);
    let size_mib = 32;
    let mut job = write_job(size_mib, false);
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
    Fio::new(
        &mh.uri("vol"),
        dir.path(),
        "g-verify",
        &strs(&verify_job(size_mib)),
    )
    .run_ok(FIO_TIMEOUT);
}
