//! `basalt up --ec 2+1`: an erasure-coded pool served over NBD to real clients (fio with
//! crc32c verify headers, qemu-io), through repeated SIGKILLs in the middle of partial-stripe
//! writes.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Bound on one fio run.
const FIO_TIMEOUT: Duration = Duration::from_secs(180);

/// fio over NBD on `uri`: `rw` with block sizes 4k..=192k (most writes cover part of a
/// 256 KiB stripe, some span two), `size` MiB from `offset_mib`.
fn fio_args(uri: &str, rw: &str, offset_mib: u64, size_mib: u64) -> Vec<String> {
    vec![
        "--name=ec".into(),
        "--ioengine=nbd".into(),
        format!("--uri={uri}"),
        format!("--rw={rw}"),
        "--bsrange=4k-192k".into(),
        "--iodepth=8".into(),
        format!("--offset={offset_mib}m"),
        format!("--size={size_mib}m"),
        "--randseed=1234".into(),
        "--verify=crc32c".into(),
        "--verify_fatal=1".into(),
        "--output-format=json".into(),
    ]
}

fn fio_ok(cluster: &Cluster, args: &[String], what: &str) {
    let fio = require_tool("fio", "fio");
    let out = run(
        Command::new(fio).args(args).current_dir(cluster.scratch()),
        FIO_TIMEOUT,
    );
    assert_ok(&out, what);
}

/// Goal: an erasure-coded pool serves verified I/O of every size, and after SIGKILLs in the
/// middle of partial-stripe writes every restart comes up clean: no stripe is unfound or
/// unreadable, data written and verified before the crashes verifies again, and the
/// crashed region reads back whole.
#[test]
fn ec_pool_verified_io_through_kill9_loops() {
    let fio = require_tool("fio", "fio");
    let mut cluster = Cluster::start_with(&["--ec", "2+1", "--default-volume-size", "256M"]);
    assert!(
        cluster.stdout_text().contains("erasure coded 2+1"),
        "banner names the scheme:\n{}",
        cluster.stdout_text()
    );
    let uri = cluster.uri("vol0");
    // Verified data in [0, 48 MiB): written (fio flushes at the end), then read and checked.
    let mut write = fio_args(&uri, "randwrite", 0, 48);
    write.push("--do_verify=1".into());
    write.push("--end_fsync=1".into());
    fio_ok(
        &cluster,
        &write,
        "fio verified random writes on the EC pool",
    );
    qemu_io_ok(&uri, &["write -P 0x5c 100M 300000", "flush"]);

    for cycle in 0..3 {
        // A partial-stripe write load in [128 MiB, 192 MiB), killed mid-flight.
        let uri = cluster.uri("vol0");
        let mut load = Command::new(&fio)
            .args(fio_args(&uri, "randwrite", 128, 64))
            .args(["--time_based", "--runtime=30", "--verify=0"])
            .current_dir(cluster.scratch())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn fio");
        std::thread::sleep(Duration::from_millis(1500 + 700 * cycle));
        let running = load.try_wait().expect("poll fio").is_none();
        cluster.kill9();
        if wait_timeout(&mut load, Duration::from_secs(30)).is_none() {
            let _ = load.kill();
            let _ = load.wait();
        }
        assert!(running, "fio load ended before the crash (cycle {cycle})");
        cluster.restart();
        // Peering settled the cut writes before the PGs went active; rebuilding the
        // positions a cut write missed finishes in the background (bounded wait).
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            let status = cluster.status_text();
            assert!(!status.contains("unfound"), "cycle {cycle}: {status}");
            if status.contains("HEALTH_OK") || std::time::Instant::now() > deadline {
                break status;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        assert!(
            status.contains("HEALTH_OK"),
            "cycle {cycle}: clean after the restart:\n{status}"
        );
        let uri = cluster.uri("vol0");
        let mut verify = fio_args(&uri, "randwrite", 0, 48);
        verify.push("--verify_only".into());
        fio_ok(&cluster, &verify, "the verified region after a crash");
        qemu_io_ok(&uri, &["read -P 0x5c 100M 300000"]);
        // Every stripe the crashed load touched decodes: the whole region reads.
        qemu_io_ok(&uri, &["read 128M 64M"]);
    }
    // Every chunk of every stripe agrees with its parity after the crashes.
    let out = run(
        Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["scrub", "--control"])
            .arg(&cluster.control),
        Duration::from_secs(300),
    );
    assert_ok(&out, "basalt scrub");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("scrubbed 40 PGs") && text.contains(" 0 inconsistent, 0 repaired"),
        "{text}"
    );
    let settled = cluster
        .stderr_text()
        .matches("EC peering settled the stripes of cut writes")
        .count();
    eprintln!("PGs that settled cut writes over the 3 crashes: {settled}");
    cluster.stop();
}

/// Goal: `basalt up` refuses an erasure code it cannot place or does not support, or a store
/// geometry no store can have, with the flag named, before creating anything.
#[test]
fn ec_settings_are_checked_up_front() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (vec!["--ec", "4+2"], "--ec 4+2 needs --osds 6"),
        (
            vec!["--wal-size", "1M"],
            "--wal-size: bad store options: WAL size 1.0 MiB is not a multiple of 4 KiB from \
             4.0 MiB to 1.0 GiB",
        ),
        (vec!["--ec", "1+1"], "--ec"),
        (vec!["--ec", "2+9"], "--ec"),
        (vec!["--ec", "two"], "not an erasure code"),
        (vec!["--ec", "2+1", "--replicas", "2"], "--replicas"),
    ] {
        let out = run(
            Command::new(env!("CARGO_BIN_EXE_basalt"))
                .arg("up")
                .arg("--data-dir")
                .arg(dir.path().join("d"))
                .args(["--s3-listen", "off", "--nbd-listen", "127.0.0.1:0"])
                .args(&args),
            Duration::from_secs(30),
        );
        assert!(!out.status.success(), "{args:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
