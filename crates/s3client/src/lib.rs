//! A lean S3 client for Basalt's tools (the bench's load generator, objvol builds and
//! reads): one keep-alive HTTP/1.1 connection to an endpoint, every request signed with
//! SigV4 (header auth, the body's SHA-256 as `x-amz-content-sha256`, service `s3`,
//! path-style), buffers reused from request to request so that a request costs the client
//! little next to the gateway. It speaks status, headers, a body by Content-Length or
//! chunked, and `Connection: close`; [`list`] adds ListObjectsV2. https endpoints go
//! through rustls ([`Tls`]): the system's roots, or a CA file for a private endpoint.
//! [`credentials`] reads the access key requests are signed with from a credentials file.

pub mod credentials;
pub mod list;

pub use credentials::{Credentials, CredentialsError};

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

/// A connection's byte stream: TCP, or TLS over it.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}
type Stream = BufReader<Box<dyn Io>>;

/// Where the system keeps its trusted roots (Debian, then Fedora's layout).
const SYSTEM_ROOTS: [&str; 2] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// TLS for an https endpoint: whom to trust and the name its certificate must carry.
#[derive(Clone)]
pub struct Tls {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl Tls {
    /// TLS to `host` (a DNS name or an IP address, which the certificate must name),
    /// trusting the certificates of `ca_file` (PEM) if given, else the system's roots.
    pub fn new(host: &str, ca_file: Option<&std::path::Path>) -> Result<Tls> {
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| Error(format!("{host:?} is not a host name TLS can check: {e}")))?;
        let path = match ca_file {
            Some(p) => p.to_path_buf(),
            None => SYSTEM_ROOTS
                .iter()
                .map(std::path::PathBuf::from)
                .find(|p| p.is_file())
                .context("no system certificate bundle (give a CA file)")?,
        };
        let pem = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| Error(format!("{}: bad PEM: {e}", path.display())))?;
            roots
                .add(cert)
                .map_err(|e| Error(format!("{}: {e}", path.display())))?;
        }
        if roots.is_empty() {
            bail!("{} holds no CERTIFICATE", path.display());
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Tls {
            connector: tokio_rustls::TlsConnector::from(std::sync::Arc::new(config)),
            name,
        })
    }
}

/// Longest wait to connect to the gateway.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest wait for an answer to begin, beyond the time its bytes may take (a timed loop
/// of requests ends at most this late).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Slowest transfer a body may have: a 1 GiB PUT or GET gets 256 s more than
/// [`REQUEST_TIMEOUT`], so large bodies on a loaded machine do not time out while a gateway
/// that stops answering is still given up on.
const MIN_BYTES_PER_S: f64 = (4 << 20) as f64;

/// Longest a phase moving `bytes` may take.
fn budget(bytes: usize) -> Duration {
    REQUEST_TIMEOUT + Duration::from_secs_f64(bytes as f64 / MIN_BYTES_PER_S)
}

/// `fut`, or an error naming `what` if it takes longer than [`budget`]`(bytes)`.
async fn bounded<T>(
    what: &str,
    bytes: usize,
    fut: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    let limit = budget(bytes);
    match tokio::time::timeout(limit, fut).await {
        Ok(outcome) => outcome,
        Err(_) => Err(Error(format!("no {what} within {} s", limit.as_secs()))),
    }
}
/// A connection idle this long is reopened before its next request: the gateway closes idle
/// keep-alive connections after 30 s.
const IDLE_REOPEN: Duration = Duration::from_secs(20);
/// Largest answer head (status line, headers, chunk-size lines and trailers).
const MAX_HEAD_BYTES: u64 = 16 << 10;
/// Largest answer body (a DeleteObjects answer listing 1000 failures is about 200 KiB).
const MAX_BODY_BYTES: usize = 4 << 20;
/// Keys per DeleteObjects request (the S3 limit).
pub const DELETE_BATCH: usize = 1000;
/// What went wrong talking to an endpoint (a message naming the step).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Error(pub String);

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error(e.to_string())
    }
}

/// A result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Return an [`Error`] made of a format string.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err($crate::Error(format!($($t)*)))
    };
}
pub(crate) use bail;

/// `context` / `with_context` on results and options: the step that failed, then why.
pub(crate) trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: std::fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|e| Error(format!("{what}: {e}")))
    }
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error(format!("{}: {e}", what())))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: &str) -> Result<T> {
        self.ok_or_else(|| Error(what.to_string()))
    }
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| Error(what()))
    }
}

