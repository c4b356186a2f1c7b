//! KV tables: the arguments, results and stored body of the OSD's key-value object class
//! (opcode CALL), which keeps a sorted key → value table in one object and edits it
//! atomically on the PG's primary (the S3 bucket index is built on it).
//!
//! Every codec is little endian and specified in `docs/design.md` ("Object classes: KV
//! tables"). Decoders never panic: they reject truncated input, lengths past the end, keys
//! and values over their limits and trailing bytes. A byte string in the call payloads is a
//! `u32` length then the bytes, so no length can be truncated on encoding; encoding a value
//! that breaks a limit produces bytes its decoder rejects.

use bytes::{BufMut, Bytes, BytesMut};
use std::collections::BTreeMap;
use thiserror::Error;

/// Longest key, in bytes (keys are at least 1 byte).
pub const KV_MAX_KEY: usize = 4096;
/// Longest value, in bytes.
pub const KV_MAX_VALUE: usize = 1 << 20;
/// First four bytes of a stored table body (format version 1).
pub const KV_TABLE_MAGIC: [u8; 4] = *b"BKV1";
/// Size of the stored table body's header.
pub const KV_TABLE_HEADER_BYTES: usize = 16;
/// Bytes of a stored table entry besides its key and value (u16 key length, u32 value length).
pub const KV_TABLE_ENTRY_OVERHEAD_BYTES: usize = 6;
/// Bytes one entry adds to an encoded [`KvPage`] besides its key and value.
pub const KV_PAGE_ENTRY_OVERHEAD_BYTES: usize = 8;
/// Bytes of an encoded [`KvPage`] besides its entries.
pub const KV_PAGE_HEADER_BYTES: usize = 5;

/// The methods of the KV class, carried in a CALL request's `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum KvMethod {
    /// Apply a [`KvUpdate`] atomically; the result is a [`KvPrevious`].
    Update = 1,
    /// Look up a [`KvGet`]'s keys; the result is a [`KvValues`].
    Get = 2,
    /// One page of a [`KvList`]; the result is a [`KvPage`].
    List = 3,
    /// The table's size (no arguments); the result is a [`KvStat`].
    Stat = 4,
}

impl KvMethod {
    /// The method with this id, if any.
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            1 => Self::Update,
            2 => Self::Get,
            3 => Self::List,
            4 => Self::Stat,
            _ => return None,
        })
    }
}

/// Why a KV payload or table body could not be decoded.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum KvDecodeError {
    #[error("input ends early: {needed} bytes needed at offset {offset}")]
    Truncated { offset: usize, needed: usize },
    #[error("{extra} trailing bytes after the encoded value")]
    Trailing { extra: usize },
    #[error("key of {len} bytes (keys are 1..={KV_MAX_KEY} bytes)")]
    KeyLength { len: usize },
    #[error("value of {len} bytes exceeds the limit of {KV_MAX_VALUE}")]
    ValueTooLong { len: usize },
    #[error("unknown {field} tag {tag}")]
    BadTag { field: &'static str, tag: u8 },
    #[error("keys out of order at entry {index}")]
    Unsorted { index: usize },
    #[error("table magic {found:?} is not BKV1")]
    BadMagic { found: [u8; 4] },
    #[error("table body length {body_len} outside 16..={available}")]
    BadBodyLength { body_len: usize, available: usize },
    #[error("table checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum { stored: u32, computed: u32 },
    #[error("table header counts {header} entries, body holds {found}")]
    EntryCount { header: u32, found: usize },
}

/// The condition an edit needs to hold, checked against the table as it was before the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvCond {
    /// Always holds.
    Any,
    /// Holds when the key is absent, or already holds exactly the edit's new value (so a
    /// retried put-if-absent whose first attempt was applied still succeeds). Two writers
    /// putting the same value therefore both succeed: give each a distinct value (an upload
    /// id, say) when only one may win.
    Absent,
    /// Holds when the key holds exactly this value.
    Equals(Bytes),
}

/// One edit of a batch: put `value` at `key` (or delete `key` when `value` is None) if
/// `cond` holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvEdit {
    pub key: Bytes,
    /// None deletes the key.
    pub value: Option<Bytes>,
    pub cond: KvCond,
}

