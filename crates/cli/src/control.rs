//! The control API of `basalt up`: one JSON request per line over TCP, one JSON reply per line.
//!
//! It is deliberately small: volume management for the CLI. Requests are
//! `{"op":"create","name":N,"size":BYTES}`, `{"op":"ls"}`, `{"op":"info","name":N}`,
//! `{"op":"resize","name":N,"size":BYTES}`, `{"op":"rm","name":N}`, `{"op":"status"}`,
//! `{"op":"snapshot","name":N,"snapshot":S}`, `{"op":"clone","name":N,"snapshot":S,"new":M}`;
//! replies are `{"ok":true,...}` or `{"ok":false,"error":MESSAGE}`.

use anyhow::Context;
use basalt_client::{Cluster, VolumeInfo};
use basalt_proto::PoolId;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Longest request line accepted (bytes); longer lines close the connection.
const MAX_REQUEST_BYTES: usize = 64 << 10;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Create {
        name: String,
        size: u64,
    },
    Ls,
    Info {
        name: String,
    },
    Resize {
        name: String,
        size: u64,
    },
    Rm {
        name: String,
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
    /// `interval_ms` > 0 samples counters twice that far apart to report rates.
    Status {
        #[serde(default)]
        interval_ms: u64,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<VolumeInfo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<crate::status::StatusReport>,
}

/// Serve the control API until the task is dropped.
pub async fn serve(listener: TcpListener, cluster: Arc<Cluster>, pool: PoolId) {
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
        tokio::spawn(async move {
            if let Err(e) = serve_one(stream, cluster, pool).await {
                tracing::debug!("control connection ended: {e}");
            }
        });
    }
}

async fn serve_one(stream: TcpStream, cluster: Arc<Cluster>, pool: PoolId) -> anyhow::Result<()> {
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
                Ok(req) => handle(&cluster, pool, req).await,
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

impl Response {
    fn error(message: String) -> Self {
        Self {
            ok: false,
            error: Some(message),
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

pub(crate) async fn handle(cluster: &Arc<Cluster>, pool: PoolId, req: Request) -> Response {
    let result = match req {
        Request::Create { name, size } => cluster
            .create_volume(&name, size, pool)
            .await
            .map(Response::volume),
        Request::Ls => cluster.list_volumes().await.map(|v| Response {
            ok: true,
            volumes: Some(v),
            ..Response::default()
        }),
        Request::Info { name } => cluster.volume_info(&name).await.map(Response::volume),
        Request::Resize { name, size } => cluster
            .resize_volume(&name, size)
            .await
            .map(Response::volume),
        Request::Rm { name } => cluster.remove_volume(&name).await.map(|_| Response {
            ok: true,
            ..Response::default()
        }),
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
    result.unwrap_or_else(|e| Response::error(e.to_string()))
}

/// Send one request to the control API at `addr` and return its successful response.
pub async fn call(addr: SocketAddr, req: &Request) -> anyhow::Result<Response> {
    let stream = TcpStream::connect(addr).await.with_context(|| {
        format!("connect to the control API at {addr} (is `basalt up` running?)")
    })?;
    let (rd, mut wr) = stream.into_split();
    let mut out = serde_json::to_vec(req)?;
    out.push(b'\n');
    wr.write_all(&out).await?;
    let mut line = String::new();
    BufReader::new(rd)
        .read_line(&mut line)
        .await
        .context("read the control API's reply")?;
    let resp: Response = serde_json::from_str(&line)
        .with_context(|| format!("malformed reply from the control API: {line:?}"))?;
    if !resp.ok {
        anyhow::bail!("{}", resp.error.unwrap_or_else(|| "unknown error".into()));
    }
    Ok(resp)
}
