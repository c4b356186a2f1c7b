//! The control API of `basalt up`: one JSON request per line over a unix socket (mode 0600:
//! only its owner may manage the cluster), one JSON reply per line.
//!
//! It is deliberately small: volume management for the CLI. Requests are
//! `{"op":"create","name":N,"size":BYTES}`, `{"op":"ls"}`, `{"op":"info","name":N}`,
//! `{"op":"resize","name":N,"size":BYTES}`, `{"op":"rm","name":N}`, `{"op":"status"}`,
//! `{"op":"snapshot","name":N,"snapshot":S}`, `{"op":"clone","name":N,"snapshot":S,"new":M}`,
//! `{"op":"rollback","name":N,"snapshot":S}`, `{"op":"snapshot_rm","name":N,"snapshot":S}`,
//! `{"op":"flatten","name":N}`, `{"op":"s3_key_create","user":U}`, `{"op":"s3_key_ls"}`,
//! `{"op":"s3_key_rm","access_key":K}`, `{"op":"pool_create","pool":RECORD,"wait_ms":MS}`,
//! `{"op":"pool_ls"}`; replies are `{"ok":true,...}` or
//! `{"ok":false,"error":MESSAGE,"kind":KIND}` (KIND: not_found, exists, conflict, invalid,
//! timeout, other; absent from older servers). Long operations first send progress lines,
//! `{"ok":true,"progress":{"done":D,"total":T}}`, at most every PROGRESS_EVERY_MS.

use anyhow::Context;
use basalt_client::{Cluster, VolumeInfo};
use basalt_proto::PoolId;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Shortest time between two progress lines of one request.
const PROGRESS_EVERY_MS: u64 = 200;

