//! Round-trip latency of every metadata operation, by kind, for any backend: [`TimedMeta`]
//! wraps a [`MetaStore`] and times each call into a [`MetaLatency`], which a process exports
//! on its `/metrics` (`basalt_meta_request_seconds{op}`, `basalt_meta_request_errors_total{op}`).

use crate::store::{LeaseId, MetaError, MetaStore, Revision, WatchReceiver};
use async_trait::async_trait;
use basalt_metrics::prometheus_client::collector::Collector;
use basalt_metrics::prometheus_client::encoding::DescriptorEncoder;
use basalt_metrics::{counter, family, Kind, LatencyHistogram};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Kinds of metadata operations (the `op` label), in [`MetaOp`] order.
pub const META_OP_LABELS: [&str; 11] = [
    "get",
    "list",
    "compare_and_swap",
    "compare_and_delete",
    "put",
    "watch",
    "grant_lease",
    "keep_alive",
    "revoke_lease",
    "create_with_lease",
    "put_with_lease",
];

/// One kind of metadata operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaOp {
    Get,
    List,
    CompareAndSwap,
    CompareAndDelete,
    Put,
    /// Establishing a watch (a follower that lost its watch establishes it again here).
    Watch,
    GrantLease,
    KeepAlive,
    RevokeLease,
    CreateWithLease,
    PutWithLease,
}

/// Latency and failures of metadata operations by kind; shared by the wrapper and the
/// collector that exports it.
#[derive(Debug, Default)]
pub struct MetaLatency {
    seconds: [LatencyHistogram; META_OP_LABELS.len()],
    errors: [AtomicU64; META_OP_LABELS.len()],
}

impl MetaLatency {
    /// Operations of `op` timed so far.
    pub fn count(&self, op: MetaOp) -> u64 {
        self.seconds[op as usize].count()
    }

    /// Operations of `op` that failed.
    pub fn errors(&self, op: MetaOp) -> u64 {
        self.errors[op as usize].load(Ordering::Relaxed)
    }

    async fn time<T>(
        &self,
        op: MetaOp,
        fut: impl Future<Output = Result<T, MetaError>>,
    ) -> Result<T, MetaError> {
        let start = Instant::now();
        let out = fut.await;
        self.seconds[op as usize].observe_since(start);
        if out.is_err() {
            self.errors[op as usize].fetch_add(1, Ordering::Relaxed);
        }
        out
    }
}

/// Exports a [`MetaLatency`]: kinds never used are left out.
#[derive(Debug)]
pub struct MetaCollector(pub Arc<MetaLatency>);

impl Collector for MetaCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let l = &self.0;
        let used = || {
            META_OP_LABELS
                .iter()
                .enumerate()
                .filter(|(i, _)| l.seconds[*i].count() > 0)
        };
        family(
            &mut enc,
            "basalt_meta_request_seconds",
            "Round trip of metadata store operations (etcd or embedded), by operation",
            Kind::Histogram,
            used().map(|(i, op)| ([("op", *op)], l.seconds[i].clone())),
        )?;
        family(
            &mut enc,
            "basalt_meta_request_errors",
            "Metadata store operations that failed, by operation",
            Kind::Counter,
            used().map(|(i, op)| ([("op", *op)], counter(l.errors[i].load(Ordering::Relaxed)))),
        )
    }
}

/// A metadata store whose every call is timed.
pub struct TimedMeta {
    inner: Arc<dyn MetaStore>,
    latency: Arc<MetaLatency>,
}

impl TimedMeta {
    pub fn new(inner: Arc<dyn MetaStore>, latency: Arc<MetaLatency>) -> Self {
        Self { inner, latency }
    }
}

#[async_trait]
impl MetaStore for TimedMeta {
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError> {
        self.latency.time(MetaOp::Get, self.inner.get(key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError> {
        self.latency
            .time(MetaOp::List, self.inner.list(prefix))
            .await
    }

    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
    ) -> Result<Option<Revision>, MetaError> {
        let fut = self.inner.compare_and_swap(key, expected, value);
        self.latency.time(MetaOp::CompareAndSwap, fut).await
    }

    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError> {
        let fut = self.inner.compare_and_delete(key, expected);
        self.latency.time(MetaOp::CompareAndDelete, fut).await
    }

    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError> {
        self.latency
            .time(MetaOp::Put, self.inner.put(key, value))
            .await
    }

    async fn watch_prefix(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> Result<WatchReceiver, MetaError> {
        let fut = self.inner.watch_prefix(prefix, from_revision);
        self.latency.time(MetaOp::Watch, fut).await
    }

    async fn grant_lease(&self, ttl_secs: u64) -> Result<LeaseId, MetaError> {
        let fut = self.inner.grant_lease(ttl_secs);
        self.latency.time(MetaOp::GrantLease, fut).await
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError> {
        let fut = self.inner.keep_alive(lease);
        self.latency.time(MetaOp::KeepAlive, fut).await
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        let fut = self.inner.revoke_lease(lease);
        self.latency.time(MetaOp::RevokeLease, fut).await
    }

    async fn create_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Option<Revision>, MetaError> {
        let fut = self.inner.create_with_lease(key, value, lease);
        self.latency.time(MetaOp::CreateWithLease, fut).await
    }

    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Revision, MetaError> {
        let fut = self.inner.put_with_lease(key, value, lease);
        self.latency.time(MetaOp::PutWithLease, fut).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EmbeddedMeta;

    #[tokio::test]
    async fn every_call_is_timed_by_kind_and_exported() {
        // Goal: calls through the wrapper reach the store unchanged and are counted under
        // their own kind (failures too); the collector exports the kinds used, only those.
        let dir = tempfile::tempdir().expect("tempdir");
        let inner: Arc<dyn MetaStore> =
            Arc::new(EmbeddedMeta::open(&dir.path().join("meta.json")).expect("open"));
        let latency = Arc::new(MetaLatency::default());
        let meta = TimedMeta::new(inner.clone(), latency.clone());
        meta.put("/a", b"1".to_vec()).await.expect("put");
        assert_eq!(
            inner.get("/a").await.expect("get").map(|v| v.0),
            Some(b"1".to_vec())
        );
        meta.get("/a").await.expect("get");
        meta.get("/b").await.expect("get");
        assert_eq!(
            meta.compare_and_swap("/a", 999, b"2".to_vec()).await.ok(),
            Some(None)
        );
        assert!(meta.keep_alive(12345).await.is_err(), "unknown lease");
        assert_eq!(latency.count(MetaOp::Put), 1);
        assert_eq!(latency.count(MetaOp::Get), 2);
        assert_eq!(latency.count(MetaOp::CompareAndSwap), 1);
        assert_eq!(latency.errors(MetaOp::KeepAlive), 1);
        assert_eq!(latency.count(MetaOp::List), 0);
        let mut registry = basalt_metrics::Registry::default();
        registry.register_collector(Box::new(MetaCollector(latency)));
        let text = basalt_metrics::render(&registry);
        assert!(
            text.contains("basalt_meta_request_seconds_count{op=\"get\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("basalt_meta_request_errors_total{op=\"keep_alive\"} 1"),
            "{text}"
        );
        assert!(!text.contains("op=\"list\""), "{text}");
    }
}
