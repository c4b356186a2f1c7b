//! The cluster at a glance (`basalt status`, like `ceph -s`): every OSD's counts, every PG's
//! state, pools, volumes and images, gathered from the map, the metadata and the OSDs.

use crate::cluster::{Cluster, OsdStats};
use crate::error::ClientError;
use basalt_meta::schema::{AliveRecord, MonitorRecord, PgRecord, ALIVE_PREFIX, MONITOR_KEY};
use basalt_placement::{ClusterMap, PoolSpec};
use basalt_proto::slowop::SlowOp;
use basalt_proto::OsdId;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// One OSD in a status report.
#[derive(Debug, Serialize, Deserialize)]
pub struct OsdStatus {
    pub id: u32,
    pub host: String,
    /// Where its host stands (`zone=z1,rack=r2`; empty: not said).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
    /// Its device class (`nvme`, `ssd`, `hdd`, ...; empty: an older OSD).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub class: String,
    pub addr: String,
    pub up: bool,
    pub is_in: bool,
    /// The run of the OSD process the map knows (new at every start).
    #[serde(default)]
    pub incarnation: u64,
    /// How its store's I/O runs (`direct uring`, `buffered inline`, ...); empty if unknown.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub io: String,
    /// Down by its peers' reports but running, not yet known to have flushed its store:
    /// FLUSHes wait for it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unflushed: bool,
    /// The release and commit of its binary, from its liveness record (empty: down, or an
    /// older OSD).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The wire and store formats it speaks (0: unknown).
    #[serde(default)]
    pub wire: u8,
    #[serde(default)]
    pub store_format: u32,
    /// None when the OSD did not answer.
    pub stats: Option<OsdStats>,
    /// Operations the OSD reports slow: in flight, or finished within the last minute.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub slow_ops: Vec<SlowOpStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One slow operation of an OSD, as `basalt status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlowOpStatus {
    /// Unique per OSD run (tells a new slow op from one already seen).
    pub id: u64,
    /// `read`, `write`, `trim`, `delete`, ... (lower case opcode).
    pub op: String,
    /// A replica applying its primary's mutation (not a client request).
    #[serde(default)]
    pub replica: bool,
    /// `INODE:INDEX` in hex.
    pub object: String,
    /// The volume whose head the object belongs to, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume: Option<String>,
    pub pg: String,
    /// Where it is: `queued`, `layer chain`, `connect`, `store read`, `store write`,
    /// `wal flush`, `replica`, `push`, `chunks`, `running`.
    pub stage: String,
    /// The OSD the stage waits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    /// Time in flight (until the OSD's last scan when it finished since).
    pub age_ms: u64,
    pub in_flight: bool,
}

impl SlowOpStatus {
    fn of(op: &SlowOp) -> Self {
        Self {
            id: op.id,
            op: format!("{:?}", op.opcode).to_lowercase(),
            replica: op.replica,
            object: op.object.to_string(),
            volume: None,
            pg: op.pg.to_string(),
            stage: op.stage.label().to_string(),
            peer: op.peer,
            age_ms: op.age_ms,
            in_flight: op.in_flight,
        }
    }

