//! The S3 gateway of `basalt up` (a [`crate::s3_gateway::S3Gateway`]) and its admin key: on
//! the first start an access key for the user "admin" is made and written to
//! DATA_DIR/s3-credentials (mode 0600).

use crate::s3_gateway::{bind_s3, S3Gateway, S3Settings};
use anyhow::Context;
use basalt_client::Cluster;
use basalt_proto::PoolId;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The file under the data directory holding the key that seals S3 secrets.
const S3_MASTER_KEY_FILE: &str = "s3-master.key";

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

/// Start `basalt up`'s gateway on `cluster`, bucket indexes in `pool` and their data in
/// `data_pool` (None: the same pool); first make the admin key if there is none.
pub(super) async fn start_gateway(
    settings: &S3Settings,
    data_dir: &Path,
    cluster: &Arc<Cluster>,
    pools: (PoolId, Option<PoolId>),
    stats: Arc<basalt_s3::stats::GatewayStats>,
) -> anyhow::Result<S3Gateway> {
    let master = master_key(data_dir)?;
    let creds = s3_credentials_path(data_dir);
    if !creds.exists() {
        write_admin_key(cluster, &master, &creds).await?;
    }
    let ring = Arc::new(basalt_s3::KeyRing::new(cluster.meta().clone(), master));
    let listener = bind_s3(settings.listen).await?;
    S3Gateway::serve(listener, settings, cluster, ring, pools, stats)
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
