//! `basalt up`: a real replicated cluster in one process.
//!
//! OSDs (each with its own store file and TCP listener), an embedded metadata store, a
//! monitor, an NBD gateway (and optionally NVMe/TCP), an S3 gateway and the control API,
//! all in one process and all the same code a multi-host cluster runs: the OSDs register
//! under leases, the monitor derives the map, primaries peer their PGs. Every byte goes
//! client → primary OSD → replicas over the same data-plane protocol.
//!
//! [`LocalCluster::start`] assembles it in named steps; [`LocalCluster::stop`] takes it
//! down in the reverse order, everything acknowledged made durable first.

mod frontends;
mod pools;
mod s3;

pub use pools::{POOL_NAME, S3_INDEX_POOL};
pub use s3::s3_credentials_path;

use crate::metrics_http::{self, MetricsTask};
use crate::monitor::{Monitor, MonitorSettings};
use crate::ready::Endpoints;
use crate::s3_gateway::S3Settings;
use anyhow::{bail, Context};
use basalt_client::Cluster;
use basalt_meta::schema::{PoolRecord, OSDS_PREFIX};
use basalt_meta::{EmbeddedMeta, MetaStore};
use basalt_osd::{OsdConfig, RecoveryConfig, Registration, RunningOsd};
use basalt_placement::ClusterMap;
use basalt_store::StoreOptions;
use frontends::Frontends;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Everything `basalt up` is started with (its flags, parsed and checked).
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Holds the metadata and every OSD's store file.
    pub data_dir: PathBuf,
    pub nbd_listen: SocketAddr,
    /// [default: DATA_DIR/nbd.sock]
    pub nbd_socket: Option<PathBuf>,
    /// Serve NVMe/TCP there too (None: not).
    pub nvmf_listen: Option<SocketAddr>,
    /// [default: DATA_DIR/control.sock]
    pub control_socket: Option<PathBuf>,
    /// OSDs, replicas or erasure code "K+M", store size, object size and PGs: first start
    /// only.
    pub osds: u32,
    pub replicas: u32,
    pub ec: Option<String>,
    pub osd_size_bytes: u64,
    /// WAL size of each new store (0: chosen from the store size).
    pub wal_bytes: u64,
    pub object_size_bytes: u64,
    pub pgs: u32,
    /// The volume made on first start and served by default (None: none).
    pub default_volume: Option<(String, u64)>,
    /// The S3 gateway (None: off).
    pub s3: Option<S3Settings>,
    /// Where `/metrics` is served (None: off, and nothing is counted for it).
    pub metrics: Option<SocketAddr>,
    /// Per-volume counters of the frontends for the first N volumes opened.
    pub metrics_per_volume: usize,
    pub slow_op_ms: u64,
    /// How the OSDs' stores do their I/O.
    pub io: basalt_store::IoOptions,
    /// The gateways call the OSDs' handlers directly (false: over loopback TCP).
    pub local_path: bool,
    /// BENCHMARK ONLY: the OSDs accept connections without authentication.
    pub insecure_no_auth: bool,
    pub nbd_tls: Option<Arc<basalt_nbd::TlsConfig>>,
    /// Data-plane TLS of the OSDs' TCP connections.
    pub data_tls: Option<Arc<basalt_auth::DataTls>>,
}

/// Liveness lease TTL of the in-process OSDs (they share the process with the metadata, so
/// it only matters for the fencing logic, which runs as in a multi-host cluster).
const LOCAL_LEASE_TTL_SECS: u64 = 5;
/// Longest wait for every PG to become active at start.
const READY_TIMEOUT_MS: u64 = 60_000;
/// How often the in-process OSDs scan for stray copies.
const STRAY_SCAN_SECS: u64 = 30;

/// A running `basalt up`.
pub struct LocalCluster {
    /// What it serves where (the banner and the ready file show it).
    pub endpoints: Endpoints,
    /// Its main pool.
    pub pool: PoolRecord,
    cluster: Arc<Cluster>,
    osds: Vec<RunningOsd>,
    monitor: Monitor,
    frontends: Frontends,
    metrics: Option<MetricsTask>,
}

