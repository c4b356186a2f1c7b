//! The data file: positioned reads and writes, fdatasync, and the fail-stop flag that trips on
//! the first write or sync error; and [`Disk`], what the store needs of the medium under it.

use crate::engine::{AlignedBuf, Completion, Engine, EngineKind, Op, ALIGN};
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

/// Where a store's bytes live: a [`Disk`] called on the caller's thread (the simulator's
/// [`crate::MemDisk`]), or a file or device whose I/O runs through an [`Engine`].
enum Medium {
    Disk(Arc<dyn Disk>),
    Engine {
        engine: Engine,
        file: Arc<File>,
        /// A block device's size (its metadata says 0); None: the file's length.
        size_bytes: Option<u64>,
    },
}

/// A whole-object write handed to the engine: its bytes (served to readers until it
/// completes) and its completion.
pub(crate) struct InFlightWrite {
    pub buf: Arc<AlignedBuf>,
    pub done: Completion,
    pub op: &'static str,
}

/// The store's one file. After any failed write or sync, every later write and sync returns
/// [`StoreError::Failed`]: the page cache may have dropped the data (a later fsync can succeed
/// without it), so the store can no longer promise durability.
///
/// Every write is whole blocks at a block-aligned offset (what direct I/O requires; the
/// store's structures are laid out so): an unaligned write is refused as a bug, on every
/// medium, so the simulator catches it too. Reads may be anywhere: an engine reads the
/// aligned blocks around them.
pub(crate) struct DataFile {
    medium: Medium,
    failed: AtomicBool,
    /// Test hook: make every write and sync fail with EIO.
    #[cfg(test)]
    pub(crate) inject_failure: AtomicBool,
}

impl DataFile {
    pub fn new(file: Arc<dyn Disk>) -> DataFile {
        DataFile::with(Medium::Disk(file))
    }

    /// I/O on `io_file` through an engine of `io.engine`; `direct` says whether `io_file` was
    /// opened with O_DIRECT. `locked` is the handle holding the store's lock (possibly the
    /// same file opened once more), kept for the life of the store.
    pub fn with_engine(
        locked: File,
        io_file: File,
        direct: bool,
        io: &crate::IoOptions,
    ) -> Result<DataFile, StoreError> {
        let engine = Engine::start(Arc::new(io_file), direct, io.engine)
            .map_err(io_err("start the I/O engine"))?;
        Ok(DataFile::with(Medium::Engine {
            engine,
            file: Arc::new(locked),
            size_bytes: None,
        }))
    }

    /// I/O on the block device `device` (opened `O_DIRECT`, `size_bytes` long) through an
    /// engine of `io.engine`.
    pub fn on_device(
        device: File,
        size_bytes: u64,
        io: &crate::IoOptions,
    ) -> Result<DataFile, StoreError> {
        let device = Arc::new(device);
        let engine = Engine::start(device.clone(), true, io.engine)
            .map_err(io_err("start the I/O engine"))?;
        Ok(DataFile::with(Medium::Engine {
            engine,
            file: device,
            size_bytes: Some(size_bytes),
        }))
    }

    fn with(medium: Medium) -> DataFile {
        DataFile {
            medium,
            failed: AtomicBool::new(false),
            #[cfg(test)]
            inject_failure: AtomicBool::new(false),
        }
    }

    /// The engine that runs the I/O and whether it bypasses the page cache (None: a [`Disk`]
    /// called inline).
    pub fn engine(&self) -> Option<(EngineKind, bool)> {
        match &self.medium {
            Medium::Disk(_) => None,
            Medium::Engine { engine, .. } => Some((engine.kind(), engine.direct())),
        }
    }

    /// Does I/O go through an engine whose completions a task can await (instead of a
    /// [`Disk`] called inline)?
    pub fn awaits(&self) -> bool {
        matches!(self.medium, Medium::Engine { .. })
    }

    /// Start reading `len` bytes (whole blocks) at `offset` (block-aligned); None on a
    /// [`Disk`], which is read inline instead.
    pub fn submit_read(&self, offset: u64, len: usize) -> Option<Completion> {
        match &self.medium {
            Medium::Disk(_) => None,
            Medium::Engine { engine, .. } => Some(engine.submit(Op::Read {
                offset,
                buf: AlignedBuf::zeroed(len),
            })),
        }
    }

    /// The bytes a read started by [`DataFile::submit_read`] brought.
    pub fn finish_read(
        &self,
        done: crate::engine::Done,
        op: &'static str,
    ) -> Result<AlignedBuf, StoreError> {
        done.result.map_err(io_err(op))?;
        done.buf.ok_or_else(|| StoreError::Io {
            op,
            source: std::io::Error::other("the engine returned no buffer"),
        })
    }

    /// Start writing `data` (whole blocks) at `offset` (block-aligned) without waiting for
    /// the device. Returns the write still in flight — its bytes and its completion, to be
    /// finished with [`DataFile::finish_write`] — or None when it is done already (on a
    /// [`Disk`], or an engine that ran it at once). A failure stops the store.
    pub fn start_write(
        &self,
        data: &[u8],
        offset: u64,
        op: &'static str,
    ) -> Result<Option<InFlightWrite>, StoreError> {
        Ok(self.start_writes(&[(data, offset)], op)?.pop())
    }

