//! Tags and object attributes: Put/Get/DeleteObjectTagging, Put/Get/DeleteBucketTagging,
//! GetObjectAttributes, and the `x-amz-tagging` header of uploads. Object tags live in the
//! object's index entry (per version), bucket tags in the bucket record.

use super::access::{Access, Need};
use super::dto::{etag, timestamp_ms};
use super::Gateway;
use crate::buckets::{self, BucketError};
use crate::index::{Checksums, ObjectEntry};
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// Most tags of one object (S3's limit).
pub const MAX_OBJECT_TAGS: usize = 10;
/// Most tags of one bucket (S3's limit).
pub const MAX_BUCKET_TAGS: usize = 50;

/// Check a tag set: at most `max` tags, keys of 1–128 characters not starting with `aws:`
/// and unique, values of at most 256 characters.
fn check_tags(tags: Vec<(String, String)>, max: usize) -> S3Result<BTreeMap<String, String>> {
    if tags.len() > max {
        let mut e = s3s::S3Error::with_message(
            s3s::S3ErrorCode::Custom("BadRequest".into()),
            format!("Object tags cannot be greater than {max}"),
        );
        e.set_status_code(http::StatusCode::BAD_REQUEST);
        return Err(e);
    }
    let mut out = BTreeMap::new();
    for (k, v) in tags {
        let klen = k.chars().count();
        if klen == 0 || klen > 128 || v.chars().count() > 256 {
            return Err(s3_error!(
                InvalidTag,
                "tag keys are 1 to 128 characters, values at most 256"
            ));
        }
        if k.to_ascii_lowercase().starts_with("aws:") {
            return Err(s3_error!(
                InvalidTag,
                "tag keys starting with \"aws:\" are reserved"
            ));
        }
        if out.insert(k.clone(), v).is_some() {
            return Err(s3_error!(
                InvalidTag,
                "Cannot provide multiple Tags with the same key ({k:?})"
            ));
        }
    }
    Ok(out)
}

/// Percent-decode one part of a URL query (`+` is a space).
fn url_decode(s: &str) -> S3Result<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| s3_error!(InvalidArgument, "invalid x-amz-tagging encoding"))?;
                out.push(hex);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| s3_error!(InvalidArgument, "x-amz-tagging is not UTF-8"))
}

/// The tags of an upload's `x-amz-tagging` header (`k1=v1&k2=v2`, URL-encoded).
pub(super) fn header_tags(header: Option<&str>) -> S3Result<BTreeMap<String, String>> {
    let Some(header) = header.filter(|h| !h.is_empty()) else {
        return Ok(BTreeMap::new());
    };
    let mut tags = Vec::new();
    for pair in header.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        tags.push((url_decode(k)?, url_decode(v)?));
    }
    check_tags(tags, MAX_OBJECT_TAGS)
}

/// The tags of a Tagging document.
fn document_tags(tagging: Tagging, max: usize) -> S3Result<BTreeMap<String, String>> {
    let tags = tagging
        .tag_set
        .into_iter()
        .map(|t| match (t.key, t.value) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(s3_error!(MalformedXML, "a Tag needs a Key and a Value")),
        })
        .collect::<S3Result<Vec<_>>>()?;
    check_tags(tags, max)
}

/// A tag map as the protocol's tag set.
fn tag_set(tags: &BTreeMap<String, String>) -> TagSet {
    tags.iter()
        .map(|(k, v)| Tag {
            key: Some(k.clone()),
            value: Some(v.clone()),
        })
        .collect()
}

/// The stored checksums of an object as the protocol's.
pub(super) fn checksum_of(c: &Checksums) -> Checksum {
    let values = [&c.crc32, &c.crc32c, &c.sha1, &c.sha256, &c.crc64nvme];
    let checksum_type = values.iter().find_map(|v| v.as_deref()).map(|v| {
        ChecksumType::from_static(if crate::checksum::is_composite(v) {
            ChecksumType::COMPOSITE
        } else {
            ChecksumType::FULL_OBJECT
        })
    });
    Checksum {
        checksum_crc32: c.crc32.clone(),
        checksum_crc32c: c.crc32c.clone(),
        checksum_sha1: c.sha1.clone(),
        checksum_sha256: c.sha256.clone(),
        checksum_crc64nvme: c.crc64nvme.clone(),
        checksum_type,
    }
}

