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
