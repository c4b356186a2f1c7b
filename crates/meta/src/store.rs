//! The trait every metadata backend implements.

use async_trait::async_trait;
use thiserror::Error;
use tokio::sync::mpsc;

/// Modification revision of a key: 0 means "absent"; it grows with every change.
pub type Revision = u64;

/// Identifier of a lease; keys attached to it vanish when it expires or is revoked.
pub type LeaseId = i64;

/// Events buffered per watch before the backend gives up on a slow watcher and ends its
/// stream (the watcher then re-lists and re-watches from its last revision + 1).
pub const WATCH_QUEUE_EVENTS: usize = 1024;

/// Metadata failures.
#[derive(Debug, Error)]
pub enum MetaError {
    /// Reading or writing the embedded backend's file failed.
    #[error("metadata I/O on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The embedded backend's file does not parse.
    #[error("metadata file {path} is corrupt: {reason}")]
    Corrupt { path: String, reason: String },
    /// The backend cannot be reached or did not answer in time.
    #[error("metadata backend unavailable: {reason}")]
    Unavailable { reason: String },
    /// The lease expired, was revoked, or never existed.
    #[error("lease {lease} not found (expired or revoked)")]
    LeaseNotFound { lease: LeaseId },
    /// A watch asked for history the backend no longer keeps.
    #[error("watch from revision {requested} is too old: history starts at {oldest}")]
    Compacted {
        requested: Revision,
        oldest: Revision,
    },
}

/// One change seen by a watch, in revision order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// `key` was set to `value` at `revision` (its new modification revision).
    Put {
        key: String,
        value: Vec<u8>,
        revision: Revision,
    },
    /// `key` was deleted (explicitly or by lease expiry) at `revision`.
    Delete { key: String, revision: Revision },
}

impl WatchEvent {
    /// The key this event is about.
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put { key, .. } | WatchEvent::Delete { key, .. } => key,
        }
    }

    /// The revision at which the change happened.
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put { revision, .. } | WatchEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// The receiving end of a watch. It yields events in revision order; an `Err` is the last
/// item. The stream ends (None) when the backend drops the watch (slow consumer, shutdown):
/// the watcher must then re-list and re-watch from its last seen revision + 1. Dropping the
/// receiver cancels the watch.
pub type WatchReceiver = mpsc::Receiver<Result<WatchEvent, MetaError>>;

/// A key-value store with per-key revisions, compare-and-swap, watches and leases. Keys are
/// '/'-separated paths; values are opaque bytes (Basalt stores JSON).
#[async_trait]
pub trait MetaStore: Send + Sync + 'static {
    /// The value and revision of `key`, if present.
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError>;
    /// Every key starting with `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError>;
    /// Set `key` to `value` if its revision is `expected` (0 = must be absent). Returns the
    /// new revision, or None when the revision did not match. The key is detached from any
    /// lease.
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
    ) -> Result<Option<Revision>, MetaError>;
    /// Delete `key` if its revision is `expected`. Returns whether it was deleted.
    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError>;
    /// Set `key` unconditionally; returns the new revision. The key is detached from any lease.
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError>;

    /// Watch every key starting with `prefix`. `from_revision` = 0 starts with the next
    /// change; otherwise every change at a revision >= `from_revision` is replayed first
    /// (`MetaError::Compacted` when that history is gone). The watch is established when
    /// this returns: later changes are never missed.
    async fn watch_prefix(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> Result<WatchReceiver, MetaError>;
    /// Create a lease that expires `ttl_secs` seconds (>= 1) after its last keep-alive.
    async fn grant_lease(&self, ttl_secs: u64) -> Result<LeaseId, MetaError>;
    /// Renew `lease` for its full TTL; returns that TTL in seconds. Fails with
    /// `LeaseNotFound` once the lease expired.
    async fn keep_alive(&self, lease: LeaseId) -> Result<u64, MetaError>;
    /// End `lease` now and delete its keys. Revoking an unknown or expired lease is a no-op.
    async fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError>;
    /// Create `key` attached to `lease` if it is absent (leader election: the key vanishes
    /// with its holder's lease). Returns the new revision, or None when the key exists.
    async fn create_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Option<Revision>, MetaError>;
    /// Set `key` unconditionally, attached to `lease`: the key vanishes when the lease ends.
    /// Returns the new revision.
    async fn put_with_lease(
        &self,
        key: &str,
        value: Vec<u8>,
        lease: LeaseId,
    ) -> Result<Revision, MetaError>;
}
