//! The S3 gateway: [`S3Gateway`] serves a cluster's buckets, started the same way by
//! `basalt up` (`local::s3`, with its admin key) and by `basalt s3` on a multi-host
//! cluster ([`S3Daemon`], with its `/metrics`).

use crate::metrics_http::{self, MetricsTask};
use anyhow::Context;
use basalt_client::Cluster;
use basalt_meta::MetaStore;
use basalt_proto::PoolId;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Settings of an S3 gateway (the `--s3-*` flags of `basalt up`, those of `basalt s3`).
#[derive(Clone, Debug)]
pub struct S3Settings {
    pub listen: SocketAddr,
    /// Base domain of virtual-host-style requests (BUCKET.DOMAIN); None: path-style only.
    pub domain: Option<String>,
    pub reclaim_after: Duration,
    pub lifecycle_every: Duration,
    pub lifecycle_day: Duration,
    pub body_idle_timeout: Duration,
    pub max_connections: usize,
}

impl S3Settings {
    /// The gateway's config: bucket indexes in `pool`, their data in `data_pool` (None:
    /// the same pool); every period at least a second, at least one connection.
    fn gateway_config(
        &self,
        (pool, data_pool): (PoolId, Option<PoolId>),
        stats: Arc<basalt_s3::stats::GatewayStats>,
    ) -> basalt_s3::GatewayConfig {
        let at_least_1s = |d: Duration| d.max(Duration::from_secs(1));
        basalt_s3::GatewayConfig {
            pool,
            data_pool,
            domain: self.domain.clone(),
            reclaim_after: at_least_1s(self.reclaim_after),
            lifecycle_every: at_least_1s(self.lifecycle_every),
            lifecycle_day: at_least_1s(self.lifecycle_day),
            stats,
            body_idle_timeout: at_least_1s(self.body_idle_timeout),
            max_connections: self.max_connections.max(1),
        }
    }
}

/// Bind the S3 listener on `listen` (before serving: the bound port names `/metrics`).
pub async fn bind_s3(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(listen)
        .await
        .with_context(|| format!("listen for S3 on {listen}"))
}

/// A running S3 gateway: where it listens, its task, and how to stop it.
pub struct S3Gateway {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl S3Gateway {
    /// Serve `cluster`'s buckets on `listener` (from [`bind_s3`]), secrets sealed in
    /// `ring`; bucket indexes in `pools.0`, their data in `pools.1` (None: the same pool).
    pub fn serve(
        listener: TcpListener,
        settings: &S3Settings,
        cluster: &Arc<Cluster>,
        ring: Arc<basalt_s3::KeyRing>,
        pools: (PoolId, Option<PoolId>),
        stats: Arc<basalt_s3::stats::GatewayStats>,
    ) -> anyhow::Result<Self> {
        let addr = listener.local_addr()?;
        let config = settings.gateway_config(pools, stats);
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(basalt_s3::serve(
            listener,
            cluster.clone(),
            ring,
            config,
            stop_rx,
        ));
        Ok(Self { addr, task, stop })
    }

    /// The gateway's URL for clients on this host (loopback for an unspecified address).
    pub fn endpoint(&self) -> String {
        let ip = match self.addr.ip() {
            ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
            ip => ip,
        };
        format!("http://{}", SocketAddr::new(ip, self.addr.port()))
    }

    /// Stop: finish the requests in flight.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

/// What `basalt s3` (a gateway of a multi-host cluster) is started with.
pub struct S3DaemonConfig {
    /// The cluster's metadata, its calls timed into `meta_latency`.
    pub meta: Arc<dyn MetaStore>,
    pub meta_latency: Arc<basalt_meta::MetaLatency>,
    /// What the gateway proves to the OSDs.
    pub credentials: basalt_auth::Credentials,
    /// Pool of new buckets' indexes, and (None: the same) of their data, by name.
    pub pool: String,
    pub data_pool: Option<String>,
    /// File of the key sealing access-key secrets (made, mode 0600, when missing).
    pub master_key: PathBuf,
    pub settings: S3Settings,
    /// `/metrics`: "off", an address, or (None) loopback at the listen port + 1000.
    pub metrics_listen: Option<String>,
}

/// A running `basalt s3`.
pub struct S3Daemon {
    /// Where it serves S3.
    pub addr: SocketAddr,
    pub metrics: Option<SocketAddr>,
    gateway: S3Gateway,
    metrics_task: Option<MetricsTask>,
}

impl S3Daemon {
    /// Serve the cluster's buckets on `config.settings.listen`, with `/metrics`.
    pub async fn start(config: S3DaemonConfig) -> anyhow::Result<Self> {
        let map = basalt_client::follow_map(config.meta.clone())
            .await
            .context("read the cluster map")?;
        let cluster = Cluster::new_as(config.meta.clone(), map, Some(config.credentials));
        let pool = pool_id(&cluster, &config.pool)?;
        let data_pool = config
            .data_pool
            .as_deref()
            .map(|name| pool_id(&cluster, name))
            .transpose()?;
        let master = basalt_s3::MasterKey::load(&config.master_key, true)?;
        let ring = Arc::new(basalt_s3::KeyRing::new(cluster.meta().clone(), master));
        let listener = bind_s3(config.settings.listen).await?;
        let addr = listener.local_addr()?;
        let metrics_addr =
            metrics_http::metrics_addr(config.metrics_listen.as_deref(), Some(addr))?;
        if metrics_addr.is_none() {
            // Before any request: nothing will read the histograms (docs/metrics.md, "Off").
            basalt_metrics::disable_latency();
        }
        let stats = Arc::new(basalt_s3::stats::GatewayStats::default());
        let mut registry = metrics_http::registry();
        registry.register_collector(Box::new(cluster.collector()));
        registry.register_collector(Box::new(basalt_meta::MetaCollector(config.meta_latency)));
        registry.register_collector(Box::new(stats.clone()));
        let metrics_task = metrics_http::start_if(metrics_addr, registry).await?;
        let pools = (pool, data_pool);
        let gateway = S3Gateway::serve(listener, &config.settings, &cluster, ring, pools, stats)?;
        Ok(Self {
            addr,
            metrics: metrics_task.as_ref().map(|m| m.0),
            gateway,
            metrics_task,
        })
    }

    /// Stop: finish the requests in flight, then the `/metrics` endpoint.
    pub async fn stop(self) {
        self.gateway.stop().await;
        if let Some((_, task)) = self.metrics_task {
            task.abort();
        }
    }
}

/// The pool id of `name`, or a precise error.
fn pool_id(cluster: &Cluster, name: &str) -> anyhow::Result<PoolId> {
    cluster
        .map()
        .pools
        .values()
        .find(|p| p.name == name)
        .map(|p| p.id)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "pool \"{name}\" is not in the cluster map (create it with `basalt pool create`, \
                 or choose one with --pool)"
            )
        })
}
