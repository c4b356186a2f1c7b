//! Block crcs a read finds in a crc page on disk rather than in RAM (stores of format version
//! 2): which page, read beside the data, checked, used, and cached (docs/design.md, "Reads"
//! under "Block crc32c values on disk").

use super::{SlotReads, Store};
use crate::crc_pages;
use crate::crcs::CrcLookup;
use crate::error::StoreError;
use crate::index::Index;

/// A crc page a read needs: where it is in the newest region, and which checkpoint that was
/// when the read was planned.
pub(super) struct PageRead {
    page: u32,
    pub offset: u64,
    pub bytes: usize,
    region: usize,
    seq: u64,
}

impl Store {
    /// Note in `plan` the crc of block `b`, or the page to read it from.
    pub(super) fn plan_crc(&self, index: &Index, plan: &mut SlotReads, b: usize) {
        match index.block_crc(plan.slot, b) {
            CrcLookup::Known(crc) => plan.crcs[b - plan.first] = crc,
            CrcLookup::InPage(page) => {
                plan.in_page |= 1 << (b - plan.first);
                if plan.page.is_none() {
                    plan.page = self.page_read(index, page);
                }
            }
        }
    }

    /// Where page `page` of the newest region is.
    fn page_read(&self, index: &Index, page: u32) -> Option<PageRead> {
        let p = index.crcs().paged()?;
        let regions = self.layout.crc_region_offsets?;
        let region = p.newest_region();
        let bytes = p.geometry.page_bytes as usize;
        Some(PageRead {
            page,
            offset: regions[region] + page as u64 * bytes as u64,
            bytes,
            region,
            seq: p.newest_seq,
        })
    }

    /// Take the crcs `plan` lacks from `image`, its page as read (None: the read failed).
    /// A page that is not valid (torn by a later checkpoint rewriting that region, or
    /// damaged) leaves them unknown, which sends their blocks down the stable path.
    pub(super) fn resolve_crcs(&self, plan: &mut SlotReads, image: Option<&[u8]>) {
        let (Some(read), Some(image)) = (&plan.page, image) else {
            return;
        };
        if !crc_pages::is_valid(image, read.page, read.region, read.seq) {
            return;
        }
        let index = crate::store::read(&self.index);
        let Some(p) = index.crcs().paged() else {
            return;
        };
        for i in 0..plan.crcs.len() {
            if plan.in_page & (1 << i) != 0 {
                plan.crcs[i] = p.geometry.get(image, plan.slot, plan.first + i);
            }
        }
        plan.in_page = 0;
        p.offer(read.page, image, read.seq);
    }

    /// [`Store::resolve_crcs`], the page read on this thread.
    pub(super) fn resolve_crcs_sync(&self, plan: &mut SlotReads) {
        let Some(read) = &plan.page else {
            return;
        };
        let mut image = vec![0u8; read.bytes];
        let ok = self
            .file
            .read_at(&mut image, read.offset, "read crc page")
            .is_ok();
        self.resolve_crcs(plan, ok.then_some(&image[..]));
    }

    /// The crc of block `b` of `slot` for a stable re-read: the caller holds the writer gate
    /// and the table's read lock, so no checkpoint can complete or rewrite the newest region
    /// meanwhile, and a page that is not valid is damage.
    pub(super) fn stable_crc(&self, index: &Index, slot: u32, b: usize) -> Result<u32, StoreError> {
        let page = match index.block_crc(slot, b) {
            CrcLookup::Known(crc) => return Ok(crc),
            CrcLookup::InPage(page) => page,
        };
        let (Some(read), Some(p)) = (self.page_read(index, page), index.crcs().paged()) else {
            return Err(StoreError::corrupt(
                "a crc page in a store without crc regions",
            ));
        };
        let mut image = vec![0u8; read.bytes];
        self.file
            .read_at(&mut image, read.offset, "read crc page")?;
        if !crc_pages::is_valid(&image, page, read.region, read.seq) {
            return Err(StoreError::corrupt(format!(
                "crc page {page} of crc region {} fails its check (slot {slot}, block {b})",
                read.region
            )));
        }
        p.offer(page, &image, read.seq);
        Ok(p.geometry.get(&image, slot, b))
    }
}
