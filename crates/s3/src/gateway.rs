//! The S3 operations, on top of buckets (metadata), the bucket index and object data
//! (cluster objects). The protocol itself (routing, XML, SigV4, aws-chunked bodies) is the
//! `s3s` crate's; this file maps each operation onto the cluster.

use crate::buckets::{self, BucketError, BucketRecord};
use crate::checksum::Wanted;
use crate::data::{self, DataError, DataIds, PieceRange};
use crate::index::{
    self, now_ms, Headers, IndexError, Intent, Listed, ObjectEntry, Part, Segment, Table, Upload,
};
use crate::keys::KeyRing;
use basalt_client::Cluster;
use basalt_proto::PoolId;
use base64::Engine;
use bytes::Bytes;
use futures::Stream;
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3ErrorCode, S3Request, S3Response, S3Result, S3};
use std::sync::Arc;

/// Largest single PUT (S3's limit).
pub const MAX_PUT_BYTES: u64 = 5 << 30;
/// Smallest part of a multipart upload but the last (S3's limit).
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// Part numbers are 1..=10000 (S3's limit).
pub const MAX_PART_NUMBER: i32 = 10_000;
/// Items per listing page at most (S3's limit).
const MAX_LIST_KEYS: i32 = 1000;

/// The gateway: stateless apart from caches; several can serve the same buckets.
pub struct Gateway {
    cluster: Arc<Cluster>,
    keys: Arc<KeyRing>,
    ids: DataIds,
    /// Pool new buckets are created in.
    pool: PoolId,
    /// How often a live upload refreshes its intent (see `sweeper`).
    refresh: std::time::Duration,
}

impl Gateway {
    pub fn new(
        cluster: Arc<Cluster>,
        keys: Arc<KeyRing>,
        pool: PoolId,
        reclaim_after: std::time::Duration,
    ) -> Self {
        Self {
            cluster,
            keys,
            ids: DataIds::default(),
            pool,
            refresh: crate::sweeper::intent_refresh(reclaim_after),
        }
    }
}

fn timestamp_ms(ms: i64) -> Timestamp {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    Timestamp::from(t)
}

fn ms_of(t: &Timestamp) -> i64 {
    let t: time::OffsetDateTime = t.clone().into();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::error!("s3: {e}");
    s3_error!(InternalError, "{e}")
}

impl From<IndexError> for S3Error {
    fn from(e: IndexError) -> Self {
        internal(e)
    }
}

impl From<BucketError> for S3Error {
    fn from(e: BucketError) -> Self {
        match e {
            BucketError::Exists(_) => s3_error!(BucketAlreadyExists),
            BucketError::Missing(_) => s3_error!(NoSuchBucket),
            other => internal(other),
        }
    }
}

impl From<DataError> for S3Error {
    fn from(e: DataError) -> Self {
        match e {
            DataError::TooLarge { .. } => s3_error!(EntityTooLarge, "{e}"),
            DataError::Length { .. } => s3_error!(IncompleteBody, "{e}"),
            DataError::Body(_) => s3_error!(IncompleteBody, "{e}"),
            DataError::Client(basalt_client::ClientError::Status {
                status: basalt_proto::Status::NoSpace,
            }) => s3_error!(ServiceUnavailable, "the cluster is out of space"),
            other => internal(other),
        }
    }
}

fn owner(user: &str) -> Owner {
    Owner {
        display_name: Some(user.into()),
        id: Some(user.into()),
    }
}

fn etag(value: &str) -> ETag {
    ETag::Strong(value.into())
}

/// S3's `encoding-type=url`: percent-encode everything but unreserved characters and '/'.
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn wants_url(e: &Option<EncodingType>) -> bool {
    e.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL)
}

fn headers_of(
    content_type: Option<String>,
    content_encoding: Option<String>,
    content_disposition: Option<String>,
    content_language: Option<String>,
    cache_control: Option<String>,
    expires: Option<Timestamp>,
    metadata: Option<Metadata>,
) -> Headers {
    Headers {
        content_type,
        content_encoding,
        content_disposition,
        content_language,
        cache_control,
        expires: expires.as_ref().map(ms_of),
        metadata: metadata
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect(),
    }
}

fn metadata_of(h: &Headers) -> Option<Metadata> {
    (!h.metadata.is_empty()).then(|| h.metadata.clone().into_iter().collect())
}

