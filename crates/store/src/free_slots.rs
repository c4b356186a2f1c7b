//! Which slots are free, as a two-level bitmap: one bit per slot (set: taken) and one bit per
//! 64 slots (set: all 64 taken), so the lowest free slot is found by skipping full words.
//! Handing out the lowest free slot keeps used slots dense at the start of the file (and of
//! the slot-indexed tables in RAM). A bitmap of zeros means "all free", so the bits of slots
//! never used cost no resident memory (the arrays are mappings of zeros).

use crate::zeroed::ZeroedArray;

/// Free-slot bitmap over `slot_count` slots. Not synchronized: the index owns it.
pub(crate) struct FreeSlots {
    slot_count: u32,
    /// Bit `s % 64` of word `s / 64`: slot `s` is taken. Bits past `slot_count` are set.
    taken: ZeroedArray<u64>,
    /// Bit `w % 64` of word `w / 64`: `taken[w]` is all ones. Bits past `taken.len()` are set.
    full: ZeroedArray<u64>,
    /// No `full` word below this index has a zero bit (a search starts here).
    first_open: usize,
    free_count: u64,
}

impl FreeSlots {
    /// Every one of `slot_count` slots free.
    pub fn new(slot_count: u32) -> FreeSlots {
        let n = slot_count as usize;
        let words = n.div_ceil(64);
        let mut s = FreeSlots {
            slot_count,
            taken: ZeroedArray::new(words),
            full: ZeroedArray::new(words.div_ceil(64).max(1)),
            first_open: 0,
            free_count: slot_count as u64,
        };
        // The bits past the last slot (and past the last word) read as taken, so a search
        // never returns them.
        if !n.is_multiple_of(64) {
            s.taken[words - 1] = !0u64 << (n % 64);
        }
        if !words.is_multiple_of(64) || words == 0 {
            let last = s.full.len() - 1;
            s.full[last] = !0u64 << (words % 64);
        }
        s
    }

    /// Is `slot` free?
    pub fn is_free(&self, slot: u32) -> bool {
        debug_assert!(slot < self.slot_count);
        self.taken[slot as usize / 64] & (1 << (slot % 64)) == 0
    }

    /// Free slots.
    pub fn free_count(&self) -> u64 {
        self.free_count
    }

    /// The lowest free slot, if any (it stays free until [`FreeSlots::take`]).
    pub fn lowest(&mut self) -> Option<u32> {
        // Bound: `full.len()` words; each full one is skipped once per decrease of
        // `first_open`.
        while self.first_open < self.full.len() && self.full[self.first_open] == !0 {
            self.first_open += 1;
        }
        let f = *self.full.get(self.first_open)?;
        let word = self.first_open * 64 + f.trailing_ones() as usize;
        let slot = word * 64 + self.taken[word].trailing_ones() as usize;
        debug_assert!(slot < self.slot_count as usize, "tail bits read as taken");
        Some(slot as u32)
    }

    /// Mark the free `slot` taken.
    pub fn take(&mut self, slot: u32) {
        let (w, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        assert!(self.taken[w] & bit == 0, "slot {slot} taken twice");
        self.taken[w] |= bit;
        if self.taken[w] == !0 {
            self.full[w / 64] |= 1 << (w % 64);
        }
        self.free_count -= 1;
    }

    /// Mark the taken `slot` free.
    pub fn give(&mut self, slot: u32) {
        let (w, bit) = (slot as usize / 64, 1u64 << (slot % 64));
        assert!(self.taken[w] & bit != 0, "slot {slot} freed twice");
        self.taken[w] &= !bit;
        self.full[w / 64] &= !(1 << (w % 64));
        self.first_open = self.first_open.min(w / 64);
        self.free_count += 1;
    }

    /// Check the summary level and the count against the bits (O(slots)).
    pub fn check_invariants(&self) {
        let mut free = 0u64;
        for (w, &word) in self.taken.iter().enumerate() {
            let full = self.full[w / 64] & (1 << (w % 64)) != 0;
            assert_eq!(full, word == !0, "summary bit of word {w}");
            free += word.count_zeros() as u64;
        }
        assert_eq!(free, self.free_count, "free slot count");
        for f in &self.full[..self.first_open.min(self.full.len())] {
            assert_eq!(*f, !0, "no free slot below the search start");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_free_slot_comes_first() {
        // Goal: slots are handed out lowest first, a slot given back is the next one handed
        // out, the tail past slot_count is never returned, and the summary level stays exact
        // across word and summary-word boundaries.
        for count in [1u32, 63, 64, 65, 4095, 4096, 4097, 10_000] {
            let mut f = FreeSlots::new(count);
            for s in 0..count {
                assert_eq!(f.lowest(), Some(s));
                f.take(s);
            }
            assert_eq!(f.lowest(), None, "{count} slots all taken");
            assert_eq!(f.free_count(), 0);
            f.check_invariants();
            let mut back = vec![count - 1, count / 2, 0];
            back.dedup();
            for &s in &back {
                f.give(s);
                assert!(f.is_free(s));
                f.check_invariants();
            }
            back.sort_unstable();
            for &s in &back {
                assert_eq!(f.lowest(), Some(s), "given back, handed out lowest first");
                f.take(s);
            }
            assert_eq!(f.lowest(), None);
            f.check_invariants();
        }
    }
}
