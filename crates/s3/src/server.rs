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
}

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
    );
    let mut builder = S3ServiceBuilder::new(gateway);
    builder.set_auth(KeyRingAuth(keys));
    builder.set_host(Hosts {
        domain: config.domain.clone(),
    });
    let service = CloseAfterBodilessExpect(builder.build());
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
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    stream.set_nodelay(true).ok();
                    let service = service.clone();
                    let mut stop = stop.clone();
                    conns.spawn(async move {
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
}

/// The protocol layer's service, closing the connection after answering a request that
/// carries `Expect: 100-continue` but no body.
///
/// hyper answers such a request without a `100 Continue` (RFC 9110 allows it: there is no
/// body to wait for). botocore (boto3, the aws CLI) sends that expectation on every upload,
/// empty ones included, and then parses the *next* response on the same connection against
/// the stale status line, losing its headers (boto/botocore#3755): `aws s3 sync` of a tree
/// with empty files failed with "upload failed: ... 'ETag'" when an UploadPart followed an
/// empty PUT on one connection. A fresh connection resets botocore's state.
#[derive(Clone)]
struct CloseAfterBodilessExpect(S3Service);

impl Service<hyper::Request<Incoming>> for CloseAfterBodilessExpect {
    type Response = <S3Service as Service<hyper::Request<Incoming>>>::Response;
    type Error = <S3Service as Service<hyper::Request<Incoming>>>::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        let close = req.body().is_end_stream()
            && req
                .headers()
                .get(hyper::header::EXPECT)
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        let response = Service::call(&self.0, req);
        Box::pin(async move {
            let mut response = response.await?;
            if close {
                response.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok(response)
        })
    }
}

/// The key ring as the protocol layer's authenticator.
struct KeyRingAuth(Arc<KeyRing>);

#[async_trait::async_trait]
impl s3s::auth::S3Auth for KeyRingAuth {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<s3s::auth::SecretKey> {
        self.0.get_secret_key(access_key).await
    }
}
