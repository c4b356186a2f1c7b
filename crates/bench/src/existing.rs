//! `basalt bench storage --cluster etcd://...`: the benchmark's hold on an existing
//! multi-host cluster. It embeds the client library, creates its bench volume in a pool,
//! serves it over NBD on a private unix socket with the gateway `basalt nbd` runs
//! ([`VolumeExports`]), charges every OSD's CPU (read from its `/metrics`) to each step, and
//! removes what it created however the run ends.

use crate::cpu::CpuSource;
use crate::results::{ExistingClusterInfo, PoolSettings, StorageHost};
use crate::{ExistingCluster, StreamResult, UnderTest};
use anyhow::{bail, Context};
use basalt_client::Cluster;
use basalt_meta::schema::{alive_key, osd_key, AliveRecord, OsdRecord};
use basalt_nbd::VolumeExports;
use basalt_placement::{ClusterMap, PoolSpec};
use basalt_proto::size::format_size;
use basalt_proto::ObjectId;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Every volume the benchmark creates starts with this, so leftovers are recognisable.
pub const VOLUME_PREFIX: &str = "basalt-bench-";
/// Longest wait to reach the cluster's metadata and read its map.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait to create a volume (a metadata write).
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait to remove a volume: its data is purged on every OSD, retried across
/// failovers for up to the client's retry deadline.
const REMOVE_TIMEOUT: Duration = Duration::from_secs(150);
/// Longest unix socket path (sun_path holds 108 bytes with its NUL); longer paths fall back
/// to a loopback TCP port.
const MAX_SOCKET_PATH_BYTES: usize = 100;
/// Size of the never-written volume the built-in network test reads (sparse: a record only).
const STREAM_VOLUME_BYTES: u64 = 64 << 30;
/// Objects of that volume the built-in test cycles over per host.
const STREAM_OBJECTS: usize = 64;
/// Objects examined to find those whose primary is on the host.
const STREAM_SCAN_LIMIT: u64 = 1 << 16;
/// Reads the built-in test keeps in flight.
const STREAM_QUEUE_DEPTH: usize = 16;

/// An existing cluster reached through its metadata, and the pool the bench volume goes in.
pub struct Existing {
    rt: Arc<tokio::runtime::Runtime>,
    cluster: Arc<Cluster>,
    meta_url: String,
    pool: PoolSpec,
    info: ExistingClusterInfo,
    settings: PoolSettings,
    cpu: Vec<CpuSource>,
    /// Name stem of the volumes this run creates.
    stem: String,
}

