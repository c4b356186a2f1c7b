//! A disk in memory that forgets like a real one: writes are visible at once but durable only
//! after a sync, and a power cut keeps an arbitrary subset of the unsynced writes (the page
//! cache writes pages back in any order). The simulator runs stores on it.
//!
//! One [`MemDisk`] is the physical disk; [`MemDisk::attach`] gives the handle a process opens.
//! A crash or power cut detaches every handle, so a process that is "dead" but still has
//! tasks in flight can no longer touch the disk (its I/O fails with EIO).

use crate::device::Disk;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Granularity of the disk's bookkeeping (and of what a power cut keeps or loses).
const PAGE_BYTES: u64 = 4096;

type Pages = BTreeMap<u64, Box<[u8]>>;

#[derive(Default)]
struct State {
    /// What reads see (the page cache).
    current: Pages,
    /// What survives a power cut for sure.
    durable: Pages,
    /// Pages written since the last sync, oldest first (a page may repeat).
    unsynced: Vec<u64>,
    /// Bumped by every crash: handles of older generations are dead.
    generation: u64,
}

/// A sparse in-memory disk of a fixed size.
pub struct MemDisk {
    len: u64,
    state: Mutex<State>,
}

/// A process's open handle on a [`MemDisk`]; dead once the disk crashed after it was made.
pub struct MemDiskHandle {
    disk: Arc<MemDisk>,
    generation: u64,
}

impl MemDisk {
    /// A zero-filled disk of `len` bytes (only written pages take memory).
    pub fn new(len: u64) -> Arc<MemDisk> {
        Arc::new(MemDisk {
            len,
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("memdisk lock")
    }

    /// A handle for a process that opens the disk now.
    pub fn attach(self: &Arc<Self>) -> Arc<MemDiskHandle> {
        Arc::new(MemDiskHandle {
            disk: self.clone(),
            generation: self.lock().generation,
        })
    }

    /// The process using the disk died; the machine did not (the page cache survives, so
    /// nothing written is lost). Existing handles stop working.
    pub fn crash(&self) {
        self.lock().generation += 1;
    }

    /// The machine lost power: every synced write survives, and of the unsynced pages those
    /// for which `keep(page_index)` says true (called once per unsynced page, oldest first).
    /// Existing handles stop working.
    pub fn power_cut(&self, mut keep: impl FnMut(u64) -> bool) {
        let mut st = self.lock();
        st.generation += 1;
        let unsynced = std::mem::take(&mut st.unsynced);
        let mut seen = std::collections::BTreeSet::new();
        for page in unsynced {
            if seen.insert(page) && keep(page) {
                if let Some(data) = st.current.get(&page).cloned() {
                    st.durable.insert(page, data);
                }
            }
        }
        st.current = st.durable.clone();
    }

    /// Unsynced pages (a power cut now could lose them).
    pub fn unsynced_pages(&self) -> usize {
        self.lock().unsynced.len()
    }
}

impl MemDiskHandle {
    fn live(&self) -> std::io::Result<MutexGuard<'_, State>> {
        let st = self.disk.lock();
        if st.generation != self.generation {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        Ok(st)
    }

    fn check_range(&self, offset: u64, len: usize) -> std::io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.disk.len => Ok(()),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "[{offset}, +{len}) is beyond the disk's {} bytes",
                    self.disk.len
                ),
            )),
        }
    }
}

/// Walk `[offset, offset + len)` page by page: (page index, offset in page, offset in the
/// buffer, length).
fn pieces(offset: u64, len: usize) -> impl Iterator<Item = (u64, usize, usize, usize)> {
    let end = offset + len as u64;
    let mut pos = offset;
    std::iter::from_fn(move || {
        if pos >= end {
            return None;
        }
        let page = pos / PAGE_BYTES;
        let in_page = (pos % PAGE_BYTES) as usize;
        let n = ((PAGE_BYTES as usize) - in_page).min((end - pos) as usize);
        let item = (page, in_page, (pos - offset) as usize, n);
        pos += n as u64;
        Some(item)
    })
}

impl Disk for MemDiskHandle {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.check_range(offset, buf.len())?;
        let st = self.live()?;
        for (page, in_page, at, n) in pieces(offset, buf.len()) {
            match st.current.get(&page) {
                Some(data) => buf[at..at + n].copy_from_slice(&data[in_page..in_page + n]),
                None => buf[at..at + n].fill(0),
            }
        }
        Ok(())
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.check_range(offset, buf.len())?;
        let mut st = self.live()?;
        for (page, in_page, at, n) in pieces(offset, buf.len()) {
            let data = st
                .current
                .entry(page)
                .or_insert_with(|| vec![0; PAGE_BYTES as usize].into_boxed_slice());
            data[in_page..in_page + n].copy_from_slice(&buf[at..at + n]);
            st.unsynced.push(page);
        }
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        let mut st = self.live()?;
        let unsynced = std::mem::take(&mut st.unsynced);
        for page in unsynced {
            if let Some(data) = st.current.get(&page).cloned() {
                st.durable.insert(page, data);
            }
        }
        Ok(())
    }

    fn size_bytes(&self) -> std::io::Result<u64> {
        Ok(self.disk.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a power cut keeps synced writes, keeps exactly the chosen unsynced pages, and a
    /// handle from before a crash can no longer write.
    #[test]
    fn power_cut_keeps_synced_and_chosen_pages() {
        let disk = MemDisk::new(64 * 1024);
        let h = disk.attach();
        h.write_all_at(&[1; 4096], 0).unwrap();
        h.sync_data().unwrap();
        h.write_all_at(&[2; 8192], 0).unwrap();
        h.write_all_at(&[3; 10], 20_000).unwrap();
        disk.power_cut(|page| page == 1);
        assert!(h.write_all_at(&[9; 1], 0).is_err(), "a dead handle wrote");
        let h = disk.attach();
        let mut buf = vec![0u8; 8192];
        h.read_exact_at(&mut buf, 0).unwrap();
        assert!(
            buf[..4096].iter().all(|&b| b == 1),
            "synced page lost or torn"
        );
        assert!(buf[4096..].iter().all(|&b| b == 2), "kept page not kept");
        let mut tail = [7u8; 10];
        h.read_exact_at(&mut tail, 20_000).unwrap();
        assert_eq!(tail, [0; 10], "a dropped page survived");
        assert!(h.read_exact_at(&mut tail, 64 * 1024 - 5).is_err());
    }

    /// Goal: a crash (process death) loses nothing written, synced or not.
    #[test]
    fn crash_keeps_the_page_cache() {
        let disk = MemDisk::new(16 * 1024);
        let h = disk.attach();
        h.write_all_at(&[5; 100], 4000).unwrap();
        disk.crash();
        let h = disk.attach();
        let mut buf = [0u8; 100];
        h.read_exact_at(&mut buf, 4000).unwrap();
        assert_eq!(buf, [5; 100]);
    }
}
