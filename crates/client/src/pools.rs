//! Pools: creating a pool record (the monitor then puts the pool in the map) and allocating
//! its id.

use crate::error::ClientError;
use basalt_meta::schema::{
    pool_key, LayerRecord, PoolRecord, IMAGES_PREFIX, LAYERS_PREFIX, NEXT_POOL_ID_KEY,
    OBJVOLS_PREFIX, PGS_PREFIX, S3_BUCKETS_PREFIX, VOLUMES_PREFIX,
};
use basalt_meta::MetaStore;
use basalt_placement::{ClusterMap, PoolSpec};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Most replicas a pool may ask for.
pub const POOL_SIZE_MAX: u32 = 16;
/// Most placement groups a pool may have.
pub const POOL_PGS_MAX: u32 = 65536;

fn invalid(reason: String) -> ClientError {
    ClientError::Invalid { reason }
}

/// Check a pool name: 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'.
pub fn check_pool_name(name: &str) -> Result<(), ClientError> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(ok_char)
        || name.starts_with(['.', '-'])
    {
        return Err(invalid(format!(
            "pool name \"{name}\" must be 1 to 64 letters, digits, '.', '_' or '-', not starting \
             with '.' or '-'"
        )));
    }
    Ok(())
}

/// Check a new pool's settings; the message names the setting as the CLI flag that sets it.
pub fn check_pool(record: &PoolRecord) -> Result<(), ClientError> {
    let PoolRecord {
        size,
        min_size,
        pg_count,
        object_size,
        ..
    } = *record;
    let fd = record.failure_domain.as_str();
    if let Some(ec) = record.ec {
        check_ec(ec, size, min_size, object_size)?;
    } else if size == 0 || size > POOL_SIZE_MAX {
        return Err(invalid(format!(
            "--size must be between 1 and {POOL_SIZE_MAX}, got {size}"
        )));
    }
    if min_size == 0 || min_size > size {
        return Err(invalid(format!(
            "--min-size must be between 1 and --size ({size}), got {min_size}"
        )));
    }
    if pg_count == 0 || pg_count > POOL_PGS_MAX {
        return Err(invalid(format!(
            "--pgs must be between 1 and {POOL_PGS_MAX}, got {pg_count}"
        )));
    }
    if basalt_placement::FailureDomain::parse(fd).is_none() {
        return Err(invalid(format!(
            "--failure-domain must be osd, host, rack or zone, got \"{fd}\""
        )));
    }
    if let Some(class) = &record.device_class {
        basalt_placement::check_device_class(class).map_err(invalid)?;
    }
    if record.ec.is_none()
        && (!object_size.is_power_of_two() || !(4096..=4 << 20).contains(&object_size))
    {
        return Err(invalid(format!(
            "--object-size must be a power of two between 4K and 4M, got {object_size}"
        )));
    }
    check_pool_name(&record.name)
}

/// Check an erasure-coded pool's settings: a supported K+M, size K+M, min_size K..=K+M,
/// and stripes of K chunks that are each a power of two between 4K and 4M (the OSDs' store
/// object size: a chunk is one store object).
fn check_ec(
    ec: basalt_proto::EcProfile,
    size: u32,
    min_size: u32,
    object_size: u32,
) -> Result<(), ClientError> {
    let scheme = basalt_ec::Scheme::new(ec.k, ec.m).map_err(|e| invalid(format!("--ec: {e}")))?;
    let width = scheme.width() as u32;
    if size != width {
        return Err(invalid(format!(
            "an erasure-coded pool {ec} has {width} chunks per stripe, so size {width}, got {size}"
        )));
    }
    if min_size < ec.k || min_size > width {
        return Err(invalid(format!(
            "--min-size of an erasure-coded pool {ec} must be between {} and {width} (default {}), \
             got {min_size}",
            ec.k,
            ec.k + 1
        )));
    }
    let chunk = object_size / ec.k;
    if !object_size.is_multiple_of(ec.k)
        || !chunk.is_power_of_two()
        || !(4096..=4 << 20).contains(&chunk)
    {
        return Err(invalid(format!(
            "--object-size of an erasure-coded pool {ec} must be {} × a power of two between 4K \
             and 4M (each chunk is one object of the OSDs' stores), got {object_size}",
            ec.k
        )));
    }
    Ok(())
}

/// Allocate a pool id (compare-and-swap on a counter).
async fn next_pool_id(meta: &dyn MetaStore) -> Result<u32, ClientError> {
    let Some(id) = basalt_meta::next_counter(meta, NEXT_POOL_ID_KEY, 1).await? else {
        return Err(invalid(
            "could not allocate a pool id: too much contention".into(),
        ));
    };
    u16::try_from(id)
        .map(u32::from)
        .map_err(|_| invalid("no pool ids left".into()))
}

