//! Layers on the OSD (docs/design.md, "Layers"): the chain of ancestors of each layer,
//! cached for the life of the process; the set of frozen layers; and the gate a FENCE takes
//! to drain the client mutations in progress.

use basalt_meta::schema::{inode_of_key, layer_key, LayerRecord, FROZEN_PREFIX};
use basalt_meta::{MetaError, MetaStore};
use basalt_proto::{inode_family, InodeId, ObjectId};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use thiserror::Error;
use tokio::time::Instant;

/// Longest chain of ancestors a layer may have (also the bound of every walk up a chain,
/// so a corrupt record naming a cycle ends in an error, not a loop).
pub const MAX_CHAIN_LAYERS: usize = 64;

/// A layer's ancestors, nearest first (empty: the layer has no parent).
pub type Chain = Arc<[InodeId]>;

/// Why a layer's chain could not be known.
#[derive(Debug, Error)]
pub enum LayerError {
    #[error("layer {inode:#x} has no record")]
    Unknown { inode: InodeId },
    #[error("layer record of {inode:#x} is unreadable: {reason}")]
    Corrupt { inode: InodeId, reason: String },
    #[error("the chain of layer {inode:#x} is deeper than {MAX_CHAIN_LAYERS} layers")]
    TooDeep { inode: InodeId },
    #[error("{0}")]
    Meta(#[from] MetaError),
}

/// The layer number inside its family (0: the family's first layer, which never has a parent).
pub fn layer_of(inode: InodeId) -> u16 {
    inode as u16
}

/// What one OSD knows of layers.
pub struct Layers {
    /// The chain of every layer 0 (no parent), shared so the flat-volume path of every
    /// request clones a pointer instead of allocating.
    empty: Chain,
    chains: RwLock<HashMap<InodeId, Chain>>,
    frozen: RwLock<HashSet<InodeId>>,
    /// Client mutations hold it shared from their frozen check to their reply; a FENCE takes
    /// it exclusively for an instant, so it returns only after they all finished.
    gate: tokio::sync::RwLock<()>,
    /// When the newest successful reload of the frozen set started.
    reloaded: Mutex<Option<Instant>>,
}

impl Default for Layers {
    fn default() -> Self {
        Self {
            empty: Arc::from([]),
            chains: Default::default(),
            frozen: Default::default(),
            gate: Default::default(),
            reloaded: Default::default(),
        }
    }
}

impl Layers {
    /// Is `inode` frozen (a snapshot layer)?
    pub fn is_frozen(&self, inode: InodeId) -> bool {
        let frozen = self.frozen.read().expect("frozen lock");
        !frozen.is_empty() && frozen.contains(&inode)
    }

