//! Erasure coding of one stripe (docs/design.md, "Erasure-coded pools"): an object of
//! `object_size` bytes is cut into `k` data chunks of `object_size / k` bytes, and `m` parity
//! chunks are computed from them with `reed-solomon-simd`; any `k` of the `k + m` chunks give
//! the object back. Chunk `i < k` is bytes `[i·c, (i+1)·c)` of the object; chunk `k + j` is
//! parity `j`. Pure functions: where the chunks live is the OSD's business.

use thiserror::Error;

pub mod decide;
pub mod unfound;

/// Tiny deterministic generator for the model tests (no dependency for a test).
#[cfg(test)]
pub(crate) struct TestRng(pub(crate) u64);

#[cfg(test)]
impl TestRng {
    /// The next value, below `n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Largest number of data chunks a pool may use.
pub const MAX_K: u8 = 16;
/// Largest number of parity chunks a pool may use.
pub const MAX_M: u8 = 4;
/// Chunks are whole 4 KiB blocks (the store checksums blocks; the codec needs even sizes).
pub const CHUNK_ALIGN: u32 = 4096;

/// What went wrong coding a stripe.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EcError {
    /// The scheme is outside what Basalt supports.
    #[error("unsupported erasure code {k}+{m}: k must be 2..={MAX_K} and m 1..={MAX_M}")]
    Unsupported { k: u32, m: u32 },
    /// A scheme written as text could not be read.
    #[error("\"{text}\" is not an erasure code; write K+M, e.g. 4+2")]
    Syntax { text: String },
    /// The object size does not split into k chunks of whole 4 KiB blocks.
    #[error(
        "an object of {object_size} bytes does not split into {k} chunks of whole 4 KiB blocks \
         (the object size must be a multiple of {})",
        *k as u64 * CHUNK_ALIGN as u64
    )]
    ObjectSize { object_size: u32, k: u32 },
    /// Fewer than k chunks are available: the stripe cannot be decoded.
    #[error("only {have} of the {need} chunks needed to decode the stripe are available")]
    TooFewChunks { have: usize, need: usize },
    /// A chunk or the data has the wrong length, or the chunk list the wrong count.
    #[error("{what}")]
    Shape { what: String },
}

/// An erasure code `k + m`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    k: u8,
    m: u8,
}

impl Scheme {
    /// The code with `k` data and `m` parity chunks, if Basalt supports it.
    pub fn new(k: u32, m: u32) -> Result<Scheme, EcError> {
        if !(2..=MAX_K as u32).contains(&k) || !(1..=MAX_M as u32).contains(&m) {
            return Err(EcError::Unsupported { k, m });
        }
        Ok(Scheme {
            k: k as u8,
            m: m as u8,
        })
    }

    /// Read `K+M` (as `basalt pool create --ec 4+2` takes it).
    pub fn parse(text: &str) -> Result<Scheme, EcError> {
        let syntax = || EcError::Syntax {
            text: text.to_string(),
        };
        let (k, m) = text.trim().split_once('+').ok_or_else(syntax)?;
        let k: u32 = k.trim().parse().map_err(|_| syntax())?;
        let m: u32 = m.trim().parse().map_err(|_| syntax())?;
        Scheme::new(k, m)
    }

    /// Data chunks per stripe.
    pub fn k(&self) -> usize {
        self.k as usize
    }

    /// Parity chunks per stripe.
    pub fn m(&self) -> usize {
        self.m as usize
    }

    /// Chunks per stripe: the members of a PG.
    pub fn width(&self) -> usize {
        self.k() + self.m()
    }

    /// Bytes of each chunk of an object of `object_size` bytes.
    pub fn chunk_bytes(&self, object_size: u32) -> Result<u32, EcError> {
        let k = self.k as u32;
        if object_size == 0 || !object_size.is_multiple_of(k * CHUNK_ALIGN) {
            return Err(EcError::ObjectSize { object_size, k });
        }
        Ok(object_size / k)
    }

    /// The `k + m` chunks of `object` (its length must be a valid object size).
    pub fn encode(&self, object: &[u8]) -> Result<Vec<Vec<u8>>, EcError> {
        let c = self.chunk_bytes(u32::try_from(object.len()).map_err(|_| EcError::Shape {
            what: format!("an object of {} bytes is too large", object.len()),
        })?)? as usize;
        let data = object.chunks(c);
        let parity = reed_solomon_simd::encode(self.k(), self.m(), data).map_err(codec)?;
        let mut chunks: Vec<Vec<u8>> = object.chunks(c).map(<[u8]>::to_vec).collect();
        chunks.extend(parity);
        Ok(chunks)
    }

    /// The object back from its chunks: `chunks[i]` is chunk `i` when available. Needs any
    /// `k` of them, all of one length.
    pub fn decode(&self, chunks: &[Option<&[u8]>]) -> Result<Vec<u8>, EcError> {
        let data = self.data_chunks(chunks)?;
        let c = data.first().map_or(0, Vec::len);
        let mut object = Vec::with_capacity(c * self.k());
        for chunk in data {
            object.extend_from_slice(&chunk);
        }
        Ok(object)
    }

