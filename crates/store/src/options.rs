//! What a caller chooses when creating a store, and the bounds those choices must respect.

/// Size of the unit that carries a crc32c and an allocation bit.
pub const BLOCK_BYTES: u32 = 4096;
/// Smallest object (and slot) size.
pub const MIN_OBJECT_BYTES: u32 = BLOCK_BYTES;
/// Largest object (and slot) size.
pub const MAX_OBJECT_BYTES: u32 = 4 << 20;
/// Most 4 KiB blocks an object can have (`MAX_OBJECT_BYTES / BLOCK_BYTES`).
pub const MAX_BLOCKS_PER_OBJECT: u32 = MAX_OBJECT_BYTES / BLOCK_BYTES;
/// Object size used when the caller does not choose one.
pub const DEFAULT_OBJECT_BYTES: u32 = 128 << 10;
/// Capacity used when the caller does not choose one.
pub const DEFAULT_CAPACITY_BYTES: u64 = 1 << 30;
/// Smallest WAL region.
pub const MIN_WAL_BYTES: u64 = 4 << 20;
/// Largest WAL region chosen automatically (`wal_bytes == 0`).
pub const MAX_AUTO_WAL_BYTES: u64 = 256 << 20;
/// Largest WAL region accepted at all (recovery reads the live part of it into memory).
pub const MAX_WAL_BYTES: u64 = 1 << 30;

/// Geometry of a new store; fixed for the life of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Size of the data file, including metadata regions.
    pub capacity_bytes: u64,
    /// Object (and slot) size: a power of two from 4 KiB to 4 MiB.
    pub object_size_bytes: u32,
    /// Size of the WAL region; 0 picks `capacity/8` clamped to 4..=256 MiB.
    pub wal_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            capacity_bytes: DEFAULT_CAPACITY_BYTES,
            object_size_bytes: DEFAULT_OBJECT_BYTES,
            wal_bytes: 0,
        }
    }
}

impl StoreOptions {
    /// The WAL size these options ask for, with the automatic choice resolved.
    pub fn effective_wal_bytes(&self) -> u64 {
        if self.wal_bytes != 0 {
            return self.wal_bytes;
        }
        let auto = (self.capacity_bytes / 8).clamp(MIN_WAL_BYTES, MAX_AUTO_WAL_BYTES);
        auto / BLOCK_BYTES as u64 * BLOCK_BYTES as u64
    }
}

/// How a store file's I/O is done (not part of the store's format: chosen at every open).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoOptions {
    /// Who runs the syscalls.
    pub engine: crate::engine::EngineKind,
    /// Open with O_DIRECT (no page cache) where the filesystem or device allows it; where it
    /// does not (tmpfs), the store runs buffered and says so.
    pub direct: bool,
}

impl IoOptions {
    /// What a daemon's OSD runs unless told otherwise: direct I/O through io_uring.
    pub const DAEMON_DEFAULT: IoOptions = IoOptions {
        engine: crate::engine::EngineKind::Uring,
        direct: true,
    };

    /// A daemon's choice from its flags: engine `uring`, `threads` or `inline`, direct or
    /// buffered. `inline` with direct I/O is refused: the runtime's threads would wait on
    /// the device.
    pub fn for_daemon(engine: &str, direct: bool) -> Result<IoOptions, String> {
        let engine: crate::engine::EngineKind = engine.parse()?;
        if engine == crate::engine::EngineKind::Inline && direct {
            return Err(
                "the inline I/O engine runs each syscall on the caller's thread, so \
                        with direct I/O the OSD's runtime threads would wait on the device: \
                        use it only with buffered I/O (or pick uring or threads)"
                    .to_string(),
            );
        }
        Ok(IoOptions { engine, direct })
    }
}

impl Default for IoOptions {
    /// Buffered I/O on the caller's thread: what the OSD runs until it awaits store calls
    /// instead of making them on its runtime threads (docs/design.md, "I/O engine").
    fn default() -> Self {
        IoOptions {
            engine: crate::engine::EngineKind::Inline,
            direct: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_wal_size_is_an_eighth_clamped_and_block_aligned() {
        let mut o = StoreOptions {
            capacity_bytes: 1 << 20,
            ..StoreOptions::default()
        };
        assert_eq!(o.effective_wal_bytes(), MIN_WAL_BYTES);
        o.capacity_bytes = 100 << 20;
        assert_eq!(o.effective_wal_bytes(), (100 << 20) / 8 / 4096 * 4096);
        o.capacity_bytes = 1 << 40;
        assert_eq!(o.effective_wal_bytes(), MAX_AUTO_WAL_BYTES);
        o.wal_bytes = 8 << 20;
        assert_eq!(o.effective_wal_bytes(), 8 << 20);
    }
}
