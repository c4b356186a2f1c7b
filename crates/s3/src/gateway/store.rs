//! How bodies reach the cluster and entries the index: every piece of data is written under
//! an intent record (so an interrupted transfer leaves nothing visible and its space can be
//! found again), an entry swap reclaims the data the old entry held, and reads turn an
//! entry's byte range into ranges of its pieces.

use super::Gateway;
use crate::buckets::BucketRecord;
use crate::checksum::Wanted;
use crate::data::{self, BodyStream, PieceRange};
use crate::index::{self, now_ms, Intent, ObjectEntry, Segment, Table};
use crate::sse::PieceKey;
use base64::Engine;
use bytes::Bytes;
use futures::Stream;
use s3s::dto::{Checksum, StreamingBlob};
use s3s::{s3_error, S3Result};

/// An upload's body and what it must match: its declared length, `Content-MD5` and
/// `x-amz-checksum-*`; see [`checked_body`] to take it from a request.
pub(super) struct CheckedBody {
    pub blob: Option<StreamingBlob>,
    pub expected_len: Option<u64>,
    pub content_md5: Option<String>,
    pub wanted: Wanted,
    /// The key to encrypt it with (set by the operation, for an encrypted object).
    pub cipher: Option<PieceKey>,
}

/// The [`CheckedBody`] of a PutObject or UploadPart request (`mut`; their inputs name these
/// fields alike). The body and `Content-MD5` are taken out of the input; the rest stays.
macro_rules! checked_body {
    ($req:ident) => {{
        let given = s3s::dto::Checksum {
            checksum_crc32: $req.input.checksum_crc32.clone(),
            checksum_crc32c: $req.input.checksum_crc32c.clone(),
            checksum_sha1: $req.input.checksum_sha1.clone(),
            checksum_sha256: $req.input.checksum_sha256.clone(),
            checksum_crc64nvme: $req.input.checksum_crc64nvme.clone(),
            ..Default::default()
        };
        $crate::gateway::store::CheckedBody {
            wanted: $crate::checksum::Wanted::new(
                &$req.headers,
                $req.input.checksum_algorithm.as_ref(),
                given,
                $req.trailing_headers.clone(),
            ),
            expected_len: $req.input.content_length.map(|l| l.max(0) as u64),
            content_md5: $req.input.content_md5.take(),
            blob: $req.input.body.take(),
            cipher: None,
        }
    }};
}
pub(super) use checked_body;

/// The response to a stored upload: `$output` (PutObjectOutput or UploadPartOutput) with
/// the ETag and the checksums that were verified.
macro_rules! uploaded {
    ($output:ident, $etag:expr, $checksums:expr) => {{
        let c: s3s::dto::Checksum = $checksums;
        $output {
            e_tag: Some($etag),
            checksum_crc32: c.checksum_crc32,
            checksum_crc32c: c.checksum_crc32c,
            checksum_sha1: c.checksum_sha1,
            checksum_sha256: c.checksum_sha256,
            checksum_crc64nvme: c.checksum_crc64nvme,
            ..Default::default()
        }
    }};
}
pub(super) use uploaded;

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

/// The ranges of `entry`'s pieces that hold its bytes `[start, end)`.
fn pieces(entry: &ObjectEntry, start: u64, end: u64) -> Vec<PieceRange> {
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

impl Gateway {
    /// The bytes `[start, end)` of `entry`, streamed from its pieces (decrypted with
    /// `cipher`, its key, when it is encrypted).
    pub(super) fn read(
        &self,
        bucket: &BucketRecord,
        entry: &ObjectEntry,
        (start, end): (u64, u64),
        cipher: Option<PieceKey>,
    ) -> BodyStream {
        data::read_stream(
            self.cluster.clone(),
            bucket.clone(),
            pieces(entry, start, end),
            cipher,
        )
    }

    /// Delete data no longer referenced, in the background: the index no longer points at
    /// it, so a failure only leaks space (to be reclaimed by a scrub of orphans).
    pub(super) fn reclaim(&self, bucket: &BucketRecord, segments: Vec<Segment>) {
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

    /// Store a body as a fresh data id under an intent record, so an interrupted transfer
    /// leaves nothing visible and its space can be found again.
    pub(super) async fn store_body<S, E>(
        &self,
        bucket: &BucketRecord,
        key: &str,
        upload: Option<&str>,
        body: S,
        (expected_len, max_len): (Option<u64>, u64),
        cipher: Option<&PieceKey>,
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
        let store = data::store(
            &self.cluster,
            bucket,
            id,
            body,
            (expected_len, max_len),
            cipher,
        );
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

    /// Store an upload's body (see [`Gateway::store_body`]), checking it against its
    /// `Content-MD5` and checksums; on a mismatch the data is dropped at once. Returns the
    /// piece, its MD5 and the verified checksums.
    pub(super) async fn store_checked(
        &self,
        bucket: &BucketRecord,
        key: &str,
        upload: Option<&str>,
        body: CheckedBody,
        max_len: u64,
    ) -> S3Result<(Segment, [u8; 16], Checksum)> {
        let blob = match body.blob {
            Some(b) => b,
            None => StreamingBlob::wrap(futures::stream::empty::<Result<Bytes, std::io::Error>>()),
        };
        let (segment, md5) = self
            .store_body(
                bucket,
                key,
                upload,
                body.wanted.watch(blob),
                (body.expected_len, max_len),
                body.cipher.as_ref(),
            )
            .await?;
        match check_md5(body.content_md5.as_deref(), &md5).and_then(|_| body.wanted.verify()) {
            Ok(checksums) => Ok((segment, md5, checksums)),
            Err(e) => {
                self.discard(bucket, &segment).await;
                Err(e)
            }
        }
    }

    /// The intent of a stored piece is done: an entry references it now (or it was dropped).
    pub(super) async fn clear_intent(&self, bucket: &BucketRecord, data: u64) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a byte range of a multi-piece entry maps onto the pieces it overlaps, with
    /// offsets within each piece, and an empty range onto no bytes.
    #[test]
    fn pieces_of_a_range() {
        let entry = ObjectEntry {
            size: 25,
            etag: String::new(),
            modified_ms: 0,
            segments: vec![
                Segment { data: 1, size: 10 },
                Segment { data: 2, size: 10 },
                Segment { data: 3, size: 5 },
            ],
            multipart: true,
            ..Default::default()
        };
        let got: Vec<(u64, u64, u64)> = pieces(&entry, 5, 22)
            .iter()
            .map(|r| (r.data, r.start, r.end))
            .collect();
        assert_eq!(got, vec![(1, 5, 10), (2, 0, 10), (3, 0, 2)]);
        let got: Vec<u64> = pieces(&entry, 10, 20).iter().map(|r| r.data).collect();
        assert_eq!(got, vec![2]);
        assert!(pieces(&entry, 7, 7).iter().all(|r| r.start == r.end));
    }
}
