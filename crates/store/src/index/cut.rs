//! A checkpoint's *cut*: the table, and in a store with crc regions the crc pages, as they
//! were at one moment, encoded piece by piece while writers go on. Before a change to a slot
//! that the checkpoint has not reached yet, [`Index::touch`] saves what the checkpoint must
//! record for it (docs/design.md, "Checkpoint").

use super::{FastHash, Index, SlotState};
use crate::checkpoint::{self, AreaWriter};
use crate::crcs::{PagedCrcs, SavedCrcs};
use std::collections::HashMap;

/// Slots looked at per call of [`Index::encode_cut`] (bounds the table lock's hold when
/// few slots are used).
pub(crate) const CUT_SCAN_SLOTS_MAX: u32 = 1 << 16;

/// A checkpoint being written: the table as of its cut, for the slots not yet encoded.
pub(super) struct Cut {
    /// Slots below this one are encoded.
    next: u32,
    /// Slots at or past `next` changed since the cut: their entry as of the cut (encoded),
    /// or None when no object held them then.
    saved: HashMap<u32, Option<Box<[u8]>>, FastHash>,
    /// The crc pages it writes (stores with crc regions).
    crc: Option<CrcCut>,
}

/// The crc pages a checkpoint writes, as of its cut.
struct CrcCut {
    /// Ascending.
    pages: Vec<CutPage>,
    /// `pages[..next]` are composed.
    next: usize,
    /// Slots of pages not yet composed that changed since the cut: their dirty crcs then
    /// (None: they had none).
    saved: HashMap<u32, Option<SavedCrcs>, FastHash>,
}

/// A crc page a checkpoint writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CutPage {
    pub page: u32,
    /// A used slot of it has an allocated block whose crc is not in RAM: the page is
    /// composed over its contents in the newest region, not over zeros.
    pub needs_base: bool,
}

impl Cut {
    pub(super) fn check_invariants(&self) {
        assert!(
            self.saved.keys().all(|&s| s >= self.next),
            "entries are saved only for slots not yet encoded"
        );
        if let Some(c) = &self.crc {
            assert!(c.pages.windows(2).all(|w| w[0].page < w[1].page));
        }
    }
}

impl CrcCut {
    /// Is `page` one of those still to compose?
    fn pending(&self, page: u32) -> bool {
        self.pages[self.next..]
            .binary_search_by_key(&page, |p| p.page)
            .is_ok()
    }
}

impl Index {
    /// Start checkpoint `seq`'s cut: from now on a change to a slot not yet encoded by
    /// [`Index::encode_cut`] (or whose crc page is not yet composed) first saves what the
    /// checkpoint records for it, so the checkpoint holds the table of this moment while
    /// writers go on; crcs set from now on belong to the next checkpoint. Returns the crc
    /// pages this checkpoint writes, ascending (none when the crcs live in RAM).
    pub fn begin_cut(&mut self, seq: u64) -> Vec<CutPage> {
        assert!(self.cut.is_none(), "one checkpoint at a time");
        let pages = self.crcs.paged().map(|p| self.cut_pages(p));
        if let Some(p) = self.crcs.paged_mut() {
            assert!(seq > p.newest_seq, "checkpoints go forward");
            p.interval = seq + 1;
        }
        self.cut = Some(Cut {
            next: 0,
            saved: HashMap::default(),
            crc: pages.clone().map(|pages| CrcCut {
                pages,
                next: 0,
                saved: HashMap::default(),
            }),
        });
        pages.unwrap_or_default()
    }

    /// The pages the next checkpoint writes: the ones the last one wrote (their other copy
    /// is older) and the ones holding dirty crcs.
    fn cut_pages(&self, p: &PagedCrcs) -> Vec<CutPage> {
        let g = p.geometry;
        let mut pages = p.carry.clone();
        pages.extend(p.dirty.slots().map(|(slot, _)| g.page_of(slot)));
        pages.sort_unstable();
        pages.dedup();
        let needs_base = |page: u32| {
            g.slots_of(page).any(|slot| {
                self.state(slot) == SlotState::Used && !p.dirty.covers(slot, self.alloc_words(slot))
            })
        };
        pages
            .into_iter()
            .map(|page| CutPage {
                page,
                needs_base: needs_base(page),
            })
            .collect()
    }

