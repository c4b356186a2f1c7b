//! Reads from a local replica (docs/design.md, "Reads from a local replica") on a 3-host
//! cluster in network namespaces: a gateway that names a storage host reads from that
//! host's replicas, and every read still returns what fio wrote, across a primary killed
//! under load and the recovery that follows.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{wait_child, Fio, Layout, MultiHost};
use std::time::Duration;

const MIB: u64 = 1 << 20;
/// Bound on one fio run in these tests.
const FIO_TIMEOUT: Duration = Duration::from_secs(300);
/// NBD port of the localizing gateway (its metrics at + 1000).
const LOCAL_PORT: u16 = 10_910;

fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("basalt-local-")
        .tempdir()
        .expect("scratch directory")
}

/// The sum of counter `name` over its label sets in a Prometheus text response (0 if absent).
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !rest.starts_with([' ', '{']) {
                return None;
            }
            rest.split_whitespace().last()?.parse::<u64>().ok()
        })
        .sum()
}

/// Goal: with `--read-policy localize --host host1`, reads of PGs whose primary is on
/// another host are served by host1's replica (the gateway and OSD counters say so), and
/// none returns stale data: fio verifies every block it wrote, with an OSD of another host
/// killed while it writes and verifies, then again once that OSD is back and recovered.
#[test]
fn localized_reads_verify_across_a_killed_primary() {
    let dir = scratch();
    let mh = MultiHost::start(Layout::default());
    mh.cli_ok(&["volume", "create", "vol", "--size", "128M"]);
    let local_host = mh.hosts[0].name.clone();
    let _gateway = mh
        .spawn_gateway(
            LOCAL_PORT,
            &["--read-policy", "localize", "--host", &local_host],
        )
        .expect("a localizing gateway");
    let uri = mh.uri_at(LOCAL_PORT, "vol");
    // Kill a primary on another host: its PGs fail over while the local replicas serve.
    let victim = mh
        .osds
        .iter()
        .find(|o| mh.hosts[o.host].name != local_host)
        .map(|o| o.id)
        .unwrap();
    let size_mib = 32;
    let job = [
        "--rw=randwrite",
        "--bs=4k",
        "--size=32m",
        "--iodepth=8",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--do_verify=1",
    ];
    let fio = Fio::new(&uri, dir.path(), "a", &job);
    let child = fio.spawn();
    std::thread::sleep(Duration::from_secs(3));
    mh.osd(victim).proc.kill9().expect("kill an OSD");
    let out = wait_child(child, FIO_TIMEOUT);
    let v = fio.check(&out);
    assert_eq!(
        v["jobs"][0]["read"]["io_bytes"].as_u64(),
        Some(size_mib * MIB),
        "all verified"
    );
    let victim_proc = &mh.osd(victim).proc;
    victim_proc.restart().expect("restart the killed OSD");
    victim_proc
        .wait_for_line("serving on", multihost::DAEMON_START)
        .expect("the OSD is back");
    mh.wait_clean(Duration::from_secs(120));
    let mut verify: Vec<&str> = job.to_vec();
    verify.push("--verify_only=1");
    Fio::new(&uri, dir.path(), "b", &verify).run_ok(FIO_TIMEOUT);

    let metrics = mh.gateway_metrics(LOCAL_PORT).expect("gateway metrics");
    let local = counter(&metrics, "basalt_client_local_reads_total");
    let fallbacks = counter(&metrics, "basalt_client_local_read_fallbacks_total");
    eprintln!("gateway: {local} reads served by host1's replicas, {fallbacks} declined");
    assert!(local > 0, "no read was served locally:\n{metrics}");
    let served: u64 = mh
        .osds
        .iter()
        .filter(|o| mh.hosts[o.host].name == local_host)
        .map(|o| counter(&mh.osd_metrics(o.id), "basalt_osd_local_reads_total"))
        .sum();
    assert!(served > 0, "host1's OSDs count no local read");
}
