//! Who has a volume open: a gateway records each volume it serves under a lease of its own
//! (RBD calls them watchers), so that `volume rm` can refuse while one is in use and name
//! it. A gateway that dies leaves nothing behind: its lease expires.

use crate::error::ClientError;
use basalt_meta::{LeaseId, MetaError, MetaStore};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// Where watcher records live: `/basalt/watchers/VOLUME/GATEWAY_ID` (by name: a snapshot
/// moves a volume's head inode, not its name).
pub const WATCHERS_PREFIX: &str = "/basalt/watchers/";

/// TTL of a gateway's watcher lease: a dead gateway's records vanish after this long.
pub const WATCHER_TTL_SECS: u64 = 10;

/// Format version of [`WatcherRecord`].
const RECORD_VERSION: u32 = 1;

/// One gateway that has a volume open.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct WatcherRecord {
    pub format_version: u32,
    /// What the gateway is, for people: "basalt nbd on hv1 (pid 4242)".
    pub gateway: String,
    /// When it opened the volume (unix seconds).
    pub since_unix: u64,
}

fn prefix(volume: &str) -> String {
    format!("{WATCHERS_PREFIX}{volume}/")
}

/// The gateways that have `volume` open now.
pub async fn list(meta: &dyn MetaStore, volume: &str) -> Result<Vec<WatcherRecord>, ClientError> {
    Ok(meta
        .list(&prefix(volume))
        .await?
        .into_iter()
        .filter_map(|(_, v, _)| serde_json::from_slice(&v).ok())
        .collect())
}

struct State {
    lease: Option<LeaseId>,
    /// Open handles per inode.
    counts: HashMap<String, usize>,
}

/// This process's watcher records: one key per open volume, under one lease.
pub struct Watchers {
    meta: Arc<dyn MetaStore>,
    gateway: String,
    id: String,
    state: tokio::sync::Mutex<State>,
    /// Writer locks this process holds, by (volume, client) (see [`crate::locks`]).
    pub(crate) locks: tokio::sync::Mutex<LockTable>,
}

/// Writer locks held, by (volume, client).
pub(crate) type LockTable = HashMap<(String, String), std::sync::Weak<crate::locks::WriterLock>>;

impl Watchers {
    /// Records for a gateway described as `gateway` (shown by a refused `volume rm`).
    pub fn new(meta: Arc<dyn MetaStore>, gateway: String) -> Arc<Self> {
        let id = format!(
            "{}-{:x}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
        );
        Arc::new(Self {
            meta,
            gateway,
            id,
            state: tokio::sync::Mutex::new(State {
                lease: None,
                counts: HashMap::new(),
            }),
            locks: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// This process's session: the last part of its watcher records' keys.
    pub fn session(&self) -> &str {
        &self.id
    }

    /// What the gateway is, for people.
    pub fn gateway(&self) -> &str {
        &self.gateway
    }

    pub(crate) fn meta(&self) -> &Arc<dyn MetaStore> {
        &self.meta
    }

    fn key(&self, volume: &str) -> String {
        format!("{}{}", prefix(volume), self.id)
    }

    fn record(&self) -> Vec<u8> {
        let r = WatcherRecord {
            format_version: RECORD_VERSION,
            gateway: self.gateway.clone(),
            since_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
        };
        serde_json::to_vec(&r).expect("a watcher record serialises")
    }

    /// The lease, granted (and kept alive by a task of its own) on first use.
    async fn lease(self: &Arc<Self>, state: &mut State) -> Result<LeaseId, MetaError> {
        if let Some(l) = state.lease {
            return Ok(l);
        }
        let lease = self.meta.grant_lease(WATCHER_TTL_SECS).await?;
        state.lease = Some(lease);
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            // Bound: ends when the Watchers are dropped.
            loop {
                tokio::time::sleep(Duration::from_secs(WATCHER_TTL_SECS / 3)).await;
                let Some(me) = me.upgrade() else { return };
                me.renew().await;
            }
        });
        Ok(lease)
    }

    /// Renew the lease; if it was lost (metadata unreachable too long), take a new one and
    /// record every open volume again.
    async fn renew(self: &Arc<Self>) {
        let mut state = self.state.lock().await;
        let Some(lease) = state.lease else { return };
        match self.meta.keep_alive(lease).await {
            Ok(_) => {}
            Err(MetaError::LeaseNotFound { .. }) => {
                // The renewal task (this one) goes on: take a new lease without another.
                let Ok(lease) = self.meta.grant_lease(WATCHER_TTL_SECS).await else {
                    return;
                };
                state.lease = Some(lease);
                let volumes: Vec<String> = state.counts.keys().cloned().collect();
                for volume in volumes {
                    let _ = self
                        .meta
                        .put_with_lease(&self.key(&volume), self.record(), lease)
                        .await;
                }
            }
            Err(e) => tracing::debug!("watcher lease renewal failed: {e}"),
        }
    }

    /// Record that this process has `volume` open until the guard drops.
    pub async fn open(self: &Arc<Self>, volume: &str) -> Result<WatchGuard, ClientError> {
        let mut state = self.state.lock().await;
        let n = state.counts.entry(volume.to_string()).or_insert(0);
        *n += 1;
        if *n == 1 {
            let put = match self.lease(&mut state).await {
                Ok(lease) => {
                    self.meta
                        .put_with_lease(&self.key(volume), self.record(), lease)
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = put {
                Self::forget(&mut state, volume);
                return Err(e.into());
            }
        }
        Ok(WatchGuard {
            watchers: self.clone(),
            volume: volume.to_string(),
        })
    }

    fn forget(state: &mut State, volume: &str) -> bool {
        let Some(n) = state.counts.get_mut(volume) else {
            return false;
        };
        *n -= 1;
        if *n == 0 {
            state.counts.remove(volume);
            return true;
        }
        false
    }

    async fn close(self: Arc<Self>, volume: String) {
        let mut state = self.state.lock().await;
        if !Self::forget(&mut state, &volume) {
            return;
        }
        let key = self.key(&volume);
        if let Ok(Some((_, rev))) = self.meta.get(&key).await {
            let _ = self.meta.compare_and_delete(&key, rev).await;
        }
    }
}

/// An open volume's watcher record; dropping it removes the record (when it was the
/// process's last handle on the volume).
pub struct WatchGuard {
    watchers: Arc<Watchers>,
    volume: String,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        let (w, volume) = (self.watchers.clone(), std::mem::take(&mut self.volume));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(w.close(volume));
        }
    }
}