    /// The stage with its peer: `replica osd.3`.
    pub fn stage_text(&self) -> String {
        match self.peer {
            Some(p) => format!("{} osd.{p}", self.stage),
            None => self.stage.clone(),
        }
    }
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
    /// Active with fewer OSDs than the pool's size.
    pub pgs_degraded: u64,
    /// Active, some replica still being brought up to date.
    #[serde(default)]
    pub pgs_recovering: u64,
    /// Acting set changed, not yet active under it (or incomplete: no complete copy up).
    #[serde(default)]
    pub pgs_peering: u64,
    /// Fewer than min_size OSDs up: I/O blocks.
    pub pgs_inactive: u64,
    /// Object copies still to recover, over every PG.
    #[serde(default)]
    pub degraded_objects: u64,
    /// Stripes of erasure-coded PGs whose newest version fewer than k live chunks hold:
    /// their I/O waits for the OSDs that hold the rest (see each PG's `unfound_waiting`).
    #[serde(default)]
    pub unfound_objects: u64,
    /// Who holds the monitor role.
    #[serde(default)]
    pub monitor: Option<String>,
    /// Every PG's state.
    #[serde(default)]
    pub pgs: Vec<PgStatus>,
    /// Rates over the sampling interval (absent when not sampled).
    #[serde(default)]
    pub rates: Option<Rates>,
    pub volumes: u64,
    /// Sum of the volumes' sizes (provisioned).
    pub volume_bytes: u64,
    /// Bytes the volumes' own layers hold (heads and snapshots, one copy).
    #[serde(default)]
    pub volume_used_bytes: u64,
    #[serde(default)]
    pub snapshots: u64,
    #[serde(default)]
    pub images: u64,
    /// Bytes the images hold (one copy).
    #[serde(default)]
    pub image_used_bytes: u64,
    /// Why the stored bytes of volumes and images are missing (0) from this report: some
    /// OSD did not answer in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_error: Option<String>,
    /// Why pools the cluster cannot place (made with `--allow-unplaceable`, or whose
    /// failure domains were lost since) are degraded or inactive, one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unplaceable: Vec<String>,
    /// PGs below min_size (I/O to them waits), one line each: which OSDs they wait for and
    /// what brings them back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub below_min_size: Vec<String>,
    /// PGs with unfound erasure-coded stripes (their I/O waits), one line each: the OSDs
    /// they wait for and the command that gives them up.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfound: Vec<String>,
    /// The cluster settings in force (ratios, mutes) the health checks use.
    #[serde(default)]
    pub settings: basalt_meta::schema::ClusterSettings,
    /// What is wrong, worst first (`crate::health`); the health word follows from it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<crate::health::HealthCheck>,
}

/// What the OSDs that answered hold, summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapacityTotals {
    pub used_bytes: u64,
    pub raw_bytes: u64,
    pub object_copies: u64,
}

impl StatusReport {
    /// The cluster's health, worded as `ceph -s` does: `HEALTH_ERR` when I/O blocks, data
    /// is unreadable or an OSD is full; `HEALTH_OK` when no check fails (every PG
    /// active+clean, every OSD up and below the near-full ratio, no operation slow, every
    /// pool placeable); else `HEALTH_WARN`. Muted checks do not count.
    pub fn health(&self) -> &'static str {
        crate::health::health_word(&self.health_checks())
    }

    /// The failing health checks of this report, as of now.
    pub fn health_checks(&self) -> Vec<crate::health::HealthCheck> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        crate::health::checks(self, &self.settings, now)
    }

    /// Used and raw bytes and object copies over the OSDs that answered.
    pub fn capacity(&self) -> CapacityTotals {
        self.osds
            .iter()
            .filter_map(|o| o.stats)
            .fold(CapacityTotals::default(), |t, s| CapacityTotals {
                used_bytes: t.used_bytes + s.used_bytes,
                raw_bytes: t.raw_bytes + s.capacity_bytes,
                object_copies: t.object_copies + s.objects,
            })
    }

    /// The slow operations still in flight, with their OSD's id.
    pub fn slow_ops_in_flight(&self) -> Vec<(u32, &SlowOpStatus)> {
        self.osds
            .iter()
            .flat_map(|o| {
                o.slow_ops
                    .iter()
                    .filter(|op| op.in_flight)
                    .map(move |op| (o.id, op))
            })
            .collect()
    }
}

/// Cluster-wide rates measured between two samples of every OSD's counters.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rates {
    pub interval_ms: u64,
    pub read_iops: f64,
    pub write_iops: f64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    /// Objects and bytes pushed to replicas per second (recovery).
    pub recovery_objects_per_sec: f64,
    pub recovery_bytes_per_sec: f64,
}

