//! Changing a pool after creation (`basalt pool set`): its size, min_size, failure domain
//! or device class. Each change is a new pool record; the monitor puts it in its next map, placement
//! is computed again, and peering and recovery move the data as after `osd out` (clients
//! keep writing meanwhile). The PG count (split and merge) is designed (docs/design.md,
//! "PG split and merge") but not built, and is refused with that reason.

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
            return Err(invalid(format!(
                "changing the PG count of pool \"{}\" ({} now, {pgs} asked) is not built yet: \
                 PG split and merge are designed (docs/design.md, \"PG split and merge\") but \
                 not implemented",
                record.name, record.pg_count
            )));
        }
    }
    crate::pools::check_pool(&new)?;
    Ok(new)
}

/// Change pool `name`: refused (nothing written) when the result is not a valid pool, or
/// one the cluster cannot place unless `allow_unplaceable`; a concurrent change of the
/// record is refused, not overwritten. With `wait`, return once `maps` (subscribed before
/// the call) shows the new settings. Returns the new record.
pub async fn set_pool(
    meta: &dyn MetaStore,
    name: &str,
    setting: &PoolSetting,
    allow_unplaceable: bool,
    maps: &mut watch::Receiver<Arc<ClusterMap>>,
    wait: Option<Duration>,
) -> Result<PoolRecord, ClientError> {
    let key = pool_key(name);
    let (record, rev) = crate::pools::read_pool(meta, name).await?;
    let new = changed(&record, setting)?;
    if new == record {
        return Ok(record);
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
            })
        })
        .await?;
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
            ("pgs", "128", "not built yet"),
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
    }
}
