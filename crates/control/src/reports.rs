//! Requests about the whole cluster: its status, a scrub of its PGs, and the I/O counters
//! of the volumes this process serves.

use crate::protocol::{Request, Response, VolumeIo};
use crate::server::ServeContext;
use basalt_client::Cluster;
use basalt_metrics::frontend::{FrontendStats, Op};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Longest sampling interval of a status request.
const STATUS_INTERVAL_MAX_MS: u64 = 60_000;

/// Run a status, scrub or iostat request.
pub(crate) async fn report_request(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Response {
    let result = match req {
        Request::Status { interval_ms } => {
            let interval_ms = interval_ms.min(STATUS_INTERVAL_MAX_MS);
            basalt_client::status::gather_with_rates(cluster, interval_ms)
                .await
                .map(|r| Response {
                    ok: true,
                    status: Some(r),
                    ..Response::default()
                })
        }
        Request::Scrub { pool } => {
            let pool = match pool {
                None => None,
                Some(name) => match cluster.map().pools.values().find(|p| p.name == name) {
                    Some(p) => Some(p.id),
                    None => return Response::error(format!("pool \"{name}\" does not exist")),
                },
            };
            cluster.scrub(pool, progress).await.map(|r| Response {
                ok: true,
                scrub: Some(r),
                ..Response::default()
            })
        }
        Request::Iostat => return iostat(cluster, ctx).await,
        _ => return Response::error("not a report request".into()),
    };
    result.unwrap_or_else(Response::failed)
}

/// Every volume's counters over this process's frontends (volumes never opened count 0).
async fn iostat(cluster: &Arc<Cluster>, ctx: &ServeContext) -> Response {
    if ctx.frontends.is_empty() {
        return Response::error(
            "this process counts no volume I/O (it serves no NBD or NVMe/TCP, or runs with \
             --metrics-listen off)"
                .into(),
        );
    }
    let volumes = match cluster.list_volumes().await {
        Ok(v) => v,
        Err(e) => return Response::failed(e),
    };
    let mut by_name: BTreeMap<String, VolumeIo> = BTreeMap::new();
    for v in volumes {
        let mut io = VolumeIo {
            volume: v.name.clone(),
            ..VolumeIo::default()
        };
        for stats in &ctx.frontends {
            add_volume_io(&mut io, stats);
        }
        by_name.insert(v.name, io);
    }
    Response {
        ok: true,
        iostat: Some(by_name.into_values().collect()),
        ..Response::default()
    }
}

/// Add what `stats` counted of `io.volume` to `io`.
fn add_volume_io(io: &mut VolumeIo, stats: &FrontendStats) {
    let Some(ops) = stats.volume(&io.volume) else {
        return;
    };
    let (read, write) = (ops.op(Op::Read), ops.op(Op::Write));
    io.reads += read.requests.load(Ordering::Relaxed);
    io.writes += write.requests.load(Ordering::Relaxed);
    io.read_bytes += read.bytes.load(Ordering::Relaxed);
    io.write_bytes += write.bytes.load(Ordering::Relaxed);
    io.read_seconds += read.latency.sum().as_secs_f64();
    io.write_seconds += write.latency.sum().as_secs_f64();
}