impl Existing {
    /// Connect to the cluster `access` names and check that `pool` exists; read the storage
    /// hosts, the OSDs' metrics addresses and capacities, and earlier runs' leftovers.
    pub fn connect(access: &ClusterAccess, pool: &str) -> anyhow::Result<Existing> {
        let meta_url = access.meta_url.as_str();
        let rt = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("start the client runtime")?,
        );
        let cluster = rt
            .block_on(async { tokio::time::timeout(CONNECT_TIMEOUT, open_cluster(access)).await })
            .with_context(|| {
                format!(
                    "no answer from the cluster metadata at {meta_url} within {CONNECT_TIMEOUT:?}"
                )
            })??;
        let map = cluster.map();
        let Some(spec) = map.pools.values().find(|p| p.name == pool).cloned() else {
            let names: Vec<&str> = map.pools.values().map(|p| p.name.as_str()).collect();
            bail!(
                "pool \"{pool}\" is not in the cluster map at {meta_url} (pools there: {}); \
                 create it with `basalt pool create {pool} --meta {meta_url}` or choose one with \
                 --pool",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
        };
        let up: Vec<_> = map.osds.values().filter(|o| o.up).cloned().collect();
        if up.is_empty() {
            bail!("no OSD of the cluster at {meta_url} is up");
        }
        let (records, alive, volumes) = rt.block_on(async {
            let meta = cluster.meta();
            let mut records = Vec::new();
            let mut alive = Vec::new();
            for o in &up {
                let record = meta.get(&osd_key(o.id)).await?;
                records
                    .push(record.and_then(|(v, _)| serde_json::from_slice::<OsdRecord>(&v).ok()));
                let live = meta.get(&alive_key(o.id)).await?;
                alive.push(live.and_then(|(v, _)| serde_json::from_slice::<AliveRecord>(&v).ok()));
            }
            let volumes = cluster.list_volumes().await?;
            anyhow::Ok((records, alive, volumes))
        })?;

        let mut notes = Vec::new();
        let mut cpu = Vec::new();
        for (o, live) in up.iter().zip(&alive) {
            match live.as_ref().and_then(|a| a.metrics_addr.as_deref()) {
                Some(addr) => cpu.push(CpuSource::Metrics {
                    name: format!("osd.{}", o.id),
                    addr: reachable_metrics_addr(addr, &o.addr),
                }),
                None => notes.push(format!(
                    "osd.{} serves no /metrics (started with --metrics-listen off?): its CPU is \
                     not counted.",
                    o.id
                )),
            }
        }
        cpu.push(CpuSource::Process {
            name: "basalt bench (NBD gateway)".into(),
            pid: std::process::id(),
        });
        let leftovers: Vec<String> = volumes
            .iter()
            .filter(|v| v.name.starts_with(VOLUME_PREFIX))
            .map(|v| v.name.clone())
            .collect();
        if !leftovers.is_empty() {
            notes.push(format!(
                "Volumes of other or interrupted benchmark runs are in the cluster: {} (left \
                 alone; remove them with `basalt volume rm NAME` once no run uses them).",
                leftovers.join(", ")
            ));
        }
        let capacities: Vec<u64> = records.iter().flatten().map(|r| r.capacity_bytes).collect();
        let settings = PoolSettings {
            name: Some(spec.name.clone()),
            osds: up.len() as u32,
            replicas: spec.size,
            min_size: Some(spec.min_size),
            failure_domain: Some(spec.failure_domain.name().into()),
            pgs: spec.pg_count,
            object_size: format_size(u64::from(spec.object_size)),
            osd_size: capacity_range(&capacities),
            banner: None,
        };
        let info = ExistingClusterInfo {
            meta_url: meta_url.to_string(),
            hosts: storage_hosts(&map),
            osds_down: map.osds.values().filter(|o| !o.up).map(|o| o.id).collect(),
            notes,
        };
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let stem = format!(
            "{VOLUME_PREFIX}{}-{}",
            sanitize(host.trim()),
            std::process::id()
        );
        Ok(Existing {
            rt,
            cluster,
            meta_url: meta_url.to_string(),
            pool: spec,
            info,
            settings,
            cpu,
            stem,
        })
    }

    /// Create volume `name` of `size_bytes` in the pool (bounded).
    fn create(&self, name: &str, size_bytes: u64) -> anyhow::Result<()> {
        self.rt
            .block_on(async {
                tokio::time::timeout(
                    CREATE_TIMEOUT,
                    self.cluster.create_volume(name, size_bytes, self.pool.id),
                )
                .await
            })
            .with_context(|| format!("create volume {name}: no answer within {CREATE_TIMEOUT:?}"))?
            .with_context(|| format!("create volume {name} in pool {}", self.pool.name))?;
        Ok(())
    }

    /// The handle that removes volume `name` when closed or dropped.
    fn remover(&self, name: &str) -> Remover {
        Remover {
            rt: self.rt.clone(),
            cluster: self.cluster.clone(),
            name: name.to_string(),
            meta_url: self.meta_url.clone(),
            done: false,
        }
    }
}

