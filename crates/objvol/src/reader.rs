//! Reading an objvol's device: the superblock block and the metadata region come from the
//! stored index, data blocks from the bucket through the extent map (ranged GETs pinned to
//! the ETag the index was built with), padding and gaps are zeros. A frontend (NBD) wraps
//! a [`Reader`] as a read-only block device.

use crate::erofs::BLOCK_BYTES;
use crate::extents::ExtentMap;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Ranged GETs one reader keeps in flight at most.
pub const MAX_GETS_IN_FLIGHT: usize = 64;

/// Why a source could not give bytes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The object is no longer the one the index was built from (412 on If-Match, or 404).
    #[error(
        "object {key:?} changed since the index was built ({detail}): run `basalt objvol refresh`"
    )]
    Changed { key: String, detail: String },
    /// The source failed (unreachable, refused, short reply).
    #[error("{0}")]
    Failed(String),
}

/// Where object bytes come from: an S3 endpoint, in production.
#[async_trait]
pub trait ObjectSource: Send + Sync + 'static {
    /// Bytes `[start, end)` of object `key`, only if its ETag is still `etag`.
    async fn get_range(
        &self,
        key: &[u8],
        etag: &str,
        start: u64,
        end: u64,
    ) -> Result<Bytes, SourceError>;
}

/// Where the stored index comes from: its bytes are block 0 (the superblock) followed by
/// the metadata region.
#[async_trait]
pub trait IndexSource: Send + Sync + 'static {
    /// Exactly `len` bytes of the index at `offset`.
    async fn read(&self, offset: u64, len: u64) -> Result<Bytes, SourceError>;
}

/// What a stretch of the device is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Bytes of the stored index.
    Index {
        offset: u64,
        len: u64,
    },
    /// Bytes `[start, end)` of an object, then `zeros` of padding.
    Object {
        key: Vec<u8>,
        etag: String,
        start: u64,
        end: u64,
        zeros: u64,
    },
    Zeros(u64),
}

/// The device of one objvol.
pub struct Reader {
    meta_block: u64,
    total_blocks: u64,
    map: ExtentMap,
    index: Arc<dyn IndexSource>,
    objects: Arc<dyn ObjectSource>,
    gets: Semaphore,
}

impl Reader {
    /// A reader of the device whose metadata region starts at `meta_block` and which has
    /// `total_blocks` blocks.
    pub fn new(
        meta_block: u64,
        total_blocks: u64,
        map: ExtentMap,
        index: Arc<dyn IndexSource>,
        objects: Arc<dyn ObjectSource>,
    ) -> Self {
        Self {
            meta_block,
            total_blocks,
            map,
            index,
            objects,
            gets: Semaphore::new(MAX_GETS_IN_FLIGHT),
        }
    }

    /// The device's size in bytes.
    pub fn size(&self) -> u64 {
        self.total_blocks * BLOCK_BYTES
    }

    /// What `[offset, offset + len)` is made of, in order.
    fn pieces(&self, offset: u64, len: u64) -> Vec<Piece> {
        let mut out = Vec::new();
        let end = offset + len;
        let meta_start = self.meta_block * BLOCK_BYTES;
        let mut at = offset;
        while at < end {
            let block = at / BLOCK_BYTES;
            let in_block = at % BLOCK_BYTES;
            if block == 0 || at >= meta_start {
                // The index: block 0, then the metadata region at index offset 4096.
                let (index_at, stop) = if block == 0 {
                    (at, end.min(BLOCK_BYTES))
                } else {
                    (BLOCK_BYTES + at - meta_start, end)
                };
                out.push(Piece::Index {
                    offset: index_at,
                    len: stop - at,
                });
                at = stop;
                continue;
            }
            let Some(found) = self.map.find(block) else {
                // A gap or padding after an empty object: zeros up to the next block.
                let stop = end.min((block + 1) * BLOCK_BYTES).min(meta_start);
                push_zeros(&mut out, stop - at);
                at = stop;
                continue;
            };
            // The object's bytes from here to the end of the request or of the object's
            // blocks, whichever comes first, then its tail padding.
            let obj_start = found.offset + in_block;
            let blocks_end = found.size.div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
            let run = (end - at).min(blocks_end - obj_start);
            let data_end = (obj_start + run).min(found.size).max(obj_start);
            let zeros = obj_start + run - data_end;
            if data_end > obj_start {
                out.push(Piece::Object {
                    key: found.key.to_vec(),
                    etag: found.etag.to_string(),
                    start: obj_start,
                    end: data_end,
                    zeros,
                });
            } else {
                push_zeros(&mut out, zeros);
            }
            at += run;
        }
        out
    }

