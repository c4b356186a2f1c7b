//! A raw block device as a store's medium (docs/design.md, "Raw block devices"): opened
//! `O_RDWR | O_DIRECT | O_EXCL`, sized with `BLKGETSIZE64`, its logical sector checked with
//! `BLKSSZGET`; and [`Store::create_on_device`] / [`Store::open_device`] on top of it.
//!
//! A device store always runs direct I/O: a device has no filesystem to fall back to
//! buffered I/O on, and the page cache would only cache every byte twice.

use crate::device::DataFile;
use crate::engine::{AlignedBuf, ALIGN};
use crate::error::StoreError;
use crate::options::{IoOptions, StoreOptions};
use crate::store::Store;
use basalt_proto::size::human_bytes;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Largest logical sector size a store accepts: its structures are 4 KiB blocks, and direct
/// I/O must be aligned to the logical sector.
pub const MAX_SECTOR_BYTES: u32 = 4096;

/// Smallest device a store is made on: the smallest WAL (4 MiB), two checkpoint areas and
/// room for enough slots to be worth an OSD.
pub const MIN_DEVICE_BYTES: u64 = 32 << 20;

/// `BLKGETSIZE64` = `_IOR(0x12, 114, size_t)`: the device's size in bytes (the libc crate
/// does not define it). This encoding holds on the architectures with the generic ioctl
/// layout (x86_64, aarch64, riscv64).
const BLKGETSIZE64: libc::Ioctl = 0x8008_1272_u32 as libc::Ioctl;

/// Why a block device cannot hold (or be opened as) a store. Each message names the device
/// and the reason, for an operator to act on.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// Opening the path failed for a reason other than exclusivity.
    #[error("open {}: {source}", device.display())]
    Open {
        /// The device path.
        device: PathBuf,
        /// The error from the operating system.
        #[source]
        source: std::io::Error,
    },
    /// The path is a regular file, a directory, a character device...
    #[error("{} is not a block device", device.display())]
    NotBlockDevice {
        /// The path given.
        device: PathBuf,
    },
    /// The kernel refused the exclusive open: mounted, or held by another process, a
    /// device-mapper target, a RAID array or this process's other store.
    #[error("{} is mounted or in use by another process (O_EXCL refused)", device.display())]
    InUse {
        /// The device path.
        device: PathBuf,
    },
    /// `/proc/self/mountinfo` lists the device (or one of its partitions).
    #[error("{} is mounted ({mounted} at {mount_point})", device.display())]
    Mounted {
        /// The device path.
        device: PathBuf,
        /// The mounted block device (the device itself or one of its partitions).
        mounted: String,
        /// Where it is mounted.
        mount_point: String,
    },
    /// `/sys/class/block/NAME/holders` is not empty (LVM, device-mapper, md RAID, bcache).
    #[error("{} is held by {holders} (device-mapper, LVM, RAID or bcache)", device.display())]
    Held {
        /// The device path.
        device: PathBuf,
        /// The holders' names, comma separated.
        holders: String,
    },
    /// The logical sector is larger than a store block.
    #[error(
        "{} has {sector_bytes}-byte logical sectors; Basalt needs ≤ {MAX_SECTOR_BYTES}",
        device.display()
    )]
    SectorTooLarge {
        /// The device path.
        device: PathBuf,
        /// Its logical sector size.
        sector_bytes: u32,
    },
    /// An ioctl on the device failed.
    #[error("{}: {request} failed: {source}", device.display())]
    Ioctl {
        /// The device path.
        device: PathBuf,
        /// Which ioctl.
        request: &'static str,
        /// The error from the operating system.
        #[source]
        source: std::io::Error,
    },
    /// Reading the device's first bytes failed.
    #[error("read {}: {source}", device.display())]
    Read {
        /// The device path.
        device: PathBuf,
        /// The error from the operating system.
        #[source]
        source: std::io::Error,
    },
    /// The device is smaller than a store needs.
    #[error(
        "{} holds {}, a store needs at least {}",
        device.display(), human_bytes(*size_bytes), human_bytes(*min_bytes)
    )]
    TooSmall {
        /// The device path.
        device: PathBuf,
        /// Its size.
        size_bytes: u64,
        /// The least a store needs.
        min_bytes: u64,
    },
    /// A partition table is on the device (`--force` overrides).
    #[error(
        "{} holds {what}; its partitions' data would be lost (--force overrides)",
        device.display()
    )]
    PartitionTable {
        /// The device path.
        device: PathBuf,
        /// Which table, e.g. "a GPT partition table".
        what: &'static str,
    },
    /// A filesystem, swap, LVM, LUKS or bcache signature is on the device (`--force`
    /// overrides).
    #[error(
        "{} holds {what} signature; its data would be lost (--force overrides)",
        device.display()
    )]
    Signature {
        /// The device path.
        device: PathBuf,
        /// Which signature, e.g. "an ext2/3/4 filesystem".
        what: &'static str,
    },
    /// The device already holds a Basalt store (never overridden in this version).
    #[error(
        "{} already holds a Basalt store (id {store_id:016x}); Basalt will not overwrite a \
         store (zero its first 4 KiB yourself once its OSD is removed)",
        device.display()
    )]
    HasStore {
        /// The device path.
        device: PathBuf,
        /// The id in its superblock.
        store_id: u64,
    },
    /// The device's first block starts with the Basalt magic but is not a valid superblock.
    #[error(
        "{} holds a damaged Basalt superblock ({reason}); Basalt will not overwrite it",
        device.display()
    )]
    DamagedStore {
        /// The device path.
        device: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// An OSD was pointed at a device with no store on it.
    #[error(
        "{} holds no Basalt store; run `basalt disk prepare {}` first",
        device.display(), device.display()
    )]
    NoStore {
        /// The device path.
        device: PathBuf,
    },
}