/// The verified checksums of an upload, to store.
pub(super) fn stored_checksums(c: &Checksum) -> Checksums {
    Checksums {
        crc32: c.checksum_crc32.clone(),
        crc32c: c.checksum_crc32c.clone(),
        sha1: c.checksum_sha1.clone(),
        sha256: c.checksum_sha256.clone(),
        crc64nvme: c.checksum_crc64nvme.clone(),
    }
}

/// PutObjectTagging: replace the tags of the object (or the version named).
pub(super) async fn put_object_tagging(
    gw: &Gateway,
    req: S3Request<PutObjectTaggingInput>,
) -> S3Result<S3Response<PutObjectTaggingOutput>> {
    let need = Need::object("s3:PutObjectTagging", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = req.input;
    let tags = document_tags(input.tagging, MAX_OBJECT_TAGS)?;
    let version = gw
        .retag(&bucket, &input.key, input.version_id.as_deref(), tags)
        .await?;
    Ok(S3Response::new(PutObjectTaggingOutput {
        version_id: Gateway::shown_version(&bucket, &version),
    }))
}

/// GetObjectTagging: the tags of the object (or the version named).
pub(super) async fn get_object_tagging(
    gw: &Gateway,
    req: S3Request<GetObjectTaggingInput>,
) -> S3Result<S3Response<GetObjectTaggingOutput>> {
    let need = Need::object("s3:GetObjectTagging", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let entry = gw
        .entry_version(&bucket, &req.input.key, req.input.version_id.as_deref())
        .await?;
    Ok(S3Response::new(GetObjectTaggingOutput {
        tag_set: tag_set(&entry.tags),
        version_id: Gateway::shown_version(&bucket, &entry.version_id),
    }))
}

/// DeleteObjectTagging: no tags on the object (or the version named).
pub(super) async fn delete_object_tagging(
    gw: &Gateway,
    req: S3Request<DeleteObjectTaggingInput>,
) -> S3Result<S3Response<DeleteObjectTaggingOutput>> {
    let need = Need::object("s3:DeleteObjectTagging", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let version = gw
        .retag(
            &bucket,
            &req.input.key,
            req.input.version_id.as_deref(),
            BTreeMap::new(),
        )
        .await?;
    Ok(S3Response::new(DeleteObjectTaggingOutput {
        version_id: Gateway::shown_version(&bucket, &version),
    }))
}

/// PutBucketTagging: replace the bucket's tags.
pub(super) async fn put_bucket_tagging(
    gw: &Gateway,
    req: S3Request<PutBucketTaggingInput>,
) -> S3Result<S3Response<PutBucketTaggingOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    let tags = document_tags(req.input.tagging, MAX_BUCKET_TAGS)?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.tags = tags.clone();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(PutBucketTaggingOutput {}))
}

/// GetBucketTagging: the bucket's tags, or NoSuchTagSet.
pub(super) async fn get_bucket_tagging(
    gw: &Gateway,
    req: S3Request<GetBucketTaggingInput>,
) -> S3Result<S3Response<GetBucketTaggingOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    if bucket.tags.is_empty() {
        return Err(s3_error!(NoSuchTagSet));
    }
    Ok(S3Response::new(GetBucketTaggingOutput {
        tag_set: tag_set(&bucket.tags),
    }))
}

/// DeleteBucketTagging: no tags (absent is fine).
pub(super) async fn delete_bucket_tagging(
    gw: &Gateway,
    req: S3Request<DeleteBucketTaggingInput>,
) -> S3Result<S3Response<DeleteBucketTaggingOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, Need::Owner).await?;
    buckets::update_bucket(&gw.cluster, &bucket.name, |r| {
        r.tags.clear();
        Ok::<(), BucketError>(())
    })
    .await?;
    Ok(S3Response::new(DeleteBucketTaggingOutput {}))
}

