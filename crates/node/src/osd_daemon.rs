//! `basalt osd`: one storage daemon of a multi-host cluster, with its `/metrics` and (by
//! default) a monitor candidate. Its OSD starts, like every OSD, through
//! [`basalt_osd::RunningOsd`].

use crate::metrics_http::{self, MetricsTask, Shared};
use crate::monitor::{Monitor, MonitorSettings};
use anyhow::Context;
use basalt_meta::MetaStore;
use basalt_osd::{OsdConfig, RecoveryConfig, Registration, RunningOsd};
use basalt_store::StoreOptions;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Everything `basalt osd` is started with, checked by the caller.
#[derive(Clone, Debug)]
pub struct OsdDaemonConfig {
    /// Directory of the OSD: its store file and identity.
    pub data: PathBuf,
    /// Where the store lives: the file DATA/store.dat (None), or a block device prepared
    /// with `basalt disk prepare` (its identity osd.json stays in `data`).
    pub device: Option<PathBuf>,
    /// Leave a new store file sparse (its capacity a ceiling, not a reservation): test
    /// clusters on one disk.
    pub sparse: bool,
    /// Data-plane address (routable: others reach the OSD there).
    pub listen: SocketAddr,
    /// OSD id wanted on first start (None: the next free one).
    pub id: Option<u32>,
    /// Failure-domain name of this machine.
    pub host: String,
    /// Where this machine stands above its host (`zone`, `rack`; empty: not said).
    pub location: std::collections::BTreeMap<String, String>,
    /// The store's device class (None: detected from the device or the data directory).
    pub device_class: Option<String>,
    /// Store capacity and object size (first start).
    pub capacity_bytes: u64,
    pub object_size_bytes: u32,
    /// WAL size of a new store (0: chosen from the capacity).
    pub wal_bytes: u64,
    pub lease_ttl_secs: u64,
    pub recovery: RecoveryConfig,
    /// How often to scan for stray copies (None: never).
    pub stray_scan: Option<Duration>,
    pub slow_op_ms: u64,
    /// The monitor candidate to run beside it (None: none).
    pub monitor: Option<MonitorSettings>,
    /// Where to serve `/metrics` (None: nowhere).
    pub metrics: Option<SocketAddr>,
    /// Data-plane TLS (None: plain TCP).
    pub data_tls: Option<Arc<basalt_auth::DataTls>>,
    /// How the store does its I/O.
    pub io: basalt_store::IoOptions,
    /// Heartbeats with the peers of its PGs (None: none, failures noticed by leases only).
    pub heartbeat: Option<basalt_osd::HeartbeatConfig>,
}

/// A running `basalt osd`.
pub struct OsdDaemon {
    pub id: u32,
    pub addr: SocketAddr,
    pub incarnation: u64,
    pub store: PathBuf,
    /// How the store's I/O runs (`direct uring`, ...).
    pub io_mode: String,
    /// The store's device class, detected or given.
    pub class: String,
    /// Where `/metrics` is served.
    pub metrics: Option<SocketAddr>,
    osd: RunningOsd,
    monitor: Option<Monitor>,
    metrics_task: Option<MetricsTask>,
    /// Records the newest map epoch in the data directory (`basalt_osd::check_map_epoch`).
    epochs: tokio::task::JoinHandle<()>,
}

/// With `--device`: the store on it must be this data directory's (recorded on first use),
/// so that a renamed device never starts as another OSD's. A device without a store is left
/// to the OSD, which refuses it saying how to prepare it.
fn check_device_store(config: &OsdDaemonConfig) -> anyhow::Result<()> {
    let Some(device) = &config.device else {
        return Ok(());
    };
    let found = basalt_store::prepare::inspect(device)
        .with_context(|| format!("read the store on {}", device.display()))?;
    if let Some(store) = found {
        basalt_osd::bind_device_store(&config.data, device, store.store_id)?;
    }
    Ok(())
}

/// The store's path and location: the device, or DATA/store.dat.
fn store_location(config: &OsdDaemonConfig) -> (PathBuf, basalt_osd::StoreLocation) {
    use basalt_osd::StoreLocation;
    match &config.device {
        Some(device) => (device.clone(), StoreLocation::Device(device.clone())),
        None => {
            let file = config.data.join("store.dat");
            let location = match config.sparse {
                true => StoreLocation::SparseFile(file.clone()),
                false => StoreLocation::File(file.clone()),
            };
            (file, location)
        }
    }
}

