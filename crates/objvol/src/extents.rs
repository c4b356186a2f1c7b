//! The extent map of an objvol: which object each run of data blocks comes from (start
//! block, size, key, ETag), in listing order — which is start-block order, so a block is
//! found by binary search. Written as objects are listed; stored beside the EROFS index.
//!
//! Format (version 2, little-endian): a 32-byte header — magic `BSLTXMAP`, version u32,
//! record count u64, heap bytes u64, crc32c u32 of everything after the header — then the
//! records (24 bytes: start block u32, key length u16, ETag length u8, ETag encoding u8,
//! size u64, heap offset u64), then the heap (each key followed by its ETag). ETag
//! encodings: 0 the ETag's text as S3 gave it; 1 a plain MD5 ETag (`"` 32 lowercase hex
//! digits `"`) as its 16 bytes; 2 a multipart one (`"` 32 hex `-N"`) as 16 bytes and N
//! (u32). An ETag is stored binary only if it reads back as the same text. Version 1 (still
//! read) is version 2 with every ETag as text (encoding byte zero).

use std::borrow::Cow;
use std::io::{self, Write};

const MAGIC: &[u8; 8] = b"BSLTXMAP";
/// The version written.
const VERSION: u32 = 2;
/// The first version, read too (text ETags only).
const VERSION_TEXT_ETAGS: u32 = 1;
/// ETag encodings (a record's byte 7).
const ETAG_TEXT: u8 = 0;
const ETAG_MD5: u8 = 1;
const ETAG_MULTIPART: u8 = 2;
const HEADER_BYTES: usize = 32;
const RECORD_BYTES: usize = 24;
/// Longest key S3 allows.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest ETag kept (S3's are 32 hex digits, or 34 with `-N`, plus quotes).
pub const MAX_ETAG_BYTES: usize = 255;

/// Why a map cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ExtentError {
    #[error("extent map: {0}")]
    Corrupt(String),
    #[error("key of {0} bytes (S3's limit is 1024)")]
    KeyTooLong(usize),
    #[error("ETag of {0} bytes")]
    EtagTooLong(usize),
    #[error("writing the extent map: {0}")]
    Io(#[from] io::Error),
}

/// One object's place in the data region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Record {
    start_block: u32,
    key_len: u16,
    etag_len: u8,
    etag_kind: u8,
    size: u64,
    heap_off: u64,
}

/// `etag` as stored: its encoding and bytes (binary when it reads back as the same text).
fn encode_etag(etag: &str) -> (u8, Cow<'_, [u8]>) {
    let binary = etag
        .strip_prefix('"')
        .and_then(|e| e.strip_suffix('"'))
        .and_then(|inner| {
            let (hex, parts) = match inner.split_once('-') {
                Some((h, n)) => (h, Some(n.parse::<u32>().ok()?)),
                None => (inner, None),
            };
            if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return None;
            }
            let mut out = Vec::with_capacity(20);
            for pair in hex.as_bytes().chunks_exact(2) {
                let digits = std::str::from_utf8(pair).ok()?;
                out.push(u8::from_str_radix(digits, 16).ok()?);
            }
            let kind = match parts {
                Some(n) => {
                    out.extend_from_slice(&n.to_le_bytes());
                    ETAG_MULTIPART
                }
                None => ETAG_MD5,
            };
            Some((kind, out))
        })
        .filter(|(kind, bytes)| decode_etag(*kind, bytes).as_deref() == Some(etag));
    match binary {
        Some((kind, bytes)) => (kind, Cow::Owned(bytes)),
        None => (ETAG_TEXT, Cow::Borrowed(etag.as_bytes())),
    }
}

/// The text of an ETag stored as `kind` in `bytes`; None if they are not one.
fn decode_etag(kind: u8, bytes: &[u8]) -> Option<Cow<'_, str>> {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    match (kind, bytes.len()) {
        (ETAG_TEXT, _) => std::str::from_utf8(bytes).ok().map(Cow::Borrowed),
        (ETAG_MD5, 16) => Some(Cow::Owned(format!("\"{}\"", hex(bytes)))),
        (ETAG_MULTIPART, 20) => {
            let n = u32::from_le_bytes(bytes[16..20].try_into().ok()?);
            Some(Cow::Owned(format!("\"{}-{n}\"", hex(&bytes[..16]))))
        }
        _ => None,
    }
}

