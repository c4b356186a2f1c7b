//! An S3 endpoint (http, or https through rustls) as an objvol's lister and object source,
//! through `basalt-s3client`: a pool of keep-alive connections, ranged GETs pinned with
//! `If-Match`.

use crate::build::{Listed, Lister, Page};
use crate::reader::{ObjectSource, SourceError};
use async_trait::async_trait;
use basalt_s3client::list::{list_objects_v2, From};
use basalt_s3client::{Connection, Signer, Tls, EMPTY_SHA256};
use bytes::Bytes;
use std::sync::Mutex;

/// The region requests are signed for unless the objvol names one.
pub const DEFAULT_REGION: &str = "us-east-1";
/// Idle connections kept for reuse.
const MAX_IDLE: usize = 64;
/// Largest piece one GET may return (an NBD request is at most 32 MiB).
const MAX_GET_BYTES: usize = 64 << 20;

/// The access key an objvol's requests are signed with, and its file reader (one parser
/// for every tool: `basalt-s3client`'s).
pub use basalt_s3client::credentials::{Credentials, CredentialsError};

impl std::convert::From<CredentialsError> for SourceError {
    fn from(e: CredentialsError) -> Self {
        SourceError::Failed(e.to_string())
    }
}

/// A bucket of an S3 endpoint.
pub struct S3Source {
    addr: String,
    /// TLS of an https endpoint.
    tls: Option<Tls>,
    bucket: String,
    signer: Signer,
    idle: Mutex<Vec<Connection>>,
}

impl S3Source {
    /// The bucket `bucket` at `endpoint` (`http://HOST:PORT` or `https://HOST[:PORT]`,
    /// whose certificate the system's roots must vouch for).
    pub fn new(
        endpoint: &str,
        bucket: &str,
        credentials: &Credentials,
    ) -> Result<Self, SourceError> {
        Self::with_ca(endpoint, bucket, credentials, None)
    }

    /// [`S3Source::new`], an https endpoint's certificate checked against the CA
    /// certificates of `ca_file` (PEM) instead of the system's roots.
    pub fn with_ca(
        endpoint: &str,
        bucket: &str,
        credentials: &Credentials,
        ca_file: Option<&std::path::Path>,
    ) -> Result<Self, SourceError> {
        Self::with_options(endpoint, bucket, credentials, ca_file, DEFAULT_REGION)
    }

    /// [`S3Source::with_ca`], requests signed for `region` (a bucket of AWS outside
    /// us-east-1, through its regional endpoint).
    pub fn with_options(
        endpoint: &str,
        bucket: &str,
        credentials: &Credentials,
        ca_file: Option<&std::path::Path>,
        region: &str,
    ) -> Result<Self, SourceError> {
        if region.is_empty()
            || !region
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            return Err(SourceError::Failed(format!(
                "region {region:?}: letters, digits and '-' (e.g. eu-west-1)"
            )));
        }
        let malformed = || {
            SourceError::Failed(format!(
                "{endpoint}: an endpoint is http://HOST:PORT or https://HOST[:PORT]"
            ))
        };
        let (rest, https) = match (
            endpoint.strip_prefix("http://"),
            endpoint.strip_prefix("https://"),
        ) {
            (Some(rest), _) => (rest, false),
            (None, Some(rest)) => (rest, true),
            (None, None) => return Err(malformed()),
        };
        let addr = rest.trim_end_matches('/');
        if addr.is_empty() || addr.contains('/') {
            return Err(malformed());
        }
        if ca_file.is_some() && !https {
            return Err(SourceError::Failed(format!(
                "{endpoint}: a CA file is for https endpoints"
            )));
        }
        let tls = if https {
            // `HOST`, `HOST:PORT`, `[V6]:PORT`: the name the certificate must carry.
            let host = match addr.rsplit_once(':') {
                Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
                _ => addr,
            };
            let host = host.trim_start_matches('[').trim_end_matches(']');
            Some(
                Tls::new(host, ca_file)
                    .map_err(|e| SourceError::Failed(format!("{endpoint}: {e}")))?,
            )
        } else {
            None
        };
        let addr = match (https, addr.rsplit_once(':')) {
            (true, None) => format!("{addr}:443"),
            (true, Some((_, port))) if !port.chars().all(|c| c.is_ascii_digit()) => {
                format!("{addr}:443")
            }
            _ => addr.to_string(),
        };
        Ok(Self {
            addr,
            tls,
            bucket: bucket.to_string(),
            signer: Signer::new(&credentials.access_key, &credentials.secret_key, region),
            idle: Mutex::new(Vec::new()),
        })
    }

    fn take(&self) -> Connection {
        let idle = self.idle.lock().expect("connection pool").pop();
        idle.unwrap_or_else(|| {
            let mut c = Connection::new(&self.addr, &self.signer);
            if let Some(tls) = &self.tls {
                c = c.with_tls(tls.clone());
            }
            c.set_max_body(MAX_GET_BYTES);
            c
        })
    }

    fn give_back(&self, c: Connection) {
        let mut idle = self.idle.lock().expect("connection pool");
        if idle.len() < MAX_IDLE {
            idle.push(c);
        }
    }
}

