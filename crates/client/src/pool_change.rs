//! Changing a pool after creation (`basalt pool set`): its size, min_size, failure domain,
//! device class or PG count. Each change is a new pool record; the monitor puts it in its
//! next map, placement is computed again, and peering and recovery move the data as after
//! `osd out` (clients keep writing meanwhile). A PG count change splits or merges PGs
//! (docs/design.md, "PG split and merge"): the new count must be a multiple or a divisor of
//! the current one, and the previous change must have settled.

use crate::error::ClientError;
use crate::pool_spec::ClusterShape;
use basalt_meta::schema::{pool_key, PoolRecord};
use basalt_meta::MetaStore;
use basalt_placement::{ClusterMap, FailureDomain};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What `basalt pool set NAME KEY VALUE` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolSetting {
    Size(u32),
    MinSize(u32),
    FailureDomain(String),
    /// None: any class.
    DeviceClass(Option<String>),
    Pgs(u32),
}

/// The keys `basalt pool set` takes.
pub const POOL_SETTING_KEYS: [&str; 5] =
    ["size", "min-size", "failure-domain", "device-class", "pgs"];

fn invalid(reason: String) -> ClientError {
    ClientError::Invalid { reason }
}

impl PoolSetting {
    /// `size 3`, `min-size 2`, `failure-domain rack`, `device-class nvme` (`any` for
    /// none), `pgs 128`.
    pub fn parse(key: &str, value: &str) -> Result<Self, ClientError> {
        let number = || {
            value
                .parse::<u32>()
                .map_err(|_| invalid(format!("{key}: {value:?} is not a whole number")))
        };
        match key {
            "size" => Ok(Self::Size(number()?)),
            "min-size" => Ok(Self::MinSize(number()?)),
            "pgs" => Ok(Self::Pgs(number()?)),
            "failure-domain" => Ok(Self::FailureDomain(value.to_string())),
            "device-class" if value == "any" => Ok(Self::DeviceClass(None)),
            "device-class" => Ok(Self::DeviceClass(Some(value.to_string()))),
            _ => Err(invalid(format!(
                "unknown pool setting {key:?} (settable: {})",
                POOL_SETTING_KEYS.join(", ")
            ))),
        }
    }
}

/// `record` with `setting` applied, checked as a new pool would be.
pub fn changed(record: &PoolRecord, setting: &PoolSetting) -> Result<PoolRecord, ClientError> {
    let mut new = record.clone();
    match setting {
        PoolSetting::Size(size) => {
            if let Some(ec) = record.ec {
                return Err(invalid(format!(
                    "pool \"{}\" is erasure coded ({ec}): its size is K+M = {}, fixed at \
                     creation",
                    record.name, record.size
                )));
            }
            if *size < record.min_size {
                return Err(invalid(format!(
                    "size {size} is below the pool's min-size {}: lower min-size first \
                     (`basalt pool set {} min-size N`)",
                    record.min_size, record.name
                )));
            }
            new.size = *size;
        }
        PoolSetting::MinSize(min_size) => new.min_size = *min_size,
        PoolSetting::FailureDomain(fd) => new.failure_domain = fd.clone(),
        PoolSetting::DeviceClass(class) => new.device_class = class.clone(),
        PoolSetting::Pgs(pgs) => {
            check_pg_count(record, *pgs)?;
            new.pg_count = *pgs;
        }
    }
    crate::pools::check_pool(&new)?;
    Ok(new)
}

/// Most PG copies per OSD a PG count change may ask for (Ceph's `mon_max_pg_per_osd` is
/// 250): each PG costs its OSDs memory, peering work and a record.
pub const PG_COPIES_PER_OSD_MAX: u64 = 300;

/// Most PGs a pool may be split to.
pub const PG_COUNT_CHANGE_MAX: u32 = 4096;

