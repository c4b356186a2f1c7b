//! Following the cluster map in the metadata store: every daemon and gateway publishes the
//! newest map on a `watch` channel, the same channel the one-process cluster uses.

use basalt_meta::schema::MAP_KEY;
use basalt_meta::{MetaError, MetaStore, WatchEvent};
use basalt_placement::ClusterMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Pause before re-establishing a broken watch.
const REWATCH_DELAY_MS: u64 = 200;
/// Longest time a watch may stay quiet before the map is re-read anyway (a safety net: a
/// watch that silently stopped delivering must not leave a daemon on an old map for long).
const POLL_INTERVAL_MS: u64 = 2_000;

/// What a command that waited in vain suggests: maps are published by the monitor.
const NO_MONITOR_HINT: &str =
    "the monitor publishes maps: is one running (`basalt osd`, `basalt mon` or \
     `basalt up`)?";

/// Wait until the map on `maps` satisfies `ready`, for at most `timeout`: a command that
/// changed the cluster returns once clients route with the change. `what` describes the
/// awaited state in the timeout error ("pool \"p\" is in the cluster map").
pub async fn wait_for_map(
    maps: &mut watch::Receiver<Arc<ClusterMap>>,
    what: &str,
    timeout: Duration,
    mut ready: impl FnMut(&ClusterMap) -> bool,
) -> Result<Arc<ClusterMap>, crate::ClientError> {
    let not_visible = || crate::ClientError::NotVisible {
        what: what.to_string(),
        timeout_ms: timeout.as_millis() as u64,
        hint: NO_MONITOR_HINT.into(),
    };
    match tokio::time::timeout(timeout, maps.wait_for(|m| ready(m))).await {
        Ok(Ok(map)) => Ok(map.clone()),
        // The follower stopped (its runtime is going away): nothing more will arrive.
        Ok(Err(_)) | Err(_) => Err(not_visible()),
    }
}

/// Read the current map (an empty map at epoch 0 when none exists yet) and keep the
/// returned receiver up to date until it is dropped. Epochs only ever grow on it.
pub async fn follow_map(
    meta: Arc<dyn MetaStore>,
) -> Result<watch::Receiver<Arc<ClusterMap>>, MetaError> {
    let (map, revision) = read_map(meta.as_ref()).await?;
    let (tx, rx) = watch::channel(Arc::new(map));
    tokio::spawn(follow(meta, tx, revision));
    Ok(rx)
}

async fn read_map(meta: &dyn MetaStore) -> Result<(ClusterMap, u64), MetaError> {
    match meta.get(MAP_KEY).await? {
        Some((bytes, rev)) => match serde_json::from_slice::<ClusterMap>(&bytes) {
            Ok(mut map) => {
                if map.acting.is_empty() {
                    map.update_acting();
                }
                Ok((map, rev))
            }
            Err(e) => Err(MetaError::Corrupt {
                path: MAP_KEY.into(),
                reason: e.to_string(),
            }),
        },
        None => Ok((ClusterMap::default(), 0)),
    }
}

/// Publish `map` unless the receiver already has one at least as new.
fn publish(tx: &watch::Sender<Arc<ClusterMap>>, map: ClusterMap) {
    tx.send_if_modified(|cur| {
        if map.epoch > cur.epoch {
            *cur = Arc::new(map);
            true
        } else {
            false
        }
    });
}

async fn follow(meta: Arc<dyn MetaStore>, tx: watch::Sender<Arc<ClusterMap>>, mut revision: u64) {
    while !tx.is_closed() {
        let mut events = match meta.watch_prefix(MAP_KEY, revision + 1).await {
            Ok(events) => events,
            Err(e) => {
                tracing::debug!("map watch: {e}");
                tokio::time::sleep(Duration::from_millis(REWATCH_DELAY_MS)).await;
                if let Ok((map, rev)) = read_map(meta.as_ref()).await {
                    publish(&tx, map);
                    revision = rev;
                }
                continue;
            }
        };
        loop {
            let next = tokio::time::timeout(Duration::from_millis(POLL_INTERVAL_MS), events.recv());
            match next.await {
                Ok(Some(Ok(WatchEvent::Put {
                    key,
                    value,
                    revision: rev,
                }))) if key == MAP_KEY => {
                    revision = rev;
                    match serde_json::from_slice::<ClusterMap>(&value) {
                        Ok(mut map) => {
                            if map.acting.is_empty() {
                                map.update_acting();
                            }
                            publish(&tx, map)
                        }
                        Err(e) => tracing::error!("undecodable cluster map at revision {rev}: {e}"),
                    }
                }
                Ok(Some(Ok(_))) => {}
                Ok(Some(Err(_))) | Ok(None) => break,
                Err(_) => {
                    // Quiet for a while: re-read to be sure nothing was missed.
                    if tx.is_closed() {
                        return;
                    }
                    if let Ok((map, rev)) = read_map(meta.as_ref()).await {
                        revision = revision.max(rev);
                        publish(&tx, map);
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(REWATCH_DELAY_MS)).await;
        if let Ok((map, rev)) = read_map(meta.as_ref()).await {
            revision = rev;
            publish(&tx, map);
        }
    }
}
