//! Changing a pool after creation on a 3-host cluster in network namespaces: more replicas,
//! a wider failure domain and PG split and merge while fio writes and verifies, and the
//! changes the cluster refuses leave the pool as it was.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{Layout, Loader, MultiHost};
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// The acting sets of the PGs of pool `id`, each member named by its OSD's `field` in the
/// status report (`host`, `location`).
fn acting_by(st: &serde_json::Value, id: u64, field: &str) -> Vec<Vec<String>> {
    let name: HashMap<u64, String> = st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let value = o[field].as_str().unwrap_or("");
            (o["id"].as_u64().unwrap(), value.to_string())
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
                .map(|o| name[&o.as_u64().unwrap()].clone())
                .collect()
        })
        .collect()
}

/// Pool `p` created with `flags` (after `pool create p`), its id, and a volume `vol` in it
/// that fio writes and verifies from now on (in `dir`).
fn pool_under_writes(mh: &MultiHost, dir: &std::path::Path, flags: &[&str]) -> (u64, Loader) {
    let mut args = vec!["pool", "create", "p"];
    args.extend_from_slice(flags);
    mh.cli_ok(&args);
    let pool: serde_json::Value =
        serde_json::from_str(&mh.cli_ok(&["pool", "get", "p", "--json"])).unwrap();
    let id = pool["id"].as_u64().unwrap();
    mh.cli_ok(&["volume", "create", "vol", "--pool", "p", "--size", "64M"]);
    let loader = Loader::start(mh.uri("vol"), dir.into(), 4, 8);
    std::thread::sleep(Duration::from_secs(3));
    (id, loader)
}

/// Each `pool set p KEY VALUE` of `refused` fails naming its reason, and pool `p` is
/// unchanged afterwards.
fn refused_unchanged(mh: &MultiHost, refused: &[(&str, &str, &str)]) {
    let before = mh.cli_ok(&["pool", "get", "p", "--json"]);
    for (key, value, expect) in refused {
        let out = mh.cli(&["pool", "set", "p", key, value]).unwrap();
        let all = common::text(&out);
        assert!(
            !out.status.success(),
            "pool set {key} {value} accepted: {all}"
        );
        assert!(all.contains(expect), "pool set {key} {value}: {all}");
    }
    assert_eq!(mh.cli_ok(&["pool", "get", "p", "--json"]), before);
}

/// Goal: `basalt pool set` changes a pool that holds data while clients write: size 2 → 3
/// gives every PG three copies, failure domain osd → host spreads them over three hosts,
/// and fio verifies every block throughout; a size the cluster cannot place, a PG count
/// that is neither a multiple nor a divisor and a min-size above the size are refused and
/// change nothing.
#[test]
fn pool_size_and_failure_domain_change_under_verified_writes() {
    let dir = tempfile::Builder::new()
        .prefix("basalt-poolset-")
        .tempdir()
        .unwrap();
    let mh = MultiHost::start(Layout::default());
    let flags = [
        "--size",
        "2",
        "--min-size",
        "1",
        "--pgs",
        "16",
        "--failure-domain",
        "osd",
    ];
    let (id, loader) = pool_under_writes(&mh, dir.path(), &flags);

    mh.cli_ok(&["pool", "set", "p", "size", "3"]);
    let st = mh.wait_clean(Duration::from_secs(180));
    let sets = acting_by(&st, id, "host");
    assert_eq!(sets.len(), 16);
    assert!(sets.iter().all(|s| s.len() == 3), "{sets:?}");

    mh.cli_ok(&["pool", "set", "p", "failure-domain", "host"]);
    mh.cli_ok(&["pool", "set", "p", "min-size", "2"]);
    let st = mh.wait_clean(Duration::from_secs(180));
    for set in acting_by(&st, id, "host") {
        let hosts: BTreeSet<&String> = set.iter().collect();
        assert_eq!(hosts.len(), 3, "copies share a host: {set:?}");
    }

    refused_unchanged(
        &mh,
        &[
            ("size", "4", "needs 4 hosts"),
            ("pgs", "24", "a multiple of it (a split) or a divisor"),
            ("min-size", "4", "--min-size must be between 1 and --size"),
        ],
    );

    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs wrote and verified during the changes");
    assert!(jobs >= 4, "only {jobs} fio jobs ran");
}

