//! [`MemDevice`]: a sparse in-memory [`BlockDevice`] for tests (here and in other crates) and
//! for benchmarking the server without storage in the way.
//!
//! The device is cut into 64 KiB chunks kept in sharded hash maps; a chunk is absent (a hole
//! reading as zeroes), `Zero` (allocated, reads as zeroes, costs no data memory) or `Data`.
//! Locks are plain `std` locks held only for a memcpy, never across an `.await`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};

use crate::export::{BlockDevice, DeviceError, Extent};
use crate::wire::MAX_STATUS_EXTENTS;

/// Allocation granularity: trims and zeroing free memory only for whole chunks.
pub const CHUNK_BYTES: u64 = 64 << 10;
/// Lock shards; chunk `i` lives in shard `i % SHARD_COUNT` so neighbours do not contend.
const SHARD_COUNT: usize = 64;

enum Chunk {
    /// Allocated and reads as zeroes (from `write_zeroes` with `NO_HOLE`).
    Zero,
    /// Allocated with contents; always `CHUNK_BYTES` long.
    Data(Box<[u8]>),
}

/// A sparse in-memory block device. Thread-safe; every operation is a few memcpys.
pub struct MemDevice {
    size: u64,
    read_only: bool,
    shards: Box<[RwLock<HashMap<u64, Chunk>>]>,
    flushes: AtomicU64,
    fua_ops: AtomicU64,
}

impl MemDevice {
    /// A writable device of `size` bytes, all holes.
    pub fn new(size: u64) -> Self {
        let shards = (0..SHARD_COUNT)
            .map(|_| RwLock::new(HashMap::new()))
            .collect();
        Self {
            size,
            read_only: false,
            shards,
            flushes: AtomicU64::new(0),
            fua_ops: AtomicU64::new(0),
        }
    }

    /// A read-only device of `size` bytes holding `data` at offset 0 (the rest reads as zero).
    pub fn read_only_with(size: u64, data: &[u8]) -> Self {
        let dev = Self::new(size);
        dev.store(0, data);
        Self {
            read_only: true,
            ..dev
        }
    }

    /// How many `flush` calls reached the device (lets tests see that FLUSH got through).
    pub fn flush_count(&self) -> u64 {
        self.flushes.load(Ordering::Relaxed)
    }

    /// How many write-type calls arrived with `fua` set.
    pub fn fua_count(&self) -> u64 {
        self.fua_ops.load(Ordering::Relaxed)
    }

    /// Bytes of data memory in use (whole chunks).
    pub fn allocated_bytes(&self) -> u64 {
        let data_chunks: usize = self
            .shards
            .iter()
            .map(|s| {
                read(s)
                    .values()
                    .filter(|c| matches!(c, Chunk::Data(_)))
                    .count()
            })
            .sum();
        data_chunks as u64 * CHUNK_BYTES
    }

    fn shard(&self, idx: u64) -> &RwLock<HashMap<u64, Chunk>> {
        &self.shards[(idx % SHARD_COUNT as u64) as usize]
    }

    fn check(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.size => Ok(()),
            _ => Err(DeviceError::Invalid(format!(
                "range {offset}+{len} past end {}",
                self.size
            ))),
        }
    }

    fn check_writable(&self) -> Result<(), DeviceError> {
        if self.read_only {
            Err(DeviceError::ReadOnly)
        } else {
            Ok(())
        }
    }

    fn store(&self, offset: u64, data: &[u8]) {
        let mut done = 0usize;
        for (idx, start, n) in pieces(offset, data.len() as u64) {
            let mut shard = write(self.shard(idx));
            let chunk = shard.entry(idx).or_insert(Chunk::Zero);
            if let Chunk::Zero = chunk {
                *chunk = Chunk::Data(vec![0u8; CHUNK_BYTES as usize].into_boxed_slice());
            }
            if let Chunk::Data(bytes) = chunk {
                bytes[start..start + n].copy_from_slice(&data[done..done + n]);
            }
            done += n;
        }
    }

    /// Zero `[offset, offset+len)`: whole chunks become holes (`may_trim`) or `Zero`; partial
    /// chunks with data get their bytes cleared; a partial hole is allocated as `Zero` only when
    /// holes are not allowed (the whole chunk already reads as zero).
    fn zero(&self, offset: u64, len: u64, may_trim: bool) {
        for (idx, start, n) in pieces(offset, len) {
            let mut shard = write(self.shard(idx));
            let whole = n as u64 == CHUNK_BYTES;
            match shard.get_mut(&idx) {
                Some(Chunk::Data(_)) if whole => {
                    if may_trim {
                        shard.remove(&idx);
                    } else {
                        shard.insert(idx, Chunk::Zero);
                    }
                }
                Some(Chunk::Data(bytes)) => bytes[start..start + n].fill(0),
                Some(Chunk::Zero) => {}
                None => {
                    if !may_trim {
                        shard.insert(idx, Chunk::Zero);
                    }
                }
            }
        }
    }
}

/// Split `[offset, offset+len)` into (chunk index, start within chunk, byte count) pieces.
fn pieces(offset: u64, len: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = offset + len;
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let idx = pos / CHUNK_BYTES;
        let start = pos % CHUNK_BYTES;
        let n = (CHUNK_BYTES - start).min(end - pos);
        pos += n;
        Some((idx, start as usize, n as usize))
    })
}

