//! Placement: which PG an object belongs to and which OSDs hold a PG.
//!
//! Everything here is a pure function of the cluster map, so every client, OSD and monitor
//! that holds the same map epoch computes the same answer.

pub mod hash;
pub mod map;
pub mod rendezvous;

pub use map::{
    check_device_class, format_location, parse_location, pg_predecessors, ClusterMap,
    FailureDomain, MapError, OsdInfo, PoolSpec, NO_OSD,
};
pub use rendezvous::{place_pg, place_pg_positions};
