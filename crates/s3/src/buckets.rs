//! Bucket records in cluster metadata. A bucket is small and rare (one record each); its
//! objects are not here: they are indexed in cluster data (see `index`).

use basalt_client::{ClientError, Cluster};
use basalt_proto::{make_inode, InodeId, PoolId};
use serde::{Deserialize, Serialize};

/// Metadata key prefix of bucket records.
pub const BUCKETS_PREFIX: &str = basalt_meta::schema::S3_BUCKETS_PREFIX;
/// Version of the bucket record format.
pub const BUCKET_FORMAT_VERSION: u32 = 1;
/// Index shards of a new bucket. Each shard is one KV table object, rewritten whole on each
/// update, so more shards keep updates small and spread them over PGs.
pub const DEFAULT_INDEX_SHARDS: u32 = 16;
/// Largest chunk of object data stored in one cluster object.
pub const MAX_CHUNK_BYTES: u32 = 4 << 20;

/// A bucket as stored in metadata.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketRecord {
    pub format_version: u32,
    pub name: String,
    /// The user that owns it (see `keys::KeyRecord::user`).
    pub owner: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    pub pool: PoolId,
    /// The inode the bucket's index shards (and, without `data_inode`, its data chunks)
    /// live under.
    pub inode: InodeId,
    /// The inode of the bucket's data chunks when they live in another pool than the index
    /// (an erasure-coded data pool: the index needs a replicated one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_inode: Option<InodeId>,
    pub index_shards: u32,
    /// Bytes of object data per cluster object.
    pub chunk_bytes: u32,
    /// Versioning, once it was ever enabled (None: never; see `versions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versioning: Option<Versioning>,
    /// The bucket policy document, as set (checked by `policy::parse` then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The public access block, when one is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_access_block: Option<PublicAccessBlock>,
    /// Lifecycle rules (PutBucketLifecycleConfiguration), applied by the gateways' worker.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lifecycle: Vec<crate::lifecycle::Rule>,
    /// New objects without SSE headers get SSE-S3 (PutBucketEncryption).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default_sse: bool,
    /// Object lock, when enabled (it needs versioning, which then cannot be suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock: Option<crate::lock::BucketLock>,
    /// CORS rules (PutBucketCors), applied by the gateway's front service.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cors: Vec<crate::cors::Rule>,
    /// The bucket's tags (PutBucketTagging).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
    /// Object ownership: whether ACLs act (records without it are BucketOwnerEnforced).
    #[serde(default, skip_serializing_if = "is_enforced")]
    pub ownership: crate::acl::Ownership,
    /// The bucket's ACL beyond its owner's FULL_CONTROL (acts when ACLs are enabled).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acl: Vec<crate::acl::Grant>,
    /// Never stored: set on the copy of the record a request was authorised with when the
    /// versions it reads must still be checked (their owner and ACL; see `acl`).
    #[serde(skip)]
    pub version_check: Option<crate::acl::VersionCheck>,
}

fn is_enforced(o: &crate::acl::Ownership) -> bool {
    *o == crate::acl::Ownership::BucketOwnerEnforced
}

/// S3's public access block of a bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublicAccessBlock {
    pub block_public_acls: bool,
    pub ignore_public_acls: bool,
    pub block_public_policy: bool,
    pub restrict_public_buckets: bool,
}

/// A bucket's versioning, once enabled: it can be suspended, never turned off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Versioning {
    Enabled,
    Suspended,
}

fn key(name: &str) -> String {
    format!("{BUCKETS_PREFIX}{name}")
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Why a bucket operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("bucket {0} exists")]
    Exists(String),
    #[error("bucket {0} does not exist")]
    Missing(String),
    #[error("the record of bucket {name} is unreadable: {reason}")]
    Corrupt { name: String, reason: String },
    #[error("bucket {0} is being changed by others: try again")]
    Busy(String),
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("{0}")]
    Meta(#[from] basalt_meta::MetaError),
}

/// Look up a bucket.
pub async fn get_bucket(
    cluster: &Cluster,
    name: &str,
) -> Result<Option<BucketRecord>, BucketError> {
    Ok(cluster
        .meta()
        .get(&key(name))
        .await?
        .and_then(|(v, _)| serde_json::from_slice(&v).ok()))
}

