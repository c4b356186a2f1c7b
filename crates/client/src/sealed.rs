//! Sealed layers: a layer of a family of its own, written once and then frozen — the
//! storage of images and of objvol indexes (docs/design.md, "Layers"). The owner keeps its
//! own record naming the layer; this module makes, opens and freezes the layer itself.

use crate::cluster::Cluster;
use crate::error::ClientError;
use crate::volume::Volume;
use crate::volumes::{next_family, unix_now, VolumeInfo, VOLUME_FORMAT_VERSION};
use basalt_meta::schema::{frozen_key, FrozenRecord};
use basalt_proto::{inode_family, make_inode, InodeId, ObjectId, Opcode, PoolId};
use std::sync::Arc;

/// Where a sealed layer lives and how big it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SealedLayer {
    pub inode: InodeId,
    pub pool: PoolId,
    pub object_size: u32,
    /// Bytes (a multiple of 4096).
    pub size: u64,
}

impl SealedLayer {
    /// The layer seen as a one-layer volume named `name` (for I/O handles).
    fn as_volume(&self, name: &str, created: u64) -> VolumeInfo {
        VolumeInfo {
            format_version: VOLUME_FORMAT_VERSION,
            name: name.to_string(),
            id: self.inode,
            family: inode_family(self.inode),
            size: self.size,
            pool: self.pool,
            object_size: self.object_size,
            created,
            parent: None,
            snapshots: Vec::new(),
            origin: self.inode,
        }
    }
}

impl Cluster {
    /// A new layer of `size` bytes in `pool`, of a family of its own (nothing written).
    pub async fn new_sealed_layer(
        &self,
        pool: PoolId,
        size: u64,
    ) -> Result<SealedLayer, ClientError> {
        crate::volumes::check_size(size)?;
        let object_size = self
            .map()
            .pools
            .get(&pool)
            .ok_or(basalt_placement::MapError::NoSuchPool { pool })?
            .object_size;
        let inode = make_inode(pool, next_family(self.meta().as_ref()).await?, 0);
        Ok(SealedLayer {
            inode,
            pool,
            object_size,
            size,
        })
    }

    /// A writable handle on a layer not sealed yet (its owner checks that).
    pub fn open_layer_for_writing(
        self: &Arc<Self>,
        layer: &SealedLayer,
        name: &str,
    ) -> Result<Volume, ClientError> {
        Volume::new(self.clone(), layer.as_volume(name, unix_now()))
    }

    /// A read-only handle on a sealed layer.
    pub fn open_sealed_layer(
        self: &Arc<Self>,
        layer: &SealedLayer,
        name: &str,
        created: u64,
    ) -> Result<Volume, ClientError> {
        let mut volume = layer.as_volume(name, created);
        volume.snapshots.push(crate::SnapshotInfo {
            name: "sealed".into(),
            inode: layer.inode,
            size: layer.size,
            created,
            removing: false,
        });
        Volume::snapshot(self.clone(), volume, "sealed")
    }

    /// Seal a layer: make what was written durable, freeze it (OSDs refuse writes to it
    /// from now on).
    pub async fn seal_layer(&self, layer: &SealedLayer) -> Result<(), ClientError> {
        self.flush().await?;
        let frozen = FrozenRecord {
            inode: layer.inode,
            volume: String::new(),
            snapshot: String::new(),
            next_head: 0,
            size: layer.size,
            created: unix_now(),
            rollback_to: None,
        };
        let value = serde_json::to_vec(&frozen).expect("frozen record serialises");
        self.meta().put(&frozen_key(layer.inode), value).await?;
        self.broadcast(Opcode::Fence, ObjectId::new(layer.inode, 0))
            .await?;
        Ok(())
    }
}
