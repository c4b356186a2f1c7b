//! The storage interface behind the server: a [`BlockDevice`] per export and an [`Exports`]
//! catalogue that names them. The rest of Basalt (volumes over the cluster) implements these;
//! [`ExportMap`] is a ready-made catalogue for tests and fixed configurations.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use thiserror::Error;

use crate::wire;

/// Errors a device returns; mapped once to NBD error codes by [`DeviceError::errno`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DeviceError {
    /// The storage failed (maps to `EIO`).
    #[error("i/o error: {0}")]
    Io(String),
    /// Out of space or quota (maps to `ENOSPC`).
    #[error("no space left")]
    NoSpace,
    /// The request makes no sense for this device (maps to `EINVAL`).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The device refuses writes (maps to `EPERM`).
    #[error("device is read-only")]
    ReadOnly,
    /// The device cannot do this operation (maps to `ENOTSUP`).
    #[error("operation not supported")]
    NotSupported,
    /// The device is going away (maps to `ESHUTDOWN`).
    #[error("device is shutting down")]
    ShuttingDown,
    /// Another client holds the device's writer lock (maps to `EPERM`; refused at open
    /// with the message, which names the holder).
    #[error("{0}")]
    Locked(String),
}

impl DeviceError {
    /// The NBD error code sent to the client for this error.
    pub fn errno(&self) -> u32 {
        match self {
            DeviceError::Io(_) => wire::EIO,
            DeviceError::NoSpace => wire::ENOSPC,
            DeviceError::Invalid(_) => wire::EINVAL,
            DeviceError::ReadOnly => wire::EPERM,
            DeviceError::NotSupported => wire::ENOTSUP,
            DeviceError::ShuttingDown => wire::ESHUTDOWN,
            DeviceError::Locked(_) => wire::EPERM,
        }
    }
}

/// One run of bytes with the same allocation status (the `base:allocation` context).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// Length in bytes; zero-length extents are ignored by the server.
    pub length: u64,
    /// Not allocated in the backing storage (writes there may need space).
    pub hole: bool,
    /// Reads as zeroes.
    pub zero: bool,
}

/// A byte-addressed block device served as one NBD export.
///
/// Every method may be called concurrently from many connections; the server never holds a
/// lock across these calls. Ranges are already checked against [`BlockDevice::size`].
#[async_trait]
pub trait BlockDevice: Send + Sync + 'static {
    /// Size in bytes; fixed for the life of a connection.
    fn size(&self) -> u64;

    /// Whether writes are refused (the server then advertises `READ_ONLY` and answers `EPERM`).
    fn read_only(&self) -> bool {
        false
    }

    /// A stable id of the storage behind the device (a volume's first layer), the same on
    /// every gateway; the NVMe/TCP target derives its namespace UUID and serial from it.
    fn identity(&self) -> Option<u64> {
        None
    }

    /// Whether a trimmed range reads back as zeroes (NVMe's DLFEAT tells hosts so); the
    /// trait's contract alone promises nothing for trimmed ranges.
    fn trim_zeroes(&self) -> bool {
        false
    }

    /// Whether `write_zeroes` is cheaper than writing zero bytes, so a client's
    /// `FAST_ZERO` request may proceed; when false such requests fail at once with `ENOTSUP`.
    fn fast_zero(&self) -> bool {
        false
    }

    /// Read exactly `len` bytes at `offset`.
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError>;

    /// Read exactly `len` bytes at `offset` as consecutive pieces (sent to the client in
    /// order without joining them first). A device whose data arrives in pieces (a volume's
    /// objects) overrides this to save a copy; by default it is [`BlockDevice::read`].
    async fn read_pieces(&self, offset: u64, len: u32) -> Result<Vec<Bytes>, DeviceError> {
        Ok(vec![self.read(offset, len).await?])
    }

    /// Write `data` at `offset`; with `fua`, the data is durable when this returns.
    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError>;

    /// Make every write acknowledged on ANY connection to this device durable (this is what
    /// lets the server advertise `CAN_MULTI_CONN`).
    async fn flush(&self) -> Result<(), DeviceError>;

    /// Discard `[offset, offset+len)`; it may read back as anything until rewritten.
    async fn trim(&self, offset: u64, len: u32, fua: bool) -> Result<(), DeviceError>;

    /// Make `[offset, offset+len)` read as zeroes; with `may_trim` the range may be unmapped,
    /// without it the range must stay allocated (`NO_HOLE`).
    async fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError>;

    /// Hint that `[offset, offset+len)` will be read soon.
    async fn cache(&self, _offset: u64, _len: u32) -> Result<(), DeviceError> {
        Ok(())
    }

    /// Allocation status of `[offset, offset+len)`: extents in order covering at least part of
    /// the range (the server asks again for the rest).
    async fn block_status(&self, offset: u64, len: u32) -> Result<Vec<Extent>, DeviceError>;
}