/// How the benchmark reaches an existing cluster: what `basalt` daemons and admin commands
/// are given (`--meta` and etcd's TLS and user, `--keyring`, `--data-tls`), every part used.
#[derive(Clone, Debug, Default)]
pub struct ClusterAccess {
    /// The metadata URL, etcd://HOST:PORT[,HOST:PORT...][/NAMESPACE] (etcds:// for TLS).
    pub meta_url: String,
    /// etcd's CA, client certificate and user (`--meta-ca`, `--meta-cert`, `--meta-key`,
    /// `--meta-user`, `--meta-password-file`).
    pub meta: basalt_meta::MetaAccess,
    /// The keyring whose key the OSDs check (`--keyring`); required.
    pub keyring: Option<PathBuf>,
    /// The data-plane TLS directory (`--data-tls`): every OSD connection inside TLS.
    pub data_tls: Option<PathBuf>,
}

impl ClusterAccess {
    /// The cluster at `meta_url`, proving the key of the keyring at `keyring`, with no
    /// other setting.
    pub fn new(meta_url: &str, keyring: &Path) -> Self {
        Self {
            meta_url: meta_url.to_string(),
            keyring: Some(keyring.to_path_buf()),
            ..Self::default()
        }
    }
}

/// A client of the cluster `access` names: its keyring's key proven to the OSDs (which
/// refuse connections without), inside data-plane TLS when it names a TLS directory, the
/// metadata reached with its etcd TLS and user. Local files are checked before the network.
pub async fn open_cluster(access: &ClusterAccess) -> anyhow::Result<Arc<Cluster>> {
    let meta_url = &access.meta_url;
    let Some(keyring) = &access.keyring else {
        bail!(
            "--keyring FILE is required to measure the cluster at {meta_url} (or set \
             BASALT_KEYRING): its OSDs refuse unauthenticated connections"
        );
    };
    let tls = match &access.data_tls {
        Some(dir) => Some(basalt_auth::DataTls::load(dir).with_context(|| {
            format!(
                "--data-tls: load the data-plane TLS credentials of {}",
                dir.display()
            )
        })?),
        None => None,
    };
    let credentials = basalt_auth::Keyring::load(keyring)
        .with_context(|| format!("--keyring {}", keyring.display()))?
        .client_credentials()
        .with_tls(tls);
    let meta = basalt_meta::connect_meta_with(meta_url, &access.meta)
        .await
        .with_context(|| format!("connect to the cluster metadata at {meta_url}"))?;
    Cluster::connect_as(meta, Some(credentials))
        .await
        .context("read the cluster map")
}

/// `osd.addr`'s IP in place of an unspecified metrics IP (`--metrics-listen 0.0.0.0:P`).
fn reachable_metrics_addr(metrics: &str, data: &str) -> String {
    match (metrics.parse::<SocketAddr>(), data.parse::<SocketAddr>()) {
        (Ok(m), Ok(d)) if m.ip().is_unspecified() => SocketAddr::new(d.ip(), m.port()).to_string(),
        _ => metrics.to_string(),
    }
}

/// The IP part of an `IP:PORT` data-plane address.
fn ip_of(addr: &str) -> String {
    addr.parse::<SocketAddr>()
        .map(|a| a.ip().to_string())
        .unwrap_or_else(|_| addr.rsplit_once(':').map_or(addr, |(ip, _)| ip).to_string())
}

/// The distinct addresses of the OSDs that are up, each with its failure-domain names and
/// OSDs, in address order.
pub fn storage_hosts(map: &ClusterMap) -> Vec<StorageHost> {
    let mut hosts: Vec<StorageHost> = Vec::new();
    for o in map.osds.values().filter(|o| o.up) {
        let ip = ip_of(&o.addr);
        let i = match hosts.iter().position(|h| h.ip == ip) {
            Some(i) => i,
            None => {
                hosts.push(StorageHost {
                    ip,
                    ..StorageHost::default()
                });
                hosts.len() - 1
            }
        };
        let h = &mut hosts[i];
        if !h.names.contains(&o.host) {
            h.names.push(o.host.clone());
        }
        h.osds.push(o.id);
    }
    hosts.sort_by(|a, b| a.ip.cmp(&b.ip));
    hosts
}

/// `8G`, or `2G to 8G` when the stores differ; `?` when no record was readable.
fn capacity_range(capacities: &[u64]) -> String {
    match (capacities.iter().min(), capacities.iter().max()) {
        (Some(&lo), Some(&hi)) if lo == hi => format_size(lo),
        (Some(&lo), Some(&hi)) => format!("{} to {}", format_size(lo), format_size(hi)),
        _ => "?".into(),
    }
}

