//! Client errors.

use basalt_proto::Status;
use thiserror::Error;

/// What can go wrong between a client and the cluster.
#[derive(Debug, Error)]
pub enum ClientError {
    #[error("connection to {addr} failed: {reason}")]
    Connect { addr: String, reason: String },
    /// The OSD refused our key (unknown, revoked, wrong) or could not prove its own: retrying
    /// will not help.
    #[error("authentication with {addr} failed: {reason}")]
    Auth { addr: String, reason: String },
    #[error("connection to {addr} closed: {reason}")]
    Closed { addr: String, reason: String },
    #[error("request to {addr} timed out after {timeout_ms} ms")]
    Timeout { addr: String, timeout_ms: u64 },
    #[error("OSD answered {status:?}")]
    Status { status: Status },
    #[error("reply payload checksum mismatch from {addr}")]
    PayloadChecksum { addr: String },
    #[error("{0}")]
    Map(#[from] basalt_placement::MapError),
    #[error("{0}")]
    Meta(#[from] basalt_meta::MetaError),
    #[error("volume \"{name}\" does not exist")]
    NoSuchVolume { name: String },
    #[error("volume \"{name}\" exists")]
    VolumeExists { name: String },
    /// A removal refused because gateways have the volume open.
    #[error("volume \"{name}\" is open in {gateways}; stop using it there, or pass --force to remove it anyway (their I/O then fails)")]
    InUse { name: String, gateways: String },
    #[error("pool \"{name}\" exists")]
    PoolExists { name: String },
    #[error("volume \"{volume}\" has no snapshot \"{snapshot}\"")]
    NoSuchSnapshot { volume: String, snapshot: String },
    #[error("{what} is read-only")]
    ReadOnly { what: String },
    #[error("{reason}")]
    Invalid { reason: String },
    #[error("I/O [{offset}, +{len}) is beyond the end of the volume ({size} bytes)")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("no OSD holds pg {pg}")]
    NoPrimary { pg: basalt_proto::PgId },
    /// A condition of a KV table update did not hold; nothing was applied.
    #[error("KV update conflict: the condition of edit {index} does not hold")]
    KvConflict { index: u32 },
    /// An OSD's reply could not be understood.
    #[error("malformed reply: {reason}")]
    BadReply { reason: String },
}
