//! Volume records in cluster metadata: create, list, look up, resize, remove.

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::volume::Volume;
use basalt_meta::MetaStore;
use basalt_proto::{inode_family, make_inode, InodeId, PoolId};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use basalt_meta::schema::{NEXT_INODE_KEY, VOLUMES_PREFIX};
/// Volume sizes are whole 4 KiB blocks.
pub const SIZE_ALIGN_BYTES: u64 = 4096;
/// Largest volume: 2^50 bytes (1 PiB); NBD offsets are u64 but keep object indexes sane.
pub const MAX_VOLUME_BYTES: u64 = 1 << 50;
/// Version of the volume record format. Version 2: the inode id carries the pool and family
/// (`basalt_proto::InodeId`); version 1 records predate that and are refused. Version 3: `id`
/// is the head layer, with `parent`, `snapshots` and `origin` (version 2 records read as
/// flat volumes without snapshots).
pub const VOLUME_FORMAT_VERSION: u32 = 3;
/// Oldest record format this version reads.
pub const VOLUME_FORMAT_OLDEST: u32 = 2;

/// Where a byte of a volume lives, in the map of `epoch` (`basalt volume locate`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ByteLocation {
    pub volume: String,
    pub offset: u64,
    /// The object, `INODE:INDEX` in hex, and its index in the volume.
    pub object: String,
    pub object_index: u64,
    pub pg: String,
    pub epoch: u32,
    /// The OSDs that should hold the PG, and those serving it now (the first: its primary).
    pub placement: Vec<u32>,
    pub acting: Vec<u32>,
    pub primary: Option<u32>,
}

/// A volume as stored in metadata (JSON, versioned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeInfo {
    pub format_version: u32,
    pub name: String,
    /// The head: the writable layer I/O goes to (a snapshot moves it to a new layer).
    pub id: InodeId,
    /// Shared by every layer of a volume's clone family; places all layers in the same PGs.
    pub family: u64,
    pub size: u64,
    pub pool: PoolId,
    pub object_size: u32,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// The snapshot this volume was cloned from (None: a volume of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// Snapshots, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapshotInfo>,
    /// The inode of the volume's first layer: its identity in this process's table of open
    /// volumes (0 in format 2 records: then `id`).
    #[serde(default)]
    pub origin: InodeId,
}

/// The snapshot (or image) a clone reads through to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRef {
    /// The volume the snapshot belongs to (empty for an image).
    pub volume: String,
    /// The snapshot's name (empty for an image).
    pub snapshot: String,
    /// The snapshot's (or image's) layer.
    pub inode: InodeId,
    /// The image, when the parent is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl std::fmt::Display for ParentRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.image {
            Some(image) => write!(f, "image {image}"),
            None => write!(f, "{}@{}", self.volume, self.snapshot),
        }
    }
}

/// A snapshot of a volume: a frozen layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    pub name: String,
    /// Its layer.
    pub inode: InodeId,
    /// The volume's size when it was taken.
    pub size: u64,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// `snapshot rm` is in progress: no new clone may name it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub removing: bool,
}

impl VolumeInfo {
    /// The identity of the volume in this process (see `origin`).
    pub fn origin(&self) -> InodeId {
        if self.origin == 0 {
            self.id
        } else {
            self.origin
        }
    }

    /// The snapshot called `name`.
    pub fn snapshot(&self, name: &str) -> Option<&SnapshotInfo> {
        self.snapshots.iter().find(|s| s.name == name)
    }

    /// The snapshot called `name`, unless it is being removed (then it cannot be cloned,
    /// exported or rolled back to).
    pub fn live_snapshot(&self, name: &str) -> Result<SnapshotInfo, ClientError> {
        self.snapshot(name)
            .filter(|s| !s.removing)
            .cloned()
            .ok_or_else(|| ClientError::NoSuchSnapshot {
                volume: self.name.clone(),
                snapshot: name.to_string(),
            })
    }
}

/// Check a volume name: 1–128 characters of [A-Za-z0-9._-], not starting with '.' or '-'.
pub fn check_name(name: &str) -> Result<(), ClientError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || name.len() > 128 {
        return Err(ClientError::Invalid {
            reason: format!("volume name \"{name}\" must be 1 to 128 characters long"),
        });
    }
    if !name.chars().all(ok_char) || name.starts_with(['.', '-']) {
        return Err(ClientError::Invalid {
            reason: format!(
                "volume name \"{name}\" may hold only letters, digits, '.', '_' and '-', \
                 and may not start with '.' or '-'"
            ),
        });
    }
    Ok(())
}

