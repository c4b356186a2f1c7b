//! The pools of `basalt up`, made on its first start: the main pool "rbd" (replicated or
//! erasure coded) and, beside an erasure-coded one, the replicated "s3index" pool holding
//! S3 bucket indexes. Their defaults are the client library's ([`PoolRequest`]).

use super::LocalConfig;
use anyhow::{bail, Context};
use basalt_client::{ClusterShape, PoolRequest};
use basalt_meta::schema::{pool_key, PoolRecord, MAP_KEY};
use basalt_meta::MetaStore;

/// The pool `basalt up` creates.
pub const POOL_NAME: &str = "rbd";

/// For an erasure-coded pool, the replicated pool holding S3 bucket indexes.
pub const S3_INDEX_POOL: &str = "s3index";

/// Placement groups of the s3index pool.
const S3_INDEX_PGS: u32 = 8;

/// The main pool: read back, or created on the first start.
pub(super) async fn main_pool(
    meta: &dyn MetaStore,
    config: &LocalConfig,
) -> anyhow::Result<PoolRecord> {
    if let Some((bytes, _)) = meta.get(&pool_key(POOL_NAME)).await? {
        return serde_json::from_slice(&bytes).context("decode the pool record");
    }
    if meta.get(MAP_KEY).await?.is_some() {
        bail!(
            "{} holds a cluster made by an older Basalt (no pool record); start from an \
             empty --data-dir",
            config.data_dir.display()
        );
    }
    // Created before the OSDs register: nothing to check its placement against, and the
    // OSDs it needs are started next.
    let pool = first_start_pool(config)?;
    check_store_geometry(config, &pool)?;
    Ok(basalt_client::create_pool(meta, pool).await?)
}

/// Refuse store options no OSD's store could be made with, before anything is created.
fn check_store_geometry(config: &LocalConfig, pool: &PoolRecord) -> anyhow::Result<()> {
    let opts = basalt_store::StoreOptions {
        capacity_bytes: config.osd_size_bytes,
        object_size_bytes: store_object_size(pool),
        wal_bytes: config.wal_bytes,
    };
    basalt_store::StoreLayout::compute(&opts, 0)
        .map(drop)
        .map_err(|e| anyhow::anyhow!("--osd-size, --object-size, --wal-size: {e}"))
}

/// Settings of the pool `basalt up` creates on first start, checked.
fn first_start_pool(config: &LocalConfig) -> anyhow::Result<PoolRecord> {
    let object_size = u32::try_from(config.object_size_bytes).unwrap_or(u32::MAX);
    // One host: members of a PG are kept on distinct OSDs (distinct store files).
    let request = PoolRequest {
        name: POOL_NAME.into(),
        pg_count: Some(config.pgs),
        failure_domain: Some("osd".into()),
        ..PoolRequest::default()
    };
    let osds = config.osds;
    if let Some(text) = &config.ec {
        let scheme = basalt_ec::Scheme::parse(text).map_err(|e| anyhow::anyhow!("--ec: {e}"))?;
        let (k, m) = (scheme.k() as u32, scheme.m() as u32);
        if osds < k + m {
            bail!("--ec {k}+{m} needs --osds {} or more, got {osds}", k + m);
        }
        let request = PoolRequest {
            ec: Some(basalt_proto::EcProfile { k, m }),
            object_size: Some(object_size.saturating_mul(k)),
            ..request
        };
        return Ok(request.record(&ClusterShape::default()));
    }
    let replicas = config.replicas;
    if osds == 0 || replicas == 0 || replicas > osds {
        bail!("--replicas must be between 1 and --osds ({osds}), got {replicas}");
    }
    let request = PoolRequest {
        size: Some(replicas),
        object_size: Some(object_size),
        ..request
    };
    Ok(request.record(&ClusterShape::default()))
}

/// The object size of the OSDs' stores for `pool`: its object size, or for an
/// erasure-coded pool the size of one chunk.
pub(super) fn store_object_size(pool: &PoolRecord) -> u32 {
    pool.object_size / pool.ec.map_or(1, |e| e.k)
}

/// S3 bucket indexes need a replicated pool: beside an erasure-coded main pool they get one
/// of their own (read back, or created), and keep their data in the main pool.
pub(super) async fn s3_index_pool(
    meta: &dyn MetaStore,
    pool: &PoolRecord,
    osds: u32,
) -> anyhow::Result<Option<PoolRecord>> {
    if pool.ec.is_none() {
        return Ok(None);
    }
    if let Some((bytes, _)) = meta.get(&pool_key(S3_INDEX_POOL)).await? {
        let record = serde_json::from_slice(&bytes).context("decode the s3index pool record")?;
        return Ok(Some(record));
    }
    let request = PoolRequest {
        name: S3_INDEX_POOL.into(),
        size: Some(osds.min(3)),
        pg_count: Some(S3_INDEX_PGS),
        failure_domain: Some("osd".into()),
        object_size: Some(store_object_size(pool)),
        ..PoolRequest::default()
    };
    let record = request.record(&ClusterShape::default());
    Ok(Some(basalt_client::create_pool(meta, record).await?))
}
