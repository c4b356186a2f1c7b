//! Reading an objvol's device: the superblock block and the metadata region come from the
//! stored index, data blocks from the bucket through the extent map (ranged GETs pinned to
//! the ETag the index was built with), padding and gaps are zeros. Reads that proceed in
//! order through an object fetch ahead of themselves ([`crate::readahead`]) into a bounded
//! cache ([`crate::cache`]) that the next reads take their bytes from. A frontend (NBD)
//! wraps a [`Reader`] as a read-only block device.

use crate::cache::{Cache, Seg};
use crate::erofs::BLOCK_BYTES;
use crate::extents::ExtentMap;
use crate::readahead::Streams;
use async_trait::async_trait;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Ranged GETs one reader keeps in flight at most for the reads it serves.
pub const MAX_GETS_IN_FLIGHT: usize = 64;
/// Ranged GETs one reader keeps in flight at most to fetch ahead (beside the others).
pub const MAX_AHEAD_GETS_IN_FLIGHT: usize = 16;
/// Bytes of fetched-ahead object data one reader keeps at most (in flight or cached).
pub const CACHE_BYTES: u64 = 64 << 20;

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
    /// Bytes `[start, end)` of an object, then `zeros` of padding; the object's first
    /// byte is at device byte `at`, it has `size` bytes.
    Object {
        key: Vec<u8>,
        etag: String,
        at: u64,
        size: u64,
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
    ahead_gets: Arc<Semaphore>,
    state: Arc<Mutex<State>>,
}

/// What the reads of a reader share: the cache and the streams fetched ahead.
struct State {
    cache: Cache,
    streams: Streams,
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
            ahead_gets: Arc::new(Semaphore::new(MAX_AHEAD_GETS_IN_FLIGHT)),
            state: Arc::new(Mutex::new(State {
                cache: Cache::new(CACHE_BYTES),
                streams: Streams::default(),
            })),
        }
    }

    /// The same reader with a cache of `bytes` (instead of [`CACHE_BYTES`]).
    pub fn with_cache_bytes(self, bytes: u64) -> Self {
        self.state.lock().expect("reader state").cache = Cache::new(bytes);
        self
    }

    /// Bytes the cache holds (in flight or ready), and its bound.
    pub fn cache_bytes(&self) -> (u64, u64) {
        let st = self.state.lock().expect("reader state");
        (st.cache.charged_bytes(), st.cache.bound_bytes())
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
                    at: block * BLOCK_BYTES - found.offset,
                    size: found.size,
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
                at,
                size,
                start,
                end,
                zeros: pad,
            } => {
                let object = Object {
                    key,
                    etag,
                    at: *at,
                    size: *size,
                };
                let segs = self.plan(&object, *start, *end);
                let parts = segs.into_iter().map(|seg| self.resolve(&object, seg));
                let mut out = futures::future::try_join_all(parts).await?;
                if *pad > 0 {
                    out.push(zeros(*pad));
                }
                Ok(out)
            }
        }
    }

    /// What the cache holds of `[start, end)` of `object`, and the GETs ahead this read
    /// starts (if it continues a stream).
    fn plan(&self, object: &Object<'_>, start: u64, end: u64) -> Vec<Seg> {
        let at = object.at;
        let mut st = self.state.lock().expect("reader state");
        let segs = st.cache.plan(at + start, at + end);
        let ahead = st.streams.on_read(at, object.size, start, end);
        'ranges: for (a, b) in ahead {
            for (x, y) in st.cache.gaps(at + a, at + b) {
                let Ok(permit) = self.ahead_gets.clone().try_acquire_owned() else {
                    st.streams.not_fetched(at, x - at);
                    break 'ranges;
                };
                let Some(tx) = st.cache.reserve(x, y) else {
                    st.streams.not_fetched(at, x - at);
                    break 'ranges;
                };
                let (objects, state) = (self.objects.clone(), self.state.clone());
                let (key, etag, size) = (object.key.to_vec(), object.etag.to_string(), object.size);
                tokio::spawn(async move {
                    let _permit = permit;
                    let got = objects.get_range(&key, &etag, x - at, y - at).await;
                    let got = got.and_then(|d| exact(d, &key, y - x));
                    {
                        let mut st = state.lock().expect("reader state");
                        st.cache.fill(x, &got);
                        if matches!(got, Err(SourceError::Changed { .. })) {
                            st.cache.drop_range(at, at + size);
                        }
                    }
                    // After the fill: a waiter woken by this finds the run ready to take.
                    let _ = tx.send(Some(got));
                });
            }
        }
        segs
    }

    /// The bytes of one segment of a read: cached, fetched ahead by another GET, or
    /// fetched now.
    async fn resolve(&self, object: &Object<'_>, seg: Seg) -> Result<Bytes, SourceError> {
        let at = object.at;
        match seg {
            Seg::Hit(bytes) => Ok(bytes),
            Seg::Miss { a, b } => self.get(object, a - at, b - at).await,
            Seg::Wait {
                mut rx,
                run_start,
                a,
                b,
            } => {
                let outcome = rx
                    .wait_for(Option::is_some)
                    .await
                    .ok()
                    .and_then(|o| o.clone());
                match outcome {
                    Some(Ok(data)) => {
                        self.state.lock().expect("reader state").cache.take(a, b);
                        Ok(data.slice((a - run_start) as usize..(b - run_start) as usize))
                    }
                    Some(Err(e @ SourceError::Changed { .. })) => Err(e),
                    // The GET ahead failed otherwise (or went): fetch the bytes now.
                    Some(Err(SourceError::Failed(_))) | None => {
                        self.get(object, a - at, b - at).await
                    }
                }
            }
        }
    }

    /// Bytes `[start, end)` of `object` from the bucket, now.
    async fn get(&self, object: &Object<'_>, start: u64, end: u64) -> Result<Bytes, SourceError> {
        let _permit = self
            .gets
            .acquire()
            .await
            .map_err(|_| SourceError::Failed("reader closed".into()))?;
        let got = self
            .objects
            .get_range(object.key, object.etag, start, end)
            .await
            .and_then(|d| exact(d, object.key, end - start));
        if matches!(got, Err(SourceError::Changed { .. })) {
            // Nothing cached of it may be served any more.
            let mut st = self.state.lock().expect("reader state");
            st.cache.drop_range(object.at, object.at + object.size);
        }
        got
    }
}

