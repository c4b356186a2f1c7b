//! Objvol requests: build (over this cluster's own S3 gateway by default), refresh, list,
//! inspect, remove.

use crate::protocol::{Request, Response};
use crate::server::ServeContext;
use basalt_client::Cluster;
use std::sync::Arc;

/// An objvol request: builds run here, reading the bucket with the request's credentials
/// or this process's own.
pub(crate) async fn objvol_request(
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
