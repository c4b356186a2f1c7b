//! `x-amz-checksum-*` validation of uploaded bodies.
//!
//! A client may send a checksum of the body in a header, or (with `aws-chunked` bodies, as
//! current AWS SDKs and the aws CLI do by default) in a trailer after the body, naming the
//! algorithm in `x-amz-trailer` or `x-amz-sdk-checksum-algorithm`. The gateway computes the
//! named algorithms while the body streams through, compares once it ended, and refuses the
//! upload with BadDigest on a mismatch (the data is discarded, nothing becomes visible).

use bytes::Bytes;
use futures::{Stream, StreamExt};
use s3s::checksum::ChecksumHasher;
use s3s::crypto::Checksum as _;
use s3s::crypto::{Crc32, Crc32c, Crc64Nvme, Sha1, Sha256};
use s3s::dto::{Checksum, ChecksumAlgorithm};
use s3s::{s3_error, S3Result, TrailingHeaders};
use std::sync::{Arc, Mutex};

/// The checksums one upload asks for, and their computation.
pub struct Wanted {
    given: Checksum,
    trailer: Option<TrailingHeaders>,
    hasher: Arc<Mutex<ChecksumHasher>>,
}

/// The algorithm a header, trailer or `ChecksumAlgorithm` names, in lower case (`crc32`,
/// `crc32c`, `sha1`, `sha256`, `crc64nvme`); None for anything else.
pub fn algorithm_named(name: &str) -> Option<&'static str> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.strip_prefix("x-amz-checksum-").unwrap_or(&n);
    match n {
        "crc32" => Some("crc32"),
        "crc32c" => Some("crc32c"),
        "sha1" => Some("sha1"),
        "sha256" => Some("sha256"),
        "crc64nvme" => Some("crc64nvme"),
        _ => None,
    }
}

impl Wanted {
    /// What `headers` (and the parsed checksum fields `given`) ask to be checked.
    pub fn new(
        headers: &http::HeaderMap,
        algorithm: Option<&ChecksumAlgorithm>,
        given: Checksum,
        trailer: Option<TrailingHeaders>,
    ) -> Self {
        let mut names: Vec<&'static str> = Vec::new();
        let mut want = |n: Option<&'static str>| {
            if let Some(n) = n {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        };
        want(given.checksum_crc32.as_ref().map(|_| "crc32"));
        want(given.checksum_crc32c.as_ref().map(|_| "crc32c"));
        want(given.checksum_sha1.as_ref().map(|_| "sha1"));
        want(given.checksum_sha256.as_ref().map(|_| "sha256"));
        want(given.checksum_crc64nvme.as_ref().map(|_| "crc64nvme"));
        want(algorithm.and_then(|a| algorithm_named(a.as_str())));
        for name in ["x-amz-trailer", "x-amz-sdk-checksum-algorithm"] {
            if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
                for part in v.split(',') {
                    want(algorithm_named(part));
                }
            }
        }
        let mut hasher = ChecksumHasher::default();
        for n in names {
            match n {
                "crc32" => hasher.crc32 = Some(Crc32::new()),
                "crc32c" => hasher.crc32c = Some(Crc32c::new()),
                "sha1" => hasher.sha1 = Some(Sha1::new()),
                "sha256" => hasher.sha256 = Some(Sha256::new()),
                _ => hasher.crc64nvme = Some(Crc64Nvme::new()),
            }
        }
        Self {
            given,
            trailer,
            hasher: Arc::new(Mutex::new(hasher)),
        }
    }

    /// Compute `algorithm` (a name from [`algorithm_named`]) over a body no client sent a
    /// checksum for (a copy's bytes).
    pub fn computing(algorithm: &str) -> Self {
        let mut headers = http::HeaderMap::new();
        if let Ok(v) = http::HeaderValue::from_str(algorithm) {
            headers.insert("x-amz-sdk-checksum-algorithm", v);
        }
        Self::new(&headers, None, Checksum::default(), None)
    }

    /// `body`, with every piece fed to the checksums on its way through.
    pub fn watch<S, E>(&self, body: S) -> impl Stream<Item = Result<Bytes, E>> + Unpin
    where
        S: Stream<Item = Result<Bytes, E>> + Unpin,
    {
        let hasher = self.hasher.clone();
        body.inspect(move |piece| {
            if let Ok(b) = piece {
                hasher.lock().expect("checksum hasher").update(b);
            }
        })
    }

    /// Compare what was computed with what the client sent (in headers or trailers);
    /// returns the computed checksums for the response.
    pub fn verify(self) -> S3Result<Checksum> {
        let hasher = std::mem::take(&mut *self.hasher.lock().expect("checksum hasher"));
        let computed = hasher.finalize();
        let trailers = self.trailer.as_ref().and_then(|t| t.take());
        let from_trailer = |name: &str| {
            trailers
                .as_ref()
                .and_then(|h| h.get(name))
                .and_then(|v| v.to_str().ok())
                .map(|s| s.trim().to_string())
        };
        let pairs = [
            (
                "CRC32",
                &self.given.checksum_crc32,
                &computed.checksum_crc32,
                "x-amz-checksum-crc32",
            ),
            (
                "CRC32C",
                &self.given.checksum_crc32c,
                &computed.checksum_crc32c,
                "x-amz-checksum-crc32c",
            ),
            (
                "SHA1",
                &self.given.checksum_sha1,
                &computed.checksum_sha1,
                "x-amz-checksum-sha1",
            ),
            (
                "SHA256",
                &self.given.checksum_sha256,
                &computed.checksum_sha256,
                "x-amz-checksum-sha256",
            ),
            (
                "CRC64NVME",
                &self.given.checksum_crc64nvme,
                &computed.checksum_crc64nvme,
                "x-amz-checksum-crc64nvme",
            ),
        ];
        for (label, given, got, header) in pairs {
            let expected = given.clone().or_else(|| from_trailer(header));
            if let (Some(expected), Some(got)) = (expected, got) {
                if expected.trim() != got {
                    return Err(s3_error!(
                        BadDigest,
                        "The {label} you specified did not match the calculated checksum."
                    ));
                }
            }
        }
        Ok(computed)
    }
}