/// Can `record`'s PG count become `pgs`, as far as the pool alone says? A multiple of the
/// current count (a split) or a divisor (a merge), at least 1 and at most
/// [`PG_COUNT_CHANGE_MAX`], of a replicated pool.
fn check_pg_count(record: &PoolRecord, pgs: u32) -> Result<(), ClientError> {
    let name = &record.name;
    let now = record.pg_count;
    if let Some(ec) = record.ec {
        return Err(invalid(format!(
            "pool \"{name}\" is erasure coded ({ec}): changing its PG count is not built \
             (split and merge gather replicated copies; chunks by position are not handled yet)"
        )));
    }
    if pgs == 0 || pgs > PG_COUNT_CHANGE_MAX {
        return Err(invalid(format!(
            "pgs must be between 1 and {PG_COUNT_CHANGE_MAX}, got {pgs}"
        )));
    }
    if pgs != now && !pgs.is_multiple_of(now) && !now.is_multiple_of(pgs) {
        let mut ok: Vec<u32> = (1..=now)
            .filter(|d| now.is_multiple_of(*d) && *d != now)
            .collect();
        ok.extend(
            (2..=4)
                .map(|m| now * m)
                .filter(|n| *n <= PG_COUNT_CHANGE_MAX),
        );
        let ok: Vec<String> = ok.iter().map(u32::to_string).collect();
        return Err(invalid(format!(
            "pool \"{name}\" has {now} PGs: a new count must be a multiple of it (a split) or \
             a divisor (a merge), so that every object's new PG holds only objects of one old \
             PG or of a known set; {pgs} is neither (for example: {})",
            ok.join(", ")
        )));
    }
    Ok(())
}

/// How many PGs of `pool` (as the map has it) have not yet peered under its current PG
/// count: no record of that count's era written by their own primary.
pub fn pgs_unsettled(
    pool: &basalt_placement::PoolSpec,
    records: &std::collections::HashMap<String, basalt_meta::schema::PgRecord>,
) -> u32 {
    (0..pool.pg_count)
        .filter(|index| {
            records
                .get(&format!("{}.{index}", pool.id))
                .is_none_or(|r| r.inherited != 0 || !r.of_era(pool.pg_count_since))
        })
        .count() as u32
}

