//! Preconditions of reads and copies: `If-Match`, `If-None-Match`, `If-Modified-Since` and
//! `If-Unmodified-Since`, or their `x-amz-copy-source-if-*` forms on a copy's source.

use super::access::CopyAccess;
use super::dto::ms_of;
use super::Gateway;
use crate::index::ObjectEntry;
use s3s::dto::{ETagCondition, Timestamp};
use s3s::{s3_error, S3Result};

/// The preconditions a request sets; see [`preconditions`] to take them from an input.
pub(super) struct Preconditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

/// The [`Preconditions`] of an input: `preconditions!(input)` for GetObject and HeadObject,
/// `preconditions!(copy source of input)` for CopyObject and UploadPartCopy.
macro_rules! preconditions {
    (copy source of $input:expr) => {
        $crate::gateway::conditions::preconditions!(@fields $input;
            copy_source_if_match, copy_source_if_none_match,
            copy_source_if_modified_since, copy_source_if_unmodified_since)
    };
    (@fields $input:expr; $m:ident, $none:ident, $since:ident, $unmodified:ident) => {
        $crate::gateway::conditions::Preconditions {
            if_match: $input.$m.as_ref(),
            if_none_match: $input.$none.as_ref(),
            if_modified_since: $input.$since.as_ref(),
            if_unmodified_since: $input.$unmodified.as_ref(),
        }
    };
    ($input:expr) => {
        $crate::gateway::conditions::preconditions!(@fields $input;
            if_match, if_none_match, if_modified_since, if_unmodified_since)
    };
}
pub(super) use preconditions;

/// 304 Not Modified, with the ETag and Last-Modified a cache revalidates with (RFC 9110
/// §15.4.5: a 304 carries the headers a 200 would have for validation).
fn not_modified(entry: &ObjectEntry) -> s3s::S3Error {
    let mut e = s3_error!(NotModified);
    let mut headers = http::HeaderMap::new();
    if let Ok(v) = http::HeaderValue::from_str(&format!("\"{}\"", entry.etag)) {
        headers.insert(http::header::ETAG, v);
    }
    let mut modified = Vec::new();
    let stamp = super::dto::timestamp_ms(entry.modified_ms);
    if stamp
        .format(s3s::dto::TimestampFormat::HttpDate, &mut modified)
        .is_ok()
    {
        if let Ok(v) = http::HeaderValue::from_bytes(&modified) {
            headers.insert(http::header::LAST_MODIFIED, v);
        }
    }
    e.set_headers(headers);
    e
}

/// Evaluate GET/HEAD preconditions (RFC 9110 order, as S3 does): PreconditionFailed or
/// NotModified when one fails.
pub(super) fn check_conditions(entry: &ObjectEntry, p: Preconditions<'_>) -> S3Result<()> {
    let matches = |c: &ETagCondition| {
        c.is_any()
            || c.as_etag()
                .is_some_and(|e| e.value() == entry.etag.as_str())
    };
    // HTTP dates have whole seconds.
    let modified_s = entry.modified_ms / 1000;
    if let Some(c) = p.if_match {
        if !matches(c) {
            return Err(s3_error!(PreconditionFailed));
        }
    } else if let Some(t) = p.if_unmodified_since {
        if modified_s > ms_of(t) / 1000 {
            return Err(s3_error!(PreconditionFailed));
        }
    }
    if let Some(c) = p.if_none_match {
        if matches(c) {
            return Err(not_modified(entry));
        }
    } else if let Some(t) = p.if_modified_since {
        if modified_s <= ms_of(t) / 1000 {
            return Err(not_modified(entry));
        }
    }
    Ok(())
}

impl Gateway {
    /// The source object of an authorised copy, if its preconditions hold: a failed one is
    /// PreconditionFailed in every case (never NotModified).
    pub(super) async fn copy_source(
        &self,
        copy: &CopyAccess,
        p: Preconditions<'_>,
    ) -> S3Result<ObjectEntry> {
        let src = self
            .entry_version(
                &copy.source,
                &copy.source_key,
                copy.source_version.as_deref(),
            )
            .await?;
        check_conditions(&src, p).map_err(|_| s3_error!(PreconditionFailed))?;
        Ok(src)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::dto::{etag, timestamp_ms};
    use crate::index::Headers;
    use s3s::S3ErrorCode;

    fn entry(modified_ms: i64) -> ObjectEntry {
        ObjectEntry {
            size: 0,
            etag: "abc".into(),
            modified_ms,
            segments: Vec::new(),
            multipart: false,
            headers: Headers::default(),
            ..Default::default()
        }
    }

    /// Goal: preconditions are judged in RFC 9110's order at whole seconds: If-Match
    /// overrides If-Unmodified-Since, If-None-Match overrides If-Modified-Since, and a failed
    /// match is 412 while a matching none-match or an unmodified object is 304.
    #[test]
    fn precondition_order() {
        let e = entry(10_500);
        let same = ETagCondition::ETag(etag("abc"));
        let other = ETagCondition::ETag(etag("xyz"));
        let any = ETagCondition::Any;
        let before = timestamp_ms(9_000);
        let same_second = timestamp_ms(10_000);
        let failed = Some(S3ErrorCode::PreconditionFailed);
        let not_modified = Some(S3ErrorCode::NotModified);
        // (if_match, if_none_match, if_modified_since, if_unmodified_since) → outcome
        let cases = [
            (None, None, None, None, None),
            (Some(&same), None, None, Some(&before), None),
            (Some(&other), None, None, None, failed.clone()),
            (None, None, None, Some(&before), failed),
            (None, Some(&other), Some(&same_second), None, None),
            (None, Some(&any), None, None, not_modified.clone()),
            (None, None, Some(&same_second), None, not_modified),
        ];
        for (i, (m, none_match, since, unmodified, want)) in cases.into_iter().enumerate() {
            let p = Preconditions {
                if_match: m,
                if_none_match: none_match,
                if_modified_since: since,
                if_unmodified_since: unmodified,
            };
            let got = check_conditions(&e, p).err().map(|e| e.code().clone());
            assert_eq!(got, want, "case {i}");
        }
    }
}
