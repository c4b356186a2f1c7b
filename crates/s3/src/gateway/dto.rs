//! Index records to and from the protocol's types (`s3s::dto`): times, owners, ETags and the
//! headers stored with an object.

use crate::index::Headers;
use s3s::dto::{ETag, Metadata, Owner, Timestamp};

/// Milliseconds since the Unix epoch as a protocol timestamp.
pub(super) fn timestamp_ms(ms: i64) -> Timestamp {
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(ms as i128 * 1_000_000)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    Timestamp::from(t)
}

/// A protocol timestamp as milliseconds since the Unix epoch.
pub(super) fn ms_of(t: &Timestamp) -> i64 {
    let t: time::OffsetDateTime = t.clone().into();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// `user` as an owner (display name and id are both the user name).
pub(super) fn owner(user: &str) -> Owner {
    Owner {
        display_name: Some(user.into()),
        id: Some(user.into()),
    }
}

/// A stored ETag (kept without quotes) as the protocol's.
pub(super) fn etag(value: &str) -> ETag {
    ETag::Strong(value.into())
}

/// The headers to store with an object, from the fields of its input; see [`headers_of`].
pub(super) fn headers(
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
        content_encoding: content_encoding.and_then(|e| stored_encoding(&e)),
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

/// The `Content-Encoding` to store: the request's without `aws-chunked`, which describes how
/// the body was sent (SigV4 streaming), not the object (S3 drops it too). None if nothing
/// else is left.
pub(super) fn stored_encoding(encoding: &str) -> Option<String> {
    let kept: Vec<&str> = encoding
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty() && !e.eq_ignore_ascii_case("aws-chunked"))
        .collect();
    (!kept.is_empty()).then(|| kept.join(", "))
}

/// The headers to store with an object, taken (moved) out of an input that carries them:
/// PutObject, CopyObject and CreateMultipartUpload name these fields alike.
macro_rules! headers_of {
    ($input:ident) => {
        $crate::gateway::dto::headers(
            $input.content_type,
            $input.content_encoding,
            $input.content_disposition,
            $input.content_language,
            $input.cache_control,
            $input.expires,
            $input.metadata,
        )
    };
}
pub(super) use headers_of;

/// The `x-amz-meta-*` of stored headers, if any.
pub(super) fn metadata_of(h: &Headers) -> Option<Metadata> {
    (!h.metadata.is_empty()).then(|| h.metadata.clone().into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::stored_encoding;

    /// Goal: `aws-chunked` (how a body was sent) never becomes part of a stored object's
    /// Content-Encoding; the object's own encodings stay, in order.
    #[test]
    fn aws_chunked_is_not_stored() {
        assert_eq!(stored_encoding("aws-chunked"), None);
        assert_eq!(stored_encoding("aws-chunked,gzip").as_deref(), Some("gzip"));
        assert_eq!(
            stored_encoding("gzip, AWS-CHUNKED , br").as_deref(),
            Some("gzip, br")
        );
        assert_eq!(stored_encoding("identity").as_deref(), Some("identity"));
        assert_eq!(stored_encoding(" , "), None);
    }
}
