//! What `basalt up` serves: NBD (TCP and unix socket), NVMe/TCP, S3 and the control API,
//! all over one set of volume exports.

use super::s3;
use super::LocalConfig;
use crate::gateway::nbd_server;
use crate::metrics_http::MetricsTask;
use crate::ready::Endpoints;
use crate::s3_gateway::S3Gateway;
use anyhow::Context;
use basalt_client::Cluster;
use basalt_meta::schema::PoolRecord;
use basalt_meta::MetaStore;
use basalt_metrics::frontend::FrontendStats;
use basalt_nbd::VolumeExports;
use basalt_proto::PoolId;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::task::JoinHandle;

/// A listener's serving task.
type ServeTask = JoinHandle<std::io::Result<()>>;

/// The frontends of `basalt up`, as they are started one after the other.
pub(super) struct Frontends {
    exports: Arc<VolumeExports>,
    nbd: Arc<basalt_nbd::Server>,
    nbd_addr: SocketAddr,
    nbd_socket: PathBuf,
    nbd_tasks: [ServeTask; 2],
    /// Bound at start, served once S3 (which requests refer to) runs.
    control_listener: Option<tokio::net::UnixListener>,
    control_path: PathBuf,
    control_task: Option<JoinHandle<()>>,
    nvmf: Option<(SocketAddr, Arc<basalt_nvmf::Target>, ServeTask)>,
    nbd_stats: Option<Arc<FrontendStats>>,
    nvmf_stats: Option<Arc<FrontendStats>>,
    pub s3_stats: Arc<basalt_s3::stats::GatewayStats>,
    s3: Option<S3Gateway>,
}

impl Frontends {
    /// Serve NBD and (when asked) NVMe/TCP over every volume, and bind the control socket.
    pub async fn start(
        config: &LocalConfig,
        cluster: &Arc<Cluster>,
        meta: &Arc<dyn MetaStore>,
    ) -> anyhow::Result<Self> {
        let default = config.default_volume.as_ref().map(|(name, _)| name.clone());
        let gateway = format!("the NBD server of basalt up (pid {})", std::process::id());
        let watchers = basalt_client::watchers::Watchers::new(meta.clone(), gateway);
        let exports =
            Arc::new(VolumeExports::new(cluster.clone(), default).with_watchers(watchers));
        // Frontends count nothing when no endpoint would export it.
        let stats = |name| {
            config
                .metrics
                .map(|_| FrontendStats::new(name, config.metrics_per_volume))
        };
        let (nbd_stats, nvmf_stats) = (stats("nbd"), stats("nvmf"));
        let nbd = nbd_server(exports.clone(), config.nbd_tls.clone(), nbd_stats.clone());
        let tcp = tokio::net::TcpListener::bind(config.nbd_listen)
            .await
            .with_context(|| format!("listen for NBD on {}", config.nbd_listen))?;
        let nbd_socket = config
            .nbd_socket
            .clone()
            .unwrap_or_else(|| config.data_dir.join("nbd.sock"));
        let _ = std::fs::remove_file(&nbd_socket);
        let unix = tokio::net::UnixListener::bind(&nbd_socket)
            .with_context(|| format!("listen for NBD on {}", nbd_socket.display()))?;
        let control_path = config
            .control_socket
            .clone()
            .unwrap_or_else(|| config.data_dir.join("control.sock"));
        let control_listener = basalt_control::bind_private_socket(&control_path)
            .with_context(|| format!("listen for the control API on {}", control_path.display()))?;
        let nbd_addr = tcp.local_addr()?;
        let nbd_tasks = [
            tokio::spawn(nbd.clone().serve_tcp(tcp)),
            tokio::spawn(nbd.clone().serve_unix(unix)),
        ];
        let nvmf = match config.nvmf_listen {
            Some(listen) => Some(start_nvmf(listen, &exports, nvmf_stats.clone()).await?),
            None => None,
        };
        Ok(Self {
            exports,
            nbd,
            nbd_addr,
            nbd_socket,
            nbd_tasks,
            control_listener: Some(control_listener),
            control_path,
            control_task: None,
            nvmf,
            nbd_stats,
            nvmf_stats,
            s3_stats: Arc::new(basalt_s3::stats::GatewayStats::default()),
            s3: None,
        })
    }

    /// The block frontends' counters (none with metrics off).
    pub fn stats(&self) -> Vec<Arc<FrontendStats>> {
        self.nbd_stats
            .iter()
            .chain(&self.nvmf_stats)
            .cloned()
            .collect()
    }

