//! The writer lock of a volume: one client at a time writes it (docs/design.md, "The
//! writer lock"). A gateway takes the lock when a client opens the volume for writing and
//! holds it under its watcher lease; a second client's writable open is refused with the
//! holder named. The lock passes on when the holder closes, when its gateway's lease expires
//! (the taker fences the old holder off first: it may only be cut off from the metadata,
//! still writing), when an operator breaks it (fenced the same way), or inside a handover
//! window (live migration: both ends have the volume open while one of them runs).

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::watchers::{Watchers, WATCHERS_PREFIX};
use basalt_meta::{MetaStore, Revision};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Where lock records live: `/basalt/locks/VOLUME` (by name, like watcher records).
pub const LOCKS_PREFIX: &str = "/basalt/locks/";

/// Longest handover window `basalt volume lock handover` opens.
pub const MAX_HANDOVER_SECS: u64 = 3600;

/// How long a writable open waits for another client's lock to be released before it is
/// refused (a client that just disconnected releases within milliseconds).
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Format version of [`LockRecord`].
const RECORD_VERSION: u32 = 1;

/// Compare-and-swap rounds before an acquire or release gives up (each lost round means
/// another gateway changed the record meanwhile).
const CAS_ROUNDS: usize = 16;

/// One client holding a volume's writer lock.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockHolder {
    /// Who writes: "nbd client 10.0.0.2", "nvme host nqn.2014-08.org.nvmexpress:uuid:…".
    pub client: String,
    /// The gateway it writes through: "basalt nbd on hv1 (pid 4242)".
    pub gateway: String,
    /// The gateway's watcher session: the holder is alive while that record is (it lives
    /// under the gateway's lease).
    pub session: String,
    /// When it took the lock (unix seconds).
    pub since_unix: u64,
}

impl LockHolder {
    /// "nbd client 10.0.0.2 through basalt nbd on hv1 (pid 4242)".
    pub fn describe(&self) -> String {
        format!("{} through {}", self.client, self.gateway)
    }
}

/// A volume's lock record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockRecord {
    pub format_version: u32,
    /// Who holds it: one client (through one gateway, or several: multipath), two clients
    /// while a handover is under way.
    pub holders: Vec<LockHolder>,
    /// Until when (unix seconds) one more client may join the holder: a live-migration
    /// handover opened by `basalt volume lock handover`. 0: none.
    #[serde(default)]
    pub handover_until: u64,
    /// A taker removed a holder that may still write and has not fenced it off yet: whoever
    /// takes the lock next fences first.
    #[serde(default)]
    pub fence_pending: bool,
}

fn key(volume: &str) -> String {
    format!("{LOCKS_PREFIX}{volume}")
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// "for 3 min 20 s" style age of a unix timestamp.
pub fn held_for(since_unix: u64) -> String {
    let secs = unix_now().saturating_sub(since_unix);
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min {} s", secs / 60, secs % 60),
        _ => format!("{} h {} min", secs / 3600, (secs % 3600) / 60),
    }
}

async fn read(meta: &dyn MetaStore, volume: &str) -> Result<(LockRecord, Revision), ClientError> {
    match meta.get(&key(volume)).await? {
        Some((v, rev)) => {
            serde_json::from_slice(&v)
                .map(|r| (r, rev))
                .map_err(|e| ClientError::Invalid {
                    reason: format!("the lock record of volume \"{volume}\" is unreadable: {e}"),
                })
        }
        None => Ok((LockRecord::default(), 0)),
    }
}

/// Write `record` if the key is still at `rev` (0: absent); an empty record that needs no
/// fence is deleted. Returns whether it was written.
async fn write(
    meta: &dyn MetaStore,
    volume: &str,
    record: &LockRecord,
    rev: Revision,
) -> Result<bool, ClientError> {
    if record.holders.is_empty() && !record.fence_pending && record.handover_until == 0 {
        if rev == 0 {
            return Ok(true);
        }
        return Ok(meta.compare_and_delete(&key(volume), rev).await?);
    }
    let mut record = record.clone();
    record.format_version = RECORD_VERSION;
    let value = serde_json::to_vec(&record).expect("a lock record serialises");
    Ok(meta
        .compare_and_swap(&key(volume), rev, value)
        .await?
        .is_some())
}

