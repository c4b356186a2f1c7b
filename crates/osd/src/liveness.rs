//! An OSD's presence in the cluster: its static record, and a liveness record held under a
//! lease that the OSD renews. The monitor marks the OSD down when the record vanishes.
//!
//! The OSD also fences itself: when it could not renew its lease for half the TTL it stops
//! serving as a primary (see `Osd::fenced`). The monitor can only mark it down once the
//! whole TTL passed, so by the time a new primary is chosen the old one has stopped.

use crate::daemon::Osd;
use basalt_meta::schema::{alive_key, osd_key, AliveRecord, OsdRecord};
use basalt_meta::{LeaseId, MetaError};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How an OSD presents itself to the cluster.
#[derive(Clone, Debug)]
pub struct Registration {
    /// Failure-domain name of its machine.
    pub host: String,
    /// Where the machine stands above its host (`zone`, `rack`; empty: not said).
    pub location: std::collections::BTreeMap<String, String>,
    /// Its device class (`nvme`, `ssd`, `hdd`, ...).
    pub class: String,
    /// Liveness lease TTL: the OSD is marked down this long after it stops renewing.
    pub lease_ttl_secs: u64,
    /// Prometheus endpoint, when served.
    pub metrics_addr: Option<String>,
    /// The release and commit of the binary, for the liveness record.
    pub version: String,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Write (or update) the OSD's static record, take a lease, publish the liveness record, and
/// keep renewing it until `stop`; on stop the lease is revoked so the OSD is marked down at
/// once.
pub async fn register(
    osd: Arc<Osd>,
    addr: SocketAddr,
    reg: Registration,
    stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, MetaError> {
    let meta = osd.meta.clone();
    let key = osd_key(osd.id);
    let capacity_bytes = osd.store.stats().capacity_bytes;
    let existing: Option<OsdRecord> = meta
        .get(&key)
        .await?
        .and_then(|(v, _)| serde_json::from_slice(&v).ok());
    let record = OsdRecord {
        id: osd.id,
        host: reg.host.clone(),
        capacity_bytes,
        admin_out: existing.as_ref().is_some_and(|r| r.admin_out),
        store_id: Some(format!("{:016x}", osd.store.layout().store_id)),
        location: reg.location.clone(),
        class: reg.class.clone(),
    };
    if existing.as_ref() != Some(&record) {
        meta.put(
            &key,
            serde_json::to_vec(&record).expect("record serialises"),
        )
        .await?;
    }
    let alive = AliveRecord {
        addr: addr.to_string(),
        incarnation: osd.incarnation,
        started: now_secs(),
        metrics_addr: reg.metrics_addr.clone(),
        io: osd.store.io_mode(),
        flushed_down: 0,
        version: reg.version.clone(),
        wire: basalt_proto::frame::WIRE_VERSION,
        store_format: basalt_store::SUPERBLOCK_FORMAT_VERSION,
    };
    let alive = serde_json::to_vec(&alive).expect("record serialises");
    let lease = publish(&osd, &alive, reg.lease_ttl_secs).await?;
    osd.set_fence_after(reg.lease_ttl_secs * 1000 / 2);
    Ok(tokio::spawn(keep_alive(
        osd,
        alive,
        reg.lease_ttl_secs,
        lease,
        stop,
    )))
}

/// This run is down in the map of `epoch` (marked down by its peers' reports, or its lease
/// lapsed) since it came up at `up_from`, yet it runs: its store may hold the only copies of
/// acknowledged writes not yet durable, and a FLUSH sent now may not reach it. Flush the
/// store at once, then say so in the liveness record, where the monitor reads it (the map's
/// `unflushed` until then, which FLUSHes wait for). Once per time down.
pub(crate) fn flush_while_down(osd: &Arc<Osd>, epoch: u32, up_from: u32) {
    use std::sync::atomic::Ordering;
    if osd.flushed_down_from.swap(up_from, Ordering::AcqRel) == up_from {
        return;
    }
    // A member write let through under the earlier map finishes before the flush begins;
    // later ones see this map and are refused.
    osd.pgs.barrier();
    let osd = osd.clone();
    tokio::spawn(async move {
        let store = osd.store.clone();
        if let Err(e) = osd.store_call(move || store.flush()).await {
            // The store failed stop: the writes it held are not durable, and it says so.
            tracing::error!(osd = osd.id, "flush after being marked down failed: {e}");
            return;
        }
        tracing::info!(
            osd = osd.id,
            epoch,
            "marked down while running: store flushed"
        );
        // FLUSHes wait for the record: retried while this run is still down and unrecorded.
        let mut pause = Duration::from_millis(100);
        // Bound: RECORD_TRIES tries, each after a pause of at most 2 s.
        for attempt in 1..=RECORD_TRIES {
            match record_flushed_down(&osd, epoch).await {
                Ok(()) => return,
                Err(e) if attempt == RECORD_TRIES => {
                    tracing::warn!(
                        osd = osd.id,
                        "cannot record the flush after going down: {e}"
                    );
                }
                Err(e) => {
                    tracing::debug!(
                        osd = osd.id,
                        attempt,
                        "recording the flush after going down: {e}"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
            }
            if osd.flushed_down_from.load(Ordering::Acquire) != up_from {
                return; // Up again (and maybe down again): a newer task records that.
            }
        }
    });
}

/// Tries at recording a flush after going down (about a minute of retries).
const RECORD_TRIES: u32 = 35;

/// The lease could not be renewed: the monitor will mark this OSD down once it lapses,
/// with no word from it, and FLUSHes will stop coming. Flush the store now, while the lease
/// still stands (the fence begins at half its TTL, the monitor waits the whole TTL), so the
/// acknowledged writes it holds are durable before the cluster moves on without it.
async fn flush_unrenewed(osd: &Osd) {
    let store = osd.store.clone();
    if let Err(e) = osd.store_call(move || store.flush()).await {
        tracing::error!(osd = osd.id, "flush without a renewed lease failed: {e}");
    }
}

/// Put `flushed_down: epoch` in this run's liveness record, under its lease.
async fn record_flushed_down(osd: &Osd, epoch: u32) -> Result<(), MetaError> {
    let Some(lease) = osd.liveness_lease() else {
        return Ok(());
    };
    let key = alive_key(osd.id);
    let Some((bytes, _)) = osd.meta.get(&key).await? else {
        return Ok(()); // The lease lapsed: no record to amend, and no map will say unflushed.
    };
    let mut alive: AliveRecord =
        serde_json::from_slice(&bytes).map_err(|e| MetaError::Corrupt {
            path: key.clone(),
            reason: e.to_string(),
        })?;
    if alive.incarnation != osd.incarnation || alive.flushed_down >= epoch {
        return Ok(());
    }
    alive.flushed_down = epoch;
    let value = serde_json::to_vec(&alive).expect("record serialises");
    osd.meta
        .put_with_lease(&key, value, lease)
        .await
        .map(|_| ())
}

/// Take a lease and put the liveness record under it.
async fn publish(osd: &Osd, alive: &[u8], ttl_secs: u64) -> Result<LeaseId, MetaError> {
    let lease = osd.meta.grant_lease(ttl_secs).await?;
    osd.meta
        .put_with_lease(&alive_key(osd.id), alive.to_vec(), lease)
        .await?;
    osd.set_liveness_lease(lease);
    osd.note_lease_renewed();
    Ok(lease)
}

async fn keep_alive(
    osd: Arc<Osd>,
    alive: Vec<u8>,
    ttl_secs: u64,
    mut lease: LeaseId,
    mut stop: watch::Receiver<bool>,
) {
    let period = Duration::from_millis((ttl_secs * 1000 / 3).max(100));
    let mut failures = 0u64;
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            _ = tokio::time::sleep(period) => {}
        }
        let start = std::time::Instant::now();
        let renewed = osd.meta.keep_alive(lease).await;
        // The renewal is one round trip to the metadata store (etcd): its latency is the
        // metadata store's as the OSD sees it.
        osd.counters.latency.meta_round_trip.observe_since(start);
        let result = match renewed {
            Ok(_) => {
                osd.note_lease_renewed();
                crate::metrics::OsdCounters::add(&osd.counters.lease_renewals, 1);
                Ok(())
            }
            Err(MetaError::LeaseNotFound { .. }) => {
                // Our lease expired (we were cut off or stopped): the cluster may have moved
                // our PGs. Stop serving them as primary first (re-peer), then come back with
                // a new lease; the monitor starts new intervals for our PGs.
                tracing::warn!(
                    osd = osd.id,
                    "liveness lease expired; re-peering and registering again"
                );
                crate::peering::repeer_all(&osd);
                flush_unrenewed(&osd).await;
                publish(&osd, &alive, ttl_secs).await.map(|l| lease = l)
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(osd = osd.id, "cluster metadata reachable again");
                }
                failures = 0;
            }
            Err(e) => {
                if failures == 0 {
                    tracing::warn!(osd = osd.id, "cannot renew liveness lease: {e}");
                }
                flush_unrenewed(&osd).await;
                crate::metrics::OsdCounters::add(&osd.counters.lease_renewal_failures, 1);
                failures += 1;
            }
        }
    }
    let _ = osd.meta.revoke_lease(lease).await;
}