/// The states of pool `id`'s PGs in a status report.
fn pg_states_of(st: &serde_json::Value, id: u64) -> Vec<String> {
    st["pgs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["pg"].as_str().unwrap().starts_with(&format!("{id}.")))
        .map(|p| p["state"].as_str().unwrap().to_string())
        .collect()
}

/// Goal: `basalt pool set p pgs N` splits a pool's 32 PGs into 128 and merges them back
/// into 32 while fio writes and verifies: each change returns once every PG peered under
/// the new count, every PG is then active+clean, and no block is lost or fails; a count
/// that is neither a multiple nor a divisor, zero, and one that puts more PG copies on the
/// OSDs than they may hold are refused and change nothing.
#[test]
fn pg_split_and_merge_under_verified_writes() {
    let dir = tempfile::Builder::new()
        .prefix("basalt-pgsplit-")
        .tempdir()
        .unwrap();
    let mh = MultiHost::start(Layout::default());
    let flags = ["--size", "3", "--pgs", "32", "--failure-domain", "host"];
    let (id, loader) = pool_under_writes(&mh, dir.path(), &flags);

    for pgs in [128, 32] {
        let started = std::time::Instant::now();
        let out = mh
            .cli(&["pool", "set", "p", "pgs", &pgs.to_string()])
            .unwrap();
        let all = common::text(&out);
        assert!(out.status.success(), "pool set p pgs {pgs}: {all}");
        assert!(
            all.contains(&format!("{pgs} of {pgs} PGs peered under the new count")),
            "no progress up to every PG: {all}"
        );
        eprintln!("pgs {pgs}: every PG peered after {:?}", started.elapsed());
        let st = mh.wait_clean(Duration::from_secs(240));
        let states = pg_states_of(&st, id);
        assert_eq!(states.len(), pgs, "{states:?}");
        assert!(states.iter().all(|s| s == "active+clean"), "{states:?}");
        let pool: serde_json::Value =
            serde_json::from_str(&mh.cli_ok(&["pool", "get", "p", "--json"])).unwrap();
        assert_eq!(pool["pg_count"].as_u64(), Some(pgs as u64));
        eprintln!("pgs {pgs}: active+clean after {:?}", started.elapsed());
    }

    refused_unchanged(
        &mh,
        &[
            ("pgs", "48", "a multiple of it (a split) or a divisor"),
            ("pgs", "0", "pgs must be between 1 and 4096"),
            ("pgs", "4096", "PG copies on each of the 6 OSDs"),
        ],
    );

    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs wrote and verified during the split and the merge");
    assert!(jobs >= 4, "only {jobs} fio jobs ran");
}

/// Goal: OSDs carry a location and a device class; a pool holding data moves from failure
/// domain host to rack while fio writes and verifies, after which no two copies of a PG
/// share a rack; what the racks, zones and classes cannot give (a zone domain where no
/// OSD has a zone, nvme copies in three racks when only two have nvme, a class no OSD has,
/// an unknown domain or location key) is refused with the reason and changes nothing.
#[test]
fn pool_moves_to_rack_failure_domain_under_verified_writes() {
    let dir = tempfile::Builder::new()
        .prefix("basalt-poolrack-")
        .tempdir()
        .unwrap();
    // Four hosts in three racks; the host alone in rack r3 has a disk of class hdd.
    let place = |rack: &str, class: &str| -> Vec<String> {
        let args = [
            "--location",
            &format!("rack={rack}"),
            "--device-class",
            class,
        ];
        args.iter().map(|a| a.to_string()).collect()
    };
    let mh = MultiHost::start(Layout {
        hosts: 4,
        osds_per_host: 1,
        pgs: 16,
        host_osd_args: vec![
            place("r1", "nvme"),
            place("r1", "nvme"),
            place("r2", "nvme"),
            place("r3", "hdd"),
        ],
        ..Layout::default()
    });
    let ls = mh.cli_ok(&["osd", "ls"]);
    assert!(ls.contains("LOCATION") && ls.contains("CLASS"), "{ls}");
    assert!(ls.contains("rack=r3") && ls.contains("hdd"), "{ls}");

    let flags = ["--size", "3", "--pgs", "16", "--failure-domain", "host"];
    let (id, loader) = pool_under_writes(&mh, dir.path(), &flags);
    // Under failure domain host, some PG has two copies in rack r1 (hosts 0 and 1):
    // the change below has something to move.
    let st = mh.wait_clean(Duration::from_secs(120));
    let shared = acting_by(&st, id, "location")
        .iter()
        .filter(|set| set.iter().collect::<BTreeSet<_>>().len() < set.len())
        .count();
    assert!(
        shared > 0,
        "no PG had two copies in one rack before the change"
    );

    mh.cli_ok(&["pool", "set", "p", "failure-domain", "rack"]);
    let st = mh.wait_clean(Duration::from_secs(180));
    let sets = acting_by(&st, id, "location");
    assert_eq!(sets.len(), 16);
    for set in &sets {
        let racks: BTreeSet<&String> = set.iter().collect();
        assert_eq!(racks.len(), 3, "copies share a rack: {set:?}");
    }

    refused_unchanged(
        &mh,
        &[
            ("failure-domain", "zone", "needs 3 zones"),
            (
                "failure-domain",
                "row",
                "--failure-domain must be osd, host, rack or zone",
            ),
            ("device-class", "nvme", "needs 3 racks of device class nvme"),
            (
                "device-class",
                "ssd",
                "no OSD has it (device classes here: hdd: 1 OSD, nvme: 3 OSDs)",
            ),
        ],
    );
    let out = mh
        .cli(&[
            "pool",
            "create",
            "q",
            "--device-class",
            "ssd",
            "--failure-domain",
            "osd",
        ])
        .unwrap();
    let all = common::text(&out);
    assert!(
        !out.status.success() && all.contains("no OSD has it"),
        "{all}"
    );
    assert!(!mh.cli_ok(&["pool", "ls"]).contains(" q "));
    // A pool on the nvme OSDs alone, two copies in distinct racks, is placeable.
    mh.cli_ok(&[
        "pool",
        "create",
        "fast",
        "--size",
        "2",
        "--min-size",
        "1",
        "--pgs",
        "8",
        "--failure-domain",
        "rack",
        "--device-class",
        "nvme",
    ]);
    let st = mh.wait_clean(Duration::from_secs(120));
    let fast = st["pools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "fast")
        .map(|p| p["id"].as_u64().unwrap())
        .unwrap();
    for set in acting_by(&st, fast, "location") {
        assert!(
            !set.contains(&"rack=r3".to_string()),
            "an hdd OSD holds {set:?}"
        );
        assert_eq!(set.iter().collect::<BTreeSet<_>>().len(), 2, "{set:?}");
    }

    // An OSD with an unknown location key does not start.
    let out = std::process::Command::new(multihost::basalt_bin())
        .args(["osd", "--data", dir.path().join("bad").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:1", "--location", "row=7"])
        .output()
        .unwrap();
    let all = common::text(&out);
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("unknown location key \"row\""), "{all}");

    let jobs = loader.finish();
    eprintln!("{jobs} fio jobs wrote and verified during the change");
    assert!(jobs >= 4, "only {jobs} fio jobs ran");
}
