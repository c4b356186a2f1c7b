//! Volume requests: create (empty, in a pool, or as a clone of an image), list, inspect,
//! resize, remove, and the snapshot family (snapshot, clone, rollback, remove, flatten).

use crate::protocol::{Request, Response};
use crate::server::ServeContext;
use basalt_client::{ClientError, Cluster};
use std::sync::Arc;
use std::time::Duration;

/// How long `create` through the control API waits for a pool created a moment ago.
const NEW_POOL_WAIT_MS: u64 = 10_000;

/// Run a volume request; other requests are refused as invalid.
pub(crate) async fn volume_request(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<Response, ClientError> {
    match req {
        Request::Create {
            name,
            from_image: Some(image),
            ..
        } => cluster
            .clone_image(&image, &name)
            .await
            .map(Response::volume),
        Request::Create {
            name, size, pool, ..
        } => {
            let pool = match pool {
                Some(pool) => {
                    let wait = Duration::from_millis(NEW_POOL_WAIT_MS);
                    crate::pools::pool_in_map(cluster, &pool, wait).await?
                }
                None => ctx.pool,
            };
            cluster
                .create_volume(&name, size, pool)
                .await
                .map(Response::volume)
        }
        Request::Ls => {
            let volumes = cluster.list_volumes().await?;
            let usages = cluster.volume_usage(&volumes).await?;
            Ok(Response {
                ok: true,
                volumes: Some(volumes),
                usages: Some(usages),
                ..Response::default()
            })
        }
        Request::Info { name } => {
            let v = cluster.volume_info(&name).await?;
            let mut usage = cluster.volume_usage(std::slice::from_ref(&v)).await?;
            Ok(Response {
                usage: usage.pop(),
                ..Response::volume(v)
            })
        }
        Request::Resize {
            name,
            size,
            allow_shrink,
        } => cluster
            .resize_volume(&name, size, allow_shrink)
            .await
            .map(Response::volume),
        Request::Rm { name, force } => cluster
            .remove_volume_unless_open(&name, force)
            .await
            .map(|_| Response::done()),
        other => snapshot_request(cluster, other, progress).await,
    }
}

/// Run a request of the snapshot family.
async fn snapshot_request(
    cluster: &Arc<Cluster>,
    req: Request,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<Response, ClientError> {
    match req {
        Request::Snapshot { name, snapshot } => {
            cluster.snapshot_volume(&name, &snapshot).await?;
            cluster.volume_info(&name).await.map(Response::volume)
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
            .remove_snapshot(&name, &snapshot, progress)
            .await
            .map(|_| Response::done()),
        Request::Flatten { name } => cluster
            .flatten_volume(&name, progress)
            .await
            .map(Response::volume),
        Request::Lock { name, action, secs } => lock_request(cluster, &name, action, secs).await,
        Request::Access { name, allow, deny } => {
            let access = if allow.is_empty() && deny.is_empty() {
                cluster.volume_info(&name).await?;
                basalt_client::access::get(cluster.meta().as_ref(), &name).await?
            } else {
                basalt_client::access::change(cluster, &name, &allow, &deny).await?
            };
            Ok(Response {
                ok: true,
                access: Some(access),
                ..Response::default()
            })
        }
        _ => Err(ClientError::Invalid {
            reason: "not a volume request".into(),
        }),
    }
}

/// Show, hand over or break the writer lock of volume `name`.
async fn lock_request(
    cluster: &Arc<Cluster>,
    name: &str,
    action: crate::protocol::LockAction,
    secs: u64,
) -> Result<Response, ClientError> {
    use crate::protocol::{LockAction, LockReport};
    cluster.volume_info(name).await?;
    let meta = cluster.meta().as_ref();
    let broken = match action {
        LockAction::Show => Vec::new(),
        LockAction::Handover => {
            basalt_client::locks::handover(meta, name, secs).await?;
            Vec::new()
        }
        LockAction::Break => basalt_client::locks::break_lock(cluster, name).await?,
    };
    let (record, alive) = basalt_client::locks::show(meta, name).await?;
    Ok(Response {
        ok: true,
        lock: Some(LockReport {
            record,
            alive,
            broken,
        }),
        ..Response::default()
    })
}