/// Rates between two samples taken `interval_ms` apart (OSDs in both samples only).
fn rates(a: &[OsdStatus], b: &[OsdStatus], interval_ms: u64) -> Rates {
    let secs = interval_ms.max(1) as f64 / 1000.0;
    let mut r = Rates {
        interval_ms,
        ..Rates::default()
    };
    for ob in b {
        let (Some(sb), Some(sa)) = (
            ob.stats,
            a.iter().find(|o| o.id == ob.id).and_then(|o| o.stats),
        ) else {
            continue;
        };
        let d = |x: u64, y: u64| x.saturating_sub(y) as f64 / secs;
        r.read_iops += d(sb.reads, sa.reads);
        r.write_iops += d(sb.writes, sa.writes);
        r.read_bytes_per_sec += d(sb.read_bytes, sa.read_bytes);
        r.write_bytes_per_sec += d(sb.write_bytes, sa.write_bytes);
        r.recovery_objects_per_sec += d(sb.pushed_objects, sa.pushed_objects);
        r.recovery_bytes_per_sec += d(sb.pushed_bytes, sa.pushed_bytes);
    }
    r
}

/// One PG in a status report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PgStatus {
    pub pg: String,
    /// "active+clean", "active+recovering", "active+degraded", "peering" or "inactive".
    pub state: String,
    pub acting: Vec<u32>,
    /// Interval of the last activation (0: never activated).
    pub interval: u32,
    pub degraded_objects: u64,
    /// Erasure-coded PGs: stripes whose newest version fewer than k live chunks hold
    /// (their I/O waits; `basalt pg mark-unfound-lost` gives them up).
    #[serde(default)]
    pub unfound_objects: u64,
    /// The OSDs those stripes wait for (empty with unfound stripes: none is known to hold
    /// their missing chunks).
    #[serde(default)]
    pub unfound_waiting: Vec<u32>,
}

/// Every PG record, by PG key suffix ("POOL.INDEX").
pub async fn pg_records(cluster: &Cluster) -> Result<HashMap<String, PgRecord>, ClientError> {
    crate::osd_admin::read_pg_records(cluster.meta().as_ref()).await
}

/// The state of every PG, from the map (who should serve it) and the PG records (what its
/// primary last activated and which copies it knows complete).
pub fn pg_states(map: &ClusterMap, records: &HashMap<String, PgRecord>) -> Vec<PgStatus> {
    let mut out = Vec::new();
    for pg in map.all_pgs() {
        let pool = &map.pools[&pg.pool];
        let acting = map.acting(pg).map(|a| a.to_vec()).unwrap_or_default();
        let rec = records.get(&format!("{}.{}", pg.pool, pg.index));
        let incarnation = |id: u32| map.osds.get(&id).map(|o| o.incarnation);
        // The record is of the current interval when its primary activated that interval
        // (the map names the epoch that began it).
        let current =
            rec.is_some_and(|r| r.epoch == map.interval(pg) && acting.first() == Some(&r.primary));
        // Complete copies that are still the same run of their OSD.
        let complete = rec.map_or(0, |r| {
            r.complete
                .iter()
                .filter(|c| acting.contains(&c.osd) && Some(c.incarnation) == incarnation(c.osd))
                .count()
        });
        let state = if (acting.len() as u32) < pool.min_size {
            "inactive"
        } else if !current {
            "peering"
        } else if complete < acting.len() {
            "active+recovering"
        } else if (acting.len() as u32) < pool.size {
            "active+degraded"
        } else {
            "active+clean"
        };
        out.push(PgStatus {
            pg: pg.to_string(),
            state: state.into(),
            acting,
            interval: rec.map(|r| r.epoch).unwrap_or(0),
            degraded_objects: rec
                .filter(|_| current)
                .map(|r| r.degraded_objects)
                .unwrap_or(0),
            unfound_objects: rec
                .filter(|_| current)
                .map(|r| r.unfound_objects)
                .unwrap_or(0),
            unfound_waiting: rec
                .filter(|r| current && r.unfound_objects > 0)
                .map(|r| r.unfound_waiting.clone())
                .unwrap_or_default(),
        });
    }
    out
}