/// A block device opened for a store: exclusively (`O_EXCL`) and with direct I/O, so no
/// other process, filesystem or store uses it while this handle lives.
#[derive(Debug)]
pub struct BlockDevice {
    path: PathBuf,
    file: File,
    size_bytes: u64,
    sector_bytes: u32,
}

impl BlockDevice {
    /// Open `path` read-write, `O_DIRECT | O_EXCL`: refused unless it is a block device
    /// nobody else holds, with logical sectors of at most [`MAX_SECTOR_BYTES`].
    pub fn open(path: &Path) -> Result<BlockDevice, DeviceError> {
        check_is_block_device(path)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_EXCL)
            .open(path)
            .map_err(|source| match source.raw_os_error() {
                Some(libc::EBUSY) => DeviceError::InUse {
                    device: path.to_owned(),
                },
                _ => DeviceError::Open {
                    device: path.to_owned(),
                    source,
                },
            })?;
        BlockDevice::with_file(path, file)
    }

    /// Open `path` read-only and shared (no `O_EXCL`): for looking at a device another
    /// process may hold (`basalt disk ls`). Reads are direct, so they see what is on the
    /// device rather than a stale page cache.
    pub fn open_read_only(path: &Path) -> Result<BlockDevice, DeviceError> {
        check_is_block_device(path)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
            .map_err(|source| DeviceError::Open {
                device: path.to_owned(),
                source,
            })?;
        BlockDevice::with_file(path, file)
    }

    fn with_file(path: &Path, file: File) -> Result<BlockDevice, DeviceError> {
        let ioctl_err = |request| {
            let source = std::io::Error::last_os_error();
            DeviceError::Ioctl {
                device: path.to_owned(),
                request,
                source,
            }
        };
        let mut size_bytes: u64 = 0;
        // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live u64.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut size_bytes) };
        if rc != 0 {
            return Err(ioctl_err("BLKGETSIZE64"));
        }
        let mut sector: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int through the pointer, which points to a live int.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut sector) };
        if rc != 0 {
            return Err(ioctl_err("BLKSSZGET"));
        }
        let sector_bytes = u32::try_from(sector).unwrap_or(u32::MAX);
        if sector_bytes > MAX_SECTOR_BYTES {
            return Err(DeviceError::SectorTooLarge {
                device: path.to_owned(),
                sector_bytes,
            });
        }
        Ok(BlockDevice {
            path: path.to_owned(),
            file,
            size_bytes,
            sector_bytes,
        })
    }

    /// The path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its size (`BLKGETSIZE64`).
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Its logical sector size (`BLKSSZGET`).
    pub fn sector_bytes(&self) -> u32 {
        self.sector_bytes
    }

    /// The first `len` bytes of the device (fewer if it is smaller), read directly.
    pub fn read_head(&self, len: usize) -> Result<Vec<u8>, DeviceError> {
        let len = len.min(usize::try_from(self.size_bytes).unwrap_or(usize::MAX));
        let mut buf = AlignedBuf::zeroed(len.next_multiple_of(ALIGN));
        let want = (buf.len() as u64).min(self.size_bytes) as usize;
        FileExt::read_exact_at(&self.file, &mut buf.as_mut_slice()[..want], 0).map_err(
            |source| DeviceError::Read {
                device: self.path.clone(),
                source,
            },
        )?;
        Ok(buf.as_slice()[..len].to_vec())
    }

    /// The store's medium on this device: its I/O run by an engine of `io.engine`, always
    /// direct (the device was opened `O_DIRECT`), its reads awaited like a file's. (The
    /// inline engine suits tools such as `disk prepare`; a daemon refuses it with direct
    /// I/O, see [`IoOptions::for_daemon`].)
    pub(crate) fn into_data_file(self, io: &IoOptions) -> Result<DataFile, StoreError> {
        DataFile::on_device(self.file, self.size_bytes, io)
    }
}

