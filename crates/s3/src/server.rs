//! Serving the S3 API over HTTP/1.1.

use crate::gateway::Gateway;
use crate::keys::KeyRing;
use basalt_client::Cluster;
use basalt_proto::PoolId;
use hyper::body::{Body, Incoming};
use hyper::service::Service;
use hyper_util::rt::{TokioIo, TokioTimer};
use s3s::host::{S3Host, VirtualHost};
use s3s::service::{S3Service, S3ServiceBuilder};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Largest request head (request line + headers) accepted; bigger gets 431.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// How long a connection may take to send a whole request head, counted from when the
/// gateway starts waiting for one (so it also bounds how long a keep-alive connection idles);
/// then it is closed. Without it a client that stops mid-head holds its connection forever.
const HEAD_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How a gateway serves.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Pool new buckets' indexes are created in (replicated).
    pub pool: PoolId,
    /// Pool new buckets' data is created in (None: `pool`); may be erasure coded.
    pub data_pool: Option<PoolId>,
    /// Base domain for virtual-host-style requests (`BUCKET.DOMAIN`); requests to any other
    /// host name are path-style.
    pub domain: Option<String>,
    /// Reclaim the data of uploads that left an intent this long ago (a gateway died).
    pub reclaim_after: std::time::Duration,
    /// How often the lifecycle worker applies the buckets' rules.
    pub lifecycle_every: std::time::Duration,
    /// The length of a lifecycle "day" (86,400 s; shorter only to test rules).
    pub lifecycle_day: std::time::Duration,
    /// Where the gateway counts what it answered.
    pub stats: Arc<crate::stats::GatewayStats>,
    /// A request body that sends nothing for this long is cut off (nothing of it becomes
    /// visible).
    pub body_idle_timeout: std::time::Duration,
    /// Connections served at once; beyond, a new connection is answered 503 SlowDown and
    /// closed.
    pub max_connections: usize,
}

/// Defaults of [`GatewayConfig::body_idle_timeout`] and [`GatewayConfig::max_connections`].
pub const DEFAULT_BODY_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Path-style always; virtual-host-style for `BUCKET.DOMAIN[:port]`.
struct Hosts {
    domain: Option<String>,
}

impl S3Host for Hosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> s3s::S3Result<VirtualHost<'a>> {
        let name = host.rsplit_once(':').map_or(host, |(h, port)| {
            if port.bytes().all(|b| b.is_ascii_digit()) {
                h
            } else {
                host
            }
        });
        if let Some(domain) = &self.domain {
            if let Some(bucket) = name
                .strip_suffix(domain.as_str())
                .and_then(|b| b.strip_suffix('.'))
                .filter(|b| !b.is_empty())
            {
                return Ok(VirtualHost::new(domain.as_str()).with_bucket(bucket));
            }
        }
        Ok(VirtualHost::new(name))
    }
}