/// Seconds since the Unix epoch of an ISO 8601 time as S3 lists it
/// (`2026-11-01T10:00:00.000Z`); None if it is not one.
fn unix_seconds(iso: &str) -> Option<u64> {
    let b = iso.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| iso.get(r)?.parse::<i64>().ok();
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // Days from 1970-01-01 of a proleptic Gregorian date.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hh * 3600 + mm * 60 + ss).ok()
}

#[async_trait]
impl Lister for S3Source {
    async fn page(&self, prefix: &str, start_after: Option<&str>) -> Result<Page, SourceError> {
        let mut conn = self.take();
        let from = From {
            start_after,
            ..From::default()
        };
        let page = list_objects_v2(&mut conn, &self.bucket, prefix, from)
            .await
            .map_err(|e| SourceError::Failed(e.to_string()))?;
        self.give_back(conn);
        let objects = page
            .objects
            .into_iter()
            .map(|o| Listed {
                mtime: unix_seconds(&o.last_modified).unwrap_or(0),
                key: o.key,
                size: o.size,
                etag: o.etag,
            })
            .collect();
        Ok(Page {
            objects,
            more: page.next.is_some(),
        })
    }
}

#[async_trait]
impl ObjectSource for S3Source {
    async fn get_range(
        &self,
        key: &[u8],
        etag: &str,
        start: u64,
        end: u64,
    ) -> Result<Bytes, SourceError> {
        let key_text = std::str::from_utf8(key)
            .map_err(|_| SourceError::Failed(format!("key {key:?} is not UTF-8")))?;
        let path = format!("/{}/{key_text}", self.bucket);
        let range = format!("bytes={start}-{}", end - 1);
        let mut conn = self.take();
        let status = conn
            .send(
                "GET",
                &path,
                "",
                &[("if-match", etag), ("range", &range)],
                &[],
                EMPTY_SHA256,
            )
            .await
            .map_err(|e| SourceError::Failed(format!("GET {path}: {e}")))?;
        let outcome = match status {
            200 | 206 => {
                let (answer_etag, content_range) = (
                    conn.header("etag").map(str::to_string),
                    conn.header("content-range").map(str::to_string),
                );
                piece(
                    key_text,
                    Answer {
                        status,
                        etag: answer_etag.as_deref(),
                        content_range: content_range.as_deref(),
                        body: conn.take_body(),
                    },
                    etag,
                    start,
                    end,
                )
            }
            412 | 404 => Err(SourceError::Changed {
                key: key_text.to_string(),
                detail: format!("GET with If-Match {etag} answered {status}"),
            }),
            other => Err(SourceError::Failed(format!(
                "GET {path} {range} answered {other}: {}",
                conn.body_excerpt()
            ))),
        };
        self.give_back(conn);
        outcome
    }
}

/// What a ranged GET was answered, as far as [`piece`] checks it.
struct Answer<'a> {
    status: u16,
    etag: Option<&'a str>,
    content_range: Option<&'a str>,
    body: Vec<u8>,
}

