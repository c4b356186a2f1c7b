//! Serving the CSI services on a unix socket.

use crate::controller::ControllerService;
use crate::identity::IdentityService;
use crate::node::NodeService;
use crate::proto::controller_server::ControllerServer;
use crate::proto::identity_server::IdentityServer;
use crate::proto::node_server::NodeServer;
use basalt_client::Cluster;
use std::path::PathBuf;
use std::sync::Arc;
use thiserror::Error;

/// Which services a `basalt csi` process serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Identity and Controller (the Deployment beside the provisioner sidecars).
    Controller,
    /// Identity and Node (the DaemonSet on every node).
    Node,
    /// All three (one process: tests, single-node clusters).
    All,
}

impl Mode {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "controller" => Some(Self::Controller),
            "node" => Some(Self::Node),
            "all" => Some(Self::All),
            _ => None,
        }
    }

    fn controller(self) -> bool {
        matches!(self, Self::Controller | Self::All)
    }

    fn node(self) -> bool {
        matches!(self, Self::Node | Self::All)
    }
}

/// What `basalt csi` serves.
#[derive(Clone, Debug)]
pub struct CsiConfig {
    /// The unix socket (`unix:///csi/csi.sock` or a path).
    pub endpoint: PathBuf,
    pub mode: Mode,
    /// The pool of volumes whose StorageClass names none.
    pub default_pool: String,
    /// The build's version, for GetPluginInfo.
    pub version: String,
    /// How Kubernetes names this node (the node service's NodeGetInfo).
    pub node_id: String,
    /// The node's NBD URI of a volume, `{volume}` standing for its name (None: the node
    /// service cannot attach).
    pub nbd_uri: Option<String>,
    /// Where the node service records what it staged.
    pub state_dir: PathBuf,
}

/// Why the driver could not serve.
#[derive(Debug, Error)]
pub enum CsiError {
    #[error(
        "endpoint \"{0}\" is not unix:///PATH or a path (CSI drivers listen on a unix socket)"
    )]
    Endpoint(String),
    #[error("{op} {path}: {source}")]
    Socket {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the gRPC server stopped: {0}")]
    Server(#[from] tonic::transport::Error),
    #[error(
        "NBD URI \"{0}\" has no {{volume}}: every volume would attach the same export \
         (for example nbd://127.0.0.1:10809/{{volume}})"
    )]
    NbdUri(String),
}

/// The socket path of an endpoint: `unix:///csi/csi.sock`, `unix:/csi/csi.sock` or a path.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CsiError> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    if path.is_empty() || endpoint.contains("://") && !endpoint.starts_with("unix://") {
        return Err(CsiError::Endpoint(endpoint.to_string()));
    }
    Ok(PathBuf::from(path))
}

/// A bound CSI endpoint, not yet serving: [`CsiServer::run`] serves it.
pub struct CsiServer {
    config: CsiConfig,
    listener: tokio::net::UnixListener,
}

impl CsiServer {
    /// Listen on `config`'s socket (a socket file left by an earlier run is replaced).
    pub fn bind(config: CsiConfig) -> Result<Self, CsiError> {
        if let Some(uri) = config.nbd_uri.as_ref().filter(|u| !u.contains("{volume}")) {
            return Err(CsiError::NbdUri(uri.clone()));
        }
        let path = config.endpoint.clone();
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(CsiError::Socket {
                    op: "remove the old socket",
                    path,
                    source,
                })
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| CsiError::Socket {
                op: "create",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let listener =
            tokio::net::UnixListener::bind(&path).map_err(|source| CsiError::Socket {
                op: "listen on",
                path: path.clone(),
                source,
            })?;
        Ok(Self { config, listener })
    }

    /// Serve the services for `cluster` until `shutdown` completes; the socket file goes.
    pub async fn run(
        self,
        cluster: Arc<Cluster>,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), CsiError> {
        let Self { config, listener } = self;
        let path = config.endpoint.clone();
        tracing::info!(endpoint = %path.display(), mode = ?config.mode, "CSI driver serving");
        let identity = IdentityService::new(
            Some(cluster.clone()),
            config.version.clone(),
            config.mode.controller(),
        );
        let node = config.mode.node().then(|| {
            NodeServer::new(NodeService::new(
                config.node_id.clone(),
                config.nbd_uri.clone(),
                config.state_dir.clone(),
            ))
        });
        let controller = config
            .mode
            .controller()
            .then(|| ControllerServer::new(ControllerService::new(cluster, config.default_pool)));
        let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
        let served = tonic::transport::Server::builder()
            .add_service(IdentityServer::new(identity))
            .add_optional_service(controller)
            .add_optional_service(node)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await;
        let _ = std::fs::remove_file(&path);
        served.map_err(CsiError::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: endpoints are unix sockets, and a node NBD URI without `{volume}` (every
    /// volume would attach one export) is refused before anything listens.
    #[test]
    fn endpoints_and_nbd_uris_are_checked() {
        assert_eq!(
            socket_path("unix:///csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert!(socket_path("tcp://127.0.0.1:10000").is_err());
        let dir = tempfile::tempdir().unwrap();
        let config = CsiConfig {
            endpoint: dir.path().join("csi.sock"),
            mode: Mode::All,
            default_pool: "rbd".into(),
            version: "test".into(),
            node_id: "n".into(),
            nbd_uri: Some("nbd://127.0.0.1:10809/vol0".into()),
            state_dir: dir.path().join("state"),
        };
        let err = CsiServer::bind(config).err().unwrap().to_string();
        assert!(err.contains("has no {volume}"), "{err}");
        assert!(!dir.path().join("csi.sock").exists());
    }
}