/// Builds a map: records in memory would cost 24 bytes an object, so they and the heap
/// stream to two sinks, joined by [`Builder::finish`].
pub struct Builder<R: Write, H: Write> {
    records: R,
    heap: H,
    count: u64,
    heap_bytes: u64,
    crc_records: u32,
    crc_heap: u32,
    last_start: u32,
}

impl<R: Write, H: Write> Builder<R, H> {
    /// A builder writing records to `records` and keys and ETags to `heap`.
    pub fn new(records: R, heap: H) -> Self {
        Self {
            records,
            heap,
            count: 0,
            heap_bytes: 0,
            crc_records: 0,
            crc_heap: 0,
            last_start: 0,
        }
    }

    /// Add object `key` at `start_block` (after every earlier one) of `size` bytes (empty
    /// objects have no blocks and need no record).
    pub fn push(
        &mut self,
        start_block: u64,
        size: u64,
        key: &[u8],
        etag: &str,
    ) -> Result<(), ExtentError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(ExtentError::KeyTooLong(key.len()));
        }
        if etag.len() > MAX_ETAG_BYTES {
            return Err(ExtentError::EtagTooLong(etag.len()));
        }
        let (etag_kind, etag) = encode_etag(etag);
        let start = u32::try_from(start_block)
            .map_err(|_| ExtentError::Corrupt(format!("start block {start_block} past 2^32")))?;
        if start <= self.last_start && self.count > 0 {
            return Err(ExtentError::Corrupt(format!(
                "start block {start} after {}",
                self.last_start
            )));
        }
        let mut r = [0u8; RECORD_BYTES];
        r[0..4].copy_from_slice(&start.to_le_bytes());
        r[4..6].copy_from_slice(&(key.len() as u16).to_le_bytes());
        r[6] = etag.len() as u8;
        r[7] = etag_kind;
        r[8..16].copy_from_slice(&size.to_le_bytes());
        r[16..24].copy_from_slice(&self.heap_bytes.to_le_bytes());
        self.records.write_all(&r)?;
        self.crc_records = crc32c::crc32c_append(self.crc_records, &r);
        self.heap.write_all(key)?;
        self.heap.write_all(&etag)?;
        self.crc_heap = crc32c::crc32c_append(self.crc_heap, key);
        self.crc_heap = crc32c::crc32c_append(self.crc_heap, &etag);
        self.heap_bytes += (key.len() + etag.len()) as u64;
        self.count += 1;
        self.last_start = start;
        Ok(())
    }

    /// The sinks, and the header that goes before the records (the map is header, then
    /// records, then heap).
    pub fn finish(mut self) -> Result<(R, H, [u8; HEADER_BYTES]), ExtentError> {
        self.records.flush()?;
        self.heap.flush()?;
        let mut h = [0u8; HEADER_BYTES];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..20].copy_from_slice(&self.count.to_le_bytes());
        h[20..28].copy_from_slice(&self.heap_bytes.to_le_bytes());
        h[28..32].copy_from_slice(&check(self.crc_records, self.crc_heap).to_le_bytes());
        Ok((self.records, self.heap, h))
    }
}

/// The header's check value: the records' crc32c and the heap's, combined.
fn check(records: u32, heap: u32) -> u32 {
    let mut both = [0u8; 8];
    both[..4].copy_from_slice(&records.to_le_bytes());
    both[4..].copy_from_slice(&heap.to_le_bytes());
    crc32c::crc32c(&both)
}

/// Where a data block comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found<'a> {
    pub key: &'a [u8],
    /// As S3 gave it (quotes included).
    pub etag: Cow<'a, str>,
    /// The object's size.
    pub size: u64,
    /// Byte offset in the object of the block asked for.
    pub offset: u64,
}

/// A map read back whole (records and heap in memory, 24 bytes + key + ETag per object).
#[derive(Clone, Debug)]
pub struct ExtentMap {
    records: Vec<Record>,
    heap: Vec<u8>,
}