/// SHA-256 of an empty body.
pub const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// SigV4 signing (header auth, service `s3`) with one access key.
#[derive(Clone)]
pub struct Signer {
    access_key: String,
    secret_key: String,
    region: String,
    /// The day (`YYYYMMDD`) last signed for and its signing key: the four HMACs that derive
    /// the key run once a day, not once a request.
    day_key: Option<(String, [u8; 32])>,
}

impl Signer {
    /// A signer for `access_key` and its secret in `region`.
    pub fn new(access_key: &str, secret_key: &str, region: &str) -> Signer {
        Signer {
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            region: region.into(),
            day_key: None,
        }
    }

    /// The `Authorization` header of a request. `path` is the URI path before encoding,
    /// `query` the canonical query string (`delete=`, empty for none), `headers` every signed
    /// header as (lowercase name, trimmed value) sorted by name, `amz_date` the value of
    /// `x-amz-date` (`20130524T000000Z`).
    pub fn authorization(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        headers: &[(&str, &str)],
        payload_sha256: &str,
        amz_date: &str,
    ) -> String {
        let day = amz_date.get(..8).unwrap_or(amz_date);
        let mut canonical = String::with_capacity(256);
        canonical.push_str(method);
        canonical.push('\n');
        encode_path(path, &mut canonical);
        canonical.push('\n');
        canonical.push_str(query);
        canonical.push('\n');
        for (name, value) in headers {
            let _ = writeln!(canonical, "{name}:{value}");
        }
        canonical.push('\n');
        let signed: Vec<&str> = headers.iter().map(|(name, _)| *name).collect();
        let signed = signed.join(";");
        canonical.push_str(&signed);
        canonical.push('\n');
        canonical.push_str(payload_sha256);
        let scope = format!("{day}/{}/s3/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let signature = hex::encode(hmac(&self.signing_key(day), to_sign.as_bytes()));
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope},SignedHeaders={signed},Signature={signature}",
            self.access_key
        )
    }

    fn signing_key(&mut self, day: &str) -> [u8; 32] {
        if let Some((d, key)) = &self.day_key {
            if d == day {
                return *key;
            }
        }
        let secret = format!("AWS4{}", self.secret_key);
        let key = [self.region.as_str(), "s3", "aws4_request"]
            .iter()
            .fold(hmac(secret.as_bytes(), day.as_bytes()), |key, part| {
                hmac(&key, part.as_bytes())
            });
        self.day_key = Some((day.to_string(), key));
        key
    }
}