/// Arguments of [`KvMethod::Update`]: edits applied in order, all or none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvUpdate {
    pub edits: Vec<KvEdit>,
}

/// Result of [`KvMethod::Update`]: the value each edit's key held before the batch, in edit
/// order (None: absent). Also the result of [`KvMethod::Get`] (see [`KvValues`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvPrevious {
    pub values: Vec<Option<Bytes>>,
}

/// Result of [`KvMethod::Get`]: the value of each requested key, in request order.
pub type KvValues = KvPrevious;

/// Arguments of [`KvMethod::Get`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvGet {
    pub keys: Vec<Bytes>,
}

/// Arguments of [`KvMethod::List`]: keys greater than `start_after` that start with `prefix`,
/// ascending, at most `max_entries` (at least 1) and about `max_bytes` of keys and values
/// (a page holds at least one entry even when that one is larger).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvList {
    pub start_after: Bytes,
    pub prefix: Bytes,
    pub max_entries: u32,
    pub max_bytes: u32,
}

/// Result of [`KvMethod::List`]: entries in ascending key order (bytewise); `truncated` when
/// more entries match after the last one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvPage {
    pub entries: Vec<(Bytes, Bytes)>,
    pub truncated: bool,
}

/// Result of [`KvMethod::Stat`]: how many entries the table holds and the bytes of its
/// encoded body (what an update must keep within the object size). Encoded as two u32, little
/// endian.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvStat {
    pub entries: u32,
    pub body_bytes: u32,
}

impl KvStat {
    /// Bytes of the encoded result.
    pub const ENCODED_LEN: usize = 8;

    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(Self::ENCODED_LEN);
        out.put_u32_le(self.entries);
        out.put_u32_le(self.body_bytes);
        out.freeze()
    }

    /// Decode exactly [`KvStat::ENCODED_LEN`] bytes.
    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        if buf.len() < Self::ENCODED_LEN {
            return Err(KvDecodeError::Truncated {
                offset: 0,
                needed: Self::ENCODED_LEN,
            });
        }
        if buf.len() > Self::ENCODED_LEN {
            return Err(KvDecodeError::Trailing {
                extra: buf.len() - Self::ENCODED_LEN,
            });
        }
        let word = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
        Ok(Self {
            entries: word(0),
            body_bytes: word(4),
        })
    }
}

/// The table as stored in its object, from offset 0: a 16-byte header (magic "BKV1", u32
/// entry count, u32 body length including the header, u32 crc32c of the entries), then the
/// entries sorted by key, each `[u16 key len][u32 value len][key][value]`. Bytes after the
/// body length are not part of the table (the object was longer before).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvTable {
    pub entries: BTreeMap<Bytes, Bytes>,
}

/// Is `key` a valid key (1..=KV_MAX_KEY bytes)?
pub fn check_key(key: &[u8]) -> Result<(), KvDecodeError> {
    if key.is_empty() || key.len() > KV_MAX_KEY {
        return Err(KvDecodeError::KeyLength { len: key.len() });
    }
    Ok(())
}

/// Is `value` a valid value (at most KV_MAX_VALUE bytes)?
pub fn check_value(value: &[u8]) -> Result<(), KvDecodeError> {
    if value.len() > KV_MAX_VALUE {
        return Err(KvDecodeError::ValueTooLong { len: value.len() });
    }
    Ok(())
}

/// Is `bound` a valid `start_after` or `prefix` (0..=KV_MAX_KEY bytes)?
fn check_bound(bound: &[u8]) -> Result<(), KvDecodeError> {
    if bound.len() > KV_MAX_KEY {
        return Err(KvDecodeError::KeyLength { len: bound.len() });
    }
    Ok(())
}

/// A cursor over an input buffer; slices share the buffer instead of copying it.
struct Reader {
    buf: Bytes,
    pos: usize,
}

