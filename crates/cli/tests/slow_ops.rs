//! Slow operations and recovery counters on a multi-host cluster (3 hosts in network
//! namespaces, 2 OSDs each, etcd, an NBD gateway): a replica OSD frozen with SIGSTOP under
//! fio writes makes its primary's writes wait; `basalt status --watch` must print the slow
//! op with its volume, PG and stage, and `/metrics` must show it; once the replica is back,
//! its recovery must show in the push counters.
// Test code may unwrap (clippy.toml); clippy misses helpers outside #[test] fns (rust-clippy#11119).
#![allow(clippy::unwrap_used)]

mod common;
mod multihost;

use multihost::{basalt_bin, wait_child, Fio, Layout, MultiHost};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Bound on the whole fio run (it is time based; writes stall while the replica is frozen).
const FIO_TIMEOUT: Duration = Duration::from_secs(180);
/// Bound on the slow-op event reaching `status --watch` once the replica is frozen.
const EVENT_BOUND: Duration = Duration::from_secs(15);

/// The value of the sample `name{osd="ID"...}` (first match) in a `/metrics` page.
fn sample(page: &str, prefix: &str) -> Option<f64> {
    page.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.trim().parse().ok())
}

/// `basalt status --watch` from the root namespace, its lines sent to the returned channel.
fn watch(mh: &MultiHost) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(basalt_bin())
        .args(["status", "--watch", "--interval", "1"])
        .env("BASALT_META", &mh.meta_url)
        .env("BASALT_KEYRING", &mh.keyring)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn basalt status --watch");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

