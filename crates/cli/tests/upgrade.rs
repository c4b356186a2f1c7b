//! A rolling upgrade (docs/operations.md, "Upgrading"): a 3-host cluster started on an
//! earlier build is upgraded host by host to this one while fio writes and verifies, with
//! no I/O error and no lost byte. Opt-in: it needs the earlier `basalt` binary, which
//! `scripts/upgrade-test.sh` builds (a second tree, about ten minutes here) and passes in
//! `BASALT_UPGRADE_FROM`.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use basalt_testcluster::BasaltCluster;
use multihost::{Fio, Layout, Loader, MultiHost};
use std::time::Duration;

/// MiB per fio region; the loader writes 4 regions.
const REGION_MIB: u64 = 8;

#[test]
#[ignore = "needs an earlier basalt build in BASALT_UPGRADE_FROM: run scripts/upgrade-test.sh"]
fn rolling_upgrade_under_verified_writes() {
    let old = std::env::var("BASALT_UPGRADE_FROM").unwrap_or_else(|_| {
        panic!("BASALT_UPGRADE_FROM must name an earlier basalt binary (scripts/upgrade-test.sh)")
    });
    let new = multihost::basalt_bin();
    let version = |bin: &str| {
        let out = std::process::Command::new(bin)
            .arg("--version")
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let (old_version, new_version) = (version(&old), version(new));
    eprintln!("upgrading from {old_version} to {new_version}");
    assert_ne!(old_version, new_version, "the same build twice");

    let dir = tempfile::Builder::new()
        .prefix("basalt-upgrade-")
        .tempdir()
        .unwrap();
    let mut mh = MultiHost(
        BasaltCluster::start(Layout::default(), &old).unwrap_or_else(|e| panic!("{e:#}")),
    );
    mh.cli_ok(&["volume", "create", "vol", "--size", "64M"]);
    let uri = mh.uri("vol");
    let loader = Loader::start(uri.clone(), dir.path().into(), 4, REGION_MIB);
    std::thread::sleep(Duration::from_secs(3));

    // Host by host: every OSD of the host stopped (SIGTERM, as systemd does) and started
    // on the new binary, then wait until every PG is clean before the next host.
    for host in 0..mh.hosts.len() {
        for o in mh.osds.iter().filter(|o| o.host == host) {
            o.proc.terminate(Duration::from_secs(60)).unwrap();
            o.proc.restart_as(new).unwrap();
            o.proc
                .wait_for_line("serving on", multihost::DAEMON_START)
                .unwrap_or_else(|e| panic!("osd.{} on the new build: {e:#}", o.id));
        }
        mh.wait_clean(Duration::from_secs(180));
        eprintln!("host {host} upgraded");
    }
    let jobs = loader.finish();
    assert!(jobs >= 4, "only {jobs} fio jobs ran during the upgrade");
    // The administrator's tools are upgraded with the hosts: `status` below is the new one.
    mh.0.basalt = new.into();

    // The gateway last (its clients reconnect), then every region verified through it.
    let gateway = mh.gateway.as_ref().expect("the cluster's gateway");
    gateway.terminate(Duration::from_secs(60)).unwrap();
    gateway.restart_as(new).unwrap();
    gateway
        .wait_for_line("NBD gateway serving", multihost::DAEMON_START)
        .unwrap();
    for region in 0..4 {
        let mut job = multihost::region_job(region, REGION_MIB);
        job.push("--verify_only=1".into());
        let job: Vec<&str> = job.iter().map(String::as_str).collect();
        Fio::new(&uri, dir.path(), &format!("final{region}"), &job)
            .run_ok(Duration::from_secs(300));
    }
    let st = mh.status();
    for o in st["osds"].as_array().unwrap() {
        assert_eq!(
            format!("basalt {}", o["version"].as_str().unwrap_or("")),
            new_version,
            "{o}"
        );
    }
    assert_eq!(st["checks"].as_array().map_or(0, |c| c.len()), 0, "{st}");
    eprintln!("{jobs} fio jobs wrote and verified during the upgrade");
}