#[async_trait]
impl BlockDevice for MemDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn fast_zero(&self) -> bool {
        true
    }

    fn trim_zeroes(&self) -> bool {
        true
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError> {
        self.check(offset, len as u64)?;
        let mut buf = BytesMut::with_capacity(len as usize);
        for (idx, start, n) in pieces(offset, len as u64) {
            let shard = read(self.shard(idx));
            match shard.get(&idx) {
                Some(Chunk::Data(bytes)) => buf.extend_from_slice(&bytes[start..start + n]),
                _ => buf.resize(buf.len() + n, 0),
            }
        }
        Ok(buf.freeze())
    }

    /// One piece per chunk touched (holes from a static buffer of zeros): every server test
    /// on a memory device also exercises replies sent in pieces.
    async fn read_pieces(&self, offset: u64, len: u32) -> Result<Vec<Bytes>, DeviceError> {
        static ZEROS: [u8; CHUNK_BYTES as usize] = [0; CHUNK_BYTES as usize];
        self.check(offset, len as u64)?;
        let mut out = Vec::new();
        for (idx, start, n) in pieces(offset, len as u64) {
            let shard = read(self.shard(idx));
            out.push(match shard.get(&idx) {
                Some(Chunk::Data(bytes)) => Bytes::copy_from_slice(&bytes[start..start + n]),
                _ => Bytes::from_static(&ZEROS[..n]),
            });
        }
        Ok(out)
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.check_writable()?;
        self.check(offset, data.len() as u64)?;
        self.store(offset, &data);
        if fua {
            self.fua_ops.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn flush(&self) -> Result<(), DeviceError> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    async fn trim(&self, offset: u64, len: u32, fua: bool) -> Result<(), DeviceError> {
        self.check_writable()?;
        self.check(offset, len as u64)?;
        self.zero(offset, len as u64, true);
        if fua {
            self.fua_ops.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.check_writable()?;
        self.check(offset, len as u64)?;
        self.zero(offset, len as u64, may_trim);
        if fua {
            self.fua_ops.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    async fn block_status(&self, offset: u64, len: u32) -> Result<Vec<Extent>, DeviceError> {
        self.check(offset, len as u64)?;
        let mut extents: Vec<Extent> = Vec::new();
        for (idx, _, n) in pieces(offset, len as u64) {
            let (hole, zero) = match read(self.shard(idx)).get(&idx) {
                None => (true, true),
                Some(Chunk::Zero) => (false, true),
                Some(Chunk::Data(_)) => (false, false),
            };
            if let Some(last) = extents.last_mut() {
                if last.hole == hole && last.zero == zero {
                    last.length += n as u64;
                    continue;
                }
            }
            if extents.len() == MAX_STATUS_EXTENTS {
                break;
            }
            extents.push(Extent {
                length: n as u64,
                hole,
                zero,
            });
        }
        Ok(extents)
    }
}

// Every critical section is a memcpy or a map update that cannot be left half done, so a
// poisoned lock still guards consistent data.
fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("build runtime")
            .block_on(f)
    }

    #[test]
    fn reads_back_writes_across_chunk_boundaries() {
        // Goal: unaligned writes spanning chunks read back exactly; untouched bytes read zero.
        block_on(async {
            let dev = MemDevice::new(1 << 20);
            let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
            dev.write(1000, Bytes::from(data.clone()), false)
                .await
                .unwrap();
            let back = dev.read(1000, data.len() as u32).await.unwrap();
            assert_eq!(&back[..], &data[..]);
            assert_eq!(&dev.read(0, 1000).await.unwrap()[..], &[0u8; 1000][..]);
            assert!(dev.read(1 << 20, 1).await.is_err());
        });
    }

    #[test]
    fn trim_and_zero_report_holes_and_zeroes() {
        // Goal: block status tells data, hole and allocated-zero ranges apart.
        block_on(async {
            let dev = MemDevice::new(4 * CHUNK_BYTES);
            dev.write(0, Bytes::from(vec![7u8; 4 * CHUNK_BYTES as usize]), false)
                .await
                .unwrap();
            dev.trim(0, CHUNK_BYTES as u32, false).await.unwrap();
            dev.write_zeroes(CHUNK_BYTES, CHUNK_BYTES as u32, false, true)
                .await
                .unwrap();
            let ext = dev.block_status(0, 4 * CHUNK_BYTES as u32).await.unwrap();
            let got: Vec<_> = ext.iter().map(|e| (e.length, e.hole, e.zero)).collect();
            assert_eq!(
                got,
                vec![
                    (CHUNK_BYTES, true, true),
                    (CHUNK_BYTES, false, true),
                    (2 * CHUNK_BYTES, false, false)
                ]
            );
            assert_eq!(dev.allocated_bytes(), 2 * CHUNK_BYTES);
            assert_eq!(dev.fua_count(), 1);
            let z = dev.read(0, 2 * CHUNK_BYTES as u32).await.unwrap();
            assert!(z.iter().all(|&b| b == 0));
        });
    }

    #[test]
    fn passes_the_device_conformance_suite() {
        // Goal: MemDevice satisfies the contract every served device must meet.
        block_on(crate::conformance::run_all(std::sync::Arc::new(
            MemDevice::new(8 << 20),
        )));
    }

    #[test]
    fn read_only_refuses_writes() {
        // Goal: a read-only device serves its initial data and refuses every write type.
        block_on(async {
            let dev = MemDevice::read_only_with(4096, b"hello");
            assert_eq!(&dev.read(0, 5).await.unwrap()[..], b"hello");
            let e = dev.write(0, Bytes::from_static(b"x"), false).await;
            assert_eq!(e, Err(DeviceError::ReadOnly));
            assert_eq!(dev.trim(0, 1, false).await, Err(DeviceError::ReadOnly));
        });
    }
}