/// Letters, digits, '.', '_' and '-' of `text` (a volume name part); `host` if none.
fn sanitize(text: &str) -> String {
    let s: String = text
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(40)
        .collect();
    if s.is_empty() {
        "host".into()
    } else {
        s
    }
}

impl ExistingCluster for Existing {
    fn info(&self) -> ExistingClusterInfo {
        self.info.clone()
    }

    fn pool(&self) -> PoolSettings {
        self.settings.clone()
    }

    fn serve_volume(&self, size_bytes: u64, dir: &Path) -> anyhow::Result<Box<dyn UnderTest>> {
        let name = self.stem.clone();
        self.create(&name, size_bytes)?;
        // From here the volume is removed however this ends.
        let remover = self.remover(&name);
        let exports = Arc::new(VolumeExports::only(self.cluster.clone(), &name));
        let server = basalt_nbd::Server::new(exports);
        let socket = dir.join("nbd.sock");
        let _guard = self.rt.enter();
        let (uri, task) = if socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
            let listener = tokio::net::UnixListener::bind(&socket)
                .with_context(|| format!("listen for NBD on {}", socket.display()))?;
            let uri = format!("nbd+unix:///{name}?socket={}", socket.display());
            (uri, self.rt.spawn(server.clone().serve_unix(listener)))
        } else {
            let listener = self
                .rt
                .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
                .context("listen for NBD on 127.0.0.1")?;
            let uri = format!("nbd://{}/{name}", listener.local_addr()?);
            (uri, self.rt.spawn(server.clone().serve_tcp(listener)))
        };
        Ok(Box::new(Served {
            uri,
            server,
            task: Some(task),
            cpu: self.cpu.clone(),
            remover,
        }))
    }

    fn stream_from(&self, ip: &str, seconds: u32) -> anyhow::Result<StreamResult> {
        let name = format!("{}-net", self.stem);
        self.create(&name, STREAM_VOLUME_BYTES)?;
        let mut remover = self.remover(&name);
        let outcome =
            self.rt
                .block_on(stream(self.cluster.clone(), &self.pool, &name, ip, seconds));
        if let Some(failure) = remover.remove().err() {
            eprintln!("warning: {failure}");
        }
        let mib_s = outcome?;
        Ok(StreamResult {
            mib_s,
            method: format!(
                "built-in: {STREAM_QUEUE_DEPTH} concurrent {} reads of never-written objects \
                 whose primary is at {ip}, {seconds} s",
                format_size(u64::from(self.pool.object_size))
            ),
        })
    }
}

