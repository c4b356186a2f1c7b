//! Object operations: PutObject, GetObject, HeadObject, DeleteObject(s) and CopyObject.

use super::access::{Access, Need};
use super::acl::object_acl_of;
use super::conditions::{check_conditions, preconditions, Preconditions};
use super::dto::{etag, headers_of, metadata_of, timestamp_ms};
use super::encryption::{answer_sse, customer_key_of};
use super::lock::{answer_lock, lock_of};
use super::store::{checked_body, uploaded};
use super::tagging::{header_tags, stored_checksums};
use super::unsupported::refuse_unsupported_put;
use super::versioned::DeleteConditions;
use super::Gateway;
use crate::buckets::BucketRecord;
use crate::index::{now_ms, ObjectEntry};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// Largest single PUT (S3's limit).
pub const MAX_PUT_BYTES: u64 = 5 << 30;
/// Most keys one DeleteObjects request may name (S3's limit).
pub const MAX_DELETE_KEYS: usize = 1000;

/// What a GET or HEAD reads: the entry, its preconditions checked, and the bytes
/// `[start, end)` of it asked for (`partial` for a range request).
struct Target {
    entry: ObjectEntry,
    start: u64,
    end: u64,
    partial: bool,
}

/// The [`Target`] of `key`, if preconditions `p` hold, and of `range` if one was asked for.
async fn target(
    gw: &Gateway,
    bucket: &BucketRecord,
    key: &str,
    version: Option<&str>,
    p: Preconditions<'_>,
    range: Option<&Range>,
    part_number: Option<i32>,
) -> S3Result<Target> {
    let entry = gw.entry_version(bucket, key, version).await?;
    check_conditions(&entry, p)?;
    let (start, end, partial) = match (range, part_number) {
        (Some(_), Some(_)) => {
            return Err(s3_error!(
                InvalidRequest,
                "Range and partNumber cannot be used together"
            ))
        }
        (None, None) => (0, entry.size, false),
        (Some(r), None) => {
            let r = r.check(entry.size).map_err(|_| s3_error!(InvalidRange))?;
            (r.start, r.end, true)
        }
        (None, Some(n)) => part_range(&entry, n)?,
    };
    Ok(Target {
        entry,
        start,
        end,
        partial,
    })
}

/// The bytes of part `n` (from 1) of `entry`: a multipart object's parts are its segments;
/// any object's part 1 of 1 is the whole of it.
fn part_range(entry: &ObjectEntry, n: i32) -> S3Result<(u64, u64, bool)> {
    let parts = if entry.multipart {
        entry.segments.len()
    } else {
        1
    };
    if n < 1 || n as usize > parts {
        let mut e = s3s::S3Error::with_message(
            s3s::S3ErrorCode::Custom("InvalidPartNumber".into()),
            format!("The requested partnumber is not satisfiable (the object has {parts} parts)"),
        );
        e.set_status_code(http::StatusCode::RANGE_NOT_SATISFIABLE);
        return Err(e);
    }
    if !entry.multipart {
        return Ok((0, entry.size, false));
    }
    let start: u64 = entry.segments[..n as usize - 1]
        .iter()
        .map(|s| s.size)
        .sum();
    let end = start + entry.segments[n as usize - 1].size;
    Ok((start, end, true))
}

/// [`target`] for a GetObject or HeadObject input (they name the key, the version, the
/// preconditions, the range and the part alike).
macro_rules! target_of {
    ($gw:ident, $bucket:expr, $input:ident) => {
        target(
            $gw,
            $bucket,
            &$input.key,
            $input.version_id.as_deref(),
            preconditions!($input),
            $input.range.as_ref(),
            $input.part_number,
        )
    };
}

/// What GET and HEAD say of a [`Target`] of `$bucket`: `$output` (GetObjectOutput or
/// HeadObjectOutput, which name these fields alike), with `$extra` fields.
macro_rules! described {
    ($output:ident { $($extra:tt)* }, $target:expr, $bucket:expr) => {{
        let Target { entry, start, end, partial } = $target;
        let h = &entry.headers;
        $output {
            $($extra)*
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
            version_id: Gateway::shown_version(&$bucket, &entry.version_id),
            ..Default::default()
        }
    }};
}

