//! Shared by the integration tests: scratch directories, deterministic content, and the
//! reference model of a store (a map of byte arrays with allocation bits).
#![allow(dead_code)]

use basalt_proto::{ObjectId, Version};
use basalt_store::{Store, StoreOptions, BLOCK_BYTES};
use std::collections::BTreeMap;
use std::path::Path;

pub const BLOCK: usize = BLOCK_BYTES as usize;

/// A scratch directory, on tmpfs when there is one (fsync there is nearly free).
pub fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).expect("tempdir in /dev/shm")
    } else {
        tempfile::tempdir().expect("tempdir")
    }
}

/// Options for a small store: a 4 MiB WAL and room for about `slots` objects.
pub fn small_opts(object_size: u32, slots: u64) -> StoreOptions {
    let entry_bytes = 64 + 4 * (object_size as u64 / 4096) + 128;
    StoreOptions {
        capacity_bytes: 4096
            + (4 << 20)
            + slots * (object_size as u64 + 2 * entry_bytes)
            + (64 << 10),
        object_size_bytes: object_size,
        wal_bytes: 4 << 20,
    }
}

/// splitmix64: a good 64-bit mix for deterministic test content.
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic random source.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        mix(self.0)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Content that write `tag` puts at object byte `offset + i`: every byte differs by write
/// and by position, so a block's bytes tell which write they came from.
pub fn content(tag: u64, offset: usize, len: usize) -> Vec<u8> {
    (offset..offset + len)
        .map(|p| (mix(tag ^ ((p as u64 / 8) << 24)) >> ((p % 8) * 8)) as u8)
        .collect()
}

/// One object of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelObject {
    pub data: Vec<u8>,
    pub alloc: Vec<bool>,
    pub version: Version,
}

/// What a store should hold: objects as plain byte arrays.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub object_size: usize,
    pub objects: BTreeMap<ObjectId, ModelObject>,
}

impl Model {
    pub fn new(object_size: u32) -> Model {
        Model {
            object_size: object_size as usize,
            objects: BTreeMap::new(),
        }
    }

    pub fn write(&mut self, obj: ObjectId, offset: usize, data: &[u8], version: Version) {
        if data.is_empty() {
            return;
        }
        let size = self.object_size;
        let o = self.objects.entry(obj).or_insert_with(|| ModelObject {
            data: vec![0; size],
            alloc: vec![false; size / BLOCK],
            version,
        });
        o.data[offset..offset + data.len()].copy_from_slice(data);
        for b in offset / BLOCK..=(offset + data.len() - 1) / BLOCK {
            o.alloc[b] = true;
        }
        o.version = version;
    }

    pub fn trim(&mut self, obj: ObjectId, offset: usize, len: usize, version: Version) {
        let Some(o) = self.objects.get_mut(&obj) else {
            return;
        };
        if len == 0 {
            return;
        }
        let end = offset + len;
        for b in offset / BLOCK..=(end - 1) / BLOCK {
            let (lo, hi) = (offset.max(b * BLOCK), end.min((b + 1) * BLOCK));
            if hi - lo == BLOCK {
                o.alloc[b] = false;
                o.data[lo..hi].fill(0);
            } else if o.alloc[b] {
                o.data[lo..hi].fill(0);
            }
        }
        o.version = version;
        if o.alloc.iter().all(|a| !a) {
            self.objects.remove(&obj);
        }
    }

    pub fn delete(&mut self, obj: ObjectId) {
        self.objects.remove(&obj);
    }

    /// `from` becomes `to` (replacing it) when `from` exists; else nothing changes.
    pub fn promote(&mut self, from: ObjectId, to: ObjectId) {
        if let Some(o) = self.objects.remove(&from) {
            self.objects.insert(to, o);
        }
    }

    /// `Store::merge`: blocks `from_block..from_block + n` of `from` land in `to` at
    /// `to_block` (allocated), `to` takes `from`'s version and `from` goes. Returns whether
    /// it merged (`from` present); the caller checks `to` exists when `from` does.
    pub fn merge(
        &mut self,
        from: ObjectId,
        from_block: usize,
        to: ObjectId,
        to_block: usize,
        n: usize,
    ) -> bool {
        let Some(f) = self.objects.get(&from) else {
            return false;
        };
        let (data, version) = (
            f.data[from_block * BLOCK..(from_block + n) * BLOCK].to_vec(),
            f.version,
        );
        let t = self
            .objects
            .get_mut(&to)
            .expect("merge into an existing object");
        t.data[to_block * BLOCK..(to_block + n) * BLOCK].copy_from_slice(&data);
        t.alloc[to_block..to_block + n].fill(true);
        t.version = version;
        self.objects.remove(&from);
        true
    }