/// Longest wait for one OSD's counts.
const STAT_TIMEOUT_MS: u64 = 2_000;
/// Longest wait for the stored bytes of volumes and images (a USAGE request to every OSD).
const USAGE_TIMEOUT_MS: u64 = 3_000;

/// Gather a report; with `interval_ms` > 0, sample every OSD's counters twice that far
/// apart and report client and recovery rates.
pub async fn gather_with_rates(
    cluster: &Cluster,
    interval_ms: u64,
) -> Result<StatusReport, ClientError> {
    if interval_ms == 0 {
        return gather(cluster).await;
    }
    let first = osd_statuses(cluster).await;
    tokio::time::sleep(std::time::Duration::from_millis(interval_ms)).await;
    let mut report = gather(cluster).await?;
    report.rates = Some(rates(&first, &report.osds, interval_ms));
    Ok(report)
}

/// Every OSD of the map, with the counts of those that are up; asked all at once, so one
/// OSD that does not answer costs [`STAT_TIMEOUT_MS`] once, not once per OSD after it.
async fn osd_statuses(cluster: &Cluster) -> Vec<OsdStatus> {
    let map = cluster.map();
    let mut osds =
        futures::future::join_all(map.osds.values().map(|o| osd_status(cluster, o))).await;
    // Versions come from the liveness records (an unreadable list leaves them unknown).
    let alive = cluster.meta().list(ALIVE_PREFIX).await.unwrap_or_default();
    for (key, bytes, _) in alive {
        let Some(id) = key[ALIVE_PREFIX.len()..].parse::<u32>().ok() else {
            continue;
        };
        let Ok(rec) = serde_json::from_slice::<AliveRecord>(&bytes) else {
            continue;
        };
        if let Some(o) = osds
            .iter_mut()
            .find(|o| o.id == id && o.incarnation == rec.incarnation)
        {
            o.version = rec.version;
            o.wire = rec.wire;
            o.store_format = rec.store_format;
        }
    }
    osds
}

/// One OSD of the map with its STAT answer (bounded by [`STAT_TIMEOUT_MS`]) when it is up.
async fn osd_status(cluster: &Cluster, o: &basalt_placement::OsdInfo) -> OsdStatus {
    let (stats, slow_ops, error) = if !o.up {
        (None, Vec::new(), None)
    } else {
        let stat = cluster.osd_stats(o.id);
        match tokio::time::timeout(std::time::Duration::from_millis(STAT_TIMEOUT_MS), stat).await {
            Ok(Ok((s, slow))) => (Some(s), slow.iter().map(SlowOpStatus::of).collect(), None),
            Ok(Err(e)) => (None, Vec::new(), Some(e.to_string())),
            Err(_) => (
                None,
                Vec::new(),
                Some(format!("no answer in {STAT_TIMEOUT_MS} ms")),
            ),
        }
    };
    OsdStatus {
        id: o.id,
        host: o.host.clone(),
        location: basalt_placement::format_location(&o.location),
        class: o.class.clone(),
        addr: o.addr.clone(),
        up: o.up && error.is_none(),
        is_in: o.is_in,
        incarnation: o.incarnation,
        io: o.io.clone(),
        unflushed: o.unflushed,
        version: String::new(),
        wire: 0,
        store_format: 0,
        stats,
        slow_ops,
        error,
    }
}

/// Gather a report by asking every OSD that is up for its store's counts.
pub async fn gather(cluster: &Cluster) -> Result<StatusReport, ClientError> {
    gather_with(cluster, true).await
}

/// A report for `status --watch`: everything events are made of, without the stored bytes
/// of volumes and images (a USAGE request to every OSD, which a frozen OSD would hold for
/// its whole bound at every poll).
pub async fn gather_for_events(cluster: &Cluster) -> Result<StatusReport, ClientError> {
    gather_with(cluster, false).await
}