/// The policy action of a read: of a version when the request names one.
fn read_action(version: &Option<String>) -> &'static str {
    if version.is_some() {
        "s3:GetObjectVersion"
    } else {
        "s3:GetObject"
    }
}

/// The policy action of a delete: of a version when the request names one.
fn delete_action(version: &Option<String>) -> &'static str {
    if version.is_some() {
        "s3:DeleteObjectVersion"
    } else {
        "s3:DeleteObject"
    }
}

/// With `x-amz-checksum-mode: ENABLED`, a GET or HEAD of a whole object answers the
/// checksums verified when it was uploaded.
macro_rules! checksums_if_asked {
    ($output:ident, $input:ident, $full:expr, $checksums:expr) => {
        let asked = $input
            .checksum_mode
            .as_ref()
            .is_some_and(|m| m.as_str() == ChecksumMode::ENABLED);
        if asked && $full {
            let c = super::tagging::checksum_of(&$checksums);
            $output.checksum_crc32 = c.checksum_crc32;
            $output.checksum_crc32c = c.checksum_crc32c;
            $output.checksum_sha1 = c.checksum_sha1;
            $output.checksum_sha256 = c.checksum_sha256;
            $output.checksum_crc64nvme = c.checksum_crc64nvme;
            $output.checksum_type = c.checksum_type;
        }
    };
}

/// The `response-*` query parameters of a GET or HEAD (a presigned download naming the file
/// it saves as, say) replace the stored headers in the answer.
macro_rules! response_overrides {
    ($output:ident, $input:ident) => {
        if let Some(v) = &$input.response_content_type {
            $output.content_type = Some(v.clone());
        }
        if let Some(v) = &$input.response_content_encoding {
            $output.content_encoding = Some(v.clone());
        }
        if let Some(v) = &$input.response_content_disposition {
            $output.content_disposition = Some(v.clone());
        }
        if let Some(v) = &$input.response_content_language {
            $output.content_language = Some(v.clone());
        }
        if let Some(v) = &$input.response_cache_control {
            $output.cache_control = Some(v.clone());
        }
        if let Some(v) = &$input.response_expires {
            $output.expires = Some(v.clone());
        }
    };
}

/// The whole-object checksums among `c` (not a multipart object's composite ones).
fn full_object_checksums(c: &crate::index::Checksums) -> crate::index::Checksums {
    let keep = |v: &Option<String>| v.clone().filter(|v| !crate::checksum::is_composite(v));
    crate::index::Checksums {
        crc32: keep(&c.crc32),
        crc32c: keep(&c.crc32c),
        sha1: keep(&c.sha1),
        sha256: keep(&c.sha256),
        crc64nvme: keep(&c.crc64nvme),
    }
}

/// `kept` with the checksums `computed` over a copy's bytes added.
fn merged_checksums(kept: crate::index::Checksums, computed: &Checksum) -> crate::index::Checksums {
    let c = stored_checksums(computed);
    crate::index::Checksums {
        crc32: kept.crc32.or(c.crc32),
        crc32c: kept.crc32c.or(c.crc32c),
        sha1: kept.sha1.or(c.sha1),
        sha256: kept.sha256.or(c.sha256),
        crc64nvme: kept.crc64nvme.or(c.crc64nvme),
    }
}

