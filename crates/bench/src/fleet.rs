//! `basalt bench fleet`: how the control plane scales with the number of OSDs. For each
//! size, a cluster of real `basalt osd` processes in network namespaces (the harness of
//! crates/testcluster, one etcd, stores on tmpfs) is started, left idle, and measured: the
//! etcd requests the idle cluster makes per second (all of them, and per OSD), and the wall
//! time of `basalt status` (a whole CLI run: connect, read the map, ask every OSD).

use anyhow::{Context, Result};
use basalt_testcluster::{BasaltCluster, Layout};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// One cluster size, measured.
#[derive(Clone, Debug)]
pub struct FleetRow {
    pub osds: usize,
    pub hosts: usize,
    /// From the first OSD started to every PG active and clean.
    pub start: Duration,
    /// Messages etcd received per second while the cluster was idle: every gRPC message
    /// (reads, writes, watch and lease-keepalive messages).
    pub etcd_messages_per_sec: f64,
    /// The lease keep-alive messages among them (each OSD renews its liveness lease).
    pub keepalives_per_sec: f64,
    /// Messages per second by gRPC method, most first.
    pub by_method: Vec<(String, f64)>,
    /// Metadata calls per second of the OSD processes by kind (`get`, `keep_alive`, ...:
    /// their /metrics), summed over OSDs, most first.
    pub osd_calls: Vec<(String, f64)>,
    /// Wall time of each `basalt status --json` run.
    pub status: Vec<Duration>,
}

impl FleetRow {
    /// The median `status` time.
    pub fn status_median(&self) -> Duration {
        let mut v = self.status.clone();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }
}

/// Start a cluster of `osds` OSDs, at most `per_host` per host on at least three hosts
/// (rounded up to whole hosts; stores under `scratch`), from the
/// `basalt` executable `exe`; wait `idle` with nothing happening and count etcd's messages;
/// time `status_runs` runs of `basalt status`.
pub fn measure(
    osds: usize,
    per_host: usize,
    scratch: &Path,
    exe: &Path,
    idle: Duration,
    status_runs: usize,
) -> Result<FleetRow> {
    // At least three hosts (the pool keeps its 3 copies on distinct hosts).
    let hosts = osds.div_ceil(per_host.max(1)).max(3);
    let per_host = osds.div_ceil(hosts);
    let data_root = scratch.join(format!("fleet-{osds}"));
    std::fs::create_dir_all(&data_root)
        .with_context(|| format!("create {}", data_root.display()))?;
    let layout = Layout {
        hosts,
        osds_per_host: per_host,
        pgs: 128,
        osd_capacity: "1G".into(),
        data_root: Some(data_root.clone()),
        ..Layout::default()
    };
    let started = Instant::now();
    let cluster = BasaltCluster::start(layout, exe).context("start the cluster")?;
    let start = started.elapsed();
    cluster.cli_ok(&["volume", "create", "fleet", "--size", "1G"])?;
    // Let the creation's map updates and the first heartbeats settle.
    std::thread::sleep(Duration::from_secs(3));
    let etcd = format!("{}:2379", cluster.etcd_host.ip);
    let before = etcd_messages(&etcd)?;
    let calls_before = osd_meta_calls(&cluster)?;
    std::thread::sleep(idle);
    let after = etcd_messages(&etcd)?;
    let calls_after = osd_meta_calls(&cluster)?;
    let secs = idle.as_secs_f64();
    let mut status = Vec::with_capacity(status_runs);
    for _ in 0..status_runs {
        let t = Instant::now();
        cluster.status()?;
        status.push(t.elapsed());
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&data_root);
    Ok(FleetRow {
        osds: hosts * per_host,
        hosts,
        start,
        etcd_messages_per_sec: (after.0 - before.0) / secs,
        keepalives_per_sec: (after.1 - before.1) / secs,
        by_method: {
            let mut v: Vec<(String, f64)> = after
                .2
                .iter()
                .map(|(m, n)| (m.clone(), (n - before.2.get(m).unwrap_or(&0.0)) / secs))
                .filter(|(_, r)| *r > 0.0)
                .collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            v
        },
        status,
        osd_calls: {
            let mut v: Vec<(String, f64)> = calls_after
                .iter()
                .map(|(op, n)| {
                    (
                        op.clone(),
                        (n - calls_before.get(op).unwrap_or(&0.0)) / secs,
                    )
                })
                .filter(|(_, r)| *r > 0.0)
                .collect();
            v.sort_by(|a, b| b.1.total_cmp(&a.1));
            v
        },
    })
}

/// Metadata calls so far of every OSD process, by kind, summed.
fn osd_meta_calls(cluster: &BasaltCluster) -> Result<BTreeMap<String, f64>> {
    let mut calls: BTreeMap<String, f64> = BTreeMap::new();
    for o in &cluster.osds {
        let body = cluster.osd_metrics(o.id)?;
        for line in body.lines() {
            let Some(rest) = line.strip_prefix("basalt_meta_request_seconds_count{op=\"") else {
                continue;
            };
            let (Some(op), Some(n)) = (
                rest.split('"').next(),
                rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()),
            ) else {
                continue;
            };
            *calls.entry(op.to_string()).or_default() += n;
        }
    }
    Ok(calls)
}

/// etcd's gRPC messages received so far: (all, lease keep-alives, by method), from its
/// /metrics.
fn etcd_messages(addr: &str) -> Result<(f64, f64, BTreeMap<String, f64>)> {
    let body = crate::cpu::scrape(addr)?;
    let mut by_method: BTreeMap<String, f64> = BTreeMap::new();
    for line in body.lines() {
        let Some(rest) = line.strip_prefix("grpc_server_msg_received_total{") else {
            continue;
        };
        let Some(value) = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let method = rest
            .split("grpc_method=\"")
            .nth(1)
            .and_then(|m| m.split('"').next())
            .unwrap_or("?");
        *by_method.entry(method.to_string()).or_default() += value;
    }
    anyhow::ensure!(
        !by_method.is_empty(),
        "etcd's /metrics at {addr} has no grpc_server_msg_received_total"
    );
    let all = by_method.values().sum();
    let keepalive = by_method.get("LeaseKeepAlive").copied().unwrap_or(0.0);
    Ok((all, keepalive, by_method))
}

/// The table of a run (Markdown).
pub fn table(rows: &[FleetRow], idle: Duration) -> String {
    let mut out = format!(
        "| OSDs | hosts | start to clean | etcd msgs/s idle ({} s) | per OSD | of which \
         keep-alives/s | `status` median | `status` max |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        idle.as_secs()
    );
    for r in rows {
        let max = r.status.iter().max().copied().unwrap_or_default();
        out.push_str(&format!(
            "| {} | {} | {:.0} s | {:.1} | {:.2} | {:.1} | {:.0} ms | {:.0} ms |\n",
            r.osds,
            r.hosts,
            r.start.as_secs_f64(),
            r.etcd_messages_per_sec,
            r.etcd_messages_per_sec / r.osds.max(1) as f64,
            r.keepalives_per_sec,
            r.status_median().as_secs_f64() * 1000.0,
            max.as_secs_f64() * 1000.0,
        ));
    }
    out
}