/// Longest request line accepted (bytes); longer lines close the connection.
const MAX_REQUEST_BYTES: usize = 64 << 10;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Create {
        name: String,
        /// Ignored with `from_image` (the clone has the image's size).
        #[serde(default)]
        size: u64,
        /// The pool, by name (default: the server's pool).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// Make the volume as a clone of this image.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_image: Option<String>,
    },
    Ls,
    Info {
        name: String,
    },
    Resize {
        name: String,
        size: u64,
        /// A smaller size is refused unless this is set (the data past it is discarded).
        #[serde(default)]
        allow_shrink: bool,
    },
    Rm {
        name: String,
        /// Remove it even while gateways have it open (their I/O then fails).
        #[serde(default)]
        force: bool,
    },
    /// Take snapshot `snapshot` of volume `name`; replies with the volume.
    Snapshot {
        name: String,
        snapshot: String,
    },
    /// Clone `name@snapshot` into the new volume `new`; replies with the new volume.
    Clone {
        name: String,
        snapshot: String,
        new: String,
    },
    /// Roll volume `name` back to its snapshot `snapshot`; replies with the volume.
    Rollback {
        name: String,
        snapshot: String,
    },
    /// Remove snapshot `name@snapshot` (copying what later layers still read into them).
    #[serde(rename = "snapshot_rm")]
    SnapshotRm {
        name: String,
        snapshot: String,
    },
    /// Copy into clone `name` everything it reads from its parent, then drop the link.
    Flatten {
        name: String,
    },
    /// Start importing image `name`; replies with the image and, when this process serves
    /// NBD, the URI to write its data to.
    #[serde(rename = "image_begin")]
    ImageBegin {
        name: String,
        size: u64,
        source: String,
    },
    /// End an import: durable, frozen, ready.
    #[serde(rename = "image_finish")]
    ImageFinish {
        name: String,
    },
    #[serde(rename = "image_ls")]
    ImageLs,
    #[serde(rename = "image_info")]
    ImageInfo {
        name: String,
    },
    /// Remove an image (refused while volumes are clones of it); also aborts an import.
    #[serde(rename = "image_rm")]
    ImageRm {
        name: String,
    },
    /// Build objvol `name` over `bucket`/`prefix` of `endpoint` (default: this cluster's
    /// S3 gateway) read with the key in `credentials` (default: this cluster's own).
    #[serde(rename = "objvol_create")]
    ObjvolCreate {
        name: String,
        bucket: String,
        #[serde(default)]
        prefix: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        credentials: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ca_file: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        region: Option<String>,
    },
    /// Rebuild objvol `name`'s index from its bucket as it is now.
    #[serde(rename = "objvol_refresh")]
    ObjvolRefresh {
        name: String,
    },
    #[serde(rename = "objvol_ls")]
    ObjvolLs,
    #[serde(rename = "objvol_info")]
    ObjvolInfo {
        name: String,
    },
    #[serde(rename = "objvol_rm")]
    ObjvolRm {
        name: String,
    },
    /// Create a pool (its `id` is allocated); with `wait_ms`, reply once the pool is in the
    /// cluster map, or with a `timeout` error after that long.
    #[serde(rename = "pool_create")]
    PoolCreate {
        pool: basalt_meta::schema::PoolRecord,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Every pool record.
    #[serde(rename = "pool_ls")]
    PoolLs,
    /// Remove an empty pool; with `wait_ms`, reply once it is out of the cluster map.
    #[serde(rename = "pool_rm")]
    PoolRm {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// `interval_ms` > 0 samples counters twice that far apart to report rates.
    Status {
        #[serde(default)]
        interval_ms: u64,
    },
    /// Scrub every PG (of `pool` when given): compare every copy or chunk, repair.
    Scrub {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
    },
    /// A new S3 access key for `user`; the reply carries its secret, once.
    #[serde(rename = "s3_key_create")]
    S3KeyCreate {
        user: String,
    },
    /// Every S3 access key (never a secret).
    #[serde(rename = "s3_key_ls")]
    S3KeyLs,
    /// Remove an S3 access key.
    #[serde(rename = "s3_key_rm")]
    S3KeyRm {
        access_key: String,
    },
}

/// An S3 access key as the control API shows it: the secret only in the reply that
/// created it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct S3Key {
    pub access_key: String,
    pub user: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl S3Key {
    fn of(record: basalt_s3::keys::KeyRecord, secret: Option<String>) -> Self {
        Self {
            access_key: record.access_key,
            user: record.user,
            created: record.created,
            secret,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kind of failure `error` is (the CLI's exit code follows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<basalt_client::ErrorKind>,
    /// `pool_create`: the new pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<basalt_meta::schema::PoolRecord>,
    /// `pool_ls`: every pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<basalt_meta::schema::PoolRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<VolumeInfo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<crate::status::StatusReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrub: Option<basalt_client::ScrubReport>,
    /// `info`: what each of the volume's layers holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<basalt_client::VolumeUsage>,
    /// `ls`: the same for each volume, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usages: Option<Vec<basalt_client::VolumeUsage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<basalt_client::ImageInfo>,
    /// `image_ls`: bytes each image holds (one copy), in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<basalt_client::ImageInfo>>,
    /// Where to write an image's data (image_begin, when this process serves NBD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbd_uri: Option<String>,
    /// `s3_key_create`: the new key, with its secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_key: Option<S3Key>,
    /// `s3_key_ls`: every key, without secrets, by access key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_keys: Option<Vec<S3Key>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objvol: Option<basalt_objvol::ObjvolInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objvols: Option<Vec<basalt_objvol::ObjvolInfo>>,
    /// A progress line of a long operation (not its final reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressLine>,
}

/// How far a long operation got.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ProgressLine {
    pub done: u64,
    pub total: u64,
}

/// Serve the control API until the task is dropped.
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
}

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
) -> anyhow::Result<()> {
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
) -> anyhow::Result<Response> {
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

/// Passes on at most one progress report per PROGRESS_EVERY_MS, and always the last.
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
        let mut last = self.last.lock().expect("progress lock");
        let due =
            last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_millis(PROGRESS_EVERY_MS));
        if due || done == total {
            *last = Some(std::time::Instant::now());
            (self.report)(done, total);
        }
    }
}

impl Response {
    fn error(message: String) -> Self {
        Self {
            ok: false,
            error: Some(message),
            ..Self::default()
        }
    }

    /// The reply to a request that failed with `e`: its message and kind.
    fn failed(e: basalt_client::ClientError) -> Self {
        Self {
            kind: Some(e.kind()),
            ..Self::error(e.to_string())
        }
    }

    /// The error of a failed reply, with its kind when the server said it.
    pub fn into_error(self) -> anyhow::Error {
        let message = self.error.unwrap_or_else(|| "unknown error".into());
        match self.kind {
            Some(kind) => crate::exit::failure(kind, message),
            None => anyhow::anyhow!(message),
        }
    }

    fn image(image: basalt_client::ImageInfo) -> Self {
        Self {
            ok: true,
            image: Some(image),
            ..Self::default()
        }
    }

    fn volume(v: VolumeInfo) -> Self {
        Self {
            ok: true,
            volume: Some(v),
            ..Self::default()
        }
    }
}

