//! Taking and holding the monitor role, and the holder's loop.

use crate::derive::{derive_map, down_by_reports, DownClock, ReportSettle, Reports};
use basalt_meta::schema::{
    parse_failure_key, AliveRecord, ClusterSettings, FailureReport, MonitorRecord, OsdRecord,
    PoolRecord, ALIVE_PREFIX, FAILURES_PREFIX, MAP_KEY, MONITOR_KEY, OSDS_PREFIX, POOLS_PREFIX,
    SETTINGS_KEY,
};
use basalt_meta::{LeaseId, MetaError, MetaStore};
use basalt_placement::ClusterMap;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How a monitor candidate behaves.
#[derive(Clone, Debug)]
pub struct MonitorConfig {
    /// Names this candidate in `/basalt/monitor` ("osd.3 on host1").
    pub holder: String,
    /// TTL of the role's lease: another candidate takes over this long after the holder
    /// stops renewing.
    pub lease_ttl_secs: u64,
    /// How long an OSD may be down before it is marked out and its data re-replicated.
    pub out_after_secs: u64,
    /// How often the holder re-derives the map.
    pub tick_ms: u64,
    /// Distinct OSDs that must report an OSD unreachable before it is marked down ahead of
    /// its lease (fewer when fewer other OSDs are up).
    pub min_down_reporters: usize,
    /// How long an OSD must stay reported (by enough peers) before it is marked down: the
    /// reports of both sides of a partition arrive within it ([`ReportSettle`]).
    pub report_settle_ms: u64,
}

