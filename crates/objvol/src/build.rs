//! Building an objvol's index from a bucket's listing, fed to the EROFS writer and the
//! extent map in key order, both streaming to temporary files.
//!
//! The listing is split by key ranges and listed concurrently: a range `(after, upto]` is
//! listed page by page (`StartAfter` the last key); when a page shows where its keys vary
//! (the first byte where its first and last keys differ, a digit or a letter), it proposes
//! to split the rest of the range at the next values of a byte there or above (`img-00011…`
//! → `…2`, `…3`, … `…9` and what follows), each part its own range; the next page takes
//! the split only if it lies within the first part (else the keys are not shaped as the
//! page suggested — `class-0000/img-0999` is followed by `class-0001/img-1000` — and the
//! range goes on in one stream, at no cost). Ranges are consumed in order, at most
//! [`LISTERS`] listed at once, each at most [`PAGES_AHEAD`] pages ahead of the writer, so a
//! flat bucket lists as fast as a nested one and memory stays bounded.

use crate::erofs::{Added, Summary, Writer};
use crate::extents::{Builder, ExtentError};
use crate::reader::SourceError;
use async_trait::async_trait;
use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Key ranges listed at once.
pub const LISTERS: usize = 8;
/// Pages a range's lister may run ahead of the writer.
pub const PAGES_AHEAD: usize = 8;

/// One listed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// The whole key (the volume's prefix included).
    pub key: String,
    pub size: u64,
    pub etag: String,
    /// Last modified, Unix seconds.
    pub mtime: u64,
}

/// One page of a listing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Page {
    pub objects: Vec<Listed>,
    /// Whether more keys follow the last one.
    pub more: bool,
}

/// Where a listing comes from: an S3 endpoint, in production.
#[async_trait]
pub trait Lister: Send + Sync + 'static {
    /// One page of the keys under `prefix` after `start_after` (from the first: None), in
    /// key order.
    async fn page(&self, prefix: &str, start_after: Option<&str>) -> Result<Page, SourceError>;
}

