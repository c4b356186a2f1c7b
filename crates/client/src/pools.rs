//! Pools: creating a pool record (the monitor then puts the pool in the map) and allocating
//! its id.

use crate::error::ClientError;
use basalt_meta::schema::{pool_key, PoolRecord, NEXT_POOL_ID_KEY};
use basalt_meta::MetaStore;

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
    if size == 0 || size > POOL_SIZE_MAX {
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
    if fd != "host" && fd != "osd" {
        return Err(invalid(format!(
            "--failure-domain must be \"host\" or \"osd\", got \"{fd}\""
        )));
    }
    if !object_size.is_power_of_two() || !(4096..=4 << 20).contains(&object_size) {
        return Err(invalid(format!(
            "--object-size must be a power of two between 4K and 4M, got {object_size}"
        )));
    }
    check_pool_name(&record.name)
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
