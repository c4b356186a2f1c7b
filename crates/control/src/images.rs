//! Image requests: begin and finish an import, list, inspect, remove.

use crate::protocol::{Request, Response};
use crate::server::ServeContext;
use basalt_client::{ClientError, Cluster};
use std::sync::Arc;

/// Run an image request; other requests are refused as invalid.
pub(crate) async fn image_request(
    cluster: &Arc<Cluster>,
    ctx: &ServeContext,
    req: Request,
) -> Result<Response, ClientError> {
    match req {
        Request::ImageBegin { name, size, source } => {
            let image = cluster.begin_image(&name, size, ctx.pool, &source).await?;
            // The data goes through this process's NBD socket, when it serves one.
            let nbd_uri = ctx.nbd_socket.as_ref().map(|socket| {
                format!(
                    "nbd+unix:///image:{}?socket={}",
                    image.name,
                    socket.display()
                )
            });
            Ok(Response {
                nbd_uri,
                ..Response::image(image)
            })
        }
        Request::ImageFinish { name } => cluster.finish_image(&name).await.map(Response::image),
        Request::ImageInfo { name } => cluster.image_info(&name).await.map(Response::image),
        Request::ImageLs => {
            let images = cluster.list_images().await?;
            let inodes: Vec<_> = images.iter().map(|i| i.inode).collect();
            let usage = cluster.layer_usage(&inodes).await?;
            Ok(Response {
                ok: true,
                images: Some(images),
                image_bytes: Some(usage.iter().map(|u| u.bytes).collect()),
                ..Response::default()
            })
        }
        Request::ImageRm { name } => cluster.remove_image(&name).await.map(|_| Response::done()),
        _ => Err(ClientError::Invalid {
            reason: "not an image request".into(),
        }),
    }
}