/// Check a volume size.
pub fn check_size(size: u64) -> Result<(), ClientError> {
    if size == 0 {
        return Err(ClientError::Invalid {
            reason: "size must be greater than 0".into(),
        });
    }
    if !size.is_multiple_of(SIZE_ALIGN_BYTES) {
        return Err(ClientError::Invalid {
            reason: format!("size must be a multiple of {SIZE_ALIGN_BYTES} (got {size})"),
        });
    }
    if size > MAX_VOLUME_BYTES {
        return Err(ClientError::Invalid {
            reason: format!("size must be at most {MAX_VOLUME_BYTES} bytes (1 PiB)"),
        });
    }
    Ok(())
}

pub(crate) fn key(name: &str) -> String {
    format!("{VOLUMES_PREFIX}{name}")
}

pub(crate) fn decode(bytes: &[u8]) -> Result<VolumeInfo, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| ClientError::Invalid {
        reason: format!("volume record is unreadable: {e}"),
    })
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Longest time a read of volume records waits for an unavailable metadata store.
pub const META_RETRY_MS: u64 = 30_000;
/// Pause between such attempts.
const META_RETRY_PAUSE_MS: u64 = 250;

/// Run a metadata read, retrying while the store is unavailable, for up to META_RETRY_MS.
pub(crate) async fn meta_retry<T, F, Fut>(op: F) -> Result<T, basalt_meta::MetaError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, basalt_meta::MetaError>>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(META_RETRY_MS);
    // Bound: META_RETRY_MS of META_RETRY_PAUSE_MS rounds (each call has its own timeout).
    loop {
        match op().await {
            Err(basalt_meta::MetaError::Unavailable { reason })
                if tokio::time::Instant::now() < deadline =>
            {
                tracing::debug!("metadata unavailable, retrying: {reason}");
                tokio::time::sleep(std::time::Duration::from_millis(META_RETRY_PAUSE_MS)).await;
            }
            other => return other,
        }
    }
}

/// Allocate a fresh family number (the middle bits of an inode id, see `InodeId`); volumes
/// and S3 buckets draw from the same counter.
pub async fn next_family(meta: &dyn MetaStore) -> Result<u32, ClientError> {
    let family = basalt_meta::next_counter(meta, NEXT_INODE_KEY, 1)
        .await?
        .ok_or_else(|| ClientError::Invalid {
            reason: "could not allocate a volume id: too much contention".into(),
        })?;
    u32::try_from(family).map_err(|_| ClientError::Invalid {
        reason: "every volume id of this cluster has been used".into(),
    })
}

/// Allocate a fresh layer in the family of `inode` (see `InodeId`): layer numbers come from
/// a per-family counter and are never reused.
pub async fn next_family_layer(
    meta: &dyn MetaStore,
    inode: InodeId,
) -> Result<InodeId, ClientError> {
    let layer = basalt_meta::next_counter(meta, &basalt_meta::schema::next_layer_key(inode), 1)
        .await?
        .ok_or_else(|| ClientError::Invalid {
            reason: "could not allocate a layer: too much contention".into(),
        })?;
    let layer = u16::try_from(layer).map_err(|_| ClientError::Invalid {
        reason: "this volume family has used all of its 65,535 layers".into(),
    })?;
    Ok((inode & !0xffff) | layer as InodeId)
}

