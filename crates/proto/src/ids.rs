//! Identifiers shared by every Basalt component.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A volume (inode) number, unique in the cluster. 0 is never used.
///
/// Layout (so that an OSD can tell an object's pool and PG from its id alone): bits 63..48
/// pool id, bits 47..16 family number (shared by every layer of a clone family), bits 15..0
/// layer within the family. See [`make_inode`].
pub type InodeId = u64;

/// The inode of `layer` of family number `family` in `pool`.
pub const fn make_inode(pool: PoolId, family: u32, layer: u16) -> InodeId {
    ((pool as u64 & 0xffff) << 48) | ((family as u64) << 16) | layer as u64
}

/// The pool an inode's objects live in.
pub const fn inode_pool(inode: InodeId) -> PoolId {
    (inode >> 48) as PoolId
}

/// The family key of an inode (pool and family number): every layer of a clone family has
/// the same key, so every layer of an object index maps to the same PG.
pub const fn inode_family(inode: InodeId) -> u64 {
    inode >> 16
}
/// A pool number, unique in the cluster.
pub type PoolId = u32;
/// An OSD number, unique in the cluster.
pub type OsdId = u32;

/// One object of a volume: the `index`-th fixed-size piece of inode `inode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ObjectId {
    pub inode: InodeId,
    pub index: u64,
}

impl ObjectId {
    pub const fn new(inode: InodeId, index: u64) -> Self {
        Self { inode, index }
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}:{:x}", self.inode, self.index)
    }
}

/// A placement group of a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PgId {
    pub pool: PoolId,
    pub index: u32,
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool, self.index)
    }
}

/// The version of an object write: (epoch of the PG map under which the primary assigned it,
/// counter within that epoch). Ordered lexicographically, so a newer primary always wins.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
pub struct Version {
    pub epoch: u64,
    pub counter: u64,
}

impl Version {
    pub const ZERO: Version = Version {
        epoch: 0,
        counter: 0,
    };

    pub const fn new(epoch: u64, counter: u64) -> Self {
        Self { epoch, counter }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}'{}", self.epoch, self.counter)
    }
}
