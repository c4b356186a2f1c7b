//! The bucket index: for every object key, its entry (size, ETag, where its data is, its
//! headers and metadata), kept in cluster data rather than in the metadata store.
//!
//! The index of a bucket is `index_shards` KV table objects (the OSD's KV object class,
//! `basalt_proto::kv`) under the bucket's inode; a key lives in shard `crc32c(key) % shards`.
//! Every update of a shard is one atomic edit applied by its PG's primary and replicated like
//! a write. Listing merges the shards' sorted pages. Two more sets of tables sit beside the
//! index, sharded the same way by their own keys: *intents* (data being written that no
//! entry references yet, so space of interrupted uploads can be reclaimed) and *uploads*
//! (multipart uploads in progress and their parts).

use crate::buckets::BucketRecord;
use basalt_client::{ClientError, Cluster};
use basalt_proto::kv::{KvCond, KvEdit, KvList};
use basalt_proto::ObjectId;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Object indexes at or above this are tables; below are data chunks (see `data`).
const TABLE_BIT: u64 = 1 << 63;
/// Which set of tables, in the bits below `TABLE_BIT`.
const KIND_SHIFT: u32 = 32;

/// A set of sharded tables of a bucket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// Object key → [`ObjectEntry`].
    Index = 0,
    /// Data id (8 bytes, big endian) → [`Intent`].
    Intents = 1,
    /// Multipart uploads: `u/<upload id>` → [`Upload`], `p/<upload id>/<part:05>` → [`Part`].
    /// Sharded by upload id, so an upload and its parts share one table object and can be
    /// dropped in one atomic edit.
    Uploads = 2,
}

/// One stored piece of an object: `size` bytes written under data id `data`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub data: u64,
    pub size: u64,
}

/// Headers stored with an object and returned on GET/HEAD.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Headers {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_language: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// `Expires`, milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<i64>,
    /// `x-amz-meta-*` (names without the prefix, lower case).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// What the index holds for one object key: its current version, and in a versioned bucket
/// its noncurrent versions (`older`; see `versions`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectEntry {
    pub size: u64,
    /// As S3 computes it (without quotes): MD5 hex, or `MD5(part MD5s)-N` for multipart.
    pub etag: String,
    /// Milliseconds since the Unix epoch.
    pub modified_ms: i64,
    /// The data, in order. One segment for a plain PUT, one per part for multipart.
    pub segments: Vec<Segment>,
    /// Whether it was a multipart upload (then `segments.len()` is the part count).
    #[serde(default)]
    pub multipart: bool,
    #[serde(default)]
    pub headers: Headers,
    /// The version's id; None is the version S3 calls `null` (every object of a bucket that
    /// was never versioned, and those written while versioning was suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// A delete marker: no data, hides the key while it is the current version.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delete_marker: bool,
    /// The noncurrent versions, newest first (their own `older` is empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub older: Vec<ObjectEntry>,
    /// The object's tags (`x-amz-tagging`, PutObjectTagging).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// The `x-amz-checksum-*` of the whole object verified when it was uploaded (base64).
    #[serde(default, skip_serializing_if = "Checksums::is_empty")]
    pub checksums: Checksums,
    /// How the data is encrypted (None: it is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<crate::sse::Sse>,
    /// Object lock retention of this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<crate::lock::Retention>,
    /// Object lock legal hold of this version.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
    /// The version's owner when it is not the bucket's (a writer in a bucket with ACLs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// The version's ACL beyond its owner's FULL_CONTROL (acts when the bucket's ACLs do).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acl: Vec<crate::acl::Grant>,
}

/// Checksums of an object's bytes, as S3 sends them (base64 of the big-endian value).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksums {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32c: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha1: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc64nvme: Option<String>,
}

impl Checksums {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Data being written that no entry references yet.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The object key it is for.
    pub key: String,
    /// Milliseconds since the Unix epoch when it started.
    pub started_ms: i64,
    /// The multipart upload it is a part of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<String>,
    /// Most bytes the data can hold (the declared length, else the largest piece): how many
    /// chunks to delete when the upload never finished.
    #[serde(default)]
    pub max_bytes: u64,
}