async fn gather_with(cluster: &Cluster, with_usage: bool) -> Result<StatusReport, ClientError> {
    let map = cluster.map();
    let mut osds = osd_statuses(cluster).await;
    let records = pg_records(cluster).await?;
    let pgs = pg_states(&map, &records);
    let count = |state: &str| pgs.iter().filter(|p| p.state == state).count() as u64;
    let monitor = cluster
        .meta()
        .get(MONITOR_KEY)
        .await?
        .and_then(|(v, _)| serde_json::from_slice::<MonitorRecord>(&v).ok())
        .map(|m| m.holder);
    let volumes = cluster.list_volumes().await?;
    let heads: HashMap<String, &str> = volumes
        .iter()
        .map(|v| (format!("{:x}", v.id), v.name.as_str()))
        .collect();
    for op in osds.iter_mut().flat_map(|o| o.slow_ops.iter_mut()) {
        let inode = op.object.split(':').next().unwrap_or_default();
        op.volume = heads.get(inode).map(|n| n.to_string());
    }
    // Usage asks every OSD that is up: one that is frozen (not yet marked down) would hold
    // the report for the client's whole retry deadline, so it is bounded and left out.
    let bound = std::time::Duration::from_millis(USAGE_TIMEOUT_MS);
    let mut usage_error = (!with_usage).then(|| "not gathered".to_string());
    let usage = match usage_error {
        Some(_) => Vec::new(),
        None => match tokio::time::timeout(bound, cluster.volume_usage(&volumes)).await {
            Ok(usage) => usage?,
            Err(_) => {
                usage_error = Some(format!("no answer in {USAGE_TIMEOUT_MS} ms"));
                Vec::new()
            }
        },
    };
    let images = cluster.list_images().await?;
    let image_inodes: Vec<_> = images.iter().map(|i| i.inode).collect();
    let image_usage = match usage_error {
        Some(_) => Vec::new(),
        None => match tokio::time::timeout(bound, cluster.layer_usage(&image_inodes)).await {
            Ok(usage) => usage?,
            Err(_) => {
                usage_error = Some(format!("no answer in {USAGE_TIMEOUT_MS} ms"));
                Vec::new()
            }
        },
    };
    let unfound = unfound_lines(&map, &pgs);
    Ok(StatusReport {
        map_epoch: map.epoch,
        osds,
        pools: map.pools.values().cloned().collect(),
        pgs_total: pgs.len() as u64,
        pgs_active_clean: count("active+clean"),
        pgs_degraded: count("active+degraded"),
        pgs_recovering: count("active+recovering"),
        pgs_peering: count("peering"),
        pgs_inactive: count("inactive"),
        degraded_objects: pgs.iter().map(|p| p.degraded_objects).sum(),
        unfound_objects: pgs.iter().map(|p| p.unfound_objects).sum(),
        monitor,
        pgs,
        rates: None,
        volumes: volumes.len() as u64,
        volume_bytes: volumes.iter().map(|v| v.size).sum(),
        volume_used_bytes: usage.iter().map(|u| u.total_bytes).sum(),
        snapshots: volumes.iter().map(|v| v.snapshots.len() as u64).sum(),
        images: images.len() as u64,
        image_used_bytes: image_usage.iter().map(|u| u.bytes).sum(),
        usage_error,
        unplaceable: pool_shortfalls(&map),
        below_min_size: below_min_size(&map),
        unfound,
        settings: crate::settings::load(cluster.meta().as_ref()).await?,
        checks: Vec::new(),
    }
    .with_checks())
}

impl StatusReport {
    /// The report with its health checks filled in (for JSON readers).
    fn with_checks(mut self) -> Self {
        self.checks = self.health_checks();
        self
    }
}

