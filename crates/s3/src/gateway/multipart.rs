//! Multipart uploads: CreateMultipartUpload, UploadPart, UploadPartCopy,
//! CompleteMultipartUpload and AbortMultipartUpload, and the upload and part records they
//! keep in the bucket's upload tables (see `index::Table::Uploads`).

use super::access::{Access, Need};
use super::conditions::preconditions;
use super::dto::{etag, headers_of, timestamp_ms};
use super::encryption::{answer_sse, customer_key_of};
use super::errors::internal;
use super::objects::MAX_PUT_BYTES;
use super::store::{checked_body, uploaded};
use super::tagging::stored_checksums;
use super::Gateway;
use crate::buckets::BucketRecord;
use crate::index::{self, now_ms, ObjectEntry, Part, Segment, Upload};
use bytes::Bytes;
use md5::{Digest, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// Smallest part of a multipart upload but the last (S3's limit).
pub const MIN_PART_BYTES: u64 = 5 << 20;
/// Part numbers are 1..=10000 (S3's limit).
pub const MAX_PART_NUMBER: i32 = 10_000;

fn part_key(upload: &str, number: i32) -> String {
    format!("p/{upload}/{number:05}")
}

fn upload_key(upload: &str) -> String {
    format!("u/{upload}")
}

/// A part's ETag from its MD5 (opaque for SSE-C, see `sse::etag_of`).
fn part_etag(
    md5: &[u8; 16],
    sse: &Option<crate::sse::Sse>,
    cipher: Option<crate::sse::PieceKey>,
) -> String {
    let pair = sse.clone().zip(cipher);
    crate::sse::etag_of(md5, pair.as_ref())
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

impl Gateway {
    /// The upload `id`, which must be for `key`.
    pub(super) async fn upload(
        &self,
        bucket: &BucketRecord,
        id: &str,
        key: &str,
    ) -> S3Result<Upload> {
        match index::get_upload::<Upload>(&self.cluster, bucket, id, &upload_key(id)).await? {
            Some(u) if u.key == key => Ok(u),
            _ => Err(s3_error!(NoSuchUpload)),
        }
    }

    /// Every recorded part of an upload, by number.
    pub(super) async fn parts(&self, bucket: &BucketRecord, id: &str) -> S3Result<Vec<Part>> {
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

    /// Abort upload `id`: drop its records, reclaim its parts — unless a
    /// CompleteMultipartUpload claimed it (its object is made of those parts):
    /// OperationAborted. Gone already is fine.
    pub(super) async fn abort_upload(&self, bucket: &BucketRecord, id: &str) -> S3Result<()> {
        // Bound: only a racing complete or abort changes the upload's record.
        for _ in 0..MAX_UPLOAD_ATTEMPTS {
            let key = upload_key(id);
            let Some(raw) = index::get_upload_raw(&self.cluster, bucket, id, &key).await? else {
                return Ok(());
            };
            let upload: Upload = index::decode_raw(key.as_bytes(), &raw)?;
            if upload
                .completing_ms
                .is_some_and(|t| now_ms() - t < COMPLETE_CLAIM_MS)
            {
                return Err(s3_error!(
                    OperationAborted,
                    "the upload is being completed; it cannot be aborted"
                ));
            }
            let parts = self.parts(bucket, id).await?;
            // A complete that claimed it long ago may have made the object before its
            // gateway died: parts a version of the key references stay.
            let referenced: Vec<Segment> = match upload.completing_ms {
                None => Vec::new(),
                Some(_) => self.entry_segments(bucket, &upload.key).await?,
            };
            if self.drop_upload(bucket, id, &parts, Some(raw)).await? {
                let unused = parts
                    .into_iter()
                    .map(|p| p.segment)
                    .filter(|s| !referenced.contains(s))
                    .collect();
                self.reclaim(bucket, unused);
                return Ok(());
            }
        }
        Err(s3_error!(
            OperationAborted,
            "the upload kept changing; try again"
        ))
    }

    /// Claim upload `id` of `key` for a CompleteMultipartUpload: mark it completing, so no
    /// abort deletes its parts while they become the object. Returns it and the bytes of
    /// the claimed record.
    async fn claim_upload(
        &self,
        bucket: &BucketRecord,
        id: &str,
        key: &str,
    ) -> S3Result<(Upload, Bytes)> {
        // Bound: only a racing complete or abort changes the upload's record.
        for _ in 0..MAX_UPLOAD_ATTEMPTS {
            let record_key = upload_key(id);
            let Some(raw) = index::get_upload_raw(&self.cluster, bucket, id, &record_key).await?
            else {
                return Err(s3_error!(NoSuchUpload));
            };
            let mut upload: Upload = index::decode_raw(record_key.as_bytes(), &raw)?;
            if upload.key != key {
                return Err(s3_error!(NoSuchUpload));
            }
            upload.completing_ms = Some(now_ms());
            if let Some(claimed) =
                index::put_upload_if(&self.cluster, bucket, id, &record_key, &upload, raw).await?
            {
                return Ok((upload, claimed));
            }
        }
        Err(s3_error!(
            OperationAborted,
            "the upload kept changing; try again"
        ))
    }

    /// Undo a claim when the complete failed before the object existed (the upload can be
    /// completed again or aborted), if the record is still the claimed one.
    async fn release_upload(
        &self,
        bucket: &BucketRecord,
        id: &str,
        mut upload: Upload,
        claimed: Bytes,
    ) {
        upload.completing_ms = None;
        let released =
            index::put_upload_if(&self.cluster, bucket, id, &upload_key(id), &upload, claimed)
                .await;
        if let Err(e) = released {
            tracing::warn!(upload = id, "releasing a failed complete's claim: {e}");
        }
    }

    /// Remove an upload's record and its parts' records in one atomic edit; with
    /// `expected`, only if the upload's record still holds those bytes (false: changed).
    async fn drop_upload(
        &self,
        bucket: &BucketRecord,
        id: &str,
        parts: &[Part],
        expected: Option<Bytes>,
    ) -> S3Result<bool> {
        let mut keys = vec![upload_key(id)];
        keys.extend(parts.iter().map(|p| part_key(id, p.number as i32)));
        Ok(index::delete_upload_records(&self.cluster, bucket, id, keys, expected).await?)
    }
}

/// How long a CompleteMultipartUpload's claim holds off aborts of its upload. A gateway that
/// died mid-complete leaves its claim; after this an abort goes ahead (keeping the parts an
/// object references).
const COMPLETE_CLAIM_MS: i64 = 10 * 60 * 1000;
/// Rounds of claim or abort against racing changes of an upload's record.
const MAX_UPLOAD_ATTEMPTS: usize = 8;

/// CreateMultipartUpload: record a new upload, with the headers its object will have.
pub(super) async fn create_multipart_upload(
    gw: &Gateway,
    req: S3Request<CreateMultipartUploadInput>,
) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
    let need = Need::object("s3:PutObject", &req.input.key);
    let Access { caller, bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    super::unsupported::refuse_unsupported_put!(req.input);
    let (object_owner, acl) = super::acl::object_acl_of!(&bucket, caller.as_deref(), req.input)?;
    let customer = customer_key_of!(req.input)?;
    let sse = gw.new_sse(
        &bucket,
        customer.as_ref(),
        req.input.server_side_encryption.as_ref(),
    )?;
    let input = req.input;
    let (retention, legal_hold) = super::lock::lock_of(
        &bucket,
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let checksum_algorithm = upload_checksum(&input)?;
    let id = format!("{:016x}", gw.ids.next(&gw.cluster).await?);
    let upload = Upload {
        completing_ms: None,
        checksum_algorithm: checksum_algorithm.map(String::from),
        retention,
        legal_hold,
        key: input.key.clone(),
        initiated_ms: now_ms(),
        owner: caller.unwrap_or_else(|| "anonymous".into()),
        tags: super::tagging::header_tags(input.tagging.as_deref())?,
        headers: headers_of!(input),
        sse: sse.map(|(s, _)| s),
        object_owner,
        acl,
    };
    index::put_upload(&gw.cluster, &bucket, &id, &upload_key(&id), Some(&upload)).await?;
    let mut output = CreateMultipartUploadOutput {
        bucket: Some(bucket.name),
        key: Some(input.key),
        upload_id: Some(id),
        checksum_algorithm: input.checksum_algorithm.clone(),
        checksum_type: checksum_algorithm
            .map(|_| ChecksumType::from_static(ChecksumType::COMPOSITE)),
        ..Default::default()
    };
    answer_sse!(output, &upload.sse);
    Ok(S3Response::new(output))
}

/// UploadPart: store a part's body, check its digests, then record it (replacing an earlier
/// part of the same number).
pub(super) async fn upload_part(
    gw: &Gateway,
    mut req: S3Request<UploadPartInput>,
) -> S3Result<S3Response<UploadPartOutput>> {
    let need = Need::object("s3:PutObject", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let customer = customer_key_of!(req.input)?;
    let upload = gw
        .upload(&bucket, &req.input.upload_id, &req.input.key)
        .await?;
    check_part_number(req.input.part_number)?;
    // The upload's checksum is computed over every part, whether the client sent it or not.
    if let Some(a) = &upload.checksum_algorithm {
        req.input.checksum_algorithm = Some(ChecksumAlgorithm::from(a.to_ascii_uppercase()));
    }
    let mut body = checked_body!(req);
    let input = req.input;
    body.cipher = gw.open_sse(&upload.sse, customer.as_ref())?;
    let cipher = body.cipher.clone();
    let (segment, md5, checksums) = gw
        .store_checked(
            &bucket,
            &input.key,
            Some(&input.upload_id),
            body,
            MAX_PUT_BYTES,
        )
        .await?;
    let part = Part {
        number: input.part_number as u32,
        segment: segment.clone(),
        etag: part_etag(&md5, &upload.sse, cipher),
        modified_ms: now_ms(),
        checksum: part_checksum(&upload, &checksums)?,
    };
    gw.record_part(&bucket, &input.upload_id, &part).await?;
    let mut output = uploaded!(UploadPartOutput, etag(&part.etag), checksums);
    answer_sse!(output, &upload.sse);
    Ok(S3Response::new(output))
}

/// UploadPartCopy: a part from (a range of) an existing object.
pub(super) async fn upload_part_copy(
    gw: &Gateway,
    req: S3Request<UploadPartCopyInput>,
) -> S3Result<S3Response<UploadPartCopyOutput>> {
    let copy = gw
        .authorise_copy(
            &req,
            &req.input.copy_source,
            &req.input.bucket,
            &req.input.key,
        )
        .await?;
    let source_customer = customer_key_of!(copy source of req.input)?;
    let customer = customer_key_of!(req.input)?;
    let input = req.input;
    let bucket = &copy.bucket;
    let upload = gw.upload(bucket, &input.upload_id, &input.key).await?;
    check_part_number(input.part_number)?;
    let cipher = gw.open_sse(&upload.sse, customer.as_ref())?;
    let src = gw
        .copy_source(&copy, preconditions!(copy source of input))
        .await?;
    let source_cipher = gw.open_sse(&src.sse, source_customer.as_ref())?;
    let (start, end) = match &input.copy_source_range {
        None => (0, src.size),
        Some(r) => parse_copy_range(r, src.size)?,
    };
    let wanted = crate::checksum::Wanted::computing(
        upload.checksum_algorithm.as_deref().unwrap_or_default(),
    );
    let body = wanted.watch(gw.read(&copy.source, &src, (start, end), source_cipher));
    let (segment, md5) = gw
        .store_body(
            bucket,
            &input.key,
            Some(&input.upload_id),
            body,
            (Some(end - start), MAX_PUT_BYTES),
            cipher.as_ref(),
        )
        .await?;
    let part = Part {
        number: input.part_number as u32,
        segment,
        etag: part_etag(&md5, &upload.sse, cipher),
        modified_ms: now_ms(),
        checksum: part_checksum(&upload, &wanted.verify()?)?,
    };
    gw.record_part(bucket, &input.upload_id, &part).await?;
    Ok(S3Response::new(UploadPartCopyOutput {
        copy_part_result: Some(CopyPartResult {
            e_tag: Some(etag(&part.etag)),
            last_modified: Some(timestamp_ms(part.modified_ms)),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

/// CompleteMultipartUpload: the chosen parts become the object; the rest is reclaimed.
pub(super) async fn complete_multipart_upload(
    gw: &Gateway,
    req: S3Request<CompleteMultipartUploadInput>,
) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
    let need = Need::object("s3:PutObject", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = req.input;
    let (upload, claimed) = gw
        .claim_upload(&bucket, &input.upload_id, &input.key)
        .await?;
    match complete_claimed(gw, &bucket, &input, upload.clone()).await {
        Ok(output) => Ok(S3Response::new(output)),
        Err(e) => {
            gw.release_upload(&bucket, &input.upload_id, upload, claimed)
                .await;
            Err(e)
        }
    }
}

/// The rest of a CompleteMultipartUpload, once the upload is claimed.
async fn complete_claimed(
    gw: &Gateway,
    bucket: &BucketRecord,
    input: &CompleteMultipartUploadInput,
    upload: Upload,
) -> S3Result<CompleteMultipartUploadOutput> {
    let stored = gw.parts(bucket, &input.upload_id).await?;
    let wanted = input
        .multipart_upload
        .as_ref()
        .and_then(|m| m.parts.clone())
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
        check_part_checksums(&upload, part, w)?;
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
    let checksum = object_checksum(&upload, &chosen, input)?;
    let entry = ObjectEntry {
        size: chosen.iter().map(|p| p.segment.size).sum(),
        etag: format!("{}-{}", hex::encode(md5s.finalize()), chosen.len()),
        modified_ms: now_ms(),
        segments: chosen.iter().map(|p| p.segment.clone()).collect(),
        multipart: true,
        headers: upload.headers,
        tags: upload.tags,
        sse: upload.sse,
        retention: upload.retention,
        legal_hold: upload.legal_hold,
        owner: upload.object_owner,
        acl: upload.acl,
        checksums: stored_checksums(&checksum),
        ..Default::default()
    };
    let entry = gw
        .commit(
            bucket,
            &input.key,
            entry,
            (input.if_match.as_ref(), input.if_none_match.as_ref()),
            false,
        )
        .await?;
    // The object is visible now: drop the upload's records and the unused parts.
    let unused: Vec<Segment> = stored
        .iter()
        .filter(|p| !entry.segments.contains(&p.segment))
        .map(|p| p.segment.clone())
        .collect();
    // The object exists now: a failure to drop the records leaves them claimed, and an
    // abort of them later reclaims only parts no version of the key references.
    match gw
        .drop_upload(bucket, &input.upload_id, &stored, None)
        .await
    {
        Ok(_) => gw.reclaim(bucket, unused),
        Err(e) => tracing::warn!(upload = %input.upload_id, "dropping a completed upload: {e}"),
    }
    Ok(CompleteMultipartUploadOutput {
        bucket: Some(bucket.name.clone()),
        key: Some(input.key.clone()),
        e_tag: Some(etag(&entry.etag)),
        location: Some(format!("/{}/{}", bucket.name, input.key)),
        version_id: Gateway::shown_version(bucket, &entry.version_id),
        server_side_encryption: matches!(entry.sse, Some(crate::sse::Sse::S3 { .. }))
            .then(|| ServerSideEncryption::from_static(ServerSideEncryption::AES256)),
        checksum_crc32: checksum.checksum_crc32,
        checksum_crc32c: checksum.checksum_crc32c,
        checksum_sha1: checksum.checksum_sha1,
        checksum_sha256: checksum.checksum_sha256,
        checksum_crc64nvme: checksum.checksum_crc64nvme,
        checksum_type: upload
            .checksum_algorithm
            .as_ref()
            .map(|_| ChecksumType::from_static(ChecksumType::COMPOSITE)),
        ..Default::default()
    })
}

/// The checksum algorithm a CreateMultipartUpload asks for (COMPOSITE checksums only).
fn upload_checksum(input: &CreateMultipartUploadInput) -> S3Result<Option<&'static str>> {
    if let Some(t) = &input.checksum_type {
        if t.as_str() != ChecksumType::COMPOSITE {
            return Err(s3_error!(
                NotImplemented,
                "checksum type {:?} is not supported for multipart uploads (COMPOSITE is)",
                t.as_str()
            ));
        }
    }
    match &input.checksum_algorithm {
        None if input.checksum_type.is_some() => Err(s3_error!(
            InvalidRequest,
            "a checksum type needs a checksum algorithm"
        )),
        None => Ok(None),
        Some(a) => crate::checksum::algorithm_named(a.as_str())
            .map(Some)
            .ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "unknown checksum algorithm {:?}",
                    a.as_str()
                )
            }),
    }
}

/// A part's checksum with its upload's algorithm, from what was computed over its bytes.
fn part_checksum(upload: &Upload, computed: &Checksum) -> S3Result<Option<String>> {
    let Some(algorithm) = &upload.checksum_algorithm else {
        return Ok(None);
    };
    crate::checksum::value_of(computed, algorithm)
        .cloned()
        .map(Some)
        .ok_or_else(|| internal(format!("the part's {algorithm} was not computed")))
}

/// The checksums a CompleteMultipartUpload names for one part must be the ones computed
/// when it was uploaded (with the upload's algorithm; any other is InvalidRequest).
fn check_part_checksums(upload: &Upload, part: &Part, named: &CompletedPart) -> S3Result<()> {
    let given = Checksum {
        checksum_crc32: named.checksum_crc32.clone(),
        checksum_crc32c: named.checksum_crc32c.clone(),
        checksum_sha1: named.checksum_sha1.clone(),
        checksum_sha256: named.checksum_sha256.clone(),
        checksum_crc64nvme: named.checksum_crc64nvme.clone(),
        ..Default::default()
    };
    for algorithm in ["crc32", "crc32c", "sha1", "sha256", "crc64nvme"] {
        let Some(value) = crate::checksum::value_of(&given, algorithm) else {
            continue;
        };
        if upload.checksum_algorithm.as_deref() != Some(algorithm) {
            return Err(s3_error!(
                InvalidRequest,
                "part {} names a {algorithm} checksum; the upload was created with {}",
                part.number,
                upload
                    .checksum_algorithm
                    .as_deref()
                    .unwrap_or("no checksum algorithm")
            ));
        }
        if part.checksum.as_deref() != Some(value.trim()) {
            return Err(s3_error!(
                InvalidPart,
                "part {}: the {algorithm} checksum does not match the part's",
                part.number
            ));
        }
    }
    Ok(())
}

/// The object's COMPOSITE checksum, when its upload has an algorithm; one the complete
/// request names for the whole object must equal it.
fn object_checksum(
    upload: &Upload,
    chosen: &[&Part],
    input: &CompleteMultipartUploadInput,
) -> S3Result<Checksum> {
    let Some(algorithm) = &upload.checksum_algorithm else {
        return Ok(Checksum::default());
    };
    let parts: Vec<&str> = chosen
        .iter()
        .map(|p| p.checksum.as_deref().unwrap_or_default())
        .collect();
    let value = crate::checksum::composite(algorithm, &parts).map_err(internal)?;
    let given = Checksum {
        checksum_crc32: input.checksum_crc32.clone(),
        checksum_crc32c: input.checksum_crc32c.clone(),
        checksum_sha1: input.checksum_sha1.clone(),
        checksum_sha256: input.checksum_sha256.clone(),
        checksum_crc64nvme: input.checksum_crc64nvme.clone(),
        ..Default::default()
    };
    if let Some(named) = crate::checksum::value_of(&given, algorithm) {
        if named.trim() != value {
            return Err(s3_error!(
                BadDigest,
                "the object's {algorithm} checksum {named:?} is not the composite of its parts"
            ));
        }
    }
    Ok(crate::checksum::with_value(
        Checksum::default(),
        algorithm,
        value,
    ))
}

/// AbortMultipartUpload: drop the upload's records and reclaim its parts.
pub(super) async fn abort_multipart_upload(
    gw: &Gateway,
    req: S3Request<AbortMultipartUploadInput>,
) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
    let need = Need::object("s3:AbortMultipartUpload", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = req.input;
    gw.upload(&bucket, &input.upload_id, &input.key).await?;
    gw.abort_upload(&bucket, &input.upload_id).await?;
    Ok(S3Response::new(AbortMultipartUploadOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::S3ErrorCode;

    /// Goal: `x-amz-copy-source-range` is an inclusive `bytes=first-last` inside the object;
    /// malformed is InvalidArgument, outside the object is InvalidRange.
    #[test]
    fn copy_source_range() {
        assert_eq!(parse_copy_range("bytes=0-9", 10).ok(), Some((0, 10)));
        assert_eq!(parse_copy_range("bytes=3-3", 10).ok(), Some((3, 4)));
        let code = |r: &str| parse_copy_range(r, 10).err().map(|e| e.code().clone());
        assert_eq!(code("bytes=0-10"), Some(S3ErrorCode::InvalidRange));
        assert_eq!(code("bytes=5-4"), Some(S3ErrorCode::InvalidRange));
        assert_eq!(code("0-4"), Some(S3ErrorCode::InvalidArgument));
        assert_eq!(code("bytes=a-4"), Some(S3ErrorCode::InvalidArgument));
    }
}