/// Check `Content-MD5` (base64 of the body's MD5) against what was stored.
fn check_md5(content_md5: Option<&str>, md5: &[u8; 16]) -> S3Result<()> {
    let Some(expected) = content_md5 else {
        return Ok(());
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(expected.trim())
        .map_err(|_| s3_error!(InvalidDigest))?;
    if decoded.len() != 16 {
        return Err(s3_error!(InvalidDigest));
    }
    if decoded != md5 {
        return Err(s3_error!(BadDigest));
    }
    Ok(())
}

/// The part of an S3 request the gateway needs beside its input: who sent it.
async fn user_of<T>(keys: &KeyRing, req: &S3Request<T>) -> S3Result<String> {
    let Some(cred) = &req.credentials else {
        return Err(s3_error!(
            AccessDenied,
            "anonymous requests are not allowed"
        ));
    };
    match keys.lookup(&cred.access_key).await {
        Ok(Some(k)) => Ok(k.user),
        Ok(None) => Err(s3_error!(InvalidAccessKeyId)),
        Err(e) => Err(internal(e)),
    }
}

impl Gateway {
    /// The bucket `name`, if `user` owns it.
    async fn bucket(&self, user: &str, name: &str) -> S3Result<BucketRecord> {
        match buckets::get_bucket(&self.cluster, name).await? {
            Some(b) if b.owner == user => Ok(b),
            Some(_) => Err(s3_error!(AccessDenied)),
            None => Err(s3_error!(NoSuchBucket)),
        }
    }

    async fn entry(&self, bucket: &BucketRecord, key: &str) -> S3Result<ObjectEntry> {
        index::get(&self.cluster, bucket, Table::Index, key.as_bytes())
            .await?
            .ok_or_else(|| s3_error!(NoSuchKey))
    }

    /// Delete data no longer referenced, in the background: the index no longer points at
    /// it, so a failure only leaks space (to be reclaimed by a scrub of orphans).
    fn reclaim(&self, bucket: &BucketRecord, segments: Vec<Segment>) {
        if segments.is_empty() {
            return;
        }
        let cluster = self.cluster.clone();
        let bucket = bucket.clone();
        tokio::spawn(async move {
            for s in segments {
                if let Err(e) = data::delete_piece(&cluster, &bucket, s.data, s.size).await {
                    tracing::warn!(bucket = %bucket.name, data = s.data, "reclaiming old data: {e}");
                }
            }
        });
    }

    /// Point `key` at `entry`, then reclaim what the previous entry held and the new one
    /// does not.
    async fn commit(&self, bucket: &BucketRecord, key: &str, entry: &ObjectEntry) -> S3Result<()> {
        let previous: Option<ObjectEntry> = index::put(
            &self.cluster,
            bucket,
            Table::Index,
            key.as_bytes(),
            Some(entry),
        )
        .await?;
        if let Some(prev) = previous {
            let unused = prev
                .segments
                .into_iter()
                .filter(|s| !entry.segments.contains(s))
                .collect();
            self.reclaim(bucket, unused);
        }
        Ok(())
    }

    /// Store a body as a fresh data id under an intent record, so an interrupted transfer
    /// leaves nothing visible and its space can be found again.
    async fn store_body<S, E>(
        &self,
        bucket: &BucketRecord,
        key: &str,
        upload: Option<&str>,
        body: S,
        expected_len: Option<u64>,
        max_len: u64,
    ) -> S3Result<(Segment, [u8; 16])>
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let id = self.ids.next(&self.cluster).await?;
        let mut intent = Intent {
            key: key.into(),
            started_ms: now_ms(),
            upload: upload.map(String::from),
            max_bytes: expected_len
                .unwrap_or(max_len)
                .min(data::max_piece_bytes(bucket)),
        };
        let ikey = index::intent_key(id);
        index::put(&self.cluster, bucket, Table::Intents, &ikey, Some(&intent)).await?;
        let store = data::store(&self.cluster, bucket, id, body, expected_len, max_len);
        tokio::pin!(store);
        // A long upload refreshes its intent, so a sweeper never takes it for abandoned.
        // Bound: ends when the store ends.
        let stored = loop {
            tokio::select! {
                stored = &mut store => break stored,
                _ = tokio::time::sleep(self.refresh) => {
                    intent.started_ms = now_ms();
                    if let Err(e) =
                        index::put(&self.cluster, bucket, Table::Intents, &ikey, Some(&intent)).await
                    {
                        tracing::warn!(bucket = %bucket.name, data = id, "refreshing an intent: {e}");
                    }
                }
            }
        };
        let stored = match stored {
            Ok(s) => s,
            Err(e) => {
                // store() deleted the chunks it started; the intent can go.
                let _ =
                    index::put::<Intent>(&self.cluster, bucket, Table::Intents, &ikey, None).await;
                return Err(e.into());
            }
        };
        Ok((
            Segment {
                data: id,
                size: stored.size,
            },
            stored.md5,
        ))
    }

    /// The intent of a stored piece is done: an entry references it now (or it was dropped).
    async fn clear_intent(&self, bucket: &BucketRecord, data: u64) {
        let ikey = index::intent_key(data);
        if let Err(e) =
            index::put::<Intent>(&self.cluster, bucket, Table::Intents, &ikey, None).await
        {
            tracing::warn!(bucket = %bucket.name, data, "clearing an intent record: {e}");
        }
    }

    /// Drop a stored piece that will not be used.
    async fn discard(&self, bucket: &BucketRecord, segment: &Segment) {
        let _ = data::delete_piece(&self.cluster, bucket, segment.data, segment.size).await;
        self.clear_intent(bucket, segment.data).await;
    }

    fn ranges_of(entry: &ObjectEntry, start: u64, end: u64) -> Vec<PieceRange> {
        let mut out = Vec::new();
        let mut base = 0u64;
        for s in &entry.segments {
            let (lo, hi) = (base, base + s.size);
            if hi > start && lo < end {
                out.push(PieceRange {
                    data: s.data,
                    start: start.max(lo) - lo,
                    end: end.min(hi) - lo,
                });
            }
            base = hi;
        }
        out
    }
}

