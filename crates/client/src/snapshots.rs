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
use basalt_meta::schema::{frozen_key, layer_key, FrozenRecord, LayerRecord};
use basalt_meta::Revision;
use basalt_proto::{InodeId, ObjectId, Opcode};
use std::sync::Arc;

/// Most snapshots one volume keeps (each is a layer of every later head's chain).
pub const MAX_SNAPSHOTS: usize = 48;

/// Split `VOL@SNAP` into its two names, both checked.
pub fn parse_snapshot_spec(spec: &str) -> Result<(&str, &str), ClientError> {
    let Some((volume, snapshot)) = spec.split_once('@') else {
        return Err(ClientError::Invalid {
            reason: format!("\"{spec}\" does not name a snapshot: expected VOLUME@SNAPSHOT"),
        });
    };
    check_name(volume)?;
    check_snapshot_name(snapshot)?;
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

    /// Take snapshot `snapshot` of volume `name`: crash-consistent (every write
    /// acknowledged before this returns is in it, none that starts after), O(1).
    pub async fn snapshot_volume(
        &self,
        name: &str,
        snapshot: &str,
    ) -> Result<SnapshotInfo, ClientError> {
        check_snapshot_name(snapshot)?;
        let mut info = self.volume_record(name).await?.0;
        // A snapshot an earlier command left half done (it died after freezing the head)
        // is finished first; when it is this very snapshot, that is all there is to do.
        // Bound: each round moves the head on, and a volume has at most MAX_SNAPSHOTS.
        for _ in 0..=MAX_SNAPSHOTS {
            let Some((frozen, _)) = self.frozen_record(info.id).await? else {
                break;
            };
            self.finish_frozen(&frozen).await?;
            info = self.volume_record(name).await?.0;
            if frozen.snapshot == snapshot {
                return info
                    .snapshot(snapshot)
                    .cloned()
                    .ok_or_else(|| changed(name));
            }
        }
        if info.snapshot(snapshot).is_some() {
            return Err(ClientError::Invalid {
                reason: format!("snapshot {name}@{snapshot} exists"),
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
        };
        // The freeze and the intent in one record: created only if absent, so two commands
        // racing to snapshot the same head cannot both go on.
        let value = serde_json::to_vec(&frozen).expect("frozen record serialises");
        if self
            .meta()
            .compare_and_swap(&frozen_key(info.id), 0, value)
            .await?
            .is_none()
        {
            return Err(ClientError::Invalid {
                reason: format!("another snapshot of volume \"{name}\" is being taken"),
            });
        }
        self.finish_frozen(&frozen).await?;
        let (info, _) = self.volume_record(name).await?;
        info.snapshot(snapshot)
            .cloned()
            .ok_or_else(|| changed(name))
    }

    async fn frozen_record(
        &self,
        inode: InodeId,
    ) -> Result<Option<(FrozenRecord, Revision)>, ClientError> {
        match self.meta().get(&frozen_key(inode)).await? {
            Some((v, rev)) => serde_json::from_slice(&v)
                .map(|r| Some((r, rev)))
                .map_err(|e| ClientError::Invalid {
                    reason: format!("frozen-layer record of {inode:#x} is unreadable: {e}"),
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

    /// Steps 3–5 of the snapshot protocol; every step is idempotent.
    async fn finish_frozen(&self, frozen: &FrozenRecord) -> Result<(), ClientError> {
        // 3. Every OSD refuses writes to the old head from now on (or is down, and re-reads
        //    the frozen layers before it serves again).
        self.broadcast(Opcode::Fence, ObjectId::new(frozen.inode, 0))
            .await?;
        // 4. The new head's layer record.
        let layer = LayerRecord {
            inode: frozen.next_head,
            parent: Some(frozen.inode),
            owner: frozen.volume.clone(),
            created: frozen.created,
        };
        let value = serde_json::to_vec(&layer).expect("layer record serialises");
        self.meta()
            .compare_and_swap(&layer_key(frozen.next_head), 0, value)
            .await?;
        // 5. Move the volume's head (unless that happened already).
        for _ in 0..basalt_meta::counter::COUNTER_CAS_RETRIES {
            let (mut info, rev) = match self.volume_record(&frozen.volume).await {
                Ok(r) => r,
                // The volume was removed meanwhile: nothing to move.
                Err(ClientError::NoSuchVolume { .. }) => return Ok(()),
                Err(e) => return Err(e),
            };
            if info.id != frozen.inode {
                return Ok(());
            }
            info.snapshots.push(SnapshotInfo {
                name: frozen.snapshot.clone(),
                inode: frozen.inode,
                size: frozen.size,
                created: frozen.created,
                removing: false,
            });
            info.id = frozen.next_head;
            match self.put_volume_record(&info, rev).await {
                Ok(_) => {
                    tracing::info!(
                        "snapshot {}@{} taken; head is now layer {:#x}",
                        frozen.volume,
                        frozen.snapshot,
                        frozen.next_head
                    );
                    return Ok(());
                }
                Err(_) => continue,
            }
        }
        Err(changed(&frozen.volume))
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
        let snap = parent
            .snapshot(snapshot)
            .filter(|s| !s.removing)
            .cloned()
            .ok_or_else(|| ClientError::NoSuchSnapshot {
                volume: volume.into(),
                snapshot: snapshot.into(),
            })?;
        if self.meta().get(&key(new)).await?.is_some() {
            return Err(ClientError::VolumeExists { name: new.into() });
        }
        let head = next_family_layer(self.meta().as_ref(), snap.inode).await?;
        let layer = LayerRecord {
            inode: head,
            parent: Some(snap.inode),
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
            family: parent.family,
            size: snap.size,
            pool: parent.pool,
            object_size: parent.object_size,
            created: layer.created,
            parent: Some(ParentRef {
                volume: volume.to_string(),
                snapshot: snapshot.to_string(),
                inode: snap.inode,
            }),
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
        // If `snapshot rm` marked the snapshot meanwhile, it may not have seen this clone:
        // undo (see docs/design.md, "Layers": whichever goes second sees the other).
        let still = self.volume_record(volume).await.ok().and_then(|(p, _)| {
            p.snapshot(snapshot)
                .map(|s| !s.removing && s.inode == snap.inode)
        });
        if still != Some(true) {
            if let Some((_, rev)) = self.meta().get(&key(new)).await? {
                self.meta().compare_and_delete(&key(new), rev).await?;
            }
            return Err(ClientError::NoSuchSnapshot {
                volume: volume.into(),
                snapshot: snapshot.into(),
            });
        }
        Ok(info)
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
                clones.push(format!("{} (of {}@{})", info.name, p.volume, p.snapshot));
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