/// HMAC-SHA256 of `data` under `key`.
fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Append `path` URI-encoded as S3 signs it: every byte but unreserved ones and `/` as %XX.
pub fn encode_path(path: &str, out: &mut String) {
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// `x-amz-date` for `now`: `20130524T000000Z`.
pub fn amz_date(now: SystemTime) -> String {
    let secs = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// The calendar date of a day number since 1970-01-01 (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Append `value` URI-encoded for a query string as S3 signs it (every byte but unreserved
/// ones as %XX, `/` included).
pub fn encode_query_value(value: &str, out: &mut String) {
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// One keep-alive HTTP/1.1 connection to the gateway, opened on first use and again after the
/// gateway closed it; its buffers are reused from request to request.
pub struct Connection {
    /// `IP:PORT` of the gateway, also the Host header.
    addr: String,
    signer: Signer,
    /// TLS of an https endpoint.
    tls: Option<Tls>,
    stream: Option<Stream>,
    /// When the connection last finished a request.
    used: Instant,
    /// The request being sent.
    request: Vec<u8>,
    /// The answer's head line being read.
    line: Vec<u8>,
    /// The body of the last answer.
    body: Vec<u8>,
    /// The headers of the last answer (lowercase names).
    headers: Vec<(String, String)>,
    /// Largest answer body accepted.
    max_body: usize,
    /// Connections opened so far.
    connects: u64,
}

impl Connection {
    /// A connection to `addr` (`IP:PORT`) signing with `signer`; it connects on first use.
    pub fn new(addr: &str, signer: &Signer) -> Connection {
        Connection {
            addr: addr.into(),
            signer: signer.clone(),
            tls: None,
            stream: None,
            used: Instant::now(),
            request: Vec::with_capacity(8 << 10),
            line: Vec::with_capacity(256),
            body: Vec::with_capacity(8 << 10),
            headers: Vec::new(),
            max_body: MAX_BODY_BYTES,
            connects: 0,
        }
    }

    /// Speak TLS (an https endpoint).
    pub fn with_tls(mut self, tls: Tls) -> Connection {
        self.tls = Some(tls);
        self
    }

    /// Accept answer bodies up to `bytes` (ranged GETs of large pieces).
    pub fn set_max_body(&mut self, bytes: usize) {
        self.max_body = bytes;
    }

    /// A header of the last answer (`name` in lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body of the last answer, taken (the next answer gets a fresh buffer).
    pub fn take_body(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.body)
    }

    /// Send one signed request and read its answer, its body into `self.body`; returns the
    /// status. `query` is as sent (`delete`, empty for none); `extra` are more headers to
    /// sign (lowercase names).
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        extra: &[(&str, &str)],
        body: &[u8],
        payload_sha256: &str,
    ) -> Result<u16> {
        let outcome = self
            .exchange(method, path, query, extra, body, payload_sha256)
            .await;
        if outcome.is_err() {
            // What is left on the connection is unknown: start the next request afresh.
            self.stream = None;
        }
        self.used = Instant::now();
        outcome
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        query: &str,
        extra: &[(&str, &str)],
        body: &[u8],
        payload_sha256: &str,
    ) -> Result<u16> {
        if self.used.elapsed() > IDLE_REOPEN {
            self.stream = None;
        }
        if self.stream.is_none() {
            let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&self.addr))
                .await
                .map_err(|_| Error(format!("no connection within {CONNECT_TIMEOUT:?}")))?
                .with_context(|| format!("connect to {}", self.addr))?;
            stream.set_nodelay(true)?;
            let io: Box<dyn Io> = match &self.tls {
                None => Box::new(stream),
                Some(tls) => Box::new(
                    tokio::time::timeout(
                        CONNECT_TIMEOUT,
                        tls.connector.connect(tls.name.clone(), stream),
                    )
                    .await
                    .map_err(|_| Error(format!("no TLS handshake within {CONNECT_TIMEOUT:?}")))?
                    .with_context(|| format!("TLS with {}", self.addr))?,
                ),
            };
            self.stream = Some(BufReader::new(io));
            self.connects += 1;
        }
        let date = amz_date(SystemTime::now());
        let mut headers = vec![
            ("host", self.addr.as_str()),
            ("x-amz-content-sha256", payload_sha256),
            ("x-amz-date", date.as_str()),
        ];
        headers.extend_from_slice(extra);
        headers.sort_unstable_by_key(|(name, _)| *name);
        let auth = self.signer.authorization(
            method,
            path,
            &canonical_query(query),
            &headers,
            payload_sha256,
            &date,
        );
        // Head and body in one buffer and one write: one segment for a 4 KiB PUT.
        let mut head = String::with_capacity(512);
        head.push_str(method);
        head.push(' ');
        encode_path(path, &mut head);
        if !query.is_empty() {
            head.push('?');
            head.push_str(query);
        }
        head.push_str(" HTTP/1.1\r\n");
        for (name, value) in &headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        let _ = write!(
            head,
            "authorization: {auth}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        self.request.clear();
        self.request.extend_from_slice(head.as_bytes());
        self.request.extend_from_slice(body);
        let stream = self.stream.as_mut().context("no connection")?;
        let (request, line, headers) = (&self.request, &mut self.line, &mut self.headers);
        let (status, length, chunked, close) = bounded("answer", request.len(), async {
            stream.get_mut().write_all(request).await?;
            read_head(stream, line, headers).await
        })
        .await?;
        self.body.clear();
        let bodiless = method == "HEAD" || status == 204 || status == 304 || status < 200;
        match (bodiless, chunked, length) {
            (true, _, _) => {}
            (false, true, _) => {
                let mut budget = MAX_HEAD_BYTES;
                let (body, line) = (&mut self.body, &mut self.line);
                bounded("answer body", self.max_body, async {
                    read_chunked(stream, body, line, &mut budget).await
                })
                .await?;
            }
            (false, false, Some(n)) => {
                if n > self.max_body {
                    bail!(
                        "answer body of {n} bytes (at most {} expected)",
                        self.max_body
                    );
                }
                self.body.resize(n, 0);
                let body = &mut self.body;
                bounded("answer body", n, async {
                    stream.read_exact(body).await?;
                    Ok(())
                })
                .await?;
            }
            (false, false, None) => {
                bail!("answer {status} has neither Content-Length nor chunked encoding")
            }
        }
        if close {
            self.stream = None;
        }
        Ok(status)
    }
}