    /// Exactly `len` bytes at `offset`, as consecutive pieces; objects are fetched
    /// concurrently (at most [`MAX_GETS_IN_FLIGHT`] GETs per reader).
    pub async fn read(&self, offset: u64, len: u64) -> Result<Vec<Bytes>, SourceError> {
        if offset.checked_add(len).is_none_or(|e| e > self.size()) {
            return Err(SourceError::Failed(format!(
                "read of {len} bytes at {offset} is past the device's {} bytes",
                self.size()
            )));
        }
        let pieces = self.pieces(offset, len);
        let fetches = pieces.iter().map(|p| self.fetch(p));
        let parts = futures::future::try_join_all(fetches).await?;
        Ok(parts.into_iter().flatten().collect())
    }

    async fn fetch(&self, piece: &Piece) -> Result<Vec<Bytes>, SourceError> {
        match piece {
            Piece::Zeros(n) => Ok(vec![zeros(*n)]),
            Piece::Index { offset, len } => Ok(vec![self.index.read(*offset, *len).await?]),
            Piece::Object {
                key,
                etag,
                start,
                end,
                zeros: pad,
            } => {
                let _permit = self
                    .gets
                    .acquire()
                    .await
                    .map_err(|_| SourceError::Failed("reader closed".into()))?;
                let data = self.objects.get_range(key, etag, *start, *end).await?;
                if data.len() as u64 != end - start {
                    return Err(SourceError::Failed(format!(
                        "object {:?}: {} bytes answered for {} asked",
                        String::from_utf8_lossy(key),
                        data.len(),
                        end - start
                    )));
                }
                let mut out = vec![data];
                if *pad > 0 {
                    out.push(zeros(*pad));
                }
                Ok(out)
            }
        }
    }
}

fn push_zeros(out: &mut Vec<Piece>, n: u64) {
    if n == 0 {
        return;
    }
    if let Some(Piece::Zeros(m)) = out.last_mut() {
        *m += n;
    } else {
        out.push(Piece::Zeros(n));
    }
}

