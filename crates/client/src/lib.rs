//! The Basalt client library.
//!
//! [`Cluster`] holds the cluster map and one multiplexed connection per OSD; [`Volume`] turns
//! byte-range I/O on a block volume into object requests sent to the primaries of their PGs;
//! [`object`] serves clients that lay out their own objects (plain data and KV tables).
//! OSDs use the same [`conn`] module to replicate to their peers, so there is one data path.

pub mod access;
pub mod cluster;
pub mod conn;
pub mod error;
pub mod events;
pub mod frame_io;
pub mod health;
pub mod images;
pub mod locks;
pub mod mapwatch;
pub mod object;
pub mod osd_admin;
pub mod osds;
pub mod pool;
pub mod pool_change;
pub mod pool_spec;
pub mod pools;
pub mod scrub;
pub mod sealed;
pub mod settings;
pub mod snapshots;
pub mod status;
pub mod unfound;
pub mod usage;
pub mod volume;
pub mod volumes;
pub mod watchers;

/// The KV table object class's types (see [`Cluster::kv_update`] and friends).
pub use basalt_proto::kv::{KvCond, KvEdit, KvList, KvPage, KV_MAX_KEY, KV_MAX_VALUE};
pub use cluster::{is_retryable, Cluster, OsdStats, ReadPolicy};
pub use conn::{Connection, Dialer, LocalHandler, Reply, ReplySink, TcpDialer};
pub use error::{ClientError, ErrorKind};
pub use images::{ImageInfo, ImageState};
pub use mapwatch::{follow_map, wait_for_map};
pub use pool::ConnPool;
pub use pool_spec::{create_pool_for, create_pool_visible, ClusterShape, PoolRequest};
pub use pools::{check_pool_name, create_pool, remove_pool, wait_for_pool};
pub use scrub::ScrubReport;
pub use sealed::SealedLayer;
pub use snapshots::{check_snapshot_name, is_fence_snapshot, parse_snapshot_spec};
pub use unfound::GiveUpReport;
pub use usage::{LayerUsage, VolumeUsage};
pub use volume::{Extent, Volume};
pub use volumes::{next_family, ByteLocation, ParentRef, SnapshotInfo, VolumeInfo};
