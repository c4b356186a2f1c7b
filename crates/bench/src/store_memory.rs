//! The local store's RAM per stored object copy (docs/design.md, "Memory (≤ 64 B per object
//! copy)"): a store with room for N objects of the default size is made in a directory and
//! opened as an OSD opens it, N objects of one 4 KiB block each are written through the
//! public API with a flush whenever 1 MiB is unflushed (when an OSD wakes its flusher), and
//! the resident set is read from `/proc/self/statm` before and after. The figure is
//! `(after − at open) / N`; what the open cost is reported beside it.
//!
//! It runs in a process of its own (`basalt bench store-memory`, which the bench's `memory`
//! section starts), so nothing else this process holds moves the figure.

use anyhow::{bail, Context};
use basalt_proto::{ObjectId, Version};
use basalt_store::{IoOptions, Store, StoreOptions, BLOCK_BYTES, DEFAULT_OBJECT_BYTES};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// Unflushed bytes at which a writer flushes (the OSD wakes its background flusher there).
const FLUSH_EVERY_BYTES: u64 = 1 << 20;
/// Objects read back and compared after the writes (spread over all of them).
const VERIFY_SAMPLE: u64 = 1000;
/// Inode of the measured objects.
const INODE: u64 = 7;
/// Name of the store file in the measurement's directory.
pub const STORE_FILE: &str = "memory-store";

/// What one measurement found (printed as JSON by `basalt bench store-memory`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StoreMemory {
    /// Objects written.
    pub objects: u64,
    /// Slots of the store (room for at least `objects`).
    pub slots: u64,
    /// Object (slot) size.
    pub object_size_bytes: u32,
    /// How the store's I/O ran (`direct uring`, `buffered inline`).
    pub io_mode: String,
    /// Resident set of the process before the store was opened.
    pub rss_before_open_bytes: u64,
    /// Resident set right after the store was opened (no object yet).
    pub rss_open_bytes: u64,
    /// Resident set after every object was written and flushed.
    pub rss_after_bytes: u64,
    /// Highest resident set while the objects were written (checkpoints included).
    pub peak_rss_bytes: u64,
    /// Seconds the writes and flushes took.
    pub write_seconds: f64,
    /// Seconds removing the store file took (a million scattered 4 KiB extents: minutes on
    /// ext4 on a virtual disk).
    #[serde(default)]
    pub remove_seconds: f64,
}

impl StoreMemory {
    /// RAM per stored object copy: the rise of the resident set over the writes, per object.
    pub fn per_object_bytes(&self) -> f64 {
        self.rss_after_bytes.saturating_sub(self.rss_open_bytes) as f64 / self.objects as f64
    }

    /// The highest resident set over the writes, above the one at open, per object.
    pub fn peak_per_object_bytes(&self) -> f64 {
        self.peak_rss_bytes.saturating_sub(self.rss_open_bytes) as f64 / self.objects as f64
    }

    /// What opening the (empty) store cost: its resident set at open minus the process's
    /// before it.
    pub fn open_bytes(&self) -> u64 {
        self.rss_open_bytes
            .saturating_sub(self.rss_before_open_bytes)
    }
}

/// Capacity of a store of `object_size_bytes` objects with at least `objects` slots: the
/// slots, an eighth more for the WAL and checkpoint areas (each area holds a full table of
/// a few hundred bytes per slot), and the automatic WAL's ceiling.
pub fn capacity_for(objects: u64, object_size_bytes: u32) -> u64 {
    let slots = objects * object_size_bytes as u64;
    slots + slots / 8 + (512 << 20)
}

/// Measure the store's RAM per object in `dir` (which must exist) with `objects` objects,
/// in this process; the store file is removed afterwards.
pub fn measure(dir: &Path, objects: u64) -> anyhow::Result<StoreMemory> {
    if objects == 0 {
        bail!("the measurement needs at least one object");
    }
    // As `basalt osd` does at start: large I/O buffers stay in the heap.
    basalt_store::memory::keep_io_buffers_in_heap();
    let path = dir.join(STORE_FILE);
    let _ = std::fs::remove_file(&path);
    let _remove = RemoveFileOnDrop(path.clone());
    let opts = StoreOptions {
        capacity_bytes: capacity_for(objects, DEFAULT_OBJECT_BYTES),
        ..StoreOptions::default()
    };
    let io = IoOptions::DAEMON_DEFAULT;
    Store::create_sparse(&path, &opts, &io)
        .and_then(|s| s.close())
        .with_context(|| format!("create a sparse store at {}", path.display()))?;
    let rss_before_open_bytes = resident_bytes()?;
    let store = Store::open_sparse(&path, &io)
        .with_context(|| format!("open the store at {}", path.display()))?;
    let rss_open_bytes = resident_bytes()?;
    let stats = store.stats();
    if stats.slots_total < objects {
        bail!(
            "the store has {} slots, fewer than {objects} objects",
            stats.slots_total
        );
    }
    reset_peak_rss()?;
    let started = Instant::now();
    write_objects(&store, objects)?;
    let write_seconds = started.elapsed().as_secs_f64();
    let rss_after_bytes = resident_bytes()?;
    let peak_rss_bytes = peak_rss_bytes()?.max(rss_after_bytes);
    verify(&store, objects)?;
    let figures = StoreMemory {
        objects,
        slots: stats.slots_total,
        object_size_bytes: store.object_size(),
        io_mode: store.io_mode(),
        rss_before_open_bytes,
        rss_open_bytes,
        rss_after_bytes,
        peak_rss_bytes,
        write_seconds,
        remove_seconds: 0.0,
    };
    store.close().context("close the store")?;
    let started = Instant::now();
    std::fs::remove_file(&path).with_context(|| format!("remove {}", path.display()))?;
    Ok(StoreMemory {
        remove_seconds: started.elapsed().as_secs_f64(),
        ..figures
    })
}