/// Refuse anything but a block device, naming it.
fn check_is_block_device(path: &Path) -> Result<(), DeviceError> {
    let meta = std::fs::metadata(path).map_err(|source| DeviceError::Open {
        device: path.to_owned(),
        source,
    })?;
    if !meta.file_type().is_block_device() {
        return Err(DeviceError::NotBlockDevice {
            device: path.to_owned(),
        });
    }
    Ok(())
}

/// The capacity of a store on a device of `device_bytes`: what `opts` asks for if that is
/// smaller (and not 0), else the whole device rounded down to a 4 KiB block.
pub(crate) fn device_capacity_bytes(opts: &StoreOptions, device_bytes: u64) -> u64 {
    let whole = device_bytes / ALIGN as u64 * ALIGN as u64;
    match opts.capacity_bytes {
        0 => whole,
        asked => asked.min(whole),
    }
}

impl Store {
    /// Create a new store on the block device at `path`, over whatever it holds: the
    /// capacity is the whole device (rounded down to 4 KiB) when `opts.capacity_bytes` is 0
    /// or larger, else `opts.capacity_bytes`. Checks only that the
    /// device can be opened exclusively and is large enough; `basalt disk prepare`
    /// ([`crate::prepare::prepare`]) first refuses devices holding data.
    pub fn create_on_device(
        path: &Path,
        opts: &StoreOptions,
        io: &IoOptions,
    ) -> Result<Store, StoreError> {
        let device = BlockDevice::open(path)?;
        crate::recovery::create_device(device, opts, io)
    }

    /// Open the store on the block device at `path` and recover it; a device without a
    /// Basalt superblock is refused with [`DeviceError::NoStore`].
    pub fn open_device(path: &Path, io: &IoOptions) -> Result<Store, StoreError> {
        let device = BlockDevice::open(path)?;
        crate::recovery::open_device(device, io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a store on a device takes the whole device (block-rounded) unless asked for less.
    #[test]
    fn device_capacity_is_the_device_unless_smaller_is_asked() {
        let opts = |capacity_bytes| StoreOptions {
            capacity_bytes,
            ..StoreOptions::default()
        };
        assert_eq!(device_capacity_bytes(&opts(0), (1 << 30) + 100), 1 << 30);
        assert_eq!(device_capacity_bytes(&opts(8 << 30), 1 << 30), 1 << 30);
        assert_eq!(device_capacity_bytes(&opts(64 << 20), 1 << 30), 64 << 20);
    }

    /// Goal: a regular file is refused as a device, naming it.
    #[test]
    fn a_regular_file_is_not_a_block_device() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plain");
        std::fs::write(&path, b"x").expect("write");
        let err = BlockDevice::open(&path).expect_err("a file is not a device");
        assert_eq!(
            err.to_string(),
            format!("{} is not a block device", path.display())
        );
    }
}