/// The bytes `start..end` of `key` from a GET's answer, checked so that no endpoint's
/// shortcut becomes wrong data: an answer carrying another ETag (an endpoint that ignored
/// If-Match) is [`SourceError::Changed`]; a 200 is the whole object (an endpoint that
/// ignored Range) and is cut to the range; a 206 must cover exactly the range asked.
fn piece(
    key: &str,
    answer: Answer<'_>,
    etag: &str,
    start: u64,
    end: u64,
) -> Result<Bytes, SourceError> {
    let bare = |e: &str| {
        e.trim()
            .trim_start_matches("W/")
            .trim_matches('"')
            .to_ascii_lowercase()
    };
    if let Some(got) = answer.etag {
        if bare(got) != bare(etag) {
            return Err(SourceError::Changed {
                key: key.to_string(),
                detail: format!("GET with If-Match {etag} answered ETag {got}"),
            });
        }
    }
    let fail = |what: String| Err(SourceError::Failed(format!("GET {key}: {what}")));
    let mut body = answer.body;
    let len = body.len() as u64;
    if answer.status == 200 {
        if len < end {
            return fail(format!(
                "answered the whole object, {len} bytes, short of the range end {end}"
            ));
        }
        body.truncate(end as usize);
        return Ok(Bytes::from(body).slice(start as usize..));
    }
    let asked = (start, end - 1);
    let covered = answer
        .content_range
        .and_then(|r| r.trim().strip_prefix("bytes "))
        .and_then(|r| r.split_once('/'))
        .and_then(|(span, _)| span.split_once('-'))
        .and_then(|(a, b)| Some((a.trim().parse::<u64>().ok()?, b.trim().parse::<u64>().ok()?)));
    if covered != Some(asked) || len != end - start {
        return fail(format!(
            "asked bytes {start}-{}, answered {} with {len} bytes",
            end - 1,
            answer.content_range.unwrap_or("no Content-Range")
        ));
    }
    Ok(Bytes::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer<'a>(
        status: u16,
        etag: Option<&'a str>,
        content_range: Option<&'a str>,
        body: &[u8],
    ) -> Answer<'a> {
        Answer {
            status,
            etag,
            content_range,
            body: body.to_vec(),
        }
    }

    /// Goal: whatever an endpoint answers a ranged GET, the reader gets the range's bytes
    /// of the version it built from, or an error — never other bytes.
    #[test]
    fn answers_are_checked_against_the_range_and_version() {
        let etag = "\"0123abcd\"";
        let ok = |a| piece("k", a, etag, 2, 5).map(|b| b.to_vec());
        // A proper 206, with the ETag quoted, bare, weak or in capitals.
        for e in [Some(etag), Some("0123abcd"), Some("W/\"0123ABCD\""), None] {
            assert_eq!(
                ok(answer(206, e, Some("bytes 2-4/10"), b"cde")).unwrap(),
                b"cde"
            );
        }
        // Range ignored: the whole object, cut.
        assert_eq!(
            ok(answer(200, Some(etag), None, b"abcdefghij")).unwrap(),
            b"cde"
        );
        // If-Match ignored: another version is a change, never its bytes.
        assert!(matches!(
            ok(answer(206, Some("\"ffff\""), Some("bytes 2-4/10"), b"xyz")),
            Err(SourceError::Changed { .. })
        ));
        // Short or misplaced answers are failures.
        for bad in [
            answer(206, Some(etag), Some("bytes 0-2/10"), b"abc"),
            answer(206, Some(etag), Some("bytes 2-4/10"), b"cd"),
            answer(206, Some(etag), None, b"cde"),
            answer(200, Some(etag), None, b"abcd"),
        ] {
            assert!(matches!(ok(bad), Err(SourceError::Failed(_))));
        }
    }

    /// Goal: a credentials file's error reaches an objvol's reader as a failure naming the
    /// file (the parsing itself is tested in basalt-s3client).
    #[test]
    fn credentials_errors_are_source_failures() {
        let path = std::path::Path::new("/no/such/s3-credentials");
        let e: SourceError = Credentials::load(path).unwrap_err().into();
        assert!(
            matches!(&e, SourceError::Failed(m) if m.contains("/no/such/s3-credentials")),
            "{e}"
        );
    }

    /// Goal: S3's listing times convert to Unix seconds; malformed ones are None.
    #[test]
    fn listing_times() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00.000Z"), Some(0));
        assert_eq!(
            unix_seconds("2026-11-26T06:05:23.000Z"),
            Some(1_795_673_123)
        );
        assert_eq!(unix_seconds("2000-02-29T12:00:00Z"), Some(951_825_600));
        assert_eq!(unix_seconds("yesterday"), None);
    }

    /// Goal: endpoints are http://HOST:PORT or https://HOST[:PORT] (port 443 if none);
    /// anything else, or a CA file for plain http, is refused naming the endpoint.
    #[test]
    fn endpoints() {
        let c = Credentials::new("a", "b");
        assert!(S3Source::new("http://127.0.0.1:9000", "b", &c).is_ok());
        let aws = S3Source::new("https://s3.amazonaws.com", "b", &c).unwrap();
        assert_eq!(aws.addr, "s3.amazonaws.com:443");
        assert!(aws.tls.is_some());
        assert_eq!(
            S3Source::new("https://10.0.0.5:9443/", "b", &c)
                .unwrap()
                .addr,
            "10.0.0.5:9443"
        );
        for bad in ["127.0.0.1:9000", "ftp://x", "http://", "https://h/path"] {
            let e = S3Source::new(bad, "b", &c).err().unwrap();
            assert!(e.to_string().contains(bad), "{e}");
        }
        let ca = std::path::Path::new("/etc/ssl/certs/ca-certificates.crt");
        let e = S3Source::with_ca("http://127.0.0.1:9000", "b", &c, Some(ca))
            .err()
            .unwrap();
        assert!(e.to_string().contains("https"), "{e}");
        let e = S3Source::with_ca(
            "https://h:1",
            "b",
            &c,
            Some(std::path::Path::new("/no/ca.pem")),
        )
        .err()
        .unwrap();
        assert!(e.to_string().contains("/no/ca.pem"), "{e}");
        let eu = "https://s3.eu-west-1.amazonaws.com";
        assert!(S3Source::with_options(eu, "b", &c, None, "eu-west-1").is_ok());
        let e = S3Source::with_options(eu, "b", &c, None, "eu west")
            .err()
            .unwrap();
        assert!(e.to_string().contains("region"), "{e}");
    }
}