/// Removes the measured store file however the measurement ends.
struct RemoveFileOnDrop(std::path::PathBuf);

impl Drop for RemoveFileOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Object number `i` of the measurement.
fn object(i: u64) -> ObjectId {
    ObjectId::new(INODE, i)
}

/// The 4 KiB block object `i` holds: its number, then a byte derived from it.
fn block(i: u64, out: &mut [u8]) {
    out.fill((i % 251) as u8);
    out[..8].copy_from_slice(&i.to_le_bytes());
}

/// Write block 0 of `objects` objects, flushing every [`FLUSH_EVERY_BYTES`], then flush.
fn write_objects(store: &Store, objects: u64) -> anyhow::Result<()> {
    let mut data = vec![0u8; BLOCK_BYTES as usize];
    for i in 0..objects {
        block(i, &mut data);
        store
            .write(object(i), 0, &data, Version::new(1, i + 1))
            .with_context(|| format!("write object {i}"))?;
        if store.unflushed_bytes() >= FLUSH_EVERY_BYTES {
            store.flush().context("flush")?;
        }
    }
    store.flush().context("flush")?;
    let stored = store.stats().objects;
    if stored != objects {
        bail!("the store holds {stored} objects after {objects} writes");
    }
    Ok(())
}

/// Read back [`VERIFY_SAMPLE`] objects spread over all of them: the writes were real.
fn verify(store: &Store, objects: u64) -> anyhow::Result<()> {
    let (mut got, mut want) = (
        vec![0u8; BLOCK_BYTES as usize],
        vec![0u8; BLOCK_BYTES as usize],
    );
    let sample = VERIFY_SAMPLE.min(objects);
    for k in 0..sample {
        let i = k * objects / sample;
        store
            .read(object(i), 0, &mut got)
            .with_context(|| format!("read object {i} back"))?;
        block(i, &mut want);
        if got != want {
            bail!("object {i} does not read back as written");
        }
    }
    Ok(())
}

/// This process's resident set (`/proc/self/statm`, second field, in pages).
pub fn resident_bytes() -> anyhow::Result<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").context("read /proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .with_context(|| format!("no resident size in /proc/self/statm: {statm:?}"))?;
    Ok(pages * page_bytes())
}

fn page_bytes() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as u64
    } else {
        4096
    }
}

/// Reset this process's resident-set high-water mark to its current resident set.
fn reset_peak_rss() -> anyhow::Result<()> {
    std::fs::write("/proc/self/clear_refs", "5").context("reset the peak RSS (clear_refs)")
}

/// This process's resident-set high-water mark (`VmHWM` of `/proc/self/status`).
fn peak_rss_bytes() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/self/status")?;
    Ok(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_measurement_stores_and_reads_back_its_objects() {
        // Goal: the machinery runs end to end on a real store (objects written, flushed and
        // read back, the store file removed) and its figures are consistent: a resident set
        // read at each step, the store as large as asked, the figures serialised as the
        // child prints them.
        let dir = tempfile::tempdir().expect("tempdir");
        let m = measure(dir.path(), 3000).expect("measure");
        assert_eq!(m.objects, 3000);
        assert!(m.slots >= 3000, "{m:?}");
        assert_eq!(m.object_size_bytes, DEFAULT_OBJECT_BYTES);
        assert!(m.rss_before_open_bytes > 0 && m.rss_open_bytes > 0, "{m:?}");
        assert!(m.per_object_bytes().is_finite());
        assert!(!dir.path().join(STORE_FILE).exists(), "store file removed");
        let json = serde_json::to_string(&m).expect("json");
        assert_eq!(
            serde_json::from_str::<StoreMemory>(&json).expect("parse"),
            m
        );
    }

    #[test]
    fn the_resident_set_follows_touched_memory() {
        // Goal: the RSS reader sees memory this process touches (so a per-object figure
        // can rise at all): 64 MiB written raise it by at least 48 MiB.
        let before = resident_bytes().expect("rss");
        let block = std::hint::black_box(vec![1u8; 64 << 20]);
        let after = resident_bytes().expect("rss");
        assert!(after >= before + (48 << 20), "{before} → {after}");
        drop(block);
    }

    #[test]
    fn zero_objects_is_refused() {
        // Goal: a measurement without objects is an error, not a division by zero.
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(measure(dir.path(), 0).is_err());
    }
}