/// The parts of `entry` as GetObjectAttributes lists them, after `marker`, at most `max`.
fn parts_of(entry: &ObjectEntry, marker: i32, max: usize) -> GetObjectAttributesParts {
    let all: Vec<ObjectPart> = entry
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| ObjectPart {
            part_number: Some(i as i32 + 1),
            size: Some(s.size as i64),
            ..Default::default()
        })
        .filter(|p| p.part_number.unwrap_or(0) > marker)
        .collect();
    let truncated = all.len() > max;
    let page: Vec<ObjectPart> = all.into_iter().take(max).collect();
    GetObjectAttributesParts {
        is_truncated: Some(truncated),
        max_parts: Some(max as i32),
        next_part_number_marker: page.last().and_then(|p| p.part_number),
        part_number_marker: Some(marker),
        total_parts_count: Some(entry.segments.len() as i32),
        parts: Some(page),
    }
}

/// GetObjectAttributes: the ETag, checksums, parts (of a multipart object), storage class
/// and size asked for.
pub(super) async fn get_object_attributes(
    gw: &Gateway,
    req: S3Request<GetObjectAttributesInput>,
) -> S3Result<S3Response<GetObjectAttributesOutput>> {
    let read = if req.input.version_id.is_some() {
        "s3:GetObjectVersion"
    } else {
        "s3:GetObject"
    };
    let need = Need::object(read, &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let input = req.input;
    let customer = super::encryption::customer_key_of!(input)?;
    let entry = gw
        .entry_version(&bucket, &input.key, input.version_id.as_deref())
        .await?;
    gw.open_sse(&entry.sse, customer.as_ref())?;
    // One header, comma-separated (the protocol layer may hand it over whole).
    let asked: Vec<&str> = input
        .object_attributes
        .iter()
        .flat_map(|x| x.as_str().split(','))
        .map(str::trim)
        .collect();
    if let Some(unknown) = asked.iter().find(|a| {
        ![
            ObjectAttributes::ETAG,
            ObjectAttributes::CHECKSUM,
            ObjectAttributes::OBJECT_PARTS,
            ObjectAttributes::STORAGE_CLASS,
            ObjectAttributes::OBJECT_SIZE,
        ]
        .contains(a)
    }) {
        return Err(s3_error!(
            InvalidArgument,
            "Invalid attribute name specified: {unknown:?}"
        ));
    }
    let wants = |a: &str| asked.contains(&a);
    let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
    Ok(S3Response::new(GetObjectAttributesOutput {
        e_tag: wants(ObjectAttributes::ETAG).then(|| etag(&entry.etag)),
        checksum: (wants(ObjectAttributes::CHECKSUM) && !entry.checksums.is_empty())
            .then(|| checksum_of(&entry.checksums)),
        object_parts: (wants(ObjectAttributes::OBJECT_PARTS) && entry.multipart)
            .then(|| parts_of(&entry, input.part_number_marker.unwrap_or(0), max)),
        storage_class: wants(ObjectAttributes::STORAGE_CLASS)
            .then(|| StorageClass::from_static(StorageClass::STANDARD)),
        object_size: wants(ObjectAttributes::OBJECT_SIZE).then_some(entry.size as i64),
        last_modified: Some(timestamp_ms(entry.modified_ms)),
        version_id: Gateway::shown_version(&bucket, &entry.version_id),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `x-amz-tagging` decodes URL encoding and is held to S3's limits.
    #[test]
    fn header_tags_are_checked() {
        let t = header_tags(Some("team=storage&note=a%20b+c&empty=")).unwrap();
        assert_eq!(t["team"], "storage");
        assert_eq!(t["note"], "a b c");
        assert_eq!(t["empty"], "");
        assert!(header_tags(None).unwrap().is_empty());
        let code = |h: &str| {
            header_tags(Some(h))
                .unwrap_err()
                .code()
                .as_str()
                .to_string()
        };
        assert_eq!(code("a=1&a=2"), "InvalidTag");
        assert_eq!(code("aws:x=1"), "InvalidTag");
        assert_eq!(code("=1"), "InvalidTag");
        assert_eq!(code("a=%zz"), "InvalidArgument");
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        assert_eq!(code(&eleven.join("&")), "BadRequest");
    }
}