pub(crate) async fn handle<F: Fn(u64, u64) + Send + Sync>(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
    progress: &Throttle<F>,
) -> Response {
    let pool = ctx.pool;
    let progress = |done, total| progress.report(done, total);
    let result = match req {
        Request::Create {
            name,
            from_image: Some(image),
            ..
        } => cluster
            .clone_image(&image, &name)
            .await
            .map(Response::volume),
        Request::Create {
            name,
            size,
            pool: Some(pool),
            ..
        } => match pool_in_map(cluster, &pool, Duration::from_millis(NEW_POOL_WAIT_MS)).await {
            Ok(id) => cluster.create_volume(&name, size, id).await,
            Err(e) => Err(e),
        }
        .map(Response::volume),
        Request::Create { name, size, .. } => cluster
            .create_volume(&name, size, pool)
            .await
            .map(Response::volume),
        Request::PoolCreate { pool, wait_ms } => {
            let mut maps = cluster.map_watch();
            let created = match basalt_client::create_pool(cluster.meta().as_ref(), pool).await {
                Ok(r) => match wait_ms {
                    Some(ms) => {
                        let wait = Duration::from_millis(ms);
                        basalt_client::wait_for_pool(&mut maps, &r.name, wait)
                            .await
                            .map(|_| r)
                    }
                    None => Ok(r),
                },
                Err(e) => Err(e),
            };
            created.map(|r| Response {
                ok: true,
                pool: Some(r),
                ..Response::default()
            })
        }
        Request::PoolRm { name, wait_ms } => {
            let reserved = cluster
                .map()
                .pools
                .values()
                .any(|p| p.name == name && ctx.reserved_pools.contains(&p.id));
            if reserved {
                return Response::error(format!(
                    "pool \"{name}\" is this cluster's own (new volumes, images or S3 \
                     indexes go there): it cannot be removed while `basalt up` runs"
                ));
            }
            let mut maps = cluster.map_watch();
            let wait = wait_ms.map(Duration::from_millis);
            basalt_client::remove_pool(cluster.meta().as_ref(), &name, &mut maps, wait)
                .await
                .map(|r| Response {
                    ok: true,
                    pool: Some(r),
                    ..Response::default()
                })
        }
        Request::PoolLs => {
            return match crate::admin::list_pools(cluster.meta().as_ref()).await {
                Ok(pools) => Response {
                    ok: true,
                    pools: Some(pools),
                    ..Response::default()
                },
                Err(e) => Response::error(format!("{e:#}")),
            }
        }
        Request::ImageBegin { name, size, source } => cluster
            .begin_image(&name, size, pool, &source)
            .await
            .map(|image| Response {
                ok: true,
                nbd_uri: ctx.nbd_socket.as_ref().map(|socket| {
                    format!(
                        "nbd+unix:///image:{}?socket={}",
                        image.name,
                        socket.display()
                    )
                }),
                image: Some(image),
                ..Response::default()
            }),
        Request::ImageFinish { name } => cluster.finish_image(&name).await.map(Response::image),
        Request::ImageInfo { name } => cluster.image_info(&name).await.map(Response::image),
        Request::ImageLs => match cluster.list_images().await {
            Ok(images) => {
                let inodes: Vec<_> = images.iter().map(|i| i.inode).collect();
                cluster.layer_usage(&inodes).await.map(|u| Response {
                    ok: true,
                    images: Some(images),
                    image_bytes: Some(u.iter().map(|u| u.bytes).collect()),
                    ..Response::default()
                })
            }
            Err(e) => Err(e),
        },
        Request::ImageRm { name } => cluster.remove_image(&name).await.map(|_| Response {
            ok: true,
            ..Response::default()
        }),
        Request::Ls => match cluster.list_volumes().await {
            Ok(v) => cluster.volume_usage(&v).await.map(|u| Response {
                ok: true,
                volumes: Some(v),
                usages: Some(u),
                ..Response::default()
            }),
            Err(e) => Err(e),
        },
        Request::Info { name } => match cluster.volume_info(&name).await {
            Ok(v) => cluster
                .volume_usage(std::slice::from_ref(&v))
                .await
                .map(|mut u| Response {
                    usage: u.pop(),
                    ..Response::volume(v)
                }),
            Err(e) => Err(e),
        },
        Request::Resize {
            name,
            size,
            allow_shrink,
        } => cluster
            .resize_volume(&name, size, allow_shrink)
            .await
            .map(Response::volume),
        Request::Rm { name, force } => {
            cluster
                .remove_volume_unless_open(&name, force)
                .await
                .map(|_| Response {
                    ok: true,
                    ..Response::default()
                })
        }
        Request::Snapshot { name, snapshot } => {
            match cluster.snapshot_volume(&name, &snapshot).await {
                Ok(_) => cluster.volume_info(&name).await.map(Response::volume),
                Err(e) => Err(e),
            }
        }
        Request::Clone {
            name,
            snapshot,
            new,
        } => cluster
            .clone_snapshot(&name, &snapshot, &new)
            .await
            .map(Response::volume),
        Request::Rollback { name, snapshot } => cluster
            .rollback_volume(&name, &snapshot)
            .await
            .map(Response::volume),
        Request::SnapshotRm { name, snapshot } => cluster
            .remove_snapshot(&name, &snapshot, &progress)
            .await
            .map(|_| Response {
                ok: true,
                ..Response::default()
            }),
        Request::Flatten { name } => cluster
            .flatten_volume(&name, &progress)
            .await
            .map(Response::volume),
        Request::Scrub { pool } => {
            let pool = match pool {
                None => None,
                Some(name) => match cluster.map().pools.values().find(|p| p.name == name) {
                    Some(p) => Some(p.id),
                    None => return Response::error(format!("pool \"{name}\" does not exist")),
                },
            };
            cluster.scrub(pool, &progress).await.map(|r| Response {
                ok: true,
                scrub: Some(r),
                ..Response::default()
            })
        }
        Request::ObjvolCreate { .. }
        | Request::ObjvolRefresh { .. }
        | Request::ObjvolLs
        | Request::ObjvolInfo { .. }
        | Request::ObjvolRm { .. } => return objvol_request(cluster, ctx, req, &progress).await,
        Request::S3KeyCreate { .. } | Request::S3KeyLs | Request::S3KeyRm { .. } => {
            return s3_key_request(cluster.meta().as_ref(), ctx.s3_master.as_ref(), req).await
        }
        Request::Status { interval_ms } => {
            crate::status::gather_with_rates(cluster, interval_ms.min(60_000))
                .await
                .map(|r| Response {
                    ok: true,
                    status: Some(r),
                    ..Response::default()
                })
        }
    };
    result.unwrap_or_else(Response::failed)
}

