//! The S3 gateway of `basalt up`, and its admin key: on the first start an access key for
//! the user "admin" is made and written to DATA_DIR/s3-credentials (mode 0600).

use anyhow::Context;
use basalt_client::Cluster;
use basalt_proto::PoolId;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The file under the data directory holding the key that seals S3 secrets.
const S3_MASTER_KEY_FILE: &str = "s3-master.key";

/// Settings of `basalt up`'s S3 gateway (the `--s3-*` flags).
#[derive(Clone, Debug)]
pub struct S3Settings {
    pub listen: SocketAddr,
    /// Base domain of virtual-host-style requests (BUCKET.DOMAIN).
    pub domain: String,
    pub reclaim_after: Duration,
    pub lifecycle_every: Duration,
    pub lifecycle_day: Duration,
    pub body_idle_timeout: Duration,
    pub max_connections: usize,
}

/// The S3 credentials file of `basalt up` (AWS shared-credentials format, profile "basalt").
pub fn s3_credentials_path(data_dir: &Path) -> PathBuf {
    data_dir.join("s3-credentials")
}

/// The key sealing S3 secrets of the cluster in `data_dir` (made on first use).
pub(super) fn master_key(data_dir: &Path) -> anyhow::Result<basalt_s3::MasterKey> {
    Ok(basalt_s3::MasterKey::load(
        &data_dir.join(S3_MASTER_KEY_FILE),
        true,
    )?)
}

/// A running S3 gateway: where it listens, its task, and how to stop it.
pub(super) struct S3Gateway {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    stop: watch::Sender<bool>,
}

impl S3Gateway {
    /// Start it on `cluster`, bucket indexes in `pool` and their data in `data_pool`
    /// (None: the same pool); first make the admin key if there is none.
    pub async fn start(
        settings: &S3Settings,
        data_dir: &Path,
        cluster: &Arc<Cluster>,
        (pool, data_pool): (PoolId, Option<PoolId>),
        stats: Arc<basalt_s3::stats::GatewayStats>,
    ) -> anyhow::Result<Self> {
        let master = master_key(data_dir)?;
        let creds = s3_credentials_path(data_dir);
        if !creds.exists() {
            write_admin_key(cluster, &master, &creds).await?;
        }
        let ring = Arc::new(basalt_s3::KeyRing::new(cluster.meta().clone(), master));
        let listen = settings.listen;
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listen for S3 on {listen}"))?;
        let addr = listener.local_addr()?;
        let at_least_1s = |d: Duration| d.max(Duration::from_secs(1));
        let config = basalt_s3::GatewayConfig {
            pool,
            data_pool,
            domain: Some(settings.domain.clone()),
            reclaim_after: at_least_1s(settings.reclaim_after),
            lifecycle_every: at_least_1s(settings.lifecycle_every),
            lifecycle_day: at_least_1s(settings.lifecycle_day),
            stats,
            body_idle_timeout: at_least_1s(settings.body_idle_timeout),
            max_connections: settings.max_connections.max(1),
        };
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

    /// Objvols over this cluster's own buckets read them through this gateway.
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

/// Make an access key for "admin" and write it to `creds` (mode 0600, synced).
async fn write_admin_key(
    cluster: &Cluster,
    master: &basalt_s3::MasterKey,
    creds: &Path,
) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let (record, secret) =
        basalt_s3::keys::create_key(cluster.meta().as_ref(), master, "admin").await?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(creds)
        .with_context(|| format!("create {}", creds.display()))?;
    write!(
        f,
        "[basalt]\naws_access_key_id = {}\naws_secret_access_key = {secret}\n",
        record.access_key
    )
    .and_then(|_| f.sync_all())
    .with_context(|| format!("write {}", creds.display()))
}
