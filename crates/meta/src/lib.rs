//! Cluster metadata: a small key-value store with revisions, compare-and-swap, watches and
//! leases.
//!
//! Every backend implements [`MetaStore`] and passes the shared [`conformance`] suite. The
//! embedded backend serves the one-process cluster (`basalt up`); etcd serves multi-host
//! clusters.

pub mod conformance;
pub mod embedded;
pub mod etcd;
pub mod store;

#[cfg(test)]
mod etcd_tests;

pub use embedded::EmbeddedMeta;
pub use etcd::{EtcdConfig, EtcdMeta};
pub use store::{LeaseId, MetaError, MetaStore, Revision, WatchEvent, WatchReceiver};
