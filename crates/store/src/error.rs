//! The store's one error type; the OSD maps it once to wire status codes.

use basalt_proto::ObjectId;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("store I/O failed ({op})")]
    Io {
        /// What the store was doing.
        op: &'static str,
        /// The error from the operating system.
        #[source]
        source: std::io::Error,
    },
    /// A 4 KiB block does not match its crc32c: it is damaged, and its data is not returned.
    #[error("checksum mismatch in object {obj}, block {block}")]
    Checksum {
        /// The object read.
        obj: ObjectId,
        /// The damaged block (offset / 4096).
        block: u32,
    },
    /// No object slot (or, transiently, no WAL space) is left for this operation.
    #[error("store is full")]
    NoSpace,
    /// The byte range does not fit inside one object.
    #[error("range {offset}+{len} does not fit in an object of {object_size} bytes")]
    OutOfRange {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The store's object size.
        object_size: u32,
    },
    /// An earlier write or fsync failed; the store refuses further writes (fail-stop) rather
    /// than acknowledge data it may not hold.
    #[error("store stopped after an earlier write or fsync error")]
    Failed,
    /// The file is not a valid store (bad superblock, no valid checkpoint, inconsistent log).
    #[error("store is corrupt: {what}")]
    Corrupt {
        /// What is wrong.
        what: String,
    },
    /// A block device cannot hold or be opened as a store (each reason names the device).
    #[error(transparent)]
    Device(#[from] crate::medium::DeviceError),
    /// A store file cannot be fully allocated: the filesystem lacks the space.
    #[error(
        "{what} needs {}, the filesystem of {} has {} free",
        basalt_proto::size::human_bytes(*needed_bytes),
        dir.display(),
        basalt_proto::size::human_bytes(*free_bytes)
    )]
    NoRoom {
        /// What is allocated: the whole store, or (sparse) its WAL and metadata.
        what: &'static str,
        /// The directory holding the store file.
        dir: std::path::PathBuf,
        /// The store's capacity.
        needed_bytes: u64,
        /// Free space of the filesystem (statvfs, for unprivileged users) before the create.
        free_bytes: u64,
    },
    /// The options given to `create` cannot describe a store.
    #[error("bad store options: {reason}")]
    BadOptions {
        /// Why.
        reason: String,
    },
}

impl StoreError {
    /// Build a [`StoreError::Corrupt`].
    pub(crate) fn corrupt(what: impl Into<String>) -> Self {
        StoreError::Corrupt { what: what.into() }
    }

    /// Build a [`StoreError::BadOptions`].
    pub(crate) fn bad_options(reason: impl Into<String>) -> Self {
        StoreError::BadOptions {
            reason: reason.into(),
        }
    }
}

/// `map_err` adapter naming the operation that failed.
pub(crate) fn io_err(op: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Io { op, source }
}
