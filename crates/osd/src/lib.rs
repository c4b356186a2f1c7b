//! The OSD: one daemon serving one local store over the data-plane protocol.
//!
//! As the primary of a PG it orders writes (assigns versions), applies them locally and
//! replicates them to the rest of the acting set before acknowledging; as a replica it
//! applies what its primaries send, in the order they send it.

pub mod auth;
pub mod daemon;
pub mod decide;
pub(crate) mod ec;
pub mod error;
pub mod handler;
pub mod heartbeat;
pub mod identity;
mod kv;
pub mod layers;
pub mod liveness;
pub mod metrics;
pub mod peering;
pub mod pg;
mod prefetch;
pub mod process;
pub mod recovery;
mod scrub;
pub mod slow;
pub mod stray;

/// Target of the trace events a checker can follow to verify, from outside, what the OSDs
/// must never do (the simulator does): `activated` (a primary activated `pg` in `interval`)
/// and `acknowledged` (a primary acknowledged a client mutation of `pg` in `interval`);
/// both carry `osd`, `pg` and `interval`. A write acknowledged in an interval older than
/// one already activated for its PG is a split brain.
pub const INVARIANT_EVENTS: &str = "basalt::invariant";

pub use daemon::{
    random_u64, Accepted, ConnStream, Listener, Network, Osd, OsdConfig, OsdError, OsdHandle,
    StoreLocation,
};
pub use error::PgError;
pub use handler::{link_in_process, LocalOsd, PeerOsd};
pub use heartbeat::HeartbeatConfig;
pub use identity::{
    allocate_osd_id, bind_device_store, check_map_epoch, identity, record_map_epochs,
    IdentityError, MAP_EPOCH_FILE,
};
pub use liveness::{register, Registration};
pub use metrics::OsdCounters;
pub use process::RunningOsd;
pub use recovery::RecoveryConfig;
