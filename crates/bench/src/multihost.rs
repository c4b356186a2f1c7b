//! The multi-host part of `basalt bench nbd --hosts N`: a cluster of N hosts (network
//! namespaces, 2 OSDs each, stores on tmpfs, the test harness of crates/testcluster) with an
//! NBD gateway, and the failover pause.

use anyhow::{Context, Result};
use basalt_proto::size::format_size;
use basalt_testcluster::{BasaltCluster, Layout};
use bytes::Bytes;
use std::path::Path;
use std::time::{Duration, Instant};

/// Start the cluster, its daemons run from the `basalt` executable `exe`, with a volume
/// `bench` of `size_bytes`; returns it with the volume's NBD URI.
pub fn start(
    hosts: usize,
    data_root: &Path,
    size_bytes: u64,
    exe: std::path::PathBuf,
) -> Result<(BasaltCluster, String)> {
    std::fs::create_dir_all(data_root)?;
    let layout = Layout {
        hosts,
        osds_per_host: 2,
        pgs: 64,
        osd_capacity: "4G".into(),
        data_root: Some(data_root.to_path_buf()),
        ..Layout::default()
    };
    let cluster = BasaltCluster::start(layout, exe).context("start the multi-host cluster")?;
    cluster.cli_ok(&[
        "volume",
        "create",
        "bench",
        "--size",
        &format_size(size_bytes),
    ])?;
    let uri = cluster.uri("bench");
    Ok((cluster, uri))
}

/// NBD port of the node-local gateway (on the first storage host).
const NODE_LOCAL_PORT: u16 = 10_950;

/// A second gateway, on the first storage host, that reads from the replicas there
/// (`--read-policy localize`): the "node-local export"; returns it with the `bench`
/// volume's URI through it.
pub fn node_local_gateway(cluster: &BasaltCluster) -> Result<(basalt_testcluster::Proc, String)> {
    let host = cluster
        .hosts
        .first()
        .context("the cluster has no storage host")?;
    let proc = cluster.spawn_gateway_on(
        host,
        NODE_LOCAL_PORT,
        &["--read-policy", "localize", "--host", &host.name],
    )?;
    Ok((proc, cluster.uri_on(host, NODE_LOCAL_PORT, "bench")))
}

/// One failover measurement.
pub struct Failover {
    pub osd: u32,
    /// From the kill -9 of the primary to the completion of the first write issued after it.
    pub pause: Duration,
}

/// Longest a single failover may take before the measurement gives up.
const FAILOVER_LIMIT: Duration = Duration::from_secs(60);

/// `trials` times: write 4 KiB blocks at QD1 to one PG through the client library, kill -9
/// that PG's primary, and time until a write issued after the kill completes; then restart
/// the OSD and wait until the cluster is clean again.
pub fn failover_pauses(cluster: &BasaltCluster, trials: usize) -> Result<Vec<Failover>> {
    cluster.cli_ok(&["volume", "create", "failover", "--size", "64M"])?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let volume = rt.block_on(async {
        let access = crate::existing::ClusterAccess::new(&cluster.meta_url, &cluster.keyring);
        let client = crate::existing::open_cluster(&access).await?;
        anyhow::Ok(std::sync::Arc::new(client.open_volume("failover").await?))
    })?;
    let mut out = Vec::new();
    for trial in 0..trials {
        let primary = cluster.primary_of("failover", 0)?;
        // A writer that records (start, end) of each write, until told to stop.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, vol) = (stop.clone(), volume.clone());
        let writer = rt.spawn(async move {
            let mut log = Vec::new();
            let block = Bytes::from(vec![0x5a; 4096]);
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let start = Instant::now();
                vol.write(0, block.clone(), false).await?;
                log.push((start, Instant::now()));
            }
            anyhow::Ok(log)
        });
        std::thread::sleep(Duration::from_secs(2));
        let killed = Instant::now();
        cluster.osd(primary).proc.kill9()?;
        // Wait until a write issued after the kill completed (or the limit).
        let deadline = killed + FAILOVER_LIMIT;
        while Instant::now() < deadline && cluster.primary_of("failover", 0).ok() == Some(primary) {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let log = rt
            .block_on(async { tokio::time::timeout(FAILOVER_LIMIT, writer).await })
            .context("the writer did not finish")???;
        let resumed = log
            .iter()
            .find(|(start, _)| *start >= killed)
            .map(|(_, end)| *end)
            .context("no write completed after the kill")?;
        let pause = resumed - killed;
        eprintln!(
            "failover {}: osd.{primary} killed, writes resumed after {pause:.2?}",
            trial + 1
        );
        out.push(Failover {
            osd: primary,
            pause,
        });
        let p = &cluster.osd(primary).proc;
        p.restart()?;
        p.wait_for_line("serving on", basalt_testcluster::basalt::DAEMON_START)?;
        cluster.wait_clean(Duration::from_secs(120))?;
    }
    Ok(out)
}

/// The failover table of `basalt bench nbd --hosts N` (Markdown); empty when no failover
/// was measured (`--failovers 0`).
pub fn render(pauses: &[Failover]) -> String {
    if pauses.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nFailover pause: 4 KiB writes at QD1 to one PG through the client library; the PG's \
         primary is killed with SIGKILL; the pause runs from the kill to the completion of the \
         first write issued after it (peers report the refused connection; the monitor marks the \
         OSD down; the members' peer leases of 600 ms run out; the new primary peers). Target: \
         <= 1 s.\n\n\
         | Trial | Killed | Pause |\n|---:|---|---:|\n",
    );
    for (i, f) in pauses.iter().enumerate() {
        s.push_str(&format!(
            "| {} | osd.{} | {:.2} s |\n",
            i + 1,
            f.osd,
            f.pause.as_secs_f64()
        ));
    }
    let secs: Vec<f64> = pauses.iter().map(|f| f.pause.as_secs_f64()).collect();
    s.push_str(&format!(
        "| median | | {:.2} s |\n",
        crate::nbd::median(secs)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `--failovers 0` prints no failover table (it printed a median of 0.00 s).
    #[test]
    fn no_failovers_no_table() {
        assert_eq!(render(&[]), "");
        let one = render(&[Failover {
            osd: 3,
            pause: Duration::from_millis(640),
        }]);
        assert!(one.contains("| 1 | osd.3 | 0.64 s |"), "{one}");
        assert!(one.contains("| median | | 0.64 s |"), "{one}");
    }
}
