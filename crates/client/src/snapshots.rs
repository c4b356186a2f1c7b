//! Snapshots and clones: layers of a volume family (docs/design.md, "Layers").
//!
//! A snapshot freezes the volume's head layer and moves the volume to a new head whose
//! parent is the frozen layer; a clone is a new volume whose head's parent is a snapshot.
//! Both change metadata only: O(1) whatever the volume's size.

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::volume::Volume;
use crate::volumes::{check_name, decode, key, meta_retry, unix_now, ParentRef, SnapshotInfo};
use crate::volumes::{next_family_layer, VolumeInfo, VOLUMES_PREFIX, VOLUME_FORMAT_VERSION};
use basalt_meta::schema::{frozen_key, layer_key, FrozenRecord, LayerRecord, LAYERS_PREFIX};
use basalt_meta::Revision;
use basalt_proto::{Header, InodeId, ObjectId, Opcode};
use std::sync::Arc;

/// What a clone is made from: its parent layer and the volume settings it inherits.
pub(crate) struct CloneOf {
    pub parent: ParentRef,
    pub size: u64,
    pub pool: basalt_proto::PoolId,
    pub object_size: u32,
}

/// COPYUP requests in flight while flattening or merging.
const COPY_UP_WINDOW: usize = 64;

/// Most snapshots one volume keeps (each is a layer of every later head's chain).
pub const MAX_SNAPSHOTS: usize = 48;

/// How the hidden snapshots a writer-lock fence takes begin (a name users cannot give).
pub const FENCE_PREFIX: &str = ".fence-";

/// Is `name` a snapshot a writer-lock fence took (hidden from CSI and NBD listings)?
pub fn is_fence_snapshot(name: &str) -> bool {
    name.strip_prefix(FENCE_PREFIX)
        .is_some_and(|rest| !rest.is_empty() && check_name(rest).is_ok())
}

/// Split `VOL@SNAP` into its two names, both checked (a fence's `.fence-…` name is
/// accepted, so such a snapshot can be read, cloned or removed like any other).
pub fn parse_snapshot_spec(spec: &str) -> Result<(&str, &str), ClientError> {
    let Some((volume, snapshot)) = spec.split_once('@') else {
        return Err(ClientError::Invalid {
            reason: format!("\"{spec}\" does not name a snapshot: expected VOLUME@SNAPSHOT"),
        });
    };
    check_name(volume)?;
    if !is_fence_snapshot(snapshot) {
        check_snapshot_name(snapshot)?;
    }
    Ok((volume, snapshot))
}

/// Snapshot names follow volume names' rules (so `@` and `/` never appear in them).
pub fn check_snapshot_name(name: &str) -> Result<(), ClientError> {
    check_name(name).map_err(|_| ClientError::Invalid {
        reason: format!(
            "snapshot name \"{name}\" must be 1 to 128 letters, digits, '.', '_' or '-', \
             not starting with '.' or '-'"
        ),
    })
}

fn changed(name: &str) -> ClientError {
    ClientError::Invalid {
        reason: format!("volume \"{name}\" changed concurrently; try again"),
    }
}

impl Cluster {
    /// Read a volume record with its revision.
    async fn volume_record(&self, name: &str) -> Result<(VolumeInfo, Revision), ClientError> {
        let k = key(name);
        match meta_retry(|| self.meta().get(&k)).await? {
            Some((v, rev)) => Ok((decode(&v)?, rev)),
            None => Err(ClientError::NoSuchVolume { name: name.into() }),
        }
    }

    /// Write a volume record if its revision is still `rev`.
    async fn put_volume_record(
        &self,
        info: &VolumeInfo,
        rev: Revision,
    ) -> Result<Revision, ClientError> {
        let mut info = info.clone();
        info.format_version = VOLUME_FORMAT_VERSION;
        if info.origin == 0 {
            info.origin = info.id;
        }
        let value = serde_json::to_vec(&info).expect("volume record serialises");
        self.meta()
            .compare_and_swap(&key(&info.name), rev, value)
            .await?
            .ok_or_else(|| changed(&info.name))
    }

