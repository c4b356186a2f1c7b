//! `basalt nbd` and `basalt nvmf`: gateways of a multi-host cluster serving every volume
//! under its name, with their `/metrics`.

use crate::metrics_http::{self, MetricsTask};
use anyhow::Context;
use basalt_client::{Cluster, ReadPolicy};
use basalt_meta::MetaStore;
use basalt_metrics::frontend::{FrontendCollector, FrontendStats};
use basalt_nbd::VolumeExports;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// A listener's serving task.
type ServeTask = JoinHandle<std::io::Result<()>>;

/// What every gateway is started with.
pub struct GatewayConfig {
    /// The cluster's metadata, its calls timed into `meta_latency`.
    pub meta: Arc<dyn MetaStore>,
    pub meta_latency: Arc<basalt_meta::MetaLatency>,
    /// What the gateway proves to the OSDs.
    pub credentials: basalt_auth::Credentials,
    pub listen: SocketAddr,
    /// `/metrics`: "off", an address, or (None) loopback at the listen port + 1000.
    pub metrics_listen: Option<String>,
    /// Per-volume counters for the first N volumes opened (0: totals only).
    pub metrics_per_volume: usize,
    /// How long an I/O is retried while its PG cannot serve before it fails (None: for
    /// ever, like a hard-mounted disk).
    pub io_timeout: Option<std::time::Duration>,
    /// Where reads of replicated volumes go; None: from a replica on `host` when the map
    /// has an OSD there, else from the primary.
    pub read_policy: Option<ReadPolicy>,
    /// The host this gateway runs on, as OSDs name theirs.
    pub host: String,
}

impl GatewayConfig {
    /// The read policy in force under `map`: the one asked for, else localize when an OSD
    /// of this host is in the map.
    pub fn resolve_read_policy(&self, map: &basalt_placement::ClusterMap) -> ReadPolicy {
        match &self.read_policy {
            Some(p) => p.clone(),
            None if map.osds.values().any(|o| o.host == self.host) => ReadPolicy::Localize {
                host: self.host.clone(),
            },
            None => ReadPolicy::Primary,
        }
    }
}

/// The NBD server of `exports` with `tls`, counting into `stats`.
pub fn nbd_server(
    exports: Arc<dyn basalt_nbd::Exports>,
    tls: Option<Arc<basalt_nbd::TlsConfig>>,
    stats: Option<Arc<FrontendStats>>,
) -> Arc<basalt_nbd::Server> {
    let config = basalt_nbd::ServerConfig {
        tls,
        stats,
        ..basalt_nbd::ServerConfig::default()
    };
    basalt_nbd::Server::with_config(exports, config)
}

/// A gateway's frontend counters, or `None` with `--metrics-listen off` (then latency
/// recording is off for the process too: nothing would read either).
fn frontend_stats(
    config: &GatewayConfig,
    frontend: &'static str,
) -> anyhow::Result<Option<Arc<FrontendStats>>> {
    let arg = config.metrics_listen.as_deref();
    if metrics_http::metrics_addr(arg, Some(config.listen))?.is_none() {
        basalt_metrics::disable_latency();
        return Ok(None);
    }
    Ok(Some(FrontendStats::new(
        frontend,
        config.metrics_per_volume,
    )))
}

/// A gateway's view of the cluster: the client library (proving `credentials`) and every
/// volume as an export, each open one recorded as `what` (for `volume rm`).
async fn exports(
    config: &GatewayConfig,
    what: &str,
) -> anyhow::Result<(Arc<Cluster>, Arc<VolumeExports>)> {
    let map = basalt_client::follow_map(config.meta.clone())
        .await
        .context("read the cluster map")?;
    let cluster = Cluster::new_as(config.meta.clone(), map, Some(config.credentials.clone()));
    cluster.set_io_timeout(config.io_timeout);
    let policy = config.resolve_read_policy(&cluster.map());
    match &policy {
        ReadPolicy::Localize { host } => tracing::info!(
            "reads of replicated volumes go to a replica on host {host} when it is current"
        ),
        ReadPolicy::Primary => tracing::info!("reads go to each PG's primary"),
    }
    cluster.set_read_policy(policy);
    let gateway = format!(
        "{what} on {} (pid {}, {})",
        crate::osd_daemon::hostname(),
        std::process::id(),
        config.listen
    );
    let watchers = basalt_client::watchers::Watchers::new(config.meta.clone(), gateway);
    let exports = Arc::new(VolumeExports::new(cluster.clone(), None).with_watchers(watchers));
    Ok((cluster, exports))
}