    /// Start the S3 gateway, if configured: bucket indexes in `pool`, or in `s3_index`
    /// with their data in `pool` (an erasure-coded main pool).
    pub async fn start_s3(
        &mut self,
        config: &LocalConfig,
        cluster: &Arc<Cluster>,
        (pool, s3_index): (&PoolRecord, Option<&PoolRecord>),
    ) -> anyhow::Result<()> {
        let Some(settings) = &config.s3 else {
            return Ok(());
        };
        let pools = match s3_index {
            Some(index) => (index.id, Some(pool.id)),
            None => (pool.id, None),
        };
        let stats = self.s3_stats.clone();
        let gateway = s3::start_gateway(settings, &config.data_dir, cluster, pools, stats).await?;
        self.s3 = Some(gateway);
        // Objvols over this cluster's own buckets read them through its gateway, as admin.
        let credentials = s3::s3_credentials_path(&config.data_dir);
        self.exports.set_objvol_credentials(Some(credentials));
        Ok(())
    }

    /// Serve the control API: new volumes go to `pool`, and `reserved` pools are never
    /// removed through it.
    pub fn serve_control(
        &mut self,
        config: &LocalConfig,
        cluster: &Arc<Cluster>,
        pool: PoolId,
        reserved: Vec<PoolId>,
    ) -> anyhow::Result<()> {
        let listener = self
            .control_listener
            .take()
            .context("the control API is served once")?;
        let s3_master = match &config.s3 {
            Some(_) => Some(s3::master_key(&config.data_dir)?),
            None => None,
        };
        let ctx = basalt_control::ServeContext {
            pool,
            nbd_socket: Some(self.nbd_socket.clone()),
            s3_master,
            s3_endpoint: self.s3.as_ref().map(S3Gateway::endpoint),
            s3_credentials: self
                .s3
                .as_ref()
                .map(|_| s3::s3_credentials_path(&config.data_dir)),
            reserved_pools: reserved,
            frontends: self.stats(),
        };
        let task = basalt_control::serve(listener, cluster.clone(), ctx);
        self.control_task = Some(tokio::spawn(task));
        Ok(())
    }

    /// Where everything is served.
    pub fn endpoints(
        &self,
        config: &LocalConfig,
        pool: &PoolRecord,
        osds: usize,
        metrics: Option<&MetricsTask>,
    ) -> Endpoints {
        Endpoints {
            data_dir: config.data_dir.clone(),
            pool: pool.name.clone(),
            osds,
            osd_io: String::new(),
            default_volume: config.default_volume.as_ref().map(|(n, _)| n.clone()),
            nbd_tcp: self.nbd_addr,
            nbd_socket: self.nbd_socket.clone(),
            control_socket: self.control_path.clone(),
            s3: self.s3.as_ref().map(|s| s.addr),
            s3_credentials: self
                .s3
                .as_ref()
                .map(|_| s3::s3_credentials_path(&config.data_dir)),
            metrics: metrics.map(|(addr, _)| *addr),
            nvmf: self.nvmf.as_ref().map(|(addr, _, _)| *addr),
        }
    }

    /// Stop every frontend, letting requests in flight finish, and remove the sockets.
    pub async fn stop(mut self) {
        if let Some(s3) = self.s3.take() {
            s3.stop().await;
        }
        if let Some(task) = self.control_task.take() {
            task.abort();
            let _ = task.await;
        }
        self.nbd.shutdown();
        if let Some((_, target, task)) = self.nvmf.take() {
            target.shutdown();
            let _ = task.await;
        }
        for task in self.nbd_tasks {
            let _ = task.await;
        }
        // Release every handle on the cluster (the exports hold one) so the stores can
        // close.
        drop(self.nbd);
        drop(self.exports);
        let _ = std::fs::remove_file(&self.nbd_socket);
        let _ = std::fs::remove_file(&self.control_path);
    }
}

/// Serve every volume of `exports` over NVMe/TCP at `listen`.
async fn start_nvmf(
    listen: SocketAddr,
    exports: &Arc<VolumeExports>,
    stats: Option<Arc<FrontendStats>>,
) -> anyhow::Result<(SocketAddr, Arc<basalt_nvmf::Target>, ServeTask)> {
    let tcp = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("listen for NVMe/TCP on {listen}"))?;
    let addr = tcp.local_addr()?;
    let config = basalt_nvmf::TargetConfig {
        stats,
        ..basalt_nvmf::TargetConfig::default()
    };
    let target = basalt_nvmf::Target::with_config(exports.clone(), config);
    let task = tokio::spawn(target.clone().serve_tcp(tcp));
    Ok((addr, target, task))
}