/// How long `create` through the control API waits for a pool created a moment ago.
const NEW_POOL_WAIT_MS: u64 = 10_000;

/// The id of pool `name`. A pool whose record exists but that is not in the map yet (just
/// created) is waited for, at most `wait`: the monitor publishes it with its next map.
pub(crate) async fn pool_in_map(
    cluster: &Cluster,
    name: &str,
    wait: std::time::Duration,
) -> Result<PoolId, basalt_client::ClientError> {
    if let Some(p) = cluster.map().pools.values().find(|p| p.name == name) {
        return Ok(p.id);
    }
    if !basalt_client::pools::pool_recorded(cluster.meta().as_ref(), name).await? {
        return Err(basalt_client::ClientError::NoSuchPool { name: name.into() });
    }
    let pool = basalt_client::wait_for_pool(&mut cluster.map_watch(), name, wait).await?;
    Ok(pool.id)
}

/// An objvol request: builds run here, reading the bucket with the request's credentials
/// or this process's own.
async fn objvol_request(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Response {
    use basalt_objvol::{catalog, s3::Credentials, Source};
    let credentials = |named: &Option<String>| -> Result<Credentials, String> {
        let path = named
            .clone()
            .map(std::path::PathBuf::from)
            .or_else(|| ctx.s3_credentials.clone())
            .ok_or(
                "give the bucket's credentials (--credentials FILE): this cluster serves no S3",
            )?;
        Credentials::load(&path).map_err(|e| e.to_string())
    };
    let tmp = std::env::temp_dir();
    let one = |o: basalt_objvol::ObjvolInfo| Response {
        ok: true,
        objvol: Some(o),
        ..Response::default()
    };
    let result: Result<Response, String> = match req {
        Request::ObjvolCreate {
            name,
            bucket,
            prefix,
            endpoint,
            credentials: named,
            ca_file,
            region,
        } => {
            let Some(endpoint) = endpoint.or_else(|| ctx.s3_endpoint.clone()) else {
                return Response::error(
                    "give the S3 endpoint (--endpoint http://HOST:PORT): this cluster serves no S3"
                        .into(),
                );
            };
            match credentials(&named) {
                Err(e) => Err(e),
                Ok(c) => {
                    let source = Source {
                        endpoint,
                        bucket,
                        prefix,
                        credentials: named,
                        ca_file,
                        region,
                    };
                    // A typed error keeps its kind (an existing name exits 4).
                    return match catalog::create(
                        cluster, &name, source, &c, ctx.pool, &tmp, progress,
                    )
                    .await
                    {
                        Ok(o) => one(o),
                        Err(catalog::ObjvolError::Client(e)) => Response::failed(e),
                        Err(e) => Response::error(e.to_string()),
                    };
                }
            }
        }
        Request::ObjvolRefresh { name } => match catalog::info(cluster, &name).await {
            Err(e) => Err(e.to_string()),
            Ok(old) => match credentials(&old.source.credentials) {
                Err(e) => Err(e),
                Ok(c) => catalog::refresh(cluster, &name, &c, &tmp, progress)
                    .await
                    .map(one)
                    .map_err(|e| e.to_string()),
            },
        },
        Request::ObjvolLs => catalog::list(cluster)
            .await
            .map(|all| Response {
                ok: true,
                objvols: Some(all),
                ..Response::default()
            })
            .map_err(|e| e.to_string()),
        // Typed errors keep their kind (the CLI's exit code follows it).
        Request::ObjvolInfo { name } => {
            return catalog::info(cluster, &name)
                .await
                .map_or_else(Response::failed, one)
        }
        Request::ObjvolRm { name } => {
            return catalog::remove(cluster, &name)
                .await
                .map_or_else(Response::failed, |()| Response {
                    ok: true,
                    ..Response::default()
                })
        }
        _ => Err("not an objvol request".into()),
    };
    result.unwrap_or_else(Response::error)
}

/// An S3 access key request on the keys in `meta`; new keys are sealed with `master` (None:
/// this process serves no S3, and makes no keys).
pub(crate) async fn s3_key_request(
    meta: &dyn basalt_meta::MetaStore,
    master: Option<&basalt_s3::MasterKey>,
    req: Request,
) -> Response {
    use basalt_s3::keys;
    let result = match req {
        Request::S3KeyCreate { user } => {
            let Some(master) = master else {
                return Response::error(
                    "this cluster serves no S3 (started with --s3-listen off): no keys to make"
                        .into(),
                );
            };
            keys::create_key(meta, master, &user)
                .await
                .map(|(record, secret)| Response {
                    ok: true,
                    s3_key: Some(S3Key::of(record, Some(secret))),
                    ..Response::default()
                })
        }
        Request::S3KeyLs => keys::list_keys(meta).await.map(|mut all| {
            all.sort_by(|a, b| a.access_key.cmp(&b.access_key));
            Response {
                ok: true,
                s3_keys: Some(all.into_iter().map(|k| S3Key::of(k, None)).collect()),
                ..Response::default()
            }
        }),
        Request::S3KeyRm { access_key } => {
            keys::remove_key(meta, &access_key)
                .await
                .map(|()| Response {
                    ok: true,
                    ..Response::default()
                })
        }
        _ => return Response::error("not an S3 key request".into()),
    };
    result.unwrap_or_else(|e| {
        use basalt_client::ErrorKind;
        // The kind decides the CLI's exit code: 3 for a missing key, 4 for a taken one.
        let kind = match &e {
            keys::KeyError::NoSuchKey(_) => ErrorKind::NotFound,
            keys::KeyError::KeyExists(_) => ErrorKind::Exists,
            keys::KeyError::BadUser(_) => ErrorKind::Invalid,
            _ => ErrorKind::Other,
        };
        Response {
            kind: Some(kind),
            ..Response::error(e.to_string())
        }
    })
}

/// Send one request to the control socket at `addr` and return its successful response.
pub async fn call(addr: &Path, req: &Request) -> anyhow::Result<Response> {
    call_with_progress(addr, req, |_, _| {}).await
}

/// Like [`call`], passing the operation's progress lines to `progress(done, total)`.
pub async fn call_with_progress(
    addr: &Path,
    req: &Request,
    progress: impl Fn(u64, u64),
) -> anyhow::Result<Response> {
    let stream = UnixStream::connect(addr).await.with_context(|| {
        format!(
            "connect to the control socket {} (is `basalt up` running? its banner names the \
             socket; --control or BASALT_CONTROL choose another)",
            addr.display()
        )
    })?;
    let (rd, mut wr) = stream.into_split();
    let mut out = serde_json::to_vec(req)?;
    out.push(b'\n');
    wr.write_all(&out).await?;
    let mut rd = BufReader::new(rd);
    // Bound: the server sends a bounded number of progress lines, then the reply.
    loop {
        let mut line = String::new();
        let n = rd
            .read_line(&mut line)
            .await
            .context("read the control API's reply")?;
        if n == 0 {
            anyhow::bail!("the control API closed the connection without a reply");
        }
        let resp: Response = serde_json::from_str(&line)
            .with_context(|| format!("malformed reply from the control API: {line:?}"))?;
        if let Some(p) = resp.progress {
            progress(p.done, p.total);
            continue;
        }
        if !resp.ok {
            return Err(resp.into_error());
        }
        return Ok(resp);
    }
}