    /// Change volume `name`'s record with `edit` and write it back with CAS, re-reading and
    /// editing again when it changed meanwhile (bounded). `edit` returns false to leave the
    /// record as it is. Returns the record as written (or as left).
    pub(crate) async fn edit_volume(
        &self,
        name: &str,
        mut edit: impl FnMut(&mut VolumeInfo) -> bool,
    ) -> Result<VolumeInfo, ClientError> {
        for _ in 0..basalt_meta::counter::COUNTER_CAS_RETRIES {
            let (mut info, rev) = self.volume_record(name).await?;
            if !edit(&mut info) {
                return Ok(info);
            }
            if self.put_volume_record(&info, rev).await.is_ok() {
                return Ok(info);
            }
        }
        Err(changed(name))
    }

    /// Take snapshot `snapshot` of volume `name`: crash-consistent (every write
    /// acknowledged before this returns is in it, none that starts after), O(1).
    pub async fn snapshot_volume(
        &self,
        name: &str,
        snapshot: &str,
    ) -> Result<SnapshotInfo, ClientError> {
        check_snapshot_name(snapshot)?;
        self.take_snapshot(name, snapshot).await
    }

    /// Fence the volume's writers off (a writer lock taken from a holder that may still
    /// write): freeze its head into a hidden snapshot (`.fence-…`) and move it on. Every OSD
    /// refuses writes to the frozen layer from then on, and a handle that loses its lock
    /// does not follow the head (docs/design.md, "The writer lock").
    pub(crate) async fn fence_writers(&self, name: &str) -> Result<SnapshotInfo, ClientError> {
        let info = self.volume_record(name).await?.0;
        let base = format!("{FENCE_PREFIX}{}", unix_now());
        // Bound: MAX_SNAPSHOTS names taken at most.
        let mut snapshot = base.clone();
        for n in 1..=MAX_SNAPSHOTS {
            if info.snapshot(&snapshot).is_none() {
                break;
            }
            snapshot = format!("{base}-{n}");
        }
        self.take_snapshot(name, &snapshot).await
    }

    async fn take_snapshot(&self, name: &str, snapshot: &str) -> Result<SnapshotInfo, ClientError> {
        // A snapshot an earlier command left half done (it died after freezing the head)
        // is finished first; when it is this very snapshot, that is all there is to do.
        let (info, finished) = self.settle_head(name).await?;
        if finished
            .iter()
            .any(|f| f.snapshot == snapshot && f.rollback_to.is_none())
        {
            return info
                .snapshot(snapshot)
                .cloned()
                .ok_or_else(|| changed(name));
        }
        if info.snapshot(snapshot).is_some() {
            return Err(ClientError::Exists {
                what: format!("snapshot {name}@{snapshot}"),
            });
        }
        if info.snapshots.len() >= MAX_SNAPSHOTS {
            return Err(ClientError::Invalid {
                reason: format!(
                    "volume \"{name}\" has {MAX_SNAPSHOTS} snapshots, the most it may keep"
                ),
            });
        }
        let next_head = next_family_layer(self.meta().as_ref(), info.id).await?;
        let frozen = FrozenRecord {
            inode: info.id,
            volume: name.to_string(),
            snapshot: snapshot.to_string(),
            next_head,
            size: info.size,
            created: unix_now(),
            rollback_to: None,
        };
        self.freeze_and_finish(&frozen).await?;
        let (info, _) = self.volume_record(name).await?;
        info.snapshot(snapshot)
            .cloned()
            .ok_or_else(|| changed(name))
    }

    async fn frozen_record(
        &self,
        inode: InodeId,
    ) -> Result<Option<(FrozenRecord, Revision)>, ClientError> {
        self.json_record(&frozen_key(inode), "frozen-layer record")
            .await
    }

