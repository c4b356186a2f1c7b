//! An S3-compatible object gateway over a Basalt cluster.
//!
//! * `keys`: access keys (records in cluster metadata, secrets sealed with a master key).
//! * `buckets`: bucket records in cluster metadata.
//! * `index`: each bucket's object index, as sharded KV table objects in the cluster.
//! * `data`: object data, striped over cluster objects in chunks.
//! * `gateway`: the S3 operations; `server`: HTTP serving (protocol by the `s3s` crate).

pub mod buckets;
pub mod checksum;
pub mod data;
pub mod gateway;
pub mod index;
pub mod keys;
pub mod server;
pub mod sweeper;

pub use keys::{KeyRing, MasterKey};
pub use server::{serve, GatewayConfig};