/// For each PG with unfound stripes: how many, the OSDs they wait for (with whether each
/// is up now: an up one is being listed again), and the command that gives them up.
pub fn unfound_lines(map: &ClusterMap, pgs: &[PgStatus]) -> Vec<String> {
    let mut out = Vec::new();
    let mut more = 0usize;
    for p in pgs.iter().filter(|p| p.unfound_objects > 0) {
        if out.len() == BELOW_MIN_SIZE_LINES {
            more += 1;
            continue;
        }
        let head = format!(
            "pg {}: {} erasure-coded stripes lack chunks of their newest write",
            p.pg, p.unfound_objects
        );
        let give_up = format!(
            "`basalt pg mark-unfound-lost {}` gives them up, losing those writes",
            p.pg
        );
        if p.unfound_waiting.is_empty() {
            out.push(format!(
                "{head}; every OSD that could hold them answered: the chunks are gone ({give_up})"
            ));
            continue;
        }
        let names: Vec<String> = p
            .unfound_waiting
            .iter()
            .map(|id| match map.osds.get(id) {
                Some(o) if o.up => format!("osd.{id} (up)"),
                _ => format!("osd.{id} (down)"),
            })
            .collect();
        out.push(format!(
            "{head}: their I/O waits for {} to return ({give_up})",
            names.join(", ")
        ));
    }
    if more > 0 {
        out.push(format!("... and {more} more PGs with unfound stripes"));
    }
    out
}

/// Lines shown at most for PGs below min_size (the rest are counted).
const BELOW_MIN_SIZE_LINES: usize = 16;

/// For each PG of `map` with fewer than min_size OSDs up: how many are up, the placed OSDs
/// that are down, and what brings it back (those OSDs returning, or marking them out so the
/// PG is placed elsewhere). Client I/O to such a PG waits (gateways without an I/O timeout
/// wait for ever, as a hard-mounted disk does).
pub fn below_min_size(map: &ClusterMap) -> Vec<String> {
    let mut out = Vec::new();
    let mut more = 0usize;
    for pg in map.all_pgs() {
        let pool = &map.pools[&pg.pool];
        let up = map.acting(pg).map(|a| a.len()).unwrap_or(0);
        if up as u32 >= pool.min_size {
            continue;
        }
        if out.len() == BELOW_MIN_SIZE_LINES {
            more += 1;
            continue;
        }
        let down: Vec<OsdId> = map
            .placement(pg)
            .unwrap_or_default()
            .iter()
            .copied()
            .filter(|id| map.osds.get(id).is_none_or(|o| !o.up))
            .collect();
        let head = format!(
            "pg {pg}: {up} of {} OSDs up, min_size {}: I/O waits",
            pool.size, pool.min_size
        );
        if down.is_empty() {
            out.push(format!(
                "{head}: the pool cannot place enough OSDs (see placement)"
            ));
            continue;
        }
        let names: Vec<String> = down.iter().map(|id| format!("osd.{id}")).collect();
        let out_cmd: Vec<String> = down
            .iter()
            .map(|id| format!("basalt osd out {id}"))
            .collect();
        out.push(format!(
            "{head} for {} to return (or `{}` to place it elsewhere and rebuild it from the \
             copies left)",
            names.join(", "),
            out_cmd.join("; ")
        ));
    }
    if more > 0 {
        out.push(format!("... and {more} more PGs below min_size"));
    }
    out
}

