//! Changing a pool after creation on a 3-host cluster in network namespaces: more replicas
//! and a wider failure domain while fio writes and verifies, and the changes the cluster
//! refuses leave the pool as it was.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{Layout, Loader, MultiHost};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// The acting sets of the PGs of pool `id`, as hosts.
fn acting_hosts(st: &serde_json::Value, id: u64) -> Vec<Vec<String>> {
    let host: HashMap<u64, String> = st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["id"].as_u64().unwrap(),
                o["host"].as_str().unwrap().into(),
            )
        })
        .collect();
    st["pgs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pg"].as_str().unwrap().starts_with(&format!("{id}.")))
        .map(|p| {
            p["acting"]
                .as_array()
                .unwrap()
                .iter()
                .map(|o| host[&o.as_u64().unwrap()].clone())
                .collect()
        })
        .collect()
}

/// Goal: `basalt pool set` changes a pool that holds data while clients write: size 2 → 3
/// gives every PG three copies, failure domain osd → host spreads them over three hosts,
/// and fio verifies every block throughout; a size the cluster cannot place, a PG count
/// change (not built) and a min-size above the size are refused and change nothing.
#[test]
fn pool_size_and_failure_domain_change_under_verified_writes() {
    let dir = tempfile::Builder::new()
        .prefix("basalt-poolset-")
        .tempdir()
        .unwrap();
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&[
        "pool",
        "create",
        "p",
        "--size",
        "2",
        "--min-size",
        "1",
        "--pgs",
        "16",
        "--failure-domain",
        "osd",
    ]);
    let pool: serde_json::Value =
        serde_json::from_str(&mh.cli_ok(&["pool", "get", "p", "--json"])).unwrap();
    let id = pool["id"].as_u64().unwrap();
    mh.cli_ok(&["volume", "create", "vol", "--pool", "p", "--size", "64M"]);
    let loader = Loader::start(mh.uri("vol"), dir.path().into(), 4, 8);
    std::thread::sleep(Duration::from_secs(3));

    mh.cli_ok(&["pool", "set", "p", "size", "3"]);
    let st = mh.wait_clean(Duration::from_secs(180));
    let sets = acting_hosts(&st, id);
    assert_eq!(sets.len(), 16);
    assert!(sets.iter().all(|s| s.len() == 3), "{sets:?}");

    mh.cli_ok(&["pool", "set", "p", "failure-domain", "host"]);
    mh.cli_ok(&["pool", "set", "p", "min-size", "2"]);
    let st = mh.wait_clean(Duration::from_secs(180));
    for set in acting_hosts(&st, id) {
        let hosts: BTreeSet<&String> = set.iter().collect();
        assert_eq!(hosts.len(), 3, "copies share a host: {set:?}");
    }

    let before = mh.cli_ok(&["pool", "get", "p", "--json"]);
    for (key, value, expect) in [
        ("size", "4", "needs 4 hosts"),
        ("pgs", "32", "not built yet"),
        ("min-size", "4", "--min-size must be between 1 and --size"),
    ] {
        let out = mh.cli(&["pool", "set", "p", key, value]).unwrap();
        let all = common::text(&out);
        assert!(
            !out.status.success(),
            "pool set {key} {value} accepted: {all}"
        );
        assert!(all.contains(expect), "pool set {key} {value}: {all}");
    }
    assert_eq!(mh.cli_ok(&["pool", "get", "p", "--json"]), before);

    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs wrote and verified during the changes");
    assert!(jobs >= 4, "only {jobs} fio jobs ran");
}
