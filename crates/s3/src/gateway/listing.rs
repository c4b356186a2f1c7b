//! Listings: ListBuckets, ListObjects (v1 and v2), ListObjectVersions, ListMultipartUploads
//! and ListParts, with S3's paging markers and `encoding-type=url`.

use super::access::Access;
use super::dto::{etag, owner, timestamp_ms};
use super::Gateway;
use crate::buckets::{self, BucketRecord};
use crate::index::{self, Listed, Listing, Part};
use base64::Engine;
use s3s::dto::*;
use s3s::{s3_error, S3Request, S3Response, S3Result};

/// Items per listing page at most (S3's limit).
const MAX_LIST_KEYS: i32 = 1000;

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

/// How names go out in a listing: percent-encoded when it asked for `encoding-type=url`.
fn encoder(e: &Option<EncodingType>) -> impl Fn(String) -> String + Copy {
    let url = e.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
    move |s: String| if url { url_encode(&s) } else { s }
}

/// One page of the bucket's index, as the object listings ask for it.
struct Page {
    listing: Listing,
    /// Items per page asked for, with S3's default and limit applied.
    max: i32,
    /// The prefix asked for ("" for none).
    prefix: String,
}

/// A page of the bucket's index under `prefix` after `after` (exclusive).
async fn list_page(
    gw: &Gateway,
    bucket: &BucketRecord,
    prefix: &Option<String>,
    after: &str,
    delimiter: Option<&str>,
    max_keys: Option<i32>,
) -> S3Result<Page> {
    let max = max_keys.unwrap_or(MAX_LIST_KEYS).clamp(0, MAX_LIST_KEYS);
    let prefix = prefix.clone().unwrap_or_default();
    if max == 0 {
        // Nothing asked for: an empty page, not truncated (as S3 answers MaxKeys=0).
        return Ok(Page {
            listing: index::Listing::default(),
            max,
            prefix,
        });
    }
    let listing =
        index::list_objects(&gw.cluster, bucket, &prefix, after, delimiter, max as usize).await?;
    Ok(Page {
        listing,
        max,
        prefix,
    })
}

/// [`list_page`] for a ListObjects, ListObjectsV2 or ListObjectVersions input (they name
/// the prefix, delimiter and page size alike), after `$after`.
macro_rules! page_of {
    ($gw:ident, $bucket:expr, $input:ident, $after:expr) => {
        list_page(
            $gw,
            $bucket,
            &$input.prefix,
            $after,
            $input.delimiter.as_deref(),
            $input.max_keys,
        )
    };
}