impl Reader {
    fn new(buf: Bytes) -> Self {
        Self { buf, pos: 0 }
    }

    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<Bytes, KvDecodeError> {
        if n > self.left() {
            return Err(KvDecodeError::Truncated {
                offset: self.pos,
                needed: n,
            });
        }
        let out = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, KvDecodeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, KvDecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, KvDecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A u32 length, then that many bytes.
    fn bytes(&mut self) -> Result<Bytes, KvDecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    /// A count of items of at least `min_item_bytes` each: the capacity to reserve for them,
    /// bounded by what the input can hold (a forged count must not allocate).
    fn count(&mut self, min_item_bytes: usize) -> Result<(usize, usize), KvDecodeError> {
        let count = self.u32()? as usize;
        Ok((count, count.min(self.left() / min_item_bytes)))
    }

    fn finish(self) -> Result<(), KvDecodeError> {
        match self.left() {
            0 => Ok(()),
            extra => Err(KvDecodeError::Trailing { extra }),
        }
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.put_slice(b);
}

fn put_option(out: &mut BytesMut, v: &Option<Bytes>) {
    match v {
        None => out.put_u8(0),
        Some(v) => {
            out.put_u8(1);
            put_bytes(out, v);
        }
    }
}

fn option_len(v: &Option<Bytes>) -> usize {
    1 + v.as_ref().map_or(0, |v| 4 + v.len())
}

fn read_option(r: &mut Reader, field: &'static str) -> Result<Option<Bytes>, KvDecodeError> {
    match r.u8()? {
        0 => Ok(None),
        1 => {
            let v = r.bytes()?;
            check_value(&v)?;
            Ok(Some(v))
        }
        tag => Err(KvDecodeError::BadTag { field, tag }),
    }
}

/// Decode a whole buffer with `f`, rejecting trailing bytes.
fn decode_all<T>(
    buf: Bytes,
    f: impl FnOnce(&mut Reader) -> Result<T, KvDecodeError>,
) -> Result<T, KvDecodeError> {
    let mut r = Reader::new(buf);
    let value = f(&mut r)?;
    r.finish()?;
    Ok(value)
}

impl KvCond {
    fn encoded_len(&self) -> usize {
        match self {
            KvCond::Equals(v) => 5 + v.len(),
            _ => 1,
        }
    }

    fn put(&self, out: &mut BytesMut) {
        match self {
            KvCond::Any => out.put_u8(0),
            KvCond::Absent => out.put_u8(1),
            KvCond::Equals(v) => {
                out.put_u8(2);
                put_bytes(out, v);
            }
        }
    }

    fn read(r: &mut Reader) -> Result<Self, KvDecodeError> {
        match r.u8()? {
            0 => Ok(KvCond::Any),
            1 => Ok(KvCond::Absent),
            2 => {
                let v = r.bytes()?;
                check_value(&v)?;
                Ok(KvCond::Equals(v))
            }
            tag => Err(KvDecodeError::BadTag {
                field: "condition",
                tag,
            }),
        }
    }

    /// Does the condition hold for an edit putting `new` (None: delete) at a key that holds
    /// `current` (None: absent)?
    pub fn holds(&self, current: Option<&Bytes>, new: Option<&Bytes>) -> bool {
        match self {
            KvCond::Any => true,
            KvCond::Absent => current.is_none() || (new.is_some() && current == new),
            KvCond::Equals(v) => current == Some(v),
        }
    }
}

impl KvEdit {
    /// Put `value` at `key` unconditionally.
    pub fn put(key: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: Some(value.into()),
            cond: KvCond::Any,
        }
    }

    /// Delete `key` unconditionally.
    pub fn delete(key: impl Into<Bytes>) -> Self {
        Self {
            key: key.into(),
            value: None,
            cond: KvCond::Any,
        }
    }

    /// This edit, applied only if `cond` holds.
    pub fn when(self, cond: KvCond) -> Self {
        Self { cond, ..self }
    }

    fn encoded_len(&self) -> usize {
        4 + self.key.len() + option_len(&self.value) + self.cond.encoded_len()
    }

    /// Check the key and value limits.
    pub fn validate(&self) -> Result<(), KvDecodeError> {
        check_key(&self.key)?;
        if let Some(v) = &self.value {
            check_value(v)?;
        }
        if let KvCond::Equals(v) = &self.cond {
            check_value(v)?;
        }
        Ok(())
    }
}

impl KvUpdate {
    /// Check every edit's limits.
    pub fn validate(&self) -> Result<(), KvDecodeError> {
        self.edits.iter().try_for_each(KvEdit::validate)
    }