/// Create a pool record with a fresh id; the monitor puts it in the map.
pub async fn create_pool(
    meta: &dyn MetaStore,
    mut record: PoolRecord,
) -> Result<PoolRecord, ClientError> {
    check_pool(&record)?;
    let exists = || ClientError::PoolExists {
        name: record.name.clone(),
    };
    if meta.get(&pool_key(&record.name)).await?.is_some() {
        return Err(exists());
    }
    record.id = next_pool_id(meta).await?;
    let value = serde_json::to_vec(&record).expect("a pool record serialises");
    if meta
        .compare_and_swap(&pool_key(&record.name), 0, value)
        .await?
        .is_none()
    {
        return Err(exists());
    }
    Ok(record)
}

/// Pool `name`'s record and its revision (for a compare-and-swap); NoSuchPool when absent.
pub async fn read_pool(
    meta: &dyn MetaStore,
    name: &str,
) -> Result<(PoolRecord, basalt_meta::Revision), ClientError> {
    let key = pool_key(name);
    let Some((bytes, rev)) = meta.get(&key).await? else {
        return Err(ClientError::NoSuchPool { name: name.into() });
    };
    let record = serde_json::from_slice(&bytes).map_err(|e| ClientError::BadReply {
        reason: format!("pool record {key}: {e}"),
    })?;
    Ok((record, rev))
}

/// Every pool record, by name (records that do not decode are skipped).
pub async fn list_pools(meta: &dyn MetaStore) -> Result<Vec<PoolRecord>, ClientError> {
    Ok(meta
        .list(basalt_meta::schema::POOLS_PREFIX)
        .await?
        .into_iter()
        .filter_map(|(_, v, _)| serde_json::from_slice::<PoolRecord>(&v).ok())
        .collect())
}

/// Wait until pool `name` is in the map on `maps` (the monitor adds a new pool record to the
/// next map it publishes; until then volumes cannot be made in it), for at most `timeout`.
pub async fn wait_for_pool(
    maps: &mut watch::Receiver<Arc<ClusterMap>>,
    name: &str,
    timeout: Duration,
) -> Result<PoolSpec, ClientError> {
    let what = format!("pool \"{name}\" is in the cluster map");
    let map = crate::mapwatch::wait_for_map(maps, &what, timeout, |m| {
        m.pools.values().any(|p| p.name == name)
    })
    .await?;
    let pool = map.pools.values().find(|p| p.name == name);
    Ok(pool.expect("the awaited pool is in the map").clone())
}

/// What lives in pool `id`: volumes, images, objvols and S3 buckets (index or data) in it,
/// and layers of anything else, as `volume "db1", bucket "photos", ...` (a few named), or
/// None if nothing does.
async fn pool_users(meta: &dyn MetaStore, id: u32) -> Result<Option<String>, ClientError> {
    use basalt_proto::ids::inode_pool;
    /// The fields of a volume, image, objvol or bucket record a pool removal reads.
    #[derive(serde::Deserialize)]
    struct Named {
        name: String,
        pool: u32,
        #[serde(default)]
        data_inode: Option<u64>,
    }
    let mut users = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (prefix, what) in [
        (VOLUMES_PREFIX, "volume"),
        (IMAGES_PREFIX, "image"),
        (OBJVOLS_PREFIX, "objvol"),
        (S3_BUCKETS_PREFIX, "bucket"),
    ] {
        for (_, bytes, _) in meta.list(prefix).await? {
            let Ok(r) = serde_json::from_slice::<Named>(&bytes) else {
                continue;
            };
            if r.pool == id || r.data_inode.map(inode_pool) == Some(id) {
                users.push(format!("{what} \"{}\"", r.name));
                names.insert(r.name);
            }
        }
    }
    // Layers whose record outlived or precedes their volume's (a snapshot being made, a
    // removal cut short) hold data in the pool too.
    for (_, bytes, _) in meta.list(LAYERS_PREFIX).await? {
        if let Ok(layer) = serde_json::from_slice::<LayerRecord>(&bytes) {
            if inode_pool(layer.inode) == id && names.insert(layer.owner.clone()) {
                users.push(format!("layers of \"{}\"", layer.owner));
            }
        }
    }
    if users.is_empty() {
        return Ok(None);
    }
    const NAMED: usize = 5;
    let mut text = users
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if users.len() > NAMED {
        text.push_str(&format!(" and {} more", users.len() - NAMED));
    }
    Ok(Some(text))
}

