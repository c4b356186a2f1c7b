//! Listings: ListBuckets, ListObjects (v1 and v2), ListObjectVersions, ListMultipartUploads
//! and ListParts, with S3's paging markers and `encoding-type=url`.

use super::access::{Access, Need};
use super::dto::{etag, owner, timestamp_ms};
use super::Gateway;
use crate::buckets::{self, BucketRecord};
use crate::index::{self, Listed, Listing, ObjectEntry, Part};
use crate::versions;
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
    let listing = index::list_objects(
        &gw.cluster,
        bucket,
        &prefix,
        after,
        delimiter,
        max as usize,
        false,
    )
    .await?;
    Ok(Page {
        listing,
        max,
        prefix,
    })
}

/// [`list_page`] for a ListObjects or ListObjectsV2 input (they name the prefix, delimiter
/// and page size alike), after `$after`.
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
    let user = gw.signed_caller(&req).await?;
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
    let need = Need::listing("s3:ListBucket", req.input.prefix.as_deref());
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    gw.stats.count(crate::stats::Counted::List);
    let user = bucket.owner.clone();
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
    let need = Need::listing("s3:ListBucket", req.input.prefix.as_deref());
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    gw.stats.count(crate::stats::Counted::List);
    let user = bucket.owner.clone();
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

/// One version or delete marker of a listing of versions.
enum VersionItem {
    Version(ObjectVersion),
    Marker(DeleteMarkerEntry),
}

/// The listing items of version `v` of `key` (`latest`: its current version).
fn version_item(key: &str, v: &ObjectEntry, latest: bool, user: &str) -> VersionItem {
    let version_id = Some(versions::shown(&v.version_id));
    if v.delete_marker {
        return VersionItem::Marker(DeleteMarkerEntry {
            is_latest: Some(latest),
            key: Some(key.to_string()),
            last_modified: Some(timestamp_ms(v.modified_ms)),
            owner: Some(owner(user)),
            version_id,
        });
    }
    VersionItem::Version(ObjectVersion {
        e_tag: Some(etag(&v.etag)),
        is_latest: Some(latest),
        key: Some(key.to_string()),
        last_modified: Some(timestamp_ms(v.modified_ms)),
        owner: Some(owner(user)),
        size: Some(v.size as i64),
        storage_class: Some(ObjectVersionStorageClass::from_static(
            ObjectVersionStorageClass::STANDARD,
        )),
        version_id,
        ..Default::default()
    })
}