    /// Enter the mutation gate (held until the mutation has been answered).
    pub async fn enter(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Freeze `inode`; returns once no mutation that saw it unfrozen is still in progress.
    pub async fn fence(&self, inode: InodeId) {
        self.frozen.write().expect("frozen lock").insert(inode);
        drop(self.gate.write().await);
    }

    /// Add every layer recorded frozen in the metadata, unless a reload that started after
    /// `since` already did (many PGs activating at once share one listing). Frozen layers
    /// never thaw, so the set only grows.
    pub async fn reload_frozen(
        &self,
        meta: &dyn MetaStore,
        since: Instant,
    ) -> Result<(), MetaError> {
        if self
            .reloaded
            .lock()
            .expect("reload lock")
            .is_some_and(|at| at >= since)
        {
            return Ok(());
        }
        let started = Instant::now();
        let entries = meta.list(FROZEN_PREFIX).await?;
        {
            let mut frozen = self.frozen.write().expect("frozen lock");
            frozen.extend(entries.iter().filter_map(|(k, _, _)| inode_of_key(k)));
        }
        let mut reloaded = self.reloaded.lock().expect("reload lock");
        if reloaded.is_none_or(|at| at < started) {
            *reloaded = Some(started);
        }
        Ok(())
    }

    /// The chain of `inode` if known without asking the metadata store.
    pub fn cached_chain(&self, inode: InodeId) -> Option<Chain> {
        if layer_of(inode) == 0 {
            return Some(self.empty.clone());
        }
        self.chains
            .read()
            .expect("chains lock")
            .get(&inode)
            .cloned()
    }

    /// The chain of `inode`, reading layer records for the part not cached yet.
    pub async fn chain(&self, meta: &dyn MetaStore, inode: InodeId) -> Result<Chain, LayerError> {
        if let Some(chain) = self.cached_chain(inode) {
            return Ok(chain);
        }
        // Walk up until a layer whose chain is known (or a root): `walked` are the layers
        // whose chains are not cached, nearest first; `tail` is the chain of the last one.
        let mut walked = Vec::new();
        let mut at = inode;
        let tail: Vec<InodeId> = loop {
            if walked.len() > MAX_CHAIN_LAYERS {
                return Err(LayerError::TooDeep { inode });
            }
            let Some((value, _)) = meta.get(&layer_key(at)).await? else {
                return Err(LayerError::Unknown { inode: at });
            };
            let record: LayerRecord =
                serde_json::from_slice(&value).map_err(|e| LayerError::Corrupt {
                    inode: at,
                    reason: e.to_string(),
                })?;
            walked.push(at);
            match record.parent {
                None => break Vec::new(),
                Some(parent) if inode_family(parent) != inode_family(at) || parent == at => {
                    return Err(LayerError::Corrupt {
                        inode: at,
                        reason: format!("parent {parent:#x} is not another layer of its family"),
                    });
                }
                Some(parent) => match self.cached_chain(parent) {
                    Some(chain) => {
                        let mut tail = Vec::with_capacity(chain.len() + 1);
                        tail.push(parent);
                        tail.extend_from_slice(&chain);
                        break tail;
                    }
                    None => at = parent,
                },
            }
        };
        // chain(walked[i]) = walked[i+1..] ++ tail.
        let mut chains = self.chains.write().expect("chains lock");
        let mut result = None;
        for (i, &layer) in walked.iter().enumerate() {
            let chain: Vec<InodeId> = walked[i + 1..].iter().chain(&tail).copied().collect();
            if chain.len() > MAX_CHAIN_LAYERS {
                return Err(LayerError::TooDeep { inode: layer });
            }
            let chain: Chain = Arc::from(chain);
            chains.insert(layer, chain.clone());
            if i == 0 {
                result = Some(chain);
            }
        }
        Ok(result.expect("the walk visits at least the layer itself"))
    }
}

/// The first of `obj`'s layer and then its ancestors (`chain`) that holds the object, by
/// `holds`; None when no layer does.
pub fn first_holder(
    obj: ObjectId,
    chain: &[InodeId],
    holds: impl Fn(ObjectId) -> bool,
) -> Option<ObjectId> {
    std::iter::once(obj.inode)
        .chain(chain.iter().copied())
        .map(|inode| ObjectId::new(inode, obj.index))
        .find(|o| holds(*o))
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::EmbeddedMeta;
    use basalt_proto::make_inode;
    use std::future::Future;
    use std::task::Poll;

    async fn put_layer(meta: &dyn MetaStore, inode: InodeId, parent: Option<InodeId>) {
        let record = LayerRecord {
            inode,
            parent,
            owner: "v".into(),
            created: 0,
        };
        meta.put(&layer_key(inode), serde_json::to_vec(&record).unwrap())
            .await
            .unwrap();
    }

    /// Goal: chains are walked from the records, nearest ancestor first, cached, and a
    /// missing record, a cycle or a parent from another family is an error, not a loop.
    #[tokio::test]
    async fn chains_from_records() {
        let dir = tempfile::tempdir().unwrap();
        let meta = EmbeddedMeta::open(&dir.path().join("meta.json")).unwrap();
        let l = |n| make_inode(1, 7, n);
        put_layer(&meta, l(1), Some(l(0))).await;
        put_layer(&meta, l(2), Some(l(1))).await;
        put_layer(&meta, l(3), Some(l(1))).await;
        let layers = Layers::default();
        assert_eq!(&*layers.chain(&meta, l(0)).await.unwrap(), &[] as &[u64]);
        assert_eq!(&*layers.chain(&meta, l(2)).await.unwrap(), &[l(1), l(0)]);
        assert_eq!(&*layers.cached_chain(l(1)).unwrap(), &[l(0)]);
        assert_eq!(&*layers.chain(&meta, l(3)).await.unwrap(), &[l(1), l(0)]);
        assert!(matches!(
            layers.chain(&meta, l(9)).await,
            Err(LayerError::Unknown { .. })
        ));
        put_layer(&meta, l(5), Some(l(6))).await;
        put_layer(&meta, l(6), Some(l(5))).await;
        assert!(matches!(
            layers.chain(&meta, l(5)).await,
            Err(LayerError::TooDeep { .. })
        ));
        put_layer(&meta, l(8), Some(make_inode(1, 8, 0))).await;
        assert!(matches!(
            layers.chain(&meta, l(8)).await,
            Err(LayerError::Corrupt { .. })
        ));
    }

    /// Goal: a fence waits for the mutations in progress, and the frozen set reloads from
    /// the records.
    #[tokio::test]
    async fn fence_drains_and_reload() {
        let layers = Layers::default();
        let guard = layers.enter().await;
        // Polled by hand, not raced against a timer: the fence's first poll freezes the
        // layer and then waits for the mutation in progress, however slow the machine.
        let mut fenced = std::pin::pin!(layers.fence(42));
        let first = std::future::poll_fn(|cx| Poll::Ready(fenced.as_mut().poll(cx))).await;
        assert!(layers.is_frozen(42));
        assert!(
            first.is_pending(),
            "the fence waits for the mutation in progress"
        );
        drop(guard);
        fenced.await;

        let dir = tempfile::tempdir().unwrap();
        let meta = EmbeddedMeta::open(&dir.path().join("meta.json")).unwrap();
        meta.put(&basalt_meta::schema::frozen_key(7), b"{}".to_vec())
            .await
            .unwrap();
        layers.reload_frozen(&meta, Instant::now()).await.unwrap();
        assert!(layers.is_frozen(7) && layers.is_frozen(42) && !layers.is_frozen(8));
    }

    /// Goal: the first holder is the layer itself, then the nearest ancestor.
    #[test]
    fn first_holder_order() {
        let obj = ObjectId::new(3, 9);
        assert_eq!(
            first_holder(obj, &[2, 1], |o| o.inode <= 2),
            Some(ObjectId::new(2, 9))
        );
        assert_eq!(first_holder(obj, &[2, 1], |_| true), Some(obj));
        assert_eq!(first_holder(obj, &[2, 1], |_| false), None);
    }
}