/// PutObject: store the body under an intent, check its digests, then point the key at it.
pub(super) async fn put_object(
    gw: &Gateway,
    mut req: S3Request<PutObjectInput>,
) -> S3Result<S3Response<PutObjectOutput>> {
    let need = Need::object("s3:PutObject", &req.input.key);
    let Access { bucket, caller, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    refuse_unsupported_put!(req.input);
    let (owner, acl) = object_acl_of!(&bucket, caller.as_deref(), req.input)?;
    if req.input.write_offset_bytes.is_some() {
        return Err(s3_error!(
            NotImplemented,
            "appends (x-amz-write-offset-bytes) are not supported"
        ));
    }
    let customer = customer_key_of!(req.input)?;
    let sse = gw.new_sse(
        &bucket,
        customer.as_ref(),
        req.input.server_side_encryption.as_ref(),
    )?;
    let mut body = checked_body!(req);
    body.cipher = sse.as_ref().map(|(_, key)| key.clone());
    let input = req.input;
    if body.expected_len.is_some_and(|l| l > MAX_PUT_BYTES) {
        return Err(s3_error!(EntityTooLarge));
    }
    let (retention, legal_hold) = lock_of(
        &bucket,
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let (segment, md5, checksums) = gw
        .store_checked(&bucket, &input.key, None, body, MAX_PUT_BYTES)
        .await?;
    let entry = ObjectEntry {
        size: segment.size,
        etag: crate::sse::etag_of(&md5, sse.as_ref()),
        modified_ms: now_ms(),
        segments: vec![segment.clone()],
        headers: headers_of!(input),
        tags: header_tags(input.tagging.as_deref())?,
        checksums: stored_checksums(&checksums),
        sse: sse.map(|(s, _)| s),
        retention,
        legal_hold,
        owner,
        acl,
        ..Default::default()
    };
    // A failed index update may still have been applied (a reply lost after retries):
    // the data stays, and its intent lets the sweeper decide once nothing can race it.
    let entry = gw
        .commit(
            &bucket,
            &input.key,
            entry,
            (input.if_match.as_ref(), input.if_none_match.as_ref()),
            true,
        )
        .await?;
    gw.clear_intent(&bucket, segment.data).await;
    let mut output = uploaded!(PutObjectOutput, etag(&entry.etag), checksums);
    output.version_id = Gateway::shown_version(&bucket, &entry.version_id);
    answer_sse!(output, &entry.sse);
    gw.stats.count(crate::stats::Counted::PutObject);
    Ok(S3Response::new(output))
}

/// GetObject: the object's bytes (or the range asked for), if its preconditions hold.
pub(super) async fn get_object(
    gw: &Gateway,
    req: S3Request<GetObjectInput>,
) -> S3Result<S3Response<GetObjectOutput>> {
    let need = Need::object(read_action(&req.input.version_id), &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = &req.input;
    let customer = customer_key_of!(input)?;
    let target = target_of!(gw, &bucket, input).await?;
    let cipher = gw.open_sse(&target.entry.sse, customer.as_ref())?;
    let (full, checksums) = (!target.partial, target.entry.checksums.clone());
    let (tags, sse) = (target.entry.tags.len(), target.entry.sse.clone());
    let (retention, hold) = (target.entry.retention, target.entry.legal_hold);
    let length = target.end - target.start;
    let body = gw.read(&bucket, &target.entry, (target.start, target.end), cipher);
    let mut output = described!(
        GetObjectOutput {
            body: Some(StreamingBlob::new(body)),
        },
        target,
        bucket
    );
    output.tag_count = (tags > 0).then_some(tags as i32);
    answer_sse!(output, &sse);
    answer_lock!(output, retention, hold);
    response_overrides!(output, input);
    checksums_if_asked!(output, input, full, checksums);
    gw.stats.count(crate::stats::Counted::GetObject(length));
    Ok(S3Response::new(output))
}

/// HeadObject: what GetObject would answer, without the bytes.
pub(super) async fn head_object(
    gw: &Gateway,
    req: S3Request<HeadObjectInput>,
) -> S3Result<S3Response<HeadObjectOutput>> {
    let need = Need::object(read_action(&req.input.version_id), &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = &req.input;
    let customer = customer_key_of!(input)?;
    let target = target_of!(gw, &bucket, input).await?;
    gw.open_sse(&target.entry.sse, customer.as_ref())?;
    let (full, checksums) = (!target.partial, target.entry.checksums.clone());
    let sse = target.entry.sse.clone();
    let (retention, hold) = (target.entry.retention, target.entry.legal_hold);
    let mut output = described!(HeadObjectOutput {}, target, bucket);
    answer_sse!(output, &sse);
    answer_lock!(output, retention, hold);
    response_overrides!(output, input);
    checksums_if_asked!(output, input, full, checksums);
    gw.stats.count(crate::stats::Counted::HeadObject);
    Ok(S3Response::new(output))
}

/// DeleteObject: remove the key (absent is fine, as in S3) and reclaim its data; with
/// `If-Match`, `x-amz-if-match-size` or `x-amz-if-match-last-modified-time`, only the
/// object they describe, atomically.
pub(super) async fn delete_object(
    gw: &Gateway,
    req: S3Request<DeleteObjectInput>,
) -> S3Result<S3Response<DeleteObjectOutput>> {
    let need = Need::object(delete_action(&req.input.version_id), &req.input.key);
    let Access { bucket, caller, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = &req.input;
    if input.mfa.is_some() {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    let expected = DeleteConditions {
        etag: input.if_match.as_ref().map(|c| match c.as_etag() {
            Some(e) => e.value().to_string(),
            None => "*".to_string(),
        }),
        size: input.if_match_size,
        modified: input.if_match_last_modified_time.as_ref(),
        bypass_governance: input.bypass_governance_retention == Some(true)
            && caller.as_deref() == Some(bucket.owner.as_str()),
    };
    let removed = gw
        .remove_object(&bucket, &input.key, input.version_id.as_deref(), expected)
        .await?;
    Ok(S3Response::new(DeleteObjectOutput {
        delete_marker: removed.delete_marker.then_some(true),
        version_id: Gateway::shown_version(&bucket, &removed.version_id),
        ..Default::default()
    }))
}

/// DeleteObjects: remove each key in turn, reporting failures per key.
pub(super) async fn delete_objects(
    gw: &Gateway,
    req: S3Request<DeleteObjectsInput>,
) -> S3Result<S3Response<DeleteObjectsOutput>> {
    // Each key is authorised on its own (a policy may allow some and not others).
    let access = gw.open(&req, &req.input.bucket).await?;
    if req.input.mfa.is_some() {
        return Err(s3_error!(NotImplemented, "MFA delete is not supported"));
    }
    if req.input.delete.objects.len() > MAX_DELETE_KEYS {
        return Err(s3_error!(
            MalformedXML,
            "a DeleteObjects request names at most {MAX_DELETE_KEYS} keys"
        ));
    }
    let quiet = req.input.delete.quiet.unwrap_or(false);
    let bypass = req.input.bypass_governance_retention == Some(true)
        && access.caller.as_deref() == Some(access.bucket.owner.as_str());
    let mut deleted = Vec::new();
    let mut errors = Vec::new();
    for obj in req.input.delete.objects {
        let expected = DeleteConditions {
            etag: obj.e_tag.as_ref().map(|e| e.value().to_string()),
            size: obj.size,
            modified: obj.last_modified_time.as_ref(),
            bypass_governance: bypass,
        };
        let need = Need::object(delete_action(&obj.version_id), &obj.key);
        let removed = match gw.permits(&access, need) {
            Ok(true) => {
                gw.remove_object(
                    &access.bucket,
                    &obj.key,
                    obj.version_id.as_deref(),
                    expected,
                )
                .await
            }
            Ok(false) => Err(s3_error!(AccessDenied)),
            Err(e) => Err(e),
        };
        match removed {
            Ok(r) => {
                if !quiet {
                    let shown = Gateway::shown_version(&access.bucket, &r.version_id);
                    deleted.push(DeletedObject {
                        key: Some(obj.key),
                        delete_marker: r.delete_marker.then_some(true),
                        delete_marker_version_id: shown.clone().filter(|_| r.delete_marker),
                        version_id: obj.version_id.clone(),
                    })
                }
            }
            Err(e) => errors.push(Error {
                code: Some(e.code().as_str().into()),
                key: Some(obj.key),
                message: e.message().map(String::from),
                version_id: obj.version_id,
            }),
        }
    }
    Ok(S3Response::new(DeleteObjectsOutput {
        deleted: Some(deleted),
        errors: (!errors.is_empty()).then_some(errors),
        ..Default::default()
    }))
}

/// CopyObject: the source's bytes under a new key, or new headers on the same object.
pub(super) async fn copy_object(
    gw: &Gateway,
    req: S3Request<CopyObjectInput>,
) -> S3Result<S3Response<CopyObjectOutput>> {
    refuse_unsupported_put!(req.input);
    let source_customer = customer_key_of!(copy source of req.input)?;
    let customer = customer_key_of!(req.input)?;
    let copy = gw
        .authorise_copy(
            &req,
            &req.input.copy_source,
            &req.input.bucket,
            &req.input.key,
        )
        .await?;
    let input = req.input;
    let src = gw
        .copy_source(&copy, preconditions!(copy source of input))
        .await?;
    let bucket = &copy.bucket;
    // A copy is a new object: the ACL is the request's (private when it names none).
    let (owner, acl) = object_acl_of!(bucket, copy.caller.as_deref(), input)?;
    let source_version = Gateway::shown_version(&copy.source, &src.version_id);
    let source_cipher = gw.open_sse(&src.sse, source_customer.as_ref())?;
    let sse = gw.new_sse(
        bucket,
        customer.as_ref(),
        input.server_side_encryption.as_ref(),
    )?;
    let (retention, legal_hold) = lock_of(
        bucket,
        input.object_lock_mode.as_ref(),
        input.object_lock_retain_until_date.as_ref(),
        input.object_lock_legal_hold_status.as_ref(),
    )?;
    let replace = input
        .metadata_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == MetadataDirective::REPLACE);
    let headers = if replace {
        headers_of!(input)
    } else {
        src.headers.clone()
    };
    let replace_tags = input
        .tagging_directive
        .as_ref()
        .is_some_and(|d| d.as_str() == TaggingDirective::REPLACE);
    let tags = if replace_tags {
        header_tags(input.tagging.as_deref())?
    } else if input.tagging.is_some() {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-tagging on a copy needs x-amz-tagging-directive: REPLACE"
        ));
    } else {
        src.tags.clone()
    };
    let same = copy.source.name == bucket.name && copy.source_key == input.key;
    // The data can be shared only when neither side is encrypted (else it is re-encrypted)
    // and no checksum is asked for that the source lacks (it is computed over the copy).
    let asked = input
        .checksum_algorithm
        .as_ref()
        .map(|a| {
            crate::checksum::algorithm_named(a.as_str()).ok_or_else(|| {
                s3_error!(
                    InvalidRequest,
                    "unknown checksum algorithm {:?}",
                    a.as_str()
                )
            })
        })
        .transpose()?;
    // A copy keeps the source's whole-object checksums (they are of the plain bytes); a
    // multipart source's composite one describes its parts, which a copy does not keep.
    let kept = full_object_checksums(&src.checksums);
    let computing = asked
        .filter(|a| crate::checksum::value_of(&super::tagging::checksum_of(&kept), a).is_none());
    let same = same && src.sse.is_none() && sse.is_none() && computing.is_none();
    let entry = if same {
        // Copying a version onto its own key restores it: allowed as it is.
        if !replace && copy.source_version.is_none() {
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
            tags,
            modified_ms: now_ms(),
            retention,
            legal_hold,
            owner,
            acl,
            checksums: kept,
            ..src
        }
    } else {
        let wanted = crate::checksum::Wanted::computing(computing.unwrap_or_default());
        let body = wanted.watch(gw.read(&copy.source, &src, (0, src.size), source_cipher));
        let (segment, md5) = gw
            .store_body(
                bucket,
                &input.key,
                None,
                body,
                (Some(src.size), MAX_PUT_BYTES),
                sse.as_ref().map(|(_, key)| key),
            )
            .await?;
        ObjectEntry {
            size: segment.size,
            // A copy is a single-part object: its ETag is the MD5 of its bytes.
            etag: crate::sse::etag_of(&md5, sse.as_ref()),
            modified_ms: now_ms(),
            segments: vec![segment],
            headers,
            tags,
            sse: sse.map(|(s, _)| s),
            retention,
            legal_hold,
            owner,
            acl,
            checksums: merged_checksums(kept, &wanted.verify()?),
            ..Default::default()
        }
    };
    // On failure the new data keeps its intent: the update may have been applied, so only
    // the sweeper, which checks the index, may delete it.
    let entry = gw
        .commit(bucket, &input.key, entry, (None, None), false)
        .await?;
    if !same {
        gw.clear_intent(bucket, entry.segments[0].data).await;
    }
    let mut output = CopyObjectOutput {
        copy_object_result: Some({
            let c = super::tagging::checksum_of(&entry.checksums);
            CopyObjectResult {
                e_tag: Some(etag(&entry.etag)),
                last_modified: Some(timestamp_ms(entry.modified_ms)),
                checksum_crc32: c.checksum_crc32,
                checksum_crc32c: c.checksum_crc32c,
                checksum_sha1: c.checksum_sha1,
                checksum_sha256: c.checksum_sha256,
                checksum_crc64nvme: c.checksum_crc64nvme,
                checksum_type: c.checksum_type,
            }
        }),
        copy_source_version_id: source_version,
        version_id: Gateway::shown_version(bucket, &entry.version_id),
        ..Default::default()
    };
    answer_sse!(output, &entry.sse);
    Ok(S3Response::new(output))
}
