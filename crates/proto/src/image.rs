//! Encodings of the recovery payloads: whole-object images (PULL replies, PUSH requests) and
//! LIST entries. Little-endian throughout; decoders check every length and never panic.

use crate::frame::LIST_ENTRY_BYTES;
use crate::ids::{ObjectId, Version};
use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Bytes of one block of an object image (the store's block size).
pub const IMAGE_BLOCK_BYTES: usize = 4096;
/// Most blocks one object may have (4 MiB objects).
pub const IMAGE_MAX_BLOCKS: u32 = 1024;

/// A malformed image or list payload.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("object image too short ({len} bytes)")]
    Short { len: usize },
    #[error("object image has {blocks} blocks, more than {IMAGE_MAX_BLOCKS}")]
    TooManyBlocks { blocks: u32 },
    #[error("object image bitmap has bits past block {blocks}")]
    StrayBits { blocks: u32 },
    #[error("object image carries {found} data bytes, its bitmap says {expected}")]
    DataLength { expected: usize, found: usize },
    #[error("list payload of {len} bytes is not a whole number of entries")]
    ListLength { len: usize },
}

/// A whole object as it travels between OSDs: which blocks are allocated, and their data.
///
/// Layout: `blocks` u32, then `ceil(blocks / 64)` u64 bitmap words (block `b` = bit `b % 64`
/// of word `b / 64`), then the data of each allocated block in block order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectImage {
    pub blocks: u32,
    pub bitmap: Vec<u64>,
    /// The allocated blocks' data, concatenated in block order.
    pub data: Bytes,
}

impl ObjectImage {
    /// Is block `b` allocated?
    pub fn allocated(&self, b: u32) -> bool {
        let w = (b / 64) as usize;
        w < self.bitmap.len() && self.bitmap[w] & (1 << (b % 64)) != 0
    }

    /// Runs of allocated blocks as (first block, block count, byte offset into `data`).
    pub fn runs(&self) -> Vec<(u32, u32, usize)> {
        let mut runs = Vec::new();
        let mut data_off = 0usize;
        let mut b = 0;
        while b < self.blocks {
            if !self.allocated(b) {
                b += 1;
                continue;
            }
            let first = b;
            while b < self.blocks && self.allocated(b) {
                b += 1;
            }
            runs.push((first, b - first, data_off));
            data_off += (b - first) as usize * IMAGE_BLOCK_BYTES;
        }
        runs
    }

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(4 + self.bitmap.len() * 8 + self.data.len());
        out.put_u32_le(self.blocks);
        for w in &self.bitmap {
            out.put_u64_le(*w);
        }
        out.extend_from_slice(&self.data);
        out.freeze()
    }

    /// Decode and check an image: bitmap size, no stray bits, data length = allocated blocks.
    pub fn decode(payload: &Bytes) -> Result<Self, ImageError> {
        if payload.len() < 4 {
            return Err(ImageError::Short { len: payload.len() });
        }
        let blocks = u32::from_le_bytes(payload[0..4].try_into().expect("4 bytes"));
        if blocks > IMAGE_MAX_BLOCKS {
            return Err(ImageError::TooManyBlocks { blocks });
        }
        let words = blocks.div_ceil(64) as usize;
        let data_start = 4 + words * 8;
        if payload.len() < data_start {
            return Err(ImageError::Short { len: payload.len() });
        }
        let bitmap: Vec<u64> = (0..words)
            .map(|i| {
                let o = 4 + i * 8;
                u64::from_le_bytes(payload[o..o + 8].try_into().expect("8 bytes"))
            })
            .collect();
        if blocks % 64 != 0 {
            if let Some(last) = bitmap.last() {
                if last >> (blocks % 64) != 0 {
                    return Err(ImageError::StrayBits { blocks });
                }
            }
        }
        let allocated: usize = bitmap.iter().map(|w| w.count_ones() as usize).sum();
        let expected = allocated * IMAGE_BLOCK_BYTES;
        let found = payload.len() - data_start;
        if found != expected {
            return Err(ImageError::DataLength { expected, found });
        }
        Ok(Self {
            blocks,
            bitmap,
            data: payload.slice(data_start..),
        })
    }
}

/// Append one LIST entry.
pub fn put_list_entry(out: &mut BytesMut, obj: ObjectId, version: Version) {
    out.put_u64_le(obj.inode);
    out.put_u64_le(obj.index);
    out.put_u64_le(version.epoch);
    out.put_u64_le(version.counter);
}

/// Decode a LIST reply payload.
pub fn decode_list(payload: &[u8]) -> Result<Vec<(ObjectId, Version)>, ImageError> {
    if !payload.len().is_multiple_of(LIST_ENTRY_BYTES) {
        return Err(ImageError::ListLength { len: payload.len() });
    }
    let word = |e: &[u8], i: usize| u64::from_le_bytes(e[i * 8..i * 8 + 8].try_into().expect("8"));
    Ok(payload
        .chunks_exact(LIST_ENTRY_BYTES)
        .map(|e| {
            (
                ObjectId::new(word(e, 0), word(e, 1)),
                Version::new(word(e, 2), word(e, 3)),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Goal: any image survives encode → decode, and its runs cover exactly its data.
        #[test]
        fn image_roundtrip(blocks in 1u32..=1024, seed in any::<u64>()) {
            let words = blocks.div_ceil(64) as usize;
            let mut bitmap: Vec<u64> = (0..words as u64)
                .map(|i| seed.rotate_left(i as u32 * 7) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect();
            if blocks % 64 != 0 {
                *bitmap.last_mut().unwrap() &= (1u64 << (blocks % 64)) - 1;
            }
            let n: usize = bitmap.iter().map(|w| w.count_ones() as usize).sum();
            let data = Bytes::from(vec![0xa5u8; n * IMAGE_BLOCK_BYTES]);
            let img = ObjectImage { blocks, bitmap, data };
            let back = ObjectImage::decode(&img.encode()).unwrap();
            prop_assert_eq!(&back, &img);
            let covered: usize = back.runs().iter().map(|r| r.1 as usize).sum();
            prop_assert_eq!(covered, n);
        }

        /// Goal: arbitrary payloads never panic the decoders.
        #[test]
        fn garbage_never_panics(v in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = ObjectImage::decode(&Bytes::from(v.clone()));
            let _ = decode_list(&v);
        }
    }

    /// Goal: an image whose data does not match its bitmap is refused.
    #[test]
    fn short_data_refused() {
        let img = ObjectImage {
            blocks: 2,
            bitmap: vec![0b11],
            data: Bytes::from(vec![0u8; IMAGE_BLOCK_BYTES]),
        };
        assert!(matches!(
            ObjectImage::decode(&img.encode()),
            Err(ImageError::DataLength { .. })
        ));
    }
}
