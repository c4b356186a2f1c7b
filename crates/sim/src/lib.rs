//! A deterministic simulation of a Basalt cluster.
//!
//! The real OSD, monitor and client code runs on one current-thread Tokio runtime with
//! paused (virtual) time. Every data-plane connection goes through [`net`], in-process links
//! with seeded latency and faults; every node reaches the one embedded metadata store through
//! [`meta`], which can cut it off (its leases then expire); every store sits on an in-memory
//! disk that loses unsynced writes in a power cut. A seeded workload ([`run`]) writes, trims,
//! reads and flushes one volume while a seeded injector kills, power-cuts, partitions and
//! isolates OSDs; reads are checked against a [`model`] of acknowledged data, and after
//! healing every replica must equal its primary. Every fourth seed runs an erasure-coded 2+1
//! pool instead ([`SimConfig::shape_for`]): its writes count as durable once acknowledged,
//! and after healing every stripe must be whole (one version, parity matching). The same seed
//! on the same commit replays the same run (`scripts/sim.sh --seed N`).

pub mod cluster;
pub mod meta;
pub mod model;
pub mod net;
pub mod observer;
pub mod rng;
pub mod run;

pub use cluster::{ClusterShape, SimCluster};
pub use run::{replays_exactly, run, Failure, Outcome, SimConfig};
