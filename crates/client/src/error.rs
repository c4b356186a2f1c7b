//! Client errors.

use basalt_proto::Status;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What kind of failure an error is. Callers branch on this (the CLI's exit codes, the
/// control API's replies), never on message text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The named volume, snapshot, image or pool does not exist.
    NotFound,
    /// Something of that name exists already.
    Exists,
    /// Refused because of the state of something else: in use, depended on, changed
    /// concurrently.
    Conflict,
    /// The request itself is wrong (a name, a size, an operation the target does not allow).
    Invalid,
    /// The change was made, but clients did not see it within the wait's bound.
    Timeout,
    /// Anything else: the cluster or its metadata could not be reached, an I/O failed.
    Other,
}

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
    /// A writable open refused: another client holds the volume's writer lock.
    #[error("volume \"{name}\" is locked for writing by {holder} (since {since}); stop it there, hand the lock over with `basalt volume lock handover {name}`, or break it with `basalt volume lock break {name}`")]
    Locked {
        name: String,
        holder: String,
        since: String,
    },
    /// This handle's writer lock was broken or taken over: its writes are fenced off.
    #[error("volume \"{name}\": this client's writer lock was {how}; it may no longer write")]
    LockLost { name: String, how: String },
    #[error("pool \"{name}\" exists")]
    PoolExists { name: String },
    /// A pool removal refused because something still lives in the pool (`users` names it).
    #[error("pool \"{name}\" holds {users}; remove them first")]
    PoolInUse { name: String, users: String },
    #[error("image \"{name}\" does not exist")]
    NoSuchImage { name: String },
    #[error(
        "pool \"{name}\" does not exist (create it with `basalt pool create`, or choose one \
         with --pool)"
    )]
    NoSuchPool { name: String },
    /// Something else named `what` (an objvol, say) does not exist.
    #[error("{what} does not exist")]
    NotFound { what: String },
    /// An image or snapshot of that name exists (`what` names it).
    #[error("{what} exists")]
    Exists { what: String },
    /// A change was made but did not show in what clients see within the wait's bound.
    #[error(
        "timed out after {timeout_ms} ms waiting until {what}: the change is made, but \
         clients do not see it yet ({hint})"
    )]
    NotVisible {
        what: String,
        timeout_ms: u64,
        hint: String,
    },
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
    /// A compare-and-swap lost to another writer of `what`; nothing was changed.
    #[error("{what} changed concurrently; try again")]
    ChangedConcurrently { what: String },
    /// No OSD has that id (`removed`: `basalt osd rm` removed it; ids are never reused).
    #[error("osd.{id} does not exist{}", removed_note(.removed))]
    NoSuchOsd { id: u32, removed: bool },
    /// No OSD record names that host (`known` lists the hosts that have OSDs).
    #[error("no OSD is on host \"{name}\" (hosts with OSDs: {known})")]
    NoSuchHost { name: String, known: String },
    /// A removal refused because the OSD runs.
    #[error(
        "osd.{id} is up (its liveness record stands: it runs, or stopped less than a lease \
         ago): stop it before removing it (drain it first, `basalt osd drain {id}`, so that \
         the cluster holds its data elsewhere)"
    )]
    OsdUp { id: u32 },
    /// A removal refused because PG records still need the OSDs (`pgs` names them, why).
    #[error(
        "{osds} still needed by pg {pgs}; drain first (`basalt osd drain`, `basalt host \
         drain`) or bring the OSDs back, or pass --force to remove anyway, losing what only \
         they hold"
    )]
    OsdNeeded { osds: String, pgs: String },
    /// A drain that did not finish within its bound; the OSDs stay out and data keeps
    /// moving.
    #[error(
        "timed out after {timeout_ms} ms draining {osds}: {pgs_left} PGs still need them \
         ({pgs}), {degraded_objects} objects degraded; they are marked out and recovery goes \
         on: run the drain again to keep waiting (--wait-timeout), see `basalt status`"
    )]
    NotDrained {
        osds: String,
        timeout_ms: u64,
        pgs_left: usize,
        pgs: String,
        degraded_objects: u64,
    },
    /// An OSD's reply could not be understood.
    #[error("malformed reply: {reason}")]
    BadReply { reason: String },
}

/// The end of [`ClientError::NoSuchOsd`]'s message.
fn removed_note(removed: &bool) -> &'static str {
    match removed {
        true => " any more: it was removed already (ids are never reused)",
        false => "",
    }
}

impl ClientError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        use ClientError::*;
        match self {
            NoSuchVolume { .. }
            | NoSuchSnapshot { .. }
            | NoSuchImage { .. }
            | NoSuchPool { .. }
            | NotFound { .. }
            | NoSuchOsd { .. }
            | NoSuchHost { .. } => ErrorKind::NotFound,
            Map(basalt_placement::MapError::NoSuchPool { .. }) => ErrorKind::NotFound,
            VolumeExists { .. } | PoolExists { .. } | Exists { .. } => ErrorKind::Exists,
            InUse { .. }
            | Locked { .. }
            | LockLost { .. }
            | PoolInUse { .. }
            | KvConflict { .. }
            | ChangedConcurrently { .. }
            | OsdUp { .. }
            | OsdNeeded { .. } => ErrorKind::Conflict,
            Invalid { .. } | OutOfRange { .. } | ReadOnly { .. } => ErrorKind::Invalid,
            NotVisible { .. } | NotDrained { .. } => ErrorKind::Timeout,
            Connect { .. }
            | Auth { .. }
            | Closed { .. }
            | Timeout { .. }
            | Status { .. }
            | PayloadChecksum { .. }
            | Map(_)
            | Meta(_)
            | NoPrimary { .. }
            | BadReply { .. } => ErrorKind::Other,
        }
    }
}