/// Evaluate GET/HEAD preconditions (RFC 9110 order, as S3 does).
fn check_conditions(
    entry: &ObjectEntry,
    if_match: Option<&ETagCondition>,
    if_none_match: Option<&ETagCondition>,
    if_modified_since: Option<&Timestamp>,
    if_unmodified_since: Option<&Timestamp>,
) -> S3Result<()> {
    let matches = |c: &ETagCondition| {
        c.is_any()
            || c.as_etag()
                .is_some_and(|e| e.value() == entry.etag.as_str())
    };
    // HTTP dates have whole seconds.
    let modified_s = entry.modified_ms / 1000;
    if let Some(c) = if_match {
        if !matches(c) {
            return Err(s3_error!(PreconditionFailed));
        }
    } else if let Some(t) = if_unmodified_since {
        if modified_s > ms_of(t) / 1000 {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    if let Some(c) = if_none_match {
        if matches(c) {
            return Err(s3_error!(NotModified));
        }
    } else if let Some(t) = if_modified_since {
        if modified_s <= ms_of(t) / 1000 {
            return Err(s3_error!(NotModified));
        }
    }
    Ok(())
}

/// The byte range a request asks for, `[start, end)`, and whether it was a range request.
fn resolve_range(range: Option<&Range>, size: u64) -> S3Result<(u64, u64, bool)> {
    match range {
        None => Ok((0, size, false)),
        Some(r) => {
            let r = r.check(size).map_err(|_| s3_error!(InvalidRange))?;
            Ok((r.start, r.end, true))
        }
    }
}

fn part_key(upload: &str, number: i32) -> String {
    format!("p/{upload}/{number:05}")
}

fn upload_key(upload: &str) -> String {
    format!("u/{upload}")
}

#[async_trait::async_trait]
impl S3 for Gateway {
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let buckets = buckets::list_buckets(&self.cluster)
            .await?
            .into_iter()
            .filter(|b| b.owner == user)
            .map(|b| Bucket {
                bucket_region: None,
                creation_date: Some(timestamp_ms(b.created as i64 * 1000)),
                name: Some(b.name),
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            owner: Some(owner(&user)),
            ..Default::default()
        }))
    }

    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let name = &req.input.bucket;
        if let Some(existing) = buckets::get_bucket(&self.cluster, name).await? {
            return Err(if existing.owner == user {
                s3_error!(BucketAlreadyOwnedByYou)
            } else {
                s3_error!(BucketAlreadyExists)
            });
        }
        buckets::create_bucket(&self.cluster, name, &user, self.pool).await?;
        Ok(S3Response::new(CreateBucketOutput {
            location: Some(format!("/{name}")),
        }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let bucket = self.bucket(&user, &req.input.bucket).await?;
        if !index::is_empty(&self.cluster, &bucket).await? {
            return Err(s3_error!(BucketNotEmpty));
        }
        buckets::delete_bucket(&self.cluster, &bucket).await?;
        Ok(S3Response::new(DeleteBucketOutput {}))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        let user = user_of(&self.keys, &req).await?;
        self.bucket(&user, &req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        let user = user_of(&self.keys, &req).await?;
        self.bucket(&user, &req.input.bucket).await?;
        // Empty: the default region, as S3 answers for us-east-1.
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let check = wanted(&req.headers, req.trailing_headers.clone(), &req.input);
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let expected = input.content_length.map(|l| l.max(0) as u64);
        if expected.is_some_and(|l| l > MAX_PUT_BYTES) {
            return Err(s3_error!(EntityTooLarge));
        }
        let body = match input.body {
            Some(b) => b,
            None => StreamingBlob::wrap(futures::stream::empty::<Result<Bytes, std::io::Error>>()),
        };
        let (segment, md5) = self
            .store_body(
                &bucket,
                &input.key,
                None,
                check.watch(body),
                expected,
                MAX_PUT_BYTES,
            )
            .await?;
        let checksums =
            match check_md5(input.content_md5.as_deref(), &md5).and_then(|_| check.verify()) {
                Ok(c) => c,
                Err(e) => {
                    self.discard(&bucket, &segment).await;
                    return Err(e);
                }
            };
        let entry = ObjectEntry {
            size: segment.size,
            etag: hex::encode(md5),
            modified_ms: now_ms(),
            segments: vec![segment.clone()],
            multipart: false,
            headers: headers_of(
                input.content_type,
                input.content_encoding,
                input.content_disposition,
                input.content_language,
                input.cache_control,
                input.expires,
                input.metadata,
            ),
        };
        // A failed index update may still have been applied (a reply lost after retries):
        // the data stays, and its intent lets the sweeper decide once nothing can race it.
        self.commit(&bucket, &input.key, &entry).await?;
        self.clear_intent(&bucket, segment.data).await;
        Ok(S3Response::new(PutObjectOutput {
            e_tag: Some(etag(&entry.etag)),
            checksum_crc32: checksums.checksum_crc32,
            checksum_crc32c: checksums.checksum_crc32c,
            checksum_sha1: checksums.checksum_sha1,
            checksum_sha256: checksums.checksum_sha256,
            checksum_crc64nvme: checksums.checksum_crc64nvme,
            ..Default::default()
        }))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = &req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let entry = self.entry(&bucket, &input.key).await?;
        check_conditions(
            &entry,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let (start, end, partial) = resolve_range(input.range.as_ref(), entry.size)?;
        let body = data::read_stream(
            self.cluster.clone(),
            bucket.clone(),
            Gateway::ranges_of(&entry, start, end),
        );
        let h = &entry.headers;
        Ok(S3Response::new(GetObjectOutput {
            accept_ranges: Some("bytes".into()),
            body: Some(StreamingBlob::new(body)),
            content_length: Some((end - start) as i64),
            content_range: partial
                .then(|| format!("bytes {start}-{}/{}", end.saturating_sub(1), entry.size)),
            content_type: h.content_type.clone(),
            content_encoding: h.content_encoding.clone(),
            content_disposition: h.content_disposition.clone(),
            content_language: h.content_language.clone(),
            cache_control: h.cache_control.clone(),
            expires: h.expires.map(timestamp_ms),
            e_tag: Some(etag(&entry.etag)),
            last_modified: Some(timestamp_ms(entry.modified_ms)),
            metadata: metadata_of(h),
            parts_count: entry.multipart.then_some(entry.segments.len() as i32),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = &req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let entry = self.entry(&bucket, &input.key).await?;
        check_conditions(
            &entry,
            input.if_match.as_ref(),
            input.if_none_match.as_ref(),
            input.if_modified_since.as_ref(),
            input.if_unmodified_since.as_ref(),
        )?;
        let (start, end, partial) = resolve_range(input.range.as_ref(), entry.size)?;
        let h = &entry.headers;
        Ok(S3Response::new(HeadObjectOutput {
            accept_ranges: Some("bytes".into()),
            content_length: Some((end - start) as i64),
            content_range: partial
                .then(|| format!("bytes {start}-{}/{}", end.saturating_sub(1), entry.size)),
            content_type: h.content_type.clone(),
            content_encoding: h.content_encoding.clone(),
            content_disposition: h.content_disposition.clone(),
            content_language: h.content_language.clone(),
            cache_control: h.cache_control.clone(),
            expires: h.expires.map(timestamp_ms),
            e_tag: Some(etag(&entry.etag)),
            last_modified: Some(timestamp_ms(entry.modified_ms)),
            metadata: metadata_of(h),
            parts_count: entry.multipart.then_some(entry.segments.len() as i32),
            ..Default::default()
        }))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let bucket = self.bucket(&user, &req.input.bucket).await?;
        self.remove(&bucket, &req.input.key).await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn delete_objects(
        &self,
        req: S3Request<DeleteObjectsInput>,
    ) -> S3Result<S3Response<DeleteObjectsOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let bucket = self.bucket(&user, &req.input.bucket).await?;
        let quiet = req.input.delete.quiet.unwrap_or(false);
        let mut deleted = Vec::new();
        let mut errors = Vec::new();
        for obj in req.input.delete.objects {
            match self.remove(&bucket, &obj.key).await {
                Ok(()) => {
                    if !quiet {
                        deleted.push(DeletedObject {
                            key: Some(obj.key),
                            ..Default::default()
                        })
                    }
                }
                Err(e) => errors.push(Error {
                    code: Some(e.code().as_str().into()),
                    key: Some(obj.key),
                    message: e.message().map(String::from),
                    version_id: None,
                }),
            }
        }
        Ok(S3Response::new(DeleteObjectsOutput {
            deleted: Some(deleted),
            errors: (!errors.is_empty()).then_some(errors),
            ..Default::default()
        }))
    }

    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let max = input
            .max_keys
            .unwrap_or(MAX_LIST_KEYS)
            .clamp(0, MAX_LIST_KEYS);
        let prefix = input.prefix.clone().unwrap_or_default();
        let marker = input.marker.clone().unwrap_or_default();
        let listing = index::list_objects(
            &self.cluster,
            &bucket,
            &prefix,
            &marker,
            input.delimiter.as_deref(),
            max as usize,
        )
        .await?;
        let url = wants_url(&input.encoding_type);
        let enc = |s: String| if url { url_encode(&s) } else { s };
        // NextMarker is returned only with a delimiter (S3's rule); without, clients use the
        // last key.
        let next_marker = (listing.truncated && input.delimiter.is_some())
            .then(|| listing.items.last().map(|i| enc(i.name().to_string())))
            .flatten();
        let (contents, prefixes) = split_listing(listing.items, &user, url);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(bucket.name),
            prefix: Some(enc(prefix)),
            marker: Some(enc(marker)),
            max_keys: Some(max),
            is_truncated: Some(listing.truncated),
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            delimiter: input.delimiter.map(enc),
            next_marker,
            encoding_type: input.encoding_type,
            ..Default::default()
        }))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let max = input
            .max_keys
            .unwrap_or(MAX_LIST_KEYS)
            .clamp(0, MAX_LIST_KEYS);
        let prefix = input.prefix.clone().unwrap_or_default();
        let mut after = input.start_after.clone().unwrap_or_default();
        if let Some(token) = &input.continuation_token {
            let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| s3_error!(InvalidArgument, "invalid continuation token"))?;
            after = after.max(decoded);
        }
        let listing = index::list_objects(
            &self.cluster,
            &bucket,
            &prefix,
            &after,
            input.delimiter.as_deref(),
            max as usize,
        )
        .await?;
        let next = listing
            .truncated
            .then(|| listing.items.last())
            .flatten()
            .map(|i| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(i.name()));
        let url = wants_url(&input.encoding_type);
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let count = listing.items.len() as i32;
        let (contents, prefixes) = split_listing(listing.items, &user, url);
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(bucket.name),
            prefix: Some(enc(prefix)),
            max_keys: Some(max),
            key_count: Some(count),
            continuation_token: input.continuation_token,
            is_truncated: Some(listing.truncated),
            next_continuation_token: next,
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            delimiter: input.delimiter.map(enc),
            encoding_type: input.encoding_type,
            start_after: input.start_after.map(enc),
            ..Default::default()
        }))
    }

    async fn list_object_versions(
        &self,
        req: S3Request<ListObjectVersionsInput>,
    ) -> S3Result<S3Response<ListObjectVersionsOutput>> {
        // Buckets are unversioned: every object is its one version "null".
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let max = input
            .max_keys
            .unwrap_or(MAX_LIST_KEYS)
            .clamp(0, MAX_LIST_KEYS);
        let prefix = input.prefix.clone().unwrap_or_default();
        let marker = input.key_marker.clone().unwrap_or_default();
        let listing = index::list_objects(
            &self.cluster,
            &bucket,
            &prefix,
            &marker,
            input.delimiter.as_deref(),
            max as usize,
        )
        .await?;
        let url = wants_url(&input.encoding_type);
        let enc = |s: String| if url { url_encode(&s) } else { s };
        let next_key = listing
            .truncated
            .then(|| listing.items.last().map(|i| enc(i.name().to_string())))
            .flatten();
        let mut versions = Vec::new();
        let mut prefixes = Vec::new();
        for item in listing.items {
            match item {
                Listed::Object(key, e) => versions.push(ObjectVersion {
                    e_tag: Some(etag(&e.etag)),
                    is_latest: Some(true),
                    key: Some(enc(key)),
                    last_modified: Some(timestamp_ms(e.modified_ms)),
                    owner: Some(owner(&user)),
                    size: Some(e.size as i64),
                    storage_class: Some(ObjectVersionStorageClass::from_static(
                        ObjectVersionStorageClass::STANDARD,
                    )),
                    version_id: Some("null".into()),
                    ..Default::default()
                }),
                Listed::Prefix(p) => prefixes.push(CommonPrefix {
                    prefix: Some(enc(p)),
                }),
            }
        }
        Ok(S3Response::new(ListObjectVersionsOutput {
            common_prefixes: Some(prefixes),
            delimiter: input.delimiter.map(enc),
            encoding_type: input.encoding_type,
            is_truncated: Some(listing.truncated),
            key_marker: Some(enc(marker)),
            max_keys: Some(max),
            name: Some(bucket.name),
            next_version_id_marker: next_key.as_ref().map(|_| "null".to_string()),
            next_key_marker: next_key,
            prefix: Some(enc(prefix)),
            versions: Some(versions),
            ..Default::default()
        }))
    }

    async fn copy_object(
        &self,
        req: S3Request<CopyObjectInput>,
    ) -> S3Result<S3Response<CopyObjectOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        let src_bucket = self.bucket(&user, src_bucket).await?;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let src = self.entry(&src_bucket, src_key).await?;
        check_conditions(
            &src,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
        )
        .map_err(|e| {
            // A failed copy-source condition is 412 in every case.
            if *e.code() == S3ErrorCode::NotModified {
                s3_error!(PreconditionFailed)
            } else {
                e
            }
        })?;
        let replace = input
            .metadata_directive
            .as_ref()
            .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
        let headers = if replace {
            headers_of(
                input.content_type,
                input.content_encoding,
                input.content_disposition,
                input.content_language,
                input.cache_control,
                input.expires,
                input.metadata,
            )
        } else {
            src.headers.clone()
        };
        let same = src_bucket.name == bucket.name && **src_key == *input.key;
        let entry = if same {
            if !replace {
                return Err(s3_error!(
                    InvalidRequest,
                    "This copy request is illegal because it is trying to copy an object to \
                     itself without changing the object's metadata, storage class, website \
                     redirect location or encryption attributes."
                ));
            }
            // Same data, new headers: no bytes move.
            ObjectEntry {
                headers,
                modified_ms: now_ms(),
                ..src
            }
        } else {
            let body = data::read_stream(
                self.cluster.clone(),
                src_bucket.clone(),
                Gateway::ranges_of(&src, 0, src.size),
            );
            let (segment, md5) = self
                .store_body(
                    &bucket,
                    &input.key,
                    None,
                    body,
                    Some(src.size),
                    MAX_PUT_BYTES,
                )
                .await?;
            ObjectEntry {
                size: segment.size,
                // A copy is a single-part object: its ETag is the MD5 of its bytes.
                etag: hex::encode(md5),
                modified_ms: now_ms(),
                segments: vec![segment],
                multipart: false,
                headers,
            }
        };
        // On failure the new data keeps its intent: the update may have been applied, so only
        // the sweeper, which checks the index, may delete it.
        self.commit(&bucket, &input.key, &entry).await?;
        if !same {
            self.clear_intent(&bucket, entry.segments[0].data).await;
        }
        Ok(S3Response::new(CopyObjectOutput {
            copy_object_result: Some(CopyObjectResult {
                e_tag: Some(etag(&entry.etag)),
                last_modified: Some(timestamp_ms(entry.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let id = format!("{:016x}", self.ids.next(&self.cluster).await?);
        let upload = Upload {
            key: input.key.clone(),
            initiated_ms: now_ms(),
            owner: user,
            headers: headers_of(
                input.content_type,
                input.content_encoding,
                input.content_disposition,
                input.content_language,
                input.cache_control,
                input.expires,
                input.metadata,
            ),
        };
        index::put_upload(&self.cluster, &bucket, &id, &upload_key(&id), Some(&upload)).await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(bucket.name),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let check = wanted_part(&req.headers, req.trailing_headers.clone(), &req.input);
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        self.upload(&bucket, &input.upload_id, &input.key).await?;
        check_part_number(input.part_number)?;
        let expected = input.content_length.map(|l| l.max(0) as u64);
        let body = match input.body {
            Some(b) => b,
            None => StreamingBlob::wrap(futures::stream::empty::<Result<Bytes, std::io::Error>>()),
        };
        let (segment, md5) = self
            .store_body(
                &bucket,
                &input.key,
                Some(&input.upload_id),
                check.watch(body),
                expected,
                MAX_PUT_BYTES,
            )
            .await?;
        let checksums =
            match check_md5(input.content_md5.as_deref(), &md5).and_then(|_| check.verify()) {
                Ok(c) => c,
                Err(e) => {
                    self.discard(&bucket, &segment).await;
                    return Err(e);
                }
            };
        let part = Part {
            number: input.part_number as u32,
            segment: segment.clone(),
            etag: hex::encode(md5),
            modified_ms: now_ms(),
        };
        self.record_part(&bucket, &input.upload_id, &part).await?;
        Ok(S3Response::new(UploadPartOutput {
            e_tag: Some(etag(&part.etag)),
            checksum_crc32: checksums.checksum_crc32,
            checksum_crc32c: checksums.checksum_crc32c,
            checksum_sha1: checksums.checksum_sha1,
            checksum_sha256: checksums.checksum_sha256,
            checksum_crc64nvme: checksums.checksum_crc64nvme,
            ..Default::default()
        }))
    }

    async fn upload_part_copy(
        &self,
        req: S3Request<UploadPartCopyInput>,
    ) -> S3Result<S3Response<UploadPartCopyOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let CopySource::Bucket {
            bucket: src_bucket,
            key: src_key,
            ..
        } = &input.copy_source
        else {
            return Err(s3_error!(NotImplemented, "copy from an access point"));
        };
        let src_bucket = self.bucket(&user, src_bucket).await?;
        let bucket = self.bucket(&user, &input.bucket).await?;
        self.upload(&bucket, &input.upload_id, &input.key).await?;
        check_part_number(input.part_number)?;
        let src = self.entry(&src_bucket, src_key).await?;
        check_conditions(
            &src,
            input.copy_source_if_match.as_ref(),
            input.copy_source_if_none_match.as_ref(),
            input.copy_source_if_modified_since.as_ref(),
            input.copy_source_if_unmodified_since.as_ref(),
        )
        .map_err(|_| s3_error!(PreconditionFailed))?;
        let (start, end) = match &input.copy_source_range {
            None => (0, src.size),
            Some(r) => parse_copy_range(r, src.size)?,
        };
        let body = data::read_stream(
            self.cluster.clone(),
            src_bucket.clone(),
            Gateway::ranges_of(&src, start, end),
        );
        let (segment, md5) = self
            .store_body(
                &bucket,
                &input.key,
                Some(&input.upload_id),
                body,
                Some(end - start),
                MAX_PUT_BYTES,
            )
            .await?;
        let part = Part {
            number: input.part_number as u32,
            segment,
            etag: hex::encode(md5),
            modified_ms: now_ms(),
        };
        self.record_part(&bucket, &input.upload_id, &part).await?;
        Ok(S3Response::new(UploadPartCopyOutput {
            copy_part_result: Some(CopyPartResult {
                e_tag: Some(etag(&part.etag)),
                last_modified: Some(timestamp_ms(part.modified_ms)),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let upload = self.upload(&bucket, &input.upload_id, &input.key).await?;
        let stored = self.parts(&bucket, &input.upload_id).await?;
        let wanted = input
            .multipart_upload
            .and_then(|m| m.parts)
            .unwrap_or_default();
        if wanted.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "the upload must name at least one part"
            ));
        }
        let mut chosen: Vec<&Part> = Vec::with_capacity(wanted.len());
        let mut last = 0;
        for w in &wanted {
            let n = w.part_number.ok_or_else(|| s3_error!(InvalidPart))?;
            if n <= last {
                return Err(s3_error!(InvalidPartOrder));
            }
            last = n;
            let part = stored
                .iter()
                .find(|p| p.number as i32 == n)
                .ok_or_else(|| s3_error!(InvalidPart, "part {n} was not uploaded"))?;
            if let Some(e) = &w.e_tag {
                if e.value() != part.etag {
                    return Err(s3_error!(InvalidPart, "part {n}: ETag does not match"));
                }
            }
            chosen.push(part);
        }
        if let Some(small) = chosen[..chosen.len() - 1]
            .iter()
            .find(|p| p.segment.size < MIN_PART_BYTES)
        {
            return Err(s3_error!(
                EntityTooSmall,
                "part {} is {} bytes; every part but the last must be at least 5 MiB",
                small.number,
                small.segment.size
            ));
        }
        let mut md5s = Md5::new();
        for p in &chosen {
            md5s.update(hex::decode(&p.etag).map_err(internal)?);
        }
        let entry = ObjectEntry {
            size: chosen.iter().map(|p| p.segment.size).sum(),
            etag: format!("{}-{}", hex::encode(md5s.finalize()), chosen.len()),
            modified_ms: now_ms(),
            segments: chosen.iter().map(|p| p.segment.clone()).collect(),
            multipart: true,
            headers: upload.headers,
        };
        self.commit(&bucket, &input.key, &entry).await?;
        // The object is visible now: drop the upload's records and the unused parts.
        let unused: Vec<Segment> = stored
            .iter()
            .filter(|p| !entry.segments.contains(&p.segment))
            .map(|p| p.segment.clone())
            .collect();
        self.drop_upload(&bucket, &input.upload_id, &stored).await?;
        self.reclaim(&bucket, unused);
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(bucket.name.clone()),
            key: Some(input.key.clone()),
            e_tag: Some(etag(&entry.etag)),
            location: Some(format!("/{}/{}", bucket.name, input.key)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        self.upload(&bucket, &input.upload_id, &input.key).await?;
        let parts = self.parts(&bucket, &input.upload_id).await?;
        self.drop_upload(&bucket, &input.upload_id, &parts).await?;
        self.reclaim(&bucket, parts.into_iter().map(|p| p.segment).collect());
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }

    async fn list_parts(
        &self,
        req: S3Request<ListPartsInput>,
    ) -> S3Result<S3Response<ListPartsOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        self.upload(&bucket, &input.upload_id, &input.key).await?;
        let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
        let marker = input.part_number_marker.unwrap_or(0);
        let all = self.parts(&bucket, &input.upload_id).await?;
        let after: Vec<&Part> = all.iter().filter(|p| p.number as i32 > marker).collect();
        let truncated = after.len() > max;
        let page = &after[..after.len().min(max)];
        Ok(S3Response::new(ListPartsOutput {
            bucket: Some(bucket.name.clone()),
            key: Some(input.key),
            upload_id: Some(input.upload_id),
            is_truncated: Some(truncated),
            max_parts: Some(max as i32),
            part_number_marker: input.part_number_marker,
            next_part_number_marker: page.last().map(|p| p.number as i32),
            owner: Some(owner(&user)),
            initiator: Some(Initiator {
                display_name: Some(user.clone()),
                id: Some(user.clone()),
            }),
            parts: Some(
                page.iter()
                    .map(|p| s3s::dto::Part {
                        e_tag: Some(etag(&p.etag)),
                        last_modified: Some(timestamp_ms(p.modified_ms)),
                        part_number: Some(p.number as i32),
                        size: Some(p.segment.size as i64),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }

    async fn list_multipart_uploads(
        &self,
        req: S3Request<ListMultipartUploadsInput>,
    ) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
        let user = user_of(&self.keys, &req).await?;
        let input = req.input;
        let bucket = self.bucket(&user, &input.bucket).await?;
        let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
        let prefix = input.prefix.clone().unwrap_or_default();
        let key_marker = input.key_marker.clone().unwrap_or_default();
        let id_marker = input.upload_id_marker.clone().unwrap_or_default();
        let mut uploads = index::list_uploads(&self.cluster, &bucket).await?;
        uploads.retain(|(id, u)| {
            u.key.starts_with(&prefix)
                && (u.key.as_str(), id.as_str()) > (key_marker.as_str(), id_marker.as_str())
        });
        uploads.sort_by(|a, b| (&a.1.key, &a.0).cmp(&(&b.1.key, &b.0)));
        let truncated = uploads.len() > max;
        uploads.truncate(max);
        let next = uploads.last().cloned();
        Ok(S3Response::new(ListMultipartUploadsOutput {
            bucket: Some(bucket.name),
            is_truncated: Some(truncated),
            key_marker: input.key_marker,
            upload_id_marker: input.upload_id_marker,
            max_uploads: Some(max as i32),
            next_key_marker: next.as_ref().filter(|_| truncated).map(|n| n.1.key.clone()),
            next_upload_id_marker: next.filter(|_| truncated).map(|n| n.0),
            prefix: input.prefix,
            uploads: Some(
                uploads
                    .into_iter()
                    .map(|(id, u)| MultipartUpload {
                        initiated: Some(timestamp_ms(u.initiated_ms)),
                        initiator: Some(Initiator {
                            display_name: Some(u.owner.clone()),
                            id: Some(u.owner.clone()),
                        }),
                        key: Some(u.key),
                        owner: Some(owner(&u.owner)),
                        upload_id: Some(id),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }))
    }
}

/// The checksums a PutObject asks to be checked.
fn wanted(
    headers: &http::HeaderMap,
    trailer: Option<s3s::TrailingHeaders>,
    i: &PutObjectInput,
) -> Wanted {
    let given = Checksum {
        checksum_crc32: i.checksum_crc32.clone(),
        checksum_crc32c: i.checksum_crc32c.clone(),
        checksum_sha1: i.checksum_sha1.clone(),
        checksum_sha256: i.checksum_sha256.clone(),
        checksum_crc64nvme: i.checksum_crc64nvme.clone(),
        ..Default::default()
    };
    Wanted::new(headers, i.checksum_algorithm.as_ref(), given, trailer)
}

/// The checksums an UploadPart asks to be checked.
fn wanted_part(
    headers: &http::HeaderMap,
    trailer: Option<s3s::TrailingHeaders>,
    i: &UploadPartInput,
) -> Wanted {
    let given = Checksum {
        checksum_crc32: i.checksum_crc32.clone(),
        checksum_crc32c: i.checksum_crc32c.clone(),
        checksum_sha1: i.checksum_sha1.clone(),
        checksum_sha256: i.checksum_sha256.clone(),
        checksum_crc64nvme: i.checksum_crc64nvme.clone(),
        ..Default::default()
    };
    Wanted::new(headers, i.checksum_algorithm.as_ref(), given, trailer)
}

fn check_part_number(n: i32) -> S3Result<()> {
    if (1..=MAX_PART_NUMBER).contains(&n) {
        Ok(())
    } else {
        Err(s3_error!(
            InvalidArgument,
            "Part number must be an integer between 1 and 10000, inclusive"
        ))
    }
}

/// `bytes=first-last` of `x-amz-copy-source-range`, as `[start, end)`.
fn parse_copy_range(r: &str, size: u64) -> S3Result<(u64, u64)> {
    let bad = || s3_error!(InvalidArgument, "invalid x-amz-copy-source-range {r:?}");
    let (a, b) = r
        .strip_prefix("bytes=")
        .and_then(|s| s.split_once('-'))
        .ok_or_else(bad)?;
    let first: u64 = a.parse().map_err(|_| bad())?;
    let last: u64 = b.parse().map_err(|_| bad())?;
    if first > last || last >= size {
        return Err(s3_error!(InvalidRange));
    }
    Ok((first, last + 1))
}

/// Objects and common prefixes of a listing, as S3 DTOs.
fn split_listing(items: Vec<Listed>, user: &str, url: bool) -> (Vec<Object>, Vec<CommonPrefix>) {
    let enc = |s: String| if url { url_encode(&s) } else { s };
    let mut contents = Vec::new();
    let mut prefixes = Vec::new();
    for item in items {
        match item {
            Listed::Object(key, e) => contents.push(Object {
                e_tag: Some(etag(&e.etag)),
                key: Some(enc(key)),
                last_modified: Some(timestamp_ms(e.modified_ms)),
                owner: Some(owner(user)),
                size: Some(e.size as i64),
                storage_class: Some(ObjectStorageClass::from_static(
                    ObjectStorageClass::STANDARD,
                )),
                ..Default::default()
            }),
            Listed::Prefix(p) => prefixes.push(CommonPrefix {
                prefix: Some(enc(p)),
            }),
        }
    }
    (contents, prefixes)
}

impl Gateway {
    /// Remove `key` (absent is fine, as in S3) and reclaim its data.
    async fn remove(&self, bucket: &BucketRecord, key: &str) -> S3Result<()> {
        let previous: Option<ObjectEntry> =
            index::put::<ObjectEntry>(&self.cluster, bucket, Table::Index, key.as_bytes(), None)
                .await?;
        if let Some(prev) = previous {
            self.reclaim(bucket, prev.segments);
        }
        Ok(())
    }

    /// The upload `id`, which must be for `key`.
    async fn upload(&self, bucket: &BucketRecord, id: &str, key: &str) -> S3Result<Upload> {
        match index::get_upload::<Upload>(&self.cluster, bucket, id, &upload_key(id)).await? {
            Some(u) if u.key == key => Ok(u),
            _ => Err(s3_error!(NoSuchUpload)),
        }
    }

    /// Every recorded part of an upload, by number.
    async fn parts(&self, bucket: &BucketRecord, id: &str) -> S3Result<Vec<Part>> {
        Ok(index::list_parts(&self.cluster, bucket, id).await?)
    }

    /// Record a stored part (replacing an earlier upload of the same number, whose data is
    /// reclaimed), then clear its intent.
    async fn record_part(&self, bucket: &BucketRecord, id: &str, part: &Part) -> S3Result<()> {
        let key = part_key(id, part.number as i32);
        // On failure the part's data keeps its intent (the record may have been written):
        // the sweeper deletes it only if no part record references it.
        let previous = index::put_upload(&self.cluster, bucket, id, &key, Some(part)).await?;
        self.clear_intent(bucket, part.segment.data).await;
        if let Some(prev) = previous.filter(|p: &Part| p.segment != part.segment) {
            self.reclaim(bucket, vec![prev.segment]);
        }
        Ok(())
    }

    /// Remove an upload's record and its parts' records in one atomic edit.
    async fn drop_upload(&self, bucket: &BucketRecord, id: &str, parts: &[Part]) -> S3Result<()> {
        let mut keys = vec![upload_key(id)];
        keys.extend(parts.iter().map(|p| part_key(id, p.number as i32)));
        index::delete_upload_records(&self.cluster, bucket, id, keys).await?;
        Ok(())
    }
}
