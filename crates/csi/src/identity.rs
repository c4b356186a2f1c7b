//! The CSI Identity service: who the driver is and whether it is ready.

use crate::proto::identity_server::Identity;
use crate::proto::plugin_capability::{service, volume_expansion, Service, VolumeExpansion};
use crate::proto::*;
use basalt_client::Cluster;
use std::collections::HashMap;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The Identity service.
pub struct IdentityService {
    /// Reaches the cluster (None: a node plugin without a controller).
    cluster: Option<Arc<Cluster>>,
    /// The build's version (`0.1.0 (1a2b3c4d5e)`).
    version: String,
    /// Whether this process serves the Controller service.
    controller: bool,
}

impl IdentityService {
    pub fn new(cluster: Option<Arc<Cluster>>, version: String, controller: bool) -> Self {
        Self {
            cluster,
            version,
            controller,
        }
    }
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: crate::DRIVER_NAME.into(),
            vendor_version: self.version.clone(),
            manifest: HashMap::from([(
                "docs".to_string(),
                "docs/design.md, \"Kubernetes: the CSI driver\"".to_string(),
            )]),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        let mut capabilities = vec![PluginCapability {
            r#type: Some(plugin_capability::Type::VolumeExpansion(VolumeExpansion {
                // Offline: a node's attachment keeps the size it had when staged (the
                // nbdfuse path cannot grow under a mounted filesystem).
                r#type: volume_expansion::Type::Offline as i32,
            })),
        }];
        if self.controller {
            capabilities.push(PluginCapability {
                r#type: Some(plugin_capability::Type::Service(Service {
                    r#type: service::Type::ControllerService as i32,
                })),
            });
        }
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities,
        }))
    }

    /// Ready once the cluster map was read (a cluster with pools: the monitor publishes).
    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        let ready = self.cluster.as_ref().is_none_or(|c| c.map().epoch > 0);
        Ok(Response::new(ProbeResponse { ready: Some(ready) }))
    }
}