/// The metadata store of `basalt up`, and the latency of its calls.
struct LocalMeta {
    store: Arc<dyn MetaStore>,
    latency: Arc<basalt_meta::MetaLatency>,
}

impl LocalCluster {
    /// The cluster client the frontends use (for another frontend in this process: the
    /// CSI driver).
    pub fn client(&self) -> Arc<Cluster> {
        self.cluster.clone()
    }

    /// Assemble and start the cluster of `config`; returns once every PG is active and
    /// every frontend serves.
    pub async fn start(config: LocalConfig) -> anyhow::Result<Self> {
        if config.insecure_no_auth && config.data_tls.is_some() {
            bail!("--insecure-no-auth cannot be combined with --data-tls");
        }
        if config.metrics.is_none() {
            // Before any I/O: nothing will read the histograms (docs/metrics.md, "Off").
            basalt_metrics::disable_latency();
        }
        let meta = open_meta(&config.data_dir)?;
        let pool = pools::main_pool(meta.store.as_ref(), &config).await?;
        let s3_index = pools::s3_index_pool(meta.store.as_ref(), &pool, config.osds).await?;
        let (ids, first_start) = osd_ids(meta.store.as_ref(), config.osds).await?;
        let secret = local_secret(&config.data_dir, meta.store.as_ref()).await?;
        let map = basalt_client::follow_map(meta.store.clone()).await?;
        let osds = start_osds(&config, &meta, &secret, &map, &pool, (&ids, first_start)).await?;
        // One process: its OSDs never go down alone, so never move data off them.
        let settings = MonitorSettings {
            out_after_secs: u64::MAX / 2000,
            lease_ttl_secs: LOCAL_LEASE_TTL_SECS,
            min_down_reporters: 2,
            report_settle_ms: 300,
        };
        let monitor = Monitor::spawn(meta.store.clone(), "basalt up".into(), settings);
        let cluster = local_client(&config, &meta, secret, map, &osds);
        wait_ready(&cluster, &osds).await?;
        if let (true, Some((name, size))) = (first_start, &config.default_volume) {
            cluster
                .create_volume(name, *size, pool.id)
                .await
                .with_context(|| format!("create the default volume {name}"))?;
        }
        let reserved: Vec<_> = std::iter::once(pool.id)
            .chain(s3_index.as_ref().map(|p| p.id))
            .collect();
        let mut frontends = Frontends::start(&config, &cluster, &meta.store).await?;
        let metrics = start_metrics(&config, &meta, &cluster, &osds, &frontends).await?;
        frontends
            .start_s3(&config, &cluster, (&pool, s3_index.as_ref()))
            .await?;
        frontends.serve_control(&config, &cluster, pool.id, reserved)?;
        let mut endpoints = frontends.endpoints(&config, &pool, osds.len(), metrics.as_ref());
        endpoints.osd_io = osds
            .first()
            .map(|o| o.osd().store.io_mode())
            .unwrap_or_default();
        Ok(Self {
            endpoints,
            pool,
            cluster,
            osds,
            monitor,
            frontends,
            metrics,
        })
    }

    /// Stop: the frontends finish what is in flight, everything acknowledged is flushed,
    /// then the monitor and the OSDs stop (their leases revoked, their stores closed).
    pub async fn stop(self) -> anyhow::Result<()> {
        if let Some((_, task)) = &self.metrics {
            task.abort();
        }
        self.frontends.stop().await;
        // Everything acknowledged becomes durable before the stores close.
        if let Err(e) = self.cluster.flush().await {
            tracing::error!("final flush failed: {e}");
        }
        drop(self.cluster);
        self.monitor.stop().await;
        for osd in self.osds {
            let id = osd.osd().id;
            osd.stop().await.with_context(|| format!("stop osd.{id}"))?;
        }
        Ok(())
    }
}