    /// [`DataFile::start_write`] for each of `writes` (data, offset), submitted together;
    /// returns those still in flight.
    pub fn start_writes(
        &self,
        writes: &[(&[u8], u64)],
        op: &'static str,
    ) -> Result<Vec<InFlightWrite>, StoreError> {
        let Medium::Engine { engine, .. } = &self.medium else {
            for &(data, offset) in writes {
                self.write_at(data, offset, op)?;
            }
            return Ok(Vec::new());
        };
        self.check_writable()?;
        for &(data, offset) in writes {
            self.check_aligned(data.len(), offset, op)?;
        }
        self.injected().map_err(|e| self.trip(e, op))?;
        let bufs: Vec<Arc<AlignedBuf>> = writes
            .iter()
            .map(|&(data, _)| Arc::new(AlignedBuf::copy_from(data)))
            .collect();
        let ops = writes
            .iter()
            .zip(&bufs)
            .map(|(&(_, offset), buf)| Op::Write {
                offset,
                buf: buf.clone(),
            })
            .collect();
        let mut in_flight = Vec::new();
        let mut result = Ok(());
        for (done, buf) in engine.submit_all(ops).into_iter().zip(bufs) {
            if done.is_ready() {
                let finished = self.finish_write(done, op);
                if result.is_ok() {
                    result = finished;
                }
            } else {
                in_flight.push(InFlightWrite { buf, done, op });
            }
        }
        match result {
            Ok(()) => Ok(in_flight),
            Err(e) => {
                // The store has stopped; wait for the rest so no buffer outlives its use.
                for w in in_flight {
                    let _ = self.finish_write(w.done, w.op);
                }
                Err(e)
            }
        }
    }

    /// Wait for a write started by [`DataFile::start_write`]; a failure stops the store.
    pub fn finish_write(&self, done: Completion, op: &'static str) -> Result<(), StoreError> {
        let result = done.wait().result;
        self.trip_on_error(result, op)
    }

    /// The size of the medium.
    pub fn size_bytes(&self, op: &'static str) -> Result<u64, StoreError> {
        match &self.medium {
            Medium::Disk(d) => d.size_bytes(),
            Medium::Engine {
                size_bytes: Some(n),
                ..
            } => Ok(*n),
            Medium::Engine { file, .. } => file.metadata().map(|m| m.len()),
        }
        .map_err(io_err(op))
    }

    /// Read exactly `buf.len()` bytes at `offset`. Read errors do not stop the store.
    pub fn read_at(&self, buf: &mut [u8], offset: u64, op: &'static str) -> Result<(), StoreError> {
        match &self.medium {
            Medium::Disk(d) => d.read_exact_at(buf, offset).map_err(io_err(op)),
            Medium::Engine { engine, .. } => {
                let align = ALIGN as u64;
                let start = offset / align * align;
                let end = (offset + buf.len() as u64).next_multiple_of(align);
                let done = engine
                    .submit(Op::Read {
                        offset: start,
                        buf: AlignedBuf::zeroed((end - start) as usize),
                    })
                    .wait();
                done.result.map_err(io_err(op))?;
                let Some(data) = done.buf else {
                    return Err(StoreError::Io {
                        op,
                        source: std::io::Error::other("the engine returned no buffer"),
                    });
                };
                let from = (offset - start) as usize;
                buf.copy_from_slice(&data.as_slice()[from..from + buf.len()]);
                Ok(())
            }
        }
    }

    /// Write all of `buf` (whole blocks) at `offset` (block-aligned); a failure stops the
    /// store.
    pub fn write_at(&self, buf: &[u8], offset: u64, op: &'static str) -> Result<(), StoreError> {
        self.check_writable()?;
        self.check_aligned(buf.len(), offset, op)?;
        let result = self.injected().and_then(|()| match &self.medium {
            Medium::Disk(d) => d.write_all_at(buf, offset),
            Medium::Engine { engine, .. } => {
                engine
                    .submit(Op::Write {
                        offset,
                        buf: Arc::new(AlignedBuf::copy_from(buf)),
                    })
                    .wait()
                    .result
            }
        });
        self.trip_on_error(result, op)
    }

    /// fdatasync: every write that returned before this call is durable. A failure stops the
    /// store.
    pub fn sync(&self, op: &'static str) -> Result<(), StoreError> {
        self.check_writable()?;
        let result = self.injected().and_then(|()| match &self.medium {
            Medium::Disk(d) => d.sync_data(),
            Medium::Engine { engine, .. } => engine.submit(Op::Sync).wait().result,
        });
        self.trip_on_error(result, op)
    }

    /// fsync: like [`DataFile::sync`], and the file's size too. A failure stops the store.
    pub fn sync_all(&self, op: &'static str) -> Result<(), StoreError> {
        self.check_writable()?;
        let result = self.injected().and_then(|()| match &self.medium {
            Medium::Disk(d) => d.sync_all(),
            Medium::Engine { file, .. } => file.sync_all(),
        });
        self.trip_on_error(result, op)
    }

    /// Err(Failed) once the store has stopped.
    pub fn check_writable(&self) -> Result<(), StoreError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(StoreError::Failed);
        }
        Ok(())
    }

    /// Refuse (and stop the store on) a write that is not whole blocks at a block boundary:
    /// a store bug, caught on every medium so the simulator sees it too.
    fn check_aligned(&self, len: usize, offset: u64, op: &'static str) -> Result<(), StoreError> {
        if offset.is_multiple_of(ALIGN as u64) && len.is_multiple_of(ALIGN) {
            return Ok(());
        }
        let source = std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "unaligned write of {len} bytes at {offset} (a store bug: writes are whole blocks)"
            ),
        );
        Err(self.trip(source, op))
    }

    fn trip_on_error(
        &self,
        result: std::io::Result<()>,
        op: &'static str,
    ) -> Result<(), StoreError> {
        result.map_err(|source| self.trip(source, op))
    }

    fn trip(&self, source: std::io::Error, op: &'static str) -> StoreError {
        self.failed.store(true, Ordering::Release);
        StoreError::Io { op, source }
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