/// Read never-written objects of volume `name` whose primary OSD is at `ip`, whole objects
/// with [`STREAM_QUEUE_DEPTH`] in flight, for `seconds`; returns the MiB/s received.
async fn stream(
    cluster: Arc<Cluster>,
    pool: &PoolSpec,
    name: &str,
    ip: &str,
    seconds: u32,
) -> anyhow::Result<f64> {
    let volume = Arc::new(cluster.open_volume(name).await?);
    let inode = volume.info().id;
    let map = cluster.map();
    let mut objects = Vec::new();
    for index in 0..STREAM_SCAN_LIMIT {
        let pg = ClusterMap::pg_of(pool, ObjectId::new(inode, index));
        let primary = map.acting(pg).ok().and_then(|a| a.first().copied());
        let at_host = primary
            .and_then(|p| map.osd(p).ok())
            .is_some_and(|o| ip_of(&o.addr) == ip);
        if at_host {
            objects.push(index);
            if objects.len() == STREAM_OBJECTS {
                break;
            }
        }
    }
    if objects.is_empty() {
        bail!(
            "no PG of pool {} has its primary at {ip}: nothing there to stream from",
            pool.name
        );
    }
    let object_bytes = pool.object_size;
    let received = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(u64::from(seconds));
    let objects = Arc::new(objects);
    let mut readers = Vec::new();
    for k in 0..STREAM_QUEUE_DEPTH {
        let (volume, received, objects) = (volume.clone(), received.clone(), objects.clone());
        readers.push(tokio::spawn(async move {
            let mut n = k;
            while Instant::now() < deadline {
                let index = objects[n % objects.len()];
                let data = volume
                    .read(index * u64::from(object_bytes), object_bytes)
                    .await?;
                received.fetch_add(data.len() as u64, Ordering::Relaxed);
                n += STREAM_QUEUE_DEPTH;
            }
            anyhow::Ok(())
        }));
    }
    for r in readers {
        r.await.context("stream reader panicked")??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    Ok(received.load(Ordering::Relaxed) as f64 / (1u64 << 20) as f64 / elapsed)
}

/// Removes a volume the benchmark created, once: on [`Remover::remove`] or on drop.
struct Remover {
    rt: Arc<tokio::runtime::Runtime>,
    cluster: Arc<Cluster>,
    name: String,
    meta_url: String,
    done: bool,
}

impl Remover {
    /// Remove the volume (bounded); the error says how to remove it by hand.
    fn remove(&mut self) -> anyhow::Result<()> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let removed = self.rt.block_on(async {
            tokio::time::timeout(REMOVE_TIMEOUT, self.cluster.remove_volume(&self.name)).await
        });
        let why = match removed {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {REMOVE_TIMEOUT:?}"),
        };
        bail!(
            "could not remove the bench volume {}: {why}; remove it with `basalt volume rm {} \
             --meta {}`",
            self.name,
            self.name,
            self.meta_url
        )
    }
}

impl Drop for Remover {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("warning: {e:#}");
        }
    }
}

/// The bench volume served over NBD from this process.
struct Served {
    uri: String,
    server: Arc<basalt_nbd::Server>,
    task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    cpu: Vec<CpuSource>,
    remover: Remover,
}

impl Served {
    /// Stop serving: refuse new connections, end the open ones (fio has exited).
    fn stop_serving(&mut self) {
        self.server.shutdown();
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = self.remover.rt.block_on(task);
        }
    }
}

impl UnderTest for Served {
    fn uri(&self) -> &str {
        &self.uri
    }

    fn cpu_sources(&self) -> Vec<CpuSource> {
        self.cpu.clone()
    }

    fn close(&mut self) -> Vec<String> {
        self.stop_serving();
        let name = self.remover.name.clone();
        match self.remover.remove() {
            Ok(()) => vec![format!(
                "The bench volume `{name}` was removed from the cluster after the run."
            )],
            Err(e) => {
                eprintln!("warning: {e:#}");
                vec![format!("{}.", capitalized(&format!("{e:#}")))]
            }
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        // The remover (a field) removes the volume after this, if close did not.
        self.stop_serving();
    }
}

fn capitalized(text: &str) -> String {
    let mut c = text.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names() {
        // Goal: hosts are keyed by the IP of the data plane; an unspecified metrics IP is
        // replaced by the OSD's; capacities and volume name parts read as documented.
        assert_eq!(ip_of("10.0.0.2:6800"), "10.0.0.2");
        assert_eq!(ip_of("[fd00::2]:6800"), "fd00::2");
        assert_eq!(
            reachable_metrics_addr("0.0.0.0:7800", "10.0.0.2:6800"),
            "10.0.0.2:7800"
        );
        assert_eq!(
            reachable_metrics_addr("10.0.0.9:7800", "10.0.0.2:6800"),
            "10.0.0.9:7800"
        );
        assert_eq!(capacity_range(&[8 << 30, 8 << 30]), "8G");
        assert_eq!(capacity_range(&[2 << 30, 8 << 30]), "2G to 8G");
        assert_eq!(capacity_range(&[]), "?");
        assert_eq!(sanitize("web-1.example"), "web-1.example");
        assert_eq!(sanitize("a b/c"), "abc");
        assert_eq!(sanitize(""), "host");
    }
}