/// Open the embedded metadata store in `data_dir` (made if missing), its calls timed.
fn open_meta(data_dir: &Path) -> anyhow::Result<LocalMeta> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("create data directory {}", data_dir.display()))?;
    let latency = Arc::new(basalt_meta::MetaLatency::default());
    let embedded =
        EmbeddedMeta::open(&data_dir.join("meta.json")).context("open cluster metadata")?;
    let store = Arc::new(basalt_meta::TimedMeta::new(
        Arc::new(embedded),
        latency.clone(),
    ));
    Ok(LocalMeta { store, latency })
}

/// The ids of this cluster's OSDs, and whether this is the first start (no OSD yet: then
/// `count` new ones).
async fn osd_ids(meta: &dyn MetaStore, count: u32) -> anyhow::Result<(Vec<u32>, bool)> {
    let known: Vec<u32> = meta
        .list(OSDS_PREFIX)
        .await?
        .iter()
        .filter_map(|(k, _, _)| k[OSDS_PREFIX.len()..].parse().ok())
        .collect();
    Ok(match known.is_empty() {
        true => ((0..count).collect(), true),
        false => (known, false),
    })
}

/// The cluster secret of this data directory: `DATA_DIR/keyring`, made (mode 0600) on the
/// first start. Every TCP connection to the OSDs must prove a key derived from it.
async fn local_secret(
    data_dir: &Path,
    meta: &dyn MetaStore,
) -> anyhow::Result<basalt_auth::ClusterSecret> {
    use basalt_auth::{registry, AuthError, ClusterSecret, Keyring};
    let path = data_dir.join("keyring");
    if path.exists() {
        let secret = Keyring::load(&path)?.secret()?.clone();
        registry::ensure_cluster(meta, &secret)
            .await
            .with_context(|| format!("check {}", path.display()))?;
        return Ok(secret);
    }
    match registry::check_cluster(meta, &ClusterSecret::generate()?).await {
        Err(AuthError::NotInitialised) => {}
        _ => bail!(
            "{} is missing, and this cluster's secret was in it: restore the file",
            path.display()
        ),
    }
    let secret = ClusterSecret::generate()?;
    Keyring::Cluster(secret.clone()).write_new(&path)?;
    registry::init_cluster(meta, &secret).await?;
    Ok(secret)
}

/// Where OSD `id` keeps its store.
fn osd_store_path(data_dir: &Path, id: u32) -> PathBuf {
    data_dir.join(format!("osd.{id}")).join("store.dat")
}

/// Start (and register) the OSDs `ids`, creating their stores on the first start; each
/// proves `secret`'s keys unless --insecure-no-auth.
async fn start_osds(
    config: &LocalConfig,
    meta: &LocalMeta,
    secret: &basalt_auth::ClusterSecret,
    map: &watch::Receiver<Arc<ClusterMap>>,
    pool: &PoolRecord,
    (ids, first_start): (&[u32], bool),
) -> anyhow::Result<Vec<RunningOsd>> {
    let authority = if config.insecure_no_auth {
        tracing::warn!(
            "--insecure-no-auth: OSDs accept connections WITHOUT authentication; \
             benchmark use only, never on a reachable network"
        );
        None
    } else {
        let authority = basalt_auth::Authority::new(secret.clone(), meta.store.clone());
        Some(Arc::new(authority))
    };
    let mut osds = Vec::with_capacity(ids.len());
    for &id in ids {
        let path = osd_store_path(&config.data_dir, id);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let osd_config = OsdConfig {
            id,
            // A one-machine cluster's capacity is a ceiling: 3 × 8 GiB reserved at the first
            // `basalt up` would surprise a laptop.
            store: basalt_osd::StoreLocation::SparseFile(path),
            store_options: StoreOptions {
                capacity_bytes: config.osd_size_bytes,
                object_size_bytes: pools::store_object_size(pool),
                wal_bytes: config.wal_bytes,
            },
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            network: match &config.data_tls {
                Some(tls) => basalt_osd::Network::Tls(tls.clone()),
                None => basalt_osd::Network::Tcp,
            },
            create_if_missing: first_start,
            incarnation: None,
            recovery: RecoveryConfig::default(),
            stray_scan: Some(Duration::from_secs(STRAY_SCAN_SECS)),
            auth: authority.clone(),
            io: config.io,
            // One process: its OSDs cannot fail apart, so no heartbeats or peer leases.
            heartbeat: None,
        };
        let registration = Registration {
            host: "localhost".into(),
            location: Default::default(),
            class: basalt_store::detect_device_class(&config.data_dir)
                .class
                .into(),
            lease_ttl_secs: LOCAL_LEASE_TTL_SECS,
            metrics_addr: None,
            version: crate::build::info().version,
        };
        let osd = RunningOsd::start(osd_config, map.clone(), meta.store.clone(), registration)
            .await
            .with_context(|| format!("start osd.{id}"))?;
        osd.osd().slow.set_threshold_ms(config.slow_op_ms);
        osds.push(osd);
    }
    Ok(osds)
}

