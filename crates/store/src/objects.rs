//! The object table: which slot holds each object, and its version, in 36 bytes per object
//! plus the hash table's slack (docs/design.md, "Memory").
//!
//! Per slot, a packed record `[inode, index, epoch, counter]` (32 bytes, meaningful while an
//! object holds the slot); per object, one `u32` in an open-addressing hash table keyed by
//! object id (Robin Hood linear probing, deletion by backward shift, so no tombstones). An
//! entry holds `slot + 1`; 0 is empty. Both arrays are mappings of zeros, so slots never
//! used cost no resident memory, and a hash array replaced by a larger one goes back to the
//! kernel.

use crate::zeroed::ZeroedArray;
use basalt_proto::{ObjectId, Version};

/// Smallest hash table (entries).
const MIN_CAPACITY: usize = 16;
/// The table doubles before it would pass 3/4 full: Robin Hood probing then averages about
/// 2.5 entries per lookup and ends a miss early, and memory per object stays within
/// 4 B / (3/8) ≈ 10.7 B just after a doubling (5.3 B just before one).
const MAX_LOAD_NUM: usize = 3;
const MAX_LOAD_DEN: usize = 4;

/// Object id → slot and version. Not synchronized: the index owns it.
pub(crate) struct ObjectTable {
    /// Per slot: inode, index, epoch, counter of the object in it.
    records: ZeroedArray<[u64; 4]>,
    /// Open addressing: `slot + 1` per entry, 0 for empty; length a power of two.
    entries: ZeroedArray<u32>,
    /// `64 - log2(entries.len())`: a hash's home entry is its top bits.
    shift: u32,
    len: usize,
}

impl ObjectTable {
    /// An empty table for objects in `slot_count` slots.
    pub fn new(slot_count: u32) -> ObjectTable {
        ObjectTable {
            records: ZeroedArray::new(slot_count as usize),
            entries: ZeroedArray::new(MIN_CAPACITY),
            shift: 64 - MIN_CAPACITY.trailing_zeros(),
            len: 0,
        }
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The slot holding `obj`, if any.
    pub fn find(&self, obj: ObjectId) -> Option<u32> {
        self.position(obj).map(|i| self.entries[i] - 1)
    }

    /// The object in `slot` and its version (meaningful only if an object holds the slot).
    pub fn record(&self, slot: u32) -> (ObjectId, Version) {
        let [inode, index, epoch, counter] = self.records[slot as usize];
        (ObjectId::new(inode, index), Version::new(epoch, counter))
    }

    /// Set the version of the object in `slot`.
    pub fn set_version(&mut self, slot: u32, version: Version) {
        let r = &mut self.records[slot as usize];
        r[2] = version.epoch;
        r[3] = version.counter;
    }

    /// Add `obj` (absent) in `slot` (holding no object) at `version`.
    pub fn insert(&mut self, obj: ObjectId, slot: u32, version: Version) {
        debug_assert!(self.find(obj).is_none(), "object {obj} inserted twice");
        if (self.len + 1) * MAX_LOAD_DEN > self.entries.len() * MAX_LOAD_NUM {
            self.grow();
        }
        self.records[slot as usize] = [obj.inode, obj.index, version.epoch, version.counter];
        self.place(slot + 1);
        self.len += 1;
    }

    /// Remove `obj`; returns its slot.
    pub fn remove(&mut self, obj: ObjectId) -> Option<u32> {
        let mut i = self.position(obj)?;
        let slot = self.entries[i] - 1;
        // Backward shift: pull every following displaced entry one step toward home.
        let mask = self.mask();
        // Bound: the table always has an empty entry (load <= 3/4).
        loop {
            let next = (i + 1) & mask;
            let e = self.entries[next];
            if e == 0 || self.displacement(next, e) == 0 {
                break;
            }
            self.entries[i] = e;
            i = next;
        }
        self.entries[i] = 0;
        self.len -= 1;
        Some(slot)
    }

    /// Every object's slot, in table order.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries.iter().filter(|&&e| e != 0).map(|&e| e - 1)
    }

    /// Check that every entry is found from its home, that Robin Hood order holds (each
    /// entry is displaced at most one more than the one before it), and the count
    /// (O(table)).
    pub fn check_invariants(&self) {
        let mask = self.mask();
        let mut count = 0;
        for (i, &e) in self.entries.iter().enumerate() {
            if e == 0 {
                continue;
            }
            count += 1;
            let (obj, _) = self.record(e - 1);
            assert_eq!(self.find(obj), Some(e - 1), "entry {i} is found by its key");
            let prev = self.entries[(i + mask) & mask];
            let prev_d = if prev == 0 {
                0
            } else {
                self.displacement((i + mask) & mask, prev) + 1
            };
            assert!(
                self.displacement(i, e) <= prev_d,
                "entry {i} is displaced past an emptier run"
            );
        }
        assert_eq!(count, self.len, "object count");
        assert!(self.len * MAX_LOAD_DEN <= self.entries.len() * MAX_LOAD_NUM);
    }

    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    fn home(&self, obj: ObjectId) -> usize {
        (hash(obj) >> self.shift) as usize
    }

