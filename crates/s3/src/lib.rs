//! An S3-compatible object gateway over a Basalt cluster.
//!
//! * `keys`: access keys (records in cluster metadata, secrets sealed with a master key).
//! * `buckets`: bucket records in cluster metadata; `policy`: bucket policies.
//! * `index`: each bucket's object index, as sharded KV table objects in the cluster;
//!   `shards`: the range-partitioned tables of each shard, split as they fill.
//! * `data`: object data, striped over cluster objects in chunks; `sse`: its encryption.
//! * `checksum`: `x-amz-checksum-*` checks of uploaded bodies.
//! * `cors`: CORS rules and how they answer browsers.
//! * `versions`: how a change of a key edits the record of its versions.
//! * `lifecycle`: lifecycle rules and what they decide; `lock`: object lock rules.
//! * `sweeper`: reclaiming the data of uploads a dead gateway left behind.
//! * `gateway`: the S3 operations (a module per group of operations, see its docs);
//!   `server`: HTTP serving (protocol by the `s3s` crate).

pub mod acl;
pub mod buckets;
pub mod checksum;
pub mod cors;
pub mod data;
pub mod gateway;
pub mod idle_body;
pub mod index;
pub mod keys;
pub mod lifecycle;
pub mod lock;
pub mod policy;
pub mod server;
pub mod shards;
pub mod sse;
pub mod stats;
pub mod sweeper;
pub mod versions;

pub use keys::{KeyRing, MasterKey};
pub use server::{serve, GatewayConfig};