    /// Chunk `index` (data or parity) rebuilt from the available ones, as recovery writes
    /// it to a replacement OSD.
    pub fn reconstruct(&self, chunks: &[Option<&[u8]>], index: usize) -> Result<Vec<u8>, EcError> {
        if index >= self.width() {
            return Err(EcError::Shape {
                what: format!("chunk {index} of a {}+{} stripe", self.k, self.m),
            });
        }
        if let Some(Some(chunk)) = chunks.get(index) {
            self.check_shape(chunks)?;
            return Ok(chunk.to_vec());
        }
        let data = self.data_chunks(chunks)?;
        if index < self.k() {
            return Ok(data[index].clone());
        }
        let parity = reed_solomon_simd::encode(self.k(), self.m(), &data).map_err(codec)?;
        Ok(parity[index - self.k()].clone())
    }

    /// What the m parity chunks change by when data chunk i changes by `deltas[i]` (new ⊕
    /// old; None: unchanged), all over one range of the chunks. The code is linear and each
    /// 64-byte piece of parity depends only on the same piece of every data chunk, so a
    /// partial write's new parity over a 4 KiB-aligned range is old parity ⊕ this
    /// (docs/design.md, "Partial-stripe writes").
    pub fn parity_delta(&self, deltas: &[Option<&[u8]>]) -> Result<Vec<Vec<u8>>, EcError> {
        let shape = |what: String| EcError::Shape { what };
        if deltas.len() != self.k() {
            return Err(shape(format!(
                "{} deltas for {} data chunks",
                deltas.len(),
                self.k
            )));
        }
        let len = deltas.iter().flatten().map(|d| d.len()).max().unwrap_or(0);
        if len == 0 || !len.is_multiple_of(64) || deltas.iter().flatten().any(|d| d.len() != len) {
            return Err(shape(format!(
                "deltas of {len} bytes (one length, a multiple of 64)"
            )));
        }
        let zeros = vec![0u8; len];
        let shards = deltas.iter().map(|d| d.unwrap_or(&zeros));
        reed_solomon_simd::encode(self.k(), self.m(), shards).map_err(codec)
    }

    /// Every data chunk, decoding the missing ones.
    fn data_chunks(&self, chunks: &[Option<&[u8]>]) -> Result<Vec<Vec<u8>>, EcError> {
        let c = self.check_shape(chunks)?;
        let have = chunks.iter().filter(|c| c.is_some()).count();
        if have < self.k() {
            return Err(EcError::TooFewChunks {
                have,
                need: self.k(),
            });
        }
        let missing: Vec<usize> = (0..self.k()).filter(|&i| chunks[i].is_none()).collect();
        let mut data: Vec<Vec<u8>> = chunks[..self.k()]
            .iter()
            .map(|c| c.map(<[u8]>::to_vec).unwrap_or_default())
            .collect();
        if missing.is_empty() {
            return Ok(data);
        }
        let originals = (0..self.k()).filter_map(|i| chunks[i].map(|c| (i, c)));
        let recovery = (0..self.m()).filter_map(|j| chunks[self.k() + j].map(|c| (j, c)));
        let restored =
            reed_solomon_simd::decode(self.k(), self.m(), originals, recovery).map_err(codec)?;
        for i in missing {
            let chunk = restored.get(&i).ok_or_else(|| EcError::Shape {
                what: format!("the decoder did not restore chunk {i}"),
            })?;
            if chunk.len() != c {
                return Err(EcError::Shape {
                    what: format!("restored chunk {i} has {} bytes, not {c}", chunk.len()),
                });
            }
            data[i] = chunk.clone();
        }
        Ok(data)
    }

    /// The common length of the available chunks (checked), given `width` slots.
    fn check_shape(&self, chunks: &[Option<&[u8]>]) -> Result<usize, EcError> {
        if chunks.len() != self.width() {
            return Err(EcError::Shape {
                what: format!(
                    "{} chunk slots given for a {}+{} stripe",
                    chunks.len(),
                    self.k,
                    self.m
                ),
            });
        }
        let mut len = None;
        for chunk in chunks.iter().flatten() {
            match len {
                None => len = Some(chunk.len()),
                Some(l) if l != chunk.len() => {
                    return Err(EcError::Shape {
                        what: format!("chunks of {l} and {} bytes in one stripe", chunk.len()),
                    })
                }
                Some(_) => {}
            }
        }
        let len = len.unwrap_or(0);
        if len == 0 || !len.is_multiple_of(2) {
            return Err(EcError::Shape {
                what: format!("chunks of {len} bytes (must be even and not empty)"),
            });
        }
        Ok(len)
    }
}

/// `dst ^= src`, byte by byte (a delta, or a delta applied). Panics on unequal lengths.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "xor of unequal lengths");
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= s;
    }
}