/// What `OPT_LIST` shows of one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// Name a client passes to `OPT_GO`.
    pub name: String,
    /// Human-readable description (may be empty).
    pub description: String,
}

/// The catalogue of exports a server offers.
#[async_trait]
pub trait Exports: Send + Sync + 'static {
    /// Names for `NBD_OPT_LIST` (looked up at each request, so newly created volumes show at
    /// once).
    async fn list(&self) -> Result<Vec<ExportInfo>, DeviceError>;

    /// Open an export by name ("" = default export if the implementation has one); `None` =
    /// unknown export.
    async fn open(&self, name: &str) -> Result<Option<Arc<dyn BlockDevice>>, DeviceError>;

    /// Open an export for `client` ("nbd client 10.0.0.2", "nvme host nqn.…"): the
    /// identity a writer lock is held for. By default the same as [`Exports::open`].
    async fn open_as(
        &self,
        name: &str,
        client: &str,
    ) -> Result<Option<Arc<dyn BlockDevice>>, DeviceError> {
        let _ = client;
        self.open(name).await
    }

    /// May NVMe host `hostnqn` attach export `name`? (Its access list; by default any.)
    async fn admits_nvme_host(&self, name: &str, hostnqn: &str) -> Result<bool, DeviceError> {
        let _ = (name, hostnqn);
        Ok(true)
    }

    /// Description shown by `NBD_INFO_DESCRIPTION`; by default looked up in [`Exports::list`].
    async fn describe(&self, name: &str) -> Result<String, DeviceError> {
        let all = self.list().await?;
        Ok(all
            .into_iter()
            .find(|e| e.name == name)
            .map(|e| e.description)
            .unwrap_or_default())
    }
}

struct MapEntry {
    description: String,
    device: Arc<dyn BlockDevice>,
}

/// An in-memory, mutable [`Exports`] catalogue: name → device, with an optional default
/// export for the empty name. Used by tests and by fixed single-process setups.
#[derive(Default)]
pub struct ExportMap {
    entries: RwLock<BTreeMap<String, MapEntry>>,
    default_name: RwLock<Option<String>>,
}

impl ExportMap {
    /// An empty catalogue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add or replace an export. Connections already open keep the device they opened.
    pub fn insert(
        &self,
        name: impl Into<String>,
        description: impl Into<String>,
        device: Arc<dyn BlockDevice>,
    ) {
        let entry = MapEntry {
            description: description.into(),
            device,
        };
        write_lock(&self.entries).insert(name.into(), entry);
    }

    /// Remove an export; returns whether it existed.
    pub fn remove(&self, name: &str) -> bool {
        write_lock(&self.entries).remove(name).is_some()
    }

    /// Make `name` the export opened by the empty name (`None`: the empty name is unknown).
    pub fn set_default(&self, name: Option<String>) {
        *write_lock(&self.default_name) = name;
    }

    fn lookup(&self, name: &str) -> Option<(String, Arc<dyn BlockDevice>)> {
        let resolved = if name.is_empty() {
            read_lock(&self.default_name).clone()?
        } else {
            name.to_owned()
        };
        let entries = read_lock(&self.entries);
        let entry = entries.get(&resolved)?;
        Some((entry.description.clone(), entry.device.clone()))
    }
}

#[async_trait]
impl Exports for ExportMap {
    async fn list(&self) -> Result<Vec<ExportInfo>, DeviceError> {
        Ok(read_lock(&self.entries)
            .iter()
            .map(|(name, e)| ExportInfo {
                name: name.clone(),
                description: e.description.clone(),
            })
            .collect())
    }

    async fn open(&self, name: &str) -> Result<Option<Arc<dyn BlockDevice>>, DeviceError> {
        Ok(self.lookup(name).map(|(_, dev)| dev))
    }

    async fn describe(&self, name: &str) -> Result<String, DeviceError> {
        Ok(self.lookup(name).map(|(d, _)| d).unwrap_or_default())
    }
}

// A panic while holding these locks cannot leave the map half-updated (single insert/remove),
// so a poisoned lock is still safe to use.
fn read_lock<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}