/// Serve S3 on `listener` until `stop` turns true; in-flight requests finish first.
pub async fn serve(
    listener: TcpListener,
    cluster: Arc<Cluster>,
    keys: Arc<KeyRing>,
    config: GatewayConfig,
    mut stop: watch::Receiver<bool>,
) {
    let gateway = Gateway::new(
        cluster.clone(),
        keys.clone(),
        config.pool,
        config.data_pool,
        config.reclaim_after,
    )
    .with_stats(config.stats.clone());
    // The lifecycle worker is a gateway of its own (gateways are stateless).
    let worker = Gateway::new(
        cluster.clone(),
        keys.clone(),
        config.pool,
        config.data_pool,
        config.reclaim_after,
    );
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(KeyRingAuth(keys));
    builder.set_access(RequestChecks);
    builder.set_host(Hosts {
        domain: config.domain.clone(),
    });
    let service = Front {
        s3: builder.build(),
        body_idle: config.body_idle_timeout,
        peer: None,
        cors: Arc::new(CorsContext {
            cluster: cluster.clone(),
            domain: config.domain.clone(),
        }),
        stats: config.stats.clone(),
    };
    let every = (config.reclaim_after / 4).clamp(
        std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(600),
    );
    let sweeper = tokio::spawn(crate::sweeper::run(
        cluster.clone(),
        every,
        config.reclaim_after,
        stop.clone(),
    ));
    let lifecycle = tokio::spawn(crate::gateway::lifecycle::run(
        worker,
        config.lifecycle_every,
        config.lifecycle_day,
        stop.clone(),
    ));
    let mut conns = tokio::task::JoinSet::new();
    let slots = Arc::new(tokio::sync::Semaphore::new(config.max_connections.max(1)));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    stream.set_nodelay(true).ok();
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        config.stats.count_slow_down();
                        tracing::warn!(%peer, max = config.max_connections,
                            "connection refused with 503 SlowDown: at the connection cap");
                        conns.spawn(slow_down(stream));
                        continue;
                    };
                    let service = Front {
                        peer: Some(peer),
                        ..service.clone()
                    };
                    let mut stop = stop.clone();
                    conns.spawn(async move {
                        let _slot = slot;
                        let conn = hyper::server::conn::http1::Builder::new()
                            .max_buf_size(MAX_HEAD_BYTES.max(8192))
                            // max_buf_size alone lets a head that arrives in one large read
                            // through (a 100 KiB head was served); this caps the head itself.
                            .max_header_size(MAX_HEAD_BYTES)
                            .timer(TokioTimer::new())
                            .header_read_timeout(HEAD_READ_TIMEOUT)
                            .keep_alive(true)
                            .serve_connection(TokioIo::new(stream), service);
                        tokio::pin!(conn);
                        tokio::select! {
                            r = conn.as_mut() => {
                                if let Err(e) = r {
                                    tracing::debug!("s3 connection: {e}");
                                }
                            }
                            _ = stop.changed() => {
                                conn.as_mut().graceful_shutdown();
                                let _ = conn.await;
                            }
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!("s3 accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    while conns.join_next().await.is_some() {}
    let _ = sweeper.await;
    let _ = lifecycle.await;
}

/// Answer a connection beyond the cap with 503 SlowDown and close it (its request unread:
/// clients retry SlowDown with backoff, as S3 asks them to).
async fn slow_down(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>\
         <Message>Please reduce your request rate: the gateway is at its connection cap.\
         </Message><RequestId>{}</RequestId></Error>",
        request_id()
    );
    let reply = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n\
         Retry-After: 1\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        stream.write_all(reply.as_bytes()).await?;
        stream.shutdown().await
    };
    // Bound: a client that does not read its refusal is dropped after 5 s.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), write).await;
}

/// The protocol layer's service with what wraps every request: a request id, the peer's
/// address, CORS (preflights answered here, `Access-Control-*` headers added to answers of
/// requests with an `Origin`, both by the bucket's rules), and a connection closed after a
/// bodiless `Expect: 100-continue` request, or after an error answered to a request with a
/// body (which may be left unread).
///
/// **Request ids.** Every response carries `x-amz-request-id` (and `x-amz-id-2`), and an
/// error document its `<RequestId>`, as S3 answers: what a user quotes when reporting a
/// failure, and what ties a client's error to the gateway's log line.
///
/// **Bodiless expectations.** hyper answers a request that carries `Expect: 100-continue`
/// but no body without a `100 Continue` (RFC 9110 allows it: there is no body to wait for).
/// botocore (boto3, the aws CLI) sends that expectation on every upload, empty ones
/// included, and then parses the *next* response on the same connection against the stale
/// status line, losing its headers (boto/botocore#3755): `aws s3 sync` of a tree with empty
/// files failed with "upload failed: ... 'ETag'" when an UploadPart followed an empty PUT on
/// one connection. A fresh connection resets botocore's state.
#[derive(Clone)]
struct Front {
    s3: S3Service,
    /// Longest pause allowed between two frames of a request body.
    body_idle: std::time::Duration,
    /// The connection's peer (for policies' `aws:SourceIp`).
    peer: Option<std::net::SocketAddr>,
    /// What CORS answers need: the buckets' rules.
    cors: Arc<CorsContext>,
    /// Where requests are timed.
    stats: Arc<crate::stats::GatewayStats>,
}

/// What the front service reads the buckets' CORS rules with.
struct CorsContext {
    cluster: Arc<Cluster>,
    /// Base domain of virtual-host-style requests.
    domain: Option<String>,
}

impl Service<hyper::Request<Incoming>> for Front {
    type Response = <S3Service as Service<hyper::Request<Incoming>>>::Response;
    type Error = <S3Service as Service<hyper::Request<Incoming>>>::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, mut req: hyper::Request<Incoming>) -> Self::Future {
        if let Some(peer) = self.peer {
            req.extensions_mut().insert(crate::gateway::Peer(peer));
        }
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(String::from)
        };
        let origin = header("origin");
        let bucket = bucket_of(&req, self.cors.domain.as_deref());
        if req.method() == hyper::Method::OPTIONS {
            let method = header("access-control-request-method");
            let headers: Vec<String> = header("access-control-request-headers")
                .map(|h| {
                    h.split(',')
                        .map(|x| x.trim().to_ascii_lowercase())
                        .filter(|x| !x.is_empty())
                        .collect()
                })
                .unwrap_or_default();
            let ctx = self.cors.clone();
            let id = request_id();
            return Box::pin(async move {
                let mut response = preflight(&ctx, bucket, origin, method, headers).await;
                tag_with_request_id(&mut response, &id);
                Ok(response)
            });
        }
        let class = crate::stats::ApiClass::of(
            req.method(),
            bucket.is_some(),
            has_key(&req, self.cors.domain.as_deref()),
            req.uri().query().unwrap_or(""),
        );
        let stats = self.stats.clone();
        let start = basalt_metrics::now();
        let method = req.method().as_str().to_string();
        let cors = self.cors.clone();
        let expects = req
            .headers()
            .get(hyper::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let bodiless = req.body().is_end_stream();
        let close = expects && bodiless;
        // A refusal sent before the body was read (a wrong key, a bad header) leaves the body
        // unread, or unsent by a client that waited for `100 Continue`: the connection's
        // framing is unknown from there, so it is closed.
        let close_on_error = !bodiless;
        let id = request_id();
        tracing::debug!(request = %id, method = %req.method(), uri = %req.uri(), "s3 request");
        let idle = self.body_idle;
        let req = req.map(|b| s3s::Body::http_body(crate::idle_body::IdleBody::new(b, idle)));
        let s3 = self.s3.clone();
        Box::pin(async move {
            let result = s3.call(req).await;
            // An error here is the connection's (no response at all): counted as a 5xx.
            let status = result.as_ref().map_or(500, |r| r.status().as_u16());
            stats.answered(class, status, start);
            let mut response = result?;
            tag_with_request_id(&mut response, &id);
            if let (Some(origin), Some(bucket)) = (origin, bucket) {
                cors_headers(&cors, &bucket, &origin, &method, &mut response).await;
            }
            if close || (close_on_error && response.status().as_u16() >= 400) {
                response.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok(response)
        })
    }
}

/// The bucket a request names: `BUCKET.DOMAIN` as its host, else the first path segment.
fn bucket_of<B>(req: &hyper::Request<B>, domain: Option<&str>) -> Option<String> {
    let host = req
        .headers()
        .get(hyper::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name));
    if let (Some(host), Some(domain)) = (host, domain) {
        if let Some(bucket) = host
            .strip_suffix(domain)
            .and_then(|b| b.strip_suffix('.'))
            .filter(|b| !b.is_empty())
        {
            return Some(bucket.to_string());
        }
    }
    req.uri()
        .path()
        .trim_start_matches('/')
        .split('/')
        .next()
        .filter(|b| !b.is_empty())
        .map(String::from)
}