/// A multipart upload in progress.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upload {
    pub key: String,
    pub initiated_ms: i64,
    pub owner: String,
    #[serde(default)]
    pub headers: Headers,
    /// The tags the object will have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// How its parts are encrypted (None: they are not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse: Option<crate::sse::Sse>,
    /// The object lock the object will have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<crate::lock::Retention>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub legal_hold: bool,
    /// The owner the object will have, when not the bucket's (see `ObjectEntry::owner`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_owner: Option<String>,
    /// The ACL the object will have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acl: Vec<crate::acl::Grant>,
    /// The checksum algorithm of the object's COMPOSITE checksum (`checksum::algorithm_named`):
    /// every part's is computed and kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_algorithm: Option<String>,
    /// When a CompleteMultipartUpload claimed it (ms since the epoch): an abort then waits
    /// (it would delete the parts the new object is made of).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completing_ms: Option<i64>,
}

/// An uploaded part.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub number: u32,
    pub segment: Segment,
    /// MD5 hex of the part.
    pub etag: String,
    pub modified_ms: i64,
    /// The part's checksum with its upload's algorithm (base64), when the upload has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

/// Index failures.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("index entry of {key:?} is unreadable: {reason}")]
    Corrupt { key: String, reason: String },
}

/// The object holding shard `shard` of `table` of `bucket`.
pub fn table_object(bucket: &BucketRecord, table: Table, shard: u32) -> ObjectId {
    ObjectId {
        inode: bucket.inode,
        index: TABLE_BIT | ((table as u64) << KIND_SHIFT) | shard as u64,
    }
}

/// The shard a table key lives in.
pub fn shard_of(bucket: &BucketRecord, key: &[u8]) -> u32 {
    crc32c::crc32c(key) % bucket.index_shards.max(1)
}

fn object_for(bucket: &BucketRecord, table: Table, key: &[u8]) -> ObjectId {
    table_object(bucket, table, shard_of(bucket, key))
}

fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], value: &[u8]) -> Result<T, IndexError> {
    serde_json::from_slice(value).map_err(|e| IndexError::Corrupt {
        key: String::from_utf8_lossy(key).into_owned(),
        reason: e.to_string(),
    })
}

fn encode<T: Serialize>(value: &T) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("index records serialise"))
}

/// Read one record of a table.
pub async fn get<T: for<'de> Deserialize<'de>>(
    cluster: &Cluster,
    bucket: &BucketRecord,
    table: Table,
    key: &[u8],
) -> Result<Option<T>, IndexError> {
    match get_raw(cluster, bucket, table, key).await? {
        Some(v) => Ok(Some(decode(key, &v)?)),
        None => Ok(None),
    }
}

/// The stored bytes of one record (None: absent), to make a later [`put_if`] conditional
/// on exactly them.
pub async fn get_raw(
    cluster: &Cluster,
    bucket: &BucketRecord,
    table: Table,
    key: &[u8],
) -> Result<Option<Bytes>, IndexError> {
    if table == Table::Index {
        return crate::shards::get(cluster, bucket, key).await;
    }
    let obj = object_for(bucket, table, key);
    let values = cluster
        .kv_get(obj, vec![Bytes::copy_from_slice(key)])
        .await?;
    Ok(values.into_iter().next().flatten())
}

/// Apply one edit to a table: the index through its (split) shard tables, the others
/// directly. Returns the value the key held before.
async fn update_one(
    cluster: &Cluster,
    bucket: &BucketRecord,
    table: Table,
    edit: KvEdit,
) -> Result<Option<Bytes>, IndexError> {
    if table == Table::Index {
        return crate::shards::update(cluster, bucket, edit).await;
    }
    let obj = object_for(bucket, table, &edit.key);
    Ok(cluster
        .kv_update(obj, vec![edit], true)
        .await?
        .into_iter()
        .next()
        .flatten())
}

/// Decode a record's stored bytes.
pub fn decode_raw<T: for<'de> Deserialize<'de>>(key: &[u8], value: &[u8]) -> Result<T, IndexError> {
    decode(key, value)
}

