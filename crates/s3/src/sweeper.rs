//! Reclaiming the space of uploads that never finished because a gateway died mid-way.
//!
//! Every piece of data is written under an *intent* record (see `index::Intent`), removed
//! once an index entry or a part record references the data, or once the data was deleted
//! after an error. An intent left behind means a gateway crashed (or lost the cluster) while
//! storing: the sweeper finds intents older than `reclaim_after` (a live upload refreshes its
//! intent every [`intent_refresh`], so it never looks that old), checks nothing references
//! the data, deletes the data, then the intent. Every gateway sweeps; two sweeping the same
//! intent only delete the same things twice.

use crate::buckets::{self, BucketRecord};
use crate::data;
use crate::index::{self, Intent, ObjectEntry, Part, Table};
use basalt_client::Cluster;
use basalt_proto::kv::{KvCond, KvEdit};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often a live upload rewrites its intent's start time: a quarter of the reclaim time,
/// at most a minute, so a live upload never looks abandoned.
pub fn intent_refresh(reclaim_after: Duration) -> Duration {
    (reclaim_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

/// What one sweep did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Intents whose data nothing referenced: data deleted.
    pub reclaimed: u64,
    /// Intents whose data an entry or part references (the gateway died after committing):
    /// only the intent removed.
    pub cleared: u64,
    /// Intents too young to judge.
    pub live: u64,
}

/// Is data `data` referenced by what the intent was for?
async fn referenced(
    cluster: &Cluster,
    bucket: &BucketRecord,
    data: u64,
    intent: &Intent,
) -> Result<bool, index::IndexError> {
    match &intent.upload {
        Some(upload) => Ok(index::list_parts(cluster, bucket, upload)
            .await?
            .iter()
            .any(|p: &Part| p.segment.data == data)),
        None => Ok(
            index::get::<ObjectEntry>(cluster, bucket, Table::Index, intent.key.as_bytes())
                .await?
                .is_some_and(|record| {
                    // Any version of the key may hold it.
                    crate::versions::all(record)
                        .iter()
                        .any(|v| v.segments.iter().any(|s| s.data == data))
                }),
        ),
    }
}

/// Sweep one bucket's intents older than `reclaim_after`.
pub async fn sweep_bucket(
    cluster: &Arc<Cluster>,
    bucket: &BucketRecord,
    reclaim_after: Duration,
) -> Result<Swept, Box<dyn std::error::Error + Send + Sync>> {
    let mut swept = Swept::default();
    let cutoff = index::now_ms() - reclaim_after.as_millis() as i64;
    for shard in 0..bucket.index_shards.max(1) {
        let obj = index::table_object(bucket, Table::Intents, shard);
        let mut scan = index::Scan::new(obj, Bytes::new());
        while let Some(page) = scan.next_page(cluster).await? {
            for (key, value) in &page {
                let Ok(id) = <[u8; 8]>::try_from(key.as_ref()) else {
                    continue;
                };
                let data_id = u64::from_be_bytes(id);
                let intent: Intent = match serde_json::from_slice(value) {
                    Ok(i) => i,
                    Err(e) => {
                        tracing::warn!(bucket = %bucket.name, data = data_id, "unreadable intent: {e}");
                        continue;
                    }
                };
                if intent.started_ms > cutoff {
                    swept.live += 1;
                    continue;
                }
                if referenced(cluster, bucket, data_id, &intent).await? {
                    swept.cleared += 1;
                } else {
                    let chunks = intent
                        .max_bytes
                        .max(1)
                        .div_ceil(bucket.chunk_bytes.max(1) as u64);
                    data::delete_chunks(cluster, bucket, data_id, chunks).await?;
                    swept.reclaimed += 1;
                }
                // Only the intent as read goes: a refresh in between means it is alive.
                let edit = KvEdit {
                    key: key.clone(),
                    value: None,
                    cond: KvCond::Equals(value.clone()),
                };
                match cluster.kv_update(obj, vec![edit], true).await {
                    Ok(_) | Err(basalt_client::ClientError::KvConflict { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(swept)
}

/// Sweep every bucket now and then until `stop`.
pub async fn run(
    cluster: Arc<Cluster>,
    every: Duration,
    reclaim_after: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(every) => {}
        }
        let all = match buckets::list_buckets(&cluster).await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!("sweeper: listing buckets: {e}");
                continue;
            }
        };
        for bucket in all {
            match sweep_bucket(&cluster, &bucket, reclaim_after).await {
                Ok(s) if s.reclaimed + s.cleared > 0 => tracing::info!(
                    bucket = %bucket.name,
                    reclaimed = s.reclaimed,
                    cleared = s.cleared,
                    "sweeper: reclaimed the data of unfinished uploads"
                ),
                Ok(_) => {}
                Err(e) => tracing::warn!(bucket = %bucket.name, "sweeper: {e}"),
            }
        }
    }
}