/// Every bucket.
pub async fn list_buckets(cluster: &Cluster) -> Result<Vec<BucketRecord>, BucketError> {
    let mut out: Vec<BucketRecord> = cluster
        .meta()
        .list(BUCKETS_PREFIX)
        .await?
        .into_iter()
        .filter_map(|(_, v, _)| serde_json::from_slice(&v).ok())
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

impl BucketRecord {
    /// The inode of the bucket's data chunks.
    pub fn data_inode(&self) -> InodeId {
        self.data_inode.unwrap_or(self.inode)
    }
}

/// Create a bucket owned by `owner`, with its object ownership and ACL: its index in `pool`
/// (replicated), its data in `data_pool` (replicated or erasure coded; None: `pool`).
pub async fn create_bucket(
    cluster: &Cluster,
    name: &str,
    owner: &str,
    (pool, data_pool): (PoolId, Option<PoolId>),
    ownership: crate::acl::Ownership,
    acl: Vec<crate::acl::Grant>,
) -> Result<BucketRecord, BucketError> {
    if get_bucket(cluster, name).await?.is_some() {
        return Err(BucketError::Exists(name.into()));
    }
    let map = cluster.map();
    let spec_of = |pool: PoolId| {
        map.pools
            .get(&pool)
            .ok_or(ClientError::Map(basalt_placement::MapError::NoSuchPool {
                pool,
            }))
    };
    let index_spec = spec_of(pool)?;
    if index_spec.ec.is_some() {
        return Err(BucketError::Client(ClientError::Invalid {
            reason: format!(
                "pool {} is erasure coded: bucket indexes need a replicated pool (keep the \
                 erasure-coded pool for the data: --data-pool)",
                index_spec.name
            ),
        }));
    }
    let data_pool = data_pool.filter(|&d| d != pool);
    let spec = match data_pool {
        Some(d) => spec_of(d)?,
        None => index_spec,
    };
    let family = basalt_client::next_family(cluster.meta().as_ref()).await?;
    let record = BucketRecord {
        format_version: BUCKET_FORMAT_VERSION,
        name: name.into(),
        owner: owner.into(),
        created: now_secs(),
        pool,
        inode: make_inode(pool, family, 0),
        data_inode: data_pool.map(|d| make_inode(d, family, 0)),
        index_shards: DEFAULT_INDEX_SHARDS,
        chunk_bytes: spec.object_size.min(MAX_CHUNK_BYTES),
        versioning: None,
        policy: None,
        public_access_block: None,
        tags: Default::default(),
        lifecycle: Vec::new(),
        cors: Vec::new(),
        object_lock: None,
        default_sse: false,
        ownership,
        acl,
        version_check: None,
    };
    let value = serde_json::to_vec(&record).expect("bucket record serialises");
    match cluster
        .meta()
        .compare_and_swap(&key(name), 0, value)
        .await?
    {
        Some(_) => Ok(record),
        None => Err(BucketError::Exists(name.into())),
    }
}

/// Change a bucket's record with `change` (compare-and-swap on the record, retried against
/// a racing change of another field); returns the record as written. `change` may refuse.
pub async fn update_bucket<E: From<BucketError>>(
    cluster: &Cluster,
    name: &str,
    mut change: impl FnMut(&mut BucketRecord) -> Result<(), E>,
) -> Result<BucketRecord, E> {
    // Bound: each round loses only to another change of the record, which is rare.
    for _ in 0..16 {
        let Some((value, rev)) = cluster
            .meta()
            .get(&key(name))
            .await
            .map_err(BucketError::from)?
        else {
            return Err(BucketError::Missing(name.into()).into());
        };
        let mut record: BucketRecord =
            serde_json::from_slice(&value).map_err(|e| BucketError::Corrupt {
                name: name.into(),
                reason: e.to_string(),
            })?;
        change(&mut record)?;
        let value = serde_json::to_vec(&record).expect("bucket record serialises");
        if cluster
            .meta()
            .compare_and_swap(&key(name), rev, value)
            .await
            .map_err(BucketError::from)?
            .is_some()
        {
            return Ok(record);
        }
    }
    Err(BucketError::Busy(name.into()).into())
}

/// Set a bucket's versioning; returns the record as written.
pub async fn set_versioning(
    cluster: &Cluster,
    name: &str,
    versioning: Versioning,
) -> Result<BucketRecord, BucketError> {
    update_bucket(cluster, name, |r| {
        r.versioning = Some(versioning);
        Ok::<(), BucketError>(())
    })
    .await
}

/// Remove a bucket's record and every cluster object under its inode. The caller checked
/// that it holds no object. Objects go first: a crash part-way leaves an empty bucket that
/// can be deleted again.
pub async fn delete_bucket(cluster: &Cluster, record: &BucketRecord) -> Result<(), BucketError> {
    cluster.purge(record.inode, 0).await?;
    if record.data_inode() != record.inode {
        cluster.purge(record.data_inode(), 0).await?;
    }
    cluster.flush().await?;
    match cluster.meta().get(&key(&record.name)).await? {
        Some((_, rev)) => {
            cluster
                .meta()
                .compare_and_delete(&key(&record.name), rev)
                .await?;
            Ok(())
        }
        None => Err(BucketError::Missing(record.name.clone())),
    }
}