/// [`put`] if `cond` holds at the moment the table applies it (atomic with the write):
/// `Ok(None)` when it did not hold and nothing changed, else the previous record.
pub async fn put_if<T: Serialize + for<'de> Deserialize<'de>>(
    cluster: &Cluster,
    bucket: &BucketRecord,
    table: Table,
    key: &[u8],
    value: Option<&T>,
    cond: KvCond,
) -> Result<Option<Option<T>>, IndexError> {
    let edit = KvEdit {
        key: Bytes::copy_from_slice(key),
        value: value.map(encode),
        cond,
    };
    match update_one(cluster, bucket, table, edit).await {
        Ok(previous) => Ok(Some(previous.and_then(|v| decode(key, &v).ok()))),
        Err(IndexError::Client(ClientError::KvConflict { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Write (or with `None`, delete) one record durably; returns the previous one.
pub async fn put<T: Serialize + for<'de> Deserialize<'de>>(
    cluster: &Cluster,
    bucket: &BucketRecord,
    table: Table,
    key: &[u8],
    value: Option<&T>,
) -> Result<Option<T>, IndexError> {
    let edit = KvEdit {
        key: Bytes::copy_from_slice(key),
        value: value.map(encode),
        cond: KvCond::Any,
    };
    match update_one(cluster, bucket, table, edit).await? {
        // A retried update may report our own value as the previous one; callers compare.
        Some(v) => Ok(decode(key, &v).ok()),
        None => Ok(None),
    }
}

/// One item of a merged listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listed {
    Object(String, Box<ObjectEntry>),
    /// A common prefix (keys up to and including the delimiter).
    Prefix(String),
}

impl Listed {
    /// The key or prefix: what a continuation resumes after.
    pub fn name(&self) -> &str {
        match self {
            Listed::Object(k, _) | Listed::Prefix(k) => k,
        }
    }
}

/// A page of a listing.
#[derive(Debug, Default)]
pub struct Listing {
    pub items: Vec<Listed>,
    /// More items follow the last one.
    pub truncated: bool,
}

/// Entries fetched from one shard per round trip.
const LIST_PAGE: u32 = 1000;
/// Byte budget of one shard page.
const LIST_PAGE_BYTES: u32 = 1 << 20;

/// A walk over the entries of one table object under a prefix, in key order, one page per
/// round trip. Every paging loop over the tables goes through it.
pub struct Scan {
    obj: ObjectId,
    prefix: Bytes,
    /// The next page starts after this key; `None` once the last page was fetched.
    after: Option<Bytes>,
}

impl Scan {
    /// A walk over the entries of `obj` whose keys start with `prefix`.
    pub fn new(obj: ObjectId, prefix: Bytes) -> Self {
        Self {
            obj,
            prefix,
            after: Some(Bytes::new()),
        }
    }

    /// Skip ahead: the next page starts after `key`, unless the walk is already past it.
    pub fn skip_past(&mut self, key: &[u8]) {
        if let Some(after) = &mut self.after {
            if key > after.as_ref() {
                *after = Bytes::copy_from_slice(key);
            }
        }
    }

    /// The next page of entries, or `None` once the walk is done. A page is fetched only when
    /// asked for, so a caller may edit the entries of one page before fetching the next.
    pub async fn next_page(
        &mut self,
        cluster: &Cluster,
    ) -> Result<Option<Vec<(Bytes, Bytes)>>, IndexError> {
        let Some(after) = self.after.take() else {
            return Ok(None);
        };
        let page = cluster
            .kv_list(
                self.obj,
                KvList {
                    start_after: after,
                    prefix: self.prefix.clone(),
                    max_entries: LIST_PAGE,
                    max_bytes: LIST_PAGE_BYTES,
                },
            )
            .await?;
        // A truncated page holds at least one entry (the OSD's rule), so each page moves on.
        if page.truncated {
            self.after = page.entries.last().map(|(k, _)| k.clone());
        }
        Ok(Some(page.entries))
    }
}

/// One shard's sorted stream of entries past a cursor.
struct ShardCursor {
    scan: crate::shards::ShardScan,
    buffered: std::collections::VecDeque<(Bytes, Bytes)>,
}

/// Every key past `after` comes after this: keys are UTF-8, which never holds 0xFF.
fn past_prefix(prefix: &str) -> Vec<u8> {
    let mut v = prefix.as_bytes().to_vec();
    v.push(0xFF);
    v
}

/// List the index (keys and raw values) in key order after `after` (exclusive), under
/// `prefix`, grouping keys at `delimiter` into common prefixes, at most `max` items. Only
/// entries whose value `visible` accepts count: others are skipped, and a common prefix is
/// listed only when a visible entry falls under it.
pub async fn list_raw(
    cluster: &Cluster,
    bucket: &BucketRecord,
    prefix: &str,
    after: &str,
    delimiter: Option<&str>,
    max: usize,
    visible: &(dyn Fn(&[u8], &[u8]) -> bool + Sync),
) -> Result<(Vec<(String, Option<Bytes>)>, bool), IndexError> {
    let mut shards: Vec<ShardCursor> = (0..bucket.index_shards.max(1))
        .map(|s| ShardCursor {
            scan: crate::shards::ShardScan::new(
                bucket,
                s,
                Bytes::copy_from_slice(prefix.as_bytes()),
            ),
            buffered: Default::default(),
        })
        .collect();
    // Everything at or below the cursor is done with.
    let mut cursor: Vec<u8> = after.as_bytes().to_vec();
    let mut out: Vec<(String, Option<Bytes>)> = Vec::new();
    let delimiter = delimiter.filter(|d| !d.is_empty());
    loop {
        // Drop what the cursor passed, refill empty buffers.
        for s in shards.iter_mut() {
            while s
                .buffered
                .front()
                .is_some_and(|(k, _)| k.as_ref() <= &cursor[..])
            {
                s.buffered.pop_front();
            }
            if s.buffered.is_empty() {
                // The cursor is at or past every key this shard returned so far.
                s.scan.skip_past(&cursor);
                if let Some(page) = s.scan.next_page(cluster).await? {
                    s.buffered.extend(page);
                }
            }
        }
        // The smallest head across shards.
        let Some(best) = shards
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.buffered.front().map(|(k, _)| (i, k.clone())))
            .min_by(|a, b| a.1.cmp(&b.1))
            .map(|(i, _)| i)
        else {
            return Ok((out, false));
        };
        if !visible(&shards[best].buffered[0].0, &shards[best].buffered[0].1) {
            // Hidden: passed over, and it makes no common prefix.
            let (key, _) = shards[best].buffered.pop_front().expect("a head");
            cursor = key.to_vec();
            continue;
        }
        if out.len() == max {
            return Ok((out, true));
        }
        let (key, value) = shards[best].buffered.pop_front().expect("a head");
        let key_str = String::from_utf8_lossy(&key).into_owned();
        let common = delimiter.and_then(|d| {
            key_str[prefix.len().min(key_str.len())..]
                .find(d)
                .map(|at| key_str[..prefix.len() + at + d.len()].to_string())
        });
        match common {
            Some(cp) => {
                // A resumed listing may start inside a prefix it already returned.
                if cp.as_str() > after {
                    out.push((cp.clone(), None));
                }
                cursor = past_prefix(&cp);
            }
            None => {
                out.push((key_str, Some(value)));
                cursor = key.to_vec();
            }
        }
    }
}

/// List the index (see [`list_raw`]): with `all_versions`, every key; else the keys whose
/// current version is not a delete marker.
pub async fn list_objects(
    cluster: &Cluster,
    bucket: &BucketRecord,
    prefix: &str,
    after: &str,
    delimiter: Option<&str>,
    max: usize,
    all_versions: bool,
) -> Result<Listing, IndexError> {
    let visible = |key: &[u8], value: &[u8]| {
        // An entry that does not decode is listed, so the error surfaces below.
        all_versions || decode::<ObjectEntry>(key, value).map_or(true, |e| !e.delete_marker)
    };
    let (raw, truncated) =
        list_raw(cluster, bucket, prefix, after, delimiter, max, &visible).await?;
    let mut items = Vec::with_capacity(raw.len());
    for (key, value) in raw {
        items.push(match value {
            Some(v) => Listed::Object(key.clone(), Box::new(decode(key.as_bytes(), &v)?)),
            None => Listed::Prefix(key),
        });
    }
    Ok(Listing { items, truncated })
}

/// Is the bucket's index empty?
pub async fn is_empty(cluster: &Cluster, bucket: &BucketRecord) -> Result<bool, IndexError> {
    let (items, _) = list_raw(cluster, bucket, "", "", None, 1, &|_: &[u8], _: &[u8]| true).await?;
    Ok(items.is_empty())
}

/// The key of an intent record.
pub fn intent_key(data: u64) -> [u8; 8] {
    data.to_be_bytes()
}

/// The table object holding the records of upload `id`.
fn upload_object(bucket: &BucketRecord, id: &str) -> ObjectId {
    object_for(bucket, Table::Uploads, id.as_bytes())
}

/// Read one record of upload `id`.
pub async fn get_upload<T: for<'de> Deserialize<'de>>(
    cluster: &Cluster,
    bucket: &BucketRecord,
    id: &str,
    key: &str,
) -> Result<Option<T>, IndexError> {
    let values = cluster
        .kv_get(
            upload_object(bucket, id),
            vec![Bytes::copy_from_slice(key.as_bytes())],
        )
        .await?;
    match values.into_iter().next().flatten() {
        Some(v) => Ok(Some(decode(key.as_bytes(), &v)?)),
        None => Ok(None),
    }
}

/// Write one record of upload `id` durably; returns the previous one.
pub async fn put_upload<T: Serialize + for<'de> Deserialize<'de>>(
    cluster: &Cluster,
    bucket: &BucketRecord,
    id: &str,
    key: &str,
    value: Option<&T>,
) -> Result<Option<T>, IndexError> {
    let edit = KvEdit {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: value.map(encode),
        cond: KvCond::Any,
    };
    let previous = cluster
        .kv_update(upload_object(bucket, id), vec![edit], true)
        .await?;
    Ok(previous
        .into_iter()
        .next()
        .flatten()
        .and_then(|v| decode(key.as_bytes(), &v).ok()))
}

/// Delete records of upload `id` in one atomic edit; with `expected`, only if the first
/// key (the upload's own record) still holds those bytes (false: it changed).
pub async fn delete_upload_records(
    cluster: &Cluster,
    bucket: &BucketRecord,
    id: &str,
    keys: Vec<String>,
    expected: Option<Bytes>,
) -> Result<bool, IndexError> {
    let mut expected = expected;
    let edits = keys
        .into_iter()
        .map(|k| KvEdit {
            key: Bytes::from(k.into_bytes()),
            value: None,
            cond: expected.take().map_or(KvCond::Any, KvCond::Equals),
        })
        .collect();
    match cluster
        .kv_update(upload_object(bucket, id), edits, true)
        .await
    {
        Ok(_) => Ok(true),
        Err(ClientError::KvConflict { .. }) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The bytes of upload `id`'s record under `key` (for a change conditional on them).
pub async fn get_upload_raw(
    cluster: &Cluster,
    bucket: &BucketRecord,
    id: &str,
    key: &str,
) -> Result<Option<Bytes>, IndexError> {
    let values = cluster
        .kv_get(
            upload_object(bucket, id),
            vec![Bytes::copy_from_slice(key.as_bytes())],
        )
        .await?;
    Ok(values.into_iter().next().flatten())
}

/// Write upload `id`'s record under `key` if it still holds `expected` (false: it
/// changed); returns the bytes written.
pub async fn put_upload_if<T: Serialize>(
    cluster: &Cluster,
    bucket: &BucketRecord,
    id: &str,
    key: &str,
    value: &T,
    expected: Bytes,
) -> Result<Option<Bytes>, IndexError> {
    let bytes = encode(value);
    let edit = KvEdit {
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Some(bytes.clone()),
        cond: KvCond::Equals(expected),
    };
    match cluster
        .kv_update(upload_object(bucket, id), vec![edit], true)
        .await
    {
        Ok(_) => Ok(Some(bytes)),
        Err(ClientError::KvConflict { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Every part recorded for upload `id`, by number.
pub async fn list_parts(
    cluster: &Cluster,
    bucket: &BucketRecord,
    id: &str,
) -> Result<Vec<Part>, IndexError> {
    let prefix = Bytes::from(format!("p/{id}/").into_bytes());
    let mut scan = Scan::new(upload_object(bucket, id), prefix);
    let mut out = Vec::new();
    while let Some(page) = scan.next_page(cluster).await? {
        for (k, v) in &page {
            out.push(decode::<Part>(k, v)?);
        }
    }
    out.sort_by_key(|p| p.number);
    Ok(out)
}

/// Every upload in progress in the bucket, as (upload id, upload), in no particular order.
pub async fn list_uploads(
    cluster: &Cluster,
    bucket: &BucketRecord,
) -> Result<Vec<(String, Upload)>, IndexError> {
    let mut out = Vec::new();
    for shard in 0..bucket.index_shards.max(1) {
        let obj = table_object(bucket, Table::Uploads, shard);
        let mut scan = Scan::new(obj, Bytes::from_static(b"u/"));
        while let Some(page) = scan.next_page(cluster).await? {
            for (k, v) in &page {
                let id = String::from_utf8_lossy(&k["u/".len()..]).into_owned();
                out.push((id, decode::<Upload>(k, v)?));
            }
        }
    }
    Ok(out)
}

/// Milliseconds since the Unix epoch, as the records' times are kept.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