/// How long `volume rm` waits for the watcher records of clients that just disconnected
/// to go before it refuses the removal.
const RM_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl Cluster {
    /// Create a volume record in pool `pool`.
    pub async fn create_volume(
        &self,
        name: &str,
        size: u64,
        pool: PoolId,
    ) -> Result<VolumeInfo, ClientError> {
        check_name(name)?;
        check_size(size)?;
        let map = self.map();
        let spec = map
            .pools
            .get(&pool)
            .ok_or(basalt_placement::MapError::NoSuchPool { pool })?;
        if self.meta().get(&key(name)).await?.is_some() {
            return Err(ClientError::VolumeExists { name: name.into() });
        }
        if pool > u16::MAX as PoolId {
            return Err(ClientError::Invalid {
                reason: format!("pool id {pool} does not fit a volume id (at most 65535)"),
            });
        }
        let id = make_inode(pool, next_family(self.meta().as_ref()).await?, 0);
        let info = VolumeInfo {
            format_version: VOLUME_FORMAT_VERSION,
            name: name.to_string(),
            id,
            family: inode_family(id),
            size,
            pool,
            object_size: spec.object_size,
            created: unix_now(),
            parent: None,
            snapshots: Vec::new(),
            origin: id,
        };
        let value = serde_json::to_vec(&info).expect("volume record serialises");
        match self.meta().compare_and_swap(&key(name), 0, value).await? {
            Some(_) => Ok(info),
            None => Err(ClientError::VolumeExists { name: name.into() }),
        }
    }

    /// Every volume, by name.
    pub async fn list_volumes(&self) -> Result<Vec<VolumeInfo>, ClientError> {
        let entries = meta_retry(|| self.meta().list(VOLUMES_PREFIX)).await?;
        entries.iter().map(|(_, v, _)| decode(v)).collect()
    }

    /// One volume's record. A metadata outage (etcd restarting) is waited out for up to
    /// [`META_RETRY_MS`], so a client connecting meanwhile sees a pause, not an error.
    pub async fn volume_info(&self, name: &str) -> Result<VolumeInfo, ClientError> {
        let k = key(name);
        match meta_retry(|| self.meta().get(&k)).await? {
            Some((v, _)) => decode(&v),
            None => Err(ClientError::NoSuchVolume { name: name.into() }),
        }
    }

    /// Where byte `offset` of volume `name` lives: its object, PG, and the OSDs that should
    /// hold it and that serve it now (`basalt volume locate`).
    pub async fn locate(&self, name: &str, offset: u64) -> Result<ByteLocation, ClientError> {
        let info = self.volume_info(name).await?;
        let map = self.map();
        let pool = map
            .pools
            .get(&info.pool)
            .ok_or_else(|| ClientError::Invalid {
                reason: format!("pool {} is not in the map", info.pool),
            })?;
        let obj = basalt_proto::ObjectId::new(info.id, offset / info.object_size as u64);
        let pg = basalt_placement::ClusterMap::pg_of(pool, obj);
        let acting = map.acting(pg)?.to_vec();
        let placement = map.placement(pg)?.to_vec();
        Ok(ByteLocation {
            volume: name.to_string(),
            offset,
            object: obj.to_string(),
            object_index: obj.index,
            pg: pg.to_string(),
            epoch: map.epoch,
            placement,
            primary: acting.first().copied(),
            acting,
        })
    }

    /// Open a volume for I/O.
    pub async fn open_volume(self: &Arc<Self>, name: &str) -> Result<Volume, ClientError> {
        let info = self.volume_info(name).await?;
        Volume::new(self.clone(), info)
    }

    /// Change a volume's size. Shrinking (only with `allow_shrink`) discards the data past
    /// the new end first; I/O on the volume through this process pauses meanwhile.
    pub async fn resize_volume(
        self: &Arc<Self>,
        name: &str,
        size: u64,
        allow_shrink: bool,
    ) -> Result<VolumeInfo, ClientError> {
        check_size(size)?;
        let (bytes, rev) = self
            .meta()
            .get(&key(name))
            .await?
            .ok_or_else(|| ClientError::NoSuchVolume { name: name.into() })?;
        let mut info = decode(&bytes)?;
        if size < info.size && (info.parent.is_some() || !info.snapshots.is_empty()) {
            // Purging the head past the new end would let the parent's data show through
            // again if the volume grew back (see docs/design.md, "Layers").
            return Err(ClientError::Invalid {
                reason: format!(
                    "volume \"{name}\" has {}: it can grow but not shrink",
                    if info.parent.is_some() {
                        "a parent snapshot (it is a clone)"
                    } else {
                        "snapshots"
                    }
                ),
            });
        }
        if size < info.size && !allow_shrink {
            // A shrink throws data away for good: never by a typo in the size.
            return Err(ClientError::Invalid {
                reason: format!(
                    "volume \"{name}\" is {}: resizing it to {} would discard its last {}; \
                     pass --allow-shrink to do that",
                    basalt_proto::size::human_bytes(info.size),
                    basalt_proto::size::human_bytes(size),
                    basalt_proto::size::human_bytes(info.size - size)
                ),
            });
        }
        // The handle starts from the recorded size, so a shrink discards from there even in
        // a process that never had the volume open.
        let volume = Volume::new(self.clone(), info.clone())?;
        info.size = size;
        let value = serde_json::to_vec(&info).expect("volume record serialises");
        volume
            .resize(size, || async {
                match self.meta().compare_and_swap(&key(name), rev, value).await? {
                    Some(_) => Ok(()),
                    None => Err(ClientError::Invalid {
                        reason: format!("volume \"{name}\" changed concurrently; try again"),
                    }),
                }
            })
            .await?;
        Ok(info)
    }

    /// Remove a volume and its data. Open handles in this process fail from then on. Data
    /// goes first: a crash part-way leaves the record, so `rm` can be repeated.
    /// [`Cluster::remove_volume`], refused while a gateway has the volume open (see
    /// [`crate::watchers`]) unless `force`.
    pub async fn remove_volume_unless_open(
        self: &Arc<Self>,
        name: &str,
        force: bool,
    ) -> Result<(), ClientError> {
        if !force {
            // A client that just disconnected leaves its record for a few milliseconds
            // (the gateway drops it once it sees the close): give records a moment to go.
            let deadline = std::time::Instant::now() + RM_GRACE;
            let open = loop {
                let open = crate::watchers::list(self.meta().as_ref(), name).await?;
                if open.is_empty() || std::time::Instant::now() >= deadline {
                    break open;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            };
            if !open.is_empty() {
                let gateways: Vec<String> = open.into_iter().map(|w| w.gateway).collect();
                return Err(ClientError::InUse {
                    name: name.into(),
                    gateways: gateways.join(", "),
                });
            }
        }
        self.remove_volume(name).await
    }

    pub async fn remove_volume(self: &Arc<Self>, name: &str) -> Result<(), ClientError> {
        // A snapshot or rollback left half done moves the head first.
        self.settle_head(name).await?;
        let (bytes, rev) = self
            .meta()
            .get(&key(name))
            .await?
            .ok_or_else(|| ClientError::NoSuchVolume { name: name.into() })?;
        let mut info = decode(&bytes)?;
        let mut rev = rev;
        if !info.snapshots.is_empty() {
            (info, rev) = self.mark_snapshots_removing(name, info, rev).await?;
        }
        let layers: Vec<InodeId> = info.snapshots.iter().map(|s| s.inode).collect();
        let head = info.id;
        // Freeze the head for good before deleting its data: a gateway in another process
        // that still has the volume open is refused from here on (its handle then finds no
        // volume) instead of writing into the purged layer. `next_head` 0: nothing to finish.
        let frozen = basalt_meta::schema::FrozenRecord {
            inode: head,
            volume: name.to_string(),
            snapshot: String::new(),
            next_head: 0,
            size: info.size,
            created: unix_now(),
            rollback_to: None,
        };
        let value = serde_json::to_vec(&frozen).expect("frozen record serialises");
        self.meta()
            .put(&basalt_meta::schema::frozen_key(head), value)
            .await?;
        self.broadcast(
            basalt_proto::Opcode::Fence,
            basalt_proto::ObjectId::new(head, 0),
        )
        .await?;
        let volume = Volume::new(self.clone(), info)?;
        volume
            .remove(&layers, || async {
                if self.meta().compare_and_delete(&key(name), rev).await? {
                    Ok(())
                } else {
                    Err(ClientError::Invalid {
                        reason: format!("volume \"{name}\" changed concurrently; try again"),
                    })
                }
            })
            .await?;
        // The layers' records go last: a crash before leaves only records of empty layers.
        for layer in layers.into_iter().chain([head]) {
            self.delete_layer_record(layer).await?;
        }
        crate::locks::forget(self.meta().as_ref(), name).await?;
        crate::access::forget(self.meta().as_ref(), name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: size and name checks give the precise messages users see.
    #[test]
    fn checks() {
        assert!(check_size(4096).is_ok());
        let e = check_size(1000).unwrap_err().to_string();
        assert_eq!(e, "size must be a multiple of 4096 (got 1000)");
        assert!(check_size(0).is_err());
        assert!(check_name("vol0").is_ok());
        assert!(check_name("a/b").is_err());
        assert!(check_name("").is_err());
        assert!(check_name("-x").is_err());
    }
}
