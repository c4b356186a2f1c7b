//! How much data each layer holds: USAGE from every OSD, summed, per copy.

use crate::cluster::{timed, Cluster};
use crate::error::ClientError;
use crate::volumes::VolumeInfo;
use basalt_proto::{inode_pool, Header, InodeId, ObjectId, Opcode, Status, USAGE_MAX_INODES};
use bytes::{BufMut, Bytes, BytesMut};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What one layer holds, counted once (the copies the OSDs store, divided by the pool's
/// replica count: an estimate while a PG is degraded or recovering).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerUsage {
    pub objects: u64,
    /// Allocated bytes.
    pub bytes: u64,
}

/// A volume's size and the data of each of its own layers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeUsage {
    pub name: String,
    pub provisioned: u64,
    /// The head layer: what was written since the last snapshot (or the clone).
    pub head: LayerUsage,
    /// Each snapshot's layer, oldest first.
    pub snapshots: Vec<(String, LayerUsage)>,
    /// Everything the volume's own layers hold (what removing it frees).
    pub total_bytes: u64,
}

impl Cluster {
    /// Usage of each of `inodes`, in order.
    pub async fn layer_usage(&self, inodes: &[InodeId]) -> Result<Vec<LayerUsage>, ClientError> {
        let map = self.map();
        let mut sums: HashMap<InodeId, LayerUsage> = HashMap::new();
        for chunk in inodes.chunks(USAGE_MAX_INODES) {
            let mut payload = BytesMut::with_capacity(4 + 8 * chunk.len());
            payload.put_u32_le(chunk.len() as u32);
            for &inode in chunk {
                payload.put_u64_le(inode);
            }
            let payload: Bytes = payload.freeze();
            let mut pending = Vec::new();
            for osd in map.osds.values().filter(|o| o.up) {
                let conn = self.connection(osd.id).await?;
                let h = Header::request(Opcode::Usage, 0, ObjectId::new(0, 0));
                pending.push((conn.clone(), conn.start(h, payload.clone())));
            }
            for (conn, p) in pending {
                let reply = timed(&conn, p).await?;
                if reply.header.status != Status::Ok || reply.payload.len() != 16 * chunk.len() {
                    return Err(ClientError::BadReply {
                        reason: format!(
                            "USAGE answered {:?} with {} bytes",
                            reply.header.status,
                            reply.payload.len()
                        ),
                    });
                }
                for (&inode, pair) in chunk.iter().zip(reply.payload.chunks_exact(16)) {
                    let word = |i: usize| {
                        u64::from_le_bytes(pair[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
                    };
                    let sum = sums.entry(inode).or_default();
                    sum.objects += word(0);
                    sum.bytes += word(1);
                }
            }
        }
        Ok(inodes
            .iter()
            .map(|inode| {
                // Every object is stored `size` times (replicas), or as k + m chunks of
                // which k hold its bytes (erasure coded).
                let (pieces, data) = match map.pools.get(&inode_pool(*inode)) {
                    Some(p) => match p.ec {
                        Some(ec) => ((ec.k + ec.m) as u64, ec.k as u64),
                        None => (p.size.max(1) as u64, 1),
                    },
                    None => (1, 1),
                };
                let sum = sums.get(inode).copied().unwrap_or_default();
                LayerUsage {
                    objects: sum.objects / pieces,
                    bytes: sum.bytes * data / pieces,
                }
            })
            .collect())
    }

    /// Usage of every layer of each of `volumes`, in one round of requests.
    pub async fn volume_usage(
        &self,
        volumes: &[VolumeInfo],
    ) -> Result<Vec<VolumeUsage>, ClientError> {
        let inodes: Vec<InodeId> = volumes
            .iter()
            .flat_map(|v| std::iter::once(v.id).chain(v.snapshots.iter().map(|s| s.inode)))
            .collect();
        let usage = self.layer_usage(&inodes).await?;
        let mut at = usage.into_iter();
        Ok(volumes
            .iter()
            .map(|v| {
                let head = at.next().unwrap_or_default();
                let snapshots: Vec<(String, LayerUsage)> = v
                    .snapshots
                    .iter()
                    .map(|s| (s.name.clone(), at.next().unwrap_or_default()))
                    .collect();
                let total_bytes = head.bytes + snapshots.iter().map(|s| s.1.bytes).sum::<u64>();
                VolumeUsage {
                    name: v.name.clone(),
                    provisioned: v.size,
                    head,
                    snapshots,
                    total_bytes,
                }
            })
            .collect())
    }
}