impl ExtentMap {
    /// Parse and check a map (header, records, heap), refusing anything inconsistent.
    pub fn parse(bytes: &[u8]) -> Result<Self, ExtentError> {
        let bad = |m: &str| ExtentError::Corrupt(m.to_string());
        if bytes.len() < HEADER_BYTES || &bytes[0..8] != MAGIC {
            return Err(bad("no extent map header"));
        }
        let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION && version != VERSION_TEXT_ETAGS {
            return Err(ExtentError::Corrupt(format!(
                "version {version} (this build reads {VERSION_TEXT_ETAGS} and {VERSION})"
            )));
        }
        let count = usize::try_from(u64_at(12)).map_err(|_| bad("record count"))?;
        let heap_len = usize::try_from(u64_at(20)).map_err(|_| bad("heap size"))?;
        let records_len = count
            .checked_mul(RECORD_BYTES)
            .ok_or_else(|| bad("record count"))?;
        let want = HEADER_BYTES
            .checked_add(records_len)
            .and_then(|n| n.checked_add(heap_len))
            .ok_or_else(|| bad("sizes"))?;
        if bytes.len() != want {
            return Err(ExtentError::Corrupt(format!(
                "{} bytes, the header says {want}",
                bytes.len()
            )));
        }
        let rec_bytes = &bytes[HEADER_BYTES..HEADER_BYTES + records_len];
        let heap = &bytes[HEADER_BYTES + records_len..];
        if check(crc32c::crc32c(rec_bytes), crc32c::crc32c(heap)) != u32_at(28) {
            return Err(bad("checksum mismatch"));
        }
        let mut records = Vec::with_capacity(count);
        let mut last: Option<u32> = None;
        for r in rec_bytes.chunks_exact(RECORD_BYTES) {
            let rec = Record {
                start_block: u32::from_le_bytes(r[0..4].try_into().expect("4 bytes")),
                key_len: u16::from_le_bytes(r[4..6].try_into().expect("2 bytes")),
                etag_len: r[6],
                etag_kind: r[7],
                size: u64::from_le_bytes(r[8..16].try_into().expect("8 bytes")),
                heap_off: u64::from_le_bytes(r[16..24].try_into().expect("8 bytes")),
            };
            let end = rec.heap_off + u64::from(rec.key_len) + u64::from(rec.etag_len);
            if end > heap.len() as u64 || last.is_some_and(|l| rec.start_block <= l) {
                return Err(bad("a record points outside the heap or out of order"));
            }
            if version == VERSION_TEXT_ETAGS && rec.etag_kind != ETAG_TEXT {
                return Err(bad("a binary ETag in a version 1 map"));
            }
            let etag = &heap[(rec.heap_off + u64::from(rec.key_len)) as usize..end as usize];
            decode_etag(rec.etag_kind, etag).ok_or_else(|| bad("an ETag is unreadable"))?;
            last = Some(rec.start_block);
            records.push(rec);
        }
        Ok(Self {
            records,
            heap: heap.to_vec(),
        })
    }