/// Why an index could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("listing the bucket: {0}")]
    List(#[from] SourceError),
    #[error(transparent)]
    Image(#[from] crate::erofs::ErofsError),
    #[error(transparent)]
    Extents(#[from] ExtentError),
    #[error("temporary files: {0}")]
    Io(#[from] std::io::Error),
}

/// A built index, in temporary files.
pub struct Built {
    pub summary: Summary,
    /// The metadata region (from offset 0).
    pub meta: File,
    /// The extent map: header, then the records' file, then the heap's.
    pub extents_header: Vec<u8>,
    pub extent_records: File,
    pub extent_heap: File,
    /// Bytes of the extent map.
    pub extents_bytes: u64,
    /// Bytes of the objects in the filesystem.
    pub data_bytes: u64,
    /// Time spent waiting for the listing, and in all.
    pub listing: Duration,
    pub total: Duration,
}

impl Built {
    /// The extent map, read back from its files (which are left at their start).
    pub fn extent_map(&mut self) -> Result<crate::extents::ExtentMap, BuildError> {
        use std::io::Read;
        let mut bytes = self.extents_header.clone();
        for f in [&mut self.extent_records, &mut self.extent_heap] {
            f.seek(SeekFrom::Start(0))?;
            f.read_to_end(&mut bytes)?;
            f.seek(SeekFrom::Start(0))?;
        }
        Ok(crate::extents::ExtentMap::parse(&bytes)?)
    }
}

/// What a build reports as it goes (objects listed so far).
pub type ListingProgress<'a> = &'a (dyn Fn(u64) + Send + Sync);

/// Build the index of the objects under `prefix` (keys relative to it become paths),
/// temporary files in `tmp`.
pub async fn build(
    lister: Arc<dyn Lister>,
    prefix: &str,
    tmp: &std::path::Path,
    built_at: u64,
    progress: ListingProgress<'_>,
) -> Result<Built, BuildError> {
    let started = Instant::now();
    let meta = tempfile::tempfile_in(tmp)?;
    let records = tempfile::tempfile_in(tmp)?;
    let heap = tempfile::tempfile_in(tmp)?;
    let mut writer = Writer::new(BufWriter::with_capacity(1 << 20, meta), built_at)?;
    let mut extents = Builder::new(
        BufWriter::with_capacity(1 << 20, records),
        BufWriter::with_capacity(1 << 20, heap),
    );
    let mut waited = Duration::ZERO;
    let mut listed = 0u64;
    let mut data_bytes = 0u64;
    let mut add = |o: &Listed| -> Result<(), BuildError> {
        let rel = &o.key.as_bytes()[prefix.len().min(o.key.len())..];
        if rel.is_empty() {
            return Ok(());
        }
        if let Added::File { start_block } = writer.add(rel, o.size, o.mtime)? {
            if o.size > 0 {
                extents.push(start_block, o.size, o.key.as_bytes(), &o.etag)?;
            }
            data_bytes += o.size;
        }
        listed += 1;
        if listed.is_multiple_of(10_000) {
            progress(listed);
        }
        Ok(())
    };
    waited += list(&lister, prefix, &mut add).await?;
    progress(listed);
    let (meta, summary) = writer.finish()?;
    let (records, heap, header) = extents.finish()?;
    let mut meta = meta.into_inner().map_err(|e| e.into_error())?;
    let mut records = records.into_inner().map_err(|e| e.into_error())?;
    let mut heap = heap.into_inner().map_err(|e| e.into_error())?;
    let extents_bytes =
        header.len() as u64 + records.seek(SeekFrom::End(0))? + heap.seek(SeekFrom::End(0))?;
    meta.seek(SeekFrom::Start(0))?;
    records.seek(SeekFrom::Start(0))?;
    heap.seek(SeekFrom::Start(0))?;
    Ok(Built {
        summary,
        meta,
        extents_header: header.to_vec(),
        extent_records: records,
        extent_heap: heap,
        extents_bytes,
        data_bytes,
        listing: waited,
        total: started.elapsed(),
    })
}

/// Keys `k` with `after < k <= upto` (None: from the first, to the last).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Range {
    after: Option<String>,
    upto: Option<String>,
}

/// What a range's lister sends, in order.
enum Msg {
    Page(Vec<Listed>),
    /// The rest of the range is these ranges (in order).
    Split(Vec<Range>),
    /// The range is listed.
    End,
}

type Rx = mpsc::Receiver<Result<Msg, SourceError>>;

/// List every key under `prefix` in key order, split by key ranges, handing each object to
/// `add`; returns the time spent waiting for the listing.
pub async fn list(
    lister: &Arc<dyn Lister>,
    prefix: &str,
    add: &mut (dyn FnMut(&Listed) -> Result<(), BuildError> + Send),
) -> Result<Duration, BuildError> {
    let mut waited = Duration::ZERO;
    let mut queue: VecDeque<(Range, Option<Rx>)> = VecDeque::new();
    queue.push_back((
        Range {
            after: None,
            upto: None,
        },
        None,
    ));
    // Bound: every message consumed is a page of a finite listing, a split (which ends its
    // range's lister) or an end (which removes a range).
    loop {
        let mut running = queue.iter().filter(|(_, rx)| rx.is_some()).count();
        for (range, rx) in queue.iter_mut() {
            if running >= LISTERS {
                break;
            }
            if rx.is_none() {
                *rx = Some(spawn_lister(
                    lister.clone(),
                    prefix.to_string(),
                    range.clone(),
                ));
                running += 1;
            }
        }
        let Some((range, Some(rx))) = queue.front_mut() else {
            return Ok(waited);
        };
        let t = Instant::now();
        let msg = rx.recv().await;
        waited += t.elapsed();
        match msg {
            None => {
                return Err(BuildError::List(SourceError::Failed(format!(
                    "the listing of {prefix:?} after {:?} stopped",
                    range.after
                ))))
            }
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(Msg::Page(objects))) => {
                for o in &objects {
                    add(o)?;
                }
            }
            Some(Ok(Msg::End)) => {
                queue.pop_front();
            }
            Some(Ok(Msg::Split(parts))) => {
                queue.pop_front();
                for part in parts.into_iter().rev() {
                    queue.push_front((part, None));
                }
            }
        }
    }
}

/// List `range` in a task of its own, its messages on the channel returned.
fn spawn_lister(lister: Arc<dyn Lister>, prefix: String, range: Range) -> Rx {
    let (tx, rx) = mpsc::channel(PAGES_AHEAD);
    tokio::spawn(async move {
        let mut after = range.after.clone();
        let mut proposed: Option<Vec<Range>> = None;
        // Bound: each round lists a page further (keys strictly increase), up to the
        // range's end or the listing's.
        loop {
            let page = match lister.page(&prefix, after.as_deref()).await {
                Ok(p) => p,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let mut objects = page.objects;
            let mut done = !page.more || objects.is_empty();
            if after
                .as_deref()
                .zip(objects.first())
                .is_some_and(|(a, o)| o.key.as_str() <= a)
            {
                let _ = tx
                    .send(Err(SourceError::Failed(format!(
                        "the listing went back: {:?} after {after:?}",
                        objects[0].key
                    ))))
                    .await;
                return;
            }
            if let Some(upto) = &range.upto {
                if let Some(i) = objects.iter().position(|o| o.key.as_str() > upto.as_str()) {
                    objects.truncate(i);
                    done = true;
                }
            }
            // A split the page before proposed is taken only if this page lies within its
            // first part (the density it assumed holds there); the keys listed so far stay
            // in this range, the first part starts after them.
            let mut parts = proposed.take().filter(|parts| {
                let first_upto = parts[0].upto.as_deref().unwrap_or_default();
                !done && objects.last().is_some_and(|o| o.key.as_str() <= first_upto)
            });
            if let (Some(parts), Some(last)) = (parts.as_mut(), objects.last()) {
                parts[0].after = Some(last.key.clone());
            }
            if parts.is_none() && !done {
                proposed = split(&prefix, &objects, range.upto.as_deref());
            }
            after = objects.last().map(|o| o.key.clone());
            if tx.send(Ok(Msg::Page(objects))).await.is_err() {
                return;
            }
            if let Some(parts) = parts {
                let _ = tx.send(Ok(Msg::Split(parts))).await;
                return;
            }
            if done {
                let _ = tx.send(Ok(Msg::End)).await;
                return;
            }
        }
    });
    rx
}

/// Keys a split aims to put in each part: a few pages, so that listers do not wait on
/// the writer for long nor list mostly empty parts.
const SPLIT_KEYS: f64 = 4000.0;

/// The largest byte of the kind of `c` (digit, lower or upper case letter) and how many
/// values that kind has; None for other bytes.
fn kind(c: u8) -> Option<(u8, u8)> {
    match c {
        b'0'..=b'9' => Some((b'9', 10)),
        b'a'..=b'z' => Some((b'z', 26)),
        b'A'..=b'Z' => Some((b'Z', 26)),
        _ => None,
    }
}

/// The rest of a range after a page of `objects` (keys under `prefix`, more follow), split
/// where keys vary: at a byte position `p` no deeper than the first where the page's first
/// and last keys differ, into the next values of the last key's byte there (of the same
/// kind: `img-00011…` → `img-0002`, … `img-0009`) and what follows. The position is the
/// deepest whose parts hold about [`SPLIT_KEYS`] keys by the page's density (else the
/// shallowest that splits). None if no position splits the rest of the range.
fn split(prefix: &str, objects: &[Listed], upto: Option<&str>) -> Option<Vec<Range>> {
    let first = objects.first()?.key.as_bytes();
    let last_key = &objects.last()?.key;
    let last = last_key.as_bytes();
    let at = prefix.len()
        + first[prefix.len()..]
            .iter()
            .zip(&last[prefix.len()..])
            .take_while(|(a, b)| a == b)
            .count();
    let (_, width_at) = kind(*last.get(at)?)?;
    // A first key that ends here (a prefix of the last) counts as the lowest byte.
    let span = f64::from(last[at].saturating_sub(first.get(at).copied().unwrap_or(0))) + 1.0;
    let bounds_at = |p: usize| -> Vec<String> {
        let Some((top, _)) = kind(last[p]) else {
            return Vec::new();
        };
        // The byte is ASCII, so the bytes before it end on a character boundary.
        let stem = &last_key[..p];
        ((last[p] + 1)..=top)
            .map(|n| format!("{stem}{}", char::from(n)))
            .filter(|b| upto.is_none_or(|u| b.as_str() < u))
            .collect()
    };
    // Keys per value of the byte at `p`, by the page's density (`width_at` values per
    // byte shallower than `at`).
    let per_value =
        |p: usize| objects.len() as f64 / span * f64::from(width_at).powi((at - p) as i32);
    let mut chosen: Option<Vec<String>> = None;
    for p in (prefix.len()..=at).rev() {
        let bounds = bounds_at(p);
        if bounds.is_empty() {
            continue;
        }
        let enough = per_value(p) >= SPLIT_KEYS;
        chosen = Some(bounds);
        if enough {
            break;
        }
    }
    let bounds = chosen?;
    let mut parts = Vec::with_capacity(bounds.len() + 1);
    let mut after = last_key.clone();
    for b in bounds {
        parts.push(Range {
            after: Some(std::mem::replace(&mut after, b.clone())),
            upto: Some(b),
        });
    }
    parts.push(Range {
        after: Some(after),
        upto: upto.map(str::to_string),
    });
    Some(parts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Read;

    /// ListObjectsV2's semantics over a sorted map (pages of `page_size`, StartAfter),
    /// counting requests and the most in flight at once; the end-to-end tests list a real
    /// gateway.
    struct Bucket {
        keys: BTreeMap<String, u64>,
        page_size: usize,
        requests: std::sync::atomic::AtomicU64,
        in_flight: std::sync::atomic::AtomicU64,
        most_in_flight: std::sync::atomic::AtomicU64,
    }

    impl Bucket {
        fn new(keys: BTreeMap<String, u64>, page_size: usize) -> Arc<Self> {
            Arc::new(Self {
                keys,
                page_size,
                requests: Default::default(),
                in_flight: Default::default(),
                most_in_flight: Default::default(),
            })
        }
    }

    #[async_trait]
    impl Lister for Bucket {
        async fn page(&self, prefix: &str, start_after: Option<&str>) -> Result<Page, SourceError> {
            use std::sync::atomic::Ordering::SeqCst;
            self.requests.fetch_add(1, SeqCst);
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most_in_flight.fetch_max(now, SeqCst);
            // Let other listers run, as a network round trip would.
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
            self.in_flight.fetch_sub(1, SeqCst);
            let from = match start_after {
                Some(a) if a >= prefix => std::ops::Bound::Excluded(a.to_string()),
                _ => std::ops::Bound::Included(prefix.to_string()),
            };
            let mut under = self
                .keys
                .range((from, std::ops::Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix));
            let objects: Vec<Listed> = under
                .by_ref()
                .take(self.page_size)
                .map(|(k, size)| Listed {
                    key: k.clone(),
                    size: *size,
                    etag: format!("e{size}"),
                    mtime: 1_600_000_000,
                })
                .collect();
            Ok(Page {
                objects,
                more: under.next().is_some(),
            })
        }
    }

    /// Every key under `prefix` by one stream of pages, the reference.
    async fn one_stream(bucket: &Bucket, prefix: &str) -> Vec<Listed> {
        let mut out: Vec<Listed> = Vec::new();
        loop {
            let after = out.last().map(|o| o.key.clone());
            let page = bucket.page(prefix, after.as_deref()).await.unwrap();
            out.extend(page.objects);
            if !page.more {
                return out;
            }
        }
    }

    /// Goal: a bucket listed split by key ranges gives exactly the one-stream listing —
    /// flat buckets of numbered and of hashed names, nested prefixes, keys that end where
    /// others go on, odd bytes — and a flat bucket is listed by several listers at once.
    #[tokio::test]
    async fn split_listing_equals_one_stream() {
        let mut shapes: Vec<(&str, BTreeMap<String, u64>, bool)> = Vec::new();
        let numbered = (0..30_000)
            .map(|i| (format!("data/img-{i:07}.jpg"), i % 1000))
            .collect();
        shapes.push(("numbered", numbered, true));
        let hashed = (0..20_000u64)
            .map(|i| {
                let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 8;
                (format!("data/{h:014x}"), i)
            })
            .collect();
        shapes.push(("hashed", hashed, true));
        // A training set's shape: numbers that go on across classes, so a page's last key
        // suggests parts (`class-0000/img-0001…`) that are empty.
        let classes = (0..20_000u64)
            .map(|i| (format!("data/class-{:04}/img-{i:08}.jpg", i / 2000), i))
            .collect();
        shapes.push(("classes", classes, false));
        let mut odd = BTreeMap::new();
        for (i, k) in [
            "a", "a-b", "a.c", "a/x", "a/y/z", "B", "b/1", "Z9", "z", "z0", "zz", "~", "ü/x", "9",
            "90", "9/a", "!x", " space",
        ]
        .iter()
        .enumerate()
        {
            odd.insert(format!("data/{k}"), i as u64);
        }
        for i in 0..3000 {
            odd.insert(format!("data/m/{}/{i}", i % 7), i);
            odd.insert(format!("data/A{i}"), i);
        }
        odd.insert("other/outside".into(), 1);
        odd.insert("dat".into(), 1);
        shapes.push(("odd", odd, false));
        for (name, keys, flat) in shapes {
            for page_size in [7, 100, 1000] {
                let bucket = Bucket::new(keys.clone(), page_size);
                let want = one_stream(&bucket, "data/").await;
                let pages = bucket.requests.load(std::sync::atomic::Ordering::SeqCst);
                let lister: Arc<dyn Lister> = bucket.clone();
                let mut got = Vec::new();
                list(&lister, "data/", &mut |o: &Listed| {
                    got.push(o.clone());
                    Ok(())
                })
                .await
                .unwrap();
                assert_eq!(got.len(), want.len(), "{name}, pages of {page_size}");
                assert!(
                    got == want,
                    "{name}, pages of {page_size}: not the same listing"
                );
                let most = bucket
                    .most_in_flight
                    .load(std::sync::atomic::Ordering::SeqCst);
                if flat && page_size == 100 {
                    assert!(most >= 4, "{name}: at most {most} listers at once");
                }
                assert!(most <= LISTERS as u64, "{name}: {most} listers at once");
                // Waste is bounded, not small: a part that turns out empty costs a request
                // (5x one stream's requests for classes of two pages at pages of 1000).
                let requests = bucket.requests.load(std::sync::atomic::Ordering::SeqCst) - pages;
                assert!(
                    requests <= 5 * pages + 4 * LISTERS as u64,
                    "{name}, pages of {page_size}: {requests} requests, {pages} in one stream"
                );
            }
        }
    }

    /// Goal: the concurrent, range-split listing feeds the writer every object once, in
    /// key order (objects beside prefixes, `a-b` before `a/`), whatever the page size.
    #[tokio::test]
    async fn every_object_once_in_order() {
        let mut keys = BTreeMap::new();
        for k in [
            "top",
            "a-b",
            "a.c",
            "a/x",
            "a/y/z",
            "b/1",
            "b/2",
            "c",
            "d/e/f",
            "vol/not-under",
        ] {
            keys.insert(format!("data/{k}"), k.len() as u64 * 1000);
        }
        for i in 0..250 {
            keys.insert(format!("data/many/{i:04}"), 10);
        }
        keys.insert("other/outside".into(), 5);
        for page_size in [1, 3, 1000] {
            let bucket = Bucket::new(keys.clone(), page_size);
            let dir = tempfile::tempdir().unwrap();
            let built = build(bucket, "data/", dir.path(), 1_700_000_000, &|_| {})
                .await
                .unwrap();
            assert_eq!(built.summary.files, 260, "page size {page_size}");
            assert_eq!(built.summary.skipped_count, 0);
            let mut bytes = built.extents_header.clone();
            let (mut r, mut h) = (built.extent_records, built.extent_heap);
            r.read_to_end(&mut bytes).unwrap();
            h.read_to_end(&mut bytes).unwrap();
            assert_eq!(bytes.len() as u64, built.extents_bytes);
            let map = crate::extents::ExtentMap::parse(&bytes).unwrap();
            assert_eq!(map.len(), 260);
            let f = map.find(crate::erofs::DATA_START_BLOCK).unwrap();
            assert_eq!(f.key, b"data/a-b", "the first object in key order");
        }
    }
}
