//! The OSD: one daemon serving one local store over the data-plane protocol.
//!
//! As the primary of a PG it orders writes (assigns versions), applies them locally and
//! replicates them to the rest of the acting set before acknowledging; as a replica it
//! applies what its primaries send, in the order they send it.

pub mod daemon;
pub mod handler;
mod kv;
pub mod layers;
pub mod liveness;
pub mod metrics;
pub mod peering;
pub mod pg;
pub mod recovery;
pub mod stray;

pub use daemon::{random_u64, Osd, OsdConfig, OsdError, OsdHandle};
pub use handler::LocalOsd;
pub use liveness::{register, Registration};
pub use metrics::OsdCounters;
pub use recovery::RecoveryConfig;