/// Refuse a PG count change the cluster cannot take now: the previous change has not
/// settled (some PG has not peered under it: its predecessors' records are still needed),
/// or the new count puts more than [`PG_COPIES_PER_OSD_MAX`] PG copies on the OSDs that
/// can hold the pool.
async fn check_pg_count_now(
    meta: &dyn MetaStore,
    record: &PoolRecord,
    new: &PoolRecord,
    map: &ClusterMap,
) -> Result<(), ClientError> {
    let name = &record.name;
    let Some(spec) = map.pools.get(&record.id) else {
        return Err(invalid(format!(
            "pool \"{name}\" is not in the cluster map yet: wait for the monitor"
        )));
    };
    if spec.pg_count != record.pg_count {
        return Err(invalid(format!(
            "pool \"{name}\": the change to {} PGs is not in the cluster map yet (it shows {}): \
             wait for it, then try again",
            record.pg_count, spec.pg_count
        )));
    }
    let records = crate::osd_admin::read_pg_records(meta).await?;
    let unsettled = pgs_unsettled(spec, &records);
    if unsettled > 0 {
        return Err(invalid(format!(
            "pool \"{name}\": {unsettled} of its {} PGs have not peered since its PG count last \
             changed; change it again once every PG is active (`basalt status`)",
            spec.pg_count
        )));
    }
    // Every OSD must seal the old PGs when the new ones list it: a build from before PG
    // split and merge does not.
    let mut versions = std::collections::BTreeSet::new();
    for (_, bytes, _) in meta.list(basalt_meta::schema::ALIVE_PREFIX).await? {
        if let Ok(alive) = serde_json::from_slice::<basalt_meta::schema::AliveRecord>(&bytes) {
            versions.insert(alive.version);
        }
    }
    if versions.len() > 1 || versions.contains("") {
        return Err(invalid(format!(
            "pool \"{name}\": the OSDs run different builds ({}); finish the upgrade before \
             changing the PG count (an OSD older than PG split and merge cannot take part)",
            versions
                .iter()
                .map(|v| if v.is_empty() {
                    "unversioned"
                } else {
                    v.as_str()
                })
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let shape = ClusterShape::registered(meta).await?;
    let osds = shape.serving(new.device_class.as_deref()) as u64;
    let copies = new.pg_count as u64 * new.size as u64;
    if osds == 0 || copies > PG_COPIES_PER_OSD_MAX * osds {
        return Err(invalid(format!(
            "{} PGs of {} copies each would put {} PG copies on each of the {osds} OSDs that \
             can hold pool \"{name}\" (at most {PG_COPIES_PER_OSD_MAX}): add OSDs first or \
             choose fewer PGs",
            new.pg_count,
            new.size,
            copies.div_ceil(osds.max(1))
        )));
    }
    Ok(())
}

/// Wait (at most `timeout`) until every PG of pool `id` has peered under its current PG
/// count, telling `progress` (peered, total) whenever the count changes.
pub async fn wait_pgs_settled(
    meta: &dyn MetaStore,
    maps: &mut watch::Receiver<Arc<ClusterMap>>,
    id: u32,
    timeout: Duration,
    progress: &mut (dyn FnMut(u32, u32) + Send),
) -> Result<(), ClientError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    // Bound: ends at the deadline; one look every 500 ms.
    loop {
        let map = maps.borrow_and_update().clone();
        let Some(spec) = map.pools.get(&id) else {
            return Err(invalid(format!("pool {id} is gone from the cluster map")));
        };
        let records = crate::osd_admin::read_pg_records(meta).await?;
        let unsettled = pgs_unsettled(spec, &records);
        let peered = spec.pg_count - unsettled;
        if last != Some(peered) {
            progress(peered, spec.pg_count);
            last = Some(peered);
        }
        if unsettled == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ClientError::NotVisible {
                what: format!(
                    "every PG of pool \"{}\" peered under its {} PGs ({peered} did)",
                    spec.name, spec.pg_count
                ),
                timeout_ms: timeout.as_millis() as u64,
                hint: "the PGs go on splitting or merging; `basalt status` shows them".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Change pool `name`: refused (nothing written) when the result is not a valid pool, or
/// one the cluster cannot place unless `allow_unplaceable`; a concurrent change of the
/// record is refused, not overwritten. With `wait`, return once `maps` (subscribed before
/// the call) shows the new settings (and, for a PG count, until every PG peered under it,
/// telling `progress`). Returns the new record.
pub async fn set_pool(
    meta: &dyn MetaStore,
    name: &str,
    setting: &PoolSetting,
    allow_unplaceable: bool,
    maps: &mut watch::Receiver<Arc<ClusterMap>>,
    wait: Option<Duration>,
    progress: &mut (dyn FnMut(u32, u32) + Send),
) -> Result<PoolRecord, ClientError> {
    let key = pool_key(name);
    let (record, rev) = crate::pools::read_pool(meta, name).await?;
    let new = changed(&record, setting)?;
    if new == record {
        return Ok(record);
    }
    if new.pg_count != record.pg_count {
        let map = maps.borrow().clone();
        check_pg_count_now(meta, &record, &new, &map).await?;
    }
    if !allow_unplaceable {
        let shape = ClusterShape::registered(meta).await?;
        if let Some(why) = shape.shortfall(&new) {
            return Err(invalid(format!(
                "{why}; add OSDs or hosts first, or --allow-unplaceable to change it anyway"
            )));
        }
    }
    let value = serde_json::to_vec(&new).map_err(|e| invalid(format!("encode the pool: {e}")))?;
    if meta.compare_and_swap(&key, rev, value).await?.is_none() {
        return Err(ClientError::ChangedConcurrently {
            what: format!("pool \"{name}\""),
        });
    }
    if let Some(wait) = wait {
        let what = format!("pool \"{name}\" has its new settings in the cluster map");
        let fd = FailureDomain::parse(&new.failure_domain);
        crate::mapwatch::wait_for_map(maps, &what, wait, |m| {
            m.pools.values().any(|p| {
                p.id == new.id
                    && p.size == new.size
                    && p.min_size == new.min_size
                    && Some(p.failure_domain) == fd
                    && p.device_class == new.device_class
                    && p.pg_count == new.pg_count
            })
        })
        .await?;
        if new.pg_count != record.pg_count {
            wait_pgs_settled(meta, maps, new.id, wait, progress).await?;
        }
    }
    Ok(new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replicated() -> PoolRecord {
        PoolRecord {
            id: 1,
            name: "rbd".into(),
            size: 3,
            min_size: 2,
            pg_count: 32,
            failure_domain: "host".into(),
            object_size: 128 << 10,
            ec: None,
            device_class: None,
        }
    }

    /// Goal: a PG has settled after a PG count change only with a record its own primary
    /// wrote in the new era: no record, an older one and an inherited copy of its parent's
    /// all count as not peered yet.
    #[test]
    fn pgs_settle_with_their_own_record_of_the_new_count() {
        use basalt_meta::schema::PgRecord;
        let spec = basalt_placement::PoolSpec {
            id: 1,
            name: "rbd".into(),
            size: 3,
            min_size: 2,
            pg_count: 4,
            failure_domain: basalt_placement::FailureDomain::Host,
            object_size: 128 << 10,
            ec: None,
            device_class: None,
            pg_count_since: 50,
            pg_count_before: 2,
        };
        let rec = |epoch, inherited| PgRecord {
            epoch,
            inherited,
            ..PgRecord::default()
        };
        let mut records = std::collections::HashMap::new();
        records.insert("1.0".to_string(), rec(51, 0));
        records.insert("1.1".to_string(), rec(40, 0));
        records.insert("1.3".to_string(), rec(40, 50));
        records.insert("2.2".to_string(), rec(60, 0));
        assert_eq!(pgs_unsettled(&spec, &records), 3);
        records.insert("1.1".to_string(), rec(50, 0));
        records.insert("1.2".to_string(), rec(52, 0));
        records.insert("1.3".to_string(), rec(55, 0));
        assert_eq!(pgs_unsettled(&spec, &records), 0);
    }

    /// Goal: each setting changes just its field; nonsense (size below min-size, min-size
    /// above size, an unknown failure domain, an EC pool's size, a PG count change) is
    /// refused with the reason.
    #[test]
    fn settings_apply_or_are_refused_precisely() {
        let r = replicated();
        let set = |k: &str, v: &str| PoolSetting::parse(k, v).and_then(|s| changed(&r, &s));
        assert_eq!(set("size", "4").unwrap().size, 4);
        assert_eq!(set("min-size", "1").unwrap().min_size, 1);
        assert_eq!(set("failure-domain", "osd").unwrap().failure_domain, "osd");
        assert_eq!(
            set("failure-domain", "rack").unwrap().failure_domain,
            "rack"
        );
        let nvme = set("device-class", "nvme").unwrap();
        assert_eq!(nvme.device_class.as_deref(), Some("nvme"));
        let any = PoolSetting::parse("device-class", "any").and_then(|s| changed(&nvme, &s));
        assert_eq!(any.unwrap().device_class, None);
        for (k, v, expect) in [
            ("size", "1", "lower min-size first"),
            ("min-size", "4", "--min-size must be between 1 and --size"),
            ("failure-domain", "row", "--failure-domain must be"),
            ("device-class", "NVMe!", "device class \"NVMe!\" must be"),
            ("pgs", "48", "a multiple of it (a split) or a divisor"),
            ("pgs", "0", "pgs must be between 1 and 4096"),
            ("size", "x", "not a whole number"),
            ("colour", "red", "unknown pool setting"),
        ] {
            let err = set(k, v).unwrap_err().to_string();
            assert!(err.contains(expect), "{k} {v}: {err}");
        }
        let ec = PoolRecord {
            size: 3,
            min_size: 3,
            ec: Some(basalt_proto::EcProfile { k: 2, m: 1 }),
            object_size: 256 << 10,
            ..replicated()
        };
        let err = changed(&ec, &PoolSetting::Size(4)).unwrap_err().to_string();
        assert!(err.contains("fixed at creation"), "{err}");
        assert_eq!(changed(&ec, &PoolSetting::MinSize(2)).unwrap().min_size, 2);
        let err = changed(&ec, &PoolSetting::Pgs(64)).unwrap_err().to_string();
        assert!(err.contains("changing its PG count is not built"), "{err}");
        assert_eq!(set("pgs", "128").unwrap().pg_count, 128);
        assert_eq!(set("pgs", "8").unwrap().pg_count, 8);
    }
}
