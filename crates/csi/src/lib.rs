//! Basalt's CSI driver (docs/design.md, "Kubernetes: the CSI driver"): the CSI v1 Identity,
//! Controller and Node services over a unix socket, on the client library. The controller
//! makes volumes and snapshots in the cluster; the node side attaches them (a later step:
//! until then it validates, answers what needs no attachment and refuses the rest).

pub mod controller;
mod errors;
pub mod identity;
pub mod node;
pub mod serve;

/// The CSI v1 messages and services, generated from the spec's `csi.proto` (v1.12).
#[allow(clippy::all, missing_docs)]
pub mod proto {
    tonic::include_proto!("csi.v1");
}

pub use serve::{CsiConfig, CsiError, CsiServer, Mode};

/// The driver's name, as Kubernetes' CSIDriver object and StorageClasses name it.
pub const DRIVER_NAME: &str = "csi.basalt.dev";
