//! `basalt status` tells the truth about the local cluster: OSDs, PG states and usage.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use std::process::Command;
use std::time::Duration;

fn status_json(cluster: &Cluster) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.args(["status", "--json", "--control"])
        .arg(&cluster.control);
    let out = run(&mut cmd, Duration::from_secs(30));
    assert_ok(&out, "basalt status --json");
    parse_json(&out.stdout, "basalt status --json")
}

/// Goal: a fresh cluster reports 3 OSDs up and in, every PG active+clean, HEALTH_OK; after
/// writing 8 MiB every OSD holds a full copy (3 replicas), and the text view says so.
#[test]
fn status_reports_osds_pgs_and_usage() {
    let cluster = Cluster::start();
    let before = status_json(&cluster);
    let osds = before["osds"].as_array().expect("osds array");
    assert_eq!(osds.len(), 3);
    assert!(osds.iter().all(|o| o["up"] == true && o["is_in"] == true));
    assert_eq!(before["pgs_total"], before["pgs_active_clean"]);
    assert_eq!(before["pgs_total"], 32);
    assert_eq!(before["volumes"], 1);

    // Every OSD names the build it runs: this binary's.
    let version = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .arg("--version")
        .output()
        .unwrap();
    let version = String::from_utf8(version.stdout).unwrap();
    let version = version.trim().strip_prefix("basalt ").unwrap();
    assert!(version.contains(" ("), "{version}");
    for o in osds {
        assert_eq!(o["version"], version, "{o}");
        assert_eq!(o["wire"], 2, "{o}");
    }

    qemu_io_ok(&cluster.uri("vol0"), &["write -P 0x77 0 8M"]);
    let after = status_json(&cluster);
    for o in after["osds"].as_array().expect("osds array") {
        let used = o["stats"]["used_bytes"].as_u64().expect("used_bytes");
        assert_eq!(used, 8 << 20, "osd {} holds one full copy: {o}", o["id"]);
        assert_eq!(o["stats"]["objects"], 64, "8 MiB = 64 objects of 128 KiB");
    }
    // Each write is counted once, at its primary.
    let written: u64 = after["osds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["stats"]["write_bytes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(written, 8 << 20, "client write bytes over all primaries");

    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.args(["status", "--control"]).arg(&cluster.control);
    let out = run(&mut cmd, Duration::from_secs(30));
    assert_ok(&out, "basalt status");
    let text = text(&out);
    assert!(text.contains("HEALTH_OK"), "{text}");
    assert!(text.contains("32 total, 32 active+clean"), "{text}");
    assert!(text.contains("3 total, 3 up, 3 in"), "{text}");
    assert!(
        text.contains("io:") && text.contains("write IOPS"),
        "{text}"
    );
}

/// Goal: `basalt up` keeps its cluster secret in DATA_DIR/keyring (mode 0600), and its OSDs'
/// data-plane ports close a connection that sends a frame without the handshake.
#[test]
fn basalt_up_osd_ports_require_the_handshake() {
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::start();
    let keyring = cluster.data_dir().join("keyring");
    let mode = std::fs::metadata(&keyring).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", keyring.display());
    assert!(std::fs::read_to_string(&keyring)
        .unwrap()
        .contains("[cluster]"));
    let st = status_json(&cluster);
    for o in st["osds"].as_array().unwrap() {
        let addr = o["addr"].as_str().unwrap();
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        // A PING frame header as an unauthenticated client would send it.
        let mut frame = b"BSLT\x02\x01".to_vec();
        frame.resize(96, 0);
        s.write_all(&frame).unwrap();
        let mut buf = [0u8; 96];
        // Closed (EOF or reset) at once; a timeout would mean the OSD kept it open.
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("osd {addr} kept a connection that skipped the handshake: {other:?}"),
        }
    }
}

/// `basalt ARGS --control C` for `cluster`; its output, whatever the exit status.
fn basalt(cluster: &Cluster, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_basalt"));
    cmd.args(args).arg("--control").arg(&cluster.control);
    run(&mut cmd, Duration::from_secs(30))
}