/// The watcher sessions that have `volume` open now (their gateways' leases are alive).
async fn live_sessions(meta: &dyn MetaStore, volume: &str) -> Result<HashSet<String>, ClientError> {
    let prefix = format!("{WATCHERS_PREFIX}{volume}/");
    Ok(meta
        .list(&prefix)
        .await?
        .into_iter()
        .filter_map(|(k, _, _)| k.strip_prefix(&prefix).map(str::to_string))
        .collect())
}

/// A volume's lock as `volume lock show` prints it: each holder and whether its gateway
/// is alive.
pub async fn show(
    meta: &dyn MetaStore,
    volume: &str,
) -> Result<(LockRecord, Vec<bool>), ClientError> {
    let (record, _) = read(meta, volume).await?;
    let live = live_sessions(meta, volume).await?;
    let alive = record
        .holders
        .iter()
        .map(|h| live.contains(&h.session))
        .collect();
    Ok((record, alive))
}

/// Open a handover window of `secs` seconds: one more client may take the lock beside its
/// holder (the destination of a live migration). Refused when nobody holds the lock (any
/// client may open the volume then) or the window is too long.
pub async fn handover(
    meta: &dyn MetaStore,
    volume: &str,
    secs: u64,
) -> Result<LockRecord, ClientError> {
    if secs == 0 || secs > MAX_HANDOVER_SECS {
        return Err(ClientError::Invalid {
            reason: format!(
                "a handover window is 1 s to {} min, not {secs} s",
                MAX_HANDOVER_SECS / 60
            ),
        });
    }
    for _ in 0..CAS_ROUNDS {
        let (mut record, rev) = read(meta, volume).await?;
        if record.holders.is_empty() {
            return Err(ClientError::Invalid {
                reason: format!(
                    "nobody holds the writer lock of volume \"{volume}\": any client may open it"
                ),
            });
        }
        record.handover_until = unix_now() + secs;
        if write(meta, volume, &record, rev).await? {
            return Ok(record);
        }
    }
    Err(changed(volume))
}

/// Break the lock: drop every holder, then fence them off (their gateways' writes to the
/// volume are refused from then on, even where they cannot reach the metadata). Returns
/// the holders removed.
pub async fn break_lock(cluster: &Cluster, volume: &str) -> Result<Vec<LockHolder>, ClientError> {
    cluster.volume_info(volume).await?;
    let meta = cluster.meta().as_ref();
    for _ in 0..CAS_ROUNDS {
        let (record, rev) = read(meta, volume).await?;
        if record.holders.is_empty() && !record.fence_pending {
            return Ok(Vec::new());
        }
        let emptied = LockRecord {
            fence_pending: true,
            ..LockRecord::default()
        };
        if !write(meta, volume, &emptied, rev).await? {
            continue;
        }
        fence(cluster, volume).await?;
        return Ok(record.holders);
    }
    Err(changed(volume))
}

/// Fence off whoever may still write `volume`, then clear the record's `fence_pending`.
async fn fence(cluster: &Cluster, volume: &str) -> Result<(), ClientError> {
    let snap = cluster.fence_writers(volume).await?;
    tracing::warn!(
        volume,
        fence = %snap.name,
        "fenced off the volume's previous writer: its writes are refused from now on"
    );
    let meta = cluster.meta().as_ref();
    for _ in 0..CAS_ROUNDS {
        let (mut record, rev) = read(meta, volume).await?;
        if !record.fence_pending {
            return Ok(());
        }
        record.fence_pending = false;
        if write(meta, volume, &record, rev).await? {
            return Ok(());
        }
    }
    Err(changed(volume))
}

