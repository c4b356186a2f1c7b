//! The server side: accepting connections on the control socket, reading requests,
//! streaming progress, and dispatching each request to its handler.

use crate::protocol::{ProgressLine, Request, Response};
use basalt_client::Cluster;
use basalt_metrics::frontend::FrontendStats;
use basalt_proto::PoolId;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Shortest time between two progress lines of one request.
pub const PROGRESS_EVERY_MS: u64 = 200;

/// Longest request line accepted (bytes); longer lines close the connection.
const MAX_REQUEST_BYTES: usize = 64 << 10;

/// What requests are served with: the pool new volumes and images go to, and the NBD
/// unix socket of this process's gateway (None when there is none: the caller serves
/// the import itself).
#[derive(Clone, Debug)]
pub struct ServeContext {
    pub pool: PoolId,
    pub nbd_socket: Option<std::path::PathBuf>,
    /// The key sealing S3 secrets, when this process serves S3 (key requests need it).
    pub s3_master: Option<basalt_s3::MasterKey>,
    /// This process's S3 gateway (`http://ADDR`) and the credentials file of its admin
    /// key: objvols over this cluster's own buckets use them by default.
    pub s3_endpoint: Option<String>,
    pub s3_credentials: Option<std::path::PathBuf>,
    /// Pools this process itself uses (its default pool, its S3 index pool): never
    /// removed through it.
    pub reserved_pools: Vec<PoolId>,
    /// The counters of this process's frontends (NBD, NVMe/TCP), read by `iostat`; empty
    /// when it serves none or counts nothing (--metrics-listen off).
    pub frontends: Vec<Arc<FrontendStats>>,
}

impl ServeContext {
    /// The context of requests run by a tool on a cluster it opened itself: new things go
    /// to `pool`, and nothing of a serving process is at hand.
    pub fn tool(pool: PoolId) -> Self {
        Self {
            pool,
            nbd_socket: None,
            s3_master: None,
            s3_endpoint: None,
            s3_credentials: None,
            reserved_pools: Vec::new(),
            frontends: Vec::new(),
        }
    }
}

/// Serve the control API on `listener` until the task is dropped.
pub async fn serve(listener: UnixListener, cluster: Arc<Cluster>, ctx: ServeContext) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("control accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let cluster = cluster.clone();
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = serve_one(stream, cluster, &ctx).await {
                tracing::debug!("control connection ended: {e}");
            }
        });
    }
}

async fn serve_one(
    stream: UnixStream,
    cluster: Arc<Cluster>,
    ctx: &ServeContext,
) -> std::io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut rd = BufReader::new(rd);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut rd)
            .take(MAX_REQUEST_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        let response = if n > MAX_REQUEST_BYTES {
            Response::error(format!("request longer than {MAX_REQUEST_BYTES} bytes"))
        } else {
            match serde_json::from_slice::<Request>(&line) {
                Ok(req) => handle_streaming(&cluster, ctx, req, &mut wr).await?,
                Err(e) => Response::error(format!("malformed request: {e}")),
            }
        };
        let mut out = serde_json::to_vec(&response)?;
        out.push(b'\n');
        wr.write_all(&out).await?;
        if n > MAX_REQUEST_BYTES {
            return Ok(());
        }
    }
}

/// Run `req`, sending its progress lines to `wr` while it runs.
async fn handle_streaming(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
    wr: &mut tokio::net::unix::OwnedWriteHalf,
) -> std::io::Result<Response> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ProgressLine>();
    let throttle = Throttle::new(move |done, total| {
        let _ = tx.send(ProgressLine { done, total });
    });
    let work = handle(cluster, ctx, req, &throttle);
    tokio::pin!(work);
    loop {
        tokio::select! {
            resp = &mut work => return Ok(resp),
            Some(p) = rx.recv() => {
                let line = Response { ok: true, progress: Some(p), ..Response::default() };
                let mut out = serde_json::to_vec(&line)?;
                out.push(b'\n');
                wr.write_all(&out).await?;
            }
        }
    }
}

/// Passes on at most one progress report per [`PROGRESS_EVERY_MS`], and always the last.
pub struct Throttle<F> {
    report: F,
    last: std::sync::Mutex<Option<std::time::Instant>>,
}

impl<F: Fn(u64, u64) + Send + Sync> Throttle<F> {
    pub fn new(report: F) -> Self {
        Self {
            report,
            last: std::sync::Mutex::new(None),
        }
    }

    pub fn report(&self, done: u64, total: u64) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let due =
            last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(PROGRESS_EVERY_MS));
        if due || done == total {
            *last = Some(std::time::Instant::now());
            (self.report)(done, total);
        }
    }
}

/// Run `req` on `cluster`: the reply, successful or not (never an error of the transport).
pub async fn handle<F: Fn(u64, u64) + Send + Sync>(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
    progress: &Throttle<F>,
) -> Response {
    let progress = |done, total| progress.report(done, total);
    match req {
        Request::Create { .. }
        | Request::Ls
        | Request::Info { .. }
        | Request::Resize { .. }
        | Request::Rm { .. }
        | Request::Snapshot { .. }
        | Request::Clone { .. }
        | Request::Rollback { .. }
        | Request::SnapshotRm { .. }
        | Request::Lock { .. }
        | Request::Access { .. }
        | Request::Flatten { .. } => crate::volumes::volume_request(cluster, ctx, req, &progress)
            .await
            .unwrap_or_else(Response::failed),
        Request::ImageBegin { .. }
        | Request::ImageFinish { .. }
        | Request::ImageLs
        | Request::ImageInfo { .. }
        | Request::ImageRm { .. } => crate::images::image_request(cluster, ctx, req)
            .await
            .unwrap_or_else(Response::failed),
        Request::PoolCreate { .. }
        | Request::PoolLs
        | Request::PoolSet { .. }
        | Request::PoolRm { .. } => crate::pools::pool_request(cluster, ctx, req).await,
        Request::ObjvolCreate { .. }
        | Request::ObjvolRefresh { .. }
        | Request::ObjvolLs
        | Request::ObjvolInfo { .. }
        | Request::ObjvolRm { .. } => {
            crate::objvols::objvol_request(cluster, ctx, req, &progress).await
        }
        Request::S3KeyCreate { .. } | Request::S3KeyLs | Request::S3KeyRm { .. } => {
            crate::s3keys::s3_key_request(cluster.meta().as_ref(), ctx.s3_master.as_ref(), req)
                .await
        }
        Request::Status { .. } | Request::Scrub { .. } | Request::Iostat => {
            crate::reports::report_request(cluster, ctx, req, &progress).await
        }
        Request::Settings { put } => settings_request(cluster, put)
            .await
            .unwrap_or_else(Response::failed),
    }
}

/// `settings`: read the cluster settings, or replace them.
async fn settings_request(
    cluster: &Cluster,
    put: Option<basalt_meta::schema::ClusterSettings>,
) -> Result<Response, basalt_client::ClientError> {
    let meta = cluster.meta();
    let settings = match put {
        None => basalt_client::settings::load(meta.as_ref()).await?,
        Some(new) => {
            basalt_client::settings::update(meta.as_ref(), |s| {
                *s = new.clone();
                Ok(())
            })
            .await?
        }
    };
    Ok(Response {
        ok: true,
        settings: Some(settings),
        ..Response::default()
    })
}