/// The value for `algorithm` (a name from [`algorithm_named`]) among `c`.
pub fn value_of<'a>(c: &'a Checksum, algorithm: &str) -> Option<&'a String> {
    match algorithm {
        "crc32" => c.checksum_crc32.as_ref(),
        "crc32c" => c.checksum_crc32c.as_ref(),
        "sha1" => c.checksum_sha1.as_ref(),
        "sha256" => c.checksum_sha256.as_ref(),
        "crc64nvme" => c.checksum_crc64nvme.as_ref(),
        _ => None,
    }
}

/// `c` with the value for `algorithm` set to `value`.
pub fn with_value(mut c: Checksum, algorithm: &str, value: String) -> Checksum {
    match algorithm {
        "crc32" => c.checksum_crc32 = Some(value),
        "crc32c" => c.checksum_crc32c = Some(value),
        "sha1" => c.checksum_sha1 = Some(value),
        "sha256" => c.checksum_sha256 = Some(value),
        _ => c.checksum_crc64nvme = Some(value),
    }
    c
}

/// Whether a stored checksum value is a multipart object's composite one (`…-N`), which is
/// of the parts' checksums, not of the object's bytes.
pub fn is_composite(value: &str) -> bool {
    value.contains('-')
}

/// S3's COMPOSITE checksum of a multipart object: `algorithm` over the concatenated binary
/// checksums of its parts (`parts`, base64 as stored), base64, then `-N`.
pub fn composite(algorithm: &str, parts: &[&str]) -> Result<String, String> {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut hasher = ChecksumHasher::default();
    match algorithm {
        "crc32" => hasher.crc32 = Some(Crc32::new()),
        "crc32c" => hasher.crc32c = Some(Crc32c::new()),
        "sha1" => hasher.sha1 = Some(Sha1::new()),
        "sha256" => hasher.sha256 = Some(Sha256::new()),
        "crc64nvme" => hasher.crc64nvme = Some(Crc64Nvme::new()),
        other => return Err(format!("unknown checksum algorithm {other:?}")),
    }
    for p in parts {
        let raw = b64
            .decode(p.trim())
            .map_err(|e| format!("a part checksum {p:?} is not base64: {e}"))?;
        hasher.update(&raw);
    }
    let whole = hasher.finalize();
    let value = value_of(&whole, algorithm).ok_or("no checksum computed")?;
    Ok(format!("{value}-{}", parts.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(parts: &[&'static [u8]]) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Unpin {
        futures::stream::iter(
            parts
                .iter()
                .map(|p| Ok(Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
    }

    /// Goal: a header checksum is computed over the streamed body and compared: equal
    /// passes and is echoed, different is BadDigest, none asked computes nothing.
    #[tokio::test]
    async fn header_checksums() {
        // CRC32 of "hello world" is 0x0d4a1185.
        let good = "DUoRhQ==".to_string();
        for (value, ok) in [(good.clone(), true), ("AAAAAA==".to_string(), false)] {
            let given = Checksum {
                checksum_crc32: Some(value),
                ..Default::default()
            };
            let w = Wanted::new(&http::HeaderMap::new(), None, given, None);
            let mut s = w.watch(body(&[b"hello ", b"world"]));
            while s.next().await.is_some() {}
            drop(s);
            match w.verify() {
                Ok(c) => {
                    assert!(ok);
                    assert_eq!(c.checksum_crc32.as_deref(), Some(good.as_str()));
                }
                Err(e) => {
                    assert!(!ok);
                    assert_eq!(*e.code(), s3s::S3ErrorCode::BadDigest);
                }
            }
        }
        let w = Wanted::new(&http::HeaderMap::new(), None, Checksum::default(), None);
        let computed = w.verify().unwrap();
        assert!(computed.checksum_crc32.is_none() && computed.checksum_sha256.is_none());
    }

    /// Goal: a composite checksum is the algorithm over the parts' binary checksums, with
    /// the part count; bad input is an error, never a wrong value.
    #[test]
    fn composite_checksums() {
        // CRC32 of the bytes 0d4a1185 0d4a1185 (two parts of "hello world").
        let mut h = Crc32::new();
        h.update(&[0x0d, 0x4a, 0x11, 0x85, 0x0d, 0x4a, 0x11, 0x85]);
        use base64::Engine as _;
        let expected = base64::engine::general_purpose::STANDARD.encode(h.finalize());
        assert_eq!(
            composite("crc32", &["DUoRhQ==", "DUoRhQ=="]),
            Ok(format!("{expected}-2"))
        );
        assert!(is_composite(&format!("{expected}-2")) && !is_composite("DUoRhQ=="));
        assert!(composite("crc32", &["not base64!"]).is_err());
        assert!(composite("md5", &["DUoRhQ=="]).is_err());
        let c = with_value(Checksum::default(), "sha256", "x".into());
        assert_eq!(value_of(&c, "sha256").map(String::as_str), Some("x"));
        assert_eq!(value_of(&c, "crc32"), None);
    }
}