/// Reads an answer's status line and headers (into `headers`, names in lowercase): the
/// status, Content-Length, whether chunked, whether the gateway closes the connection.
async fn read_head(
    stream: &mut Stream,
    line: &mut Vec<u8>,
    headers: &mut Vec<(String, String)>,
) -> Result<(u16, Option<usize>, bool, bool)> {
    let mut budget = MAX_HEAD_BYTES;
    read_line(stream, line, &mut budget).await?;
    if line.is_empty() {
        bail!("the gateway closed the connection without answering");
    }
    let status_line = std::str::from_utf8(line).context("status line")?;
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {:?}", status_line.trim_end()))?;
    let (mut length, mut chunked, mut close) = (None, false, false);
    headers.clear();
    loop {
        read_line(stream, line, &mut budget).await?;
        if line.is_empty() {
            bail!("the gateway closed the connection in the answer's head");
        }
        let text = std::str::from_utf8(line).context("header line")?;
        if text.trim_end().is_empty() {
            break;
        }
        let (name, value) = text.split_once(':').context("header line without ':'")?;
        let value = value.trim();
        headers.push((name.trim().to_ascii_lowercase(), value.to_string()));
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().context("bad Content-Length")?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    Ok((status, length, chunked, close))
}

impl Connection {
    /// The body of the last answer.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The last answer's body as text, shortened, for error messages.
    pub fn body_excerpt(&self) -> String {
        String::from_utf8_lossy(&self.body)
            .chars()
            .take(300)
            .collect()
    }

    /// Connections opened so far (1 while the gateway keeps the first one alive).
    pub fn connects(&self) -> u64 {
        self.connects
    }
}

/// The canonical form of a query as sent: parameters sorted, each with its `=`.
pub fn canonical_query(query: &str) -> String {
    let mut params: Vec<String> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            if p.contains('=') {
                p.to_string()
            } else {
                format!("{p}=")
            }
        })
        .collect();
    params.sort_unstable();
    params.join("&")
}

/// Read one line of an answer's head into `line` (cleared first), charging it to `budget`;
/// an empty `line` means the connection closed.
async fn read_line(stream: &mut Stream, line: &mut Vec<u8>, budget: &mut u64) -> Result<()> {
    line.clear();
    let n = (&mut *stream).take(*budget).read_until(b'\n', line).await?;
    *budget -= n as u64;
    if n > 0 && !line.ends_with(b"\n") {
        bail!("answer head cut short or longer than {MAX_HEAD_BYTES} bytes");
    }
    Ok(())
}

/// Read a chunked body into `body`, its size lines and trailers charged to `budget`.
async fn read_chunked(
    stream: &mut Stream,
    body: &mut Vec<u8>,
    line: &mut Vec<u8>,
    budget: &mut u64,
) -> Result<()> {
    loop {
        read_line(stream, line, budget).await?;
        let text = std::str::from_utf8(line).context("chunk size line")?;
        let hex_size = text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(hex_size, 16)
            .with_context(|| format!("bad chunk size {:?}", text.trim_end()))?;
        if size == 0 {
            // Trailers, if any, up to the empty line.
            loop {
                read_line(stream, line, budget).await?;
                if line.is_empty() {
                    bail!("the gateway closed the connection in a chunked answer");
                }
                if line.as_slice() == b"\r\n" || line.as_slice() == b"\n" {
                    return Ok(());
                }
            }
        }
        if body.len() + size > MAX_BODY_BYTES {
            bail!("chunked answer longer than {MAX_BODY_BYTES} bytes");
        }
        let start = body.len();
        body.resize(start + size, 0);
        stream.read_exact(&mut body[start..]).await?;
        read_line(stream, line, budget).await?;
        if line.as_slice() != b"\r\n" {
            bail!("chunk not followed by CRLF");
        }
    }
}

/// Delete `keys` of `bucket`, DELETE_BATCH a DeleteObjects request in quiet mode (the answer
/// lists only failures). The keys are put in the XML as they are: they must need no escaping.
pub async fn delete_objects(conn: &mut Connection, bucket: &str, keys: &[String]) -> Result<()> {
    let objects: Vec<(&str, Option<&str>)> = keys.iter().map(|k| (k.as_str(), None)).collect();
    delete_versions(conn, bucket, &objects).await
}