    /// How many objects it maps.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether it maps none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every object mapped: (start block, size, key), in start-block order.
    pub fn objects(&self) -> impl Iterator<Item = (u64, u64, &[u8])> + '_ {
        self.records.iter().map(|r| {
            let k = r.heap_off as usize;
            (
                u64::from(r.start_block),
                r.size,
                &self.heap[k..k + r.key_len as usize],
            )
        })
    }

    /// The object block `block` belongs to, or None (padding, a gap, or outside the data).
    pub fn find(&self, block: u64) -> Option<Found<'_>> {
        let i = self
            .records
            .partition_point(|r| u64::from(r.start_block) <= block)
            .checked_sub(1)?;
        let r = &self.records[i];
        let offset = (block - u64::from(r.start_block)) * crate::erofs::BLOCK_BYTES;
        if offset >= r.size {
            return None;
        }
        let k = r.heap_off as usize;
        let e = k + r.key_len as usize;
        // Checked by `parse`.
        let etag =
            decode_etag(r.etag_kind, &self.heap[e..e + r.etag_len as usize]).unwrap_or_default();
        Some(Found {
            key: &self.heap[k..e],
            etag,
            size: r.size,
            offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(objects: &[(u64, u64, &str, &str)]) -> Vec<u8> {
        let mut b = Builder::new(Vec::new(), Vec::new());
        for (start, size, key, etag) in objects {
            b.push(*start, *size, key.as_bytes(), etag).unwrap();
        }
        let (records, heap, header) = b.finish().unwrap();
        [header.to_vec(), records, heap].concat()
    }

    /// Goal: every block of an object finds it with the right offset; padding past its
    /// size, gaps and blocks before the first object find nothing.
    #[test]
    fn blocks_find_their_object() {
        let bytes = build(&[
            (1, 5000, "a/one", "\"e1\""),
            (3, 4096, "b", "\"e3\""),
            (10, 1, "c", "\"e4\""),
        ]);
        let map = ExtentMap::parse(&bytes).unwrap();
        assert_eq!(map.len(), 3);
        assert_eq!(map.find(0), None);
        let f = map.find(2).unwrap();
        assert_eq!(
            (f.key, &*f.etag, f.size, f.offset),
            (&b"a/one"[..], "\"e1\"", 5000, 4096)
        );
        assert_eq!(map.find(3).unwrap().key, b"b");
        assert_eq!(map.find(4), None, "gap");
        assert_eq!(map.find(10).unwrap().key, b"c");
        assert_eq!(map.find(11), None, "past the last object");
    }

    /// Goal: a damaged or truncated map is refused, never misread.
    #[test]
    fn damage_is_detected() {
        let bytes = build(&[(1, 10, "k", "e")]);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(ExtentMap::parse(&b).is_err(), "flip at byte {i}");
        }
        assert!(ExtentMap::parse(&bytes[..bytes.len() - 1]).is_err());
        assert!(ExtentMap::parse(&[]).is_err());
    }

    /// Goal: records must go in start-block order (the listing's), and keys and ETags
    /// within their limits.
    #[test]
    fn bad_input_is_refused() {
        let mut b = Builder::new(Vec::new(), Vec::new());
        b.push(5, 1, b"x", "e").unwrap();
        assert!(b.push(5, 1, b"y", "e").is_err());
        assert!(b.push(6, 1, &[b'k'; 1025], "e").is_err());
        assert!(b.push(1 << 33, 1, b"z", "e").is_err());
    }

    /// Goal: plain and multipart MD5 ETags are stored as 16 (or 20) bytes and read back
    /// as the same text; anything else (upper case, unquoted, other lengths) stays text.
    #[test]
    fn etags_are_binary_when_they_read_back_the_same() {
        let etags = [
            "\"0123456789abcdef0123456789abcdef\"",
            "\"0123456789abcdef0123456789abcdef-17\"",
            "\"0123456789ABCDEF0123456789ABCDEF\"",
            "0123456789abcdef0123456789abcdef",
            "\"0123456789abcdef0123456789abcdef-017\"",
            "\"0123456789abcdef\"",
            "W/\"weak\"",
            "\"\"",
        ];
        let objects: Vec<(u64, u64, String, &str)> = etags
            .iter()
            .enumerate()
            .map(|(i, e)| (1 + i as u64, 10, format!("k{i}"), *e))
            .collect();
        let refs: Vec<(u64, u64, &str, &str)> = objects
            .iter()
            .map(|(s, z, k, e)| (*s, *z, k.as_str(), *e))
            .collect();
        let bytes = build(&refs);
        let map = ExtentMap::parse(&bytes).unwrap();
        for (i, e) in etags.iter().enumerate() {
            assert_eq!(&*map.find(1 + i as u64).unwrap().etag, *e);
        }
        let kinds: Vec<u8> = map.records.iter().map(|r| r.etag_kind).collect();
        assert_eq!(kinds, [1, 2, 0, 0, 0, 0, 0, 0]);
        let md5 = build(&[(1, 10, "k", etags[0])]);
        let text = build(&[(1, 10, "k", etags[2])]);
        assert_eq!(
            text.len() - md5.len(),
            34 - 16,
            "16 bytes for a plain MD5 ETag"
        );
    }

    /// Goal: a version 1 map (text ETags) still reads; a binary ETag in one is refused.
    #[test]
    fn version_1_still_reads() {
        let mut v1 = build(&[(1, 10, "a", "\"x\""), (5, 4096, "b", "e")]);
        v1[8..12].copy_from_slice(&1u32.to_le_bytes());
        let map = ExtentMap::parse(&v1).unwrap();
        assert_eq!(&*map.find(5).unwrap().etag, "e");
        let mut bad = build(&[(1, 10, "a", "\"0123456789abcdef0123456789abcdef\"")]);
        bad[8..12].copy_from_slice(&1u32.to_le_bytes());
        assert!(ExtentMap::parse(&bad).is_err());
    }
}