    /// The JSON record at `key` with its revision, if present (`what` names it in errors).
    async fn json_record<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
        what: &str,
    ) -> Result<Option<(T, Revision)>, ClientError> {
        match self.meta().get(key).await? {
            Some((v, rev)) => serde_json::from_slice(&v)
                .map(|r| Some((r, rev)))
                .map_err(|e| ClientError::Invalid {
                    reason: format!("{what} {key} is unreadable: {e}"),
                }),
            None => Ok(None),
        }
    }

    /// Finish the snapshot that froze layer `inode`, if one did and is not finished (a
    /// handle whose head stays frozen calls this; see docs/design.md, "Layers").
    pub async fn finish_snapshot(&self, inode: InodeId) -> Result<(), ClientError> {
        match self.frozen_record(inode).await? {
            Some((frozen, _)) => self.finish_frozen(&frozen).await,
            None => Ok(()),
        }
    }

    /// Step 2 then steps 3–5: write the frozen record (the freeze and the intent) only if
    /// absent, so two commands racing on the same head cannot both go on, then finish.
    async fn freeze_and_finish(&self, frozen: &FrozenRecord) -> Result<(), ClientError> {
        let value = serde_json::to_vec(frozen).expect("frozen record serialises");
        if self
            .meta()
            .compare_and_swap(&frozen_key(frozen.inode), 0, value)
            .await?
            .is_none()
        {
            return Err(ClientError::Invalid {
                reason: format!(
                    "a snapshot or rollback of volume \"{}\" is in progress",
                    frozen.volume
                ),
            });
        }
        self.finish_frozen(frozen).await
    }

    /// Steps 3–5 of the snapshot (or rollback) protocol; every step is idempotent.
    async fn finish_frozen(&self, frozen: &FrozenRecord) -> Result<(), ClientError> {
        // 3. Every OSD refuses writes to the old head from now on (or is down, and re-reads
        //    the frozen layers before it serves again).
        self.broadcast(Opcode::Fence, ObjectId::new(frozen.inode, 0))
            .await?;
        if frozen.next_head == 0 {
            // An image's layer: frozen for good, nothing moves.
            return Ok(());
        }
        if frozen.rollback_to.is_some() {
            // A rollback drops the old head: nobody can read or write it any more (it is
            // frozen and no snapshot names it), so its data goes before the head moves.
            self.purge(frozen.inode, 0).await?;
            self.flush().await?;
        }
        // 4. The new head's layer record.
        let layer = LayerRecord {
            inode: frozen.next_head,
            parent: Some(frozen.rollback_to.unwrap_or(frozen.inode)),
            owner: frozen.volume.clone(),
            created: frozen.created,
        };
        let value = serde_json::to_vec(&layer).expect("layer record serialises");
        self.meta()
            .compare_and_swap(&layer_key(frozen.next_head), 0, value)
            .await?;
        // 5. Move the volume's head (unless that happened already).
        let moved = self
            .edit_volume(&frozen.volume, |info| {
                if info.id != frozen.inode {
                    return false;
                }
                if frozen.rollback_to.is_none() {
                    info.snapshots.push(SnapshotInfo {
                        name: frozen.snapshot.clone(),
                        inode: frozen.inode,
                        size: frozen.size,
                        created: frozen.created,
                        removing: false,
                    });
                }
                info.id = frozen.next_head;
                info.size = frozen.size;
                true
            })
            .await;
        match moved {
            // The volume was removed meanwhile: nothing to move.
            Err(ClientError::NoSuchVolume { .. }) => Ok(()),
            Err(e) => Err(e),
            Ok(info) => {
                if info.id == frozen.next_head {
                    if frozen.rollback_to.is_some() {
                        let _ = self.delete_layer_record(frozen.inode).await;
                    }
                    tracing::info!(
                        "{} {}@{}; head is now layer {:#x}",
                        if frozen.rollback_to.is_some() {
                            "rolled back to"
                        } else {
                            "took snapshot"
                        },
                        frozen.volume,
                        frozen.snapshot,
                        frozen.next_head
                    );
                }
                Ok(())
            }
        }
    }

    /// Finish whatever snapshot or rollback froze the head of `name`, so a new one can
    /// start; returns the volume record afterwards and what was finished.
    pub(crate) async fn settle_head(
        &self,
        name: &str,
    ) -> Result<(VolumeInfo, Vec<FrozenRecord>), ClientError> {
        let mut info = self.volume_record(name).await?.0;
        let mut finished = Vec::new();
        // Bound: each round moves the head on to a newer layer.
        for _ in 0..=MAX_SNAPSHOTS {
            let Some((frozen, _)) = self.frozen_record(info.id).await? else {
                return Ok((info, finished));
            };
            if frozen.next_head == 0 {
                // Frozen for good (a removal under way): the head will not move.
                return Ok((info, finished));
            }
            self.finish_frozen(&frozen).await?;
            info = self.volume_record(name).await?.0;
            finished.push(frozen);
        }
        Err(changed(name))
    }

    /// Roll volume `name` back to its snapshot `snapshot`: the volume reads exactly as the
    /// snapshot does (size included) from when this returns; writes made since are
    /// dropped. O(1) plus deleting the dropped writes. Open handles follow, as after a
    /// snapshot.
    pub async fn rollback_volume(
        &self,
        name: &str,
        snapshot: &str,
    ) -> Result<VolumeInfo, ClientError> {
        if !is_fence_snapshot(snapshot) {
            check_snapshot_name(snapshot)?;
        }
        let (info, _) = self.settle_head(name).await?;
        let snap = info.live_snapshot(snapshot)?;
        let next_head = next_family_layer(self.meta().as_ref(), info.id).await?;
        let frozen = FrozenRecord {
            inode: info.id,
            volume: name.to_string(),
            snapshot: snapshot.to_string(),
            next_head,
            size: snap.size,
            created: unix_now(),
            rollback_to: Some(snap.inode),
        };
        self.freeze_and_finish(&frozen).await?;
        Ok(self.volume_record(name).await?.0)
    }

    /// A layer's record, if it has one (layer 0s of flat volumes have none).
    async fn layer_record(
        &self,
        inode: InodeId,
    ) -> Result<Option<(LayerRecord, Revision)>, ClientError> {
        self.json_record(&layer_key(inode), "layer record").await
    }

    pub(crate) async fn delete_layer_record(&self, inode: InodeId) -> Result<(), ClientError> {
        if let Some((_, rev)) = self.meta().get(&layer_key(inode)).await? {
            self.meta()
                .compare_and_delete(&layer_key(inode), rev)
                .await?;
        }
        Ok(())
    }

    /// Every layer whose parent is `parent`.
    async fn children_of(&self, parent: InodeId) -> Result<Vec<LayerRecord>, ClientError> {
        let entries = meta_retry(|| self.meta().list(LAYERS_PREFIX)).await?;
        Ok(entries
            .iter()
            .filter_map(|(_, v, _)| serde_json::from_slice::<LayerRecord>(v).ok())
            .filter(|r| r.parent == Some(parent))
            .collect())
    }

    /// Point layer `inode`'s parent at `parent` (only ever further down its own chain,
    /// after the layers in between were copied up: see docs/design.md, "Layers").
    async fn set_layer_parent(
        &self,
        inode: InodeId,
        parent: Option<InodeId>,
    ) -> Result<(), ClientError> {
        for _ in 0..basalt_meta::counter::COUNTER_CAS_RETRIES {
            let Some((mut record, rev)) = self.layer_record(inode).await? else {
                return Ok(());
            };
            record.parent = parent;
            let value = serde_json::to_vec(&record).expect("layer record serialises");
            if self
                .meta()
                .compare_and_swap(&layer_key(inode), rev, value)
                .await?
                .is_some()
            {
                return Ok(());
            }
        }
        Err(ClientError::Invalid {
            reason: format!("layer {inode:#x} changed concurrently; try again"),
        })
    }

    /// COPYUP every object index below `objects` into layer `inode` (each one copies the
    /// nearest ancestor's object when the layer lacks it), COPY_UP_WINDOW at a time;
    /// `progress(done, total)` after each.
    async fn copy_up_all(
        self: &Arc<Self>,
        inode: InodeId,
        objects: u64,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<(), ClientError> {
        let mut set = tokio::task::JoinSet::new();
        let mut done = 0u64;
        for index in 0..objects {
            if set.len() >= COPY_UP_WINDOW {
                if let Some(r) = set.join_next().await {
                    r.map_err(|e| ClientError::Invalid {
                        reason: format!("copy-up task failed: {e}"),
                    })??;
                    done += 1;
                    progress(done, objects);
                }
            }
            let cluster = self.clone();
            set.spawn(async move { cluster.copy_up(ObjectId::new(inode, index)).await });
        }
        while let Some(r) = set.join_next().await {
            r.map_err(|e| ClientError::Invalid {
                reason: format!("copy-up task failed: {e}"),
            })??;
            done += 1;
            progress(done, objects);
        }
        Ok(())
    }

    /// One COPYUP request (retried across failovers like any object request).
    pub async fn copy_up(&self, obj: ObjectId) -> Result<(), ClientError> {
        let map = self.map();
        let pool = map.pools.get(&basalt_proto::inode_pool(obj.inode)).ok_or(
            basalt_placement::MapError::NoSuchPool {
                pool: basalt_proto::inode_pool(obj.inode),
            },
        )?;
        let pg = basalt_placement::ClusterMap::pg_of(pool, obj);
        let mut h = Header::request(Opcode::CopyUp, 0, obj);
        h.pg = pg;
        let reply = self.object_request(pg, h, bytes::Bytes::new()).await?;
        match reply.header.status {
            basalt_proto::Status::Ok => Ok(()),
            status => Err(ClientError::Status { status }),
        }
    }

    /// Objects of a layer of `size` bytes in the pool of `info`.
    fn objects_of(info: &VolumeInfo, size: u64) -> u64 {
        size.div_ceil(info.object_size as u64)
    }

    /// Remove snapshot `volume@snapshot`: refused while clones depend on it. Its data that
    /// the layers above it still read is copied into them first (see docs/design.md,
    /// "Layers"), then the rest is deleted. `progress(done, total)` reports the copy.
    pub async fn remove_snapshot(
        self: &Arc<Self>,
        volume: &str,
        snapshot: &str,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<(), ClientError> {
        if !is_fence_snapshot(snapshot) {
            check_snapshot_name(snapshot)?;
        }
        let (mut info, mut rev) = self.volume_record(volume).await?;
        let Some(pos) = info.snapshots.iter().position(|s| s.name == snapshot) else {
            return Err(ClientError::NoSuchSnapshot {
                volume: volume.into(),
                snapshot: snapshot.into(),
            });
        };
        let snap = info.snapshots[pos].clone();
        // Mark it, then look for clones: a clone made meanwhile sees the mark and undoes.
        if !snap.removing {
            info.snapshots[pos].removing = true;
            rev = self.put_volume_record(&info, rev).await?;
        }
        let clones = self.clones_of(&[snap.inode]).await?;
        if !clones.is_empty() {
            info.snapshots[pos].removing = snap.removing;
            let _ = self.put_volume_record(&info, rev).await;
            return Err(ClientError::Invalid {
                reason: format!(
                    "snapshot {volume}@{snapshot} has clones: {}; remove or flatten them first",
                    clones.join(", ")
                ),
            });
        }
        // Merge into every layer sitting on it (the next snapshot or the head of this
        // volume; several after a rollback), then re-point them past it.
        let parent = self
            .layer_record(snap.inode)
            .await?
            .and_then(|(r, _)| r.parent);
        let children = self.children_of(snap.inode).await?;
        let objects = Self::objects_of(&info, snap.size);
        let total = objects * children.len() as u64;
        for (i, child) in children.iter().enumerate() {
            let base = objects * i as u64;
            self.copy_up_all(child.inode, objects, &|done, _| {
                progress(base + done, total)
            })
            .await?;
        }
        self.flush().await?;
        for child in &children {
            self.set_layer_parent(child.inode, parent).await?;
        }
        self.purge(snap.inode, 0).await?;
        self.flush().await?;
        self.edit_volume(volume, |info| {
            info.snapshots.retain(|s| s.inode != snap.inode);
            true
        })
        .await?;
        self.delete_layer_record(snap.inode).await
    }

    /// Make clone `name` independent of its parent snapshot: copy every object it still
    /// reads from the parent into its own layers (the head, and its oldest snapshots),
    /// under load, then drop the link. `progress(done, total)` reports the copy.
    pub async fn flatten_volume(
        self: &Arc<Self>,
        name: &str,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<VolumeInfo, ClientError> {
        let (info, _) = self.settle_head(name).await?;
        let Some(parent) = info.parent.clone() else {
            return Err(ClientError::Invalid {
                reason: format!("volume \"{name}\" has no parent: nothing to flatten"),
            });
        };
        // The volume's layers that sit directly on the parent.
        let layers: Vec<(InodeId, u64)> = self
            .children_of(parent.inode)
            .await?
            .into_iter()
            .filter(|r| r.owner == name)
            .map(|r| {
                let size = if r.inode == info.id {
                    info.size
                } else {
                    info.snapshots
                        .iter()
                        .find(|s| s.inode == r.inode)
                        .map(|s| s.size)
                        .unwrap_or(info.size)
                };
                (r.inode, size)
            })
            .collect();
        let total: u64 = layers
            .iter()
            .map(|(_, s)| Self::objects_of(&info, *s))
            .sum();
        let mut base = 0;
        for &(inode, size) in &layers {
            let objects = Self::objects_of(&info, size);
            self.copy_up_all(inode, objects, &|done, _| progress(base + done, total))
                .await?;
            base += objects;
        }
        self.flush().await?;
        for &(inode, _) in &layers {
            self.set_layer_parent(inode, None).await?;
        }
        self.edit_volume(name, |info| {
            info.parent = None;
            true
        })
        .await
    }

    /// Clone `volume@snapshot` into a new volume `new` (O(1): a new layer whose parent is
    /// the snapshot's; the clone starts with the snapshot's size).
    pub async fn clone_snapshot(
        &self,
        volume: &str,
        snapshot: &str,
        new: &str,
    ) -> Result<VolumeInfo, ClientError> {
        check_name(new)?;
        let (parent, _) = self.volume_record(volume).await?;
        let snap = parent.live_snapshot(snapshot)?;
        let parent_ref = ParentRef {
            volume: volume.to_string(),
            snapshot: snapshot.to_string(),
            inode: snap.inode,
            image: None,
        };
        let template = CloneOf {
            parent: parent_ref,
            size: snap.size,
            pool: parent.pool,
            object_size: parent.object_size,
        };
        // If `snapshot rm` marked the snapshot meanwhile, it may not have seen this clone:
        // undo (see docs/design.md, "Layers": whichever goes second sees the other).
        let still = || async {
            self.volume_record(volume).await.ok().and_then(|(p, _)| {
                p.snapshot(snapshot)
                    .map(|s| !s.removing && s.inode == snap.inode)
            }) == Some(true)
        };
        match self.create_clone(new, template, still).await? {
            Some(info) => Ok(info),
            None => Err(ClientError::NoSuchSnapshot {
                volume: volume.into(),
                snapshot: snapshot.into(),
            }),
        }
    }

    /// Make volume `new` as a clone of `of.parent`: a new layer of the parent's family and a
    /// volume record (CAS-absent). Then, if `still()` says the parent is no longer there
    /// (its removal may have missed this clone), delete the record again and return None.
    pub(crate) async fn create_clone<F, Fut>(
        &self,
        new: &str,
        of: CloneOf,
        still: F,
    ) -> Result<Option<VolumeInfo>, ClientError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        check_name(new)?;
        if self.meta().get(&key(new)).await?.is_some() {
            return Err(ClientError::VolumeExists { name: new.into() });
        }
        let head = next_family_layer(self.meta().as_ref(), of.parent.inode).await?;
        let layer = LayerRecord {
            inode: head,
            parent: Some(of.parent.inode),
            owner: new.to_string(),
            created: unix_now(),
        };
        let value = serde_json::to_vec(&layer).expect("layer record serialises");
        self.meta()
            .compare_and_swap(&layer_key(head), 0, value)
            .await?;
        let info = VolumeInfo {
            format_version: VOLUME_FORMAT_VERSION,
            name: new.to_string(),
            id: head,
            family: basalt_proto::inode_family(head),
            size: of.size,
            pool: of.pool,
            object_size: of.object_size,
            created: layer.created,
            parent: Some(of.parent),
            snapshots: Vec::new(),
            origin: head,
        };
        let value = serde_json::to_vec(&info).expect("volume record serialises");
        if self
            .meta()
            .compare_and_swap(&key(new), 0, value)
            .await?
            .is_none()
        {
            return Err(ClientError::VolumeExists { name: new.into() });
        }
        if !still().await {
            if let Some((_, rev)) = self.meta().get(&key(new)).await? {
                self.meta().compare_and_delete(&key(new), rev).await?;
            }
            return Ok(None);
        }
        Ok(Some(info))
    }

    /// A read-only handle on `volume@snapshot`.
    pub async fn open_snapshot(
        self: &Arc<Self>,
        volume: &str,
        snapshot: &str,
    ) -> Result<Volume, ClientError> {
        let (info, _) = self.volume_record(volume).await?;
        Volume::snapshot(self.clone(), info, snapshot)
    }

    /// Volumes cloned from any of `layers`, as "CLONE (of VOL@SNAP)".
    pub async fn clones_of(&self, layers: &[InodeId]) -> Result<Vec<String>, ClientError> {
        let entries = meta_retry(|| self.meta().list(VOLUMES_PREFIX)).await?;
        let mut clones = Vec::new();
        for (_, value, _) in entries {
            let Ok(info) = decode(&value) else { continue };
            if let Some(p) = info.parent.filter(|p| layers.contains(&p.inode)) {
                clones.push(format!("{} (of {p})", info.name));
            }
        }
        Ok(clones)
    }

    /// Before removing a volume's snapshots: mark them removing (no new clone may name
    /// them), then refuse, unmarking them, while clones depend on any.
    pub(crate) async fn mark_snapshots_removing(
        &self,
        name: &str,
        mut info: VolumeInfo,
        rev: Revision,
    ) -> Result<(VolumeInfo, Revision), ClientError> {
        let was: Vec<bool> = info.snapshots.iter().map(|s| s.removing).collect();
        for s in &mut info.snapshots {
            s.removing = true;
        }
        let rev = self.put_volume_record(&info, rev).await?;
        let layers: Vec<InodeId> = info.snapshots.iter().map(|s| s.inode).collect();
        let clones = self.clones_of(&layers).await?;
        if clones.is_empty() {
            return Ok((info, rev));
        }
        for (s, was) in info.snapshots.iter_mut().zip(was) {
            s.removing = was;
        }
        let _ = self.put_volume_record(&info, rev).await;
        Err(ClientError::Invalid {
            reason: format!(
                "volume \"{name}\" has clones of its snapshots: {}; remove them first",
                clones.join(", ")
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: snapshot specs split at '@' and bad names are refused with a reason.
    #[test]
    fn snapshot_specs() {
        assert_eq!(parse_snapshot_spec("vol@s1").unwrap(), ("vol", "s1"));
        for bad in ["vol", "@s", "vol@", "vol@a@b", "vol@a/b", "a/b@s", "vol@-x"] {
            assert!(parse_snapshot_spec(bad).is_err(), "{bad}");
        }
    }
}