    /// Push the entries of the next slots, as of the cut, into `w` until it wants writing
    /// or `scan_max` slots were looked at; true once every slot is encoded.
    pub fn encode_cut(&mut self, w: &mut AreaWriter, scan_max: u32) -> bool {
        let Some(mut cut) = self.cut.take() else {
            panic!("encode_cut without begin_cut");
        };
        let slot_count = self.state.len() as u32;
        let scan_end = cut.next.saturating_add(scan_max).min(slot_count);
        while cut.next < scan_end && !w.wants_write() {
            let slot = cut.next;
            match cut.saved.remove(&slot) {
                Some(Some(entry)) => w.push_encoded(&entry),
                Some(None) => {}
                None if self.state(slot) == SlotState::Used => w.push_entry(&self.entry(slot)),
                None => {}
            }
            cut.next += 1;
        }
        let done = cut.next == slot_count;
        if done {
            assert!(cut.saved.is_empty(), "every saved entry was encoded");
        }
        self.cut = Some(cut);
        done
    }

    /// Write into `image` (the old contents of crc page `page`, or zeros) the crcs set in RAM
    /// as of the cut for the slots of that page, the next one of the cut's pages.
    pub fn compose_cut_page(&mut self, page: u32, image: &mut [u8]) {
        let Some(cut) = self.cut.as_mut().and_then(|c| c.crc.as_mut()) else {
            panic!("compose_cut_page without a cut of crc pages");
        };
        assert_eq!(
            cut.pages.get(cut.next).map(|p| p.page),
            Some(page),
            "pages are composed in order"
        );
        cut.next += 1;
        let Some(p) = self.crcs.paged() else {
            panic!("a cut of crc pages in a store without crc regions");
        };
        let g = p.geometry;
        for slot in g.slots_of(page) {
            match cut.saved.remove(&slot) {
                Some(saved) => {
                    if let Some(rec) = saved {
                        p.dirty.write_into(&g, image, slot, Some(&rec));
                    }
                }
                None => p.dirty.write_into(&g, image, slot, None),
            }
        }
    }

    /// Checkpoint `seq` is durable: its region is the newest, the crcs set before its cut are
    /// there (into cached pages, out of the dirty records), and the next checkpoint copies
    /// its pages over to the other region.
    pub fn complete_cut(&mut self, seq: u64) {
        let Some(cut) = self.cut.take() else {
            panic!("complete_cut without begin_cut");
        };
        assert!(cut.next == self.state.len() as u32 && cut.saved.is_empty());
        let Some(crc) = cut.crc else {
            return;
        };
        assert!(
            crc.next == crc.pages.len() && crc.saved.is_empty(),
            "every page written"
        );
        let Some(p) = self.crcs.paged_mut() else {
            panic!("a cut of crc pages in a store without crc regions");
        };
        let g = p.geometry;
        let cache = p
            .cache
            .get_mut()
            .expect("crc cache mutex poisoned by an earlier panic");
        p.dirty.drop_through(seq, |slot, block, crc| {
            if let Some(image) = cache.get_mut(g.page_of(slot)) {
                g.set(image, slot, block, crc);
            }
        });
        p.carry = crc.pages.iter().map(|c| c.page).collect();
        p.newest_seq = seq;
    }

    /// Forget the cut (a failed checkpoint; a completed one ends in [`Index::complete_cut`]).
    pub fn end_cut(&mut self) {
        self.cut = None;
    }

