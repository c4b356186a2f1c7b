//! One node's view of the shared metadata store: the embedded store itself, reachable only
//! while the node's incarnation is alive and not cut from the metadata. Leases then expire on
//! their own (virtual) time, as an etcd lease does when its holder is cut off.

use crate::net::{NodeId, SimNet};
use async_trait::async_trait;
use basalt_meta::store::WATCH_QUEUE_EVENTS;
use basalt_meta::{EmbeddedMeta, LeaseId, MetaError, MetaStore, Revision, WatchReceiver};
use std::sync::Arc;
use tokio::sync::mpsc;

/// The metadata store as one incarnation of one node reaches it.
pub struct NodeMeta {
    inner: Arc<EmbeddedMeta>,
    net: Arc<SimNet>,
    node: NodeId,
    incarnation: u64,
}

impl NodeMeta {
    /// `inner` as seen from `incarnation` of `node`.
    pub fn new(inner: Arc<EmbeddedMeta>, net: Arc<SimNet>, node: NodeId, incarnation: u64) -> Self {
        NodeMeta {
            inner,
            net,
            node,
            incarnation,
        }
    }

    fn reach(&self) -> Result<(), MetaError> {
        if self.net.reaches_meta(self.node, self.incarnation) {
            Ok(())
        } else {
            Err(MetaError::Unavailable {
                reason: format!("node {} cannot reach the metadata (simulated)", self.node),
            })
        }
    }
}

#[async_trait]
impl MetaStore for NodeMeta {
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError> {
        self.reach()?;
        self.inner.get(key).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError> {
        self.reach()?;
        self.inner.list(prefix).await
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
    ) -> Result<Option<Revision>, MetaError> {
        self.reach()?;
        self.inner.compare_and_swap(key, expected, value).await
    }

    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError> {
        self.reach()?;
        self.inner.compare_and_delete(key, expected).await
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError> {
        self.reach()?;
        self.inner.put(key, value).await
    }

    async fn watch_prefix(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> Result<WatchReceiver, MetaError> {
        self.reach()?;
        let mut events = self.inner.watch_prefix(prefix, from_revision).await?;
        let (tx, rx) = mpsc::channel(WATCH_QUEUE_EVENTS);
        let (net, node, incarnation) = (self.net.clone(), self.node, self.incarnation);
        let mut changes = net.meta_changes();
        // Forward events while the node reaches the metadata; end the stream when it no
        // longer does (the watcher then re-lists, which fails until it is back).
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    biased;
                    changed = changes.changed() => {
                        if changed.is_err() || !net.reaches_meta(node, incarnation) {
                            return;
                        }
                    }
                    event = events.recv() => {
                        let Some(event) = event else { return };
                        if !net.reaches_meta(node, incarnation) || tx.send(event).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(rx)
    }

    async fn grant_lease(&self, ttl_secs: u64) -> Result<LeaseId, MetaError> {
        self.reach()?;
        self.inner.grant_lease(ttl_secs).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        self.reach()?;
        self.inner.keep_alive(lease).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.reach()?;
        self.inner.revoke_lease(lease).await
    }

    async fn create_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Option<Revision>, MetaError> {
        self.reach()?;
        self.inner.create_with_lease(key, value, lease).await
    }

    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Revision, MetaError> {
        self.reach()?;
        self.inner.put_with_lease(key, value, lease).await
    }
}
