//! Why peering or recovery of a PG could not go on. Each is retried (a new map, a peer back,
//! the metadata reachable again); the message says what is waited for.

use basalt_client::ClientError;
use basalt_meta::MetaError;
use basalt_proto::{OsdId, Status};
use basalt_store::StoreError;
use thiserror::Error;

/// A PG's peering or recovery failure.
#[derive(Debug, Error)]
pub enum PgError {
    #[error(
        "incomplete: the complete copies of interval {interval} are on {} and none is up",
        osds(copies)
    )]
    Incomplete { interval: u32, copies: Vec<OsdId> },
    /// An erasure-coded PG: a write acknowledged in the last activated interval is on every
    /// member of that interval and on nothing else, so fewer than k of them answering
    /// could hide it (a stash seen on fewer than k positions would be taken for a cut write
    /// and rolled back).
    #[error(
        "incomplete: interval {interval}'s writes are on {}; {reached} of them answer, {k} needed",
        osds(members)
    )]
    EcIncomplete {
        interval: u32,
        members: Vec<OsdId>,
        reached: usize,
        k: usize,
    },
    #[error("undersized: {up} of the pool's min_size {min_size} OSDs are up")]
    Undersized { up: usize, min_size: u32 },
    #[error("pool {pool} is not in the map")]
    NoPool { pool: u32 },
    #[error("osd.{osd} is not in the map")]
    NoOsd { osd: OsdId },
    /// A newer interval activated the PG already: this OSD's map is behind.
    #[error("PG record is at interval {recorded}")]
    RecordAhead { recorded: u32 },
    #[error("the PG record changed meanwhile")]
    RecordChanged,
    #[error("a newer interval took over the PG")]
    TakenOver,
    #[error("the PG record {key} is unreadable: {reason}")]
    BadRecord { key: String, reason: String },
    #[error("{op} on {peer}: {source}")]
    Peer {
        op: &'static str,
        peer: String,
        source: ClientError,
    },
    #[error("{op} on {peer} answered {status:?}")]
    PeerStatus {
        op: &'static str,
        peer: String,
        status: Status,
    },
    #[error("{op} on {peer} timed out")]
    PeerTimeout { op: &'static str, peer: String },
    #[error("malformed {op} reply from {peer}: {reason}")]
    BadReply {
        op: &'static str,
        peer: String,
        reason: String,
    },
    #[error("LIST of {pg} on {peer} holds too many objects")]
    TooManyObjects { pg: String, peer: String },
    #[error("cluster metadata: {0}")]
    Meta(#[from] MetaError),
    #[error("local store: {0}")]
    Store(#[from] StoreError),
    #[error("flush of the local store answered {0:?}")]
    Flush(Status),
}

fn osds(ids: &[OsdId]) -> String {
    ids.iter()
        .map(|id| format!("osd.{id}"))
        .collect::<Vec<_>>()
        .join(", ")
}