/// Objects and common prefixes of a listing, as S3 DTOs.
fn split_listing(
    items: Vec<Listed>,
    user: &str,
    enc: impl Fn(String) -> String,
) -> (Vec<Object>, Vec<CommonPrefix>) {
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

/// ListBuckets: the caller's buckets.
pub(super) async fn list_buckets(
    gw: &Gateway,
    req: S3Request<ListBucketsInput>,
) -> S3Result<S3Response<ListBucketsOutput>> {
    // Only the caller: the listing is of the buckets they own.
    let user = gw.caller(&req).await?;
    let buckets = buckets::list_buckets(&gw.cluster)
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

/// ListObjects (v1): a page of keys and common prefixes after a marker.
pub(super) async fn list_objects(
    gw: &Gateway,
    req: S3Request<ListObjectsInput>,
) -> S3Result<S3Response<ListObjectsOutput>> {
    let Access { user, bucket } = gw.authorise(&req, &req.input.bucket).await?;
    let input = req.input;
    let marker = input.marker.clone().unwrap_or_default();
    let page = page_of!(gw, &bucket, input, &marker).await?;
    let enc = encoder(&input.encoding_type);
    // NextMarker is returned only with a delimiter (S3's rule); without, clients use the
    // last key.
    let next_marker = (page.listing.truncated && input.delimiter.is_some())
        .then(|| page.listing.items.last().map(|i| enc(i.name().to_string())))
        .flatten();
    let (contents, prefixes) = split_listing(page.listing.items, &user, enc);
    Ok(S3Response::new(ListObjectsOutput {
        name: Some(bucket.name),
        prefix: Some(enc(page.prefix)),
        marker: Some(enc(marker)),
        max_keys: Some(page.max),
        is_truncated: Some(page.listing.truncated),
        contents: Some(contents),
        common_prefixes: Some(prefixes),
        delimiter: input.delimiter.map(enc),
        next_marker,
        encoding_type: input.encoding_type,
        ..Default::default()
    }))
}

/// ListObjectsV2: a page of keys and common prefixes, resumed by an opaque token.
pub(super) async fn list_objects_v2(
    gw: &Gateway,
    req: S3Request<ListObjectsV2Input>,
) -> S3Result<S3Response<ListObjectsV2Output>> {
    let Access { user, bucket } = gw.authorise(&req, &req.input.bucket).await?;
    let input = req.input;
    let mut after = input.start_after.clone().unwrap_or_default();
    if let Some(token) = &input.continuation_token {
        let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| s3_error!(InvalidArgument, "invalid continuation token"))?;
        after = after.max(decoded);
    }
    let page = page_of!(gw, &bucket, input, &after).await?;
    let next = page
        .listing
        .truncated
        .then(|| page.listing.items.last())
        .flatten()
        .map(|i| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(i.name()));
    let enc = encoder(&input.encoding_type);
    let count = page.listing.items.len() as i32;
    let (contents, prefixes) = split_listing(page.listing.items, &user, enc);
    Ok(S3Response::new(ListObjectsV2Output {
        name: Some(bucket.name),
        prefix: Some(enc(page.prefix)),
        max_keys: Some(page.max),
        key_count: Some(count),
        continuation_token: input.continuation_token,
        is_truncated: Some(page.listing.truncated),
        next_continuation_token: next,
        contents: Some(contents),
        common_prefixes: Some(prefixes),
        delimiter: input.delimiter.map(enc),
        encoding_type: input.encoding_type,
        start_after: input.start_after.map(enc),
        ..Default::default()
    }))
}

/// ListObjectVersions: ListObjects with every object as its one version, "null".
pub(super) async fn list_object_versions(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let Access { user, bucket } = gw.authorise(&req, &req.input.bucket).await?;
    let input = req.input;
    let marker = input.key_marker.clone().unwrap_or_default();
    let page = page_of!(gw, &bucket, input, &marker).await?;
    let enc = encoder(&input.encoding_type);
    let next_key = page
        .listing
        .truncated
        .then(|| page.listing.items.last().map(|i| enc(i.name().to_string())))
        .flatten();
    let (objects, prefixes) = split_listing(page.listing.items, &user, enc);
    // The same objects, each as its one version.
    let versions = objects
        .into_iter()
        .map(|o| ObjectVersion {
            e_tag: o.e_tag,
            is_latest: Some(true),
            key: o.key,
            last_modified: o.last_modified,
            owner: o.owner,
            size: o.size,
            storage_class: Some(ObjectVersionStorageClass::from_static(
                ObjectVersionStorageClass::STANDARD,
            )),
            version_id: Some("null".into()),
            ..Default::default()
        })
        .collect();
    Ok(S3Response::new(ListObjectVersionsOutput {
        common_prefixes: Some(prefixes),
        delimiter: input.delimiter.map(enc),
        encoding_type: input.encoding_type,
        is_truncated: Some(page.listing.truncated),
        key_marker: Some(enc(marker)),
        max_keys: Some(page.max),
        name: Some(bucket.name),
        next_version_id_marker: next_key.as_ref().map(|_| "null".to_string()),
        next_key_marker: next_key,
        prefix: Some(enc(page.prefix)),
        versions: Some(versions),
        ..Default::default()
    }))
}

/// ListParts: the parts of an upload, by number, after a part-number marker.
pub(super) async fn list_parts(
    gw: &Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let Access { user, bucket } = gw.authorise(&req, &req.input.bucket).await?;
    let input = req.input;
    gw.upload(&bucket, &input.upload_id, &input.key).await?;
    let max = input.max_parts.unwrap_or(1000).clamp(0, 1000) as usize;
    let marker = input.part_number_marker.unwrap_or(0);
    let all = gw.parts(&bucket, &input.upload_id).await?;
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

/// ListMultipartUploads: the uploads in progress, by key and upload id, after the markers.
pub(super) async fn list_multipart_uploads(
    gw: &Gateway,
    req: S3Request<ListMultipartUploadsInput>,
) -> S3Result<S3Response<ListMultipartUploadsOutput>> {
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket).await?;
    let input = req.input;
    let max = input.max_uploads.unwrap_or(1000).clamp(0, 1000) as usize;
    let prefix = input.prefix.clone().unwrap_or_default();
    let key_marker = input.key_marker.clone().unwrap_or_default();
    let id_marker = input.upload_id_marker.clone().unwrap_or_default();
    let mut uploads = index::list_uploads(&gw.cluster, &bucket).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: `encoding-type=url` percent-encodes all but unreserved characters and '/', and
    /// without it names go out as they are.
    #[test]
    fn url_encoding_of_names() {
        let url = encoder(&Some(EncodingType::from_static(EncodingType::URL)));
        assert_eq!(url("a b/c~d+é".into()), "a%20b/c~d%2B%C3%A9");
        let plain = encoder(&None);
        assert_eq!(plain("a b".into()), "a b");
    }
}