/// Delete `objects` (key, and the version to remove — without one, a versioned bucket adds
/// a delete marker) of `bucket`, DELETE_BATCH a DeleteObjects request in quiet mode. Keys
/// and version ids go in the XML as they are: they must need no escaping.
pub async fn delete_versions(
    conn: &mut Connection,
    bucket: &str,
    objects: &[(&str, Option<&str>)],
) -> Result<()> {
    let path = format!("/{bucket}");
    for batch in objects.chunks(DELETE_BATCH) {
        let mut xml = String::from(
            "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Quiet>true</Quiet>",
        );
        for (key, version) in batch {
            let _ = write!(xml, "<Object><Key>{key}</Key>");
            if let Some(v) = version {
                let _ = write!(xml, "<VersionId>{v}</VersionId>");
            }
            xml.push_str("</Object>");
        }
        xml.push_str("</Delete>");
        let first = batch.first().map(|o| o.0).unwrap_or_default();
        let status = send_xml(conn, "POST", &path, "delete", &xml)
            .await
            .with_context(|| format!("DeleteObjects of {} keys from {first}", batch.len()))?;
        if status != 200 || conn.body.windows(7).any(|w| w == b"<Error>") {
            bail!(
                "DeleteObjects of {} keys from {first} answered {status}: {}",
                batch.len(),
                conn.body_excerpt()
            );
        }
    }
    Ok(())
}

/// Send an XML body with the Content-MD5 S3 requires of these requests (DeleteObjects,
/// bucket configuration); returns the status.
async fn send_xml(
    conn: &mut Connection,
    method: &str,
    path: &str,
    query: &str,
    xml: &str,
) -> Result<u16> {
    let md5 = base64::engine::general_purpose::STANDARD.encode(md5::Md5::digest(xml));
    let sha256 = hex::encode(Sha256::digest(xml));
    conn.send(
        method,
        path,
        query,
        &[("content-md5", &md5)],
        xml.as_bytes(),
        &sha256,
    )
    .await
}

/// An error for an answer with an unexpected `status` to `what`.
pub fn bail_status(status: u16, what: &str) -> Result<()> {
    Err(Error(format!("{what} answered {status}")))
}

