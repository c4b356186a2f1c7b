//! Cluster metadata: a small key-value store with revisions, compare-and-swap, watches and
//! leases.
//!
//! Every backend implements [`MetaStore`] and passes the shared [`conformance`] suite. The
//! embedded backend serves the one-process cluster (`basalt up`); etcd serves multi-host
//! clusters.

pub mod conformance;
pub mod counter;
pub mod embedded;
pub mod etcd;
pub mod schema;
pub mod store;
pub mod timed;
pub mod url;

#[cfg(test)]
mod etcd_tests;

pub use counter::next_counter;
pub use embedded::EmbeddedMeta;
pub use etcd::{EtcdConfig, EtcdMeta, EtcdTls};
pub use store::{LeaseId, MetaError, MetaStore, Revision, WatchEvent, WatchReceiver};
pub use timed::{MetaCollector, MetaLatency, MetaOp, TimedMeta};
pub use url::{connect_meta, connect_meta_with, parse_meta_url, MetaAccess};