/// Remove pool `name`, which must hold nothing (no volume, snapshot, image, objvol or S3
/// bucket; see [`pool_users`]). The record goes first, so the monitor drops the pool from
/// the next map; with `wait`, this returns once `maps` shows it gone, then checks again
/// that nothing was made in the pool meanwhile (a volume created from an older map): if
/// something was, the record is put back and the removal fails, so nothing is stranded.
/// Then the pool's PG records go. Returns the removed pool's record.
pub async fn remove_pool(
    meta: &dyn MetaStore,
    name: &str,
    maps: &mut watch::Receiver<Arc<ClusterMap>>,
    wait: Option<Duration>,
) -> Result<PoolRecord, ClientError> {
    let key = pool_key(name);
    let (record, rev) = read_pool(meta, name).await?;
    let in_use = |users| ClientError::PoolInUse {
        name: name.into(),
        users,
    };
    if let Some(users) = pool_users(meta, record.id).await? {
        return Err(in_use(users));
    }
    if !meta.compare_and_delete(&key, rev).await? {
        return Err(ClientError::Invalid {
            reason: format!("pool \"{name}\" changed while being removed; try again"),
        });
    }
    let Some(wait) = wait else {
        return Ok(record);
    };
    let what = format!("pool \"{name}\" is out of the cluster map");
    crate::mapwatch::wait_for_map(maps, &what, wait, |m| !m.pools.contains_key(&record.id)).await?;
    if let Some(users) = pool_users(meta, record.id).await? {
        // Made from a map that still had the pool: keep the pool for it.
        let bytes = serde_json::to_vec(&record).expect("a pool record serialises");
        let kept = matches!(meta.compare_and_swap(&key, 0, bytes).await, Ok(Some(_)));
        return Err(in_use(if kept {
            format!("{users} (made while it was being removed; the pool is kept)")
        } else {
            format!(
                "{users} (made while it was being removed, and its record could not be put \
                 back: a pool of that name was made meanwhile; check `basalt pool ls`)"
            )
        }));
    }
    // Settled: nothing can land in the pool any more. Let OSDs collect what a removal
    // cut short earlier left in it.
    let removed = basalt_meta::schema::RemovedPoolRecord {
        id: record.id,
        name: record.name.clone(),
        removed_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let value = serde_json::to_vec(&removed).expect("removed-pool record serialises");
    meta.put(&basalt_meta::schema::removed_pool_key(record.id), value)
        .await?;
    for (k, _, rev) in meta.list(&format!("{PGS_PREFIX}{}.", record.id)).await? {
        let _ = meta.compare_and_delete(&k, rev).await;
    }
    Ok(record)
}

/// Whether pool `name` has a record in the metadata (it may not be in the map yet).
pub async fn pool_recorded(meta: &dyn MetaStore, name: &str) -> Result<bool, ClientError> {
    Ok(meta.get(&pool_key(name)).await?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_proto::EcProfile;

    fn ec_pool(k: u32, m: u32, min_size: u32, object_size: u32) -> PoolRecord {
        PoolRecord {
            id: 0,
            name: "ec".into(),
            size: k + m,
            min_size,
            pg_count: 32,
            failure_domain: "host".into(),
            object_size,
            ec: Some(EcProfile { k, m }),
            device_class: None,
        }
    }

    fn map_with_pool(epoch: u32, name: &str) -> ClusterMap {
        let mut map = ClusterMap {
            epoch,
            ..ClusterMap::default()
        };
        let pool = PoolSpec {
            id: 7,
            name: name.into(),
            size: 3,
            min_size: 2,
            pg_count: 8,
            failure_domain: basalt_placement::FailureDomain::Osd,
            object_size: 128 << 10,
            ec: None,
            device_class: None,
            pg_count_since: 0,
            pg_count_before: 0,
        };
        map.pools.insert(7, pool);
        map
    }

    /// Goal: `wait_for_pool` returns once a map with the pool is published, and past its
    /// bound fails with a Timeout-kind error that says what it waited for.
    #[tokio::test]
    async fn waiting_for_a_pool_is_bounded() {
        let (tx, mut rx) = watch::channel(Arc::new(ClusterMap::default()));
        let publisher = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send(Arc::new(map_with_pool(2, "p")));
            tx
        });
        let pool = wait_for_pool(&mut rx, "p", Duration::from_secs(5))
            .await
            .expect("the pool arrives within the bound");
        assert_eq!(pool.id, 7);
        let _tx = publisher.await.expect("publisher");
        let err = wait_for_pool(&mut rx, "q", Duration::from_millis(200))
            .await
            .expect_err("pool q never comes");
        assert_eq!(err.kind(), crate::ErrorKind::Timeout);
        let text = err.to_string();
        assert!(text.contains("pool \"q\" is in the cluster map"), "{text}");
        assert!(text.contains("200 ms"), "{text}");
    }

    /// Goal: erasure-coded pool settings are checked with messages naming the flag: a
    /// supported K+M, min_size within K..=K+M, stripes of K power-of-two chunks.
    #[test]
    fn erasure_coded_pools_are_checked() {
        check_pool(&ec_pool(4, 2, 5, 4 * (128 << 10))).expect("4+2 of 128K chunks");
        check_pool(&ec_pool(3, 2, 4, 3 * (64 << 10))).expect("3+2 of 64K chunks");
        let err = |r: PoolRecord| check_pool(&r).unwrap_err().to_string();
        assert!(err(ec_pool(1, 1, 1, 128 << 10)).contains("--ec"));
        assert!(err(ec_pool(17, 2, 18, 17 << 17)).contains("--ec"));
        assert!(err(ec_pool(4, 5, 5, 4 << 17)).contains("--ec"));
        assert!(err(ec_pool(4, 2, 3, 4 << 17)).contains("--min-size"));
        assert!(err(ec_pool(4, 2, 5, 3 << 17)).contains("--object-size"));
        assert!(err(ec_pool(3, 2, 4, 3 * (96 << 10))).contains("--object-size"));
        let mut wrong_size = ec_pool(2, 1, 3, 2 << 17);
        wrong_size.size = 2;
        assert!(err(wrong_size).contains("size 3"));
    }
}