    /// Before `slot` changes: while a checkpoint is written and has not encoded `slot` (or
    /// composed its crc page) yet, save what it records for the slot as of the cut (once).
    pub(super) fn touch(&mut self, slot: u32) {
        let Some(cut) = &self.cut else {
            return;
        };
        let entry = (slot >= cut.next && !cut.saved.contains_key(&slot)).then(|| {
            (self.state(slot) == SlotState::Used).then(|| {
                let mut bytes = vec![0u8; self.table_format().entry_bytes()];
                checkpoint::encode_entry(&mut bytes, &self.entry(slot));
                bytes.into_boxed_slice()
            })
        });
        let crcs = match (&cut.crc, self.crcs.paged()) {
            (Some(c), Some(p)) if c.pending(p.geometry.page_of(slot)) => {
                (!c.saved.contains_key(&slot)).then(|| p.dirty.save(slot))
            }
            _ => None,
        };
        let Some(cut) = &mut self.cut else {
            return;
        };
        if let Some(entry) = entry {
            cut.saved.insert(slot, entry);
        }
        if let (Some(c), Some(saved)) = (&mut cut.crc, crcs) {
            c.saved.insert(slot, saved);
        }
    }

    /// What this store's checkpoint tables hold.
    pub(super) fn table_format(&self) -> checkpoint::TableFormat {
        checkpoint::TableFormat {
            blocks_per_slot: self.blocks_per_slot as u32,
            paged: self.crcs.paged().is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::{CheckpointHeader, EntryRef};
    use crate::crc_pages::CrcGeometry;
    use crate::crcs::CrcLookup;
    use basalt_proto::{ObjectId, Version};

    /// Blocks per slot: 3 slots to a crc page, so a few slots change each page.
    const BLOCKS: u32 = 256;

    /// A xorshift step.
    fn next(r: &mut u64) -> u64 {
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        *r
    }

    /// One random change through the table's API, as the store makes them (to the first 4
    /// blocks of objects of [`BLOCKS`], 40 object names).
    fn random_change(ix: &mut Index, r: &mut u64, lsn: &mut u64) {
        *lsn += 1;
        let obj = ObjectId::new(1, next(r) % 40);
        let v = Version::new(1, *lsn);
        let first = (next(r) % 4) as u32;
        let n = 1 + next(r) % (4 - first as u64);
        match next(r) % 6 {
            0 | 1 => {
                let crcs: Vec<u32> = (0..n).map(|_| next(r) as u32 | 1).collect();
                let slot = match ix.object(obj) {
                    Some(m) => m.slot,
                    None => match ix.reserve_free_slot() {
                        Some(s) => s,
                        None => return,
                    },
                };
                ix.write_blocks(obj, slot, v, first, &crcs, None);
            }
            2 => {
                if let Some(slot) = ix.reserve_free_slot() {
                    let crcs: Vec<u32> = (0..BLOCKS).map(|_| next(r) as u32 | 1).collect();
                    ix.remap(obj, slot, v, &crcs, Some(*lsn));
                }
            }
            3 => {
                ix.trim(obj, first, n as u32, v, Some(*lsn));
            }
            4 => {
                ix.delete(obj, Some(*lsn));
            }
            _ => {
                let to = ObjectId::new(1, (obj.index + 1 + next(r) % 39) % 40);
                ix.rename(obj, to, Some(*lsn));
            }
        }
        if next(r).is_multiple_of(3) {
            ix.release_confirmed(*lsn);
        }
    }

    /// Every allocated block's crc, by slot (what the pages must give back).
    fn all_crcs(ix: &Index, region: &[Vec<u8>]) -> Vec<(u32, usize, u32)> {
        let mut out = Vec::new();
        for slot in 0..ix.state.len() as u32 {
            if ix.state(slot) != SlotState::Used {
                continue;
            }
            for b in 0..ix.blocks_per_slot {
                if !ix.is_allocated(slot, b) {
                    continue;
                }
                let crc = match ix.block_crc(slot, b) {
                    CrcLookup::Known(c) => c,
                    CrcLookup::InPage(page) => {
                        let g = ix.crcs.paged().expect("paged").geometry;
                        g.get(&region[page as usize], slot, b)
                    }
                };
                out.push((slot, b, crc));
            }
        }
        out
    }

    #[test]
    fn a_streamed_checkpoint_is_the_table_and_crcs_of_its_cut() {
        // Goal: while a checkpoint is encoded and its crc pages composed a few at a time,
        // writers change the table in every way the store does; what is streamed is byte
        // for byte the checkpoint of the table at the cut, and the crc region it writes
        // (over the other region's pages) gives back every crc of the cut. In RAM and paged.
        for paged in [false, true] {
            let slots = 48;
            let g = CrcGeometry::new(slots, BLOCKS);
            assert_eq!((g.page_bytes, g.pages), (4096, 16));
            let geometry = paged.then_some(g);
            let mut ix = Index::new(slots, BLOCKS, geometry, 0, Vec::new());
            // The two regions, a page per entry; a checkpoint writes region seq % 2.
            let mut regions = vec![vec![vec![0u8; 4096]; g.pages as usize]; 2];
            let (mut r, mut lsn) = (0x9e37_79b9_7f4a_7c15u64, 0u64);
            for seq in 1..200u64 {
                for _ in 0..next(&mut r) % 8 {
                    random_change(&mut ix, &mut r, &mut lsn);
                }
                let format = ix.table_format();
                let at_cut: Vec<EntryRef<'_>> = ix.entries().collect();
                let mut want = Vec::new();
                let region = regions[(seq % 2) as usize].clone();
                let pages = if paged {
                    let p = ix.crcs.paged().expect("paged");
                    let mut pages = p.carry.clone();
                    pages.extend(p.dirty.slots().map(|(s, _)| g.page_of(s)));
                    pages.sort_unstable();
                    pages.dedup();
                    pages
                } else {
                    Vec::new()
                };
                let header = CheckpointHeader {
                    seq,
                    wal_pos: 0,
                    next_lsn: lsn + 1,
                    entry_count: at_cut.len() as u64,
                    page_count: pages.len() as u32,
                    clean: false,
                    aligned_batches: true,
                };
                checkpoint::encode(&mut want, &header, format, at_cut.into_iter(), &pages);
                let crcs_at_cut = all_crcs(&ix, &regions[((seq - 1) % 2) as usize]);
                let cut_pages = ix.begin_cut(seq);
                assert_eq!(cut_pages.iter().map(|c| c.page).collect::<Vec<_>>(), pages);
                let mut written = region;
                for c in &cut_pages {
                    let mut image = if c.needs_base {
                        regions[((seq - 1) % 2) as usize][c.page as usize].clone()
                    } else {
                        vec![0u8; 4096]
                    };
                    for _ in 0..next(&mut r) % 3 {
                        random_change(&mut ix, &mut r, &mut lsn);
                    }
                    ix.compose_cut_page(c.page, &mut image);
                    written[c.page as usize] = image;
                }
                let mut w = AreaWriter::new(&header, format, 0, Vec::new());
                let step = 1 + (next(&mut r) % 7) as u32;
                while !ix.encode_cut(&mut w, step) {
                    for _ in 0..next(&mut r) % 4 {
                        random_change(&mut ix, &mut r, &mut lsn);
                    }
                    ix.check_invariants();
                }
                w.push_pages(&pages);
                let mut got = Vec::new();
                let done = w.finish(|bytes, at| {
                    got.resize(got.len().max(at as usize + bytes.len()), 0);
                    got[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
                    Ok::<(), ()>(())
                });
                assert!(done.is_ok());
                assert_eq!(got, want, "paged {paged}, checkpoint {seq}");
                if paged {
                    // What recovery would see from this checkpoint: its region, no dirty crcs.
                    let mut fresh = Index::new(slots, BLOCKS, geometry, seq, pages.clone());
                    checkpoint::for_each_entry(&want, &header, format, |e| {
                        fresh.load_entry(e).map_err(crate::StoreError::corrupt)
                    })
                    .expect("load");
                    assert_eq!(all_crcs(&fresh, &written), crcs_at_cut, "checkpoint {seq}");
                }
                // Completing it drops the dirty crcs it wrote: every crc stays the same.
                let before = all_crcs(&ix, &regions[((seq - 1) % 2) as usize]);
                assert_eq!(
                    before.len() as u64,
                    ix.used_blocks(),
                    "every block has a crc"
                );
                regions[(seq % 2) as usize] = written;
                ix.complete_cut(seq);
                ix.check_invariants();
                assert_eq!(all_crcs(&ix, &regions[(seq % 2) as usize]), before);
            }
        }
    }
}
