//! Requests run in this process on a cluster opened from its metadata (a multi-host
//! cluster's tools): the same handlers the control socket's server runs.

use crate::pools::pool_in_map;
use crate::protocol::{Request, Response};
use crate::server::{handle, ServeContext, Throttle};
use crate::ControlError;
use basalt_client::{ClientError, Cluster};
use std::sync::Arc;
use std::time::Duration;

/// Run `req` on `cluster`, new volumes, images and objvols going to pool `pool` (one
/// created a moment ago is waited for up to `wait`); `progress(done, total)` hears how a
/// long operation goes.
pub async fn run_local(
    cluster: &Arc<Cluster>,
    pool: &str,
    wait: Duration,
    req: Request,
    progress: impl Fn(u64, u64) + Send + Sync,
) -> Result<Response, ControlError> {
    let pool = match &req {
        // Requests that make something in the pool need it.
        Request::Create {
            from_image: None, ..
        }
        | Request::ImageBegin { .. }
        | Request::ObjvolCreate { .. } => pool_in_map(cluster, pool, wait).await.map_err(failed)?,
        _ => cluster
            .map()
            .pools
            .values()
            .find(|p| p.name == pool)
            .map_or(0, |p| p.id),
    };
    let throttle = Throttle::new(progress);
    let resp = handle(cluster, &ServeContext::tool(pool), req, &throttle).await;
    if !resp.ok {
        return Err(resp.into_error());
    }
    Ok(resp)
}

fn failed(e: ClientError) -> ControlError {
    ControlError::Failed {
        kind: Some(e.kind()),
        message: e.to_string(),
    }
}