/// This process's client of its own cluster: over TCP (--no-local-path) it proves
/// client.admin's key; else it calls the OSDs' handlers directly, and so do their
/// replication calls to each other.
fn local_client(
    config: &LocalConfig,
    meta: &LocalMeta,
    secret: basalt_auth::ClusterSecret,
    map: watch::Receiver<Arc<ClusterMap>>,
    osds: &[RunningOsd],
) -> Arc<Cluster> {
    let admin = basalt_auth::Keyring::Cluster(secret)
        .client_credentials()
        .with_tls(config.data_tls.clone());
    let admin = (!config.insecure_no_auth).then_some(admin);
    let cluster = Cluster::new_as(meta.store.clone(), map, admin);
    if config.local_path {
        for osd in osds {
            let handler = Arc::new(basalt_osd::LocalOsd(osd.osd().clone()));
            cluster.add_local_osd(osd.osd().id, &osd.handle.addr.to_string(), handler);
        }
        let linked: Vec<_> = osds
            .iter()
            .map(|o| (o.osd().clone(), o.handle.addr.to_string()))
            .collect();
        basalt_osd::link_in_process(&linked);
    }
    cluster
}

/// Wait until the map shows every OSD of this process up (this run) and every PG active.
async fn wait_ready(cluster: &Cluster, osds: &[RunningOsd]) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(READY_TIMEOUT_MS);
    // Bound: READY_TIMEOUT_MS of 50 ms rounds.
    loop {
        let map = cluster.map();
        let registered = osds.iter().all(|o| {
            map.osds
                .get(&o.osd().id)
                .is_some_and(|m| m.up && m.incarnation == o.osd().incarnation)
        });
        if registered {
            let records = basalt_client::status::pg_records(cluster).await?;
            let pgs = basalt_client::status::pg_states(&map, &records);
            if !pgs.is_empty() && pgs.iter().all(|p| p.state.starts_with("active")) {
                return Ok(());
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the cluster did not become active within {READY_TIMEOUT_MS} ms");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Serve `/metrics` of everything in this process: OSDs, metadata, client, frontends, S3.
async fn start_metrics(
    config: &LocalConfig,
    meta: &LocalMeta,
    cluster: &Arc<Cluster>,
    osds: &[RunningOsd],
    frontends: &Frontends,
) -> anyhow::Result<Option<MetricsTask>> {
    let Some(addr) = config.metrics else {
        return Ok(None);
    };
    let mut registry = metrics_http::registry();
    let collector = basalt_osd::metrics::OsdCollector::default();
    for osd in osds {
        collector.add(osd.osd());
    }
    registry.register_collector(Box::new(collector));
    registry.register_collector(Box::new(basalt_meta::MetaCollector(meta.latency.clone())));
    registry.register_collector(Box::new(cluster.collector()));
    registry.register_collector(Box::new(basalt_metrics::frontend::FrontendCollector::new(
        frontends.stats(),
    )));
    registry.register_collector(Box::new(frontends.s3_stats.clone()));
    Ok(Some(metrics_http::start(addr, registry).await?))
}