    /// `u32 count`, then per edit: key (u32 length + bytes), `u8` 0 delete / 1 put (+ u32
    /// length + value), condition `u8` 0 any / 1 absent / 2 equals (+ u32 length + value).
    pub fn encode(&self) -> Bytes {
        let len = 4 + self.edits.iter().map(KvEdit::encoded_len).sum::<usize>();
        let mut out = BytesMut::with_capacity(len);
        out.put_u32_le(self.edits.len() as u32);
        for e in &self.edits {
            put_bytes(&mut out, &e.key);
            put_option(&mut out, &e.value);
            e.cond.put(&mut out);
        }
        debug_assert_eq!(out.len(), len);
        out.freeze()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        Self::decode_bytes(Bytes::copy_from_slice(buf))
    }

    /// Decode without copying: the keys and values share `buf`.
    pub fn decode_bytes(buf: Bytes) -> Result<Self, KvDecodeError> {
        decode_all(buf, |r| {
            // Smallest edit: empty key length, delete tag, Any tag.
            let (count, cap) = r.count(6)?;
            let mut edits = Vec::with_capacity(cap);
            for _ in 0..count {
                let key = r.bytes()?;
                check_key(&key)?;
                let value = read_option(r, "edit")?;
                let cond = KvCond::read(r)?;
                edits.push(KvEdit { key, value, cond });
            }
            Ok(KvUpdate { edits })
        })
    }
}

impl KvPrevious {
    /// Bytes of the encoding (to check it fits in a reply before doing the work).
    pub fn encoded_len(&self) -> usize {
        4 + self.values.iter().map(option_len).sum::<usize>()
    }

    /// `u32 count`, then per value `u8` 0 absent / 1 present (+ u32 length + value).
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        out.put_u32_le(self.values.len() as u32);
        for v in &self.values {
            put_option(&mut out, v);
        }
        out.freeze()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        Self::decode_bytes(Bytes::copy_from_slice(buf))
    }

    /// Decode without copying: the values share `buf`.
    pub fn decode_bytes(buf: Bytes) -> Result<Self, KvDecodeError> {
        decode_all(buf, |r| {
            let (count, cap) = r.count(1)?;
            let mut values = Vec::with_capacity(cap);
            for _ in 0..count {
                values.push(read_option(r, "value")?);
            }
            Ok(KvPrevious { values })
        })
    }
}

impl KvGet {
    /// Check every key's length.
    pub fn validate(&self) -> Result<(), KvDecodeError> {
        self.keys.iter().try_for_each(|k| check_key(k))
    }

    /// `u32 count`, then per key a u32 length and the bytes.
    pub fn encode(&self) -> Bytes {
        let len = 4 + self.keys.iter().map(|k| 4 + k.len()).sum::<usize>();
        let mut out = BytesMut::with_capacity(len);
        out.put_u32_le(self.keys.len() as u32);
        for k in &self.keys {
            put_bytes(&mut out, k);
        }
        out.freeze()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        Self::decode_bytes(Bytes::copy_from_slice(buf))
    }

    /// Decode without copying: the keys share `buf`.
    pub fn decode_bytes(buf: Bytes) -> Result<Self, KvDecodeError> {
        decode_all(buf, |r| {
            let (count, cap) = r.count(4)?;
            let mut keys = Vec::with_capacity(cap);
            for _ in 0..count {
                let key = r.bytes()?;
                check_key(&key)?;
                keys.push(key);
            }
            Ok(KvGet { keys })
        })
    }
}

impl KvList {
    /// Check the bounds' lengths.
    pub fn validate(&self) -> Result<(), KvDecodeError> {
        check_bound(&self.start_after)?;
        check_bound(&self.prefix)
    }

