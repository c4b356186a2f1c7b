//! `basalt status`: the cluster at a glance, like `ceph -s`.

use basalt_client::{Cluster, OsdStats};
use basalt_placement::PoolSpec;
use serde::{Deserialize, Serialize};

/// One OSD in a status report.
#[derive(Debug, Serialize, Deserialize)]
pub struct OsdStatus {
    pub id: u32,
    pub host: String,
    pub addr: String,
    pub up: bool,
    pub is_in: bool,
    /// None when the OSD did not answer.
    pub stats: Option<OsdStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The whole cluster in one report.
#[derive(Debug, Serialize, Deserialize)]
pub struct StatusReport {
    pub map_epoch: u32,
    pub osds: Vec<OsdStatus>,
    pub pools: Vec<PoolSpec>,
    pub pgs_total: u64,
    /// Every OSD of the acting set is up and the set has the pool's full size.
    pub pgs_active_clean: u64,
    /// At least min_size OSDs up, but not all.
    pub pgs_degraded: u64,
    /// Fewer than min_size OSDs up: I/O blocks.
    pub pgs_inactive: u64,
    pub volumes: u64,
    pub volume_bytes: u64,
}

/// Gather a report by asking every OSD for its store's counts.
pub async fn gather(cluster: &Cluster) -> Result<StatusReport, basalt_client::ClientError> {
    let map = cluster.map();
    let mut osds = Vec::with_capacity(map.osds.len());
    for o in map.osds.values() {
        let (stats, error) = match cluster.osd_stats(o.id).await {
            Ok(s) => (Some(s), None),
            Err(e) => (None, Some(e.to_string())),
        };
        osds.push(OsdStatus {
            id: o.id,
            host: o.host.clone(),
            addr: o.addr.clone(),
            up: o.up && error.is_none(),
            is_in: o.is_in,
            stats,
            error,
        });
    }
    let up = |id: &u32| osds.iter().any(|o| o.id == *id && o.up);
    let (mut total, mut clean, mut degraded, mut inactive) = (0, 0, 0, 0);
    for pool in map.pools.values() {
        for set in map.pgs.get(&pool.id).into_iter().flatten() {
            total += 1;
            let live = set.iter().filter(|id| up(id)).count() as u32;
            if live == pool.size && set.len() as u32 == pool.size {
                clean += 1;
            } else if live >= pool.min_size {
                degraded += 1;
            } else {
                inactive += 1;
            }
        }
    }
    let volumes = cluster.list_volumes().await?;
    Ok(StatusReport {
        map_epoch: map.epoch,
        osds,
        pools: map.pools.values().cloned().collect(),
        pgs_total: total,
        pgs_active_clean: clean,
        pgs_degraded: degraded,
        pgs_inactive: inactive,
        volumes: volumes.len() as u64,
        volume_bytes: volumes.iter().map(|v| v.size).sum(),
    })
}

/// Bytes in binary units with one decimal.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// Print the report for people.
pub fn print(r: &StatusReport) {
    let up = r.osds.iter().filter(|o| o.up).count();
    let is_in = r.osds.iter().filter(|o| o.is_in).count();
    let used: u64 = r
        .osds
        .iter()
        .filter_map(|o| o.stats)
        .map(|s| s.used_bytes)
        .sum();
    let raw: u64 = r
        .osds
        .iter()
        .filter_map(|o| o.stats)
        .map(|s| s.capacity_bytes)
        .sum();
    let objects: u64 = r
        .osds
        .iter()
        .filter_map(|o| o.stats)
        .map(|s| s.objects)
        .sum();
    let health = if r.pgs_active_clean == r.pgs_total && up == r.osds.len() {
        "HEALTH_OK"
    } else if r.pgs_inactive > 0 {
        "HEALTH_ERR"
    } else {
        "HEALTH_WARN"
    };
    println!("cluster:");
    println!("  health: {health}");
    println!("  map:    epoch {}", r.map_epoch);
    println!("  osds:   {} total, {up} up, {is_in} in", r.osds.len());
    println!("  pools:  {}", r.pools.len());
    let mut pg_line = format!("{} total, {} active+clean", r.pgs_total, r.pgs_active_clean);
    if r.pgs_degraded > 0 {
        pg_line.push_str(&format!(", {} active+degraded", r.pgs_degraded));
    }
    if r.pgs_inactive > 0 {
        pg_line.push_str(&format!(", {} inactive", r.pgs_inactive));
    }
    println!("  pgs:    {pg_line}");
    println!("data:");
    println!(
        "  volumes: {} ({} provisioned)",
        r.volumes,
        human_bytes(r.volume_bytes)
    );
    let pct = if raw > 0 {
        used as f64 * 100.0 / raw as f64
    } else {
        0.0
    };
    println!(
        "  usage:   {} used of {} raw ({pct:.1}%), {objects} object copies",
        human_bytes(used),
        human_bytes(raw)
    );
    println!("osds:");
    println!(
        "  {:<4} {:<12} {:<22} {:<10} {:>11} {:>11} {:>8}",
        "ID", "HOST", "ADDR", "STATE", "USED", "CAPACITY", "OBJECTS"
    );
    for o in &r.osds {
        let state = format!(
            "{},{}",
            if o.up { "up" } else { "down" },
            if o.is_in { "in" } else { "out" }
        );
        let (used, cap, objs) = match o.stats {
            Some(s) => (
                human_bytes(s.used_bytes),
                human_bytes(s.capacity_bytes),
                s.objects.to_string(),
            ),
            None => ("-".into(), "-".into(), "-".into()),
        };
        println!(
            "  {:<4} {:<12} {:<22} {:<10} {:>11} {:>11} {:>8}",
            o.id, o.host, o.addr, state, used, cap, objs
        );
        if let Some(e) = &o.error {
            println!("       error: {e}");
        }
    }
}