/// ListObjectVersions: every version and delete marker, by key and newest first, after
/// (key-marker, version-id-marker).
pub(super) async fn list_object_versions(
    gw: &Gateway,
    req: S3Request<ListObjectVersionsInput>,
) -> S3Result<S3Response<ListObjectVersionsOutput>> {
    let need = Need::listing("s3:ListBucketVersions", req.input.prefix.as_deref());
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    gw.stats.count(crate::stats::Counted::List);
    let user = bucket.owner.clone();
    let input = req.input;
    let key_marker = input.key_marker.clone().unwrap_or_default();
    let version_marker = input.version_id_marker.clone().filter(|v| !v.is_empty());
    if version_marker.is_some() && key_marker.is_empty() {
        return Err(s3_error!(
            InvalidArgument,
            "A version-id marker cannot be specified without a key marker."
        ));
    }
    let max = input
        .max_keys
        .unwrap_or(MAX_LIST_KEYS)
        .clamp(0, MAX_LIST_KEYS) as usize;
    let prefix = input.prefix.clone().unwrap_or_default();
    let enc = encoder(&input.encoding_type);
    let mut items: Vec<(String, VersionItem)> = Vec::new();
    let mut prefixes = Vec::new();
    // Where the next page starts, once this one is full with more to come.
    let mut next: Option<(String, Option<String>)> = None;
    // The rest of the marker's own key first.
    if let (Some(vm), true) = (&version_marker, key_marker.starts_with(&prefix)) {
        if let Some(record) = index::get::<ObjectEntry>(
            &gw.cluster,
            &bucket,
            index::Table::Index,
            key_marker.as_bytes(),
        )
        .await?
        {
            let all = versions::all(record);
            let after = all
                .iter()
                .position(|v| &versions::shown(&v.version_id) == vm)
                .map_or(all.len(), |i| i + 1);
            for (i, v) in all.iter().enumerate().skip(after) {
                if items.len() == max {
                    next = Some((key_marker.clone(), items.last().map(last_version_id)));
                    break;
                }
                items.push((
                    key_marker.clone(),
                    version_item(&key_marker, v, i == 0, &user),
                ));
            }
        }
        if next.is_none() && items.len() == max && max > 0 {
            // Full with the marker's key: later keys may follow.
            next = Some((key_marker.clone(), items.last().map(last_version_id)));
        }
    }
    if next.is_none() && items.len() < max {
        let listing = index::list_objects(
            &gw.cluster,
            &bucket,
            &prefix,
            &key_marker,
            input.delimiter.as_deref(),
            max - items.len(),
            true,
        )
        .await?;
        let mut last: Option<(String, Option<String>)> = None;
        'records: for item in listing.items {
            match item {
                Listed::Prefix(p) => {
                    if items.len() + prefixes.len() == max {
                        next = last.clone();
                        break 'records;
                    }
                    last = Some((p.clone(), None));
                    prefixes.push(CommonPrefix {
                        prefix: Some(enc(p)),
                    });
                }
                Listed::Object(key, record) => {
                    for (i, v) in versions::all(*record).iter().enumerate() {
                        if items.len() + prefixes.len() == max {
                            next = last.clone();
                            break 'records;
                        }
                        items.push((key.clone(), version_item(&key, v, i == 0, &user)));
                        last = Some((key.clone(), Some(versions::shown(&v.version_id))));
                    }
                }
            }
        }
        if next.is_none() && listing.truncated {
            next = last;
        }
    }
    let mut out_versions = Vec::new();
    let mut markers = Vec::new();
    for (_, item) in items {
        match item {
            VersionItem::Version(mut v) => {
                v.key = v.key.map(enc);
                out_versions.push(v);
            }
            VersionItem::Marker(mut m) => {
                m.key = m.key.map(enc);
                markers.push(m);
            }
        }
    }
    Ok(S3Response::new(ListObjectVersionsOutput {
        common_prefixes: Some(prefixes),
        delete_markers: (!markers.is_empty()).then_some(markers),
        delimiter: input.delimiter.map(enc),
        encoding_type: input.encoding_type,
        is_truncated: Some(next.is_some()),
        key_marker: Some(enc(key_marker)),
        version_id_marker: version_marker,
        max_keys: Some(max as i32),
        name: Some(bucket.name),
        next_version_id_marker: next.as_ref().and_then(|(_, v)| v.clone()),
        next_key_marker: next.map(|(k, _)| enc(k)),
        prefix: Some(enc(prefix)),
        versions: Some(out_versions),
        ..Default::default()
    }))
}

/// The version id of a listed version or delete marker.
fn last_version_id(item: &(String, VersionItem)) -> String {
    match &item.1 {
        VersionItem::Version(v) => v.version_id.clone().unwrap_or_default(),
        VersionItem::Marker(m) => m.version_id.clone().unwrap_or_default(),
    }
}

/// A listed part with its checksum (of its upload's algorithm), as ListParts shows it.
fn part_checksum(upload: &crate::index::Upload, part: &Part) -> s3s::dto::Part {
    let mut out = s3s::dto::Part::default();
    if let (Some(a), Some(v)) = (&upload.checksum_algorithm, &part.checksum) {
        let c = crate::checksum::with_value(Checksum::default(), a, v.clone());
        out.checksum_crc32 = c.checksum_crc32;
        out.checksum_crc32c = c.checksum_crc32c;
        out.checksum_sha1 = c.checksum_sha1;
        out.checksum_sha256 = c.checksum_sha256;
        out.checksum_crc64nvme = c.checksum_crc64nvme;
    }
    out
}

/// ListParts: the parts of an upload, by number, after a part-number marker.
pub(super) async fn list_parts(
    gw: &Gateway,
    req: S3Request<ListPartsInput>,
) -> S3Result<S3Response<ListPartsOutput>> {
    let need = Need::object("s3:ListMultipartUploadParts", &req.input.key);
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
    let user = bucket.owner.clone();
    let input = req.input;
    let upload = gw.upload(&bucket, &input.upload_id, &input.key).await?;
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
        checksum_algorithm: upload
            .checksum_algorithm
            .as_ref()
            .map(|a| ChecksumAlgorithm::from(a.to_ascii_uppercase())),
        checksum_type: upload
            .checksum_algorithm
            .as_ref()
            .map(|_| ChecksumType::from_static(ChecksumType::COMPOSITE)),
        parts: Some(
            page.iter()
                .map(|p| s3s::dto::Part {
                    e_tag: Some(etag(&p.etag)),
                    last_modified: Some(timestamp_ms(p.modified_ms)),
                    part_number: Some(p.number as i32),
                    size: Some(p.segment.size as i64),
                    ..part_checksum(&upload, p)
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
    let need = Need::listing("s3:ListBucketMultipartUploads", req.input.prefix.as_deref());
    let Access { bucket, .. } = gw.authorise(&req, &req.input.bucket, need).await?;
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
