//! The data file: positioned reads and writes, fdatasync, and the fail-stop flag that trips on
//! the first write or sync error.

use crate::error::{io_err, StoreError};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// The store's one file. After any failed write or sync, every later write and sync returns
/// [`StoreError::Failed`]: the page cache may have dropped the data (a later fsync can succeed
/// without it), so the store can no longer promise durability.
pub(crate) struct DataFile {
    file: File,
    failed: AtomicBool,
    /// Test hook: make every write and sync fail with EIO.
    #[cfg(test)]
    pub(crate) inject_failure: AtomicBool,
}

impl DataFile {
    pub fn new(file: File) -> DataFile {
        DataFile {
            file,
            failed: AtomicBool::new(false),
            #[cfg(test)]
            inject_failure: AtomicBool::new(false),
        }
    }

    /// The underlying file (for metadata and locking).
    pub fn file(&self) -> &File {
        &self.file
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
