//! Pool requests: create (defaults fitted to the cluster, refused when it cannot place the
//! pool), list, remove (never a pool the serving process uses itself).

use crate::protocol::{Request, Response};
use crate::server::ServeContext;
use basalt_client::{ClientError, Cluster};
use basalt_proto::PoolId;
use std::sync::Arc;
use std::time::Duration;

/// Run a pool request; other requests are refused as invalid.
pub(crate) async fn pool_request(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
) -> Response {
    let result = match req {
        Request::PoolCreate { pool, wait_ms } => {
            let mut maps = cluster.map_watch();
            let wait = wait_ms.map(Duration::from_millis);
            basalt_client::create_pool_visible(cluster.meta().as_ref(), &pool, &mut maps, wait)
                .await
                .map(Response::pool)
        }
        Request::PoolSet {
            name,
            key,
            value,
            allow_unplaceable,
            wait_ms,
        } => {
            let setting = match basalt_client::pool_change::PoolSetting::parse(&key, &value) {
                Ok(s) => s,
                Err(e) => return Response::failed(e),
            };
            let mut maps = cluster.map_watch();
            let wait = wait_ms.map(Duration::from_millis);
            basalt_client::pool_change::set_pool(
                cluster.meta().as_ref(),
                &name,
                &setting,
                allow_unplaceable,
                &mut maps,
                wait,
                &mut |_, _| {},
            )
            .await
            .map(Response::pool)
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
                .map(Response::pool)
        }
        Request::PoolLs => basalt_client::pools::list_pools(cluster.meta().as_ref())
            .await
            .map(|pools| Response {
                ok: true,
                pools: Some(pools),
                ..Response::default()
            }),
        _ => return Response::error("not a pool request".into()),
    };
    result.unwrap_or_else(Response::failed)
}

/// The id of pool `name`. A pool whose record exists but that is not in the map yet (just
/// created) is waited for, at most `wait`: the monitor publishes it with its next map.
pub async fn pool_in_map(
    cluster: &Cluster,
    name: &str,
    wait: Duration,
) -> Result<PoolId, ClientError> {
    if let Some(p) = cluster.map().pools.values().find(|p| p.name == name) {
        return Ok(p.id);
    }
    if !basalt_client::pools::pool_recorded(cluster.meta().as_ref(), name).await? {
        return Err(ClientError::NoSuchPool { name: name.into() });
    }
    let pool = basalt_client::wait_for_pool(&mut cluster.map_watch(), name, wait).await?;
    Ok(pool.id)
}
