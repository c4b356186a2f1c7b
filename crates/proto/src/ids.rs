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

/// Bits of an object index that name an erasure-coded chunk in a store key: bits 56..=60
/// hold the chunk's position + 1 (0: not a chunk), bit 61 marks a *stash* (a chunk written
/// but not yet committed), bit 62 with it a *partial* stash (only the blocks a partial
/// write changes). Stripe (volume object) indexes keep these bits clear; see
/// docs/design.md, "Erasure-coded pools".
pub const CHUNK_KEY_BITS: u64 = 0x7f << 56;
const POSITION_SHIFT: u32 = 56;
const STASH_BIT: u64 = 1 << 61;
const PARTIAL_BIT: u64 = 1 << 62;
/// Most positions a stripe may have (k + m), as the position field can name.
pub const MAX_CHUNK_POSITIONS: usize = 31;

impl ObjectId {
    /// Can this object be a stripe of an erasure-coded pool (no chunk bits in its index)?
    pub const fn is_stripe(self) -> bool {
        self.index & CHUNK_KEY_BITS == 0
    }

    /// The store key of chunk `position` of this stripe (committed, or its stash).
    pub const fn chunk(self, position: usize, stash: bool) -> ObjectId {
        let stash = if stash { STASH_BIT } else { 0 };
        ObjectId {
            inode: self.inode,
            index: (self.index & !CHUNK_KEY_BITS)
                | ((position as u64 + 1) << POSITION_SHIFT)
                | stash,
        }
    }

    /// The store key of the partial stash of chunk `position` of this stripe.
    pub const fn partial_stash(self, position: usize) -> ObjectId {
        let key = self.chunk(position, true);
        ObjectId {
            inode: key.inode,
            index: key.index | PARTIAL_BIT,
        }
    }

    /// Is this the key of a partial stash?
    pub const fn is_partial_stash(self) -> bool {
        self.chunk_position().is_some() && self.index & PARTIAL_BIT != 0
    }

    /// The stripe this key belongs to (itself when it is not a chunk key).
    pub const fn stripe(self) -> ObjectId {
        ObjectId {
            inode: self.inode,
            index: self.index & !CHUNK_KEY_BITS,
        }
    }

    /// For a chunk key: its position and whether it is a stash (whole or partial).
    pub const fn chunk_position(self) -> Option<(usize, bool)> {
        let field = (self.index >> POSITION_SHIFT) & 0x1f;
        if field == 0 {
            return None;
        }
        Some(((field - 1) as usize, self.index & STASH_BIT != 0))
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:x}:{:x}", self.inode, self.index)
    }
}

/// An erasure code of a pool: each stripe is `k` data chunks plus `m` parity chunks, one
/// per position of its PG (limits and coding: the `basalt-ec` crate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct EcProfile {
    pub k: u32,
    pub m: u32,
}

impl fmt::Display for EcProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
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

impl std::str::FromStr for PgId {
    type Err = String;

    /// `POOL.INDEX` as [`PgId`]'s `Display` writes it (pool in decimal, index in hex), as
    /// `basalt status` and `basalt pg ls` show PGs.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("\"{text}\" is not a PG; write POOL.INDEX as `basalt pg ls` shows it");
        let (pool, index) = text.split_once('.').ok_or_else(bad)?;
        Ok(PgId {
            pool: pool.parse().map_err(|_| bad())?,
            index: u32::from_str_radix(index, 16).map_err(|_| bad())?,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a PG written as status shows it parses back; anything else is refused.
    #[test]
    fn pg_ids_parse_as_displayed() {
        let pg = PgId {
            pool: 3,
            index: 0x1f,
        };
        assert_eq!(pg.to_string().parse::<PgId>(), Ok(pg));
        for bad in [
            "",
            "3",
            "3.",
            ".1",
            "x.1",
            "3.g",
            "3.1.1",
            "-1.0",
            "3.100000000",
        ] {
            assert!(bad.parse::<PgId>().is_err(), "{bad}");
        }
    }

    /// Goal: chunk keys of one stripe are distinct per position and stash flag, and map
    /// back to the stripe; S3 table indexes (bit 63) and large volume indexes survive.
    #[test]
    fn chunk_keys_round_trip() {
        for index in [0, 1, (1 << 56) - 1, 1 << 63 | 5 << 32 | 7] {
            let stripe = ObjectId::new(make_inode(3, 9, 1), index);
            assert!(stripe.is_stripe());
            assert_eq!(stripe.chunk_position(), None);
            let mut seen = std::collections::BTreeSet::new();
            for pos in 0..MAX_CHUNK_POSITIONS {
                for stash in [false, true] {
                    let key = stripe.chunk(pos, stash);
                    assert!(!key.is_stripe());
                    assert_eq!(key.stripe(), stripe);
                    assert_eq!(key.chunk_position(), Some((pos, stash)));
                    assert!(!key.is_partial_stash());
                    assert!(seen.insert(key));
                }
                let partial = stripe.partial_stash(pos);
                assert!(!partial.is_stripe() && partial.is_partial_stash());
                assert_eq!(partial.stripe(), stripe);
                assert_eq!(partial.chunk_position(), Some((pos, true)));
                assert!(seen.insert(partial));
                assert_eq!(partial.chunk(pos, false), stripe.chunk(pos, false));
            }
            assert!(!stripe.is_partial_stash());
        }
    }
}