/// Does the request name an object key (after the bucket, in the path or the host)?
fn has_key<B>(req: &hyper::Request<B>, domain: Option<&str>) -> bool {
    let path = req.uri().path().trim_start_matches('/');
    let in_host = domain.is_some_and(|d| {
        req.headers()
            .get(hyper::header::HOST)
            .and_then(|h| h.to_str().ok())
            .map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name))
            .and_then(|h| h.strip_suffix(d))
            .is_some_and(|b| b.len() > 1 && b.ends_with('.'))
    });
    if in_host {
        !path.is_empty()
    } else {
        path.split_once('/').is_some_and(|(_, key)| !key.is_empty())
    }
}

/// An S3 error document answered by the front service itself.
fn error_response(status: u16, code: &str, message: &str) -> hyper::Response<s3s::Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>{message}</Message></Error>"
    );
    let mut response = hyper::Response::new(s3s::Body::from(body));
    *response.status_mut() = hyper::StatusCode::from_u16(status).expect("a valid status");
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/xml"),
    );
    response
}

/// Answer a CORS preflight (`OPTIONS`) by the bucket's rules: 200 with what they allow, 403
/// when they allow nothing of it (or the bucket has none).
async fn preflight(
    ctx: &CorsContext,
    bucket: Option<String>,
    origin: Option<String>,
    method: Option<String>,
    headers: Vec<String>,
) -> hyper::Response<s3s::Body> {
    let (Some(bucket), Some(origin), Some(method)) = (bucket, origin, method) else {
        return error_response(
            400,
            "BadRequest",
            "Insufficient information. Origin request header needed.",
        );
    };
    let record = match crate::buckets::get_bucket(&ctx.cluster, &bucket).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return error_response(404, "NoSuchBucket", "The specified bucket does not exist")
        }
        Err(e) => {
            tracing::error!("s3: CORS preflight: {e}");
            return error_response(500, "InternalError", "reading the bucket failed");
        }
    };
    if record.cors.is_empty() {
        return error_response(403, "CORSResponse", "CORS is not enabled for this bucket.");
    }
    let Some(allowed) = crate::cors::allow(&record.cors, &origin, &method, &headers) else {
        return error_response(
            403,
            "CORSResponse",
            "This CORS request is not allowed. This is usually because the evalution of \
             Origin, request method / Access-Control-Request-Method or \
             Access-Control-Request-Headers are not whitelisted by the resource's CORS spec.",
        );
    };
    let mut response = hyper::Response::new(s3s::Body::empty());
    put_allowed(&mut response, &allowed);
    response
}