/// The object a piece of a read comes from.
struct Object<'a> {
    key: &'a [u8],
    etag: &'a str,
    /// Its first byte on the device, and its size.
    at: u64,
    size: u64,
}

/// `data`, if it is the `len` bytes asked of `key`.
fn exact(data: Bytes, key: &[u8], len: u64) -> Result<Bytes, SourceError> {
    if data.len() as u64 == len {
        Ok(data)
    } else {
        Err(SourceError::Failed(format!(
            "object {:?}: {} bytes answered for {len} asked",
            String::from_utf8_lossy(key),
            data.len(),
        )))
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
        changed: Mutex<Vec<Vec<u8>>>,
        fetched: Mutex<u64>,
        gets: Mutex<u64>,
    }

    impl Bucket {
        fn change(&self, key: &[u8]) {
            self.changed.lock().unwrap().push(key.to_vec());
        }

        fn gets(&self) -> u64 {
            *self.gets.lock().unwrap()
        }

        fn fetched(&self) -> u64 {
            *self.fetched.lock().unwrap()
        }
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
            assert!(
                end <= self.objects[key].len() as u64,
                "a GET past the object's end"
            );
            if self.changed.lock().unwrap().iter().any(|k| k == key) {
                return Err(SourceError::Changed {
                    key: String::from_utf8_lossy(key).into_owned(),
                    detail: "412 Precondition Failed".into(),
                });
            }
            *self.fetched.lock().unwrap() += end - start;
            *self.gets.lock().unwrap() += 1;
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
            changed: Mutex::new(changed),
            fetched: Mutex::new(0),
            gets: Mutex::new(0),
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

    /// The device byte where object `key` starts, and its size.
    fn place(reader: &Reader, key: &[u8]) -> (u64, u64) {
        (crate::erofs::DATA_START_BLOCK..reader.meta_block)
            .find_map(|b| {
                let f = reader.map.find(b)?;
                (f.key == key).then_some((b * BLOCK_BYTES, f.size))
            })
            .expect("the object is mapped")
    }

    /// Wait (bounded) until no GET ahead is in flight.
    async fn settle(reader: &Reader) {
        for _ in 0..100_000 {
            if reader.ahead_gets.available_permits() == MAX_AHEAD_GETS_IN_FLIGHT {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("GETs ahead still in flight");
    }

    fn big(n: usize, seed: usize) -> Vec<u8> {
        (0..n).map(|j| (j / 4096 + j * 31 + seed) as u8).collect()
    }

    /// Goal: reading a large object in order in 128 KiB requests, four at a time as a
    /// kernel does, turns into few large GETs (not one per request) that fetch its bytes
    /// exactly once and never past its end, and the bytes are the image's.
    #[tokio::test]
    async fn sequential_reads_become_few_large_gets() {
        let mut objects = objects();
        let size = (16 << 20) + 1000;
        objects.insert(b"big/model.bin".to_vec(), big(size, 1));
        let (reader, image, bucket) = setup(objects, vec![]);
        let (at, _) = place(&reader, b"big/model.bin");
        let end = at + (size as u64).div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        let step = 128 << 10;
        let mut requests = 0;
        let mut off = at;
        while off < end {
            let batch: Vec<(u64, u64)> = (0..4)
                .map(|i| off + i * step)
                .filter(|o| *o < end)
                .map(|o| (o, step.min(end - o)))
                .collect();
            let got =
                futures::future::join_all(batch.iter().map(|(o, l)| reader.read(*o, *l))).await;
            for ((o, l), g) in batch.iter().zip(got) {
                assert_eq!(
                    g.unwrap().concat(),
                    image[*o as usize..(*o + *l) as usize],
                    "read at {o}"
                );
                requests += 1;
            }
            off += 4 * step;
        }
        settle(&reader).await;
        assert_eq!(
            bucket.fetched(),
            size as u64,
            "every byte once, none past the end"
        );
        assert!(
            bucket.gets() * 5 <= requests,
            "{} GETs for {requests} reads",
            bucket.gets()
        );
        assert_eq!(
            reader.state.lock().unwrap().cache.ready_bytes(),
            0,
            "all taken"
        );
    }

    /// Goal: with many objects read in order at once, the cache never holds more than its
    /// bound (GETs ahead are skipped when it is full) and every read is still right.
    #[tokio::test]
    async fn the_cache_stays_within_its_bound() {
        let mut objects = BTreeMap::new();
        let size = 3 << 20;
        for i in 0..8 {
            objects.insert(format!("s/{i}").into_bytes(), big(size, i));
        }
        let (reader, image, bucket) = setup(objects.clone(), vec![]);
        let bound = 1 << 20;
        let reader = reader.with_cache_bytes(bound);
        let places: Vec<u64> = objects.keys().map(|k| place(&reader, k).0).collect();
        let step = 64 << 10;
        for o in (0..size as u64).step_by(step as usize) {
            for at in &places {
                let got = reader.read(at + o, step).await.unwrap().concat();
                assert_eq!(got, image[(at + o) as usize..(at + o + step) as usize]);
                let (held, b) = reader.cache_bytes();
                assert!(held <= b && b == bound, "{held} bytes held, bound {b}");
            }
        }
        settle(&reader).await;
        assert!(bucket.fetched() >= 8 * size as u64);
    }

    /// Goal: an object that changed is an error for its blocks — for blocks a GET ahead
    /// fetches after the change, and for blocks fetched ahead before it once any GET has
    /// seen the change — never other bytes; other objects still read.
    #[tokio::test]
    async fn a_changed_object_fails_also_where_fetched_ahead() {
        let size = 8 << 20;
        let mut objects = objects();
        objects.insert(b"big/a".to_vec(), big(size, 2));
        objects.insert(b"big/b".to_vec(), big(size, 3));
        let (reader, image, bucket) = setup(objects, vec![]);
        let step = 128 << 10;

        // a: two reads in order start GETs ahead; the object changes before they run.
        let (a, _) = place(&reader, b"big/a");
        reader.read(a, step).await.unwrap();
        reader.read(a + step, step).await.unwrap();
        bucket.change(b"big/a");
        let e = reader.read(a + 2 * step, step).await.unwrap_err();
        assert!(matches!(e, SourceError::Changed { .. }), "{e}");
        settle(&reader).await;
        for o in [3 * step, 4 * step, size as u64 - step] {
            let e = reader.read(a + o, step).await.unwrap_err();
            assert!(matches!(e, SourceError::Changed { .. }), "at {o}: {e}");
        }

        // b: fetched ahead (and cached) before the change; a GET that sees the change
        // drops what was cached, so those blocks fail too.
        let (b, _) = place(&reader, b"big/b");
        reader.read(b, step).await.unwrap();
        reader.read(b + step, step).await.unwrap();
        settle(&reader).await;
        assert!(reader.state.lock().unwrap().cache.ready_bytes() > 2 * step);
        bucket.change(b"big/b");
        let e = reader.read(b + size as u64 - step, step).await.unwrap_err();
        assert!(matches!(e, SourceError::Changed { .. }), "{e}");
        let e = reader.read(b + 2 * step, step).await.unwrap_err();
        assert!(
            matches!(e, SourceError::Changed { .. }),
            "cached ahead: {e}"
        );

        // The others are untouched.
        let (f6, _) = place(&reader, b"dir/f6");
        assert_eq!(
            read_all(&reader, f6, 8192).await,
            image[f6 as usize..f6 as usize + 8192]
        );
    }
}
