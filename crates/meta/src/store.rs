//! The trait every metadata backend implements.

use async_trait::async_trait;
use thiserror::Error;

/// Modification revision of a key: 0 means "absent"; it grows with every change.
pub type Revision = u64;

/// Metadata failures.
#[derive(Debug, Error)]
pub enum MetaError {
    #[error("metadata I/O on {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("metadata file {path} is corrupt: {reason}")]
    Corrupt { path: String, reason: String },
    #[error("metadata backend unavailable: {reason}")]
    Unavailable { reason: String },
}

/// A key-value store with per-key revisions and compare-and-swap. Keys are '/'-separated
/// paths; values are opaque bytes (Basalt stores JSON).
#[async_trait]
pub trait MetaStore: Send + Sync + 'static {
    /// The value and revision of `key`, if present.
    async fn get(&self, key: &str) -> Result<Option<(Vec<u8>, Revision)>, MetaError>;
    /// Every key starting with `prefix`, in key order.
    async fn list(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>, Revision)>, MetaError>;
    /// Set `key` to `value` if its revision is `expected` (0 = must be absent). Returns the
    /// new revision, or None when the revision did not match.
    async fn compare_and_swap(
        &self,
        key: &str,
        expected: Revision,
        value: Vec<u8>,
    ) -> Result<Option<Revision>, MetaError>;
    /// Delete `key` if its revision is `expected`. Returns whether it was deleted.
    async fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<bool, MetaError>;
    /// Set `key` unconditionally; returns the new revision.
    async fn put(&self, key: &str, value: Vec<u8>) -> Result<Revision, MetaError>;
}
