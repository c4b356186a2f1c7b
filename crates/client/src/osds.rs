//! OSD administration: marking an OSD out of placement (its data moves elsewhere) or back
//! in, as an operator does with `basalt osd out/in`.

use crate::error::ClientError;
use basalt_meta::schema::{osd_key, OsdRecord};
use basalt_meta::MetaStore;
use std::sync::Arc;
use std::time::Duration;

/// Mark OSD `id` out (`out`) or back in: a compare-and-swap of its record's `admin_out`
/// flag (a concurrent change of the record is refused, not overwritten). With `wait`,
/// return once the cluster map shows the change (placement follows the map), or fail
/// with a timeout after that long.
pub async fn set_osd_out(
    meta: Arc<dyn MetaStore>,
    id: u32,
    out: bool,
    wait: Option<Duration>,
) -> Result<(), ClientError> {
    // Follow the map from before the change: the map with it is then seen however soon the
    // monitor publishes it.
    let mut maps = crate::follow_map(meta.clone()).await?;
    let key = osd_key(id);
    let what = format!("osd.{id}");
    let Some((bytes, rev)) = meta.get(&key).await? else {
        return Err(ClientError::NotFound { what });
    };
    let mut record: OsdRecord =
        serde_json::from_slice(&bytes).map_err(|e| ClientError::BadReply {
            reason: format!("the record of {what}: {e}"),
        })?;
    record.admin_out = out;
    let value = serde_json::to_vec(&record).map_err(|e| ClientError::Invalid {
        reason: format!("encode the record of {what}: {e}"),
    })?;
    if meta.compare_and_swap(&key, rev, value).await?.is_none() {
        return Err(ClientError::ChangedConcurrently { what });
    }
    if let Some(wait) = wait {
        let word = if out { "out" } else { "in" };
        let shows = format!("{what} is {word} in the cluster map");
        crate::wait_for_map(&mut maps, &shows, wait, |m| {
            m.osds.get(&id).is_some_and(|o| o.is_in != out)
        })
        .await?;
    }
    Ok(())
}

/// The OSD each store belongs to, by store id (16 hex digits), from the OSDs' records (an
/// OSD records its store's id when it starts; records of older OSDs have none).
pub async fn osds_by_store_id(
    meta: &dyn MetaStore,
) -> Result<std::collections::HashMap<String, u32>, ClientError> {
    let records = meta.list(basalt_meta::schema::OSDS_PREFIX).await?;
    Ok(records
        .iter()
        .filter_map(|(_, bytes, _)| serde_json::from_slice::<OsdRecord>(bytes).ok())
        .filter_map(|r| Some((r.store_id?, r.id)))
        .collect())
}