impl MonitorConfig {
    pub fn new(holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            lease_ttl_secs: 3,
            out_after_secs: 600,
            tick_ms: 200,
            min_down_reporters: 2,
            report_settle_ms: 300,
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Run a monitor candidate until `stop`: campaign for the role, and while holding it keep
/// the map up to date. Never returns an error: metadata outages are waited out.
///
/// A candidate that does not hold the role watches the role's key and campaigns when it
/// changes (and every [`STANDBY_RECHECK`] in any case), so standby
/// candidates cost the metadata store nothing while the cluster is idle, however many OSD
/// processes run one. Without a watch it looks every tick.
pub async fn run(meta: Arc<dyn MetaStore>, config: MonitorConfig, mut stop: watch::Receiver<bool>) {
    let tick = Duration::from_millis(config.tick_ms.max(10));
    let mut role: Option<Changes> = None;
    // Bound: one campaign per role change, per recheck or per tick until stopped.
    while !*stop.borrow() {
        // Watch first: a holder that leaves between the campaign and the wait is seen.
        let watching = match role.take() {
            Some(r) if r.complete() => r,
            _ => Changes::open(meta.as_ref(), &[MONITOR_KEY]).await,
        };
        match campaign(meta.as_ref(), &config).await {
            Ok(Some(lease)) => {
                drop(watching);
                tracing::info!(holder = %config.holder, "took the monitor role");
                lead(meta.as_ref(), &config, lease, &mut stop).await;
                let _ = meta.revoke_lease(lease).await;
                continue;
            }
            Ok(None) => {}
            Err(e) => tracing::debug!("monitor campaign: {e}"),
        }
        let watching = role.insert(watching);
        let wait = if watching.complete() {
            STANDBY_RECHECK
        } else {
            tick
        };
        tokio::select! {
            biased;
            _ = stop.changed() => {}
            _ = watching.next() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// How often a standby candidate with its watch in place looks at the role anyway (a
/// safety net: the watch reports the holder leaving at once).
const STANDBY_RECHECK: Duration = Duration::from_secs(30);

/// Watches on a few keys or prefixes, merged: [`Changes::next`] completes at the next change
/// under any of them. A watch that could not be set up, or that ended (a slow consumer, a
/// metadata outage), makes the set incomplete: callers then look every tick instead.
struct Changes {
    rx: tokio::sync::mpsc::Receiver<()>,
    lost: Arc<std::sync::atomic::AtomicBool>,
    forwarders: Vec<tokio::task::JoinHandle<()>>,
}

impl Changes {
    async fn open(meta: &dyn MetaStore, prefixes: &[&str]) -> Self {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut forwarders = Vec::new();
        for prefix in prefixes {
            let Ok(mut events) = meta.watch_prefix(prefix, 0).await else {
                lost.store(true, std::sync::atomic::Ordering::Relaxed);
                continue;
            };
            let (tx, lost) = (tx.clone(), lost.clone());
            forwarders.push(tokio::spawn(async move {
                // Bound: one pass per event, until the watch ends.
                while let Some(Ok(_)) = events.recv().await {
                    // A change already waiting to be seen covers this one too.
                    let _ = tx.try_send(());
                }
                lost.store(true, std::sync::atomic::Ordering::Relaxed);
                let _ = tx.try_send(());
            }));
        }
        Self {
            rx,
            lost,
            forwarders,
        }
    }

    /// Every watch is in place.
    fn complete(&self) -> bool {
        !self.lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The next change (never, once every watch ended: callers also wait on a timer).
    async fn next(&mut self) {
        if self.rx.recv().await.is_none() {
            std::future::pending::<()>().await;
        }
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        for f in &self.forwarders {
            f.abort();
        }
    }
}

/// Try once to take the role. Some(lease) when taken.
async fn campaign(
    meta: &dyn MetaStore,
    config: &MonitorConfig,
) -> Result<Option<LeaseId>, MetaError> {
    if meta.get(MONITOR_KEY).await?.is_some() {
        return Ok(None);
    }
    let lease = meta.grant_lease(config.lease_ttl_secs).await?;
    let record = MonitorRecord {
        holder: config.holder.clone(),
        since: now_secs(),
    };
    let value = serde_json::to_vec(&record).expect("record serialises");
    match meta.create_with_lease(MONITOR_KEY, value, lease).await {
        Ok(Some(_)) => Ok(Some(lease)),
        Ok(None) => {
            let _ = meta.revoke_lease(lease).await;
            Ok(None)
        }
        Err(e) => {
            let _ = meta.revoke_lease(lease).await;
            Err(e)
        }
    }
}

/// Hold the role: renew the lease, and update the map whenever a record it derives from
/// changes (OSDs, liveness, failure reports, pools, settings: watched), when a timer of its
/// own ends (a report settling, a down OSD's out timer), and every few seconds in any case;
/// every tick when a watch is missing. Until the lease cannot be renewed for half its TTL
/// (another candidate may take over after the whole TTL) or stop.
async fn lead(
    meta: &dyn MetaStore,
    config: &MonitorConfig,
    lease: LeaseId,
    stop: &mut watch::Receiver<bool>,
) {
    let tick = Duration::from_millis(config.tick_ms.max(10));
    let renew_every = Duration::from_millis((config.lease_ttl_secs * 1000 / 3).max(100));
    let give_up_after = Duration::from_millis(config.lease_ttl_secs * 1000 / 2);
    let started = Instant::now();
    let mut renewed = Instant::now();
    let mut last_renew_try = Instant::now();
    let mut clock = DownClock::default();
    let mut settle = ReportSettle::default();
    // Watched before the first read, so no change falls between a read and its watch.
    let mut changes = Changes::open(meta, &WATCHED).await;
    let mut next_update = Instant::now();
    // Bound: one round per change, timer or tick until the role is lost or the candidate
    // stops.
    loop {
        if last_renew_try.elapsed() >= renew_every {
            last_renew_try = Instant::now();
            match meta.keep_alive(lease).await {
                Ok(_) => renewed = Instant::now(),
                Err(MetaError::LeaseNotFound { .. }) => {
                    tracing::warn!(holder = %config.holder, "lost the monitor role (lease expired)");
                    return;
                }
                Err(e) => tracing::debug!("monitor lease renewal: {e}"),
            }
        }
        if renewed.elapsed() > give_up_after {
            tracing::warn!(holder = %config.holder, "giving up the monitor role: metadata unreachable");
            return;
        }
        if !changes.complete() {
            // Set the watches up again (the records are read right after).
            changes = Changes::open(meta, &WATCHED).await;
            next_update = Instant::now();
        }
        if Instant::now() >= next_update {
            let now_ms = started.elapsed().as_millis() as u64;
            let mut wait = if changes.complete() {
                IDLE_RECHECK.max(tick)
            } else {
                tick
            };
            match update_map(meta, config, &mut clock, &mut settle, now_ms).await {
                Ok(Some(due_ms)) => {
                    wait = wait.min(Duration::from_millis(due_ms.saturating_sub(now_ms)));
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!("monitor update: {e}");
                    wait = tick;
                }
            }
            next_update = Instant::now() + wait;
        }
        let renew_at = last_renew_try + renew_every;
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = changes.next() => next_update = Instant::now(),
            _ = tokio::time::sleep_until(next_update.min(renew_at)) => {}
        }
    }
}

/// What the holder watches: every record the map is derived from.
const WATCHED: [&str; 5] = [
    OSDS_PREFIX,
    ALIVE_PREFIX,
    FAILURES_PREFIX,
    POOLS_PREFIX,
    SETTINGS_KEY,
];

/// How often the holder derives the map with its watches in place and nothing changing:
/// a safety net only (a lost event costs at most this long).
const IDLE_RECHECK: Duration = Duration::from_secs(5);

fn decode_all<T: serde::de::DeserializeOwned>(
    entries: Vec<(String, Vec<u8>, u64)>,
) -> Vec<(String, T)> {
    entries
        .into_iter()
        .filter_map(|(k, v, _)| match serde_json::from_slice(&v) {
            Ok(t) => Some((k, t)),
            Err(e) => {
                tracing::warn!("ignoring unreadable record {k}: {e}");
                None
            }
        })
        .collect()
}

/// Read the records, derive the map, write it if it changed. Returns when the map may
/// next change with no record changing: a reported OSD's settle time ends, or a down OSD's
/// out timer (None: neither is running).
async fn update_map(
    meta: &dyn MetaStore,
    config: &MonitorConfig,
    clock: &mut DownClock,
    settle: &mut ReportSettle,
    now_ms: u64,
) -> Result<Option<u64>, MetaError> {
    // The cluster's noout flag (maintenance) stops the out timer. An unreadable settings
    // record is taken as noout: marking OSDs out moves data, which waiting never loses.
    let noout = match meta.get(SETTINGS_KEY).await? {
        None => false,
        Some((bytes, _)) => serde_json::from_slice::<ClusterSettings>(&bytes)
            .map(|s| s.noout)
            .unwrap_or_else(|e| {
                tracing::warn!("unreadable cluster settings {SETTINGS_KEY}, acting as noout: {e}");
                true
            }),
    };
    let out_after_ms = (!noout).then_some(config.out_after_secs * 1000);
    let osds: Vec<OsdRecord> = decode_all(meta.list(OSDS_PREFIX).await?)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let mut alive: BTreeMap<u32, AliveRecord> = decode_all(meta.list(ALIVE_PREFIX).await?)
        .into_iter()
        .filter_map(|(k, r)| k[ALIVE_PREFIX.len()..].parse().ok().map(|id| (id, r)))
        .collect();
    let mut reports = Reports::new();
    for (key, report) in decode_all::<FailureReport>(meta.list(FAILURES_PREFIX).await?) {
        if let Some((target, reporter)) = parse_failure_key(&key) {
            reports.entry(target).or_default().insert(reporter, report);
        }
    }
    // Down by reports: treated as if its liveness record were gone.
    let candidates = down_by_reports(&alive, &reports, config.min_down_reporters);
    let (reported, ripens_ms) = settle.ripe(&candidates, now_ms, config.report_settle_ms);
    let reported: BTreeMap<u32, AliveRecord> = reported
        .iter()
        .filter_map(|id| alive.remove_entry(id))
        .collect();
    let pools: Vec<PoolRecord> = decode_all(meta.list(POOLS_PREFIX).await?)
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    let (current, rev) = match meta.get(MAP_KEY).await? {
        Some((bytes, rev)) => match serde_json::from_slice::<ClusterMap>(&bytes) {
            Ok(m) => (m, rev),
            Err(e) => {
                return Err(MetaError::Corrupt {
                    path: MAP_KEY.into(),
                    reason: e.to_string(),
                })
            }
        },
        None => (ClusterMap::default(), 0),
    };
    for id in reported
        .keys()
        .filter(|id| current.osds.get(id).is_some_and(|o| o.up))
    {
        let by: Vec<String> = reports[id].keys().map(|r| format!("osd.{r}")).collect();
        tracing::warn!("marking osd.{id} down: unreachable from {}", by.join(", "));
    }
    let Some(next) = derive_map(
        &current,
        &osds,
        &alive,
        &reported,
        &pools,
        clock,
        now_ms,
        out_after_ms,
    ) else {
        let out_ms = clock.next_out(&current, out_after_ms);
        return Ok(earliest(ripens_ms, out_ms));
    };
    let out_ms = clock.next_out(&next, out_after_ms);
    let value = serde_json::to_vec(&next).expect("map serialises");
    if meta.compare_and_swap(MAP_KEY, rev, value).await?.is_some() {
        let up = next.osds.values().filter(|o| o.up).count();
        let inn = next.osds.values().filter(|o| o.is_in).count();
        tracing::info!(
            epoch = next.epoch,
            osds = next.osds.len(),
            up,
            r#in = inn,
            "published map"
        );
    }
    Ok(earliest(ripens_ms, out_ms))
}

/// The earlier of two optional times.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::{EmbeddedMeta, MetaLatency, MetaOp, TimedMeta};

    /// Metadata calls of one candidate that read or write records (leases aside).
    fn record_calls(l: &MetaLatency) -> u64 {
        [
            MetaOp::Get,
            MetaOp::List,
            MetaOp::CompareAndSwap,
            MetaOp::Put,
        ]
        .iter()
        .map(|op| l.count(*op))
        .sum()
    }

    /// Goal: with the cluster idle, a standby candidate makes no metadata call (it watches
    /// the role; not a read per tick), and the holder reads the records
    /// only when one changes (and at its idle recheck); a change (a pool created) still
    /// reaches the map at once, and a holder that stops is replaced by the standby.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn idle_candidates_leave_the_metadata_alone() {
        let meta: Arc<dyn MetaStore> = Arc::new(EmbeddedMeta::in_memory());
        let spawn = |name: &str| {
            let latency = Arc::new(MetaLatency::default());
            let timed: Arc<dyn MetaStore> = Arc::new(TimedMeta::new(meta.clone(), latency.clone()));
            let (stop_tx, stop_rx) = watch::channel(false);
            let task = tokio::spawn(run(timed, MonitorConfig::new(name), stop_rx));
            (latency, stop_tx, task)
        };
        let (first, first_stop, first_task) = spawn("first");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (second, second_stop, second_task) = spawn("second");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let holder = |m: &Arc<dyn MetaStore>| {
            let m = m.clone();
            async move {
                let (v, _) = m.get(MONITOR_KEY).await.unwrap().expect("a holder");
                serde_json::from_slice::<MonitorRecord>(&v).unwrap().holder
            }
        };
        assert_eq!(holder(&meta).await, "first");

        // Ten ticks of an idle cluster.
        let (a, b) = (record_calls(&first), record_calls(&second));
        tokio::time::sleep(Duration::from_millis(2000)).await;
        let (da, db) = (record_calls(&first) - a, record_calls(&second) - b);
        assert_eq!(db, 0, "the standby made {db} calls while idle");
        assert_eq!(da, 0, "the holder made {da} record calls while idle");

        // A change reaches the map at once.
        let pool = basalt_meta::schema::PoolRecord {
            id: 1,
            name: "p".into(),
            size: 1,
            min_size: 1,
            pg_count: 4,
            failure_domain: "osd".into(),
            object_size: 128 << 10,
            ec: None,
            device_class: None,
        };
        meta.put(
            &basalt_meta::schema::pool_key("p"),
            serde_json::to_vec(&pool).unwrap(),
        )
        .await
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let map = meta.get(MAP_KEY).await.unwrap();
            let map: Option<ClusterMap> = map.map(|(v, _)| serde_json::from_slice(&v).unwrap());
            if map.is_some_and(|m| m.pools.contains_key(&1)) {
                break;
            }
            assert!(Instant::now() < deadline, "the pool never reached the map");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // The holder stops (revoking its lease): the standby takes over.
        first_stop.send(true).unwrap();
        first_task.await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        while meta.get(MONITOR_KEY).await.unwrap().is_none() || holder(&meta).await != "second" {
            assert!(Instant::now() < deadline, "the standby never took over");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        second_stop.send(true).unwrap();
        second_task.await.unwrap();
    }
}