/// Add what a CORS rule allows to a response.
fn put_allowed(response: &mut hyper::Response<s3s::Body>, allowed: &crate::cors::Allowed) {
    let h = response.headers_mut();
    let mut set = |name: &'static str, value: &str| {
        if let Ok(v) = hyper::header::HeaderValue::from_str(value) {
            h.insert(name, v);
        }
    };
    set("access-control-allow-origin", &allowed.origin);
    set("access-control-allow-methods", &allowed.methods);
    if let Some(hs) = &allowed.headers {
        set("access-control-allow-headers", hs);
    }
    if let Some(e) = &allowed.expose {
        set("access-control-expose-headers", e);
    }
    if let Some(age) = allowed.max_age {
        set("access-control-max-age", &age.to_string());
    }
    if allowed.origin != "*" {
        set("access-control-allow-credentials", "true");
    }
    set(
        "vary",
        "Origin, Access-Control-Request-Headers, Access-Control-Request-Method",
    );
}

/// The CORS headers of an actual cross-origin request (it carries `Origin`): those of the
/// bucket's first rule that allows its origin and method, or none.
async fn cors_headers(
    ctx: &CorsContext,
    bucket: &str,
    origin: &str,
    method: &str,
    response: &mut hyper::Response<s3s::Body>,
) {
    if let Ok(Some(record)) = crate::buckets::get_bucket(&ctx.cluster, bucket).await {
        if let Some(allowed) = crate::cors::allow(&record.cors, origin, method, &[]) {
            put_allowed(response, &allowed);
        }
    }
}