fn codec(e: reed_solomon_simd::Error) -> EcError {
    EcError::Shape {
        what: format!("reed-solomon: {e}"),
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}+{}", self.k, self.m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn object(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn schemes_parse_and_refuse() {
        // Goal: K+M reads as users write it; unsupported or malformed schemes say why.
        assert_eq!(Scheme::parse("4+2").unwrap(), Scheme::new(4, 2).unwrap());
        assert_eq!(Scheme::parse(" 8 + 3 ").unwrap().to_string(), "8+3");
        assert_eq!(Scheme::parse("16+4").unwrap().width(), 20);
        for bad in ["1+1", "17+1", "4+0", "4+5"] {
            let e = Scheme::parse(bad).unwrap_err();
            assert!(matches!(e, EcError::Unsupported { .. }), "{bad}: {e}");
        }
        for bad in ["4", "4-2", "a+b", "+2", ""] {
            let e = Scheme::parse(bad).unwrap_err().to_string();
            assert!(e.contains("write K+M"), "{bad}: {e}");
        }
        let s = Scheme::new(3, 1).unwrap();
        assert_eq!(s.chunk_bytes(3 * 4096 * 8).unwrap(), 4096 * 8);
        let e = s.chunk_bytes(128 << 10).unwrap_err().to_string();
        assert!(e.contains("multiple of 12288"), "{e}");
    }

    #[test]
    fn too_many_erasures_are_refused_not_guessed() {
        // Goal: with fewer than k chunks the codec fails instead of returning made-up data.
        let s = Scheme::new(4, 2).unwrap();
        let obj = object(4 * 4096, 7);
        let chunks = s.encode(&obj).unwrap();
        let mut avail: Vec<Option<&[u8]>> = chunks.iter().map(|c| Some(&c[..])).collect();
        avail[0] = None;
        avail[2] = None;
        avail[5] = None;
        assert_eq!(
            s.decode(&avail).unwrap_err(),
            EcError::TooFewChunks { have: 3, need: 4 }
        );
        let short = &chunks[1][..4094];
        avail[0] = Some(short);
        assert!(matches!(s.decode(&avail), Err(EcError::Shape { .. })));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Goal: for every supported k+m, any m (or fewer) lost chunks still decode to the
        /// exact object, and every lost chunk, data or parity, is rebuilt byte for byte.
        #[test]
        fn any_m_erasures_decode(
            k in 2u32..=16,
            m in 1u32..=4,
            blocks in 1usize..=3,
            seed in any::<u64>(),
            lost_mask in any::<u32>(),
        ) {
            let s = Scheme::new(k, m).unwrap();
            let obj = object(k as usize * blocks * 4096, seed);
            let chunks = s.encode(&obj).unwrap();
            prop_assert_eq!(chunks.len(), s.width());
            // Choose at most m chunks to lose from the mask.
            let mut lost = Vec::new();
            for i in 0..s.width() {
                if lost_mask & (1 << i) != 0 && lost.len() < s.m() {
                    lost.push(i);
                }
            }
            let avail: Vec<Option<&[u8]>> = (0..s.width())
                .map(|i| (!lost.contains(&i)).then(|| &chunks[i][..]))
                .collect();
            prop_assert_eq!(&s.decode(&avail).unwrap(), &obj);
            for &i in &lost {
                prop_assert_eq!(&s.reconstruct(&avail, i).unwrap(), &chunks[i]);
            }
        }

        /// Goal: a partial write's parity computed from deltas alone — old parity ⊕ the
        /// parity delta over the smallest block range covering what changed in every data
        /// chunk — equals the parity of the new object encoded whole, inside that range and
        /// outside it (where it must be unchanged), for every supported k+m.
        #[test]
        fn parity_from_deltas_matches_a_whole_encode(
            k in 2u32..=16,
            m in 1u32..=4,
            seed in any::<u64>(),
            first in 0usize..64,
            len in 1usize..=6,
        ) {
            let s = Scheme::new(k, m).unwrap();
            let (blocks, b) = (4usize, 4096usize);
            let c = blocks * b;
            let old = object(k as usize * c, seed);
            let first = first % (k as usize * blocks);
            let end = (first + len).min(k as usize * blocks);
            let mut new = old.clone();
            new[first * b..end * b].copy_from_slice(&object((end - first) * b, seed ^ 0x55));
            let hull = (first..end).map(|x| x % blocks).fold((blocks, 0), |(lo, hi), x| {
                (lo.min(x), hi.max(x + 1))
            });
            let range = hull.0 * b..hull.1 * b;
            let deltas: Vec<Option<Vec<u8>>> = (0..k as usize)
                .map(|i| {
                    let touched = (first..end).any(|x| x / blocks == i);
                    touched.then(|| {
                        let mut d = new[i * c..(i + 1) * c][range.clone()].to_vec();
                        xor_into(&mut d, &old[i * c..(i + 1) * c][range.clone()]);
                        d
                    })
                })
                .collect();
            let refs: Vec<Option<&[u8]>> = deltas.iter().map(|d| d.as_deref()).collect();
            let delta = s.parity_delta(&refs).unwrap();
            let (before, after) = (s.encode(&old).unwrap(), s.encode(&new).unwrap());
            for j in 0..m as usize {
                let mut parity = before[k as usize + j].clone();
                xor_into(&mut parity[range.clone()], &delta[j]);
                prop_assert!(parity == after[k as usize + j], "parity {} of {}+{}", j, k, m);
            }
        }
    }
}