fn zeros(n: u64) -> Bytes {
    Bytes::from(vec![0u8; n as usize])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::erofs::{Added, Writer};
    use crate::extents::Builder;
    use std::collections::BTreeMap;
    use std::io::Cursor;
    use std::sync::Mutex;

    /// The bucket as a map, counting the bytes each GET asked for; `changed` keys answer
    /// as S3 does after an overwrite (412 on If-Match).
    struct Bucket {
        objects: BTreeMap<Vec<u8>, Vec<u8>>,
        changed: Vec<Vec<u8>>,
        fetched: Mutex<u64>,
    }

    #[async_trait]
    impl ObjectSource for Bucket {
        async fn get_range(
            &self,
            key: &[u8],
            etag: &str,
            start: u64,
            end: u64,
        ) -> Result<Bytes, SourceError> {
            assert_eq!(etag, format!("etag-{}", String::from_utf8_lossy(key)));
            if self.changed.iter().any(|k| k == key) {
                return Err(SourceError::Changed {
                    key: String::from_utf8_lossy(key).into_owned(),
                    detail: "412 Precondition Failed".into(),
                });
            }
            *self.fetched.lock().unwrap() += end - start;
            Ok(Bytes::copy_from_slice(
                &self.objects[key][start as usize..end as usize],
            ))
        }
    }

    struct Index(Vec<u8>);

    #[async_trait]
    impl IndexSource for Index {
        async fn read(&self, offset: u64, len: u64) -> Result<Bytes, SourceError> {
            Ok(Bytes::copy_from_slice(
                &self.0[offset as usize..(offset + len) as usize],
            ))
        }
    }

    /// A reader over `objects` and the whole image as a block device would hold it.
    fn setup(
        objects: BTreeMap<Vec<u8>, Vec<u8>>,
        changed: Vec<Vec<u8>>,
    ) -> (Reader, Vec<u8>, Arc<Bucket>) {
        let mut w = Writer::new(Cursor::new(Vec::new()), 1_700_000_000).unwrap();
        let mut map = Builder::new(Vec::new(), Vec::new());
        let mut placed = Vec::new();
        for (k, v) in &objects {
            if let Added::File { start_block } = w.add(k, v.len() as u64, 1_600_000_000).unwrap() {
                if !v.is_empty() {
                    let etag = format!("etag-{}", String::from_utf8_lossy(k));
                    map.push(start_block, v.len() as u64, k, &etag).unwrap();
                    placed.push((start_block, k.clone()));
                }
            }
        }
        let (meta, summary) = w.finish().unwrap();
        let (records, heap, header) = map.finish().unwrap();
        let map = ExtentMap::parse(&[header.to_vec(), records, heap].concat()).unwrap();
        let mut image = vec![0u8; (summary.total_blocks * BLOCK_BYTES) as usize];
        image[..BLOCK_BYTES as usize].copy_from_slice(&summary.superblock);
        let m = (summary.meta_block * BLOCK_BYTES) as usize;
        image[m..m + meta.get_ref().len()].copy_from_slice(meta.get_ref());
        for (start, k) in &placed {
            let at = (*start * BLOCK_BYTES) as usize;
            image[at..at + objects[k].len()].copy_from_slice(&objects[k]);
        }
        let index = [summary.superblock.clone(), meta.into_inner()].concat();
        let bucket = Arc::new(Bucket {
            objects,
            changed,
            fetched: Mutex::new(0),
        });
        let reader = Reader::new(
            summary.meta_block,
            summary.total_blocks,
            map,
            Arc::new(Index(index)),
            bucket.clone(),
        );
        (reader, image, bucket)
    }

    fn objects() -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut o = BTreeMap::new();
        for (i, size) in [0usize, 1, 4095, 4096, 4097, 10_000, 70_000]
            .iter()
            .enumerate()
        {
            o.insert(
                format!("dir/f{i}").into_bytes(),
                (0..*size).map(|j| (j * 7 + i) as u8).collect(),
            );
        }
        o
    }

    async fn read_all(r: &Reader, offset: u64, len: u64) -> Vec<u8> {
        r.read(offset, len).await.unwrap().concat()
    }

    /// Goal: any range of the device reads as the image with every object's bytes in its
    /// blocks — aligned or not, across objects, padding and the index.
    #[tokio::test]
    async fn any_range_reads_as_the_image() {
        let (reader, image, _) = setup(objects(), vec![]);
        assert_eq!(reader.size(), image.len() as u64);
        assert_eq!(read_all(&reader, 0, reader.size()).await, image);
        let n = image.len() as u64;
        for (off, len) in [
            (0, 1),
            (1023, 200),
            (4095, 2),
            (4096, 8192),
            (5000, 30_000),
            (crate::erofs::DATA_START_BLOCK * BLOCK_BYTES - 100, 10_000),
            (n - 5000, 5000),
            (3, n - 3),
        ] {
            assert_eq!(
                read_all(&reader, off, len).await,
                image[off as usize..(off + len) as usize],
                "{off}+{len}"
            );
        }
        assert!(reader.read(n - 1, 2).await.is_err(), "past the end");
    }

    /// Goal: reading the metadata fetches no object byte; reading a file fetches exactly
    /// its bytes; a changed object is an error for its blocks only.
    #[tokio::test]
    async fn fetch_only_what_is_read() {
        let changed = b"dir/f5".to_vec();
        let (reader, image, bucket) = setup(objects(), vec![changed.clone()]);
        let meta = reader.meta_block * BLOCK_BYTES;
        read_all(&reader, 0, 4096).await;
        read_all(&reader, meta, reader.size() - meta).await;
        assert_eq!(*bucket.fetched.lock().unwrap(), 0);
        let first = crate::erofs::DATA_START_BLOCK;
        let f = reader.map.find(first).unwrap();
        assert_eq!(f.key, b"dir/f1");
        let at = (first * BLOCK_BYTES) as usize;
        assert_eq!(
            read_all(&reader, at as u64, 4096).await,
            image[at..at + 4096]
        );
        assert_eq!(
            *bucket.fetched.lock().unwrap(),
            1,
            "one byte object, one byte fetched"
        );
        let mut start = 0;
        for b in crate::erofs::DATA_START_BLOCK..reader.meta_block {
            if reader
                .map
                .find(b)
                .is_some_and(|f| f.key == changed.as_slice())
            {
                start = b;
                break;
            }
        }
        let e = reader.read(start * BLOCK_BYTES, 10).await.unwrap_err();
        assert!(matches!(e, SourceError::Changed { .. }), "{e}");
    }
}