/// Serve the gateway's `/metrics` (the client's, the metadata's, the frontend's).
async fn start_metrics(
    config: &GatewayConfig,
    cluster: &Arc<Cluster>,
    stats: Option<Arc<FrontendStats>>,
    addr: SocketAddr,
) -> anyhow::Result<Option<MetricsTask>> {
    let mut registry = metrics_http::registry();
    registry.register_collector(Box::new(cluster.collector()));
    registry.register_collector(Box::new(basalt_meta::MetaCollector(
        config.meta_latency.clone(),
    )));
    registry.register_collector(Box::new(FrontendCollector::new(
        stats.into_iter().collect(),
    )));
    let at = metrics_http::metrics_addr(config.metrics_listen.as_deref(), Some(addr))?;
    metrics_http::start_if(at, registry).await
}

/// A running `basalt nbd`.
pub struct NbdGateway {
    /// Where it serves NBD over TCP.
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    cluster: Arc<Cluster>,
    server: Arc<basalt_nbd::Server>,
    tcp: ServeTask,
    unix: Option<ServeTask>,
    metrics_task: Option<MetricsTask>,
}

impl NbdGateway {
    /// Serve every volume on `config.listen` (and on the unix socket `socket`).
    pub async fn start(
        config: GatewayConfig,
        socket: Option<PathBuf>,
        tls: Option<Arc<basalt_nbd::TlsConfig>>,
    ) -> anyhow::Result<Self> {
        let (cluster, exports) = exports(&config, "basalt nbd").await?;
        let stats = frontend_stats(&config, "nbd")?;
        let server = nbd_server(exports, tls, stats.clone());
        let tcp = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listen for NBD on {}", config.listen))?;
        let addr = tcp.local_addr()?;
        let tcp = tokio::spawn(server.clone().serve_tcp(tcp));
        let metrics_task = start_metrics(&config, &cluster, stats, addr).await?;
        let unix = match &socket {
            Some(path) => {
                let _ = std::fs::remove_file(path);
                let unix = tokio::net::UnixListener::bind(path)
                    .with_context(|| format!("listen for NBD on {}", path.display()))?;
                Some(tokio::spawn(server.clone().serve_unix(unix)))
            }
            None => None,
        };
        Ok(Self {
            addr,
            metrics: metrics_task.as_ref().map(|m| m.0),
            cluster,
            server,
            tcp,
            unix,
            metrics_task,
        })
    }

    /// Stop: finish the requests in flight, then flush what was acknowledged.
    pub async fn stop(self) {
        self.server.shutdown();
        if let Some((_, task)) = self.metrics_task {
            task.abort();
        }
        let _ = self.tcp.await;
        if let Some(t) = self.unix {
            let _ = t.await;
        }
        if let Err(e) = self.cluster.flush().await {
            tracing::error!("final flush failed: {e}");
        }
    }
}

/// A running `basalt nvmf`.
pub struct NvmfGateway {
    /// Where it serves NVMe/TCP.
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    cluster: Arc<Cluster>,
    target: Arc<basalt_nvmf::Target>,
    task: ServeTask,
    metrics_task: Option<MetricsTask>,
}

impl NvmfGateway {
    /// Serve every volume as an NVMe subsystem on `config.listen`.
    pub async fn start(config: GatewayConfig) -> anyhow::Result<Self> {
        let stats = frontend_stats(&config, "nvmf")?;
        let (cluster, exports) = exports(&config, "basalt nvmf").await?;
        let target_config = basalt_nvmf::TargetConfig {
            stats: stats.clone(),
            ..basalt_nvmf::TargetConfig::default()
        };
        let target = basalt_nvmf::Target::with_config(exports, target_config);
        let tcp = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listen for NVMe/TCP on {}", config.listen))?;
        let addr = tcp.local_addr()?;
        let task = tokio::spawn(target.clone().serve_tcp(tcp));
        let metrics_task = start_metrics(&config, &cluster, stats, addr).await?;
        Ok(Self {
            addr,
            metrics: metrics_task.as_ref().map(|m| m.0),
            cluster,
            target,
            task,
            metrics_task,
        })
    }

    /// Stop: finish the commands in flight, then flush what was acknowledged.
    pub async fn stop(self) {
        self.target.shutdown();
        let _ = self.task.await;
        if let Some((_, task)) = self.metrics_task {
            task.abort();
        }
        if let Err(e) = self.cluster.flush().await {
            tracing::error!("final flush failed: {e}");
        }
    }
}