#[test]
fn a_frozen_replica_is_a_slow_op_in_status_watch_and_recovery_is_counted() {
    // Goal: with the slow-op threshold at 1 s, freezing a replica of the PG fio writes to
    // yields, within EVENT_BOUND, a `status --watch` line naming the primary, the volume,
    // the object's PG and the stage 'replica osd.R'; the primary's /metrics shows the gauge
    // at 1 or more and the found counter moving, `status --json` lists it, PGs run
    // undersized once the replica is marked down; after SIGCONT the cluster becomes clean
    // and the recovery push counters moved.
    let dir = tempfile::Builder::new()
        .prefix("basalt-slow-")
        .tempdir()
        .unwrap();
    let mh = MultiHost::start(Layout {
        // A grace of 5 s keeps the frozen replica up (not yet reported) long enough for its
        // primary's writes to be slow for seconds: once it is marked down, a new interval
        // begins and the primary stops waiting for it.
        osd_args: vec![
            "--slow-op-ms".into(),
            "1000".into(),
            "--heartbeat-grace-ms".into(),
            "5000".into(),
        ],
        ..Layout::default()
    });
    mh.cli_ok(&["volume", "create", "vol", "--size", "64M"]);
    let loc = mh.locate("vol", 0);
    let pg = loc["pg"].as_str().unwrap().to_string();
    let object = loc["object"].as_str().unwrap().to_string();
    let acting: Vec<u32> = loc["acting"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let (primary, replica) = (acting[0], acting[1]);

    let (mut watcher, lines) = watch(&mh);
    let first = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("status --watch prints its summary");
    assert!(first.contains("map epoch"), "{first}");

    // Writes to the first object only (one PG), for a while after the replica is frozen.
    let fio = Fio::new(
        &mh.uri("vol"),
        dir.path(),
        "slow",
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--size=128k",
            "--iodepth=4",
            "--time_based=1",
            "--runtime=12",
        ],
    );
    let child = fio.spawn();
    std::thread::sleep(Duration::from_secs(2));
    let frozen = &mh.osd(replica).proc;
    frozen.stop().expect("SIGSTOP the replica");
    let stopped_at = Instant::now();

    let want_head = format!("slow op on osd.{primary}: write obj {object} (volume vol) pg {pg}");
    let want_stage = format!("in 'replica osd.{replica}'");
    let mut seen = Vec::new();
    let mut gauge_max = 0.0f64;
    let gauge = format!("basalt_osd_slow_ops{{osd=\"{primary}\"}}");
    let event = loop {
        if let Ok(page) = mh.0.osd_metrics(primary) {
            gauge_max = gauge_max.max(sample(&page, &gauge).unwrap_or(0.0));
        }
        match lines.recv_timeout(Duration::from_millis(300)) {
            Ok(line) => {
                let hit = line.contains(&want_head) && line.contains(&want_stage);
                seen.push(line.clone());
                if hit {
                    break line;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("status --watch ended: {e}; printed:\n{}", seen.join("\n")),
        }
        assert!(
            stopped_at.elapsed() < EVENT_BOUND,
            "no slow-op event like '{want_head} ... {want_stage}' within {EVENT_BOUND:?}; \
             status --watch printed:\n{}\n{}",
            seen.join("\n"),
            mh.logs_tail()
        );
    };
    eprintln!(
        "slow-op event {:?} after SIGSTOP: {event}",
        stopped_at.elapsed()
    );
    // The gauge: polled until seen at 1 or more while the op is stuck (bounded).
    let deadline = Instant::now() + Duration::from_secs(5);
    while gauge_max < 1.0 && Instant::now() < deadline {
        let page = mh.osd_metrics(primary);
        gauge_max = gauge_max.max(sample(&page, &gauge).unwrap_or(0.0));
        std::thread::sleep(Duration::from_millis(200));
    }
    let page = mh.osd_metrics(primary);
    let found = sample(
        &page,
        &format!("basalt_osd_slow_ops_found_total{{osd=\"{primary}\"}}"),
    )
    .unwrap_or(0.0);
    assert!(found >= 1.0, "slow ops found on osd.{primary}: {found}");
    assert!(
        gauge_max >= 1.0,
        "basalt_osd_slow_ops of osd.{primary} never reached 1 while the replica was frozen"
    );

    // `basalt status --json` lists it under the primary (in flight, or finished within the
    // minute the OSD keeps it).
    let st = mh.status();
    let listed = st["osds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"].as_u64() == Some(primary as u64))
        .and_then(|o| o["slow_ops"].as_array().cloned())
        .unwrap_or_default();
    assert!(
        listed
            .iter()
            .any(|op| op["pg"].as_str() == Some(pg.as_str())
                && op["stage"].as_str() == Some("replica")
                && op["peer"].as_u64() == Some(replica as u64)
                && op["volume"].as_str() == Some("vol")),
        "slow ops of osd.{primary} in status: {listed:?}"
    );

    // Once the frozen OSD is marked down, the PGs it was in run undersized (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(20);
    let undersized = loop {
        let n: f64 = mh
            .osds
            .iter()
            .filter(|o| o.id != replica)
            .filter_map(|o| {
                let page = mh.0.osd_metrics(o.id).ok()?;
                sample(
                    &page,
                    &format!("basalt_osd_undersized_pgs{{osd=\"{}\"}}", o.id),
                )
            })
            .sum();
        if n >= 1.0 || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert!(
        undersized >= 1.0,
        "undersized PGs while osd.{replica} is down: {undersized}"
    );

    // fio finishes (writes resume once the frozen OSD is marked down), then the replica
    // returns and is recovered by list comparison.
    let out = wait_child(child, FIO_TIMEOUT);
    fio.check(&out);
    frozen.cont().expect("SIGCONT the replica");
    mh.wait_clean(Duration::from_secs(120));
    let recovered: f64 = mh
        .osds
        .iter()
        .filter_map(|o| {
            let page = mh.0.osd_metrics(o.id).ok()?;
            sample(
                &page,
                &format!(
                    "basalt_osd_push_objects_total{{osd=\"{}\",kind=\"recovery\"}}",
                    o.id
                ),
            )
        })
        .sum();
    assert!(
        recovered >= 1.0,
        "the returning replica's recovery pushed objects (kind=recovery): {recovered}"
    );
    watcher.kill().expect("stop status --watch");
    let _ = watcher.wait();
}