    /// `start_after` and `prefix` (each a u32 length and the bytes), `u32 max_entries`,
    /// `u32 max_bytes`.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(16 + self.start_after.len() + self.prefix.len());
        put_bytes(&mut out, &self.start_after);
        put_bytes(&mut out, &self.prefix);
        out.put_u32_le(self.max_entries);
        out.put_u32_le(self.max_bytes);
        out.freeze()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        Self::decode_bytes(Bytes::copy_from_slice(buf))
    }

    /// Decode without copying: the bounds share `buf`.
    pub fn decode_bytes(buf: Bytes) -> Result<Self, KvDecodeError> {
        decode_all(buf, |r| {
            let start_after = r.bytes()?;
            check_bound(&start_after)?;
            let prefix = r.bytes()?;
            check_bound(&prefix)?;
            Ok(KvList {
                start_after,
                prefix,
                max_entries: r.u32()?,
                max_bytes: r.u32()?,
            })
        })
    }
}

impl KvPage {
    /// Bytes of the encoding.
    pub fn encoded_len(&self) -> usize {
        KV_PAGE_HEADER_BYTES
            + self
                .entries
                .iter()
                .map(|(k, v)| KV_PAGE_ENTRY_OVERHEAD_BYTES + k.len() + v.len())
                .sum::<usize>()
    }

    /// `u8 truncated` (0/1), `u32 count`, then per entry the key and the value, each a u32
    /// length and the bytes.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        out.put_u8(u8::from(self.truncated));
        out.put_u32_le(self.entries.len() as u32);
        for (k, v) in &self.entries {
            put_bytes(&mut out, k);
            put_bytes(&mut out, v);
        }
        out.freeze()
    }

    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        Self::decode_bytes(Bytes::copy_from_slice(buf))
    }

    /// Decode without copying: keys and values share `buf`. Keys must ascend strictly.
    pub fn decode_bytes(buf: Bytes) -> Result<Self, KvDecodeError> {
        decode_all(buf, |r| {
            let truncated = match r.u8()? {
                0 => false,
                1 => true,
                tag => {
                    return Err(KvDecodeError::BadTag {
                        field: "truncated",
                        tag,
                    })
                }
            };
            let (count, cap) = r.count(KV_PAGE_ENTRY_OVERHEAD_BYTES)?;
            let mut entries: Vec<(Bytes, Bytes)> = Vec::with_capacity(cap);
            for index in 0..count {
                let key = r.bytes()?;
                check_key(&key)?;
                let value = r.bytes()?;
                check_value(&value)?;
                if entries.last().is_some_and(|(last, _)| *last >= key) {
                    return Err(KvDecodeError::Unsorted { index });
                }
                entries.push((key, value));
            }
            Ok(KvPage { entries, truncated })
        })
    }
}

impl KvTable {
    /// Bytes of the encoded body.
    pub fn encoded_len(&self) -> usize {
        KV_TABLE_HEADER_BYTES
            + self
                .entries
                .iter()
                .map(|(k, v)| KV_TABLE_ENTRY_OVERHEAD_BYTES + k.len() + v.len())
                .sum::<usize>()
    }