/// Forget the lock of a removed volume.
pub async fn forget(meta: &dyn MetaStore, volume: &str) -> Result<(), ClientError> {
    if let Some((_, rev)) = meta.get(&key(volume)).await? {
        meta.compare_and_delete(&key(volume), rev).await?;
    }
    Ok(())
}

fn changed(volume: &str) -> ClientError {
    ClientError::Invalid {
        reason: format!("the writer lock of volume \"{volume}\" changed concurrently; try again"),
    }
}

/// This process's hold on a volume's writer lock for one client. Shared by that client's
/// connections (multi-connection NBD clients open several); dropping the last releases it.
pub struct WriterLock {
    inner: Arc<Hold>,
    /// The watcher record that proves this holder alive; dropped after the release.
    watch: std::sync::Mutex<Option<crate::watchers::WatchGuard>>,
}

/// What the release after the last drop needs.
struct Hold {
    watchers: Arc<Watchers>,
    volume: String,
    client: String,
    /// The lock was broken or taken over: this holder may no longer write.
    lost: AtomicBool,
}

impl Hold {
    fn is_mine(&self, h: &LockHolder) -> bool {
        h.session == self.watchers.session() && h.client == self.client
    }

    async fn release(&self) -> Result<(), ClientError> {
        let meta = self.watchers.meta().as_ref();
        for _ in 0..CAS_ROUNDS {
            let (mut record, rev) = read(meta, &self.volume).await?;
            let before = record.holders.len();
            record.holders.retain(|h| !self.is_mine(h));
            if record.holders.len() == before {
                return Ok(());
            }
            if write(meta, &self.volume, &record, rev).await? {
                return Ok(());
            }
        }
        Err(changed(&self.volume))
    }
}

impl WriterLock {
    /// Has the lock been lost (broken or taken over)?
    pub fn lost(&self) -> bool {
        self.inner.lost.load(Ordering::Acquire)
    }

    /// The error a lost lock gives.
    pub fn lost_error(&self) -> ClientError {
        ClientError::LockLost {
            name: self.inner.volume.clone(),
            how: "broken or taken over by another client".into(),
        }
    }

    /// Does this holder still hold the lock? Asked before a handle follows its volume to a
    /// new head (a snapshot's, or a fence's): a holder the record no longer lists is fenced
    /// off and fails from then on. An unreachable metadata store fails the check too.
    pub async fn check(&self) -> Result<(), ClientError> {
        if self.lost() {
            return Err(self.lost_error());
        }
        let h = &self.inner;
        let (record, _) = read(h.watchers.meta().as_ref(), &h.volume).await?;
        if record.holders.iter().any(|x| h.is_mine(x)) {
            return Ok(());
        }
        h.lost.store(true, Ordering::Release);
        tracing::error!(
            volume = %h.volume,
            client = %h.client,
            "the writer lock was broken or taken over: this client's writes are refused"
        );
        Err(match record.holders.first() {
            Some(x) => ClientError::LockLost {
                name: h.volume.clone(),
                how: format!("taken over by {}", x.describe()),
            },
            None => self.lost_error(),
        })
    }
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        let watch = self.watch.lock().expect("watch guard").take();
        let hold = self.inner.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let key = (hold.volume.clone(), hold.client.clone());
                let mut held = hold.watchers.locks.lock().await;
                // Reopened meanwhile (the same client reconnecting): the new hold keeps it.
                let reopened = held
                    .get(&key)
                    .and_then(std::sync::Weak::upgrade)
                    .is_some_and(|w| !w.lost());
                if !reopened {
                    held.remove(&key);
                    if !hold.lost.load(Ordering::Acquire) {
                        if let Err(e) = hold.release().await {
                            tracing::warn!(volume = %hold.volume, "could not release the writer lock: {e}");
                        }
                    }
                }
                drop(held);
                drop(watch);
            });
        }
    }
}

