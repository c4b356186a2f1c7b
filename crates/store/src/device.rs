//! The data file: positioned reads and writes, fdatasync, and the fail-stop flag that trips on
//! the first write or sync error; and [`Disk`], what the store needs of the medium under it.

use crate::error::{io_err, StoreError};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The medium under a store: positioned reads and writes, and a barrier after which every
/// earlier write is durable. A file in production; [`crate::MemDisk`] in the simulator, where
/// a power cut loses what was written since the last barrier.
pub trait Disk: Send + Sync + 'static {
    /// Read exactly `buf.len()` bytes at `offset`.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()>;
    /// Write all of `buf` at `offset` (visible to reads at once, durable after a sync).
    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()>;
    /// Make every write that returned before this call durable (fdatasync).
    fn sync_data(&self) -> std::io::Result<()>;
    /// Like `sync_data`, and also the size and other metadata (fsync).
    fn sync_all(&self) -> std::io::Result<()> {
        self.sync_data()
    }
    /// The size in bytes.
    fn size_bytes(&self) -> std::io::Result<u64>;
}

impl Disk for File {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        FileExt::read_exact_at(self, buf, offset)
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        FileExt::write_all_at(self, buf, offset)
    }

    fn sync_data(&self) -> std::io::Result<()> {
        File::sync_data(self)
    }

    fn sync_all(&self) -> std::io::Result<()> {
        File::sync_all(self)
    }

    fn size_bytes(&self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// The store's one file. After any failed write or sync, every later write and sync returns
/// [`StoreError::Failed`]: the page cache may have dropped the data (a later fsync can succeed
/// without it), so the store can no longer promise durability.
pub(crate) struct DataFile {
    file: Arc<dyn Disk>,
    failed: AtomicBool,
    /// Test hook: make every write and sync fail with EIO.
    #[cfg(test)]
    pub(crate) inject_failure: AtomicBool,
}

impl DataFile {
    pub fn new(file: Arc<dyn Disk>) -> DataFile {
        DataFile {
            file,
            failed: AtomicBool::new(false),
            #[cfg(test)]
            inject_failure: AtomicBool::new(false),
        }
    }

    /// The size of the medium.
    pub fn size_bytes(&self, op: &'static str) -> Result<u64, StoreError> {
        self.file.size_bytes().map_err(io_err(op))
    }

    /// Read exactly `buf.len()` bytes at `offset`. Read errors do not stop the store.
    pub fn read_at(&self, buf: &mut [u8], offset: u64, op: &'static str) -> Result<(), StoreError> {
        self.file.read_exact_at(buf, offset).map_err(io_err(op))
    }

    /// Write all of `buf` at `offset`; a failure stops the store.
    pub fn write_at(&self, buf: &[u8], offset: u64, op: &'static str) -> Result<(), StoreError> {
        self.check_writable()?;
        let result = self
            .injected()
            .and_then(|()| self.file.write_all_at(buf, offset));
        self.trip_on_error(result, op)
    }

    /// fdatasync: every write that returned before this call is durable. A failure stops the
    /// store.
    pub fn sync(&self, op: &'static str) -> Result<(), StoreError> {
        self.check_writable()?;
        let result = self.injected().and_then(|()| self.file.sync_data());
        self.trip_on_error(result, op)
    }

    /// fsync: like [`DataFile::sync`], and the file's size too. A failure stops the store.
    pub fn sync_all(&self, op: &'static str) -> Result<(), StoreError> {
        self.check_writable()?;
        let result = self.injected().and_then(|()| self.file.sync_all());
        self.trip_on_error(result, op)
    }

    /// Err(Failed) once the store has stopped.
    pub fn check_writable(&self) -> Result<(), StoreError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(StoreError::Failed);
        }
        Ok(())
    }

    fn trip_on_error(
        &self,
        result: std::io::Result<()>,
        op: &'static str,
    ) -> Result<(), StoreError> {
        result.map_err(|source| {
            self.failed.store(true, Ordering::Release);
            StoreError::Io { op, source }
        })
    }

    #[cfg(test)]
    fn injected(&self) -> std::io::Result<()> {
        if self.inject_failure.load(Ordering::Acquire) {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(())
    }

    #[cfg(not(test))]
    fn injected(&self) -> std::io::Result<()> {
        Ok(())
    }
}