/// For each pool of `map` its OSDs counted in placement cannot place, why.
fn pool_shortfalls(map: &ClusterMap) -> Vec<String> {
    let shape = crate::pool_spec::ClusterShape::of_map(map);
    map.pools
        .values()
        .filter_map(|p| shape.map_shortfall(p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report of `osds` (id, up, used bytes), everything else healthy.
    fn report(osds: &[(u32, bool, u64)]) -> StatusReport {
        let osds: Vec<serde_json::Value> = osds
            .iter()
            .map(|&(id, up, used)| {
                serde_json::json!({
                    "id": id, "host": "h", "addr": "a", "up": up, "is_in": true,
                    "stats": {"capacity_bytes": 1000, "used_bytes": used, "slots_total": 0,
                              "slots_free": 0, "objects": 2},
                })
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "map_epoch": 1, "osds": osds, "pools": [], "pgs_total": 8,
            "pgs_active_clean": 8, "pgs_degraded": 0, "pgs_inactive": 0, "volumes": 0,
            "volume_bytes": 0,
        }))
        .expect("a minimal report parses")
    }

    #[test]
    fn health_is_ok_warn_or_err_as_ceph_words_it() {
        // Goal: OK only when everything is up and clean; a down OSD warns; blocked I/O or
        // unreadable data is an error, whatever else holds.
        let mut r = report(&[(0, true, 10), (1, true, 20)]);
        assert_eq!(r.health(), "HEALTH_OK");
        assert_eq!(
            r.capacity(),
            CapacityTotals {
                used_bytes: 30,
                raw_bytes: 2000,
                object_copies: 4
            }
        );
        r.osds[1].up = false;
        assert_eq!(r.health(), "HEALTH_WARN");
        r.osds[1].up = true;
        r.unplaceable.push("pool x needs 3 hosts".into());
        assert_eq!(r.health(), "HEALTH_WARN");
        r.unfound_objects = 1;
        assert_eq!(r.health(), "HEALTH_ERR");
    }

    /// OSD `id` of a test map, on a host of its own, in.
    fn osd_info(id: u32, up: bool) -> basalt_placement::OsdInfo {
        basalt_placement::OsdInfo {
            id,
            host: format!("h{id}"),
            addr: format!("10.0.0.{id}:7000"),
            weight: 1,
            up,
            is_in: true,
            incarnation: 1,
            io: String::new(),
            up_from: 1,
            unflushed: false,
            ..Default::default()
        }
    }

    /// Goal: a PG with unfound stripes is named with the OSDs they wait for and the
    /// command that gives them up; one with nothing to wait for says the chunks are gone.
    #[test]
    fn unfound_stripes_name_the_osds_they_wait_for() {
        let mut map = ClusterMap::default();
        for (id, up) in [(3u32, false), (4, true)] {
            map.osds.insert(id, osd_info(id, up));
        }
        let pg = |name: &str, unfound: u64, waiting: Vec<u32>| PgStatus {
            pg: name.into(),
            state: "active+recovering".into(),
            acting: vec![0, 1],
            interval: 5,
            degraded_objects: 0,
            unfound_objects: unfound,
            unfound_waiting: waiting,
        };
        let pgs = [
            pg("1.0", 0, vec![]),
            pg("1.1", 2, vec![3, 4]),
            pg("1.2", 1, vec![]),
        ];
        let lines = unfound_lines(&map, &pgs);
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines[0].starts_with("pg 1.1: 2 erasure-coded stripes")
                && lines[0].contains("waits for osd.3 (down), osd.4 (up) to return")
                && lines[0].contains("`basalt pg mark-unfound-lost 1.1` gives them up"),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("pg 1.2: 1 erasure-coded")
                && lines[1].contains("the chunks are gone")
                && lines[1].contains("mark-unfound-lost 1.2"),
            "{}",
            lines[1]
        );
    }

    /// Goal: a PG below min_size is named with the OSDs it waits for and what brings it
    /// back; PGs at min_size or above are not.
    #[test]
    fn below_min_size_names_the_missing_osds() {
        let mut map = ClusterMap::default();
        for id in 0..3u32 {
            map.osds.insert(id, osd_info(id, true));
        }
        map.pools.insert(
            1,
            PoolSpec {
                id: 1,
                name: "rbd".into(),
                size: 3,
                min_size: 2,
                pg_count: 4,
                failure_domain: basalt_placement::FailureDomain::Host,
                object_size: 128 << 10,
                ec: None,
                device_class: None,
                pg_count_since: 0,
                pg_count_before: 0,
            },
        );
        map.recompute();
        assert!(below_min_size(&map).is_empty());
        map.osds.get_mut(&1).unwrap().up = false;
        map.update_acting();
        assert!(below_min_size(&map).is_empty(), "2 of 3 up is min_size");
        map.osds.get_mut(&2).unwrap().up = false;
        map.update_acting();
        let lines = below_min_size(&map);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(
            lines[0].contains("1 of 3 OSDs up, min_size 2")
                && lines[0].contains("osd.1, osd.2 to return")
                && lines[0].contains("basalt osd out 1; basalt osd out 2"),
            "{}",
            lines[0]
        );
    }
}