impl Watchers {
    /// Take the writer lock of `volume` for `client` (connections of one client share it),
    /// or refuse naming the holder. A holder whose gateway is gone is fenced off first.
    pub async fn lock(
        self: &Arc<Self>,
        cluster: &Cluster,
        volume: &str,
        client: &str,
    ) -> Result<Arc<WriterLock>, ClientError> {
        let k = (volume.to_string(), client.to_string());
        // The table is held for lookups only, never across the metadata round trips, the
        // grace wait or a fence below: other volumes' opens do not wait on this one.
        if let Some(w) = self
            .locks
            .lock()
            .await
            .get(&k)
            .and_then(std::sync::Weak::upgrade)
        {
            if !w.lost() {
                return Ok(w);
            }
        }
        // Recorded first: a holder is alive while its watcher record is.
        let watch = self.open(volume).await?;
        let lock = Arc::new(WriterLock {
            inner: Arc::new(Hold {
                watchers: self.clone(),
                volume: volume.to_string(),
                client: client.to_string(),
                lost: AtomicBool::new(false),
            }),
            watch: std::sync::Mutex::new(Some(watch)),
        });
        let meta = self.meta().as_ref();
        let me = LockHolder {
            client: client.to_string(),
            gateway: self.gateway().to_string(),
            session: self.session().to_string(),
            since_unix: unix_now(),
        };
        let started = std::time::Instant::now();
        // Bound: CAS_ROUNDS lost races plus LOCK_GRACE of waiting for a holder to go.
        let mut lost_races = 0;
        while lost_races < CAS_ROUNDS {
            let (record, rev) = read(meta, volume).await?;
            let live = live_sessions(meta, volume).await?;
            let mut next = LockRecord {
                holders: Vec::new(),
                ..record.clone()
            };
            let mut fence_needed = false;
            let mut mine = None;
            for h in record.holders {
                if lock.inner.is_mine(&h) {
                    mine = Some(h);
                } else if live.contains(&h.session) {
                    next.holders.push(h);
                } else if h.client != client {
                    // Another client's gateway is gone: it may only be cut off from the
                    // metadata, still writing. (This client's own connections through a
                    // gateway that died, multipath's other path, need no fence.)
                    fence_needed = true;
                }
            }
            let others: HashSet<&str> = next
                .holders
                .iter()
                .filter(|h| h.client != client)
                .map(|h| h.client.as_str())
                .collect();
            let same_client = next.holders.iter().any(|h| h.client == client);
            if mine.is_none() && !others.is_empty() && !same_client {
                let joining = record.handover_until > unix_now() && others.len() == 1;
                if !joining {
                    // A client that just disconnected releases within milliseconds: give
                    // it a moment before refusing.
                    if started.elapsed() < LOCK_GRACE {
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                    let h = next
                        .holders
                        .iter()
                        .find(|h| h.client != client)
                        .expect("another client holds it");
                    return Err(ClientError::Locked {
                        name: volume.to_string(),
                        holder: h.describe(),
                        since: format!("{} ago", held_for(h.since_unix)),
                    });
                }
                // One join per handover window.
                next.handover_until = 0;
            }
            next.holders.push(mine.unwrap_or_else(|| me.clone()));
            next.fence_pending |= fence_needed;
            if !write(meta, volume, &next, rev).await? {
                lost_races += 1;
                continue;
            }
            if next.fence_pending {
                // Not fenced, this client must not write: the error goes back and the
                // record keeps the fence pending for the next taker.
                fence(cluster, volume).await?;
            }
            // Another connection of this client may have taken it meanwhile (the record
            // then lists this client once): keep that hold; this one, dropped, sees it in
            // the table and releases nothing.
            let mut held = self.locks.lock().await;
            if let Some(w) = held.get(&k).and_then(std::sync::Weak::upgrade) {
                if !w.lost() {
                    return Ok(w);
                }
            }
            held.insert(k, Arc::downgrade(&lock));
            return Ok(lock);
        }
        Err(changed(volume))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        // Goal: the refusal says how long the holder has had the lock in plain units.
        let now = unix_now();
        assert_eq!(held_for(now), "0 s");
        assert_eq!(held_for(now - 200), "3 min 20 s");
        assert_eq!(held_for(now - 7_500), "2 h 5 min");
    }
}