impl OsdDaemon {
    /// Start the OSD of `config` in the cluster of `meta` (whose calls `meta_latency`
    /// times), proving `secret`'s keys: its `/metrics` first (the OSD registers its
    /// address), then the OSD, then the monitor candidate.
    pub async fn start(
        config: OsdDaemonConfig,
        meta: Arc<dyn MetaStore>,
        meta_latency: Arc<basalt_meta::MetaLatency>,
        secret: basalt_auth::ClusterSecret,
    ) -> anyhow::Result<Self> {
        let dir = &config.data;
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let authority = Arc::new(basalt_auth::Authority::new(secret, meta.clone()));
        let (id, is_new) = basalt_osd::identity(dir, config.id, meta.as_ref()).await?;
        check_device_store(&config)?;
        let map = basalt_client::follow_map(meta.clone())
            .await
            .context("read the cluster map")?;
        // Metadata restored from a backup older than what this OSD saw: fail stop.
        basalt_osd::check_map_epoch(dir, id, map.borrow().epoch)?;
        let epochs = tokio::spawn(basalt_osd::record_map_epochs(dir.clone(), map.clone()));
        let collector = Arc::new(basalt_osd::metrics::OsdCollector::default());
        let mut registry = metrics_http::registry();
        registry.register_collector(Box::new(Shared(collector.clone())));
        registry.register_collector(Box::new(basalt_meta::MetaCollector(meta_latency)));
        let metrics_task = metrics_http::start_if(config.metrics, registry).await?;
        let (store, location) = store_location(&config);
        let osd_config = OsdConfig {
            id,
            store: location,
            store_options: StoreOptions {
                capacity_bytes: config.capacity_bytes,
                object_size_bytes: config.object_size_bytes,
                wal_bytes: config.wal_bytes,
            },
            listen: config.listen,
            network: match &config.data_tls {
                Some(tls) => basalt_osd::Network::Tls(tls.clone()),
                None => basalt_osd::Network::Tcp,
            },
            create_if_missing: is_new,
            incarnation: None,
            recovery: config.recovery,
            stray_scan: config.stray_scan,
            auth: Some(authority),
            io: config.io,
            heartbeat: config.heartbeat,
        };
        let class = match &config.device_class {
            Some(class) => class.clone(),
            None => {
                let under = config.device.as_deref().unwrap_or(dir);
                let detected = basalt_store::detect_device_class(under);
                tracing::info!(
                    osd = id,
                    "device class {} ({}; --device-class overrides)",
                    detected.class,
                    detected.reason
                );
                detected.class.to_string()
            }
        };
        let registration = Registration {
            host: config.host.clone(),
            location: config.location.clone(),
            class: class.clone(),
            lease_ttl_secs: config.lease_ttl_secs.max(2),
            metrics_addr: metrics_task.as_ref().map(|m| m.0.to_string()),
            version: crate::build::info().version,
        };
        let osd = RunningOsd::start(osd_config, map, meta.clone(), registration)
            .await
            .with_context(|| format!("start osd.{id}"))?;
        osd.osd().slow.set_threshold_ms(config.slow_op_ms);
        collector.add(osd.osd());
        let monitor = config.monitor.map(|settings| {
            let holder = format!("osd.{id} on {}", config.host);
            Monitor::spawn(meta.clone(), holder, settings)
        });
        Ok(Self {
            id,
            addr: osd.handle.addr,
            incarnation: osd.osd().incarnation,
            store,
            io_mode: osd.osd().store.io_mode(),
            class,
            metrics: metrics_task.as_ref().map(|m| m.0),
            osd,
            monitor,
            metrics_task,
            epochs,
        })
    }

    /// Stop cleanly: the monitor candidate, then the OSD (its lease revoked, its store
    /// closed).
    pub async fn stop(self) -> anyhow::Result<()> {
        if let Some(m) = self.monitor {
            m.stop().await;
        }
        self.epochs.abort();
        let id = self.id;
        self.osd
            .stop()
            .await
            .with_context(|| format!("stop osd.{id}"))?;
        if let Some((_, task)) = self.metrics_task {
            task.abort();
        }
        Ok(())
    }
}

/// This machine's name (the default failure domain of its OSDs).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}