    /// Block `b` of `obj`: its bytes and whether it is allocated (zeros and false if absent).
    pub fn block(&self, obj: ObjectId, b: usize) -> (&[u8], bool) {
        static ZERO: [u8; BLOCK] = [0; BLOCK];
        match self.objects.get(&obj) {
            Some(o) => (&o.data[b * BLOCK..(b + 1) * BLOCK], o.alloc[b]),
            None => (&ZERO, false),
        }
    }

    pub fn version(&self, obj: ObjectId) -> Option<Version> {
        self.objects.get(&obj).map(|o| o.version)
    }

    /// The model of what `store` holds now (read back completely).
    pub fn read_from(store: &Store) -> Model {
        let mut m = Model::new(store.object_size());
        for (obj, version) in store.objects() {
            let mut data = vec![0; m.object_size];
            store.read(obj, 0, &mut data).expect("read back object");
            m.objects.insert(
                obj,
                ModelObject {
                    data,
                    alloc: allocation_bits(store, obj),
                    version,
                },
            );
        }
        m
    }
}

/// The allocation bitmap of `obj` as one bool per block.
pub fn allocation_bits(store: &Store, obj: ObjectId) -> Vec<bool> {
    let words = store.allocation(obj).expect("allocation");
    let blocks = store.object_size() as usize / BLOCK;
    (0..blocks)
        .map(|b| words[b / 64] & (1 << (b % 64)) != 0)
        .collect()
}

/// Check that `store` holds exactly `model`, and that its stats agree.
pub fn assert_store_matches(store: &Store, model: &Model) {
    let actual = Model::read_from(store);
    for (obj, o) in &model.objects {
        let a = actual
            .objects
            .get(obj)
            .unwrap_or_else(|| panic!("object {obj} missing"));
        for b in 0..o.alloc.len() {
            assert_eq!(
                (&a.data[b * BLOCK..(b + 1) * BLOCK], a.alloc[b]),
                (&o.data[b * BLOCK..(b + 1) * BLOCK], o.alloc[b]),
                "object {obj} block {b}"
            );
        }
        assert_eq!(a.version, o.version, "version of {obj}");
    }
    let extra: Vec<_> = actual
        .objects
        .keys()
        .filter(|k| !model.objects.contains_key(k))
        .collect();
    assert!(extra.is_empty(), "unexpected objects {extra:?}");
    assert_stats_consistent(store);
}

/// Stats agree with the object list and allocation bitmaps; holes read as zeros.
pub fn assert_stats_consistent(store: &Store) {
    store.check_invariants();
    let stats = store.stats();
    let objects = store.objects();
    assert_eq!(stats.objects, objects.len() as u64);
    assert_eq!(stats.slots_total - stats.slots_free, stats.objects);
    let mut used = 0;
    let mut data = vec![0; store.object_size() as usize];
    // Per inode, as the walk finds it: (objects, allocated bytes).
    let mut by_inode: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for (obj, _) in &objects {
        let alloc = allocation_bits(store, *obj);
        let u = by_inode.entry(obj.inode).or_default();
        u.0 += 1;
        u.1 += alloc.iter().filter(|&&a| a).count() as u64 * BLOCK as u64;
        assert!(
            alloc.iter().any(|&a| a),
            "object {obj} exists without a block"
        );
        used += alloc.iter().filter(|&&a| a).count() as u64 * BLOCK as u64;
        store.read(*obj, 0, &mut data).expect("read");
        for (b, a) in alloc.iter().enumerate() {
            if !a {
                assert!(
                    data[b * BLOCK..(b + 1) * BLOCK].iter().all(|&x| x == 0),
                    "hole reads zero"
                );
            }
        }
    }
    assert_eq!(stats.used_bytes, used);
    // The store's usage counters agree with the walk (and an inode with nothing is zero).
    let inodes: Vec<u64> = by_inode.keys().copied().chain([u64::MAX]).collect();
    let counted = store.usage(&inodes);
    for (inode, got) in inodes.iter().zip(counted) {
        let want = by_inode.get(inode).copied().unwrap_or((0, 0));
        assert_eq!(got, want, "usage of inode {inode:#x}");
    }
}

/// Flip one bit of the file at `offset`.
pub fn flip_bit(path: &Path, offset: u64, bit: u8) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open");
    let mut b = [0u8];
    f.read_exact_at(&mut b, offset).expect("read byte");
    b[0] ^= 1 << bit;
    f.write_all_at(&b, offset).expect("write byte");
}

/// Version helper.
pub fn ver(epoch: u64, counter: u64) -> Version {
    Version::new(epoch, counter)
}