    /// The stored body. Every key and value must be within the limits (the OSD checks each
    /// edit before it enters a table); a key that is not is a bug, caught here.
    pub fn encode(&self) -> Bytes {
        let len = self.encoded_len();
        assert!(len <= u32::MAX as usize, "KV table of {len} bytes");
        let mut out = BytesMut::with_capacity(len);
        out.put_slice(&KV_TABLE_MAGIC);
        out.put_u32_le(self.entries.len() as u32);
        out.put_u32_le(len as u32);
        out.put_u32_le(0); // crc, set below
        for (k, v) in &self.entries {
            assert!(
                !k.is_empty() && k.len() <= KV_MAX_KEY && v.len() <= KV_MAX_VALUE,
                "KV table entry out of limits (key {} bytes, value {} bytes)",
                k.len(),
                v.len()
            );
            out.put_u16_le(k.len() as u16);
            out.put_u32_le(v.len() as u32);
            out.put_slice(k);
            out.put_slice(v);
        }
        let crc = crc32c::crc32c(&out[KV_TABLE_HEADER_BYTES..]);
        out[12..16].copy_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len(), len);
        out.freeze()
    }

    /// The body length a table header announces, checked against the magic and against
    /// `max_bytes` (the object size): how many bytes of the object to read.
    pub fn body_len(header: &[u8], max_bytes: usize) -> Result<usize, KvDecodeError> {
        let mut r = Reader::new(Bytes::copy_from_slice(
            &header[..header.len().min(KV_TABLE_HEADER_BYTES)],
        ));
        let magic = r.take(4)?;
        if magic[..] != KV_TABLE_MAGIC {
            let mut found = [0u8; 4];
            found.copy_from_slice(&magic);
            return Err(KvDecodeError::BadMagic { found });
        }
        let _count = r.u32()?;
        let body_len = r.u32()? as usize;
        if !(KV_TABLE_HEADER_BYTES..=max_bytes).contains(&body_len) {
            return Err(KvDecodeError::BadBodyLength {
                body_len,
                available: max_bytes,
            });
        }
        Ok(body_len)
    }

    /// Decode a body from the start of `buf`; bytes after its body length are ignored.
    pub fn decode(buf: &[u8]) -> Result<Self, KvDecodeError> {
        let len = Self::body_len(buf, buf.len())?;
        Self::decode_bytes(Bytes::copy_from_slice(&buf[..len]))
    }

    /// Decode without copying (keys and values share `buf`); bytes after the body length are
    /// ignored.
    pub fn decode_bytes(buf: Bytes) -> Result<Self, KvDecodeError> {
        let body_len = Self::body_len(&buf, buf.len())?;
        let body = buf.slice(..body_len);
        let mut r = Reader::new(body.clone());
        r.take(4)?; // magic, checked above
        let count = r.u32()?;
        r.u32()?; // body length, checked above
        let stored = r.u32()?;
        let computed = crc32c::crc32c(&body[KV_TABLE_HEADER_BYTES..]);
        if stored != computed {
            return Err(KvDecodeError::Checksum { stored, computed });
        }
        let mut entries = BTreeMap::new();
        let mut last: Option<Bytes> = None;
        let mut found = 0usize;
        while r.left() > 0 {
            let klen = r.u16()? as usize;
            let vlen = r.u32()? as usize;
            let key = r.take(klen)?;
            check_key(&key)?;
            if vlen > KV_MAX_VALUE {
                return Err(KvDecodeError::ValueTooLong { len: vlen });
            }
            let value = r.take(vlen)?;
            if last.as_ref().is_some_and(|l| *l >= key) {
                return Err(KvDecodeError::Unsorted { index: found });
            }
            last = Some(key.clone());
            entries.insert(key, value);
            found += 1;
        }
        if found != count as usize {
            return Err(KvDecodeError::EntryCount {
                header: count,
                found,
            });
        }
        Ok(KvTable { entries })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 1..24).prop_map(Bytes::from)
    }

    fn value() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from)
    }

    fn bound() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(Bytes::from)
    }

    fn cond() -> impl Strategy<Value = KvCond> {
        prop_oneof![
            Just(KvCond::Any),
            Just(KvCond::Absent),
            value().prop_map(KvCond::Equals),
        ]
    }

    fn edit() -> impl Strategy<Value = KvEdit> {
        (key(), proptest::option::of(value()), cond()).prop_map(|(key, value, cond)| KvEdit {
            key,
            value,
            cond,
        })
    }

    fn update() -> impl Strategy<Value = KvUpdate> {
        proptest::collection::vec(edit(), 0..12).prop_map(|edits| KvUpdate { edits })
    }

    fn previous() -> impl Strategy<Value = KvPrevious> {
        proptest::collection::vec(proptest::option::of(value()), 0..12)
            .prop_map(|values| KvPrevious { values })
    }

    fn get() -> impl Strategy<Value = KvGet> {
        proptest::collection::vec(key(), 0..12).prop_map(|keys| KvGet { keys })
    }

    fn list() -> impl Strategy<Value = KvList> {
        (bound(), bound(), any::<u32>(), any::<u32>()).prop_map(
            |(start_after, prefix, max_entries, max_bytes)| KvList {
                start_after,
                prefix,
                max_entries,
                max_bytes,
            },
        )
    }

    fn table() -> impl Strategy<Value = KvTable> {
        proptest::collection::btree_map(key(), value(), 0..24)
            .prop_map(|entries| KvTable { entries })
    }

    fn page() -> impl Strategy<Value = KvPage> {
        (table(), any::<bool>()).prop_map(|(t, truncated)| KvPage {
            entries: t.entries.into_iter().collect(),
            truncated,
        })
    }

    /// Every proper prefix of `bytes` must be rejected by `decode`, and so must one trailing
    /// byte more.
    fn rejects_truncation_and_trailing<T: std::fmt::Debug>(
        bytes: &[u8],
        decode: impl Fn(&[u8]) -> Result<T, KvDecodeError>,
    ) -> Result<(), TestCaseError> {
        for cut in 0..bytes.len() {
            prop_assert!(decode(&bytes[..cut]).is_err(), "prefix of {cut} accepted");
        }
        let mut longer = bytes.to_vec();
        longer.push(0);
        prop_assert!(decode(&longer).is_err(), "trailing byte accepted");
        Ok(())
    }

    proptest! {
        /// Goal: every update survives encode → decode unchanged, and no truncated or padded
        /// encoding decodes.
        #[test]
        fn update_roundtrip(u in update()) {
            let b = u.encode();
            prop_assert_eq!(KvUpdate::decode(&b), Ok(u));
            rejects_truncation_and_trailing(&b, KvUpdate::decode)?;
        }

        /// Goal: previous/get values survive encode → decode unchanged.
        #[test]
        fn previous_roundtrip(p in previous()) {
            let b = p.encode();
            prop_assert_eq!(b.len(), p.encoded_len());
            prop_assert_eq!(KvPrevious::decode(&b), Ok(p));
            rejects_truncation_and_trailing(&b, KvPrevious::decode)?;
        }

        /// Goal: a table's size survives encode → decode unchanged; any other length fails.
        #[test]
        fn stat_roundtrip(entries in any::<u32>(), body_bytes in any::<u32>()) {
            let s = KvStat { entries, body_bytes };
            let b = s.encode();
            prop_assert_eq!(b.len(), KvStat::ENCODED_LEN);
            prop_assert_eq!(KvStat::decode(&b), Ok(s));
            rejects_truncation_and_trailing(&b, KvStat::decode)?;
        }

        /// Goal: get arguments survive encode → decode unchanged.
        #[test]
        fn get_roundtrip(g in get()) {
            let b = g.encode();
            prop_assert_eq!(KvGet::decode(&b), Ok(g));
            rejects_truncation_and_trailing(&b, KvGet::decode)?;
        }

        /// Goal: list arguments survive encode → decode unchanged.
        #[test]
        fn list_roundtrip(l in list()) {
            let b = l.encode();
            prop_assert_eq!(KvList::decode(&b), Ok(l));
            rejects_truncation_and_trailing(&b, KvList::decode)?;
        }

        /// Goal: list pages survive encode → decode unchanged.
        #[test]
        fn page_roundtrip(p in page()) {
            let b = p.encode();
            prop_assert_eq!(b.len(), p.encoded_len());
            prop_assert_eq!(KvPage::decode(&b), Ok(p));
            rejects_truncation_and_trailing(&b, KvPage::decode)?;
        }

        /// Goal: a table survives encode → decode unchanged, also with stale bytes after its
        /// body (an object that was longer before), and its length is what encoded_len says.
        #[test]
        fn table_roundtrip(t in table(), tail in proptest::collection::vec(any::<u8>(), 0..64)) {
            let b = t.encode();
            prop_assert_eq!(b.len(), t.encoded_len());
            prop_assert_eq!(KvTable::decode(&b), Ok(t.clone()));
            let mut longer = b.to_vec();
            longer.extend_from_slice(&tail);
            prop_assert_eq!(KvTable::decode(&longer), Ok(t));
            for cut in 0..b.len() {
                prop_assert!(KvTable::decode(&b[..cut]).is_err(), "prefix of {cut} accepted");
            }
        }

        /// Goal: a flipped bit anywhere in a table body (header or entries) is detected.
        #[test]
        fn table_bit_flip_detected(t in table(), bit in any::<proptest::sample::Index>()) {
            let mut b = t.encode().to_vec();
            let bit = bit.index(b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            // A flip in the body length points past the end or moves the region the crc
            // covers (then caught unless the crcs collide, 2^-32).
            prop_assert!(KvTable::decode(&b).is_err(), "flip of bit {bit} undetected");
        }

        /// Goal: arbitrary bytes never panic any decoder.
        #[test]
        fn garbage_never_panics(v in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = KvUpdate::decode(&v);
            let _ = KvPrevious::decode(&v);
            let _ = KvGet::decode(&v);
            let _ = KvList::decode(&v);
            let _ = KvPage::decode(&v);
            let _ = KvTable::decode(&v);
            let _ = KvTable::body_len(&v, 1 << 20);
        }
    }

    /// Goal: the limits are enforced by the decoders (keys 1..=4096 bytes, values ≤ 1 MiB),
    /// and a forged huge count does not allocate or panic.
    #[test]
    fn limits_and_forged_counts() {
        let long_key = KvGet {
            keys: vec![Bytes::from(vec![b'k'; KV_MAX_KEY + 1])],
        };
        assert_eq!(
            KvGet::decode(&long_key.encode()),
            Err(KvDecodeError::KeyLength {
                len: KV_MAX_KEY + 1
            })
        );
        let max_key = KvGet {
            keys: vec![Bytes::from(vec![b'k'; KV_MAX_KEY])],
        };
        assert!(KvGet::decode(&max_key.encode()).is_ok());
        let empty_key = KvUpdate {
            edits: vec![KvEdit::put(Bytes::new(), "v")],
        };
        assert_eq!(
            KvUpdate::decode(&empty_key.encode()),
            Err(KvDecodeError::KeyLength { len: 0 })
        );
        let big_value = KvUpdate {
            edits: vec![KvEdit::put("k", vec![0u8; KV_MAX_VALUE + 1])],
        };
        assert!(big_value.validate().is_err());
        assert_eq!(
            KvUpdate::decode(&big_value.encode()),
            Err(KvDecodeError::ValueTooLong {
                len: KV_MAX_VALUE + 1
            })
        );
        let forged = [0xff, 0xff, 0xff, 0xff];
        assert!(KvUpdate::decode(&forged).is_err());
        assert!(KvGet::decode(&forged).is_err());
        assert!(KvPrevious::decode(&forged).is_err());
        assert!(KvPage::decode(&[0, 0xff, 0xff, 0xff, 0xff]).is_err());
    }

    /// Goal: the stored body's bytes are exactly the documented layout.
    #[test]
    fn table_layout() {
        let mut t = KvTable::default();
        t.entries
            .insert(Bytes::from_static(b"b"), Bytes::from_static(b"22"));
        t.entries
            .insert(Bytes::from_static(b"a"), Bytes::from_static(b"1"));
        let b = t.encode();
        let entries: &[u8] = &[
            1, 0, 1, 0, 0, 0, b'a', b'1', 1, 0, 2, 0, 0, 0, b'b', b'2', b'2',
        ];
        assert_eq!(&b[0..4], b"BKV1");
        assert_eq!(&b[4..8], &2u32.to_le_bytes());
        assert_eq!(&b[8..12], &((16 + entries.len()) as u32).to_le_bytes());
        assert_eq!(&b[12..16], &crc32c::crc32c(entries).to_le_bytes());
        assert_eq!(&b[16..], entries);
        let empty = KvTable::default().encode();
        assert_eq!(empty.len(), KV_TABLE_HEADER_BYTES);
        assert_eq!(KvTable::decode(&empty), Ok(KvTable::default()));
    }

    /// Goal: the conditions mean what the design says, including the retry rule of Absent.
    #[test]
    fn conditions() {
        let v = Bytes::from_static(b"v");
        let w = Bytes::from_static(b"w");
        assert!(KvCond::Any.holds(Some(&v), None));
        assert!(KvCond::Absent.holds(None, Some(&v)));
        assert!(
            KvCond::Absent.holds(Some(&v), Some(&v)),
            "a retried put-if-absent"
        );
        assert!(!KvCond::Absent.holds(Some(&v), Some(&w)));
        assert!(!KvCond::Absent.holds(Some(&v), None));
        assert!(KvCond::Absent.holds(None, None));
        assert!(KvCond::Equals(v.clone()).holds(Some(&v), Some(&w)));
        assert!(!KvCond::Equals(v.clone()).holds(Some(&w), Some(&w)));
        assert!(!KvCond::Equals(v).holds(None, Some(&w)));
    }
}