/// Turn versioning on for `bucket` (PutBucketVersioning, Status Enabled).
pub async fn enable_versioning(conn: &mut Connection, bucket: &str) -> Result<()> {
    let xml = "<VersioningConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
               <Status>Enabled</Status></VersioningConfiguration>";
    let status = send_xml(conn, "PUT", &format!("/{bucket}"), "versioning", xml)
        .await
        .with_context(|| format!("PutBucketVersioning of {bucket}"))?;
    if status != 200 {
        bail!(
            "PutBucketVersioning of {bucket} answered {status}: {}",
            conn.body_excerpt()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a large body gets time in proportion to its size (a 1 GiB PUT on a loaded
    /// machine is not cut off at 30 s), a small request only the answer timeout.
    #[test]
    fn time_allowed_grows_with_the_bytes() {
        assert_eq!(budget(0), REQUEST_TIMEOUT);
        assert_eq!(budget(4 << 10).as_secs(), 30);
        assert_eq!(budget(1 << 30), REQUEST_TIMEOUT + Duration::from_secs(256));
    }

    /// AWS's documented example key and time (Signature Version 4, header auth, S3).
    const ACCESS: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20130524T000000Z";
    const HOST: &str = "examplebucket.s3.amazonaws.com";

    #[test]
    fn signs_aws_documented_examples() {
        // Goal: the signer reproduces AWS's published signatures: GET Object with a Range,
        // PUT Object with a body and a key that needs encoding ('$'), and a bucket
        // sub-resource query without a value (as `?delete` is sent); the signing key cached
        // for the day gives the same signature twice.
        let mut s = Signer::new(ACCESS, SECRET, "us-east-1");
        let get = s.authorization(
            "GET",
            "/test.txt",
            "",
            &[
                ("host", HOST),
                ("range", "bytes=0-9"),
                ("x-amz-content-sha256", EMPTY_SHA256),
                ("x-amz-date", DATE),
            ],
            EMPTY_SHA256,
            DATE,
        );
        assert_eq!(
            get,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/\
             aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,\
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        let body_sha = hex::encode(Sha256::digest(b"Welcome to Amazon S3."));
        let put = s.authorization(
            "PUT",
            "/test$file.text",
            "",
            &[
                ("date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("host", HOST),
                ("x-amz-content-sha256", &body_sha),
                ("x-amz-date", DATE),
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
            ],
            &body_sha,
            DATE,
        );
        assert!(
            put.ends_with(
                "Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
            ),
            "{put}"
        );
        let lifecycle = |s: &mut Signer| {
            s.authorization(
                "GET",
                "/",
                &canonical_query("lifecycle"),
                &[
                    ("host", HOST),
                    ("x-amz-content-sha256", EMPTY_SHA256),
                    ("x-amz-date", DATE),
                ],
                EMPTY_SHA256,
                DATE,
            )
        };
        let first = lifecycle(&mut s);
        assert!(
            first.ends_with(
                "Signature=fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"
            ),
            "{first}"
        );
        assert_eq!(lifecycle(&mut s), first);
        assert_eq!(
            lifecycle(&mut Signer::new(ACCESS, SECRET, "us-east-1")),
            first
        );
    }

    #[test]
    fn formats_dates_paths_and_queries_as_sigv4_signs_them() {
        // Goal: x-amz-date is the compact UTC form, paths keep '/' and unreserved bytes and
        // encode the rest once, and a query's parameters are sorted with their '='.
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_369_353_600);
        assert_eq!(amz_date(t), "20130524T000000Z");
        let mut out = String::new();
        encode_path("/b/rs16c/3/12 a$~é", &mut out);
        assert_eq!(out, "/b/rs16c/3/12%20a%24~%C3%A9");
        assert_eq!(canonical_query("delete"), "delete=");
        assert_eq!(canonical_query("b=2&a"), "a=&b=2");
        assert_eq!(canonical_query(""), "");
    }

    #[test]
    fn reads_answers_by_length_chunked_and_reconnects_after_close() {
        // Goal: the client reads a Content-Length body, a chunked body with a trailer, and a
        // HEAD answer's head only on one keep-alive connection, sends each request signed in
        // one piece, and opens a new connection after the gateway says `Connection: close`.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let server = tokio::spawn(async move {
                let answers = [
                    vec![
                        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                        "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
                        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\
                         \r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nx-t: 1\r\n\r\n",
                    ],
                    vec!["HTTP/1.1 204 No Content\r\n\r\n"],
                ];
                let mut requests = Vec::new();
                for answers in answers {
                    let (s, _) = listener.accept().await.unwrap();
                    let mut s = BufReader::new(s);
                    for answer in answers {
                        let mut head = String::new();
                        loop {
                            let mut line = String::new();
                            s.read_line(&mut line).await.unwrap();
                            head.push_str(&line);
                            if line == "\r\n" {
                                break;
                            }
                        }
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .unwrap()
                            .parse()
                            .unwrap();
                        let mut body = vec![0; length];
                        s.read_exact(&mut body).await.unwrap();
                        requests.push((head, body));
                        s.get_mut().write_all(answer.as_bytes()).await.unwrap();
                    }
                }
                requests
            });
            let mut conn = Connection::new(&addr, &Signer::new(ACCESS, SECRET, "us-east-1"));
            let sha = hex::encode(Sha256::digest(b"body"));
            let status = conn.send("PUT", "/b/k", "", &[], b"body", &sha).await;
            assert_eq!(status.unwrap(), 200);
            assert_eq!(conn.body, b"hello");
            let status = conn.send("HEAD", "/b", "", &[], &[], EMPTY_SHA256).await;
            assert_eq!((status.unwrap(), conn.body.len()), (200, 0));
            let status = conn
                .send(
                    "POST",
                    "/b",
                    "delete",
                    &[("content-md5", "x")],
                    b"",
                    EMPTY_SHA256,
                )
                .await;
            assert_eq!(status.unwrap(), 200);
            assert_eq!(conn.body, b"abcde");
            let status = conn.send("DELETE", "/b", "", &[], &[], EMPTY_SHA256).await;
            assert_eq!(status.unwrap(), 204);
            assert_eq!(conn.connects, 2);
            let requests = server.await.unwrap();
            let (put, body) = &requests[0];
            assert!(
                put.starts_with("PUT /b/k HTTP/1.1\r\nhost: 127.0.0.1:"),
                "{put}"
            );
            assert!(
                put.contains(&format!("x-amz-content-sha256: {sha}\r\n")),
                "{put}"
            );
            assert!(put.contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date,"));
            assert_eq!(body, b"body");
            let (post, _) = &requests[2];
            assert!(post.starts_with("POST /b?delete HTTP/1.1\r\n"), "{post}");
            assert!(post.contains("SignedHeaders=content-md5;host;x-amz-content-sha256;"));
        });
    }
}
