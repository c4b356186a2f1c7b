//! The monitor: the role that owns the cluster map.
//!
//! Any daemon may run a monitor candidate ([`run`]); one at a time holds the role through a
//! key under its lease (`/basalt/monitor`), so losing the holder loses nothing: another
//! candidate takes over once the lease expires. The holder periodically reads the OSD,
//! liveness and pool records, derives the map they imply ([`derive_map`], a pure function),
//! and writes it with compare-and-swap when it changed, bumping the epoch by one.

pub mod derive;
pub mod election;

pub use derive::{derive_map, DownClock};
pub use election::{run, MonitorConfig};
