//! Building an objvol's index from a bucket's listing: the listing is split by the first
//! level of prefixes and listed concurrently (each prefix a bounded stream), fed to the
//! EROFS writer and the extent map in key order, both streaming to temporary files.

use crate::erofs::{Added, Summary, Writer};
use crate::extents::{Builder, ExtentError};
use crate::reader::SourceError;
use async_trait::async_trait;
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Prefixes listed at once.
pub const LISTERS: usize = 8;
/// Pages a prefix's lister may run ahead of the writer.
const PAGES_AHEAD: usize = 4;

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
    /// Common prefixes (with a delimiter).
    pub prefixes: Vec<String>,
    /// Where the next page starts (None: this was the last).
    pub next: Option<String>,
}

/// Where a listing comes from: an S3 endpoint, in production.
#[async_trait]
pub trait Lister: Send + Sync + 'static {
    /// One page of the keys under `prefix` (with `delimiter`, grouped by it), from the
    /// continuation `token` of the page before.
    async fn page(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<&str>,
    ) -> Result<Page, SourceError>;
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

/// What a build reports as it goes (objects listed so far).
pub type Progress<'a> = &'a (dyn Fn(u64) + Send + Sync);

/// Build the index of the objects under `prefix` (keys relative to it become paths),
/// temporary files in `tmp`.
pub async fn build(
    lister: Arc<dyn Lister>,
    prefix: &str,
    tmp: &std::path::Path,
    built_at: u64,
    progress: Progress<'_>,
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
    // The first level: objects beside it and prefixes, each prefix then listed whole by
    // its own task, at most LISTERS ahead, consumed in key order.
    let mut token: Option<String> = None;
    let mut pending: std::collections::VecDeque<(
        String,
        mpsc::Receiver<Result<Page, SourceError>>,
    )> = Default::default();
    let mut queued: std::collections::VecDeque<String> = Default::default();
    // Objects and prefixes of the first level interleave in key order.
    enum Item {
        Object(Listed),
        Prefix(String),
    }
    loop {
        let t = Instant::now();
        let page = lister.page(prefix, Some("/"), token.as_deref()).await?;
        waited += t.elapsed();
        let mut items: Vec<Item> = page.objects.into_iter().map(Item::Object).collect();
        items.extend(page.prefixes.into_iter().map(Item::Prefix));
        items.sort_by(|a, b| {
            let k = |i: &Item| match i {
                Item::Object(o) => o.key.clone(),
                Item::Prefix(p) => p.clone(),
            };
            k(a).cmp(&k(b))
        });
        for item in items {
            match item {
                Item::Object(o) => {
                    // Everything before it must be written first: drain the prefixes.
                    drain(&lister, &mut pending, &mut queued, &mut add, &mut waited).await?;
                    add(&o)?;
                }
                Item::Prefix(p) => {
                    queued.push_back(p);
                    start_listers(&lister, &mut pending, &mut queued);
                }
            }
        }
        token = page.next;
        if token.is_none() {
            break;
        }
    }
    drain(&lister, &mut pending, &mut queued, &mut add, &mut waited).await?;
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

/// Start listers for queued prefixes while fewer than [`LISTERS`] run.
fn start_listers(
    lister: &Arc<dyn Lister>,
    pending: &mut std::collections::VecDeque<(String, mpsc::Receiver<Result<Page, SourceError>>)>,
    queued: &mut std::collections::VecDeque<String>,
) {
    while pending.len() < LISTERS {
        let Some(prefix) = queued.pop_front() else {
            return;
        };
        let (tx, rx) = mpsc::channel(PAGES_AHEAD);
        let lister = lister.clone();
        let p = prefix.clone();
        tokio::spawn(async move {
            let mut token: Option<String> = None;
            loop {
                let page = lister.page(&p, None, token.as_deref()).await;
                let next = page.as_ref().ok().and_then(|pg| pg.next.clone());
                let failed = page.is_err();
                if tx.send(page).await.is_err() || failed {
                    return;
                }
                match next {
                    Some(t) => token = Some(t),
                    None => return,
                }
            }
        });
        pending.push_back((prefix, rx));
    }
}

/// Write every prefix listed so far, in order, starting listers as slots free.
async fn drain(
    lister: &Arc<dyn Lister>,
    pending: &mut std::collections::VecDeque<(String, mpsc::Receiver<Result<Page, SourceError>>)>,
    queued: &mut std::collections::VecDeque<String>,
    add: &mut impl FnMut(&Listed) -> Result<(), BuildError>,
    waited: &mut Duration,
) -> Result<(), BuildError> {
    while !pending.is_empty() || !queued.is_empty() {
        start_listers(lister, pending, queued);
        let Some((prefix, mut rx)) = pending.pop_front() else {
            continue;
        };
        loop {
            let t = Instant::now();
            let page = rx.recv().await;
            *waited += t.elapsed();
            let Some(page) = page else {
                return Err(BuildError::List(SourceError::Failed(format!(
                    "the listing of {prefix:?} stopped"
                ))));
            };
            let page = page?;
            for o in &page.objects {
                add(o)?;
            }
            if page.next.is_none() {
                break;
            }
        }
        start_listers(lister, pending, queued);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::io::Read;

    /// ListObjectsV2's semantics over a sorted map (pages of `page_size`), for the
    /// ordering logic; the end-to-end tests list a real gateway.
    struct Bucket {
        keys: BTreeMap<String, u64>,
        page_size: usize,
    }

    #[async_trait]
    impl Lister for Bucket {
        async fn page(
            &self,
            prefix: &str,
            delimiter: Option<&str>,
            token: Option<&str>,
        ) -> Result<Page, SourceError> {
            let mut page = Page::default();
            let mut n = 0;
            let start = token.unwrap_or(prefix).to_string();
            let mut last_prefix: Option<String> = None;
            // The continuation: the last key or common prefix returned.
            let mut last_item: Option<String> = None;
            for (k, size) in self.keys.range(start.clone()..) {
                // After a common prefix, S3 resumes past every key under it.
                let after_prefix =
                    delimiter.is_some() && start.ends_with('/') && k.starts_with(&start);
                if token.is_some() && (*k == start || after_prefix) {
                    continue;
                }
                if !k.starts_with(prefix) {
                    break;
                }
                if n == self.page_size {
                    page.next = last_item.take();
                    break;
                }
                let rest = &k[prefix.len()..];
                if let (Some(d), Some(i)) = (delimiter, delimiter.and_then(|d| rest.find(d))) {
                    let p = format!("{prefix}{}", &rest[..i + d.len()]);
                    if last_prefix.as_deref() != Some(p.as_str()) {
                        page.prefixes.push(p.clone());
                        last_item = Some(p.clone());
                        last_prefix = Some(p);
                        n += 1;
                    }
                    continue;
                }
                page.objects.push(Listed {
                    key: k.clone(),
                    size: *size,
                    etag: format!("e{size}"),
                    mtime: 1_600_000_000,
                });
                last_item = Some(k.clone());
                n += 1;
            }
            Ok(page)
        }
    }

    /// Goal: the concurrent, prefix-split listing feeds the writer every object once, in
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
            let bucket = Arc::new(Bucket {
                keys: keys.clone(),
                page_size,
            });
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
