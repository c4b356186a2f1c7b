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
