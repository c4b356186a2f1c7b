//! Basalt's local store: one data file per OSD holding fixed-size object slots, a circular
//! write-ahead log and two alternating checkpoints, with all metadata in RAM.
//!
//! Small writes go through the WAL (and an in-RAM overlay until durable); whole-object writes
//! go to a fresh slot; every 4 KiB block carries a crc32c verified on read. `docs/design.md`
//! ("Local store") specifies every byte on disk and what is assumed of the disk.

#![warn(missing_docs)]

mod checkpoint;
mod crc_pages;
mod crcs;
mod device;
mod device_class;
pub mod engine;
mod error;
mod free_slots;
mod index;
mod journal;
mod medium;
mod memdisk;
pub mod memory;
mod objects;
mod options;
mod prefetch;
pub mod prepare;
mod recovery;
mod store;
mod superblock;
pub mod wal;
mod zeroed;

pub use device::Disk;
pub use device_class::{detect_device_class, DetectedClass};
pub use error::StoreError;
pub use medium::{BlockDevice, DeviceError, MAX_SECTOR_BYTES, MIN_DEVICE_BYTES};
pub use memdisk::{MemDisk, MemDiskHandle};
pub use options::{
    IoOptions, StoreOptions, BLOCK_BYTES, DEFAULT_CAPACITY_BYTES, DEFAULT_OBJECT_BYTES,
    MAX_AUTO_WAL_BYTES, MAX_BLOCKS_PER_OBJECT, MAX_OBJECT_BYTES, MAX_WAL_BYTES, MIN_OBJECT_BYTES,
    MIN_WAL_BYTES,
};
pub use prefetch::{EdgeBlocks, WriteToken};
pub use store::{Store, StoreStats, WalStats};
pub use superblock::{StoreLayout, SUPERBLOCK_BYTES, SUPERBLOCK_FORMAT_VERSION};
