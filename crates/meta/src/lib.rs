//! Cluster metadata: a small key-value store with revisions and compare-and-swap.
//!
//! Every backend implements [`MetaStore`] and passes the shared [`conformance`] suite. The
//! embedded backend serves the one-process cluster (`basalt up`); etcd serves multi-host
//! clusters.

pub mod conformance;
pub mod embedded;
pub mod store;

pub use embedded::EmbeddedMeta;
pub use store::{MetaError, MetaStore, Revision};