    /// How far entry `i` (holding `e`) sits from its home.
    fn displacement(&self, i: usize, e: u32) -> usize {
        let (obj, _) = self.record(e - 1);
        i.wrapping_sub(self.home(obj)) & self.mask()
    }

    /// The entry holding `obj`, if any.
    fn position(&self, obj: ObjectId) -> Option<usize> {
        let mask = self.mask();
        let mut i = self.home(obj);
        // Bound: a Robin Hood miss ends once the probe is farther from home than the entry
        // it meets; the table always has an empty entry.
        for d in 0..self.entries.len() {
            let e = self.entries[i];
            if e == 0 {
                return None;
            }
            let (key, _) = self.record(e - 1);
            if key == obj {
                return Some(i);
            }
            if self.displacement(i, e) < d {
                return None;
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Put entry `e` (its record written) where Robin Hood order wants it.
    fn place(&mut self, mut e: u32) {
        let mask = self.mask();
        let (obj, _) = self.record(e - 1);
        let mut i = self.home(obj);
        let mut d = 0;
        // Bound: the table always has an empty entry.
        for _ in 0..self.entries.len() {
            let here = self.entries[i];
            if here == 0 {
                self.entries[i] = e;
                return;
            }
            let here_d = self.displacement(i, here);
            if here_d < d {
                // Take from the rich: the entry nearer its home moves on.
                self.entries[i] = e;
                e = here;
                d = here_d;
            }
            i = (i + 1) & mask;
            d += 1;
        }
        unreachable!("a table at most 3/4 full has an empty entry");
    }

    /// Double the hash table and place every entry again.
    fn grow(&mut self) {
        let doubled = ZeroedArray::new(self.entries.len() * 2);
        let old = std::mem::replace(&mut self.entries, doubled);
        self.shift -= 1;
        for &e in old.iter().filter(|&&e| e != 0) {
            self.place(e);
        }
    }
}

/// A hash of an object id whose top bits are well mixed (murmur3's 64-bit finalizer over
/// both halves). Keys come from the cluster's own naming, not from an adversary.
fn hash(obj: ObjectId) -> u64 {
    let mut h = obj
        .inode
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .rotate_left(31)
        ^ obj.index;
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn the_table_matches_a_map_through_inserts_removes_and_growth() {
        // Goal: lookups, versions and removals agree with a HashMap over a random sequence
        // that grows the table many times and removes half of what it holds, and the Robin
        // Hood invariants hold throughout.
        const SLOTS: u32 = 5000;
        let mut t = ObjectTable::new(SLOTS);
        let mut model: HashMap<ObjectId, u32> = HashMap::new();
        let mut free: Vec<u32> = (0..SLOTS).rev().collect();
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for step in 0..40_000u64 {
            let obj = ObjectId::new(next() % 4, next() % 3000);
            match (model.get(&obj).copied(), next() % 3) {
                (Some(slot), 0) => {
                    assert_eq!(t.remove(obj), Some(slot));
                    model.remove(&obj);
                    free.push(slot);
                }
                (Some(slot), _) => {
                    t.set_version(slot, Version::new(2, step));
                    assert_eq!(t.record(slot), (obj, Version::new(2, step)));
                }
                (None, _) => {
                    let Some(slot) = free.pop() else { continue };
                    t.insert(obj, slot, Version::new(1, step));
                    model.insert(obj, slot);
                }
            }
            assert_eq!(t.find(obj), model.get(&obj).copied());
            if step % 5000 == 0 {
                t.check_invariants();
            }
        }
        t.check_invariants();
        assert_eq!(t.len(), model.len());
        for (&obj, &slot) in &model {
            assert_eq!(t.find(obj), Some(slot));
        }
        let mut slots: Vec<u32> = t.slots().collect();
        slots.sort_unstable();
        let mut want: Vec<u32> = model.values().copied().collect();
        want.sort_unstable();
        assert_eq!(slots, want);
        assert_eq!(t.remove(ObjectId::new(99, 99)), None);
    }

    #[test]
    fn a_million_objects_cost_a_table_of_two_million_entries() {
        // Goal: the table grows by doubling at 3/4 full, so a million objects sit in 2^21
        // entries (8 MiB: 8.4 B per object) beside their 32-byte records.
        let mut t = ObjectTable::new(1_000_000);
        for i in 0..1_000_000u32 {
            t.insert(ObjectId::new(3, i as u64), i, Version::new(1, 1));
        }
        assert_eq!(t.entries.len(), 1 << 21);
        assert_eq!(t.find(ObjectId::new(3, 999_999)), Some(999_999));
        assert_eq!(t.find(ObjectId::new(3, 1_000_000)), None);
    }
}
