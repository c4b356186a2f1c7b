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
pub async fn run(meta: Arc<dyn MetaStore>, config: MonitorConfig, mut stop: watch::Receiver<bool>) {
    let tick = Duration::from_millis(config.tick_ms.max(10));
    // Bound: one campaign per tick until stopped.
    while !*stop.borrow() {
        match campaign(meta.as_ref(), &config).await {
            Ok(Some(lease)) => {
                tracing::info!(holder = %config.holder, "took the monitor role");
                lead(meta.as_ref(), &config, lease, &mut stop).await;
                let _ = meta.revoke_lease(lease).await;
            }
            Ok(None) => {}
            Err(e) => tracing::debug!("monitor campaign: {e}"),
        }
        tokio::select! {
            biased;
            _ = stop.changed() => {}
            _ = tokio::time::sleep(tick) => {}
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

/// Hold the role: renew the lease and update the map every tick, until the lease cannot be
/// renewed for half its TTL (another candidate may take over after the whole TTL) or stop.
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
    // A failure report wakes the holder at once (failover must not wait for a tick); without
    // the watch it still looks every tick.
    let mut reports = meta.watch_prefix(FAILURES_PREFIX, 0).await.ok();
    // Bound: one round per tick (or per report) until the role is lost or the candidate stops.
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
        let now_ms = started.elapsed().as_millis() as u64;
        // A reported OSD that ripens before the next tick wakes the holder then.
        let mut wait = tick;
        match update_map(meta, config, &mut clock, &mut settle, now_ms).await {
            Ok(Some(ripens_ms)) => {
                wait = wait.min(Duration::from_millis(ripens_ms.saturating_sub(now_ms)));
            }
            Ok(None) => {}
            Err(e) => tracing::debug!("monitor update: {e}"),
        }
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            event = next_report(&mut reports) => {
                if event.is_none() {
                    reports = None;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The next change under the failure reports (None: the watch ended or there is none, and
/// then this never completes).
async fn next_report(reports: &mut Option<basalt_meta::WatchReceiver>) -> Option<()> {
    match reports {
        Some(rx) => match rx.recv().await {
            Some(Ok(_)) => Some(()),
            _ => None,
        },
        None => std::future::pending().await,
    }
}

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

/// Read the records, derive the map, write it if it changed. Returns when the next
/// reported OSD's settle time ends (None: none is waiting).
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
        return Ok(ripens_ms);
    };
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
    Ok(ripens_ms)
}