/// The codes of the failing health checks in a `status --json` report, with `muted`.
fn check_codes(report: &serde_json::Value) -> Vec<(String, bool)> {
    report["checks"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| (c["code"].as_str().unwrap().to_string(), c["muted"] == true))
                .collect()
        })
        .unwrap_or_default()
}

/// Goal (regression: writes failed with ENOSPC while `status` said HEALTH_OK at "87.3%"
/// used): filling a cluster, `status` warns (OSD_NEARFULL) before any write fails, and once
/// writes fail with ENOSPC it is HEALTH_ERR with OSD_FULL and says what clears it. The
/// ratios are settable within sense, and a check can be muted and unmuted.
#[test]
fn filling_the_cluster_warns_before_writes_fail() {
    let cluster = Cluster::start_with(&["--osd-size", "256M", "--default-volume-size", "1G"]);
    let uri = cluster.uri("vol0");
    let mut warned_before_enospc = false;
    let mut enospc = false;
    // Bound: 64 steps of 16 MiB (the volume's whole 1 GiB).
    for step in 0..64u64 {
        let report = status_json(&cluster);
        let codes = check_codes(&report);
        let write = qemu_io(&uri, &[format!("write -P 0x5a {} 16M", step << 24)]);
        let out = text(&write);
        if out.contains("No space left on device") {
            enospc = true;
            break;
        }
        assert!(
            out.contains("wrote 16777216/16777216"),
            "step {step}: {out}"
        );
        warned_before_enospc |= codes
            .iter()
            .any(|(c, _)| c == "OSD_NEARFULL" || c == "OSD_FULL");
    }
    assert!(enospc, "1 GiB of writes fit in 3 OSDs of 256 MiB?");
    assert!(
        warned_before_enospc,
        "no OSD_NEARFULL or OSD_FULL in any status before the first ENOSPC"
    );
    let report = status_json(&cluster);
    assert!(
        check_codes(&report).contains(&("OSD_FULL".to_string(), false)),
        "{:?}",
        check_codes(&report)
    );
    let out = basalt(&cluster, &["status", "--interval", "0"]);
    let status = text(&out);
    assert!(status.contains("health: HEALTH_ERR"), "{status}");
    assert!(
        status.contains("[ERR] OSD_FULL") && status.contains("fix: add OSDs"),
        "{status}"
    );
    let out = basalt(&cluster, &["health"]);
    let health = text(&out);
    assert!(
        health.contains("% full (") && health.contains("object slots in use"),
        "{health}"
    );

    // Ratios: a nonsensical one is refused and nothing changes; a sensible one is stored.
    let out = basalt(&cluster, &["cluster", "set", "nearfull-ratio", "0.97"]);
    assert!(!out.status.success(), "near-full above full accepted");
    assert!(
        text(&out).contains("must be below full-ratio"),
        "{}",
        text(&out)
    );
    let out = basalt(&cluster, &["cluster", "set", "nearfull-ratio", "70%"]);
    assert_ok(&out, "cluster set nearfull-ratio 70%");
    let out = basalt(&cluster, &["cluster", "get", "--json"]);
    assert_ok(&out, "cluster get");
    let settings = parse_json(&out.stdout, "cluster get --json");
    assert_eq!(settings["nearfull_ratio"], 0.7, "{settings}");
    assert_eq!(settings["full_ratio"], 0.95, "{settings}");

    // Muting: the check shows, muted, and no longer counts; unmuted, it counts again.
    let out = basalt(&cluster, &["health", "mute", "OSD_FULLL"]);
    assert!(!out.status.success() && text(&out).contains("unknown health check"));
    assert_ok(
        &basalt(&cluster, &["health", "mute", "OSD_FULL", "--for", "1h"]),
        "mute",
    );
    let report = status_json(&cluster);
    assert!(check_codes(&report).contains(&("OSD_FULL".to_string(), true)));
    let status = text(&basalt(&cluster, &["status", "--interval", "0"]));
    assert!(
        !status.contains("HEALTH_ERR") && status.contains("OSD_FULL (muted)"),
        "{status}"
    );
    assert_ok(
        &basalt(&cluster, &["health", "unmute", "OSD_FULL"]),
        "unmute",
    );
    let status = text(&basalt(&cluster, &["status", "--interval", "0"]));
    assert!(status.contains("health: HEALTH_ERR"), "{status}");
}