/// A fresh request id: 16 hex digits, unique within a gateway process and unlikely to repeat
/// across processes (the sequence starts at a clock- and pid-derived point).
fn request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static BASE: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        nanos.rotate_left(20) ^ (std::process::id() as u64) << 44
    });
    format!(
        "{:016X}",
        base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed))
    )
}

/// Put request id `id` into a response: its headers, and an error document's
/// `<RequestId>` and `<HostId>` (the protocol layer renders errors without them).
fn tag_with_request_id(response: &mut hyper::Response<s3s::Body>, id: &str) {
    let value = hyper::header::HeaderValue::from_str(id).expect("hex digits");
    response
        .headers_mut()
        .insert("x-amz-request-id", value.clone());
    response.headers_mut().insert("x-amz-id-2", value);
    if response.status().as_u16() < 400 {
        return;
    }
    let Some(body) = response.body().bytes() else {
        return;
    };
    const END: &[u8] = b"</Error>";
    let Some(at) = body.windows(END.len()).rposition(|w| w == END) else {
        return;
    };
    if body.windows(11).any(|w| w == b"<RequestId>") {
        return;
    }
    let mut tagged = Vec::with_capacity(body.len() + 80);
    tagged.extend_from_slice(&body[..at]);
    tagged
        .extend_from_slice(format!("<RequestId>{id}</RequestId><HostId>{id}</HostId>").as_bytes());
    tagged.extend_from_slice(&body[at..]);
    let len = tagged.len();
    *response.body_mut() = s3s::Body::from(tagged);
    if response
        .headers()
        .contains_key(hyper::header::CONTENT_LENGTH)
    {
        response
            .headers_mut()
            .insert(hyper::header::CONTENT_LENGTH, len.into());
    }
}

/// Checks of every request the protocol layer leaves to the service: a presigned URL may not
/// be valid for longer than S3 allows, and an empty `Content-MD5` is no digest. Anonymous
/// requests go on: the gateway decides what a bucket's policy lets them do.
struct RequestChecks;

/// The longest a SigV4 presigned URL may be valid (S3's limit: 7 days).
const MAX_PRESIGNED_EXPIRY_SECS: u64 = 7 * 24 * 3600;

#[async_trait::async_trait]
impl s3s::access::S3Access for RequestChecks {
    async fn check(&self, cx: &mut s3s::access::S3AccessContext<'_>) -> s3s::S3Result<()> {
        if let Some(expires) = query_param(cx.uri(), "X-Amz-Expires") {
            match expires.parse::<u64>() {
                Ok(secs) if secs <= MAX_PRESIGNED_EXPIRY_SECS => {}
                Ok(_) => {
                    return Err(s3s::s3_error!(
                        AuthorizationQueryParametersError,
                        "X-Amz-Expires must be less than a week (in seconds) that is 604800"
                    ))
                }
                Err(_) => {
                    return Err(s3s::s3_error!(
                        AuthorizationQueryParametersError,
                        "X-Amz-Expires should be a number"
                    ))
                }
            }
        }
        if let Some(md5) = cx.headers().get("content-md5") {
            if md5.as_bytes().iter().all(u8::is_ascii_whitespace) {
                return Err(s3s::s3_error!(
                    InvalidDigest,
                    "The Content-MD5 you specified was invalid (it is empty)"
                ));
            }
        }
        Ok(())
    }
}

/// The value of query parameter `name` (not percent-decoded: the callers' values are plain).
fn query_param<'a>(uri: &'a hyper::Uri, name: &str) -> Option<&'a str> {
    uri.query()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The key ring as the protocol layer's authenticator.
struct KeyRingAuth(Arc<KeyRing>);

#[async_trait::async_trait]
impl s3s::auth::S3Auth for KeyRingAuth {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<s3s::auth::SecretKey> {
        self.0.get_secret_key(access_key).await
    }
}
