//! The CSI Node service. This step validates every request and answers what needs no
//! attachment (capabilities, the node's id, undoing what was never done); attaching a
//! volume to a block device on the node (docs/design.md, "Kubernetes: the CSI driver",
//! Node) is the next step and is refused, saying so, until it lands.

use crate::errors::missing;
use crate::proto::node_server::Node;
use crate::proto::node_service_capability::rpc::Type as RpcType;
use crate::proto::*;
use std::path::Path;
use tonic::{Request, Response, Status};

/// The Node service of one node.
pub struct NodeService {
    /// How Kubernetes names this node (NodeGetInfo).
    node_id: String,
}

impl NodeService {
    pub fn new(node_id: String) -> Self {
        Self { node_id }
    }
}

/// Why attaching is refused in this step.
const NOT_BUILT: &str = "attaching a Basalt volume on a node is not built yet (the NBD or \
                         NVMe/TCP attach path of the node plugin: docs/design.md, \"Kubernetes: \
                         the CSI driver\")";

/// Check a path argument: given, and absolute.
fn path_arg<'a>(field: &str, path: &'a str) -> Result<&'a Path, Status> {
    if path.is_empty() {
        return Err(missing(field));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field} \"{path}\" is not an absolute path"
        )));
    }
    Ok(p)
}

/// Is something mounted at `path` (a line of /proc/self/mountinfo names it)?
fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mount_point| mount_point == want)
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let staging = path_arg("staging_target_path", &req.staging_target_path)?;
        let Some(cap) = req.volume_capability.as_ref() else {
            return Err(missing("volume_capability"));
        };
        if let Some(why) = crate::controller::unsupported(cap) {
            return Err(Status::invalid_argument(why));
        }
        // The CO makes the staging directory; anything else there is its mistake.
        if !staging.is_dir() {
            return Err(Status::invalid_argument(format!(
                "staging_target_path {} is not a directory",
                staging.display()
            )));
        }
        Err(Status::unimplemented(NOT_BUILT))
    }

    /// Nothing is ever staged in this step: unstaging is done (the spec's idempotence).
    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let path = path_arg("staging_target_path", &req.staging_target_path)?;
        if is_mount_point(path) {
            return Err(Status::failed_precondition(format!(
                "{} is a mount point this node plugin did not make: not touched",
                path.display()
            )));
        }
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        path_arg("target_path", &req.target_path)?;
        let Some(cap) = req.volume_capability.as_ref() else {
            return Err(missing("volume_capability"));
        };
        if let Some(why) = crate::controller::unsupported(cap) {
            return Err(Status::invalid_argument(why));
        }
        Err(Status::unimplemented(NOT_BUILT))
    }

    /// Nothing is ever published in this step: unpublishing is done.
    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        if req.volume_id.is_empty() {
            return Err(missing("volume_id"));
        }
        let path = path_arg("target_path", &req.target_path)?;
        if is_mount_point(path) {
            return Err(Status::failed_precondition(format!(
                "{} is a mount point this node plugin did not make: not touched",
                path.display()
            )));
        }
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        _: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        Err(Status::unimplemented(NOT_BUILT))
    }

    async fn node_expand_volume(
        &self,
        _: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        Err(Status::unimplemented(NOT_BUILT))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let rpc = |t: RpcType| NodeServiceCapability {
            r#type: Some(node_service_capability::Type::Rpc(
                node_service_capability::Rpc { r#type: t as i32 },
            )),
        };
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: vec![rpc(RpcType::StageUnstageVolume)],
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node_id.clone(),
            max_volumes_per_node: 0,
            accessible_topology: None,
        }))
    }
}
