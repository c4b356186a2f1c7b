//! A new pool as asked for, its defaults, and whether the cluster can place it.
//!
//! The one home of pool defaults: `basalt pool create` (over etcd or the control socket)
//! and `basalt up`'s own pools all fill theirs in here. A pool whose PGs the cluster
//! cannot give `size` members of distinct failure domains never becomes clean (and with
//! fewer than `min_size`, never active: every write to it waits forever), so creating one
//! is refused with the reason unless asked for explicitly; `basalt status` then says why.

use crate::error::ClientError;
use basalt_meta::schema::{OsdRecord, PoolRecord, OSDS_PREFIX};
use basalt_meta::MetaStore;
use basalt_placement::{ClusterMap, FailureDomain, OsdInfo, PoolSpec};
use basalt_proto::EcProfile;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Replicas of a replicated pool when none are asked for.
pub const DEFAULT_REPLICAS: u32 = 3;
/// Placement groups of a pool when none are asked for.
pub const DEFAULT_PGS: u32 = 64;
/// Bytes per object of a replicated pool (per chunk of an erasure-coded one) by default:
/// the OSDs' default store object size.
pub const DEFAULT_OBJECT_SIZE: u32 = 128 << 10;

/// A new pool as asked for; every setting left out takes its default (see [`Self::record`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRequest {
    pub name: String,
    /// Replicas (replicated pools) [default: 3; K+M with `ec`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u32>,
    /// The erasure code of an erasure-coded pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ec: Option<EcProfile>,
    /// [default: min(size, 2) for replicas, K+1 for `ec`]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size: Option<u32>,
    /// [default: 64]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pg_count: Option<u32>,
    /// "osd", "host", "rack" or "zone" [default: "osd" when every OSD is on one host,
    /// else "host"].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// Only OSDs of this device class hold the pool [default: any].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<String>,
    /// [default: 128K, K × 128K for `ec`]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_size: Option<u32>,
    /// Create the pool even when the cluster cannot place it now (`status` says why).
    #[serde(default)]
    pub allow_unplaceable: bool,
}

/// The failure domains a cluster offers: its OSDs counted in placement, each with its
/// host, location and device class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterShape {
    pub osds: Vec<OsdInfo>,
}

impl ClusterShape {
    /// The OSDs registered in `meta` that an operator has not marked out. Read from the
    /// records rather than the map: an OSD that just started is registered before the
    /// monitor publishes a map with it.
    pub async fn registered(meta: &dyn MetaStore) -> Result<Self, ClientError> {
        let mut shape = Self::default();
        for (_, bytes, _) in meta.list(OSDS_PREFIX).await? {
            let Ok(record) = serde_json::from_slice::<OsdRecord>(&bytes) else {
                continue;
            };
            if !record.admin_out {
                shape.osds.push(OsdInfo {
                    id: record.id,
                    host: record.host,
                    location: record.location,
                    class: record.class,
                    ..OsdInfo::default()
                });
            }
        }
        Ok(shape)
    }

    /// The OSDs of `map` counted in placement.
    pub fn of_map(map: &ClusterMap) -> Self {
        Self {
            osds: map.osds.values().filter(|o| o.is_in).cloned().collect(),
        }
    }

    /// The failure domain a pool gets when none is asked for: "osd" on a one-host cluster
    /// (there is no second host to keep a copy on), else "host".
    pub fn default_failure_domain(&self) -> &'static str {
        let hosts: BTreeSet<&str> = self.osds.iter().map(|o| o.host.as_str()).collect();
        if !self.osds.is_empty() && hosts.len() <= 1 {
            "osd"
        } else {
            "host"
        }
    }

    /// The OSDs of device class `class` (all with None).
    fn of_class<'a>(&'a self, class: Option<&'a str>) -> impl Iterator<Item = &'a OsdInfo> {
        self.osds
            .iter()
            .filter(move |o| class.is_none_or(|c| o.class == c))
    }

    /// How many OSDs can hold a pool of device class `class` (None: any).
    pub fn serving(&self, class: Option<&str>) -> usize {
        self.of_class(class).count()
    }

    /// How many distinct failure domains of kind `fd` the OSDs of `class` span.
    fn domains(&self, fd: FailureDomain, class: Option<&str>) -> usize {
        let keys: BTreeSet<String> = self.of_class(class).filter_map(|o| o.domain(fd)).collect();
        keys.len()
    }

    /// The device classes of the OSDs, with how many OSDs have each ("nvme: 3 OSDs, hdd:
    /// 1 OSD"; "none" without OSDs).
    pub fn classes(&self) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for o in &self.osds {
            let class = if o.class.is_empty() {
                "unknown"
            } else {
                o.class.as_str()
            };
            *counts.entry(class).or_default() += 1;
        }
        if counts.is_empty() {
            return "none".into();
        }
        counts
            .iter()
            .map(|(c, n)| format!("{c}: {n} OSD{}", if *n == 1 { "" } else { "s" }))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Why `pool` cannot be placed on this cluster (no OSD of its device class, or fewer
    /// failure domains than members per PG), or None when it can.
    pub fn shortfall(&self, pool: &PoolRecord) -> Option<String> {
        let fd = FailureDomain::parse(&pool.failure_domain).unwrap_or(FailureDomain::Host);
        let class = pool.device_class.as_deref();
        self.shortfall_of(&pool.name, (pool.size, pool.min_size), fd, class, pool.ec)
    }

    /// [`Self::shortfall`] of a pool in the map (as `basalt status` explains it).
    pub fn map_shortfall(&self, pool: &PoolSpec) -> Option<String> {
        let class = pool.device_class.as_deref();
        let members = (pool.size, pool.min_size);
        self.shortfall_of(&pool.name, members, pool.failure_domain, class, pool.ec)
    }

    fn shortfall_of(
        &self,
        name: &str,
        (size, min_size): (u32, u32),
        fd: FailureDomain,
        class: Option<&str>,
        ec: Option<EcProfile>,
    ) -> Option<String> {
        if let Some(class) = class {
            if self.of_class(Some(class)).next().is_none() {
                return Some(format!(
                    "pool \"{name}\" asks for device class {class}, and no OSD has it \
                     (device classes here: {})",
                    self.classes()
                ));
            }
        }
        let have = self.domains(fd, class);
        let need = size as usize;
        if have >= need {
            return None;
        }
        let unit = if fd == FailureDomain::Osd {
            "OSD"
        } else {
            fd.name()
        };
        let members = match ec {
            Some(ec) => format!("the {need} chunks of its {ec} code"),
            None => format!("its {need} replicas"),
        };
        let of_class = class.map_or(String::new(), |c| format!(" of device class {c}"));
        let unlocated = self
            .of_class(class)
            .filter(|o| o.domain(fd).is_none())
            .count();
        let unlocated = match unlocated {
            0 => String::new(),
            n => format!(" ({n} OSDs have no {fd} in their --location and do not count)"),
        };
        let effect = if have < min_size as usize {
            "its PGs cannot become active (every I/O to it would wait)"
        } else {
            "its PGs stay degraded"
        };
        Some(format!(
            "pool \"{name}\" needs {need} {unit}s{of_class} (failure domain {fd}) for {members}, \
             and the cluster has {have}{unlocated}: {effect}"
        ))
    }
}

impl PoolRequest {
    /// The pool record with every default filled in, the failure domain's to fit `shape`.
    pub fn record(&self, shape: &ClusterShape) -> PoolRecord {
        let ec = self.ec;
        let size = ec.map_or(self.size.unwrap_or(DEFAULT_REPLICAS), |e| e.k + e.m);
        PoolRecord {
            id: 0,
            name: self.name.clone(),
            size,
            min_size: self
                .min_size
                .unwrap_or_else(|| ec.map_or(size.min(2), |e| e.k + 1)),
            pg_count: self.pg_count.unwrap_or(DEFAULT_PGS),
            failure_domain: self
                .failure_domain
                .clone()
                .unwrap_or_else(|| shape.default_failure_domain().into()),
            object_size: self
                .object_size
                .unwrap_or_else(|| ec.map_or(1, |e| e.k).saturating_mul(DEFAULT_OBJECT_SIZE)),
            ec,
            device_class: self.device_class.clone(),
        }
    }
}

/// Create the pool `request` asks for on the cluster as registered in `meta`: defaults
/// filled in to fit it, and refused (kind Invalid, with the reason) when it cannot place
/// the pool, unless `allow_unplaceable`.
pub async fn create_pool_for(
    meta: &dyn MetaStore,
    request: &PoolRequest,
) -> Result<PoolRecord, ClientError> {
    // An existing name is reported as such (exit 4), whatever else is wrong.
    if meta
        .get(&basalt_meta::schema::pool_key(&request.name))
        .await?
        .is_some()
    {
        return Err(ClientError::PoolExists {
            name: request.name.clone(),
        });
    }
    let shape = ClusterShape::registered(meta).await?;
    let record = request.record(&shape);
    crate::pools::check_pool(&record)?;
    if !request.allow_unplaceable {
        if let Some(why) = shape.shortfall(&record) {
            let fd = record.failure_domain.as_str();
            let fix = if fd == "host" && shape.osds.len() >= record.size as usize {
                "--failure-domain osd, "
            } else {
                ""
            };
            let more = if fd == "osd" {
                "OSDs".into()
            } else {
                format!("{fd}s")
            };
            return Err(ClientError::Invalid {
                reason: format!(
                    "{why}; give {fix}a smaller --size, add {more}, or --allow-unplaceable to \
                     create it anyway"
                ),
            });
        }
    }
    crate::pools::create_pool(meta, record).await
}

/// [`create_pool_for`], then, with `wait`, wait at most that long until `maps` shows the
/// pool (volumes can then be made in it). Subscribe `maps` before the call: the map with
/// the pool is then seen however soon the monitor publishes it.
pub async fn create_pool_visible(
    meta: &dyn MetaStore,
    request: &PoolRequest,
    maps: &mut tokio::sync::watch::Receiver<std::sync::Arc<ClusterMap>>,
    wait: Option<std::time::Duration>,
) -> Result<PoolRecord, ClientError> {
    let record = create_pool_for(meta, request).await?;
    if let Some(wait) = wait {
        crate::pools::wait_for_pool(maps, &record.name, wait).await?;
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `osds` OSDs spread over `hosts` in turn.
    fn shape(hosts: &[&str], osds: usize) -> ClusterShape {
        ClusterShape {
            osds: (0..osds)
                .map(|i| OsdInfo {
                    id: i as u32,
                    host: hosts[i % hosts.len()].to_string(),
                    ..OsdInfo::default()
                })
                .collect(),
        }
    }

    /// Goal: a pool asked for by name only gets a failure domain the cluster can meet.
    #[test]
    fn the_default_failure_domain_fits_the_cluster() {
        let request = PoolRequest {
            name: "q".into(),
            ..PoolRequest::default()
        };
        let one_host = request.record(&shape(&["localhost"], 3));
        assert_eq!(one_host.failure_domain, "osd");
        assert_eq!((one_host.size, one_host.min_size), (3, 2));
        assert_eq!(shape(&["localhost"], 3).shortfall(&one_host), None);
        let three_hosts = request.record(&shape(&["a", "b", "c"], 6));
        assert_eq!(three_hosts.failure_domain, "host");
        // No OSD yet: the multi-host default.
        assert_eq!(
            request.record(&ClusterShape::default()).failure_domain,
            "host"
        );
    }

    /// Goal: a pool the cluster cannot place is named with the reason.
    #[test]
    fn a_pool_needing_more_domains_than_exist_has_a_shortfall() {
        let record = PoolRequest {
            name: "q".into(),
            failure_domain: Some("host".into()),
            ..PoolRequest::default()
        }
        .record(&shape(&["localhost"], 3));
        let why = shape(&["localhost"], 3).shortfall(&record).unwrap();
        assert!(why.contains("needs 3 hosts"), "{why}");
        assert!(why.contains("cannot become active"), "{why}");
        let two = shape(&["a", "b"], 2).shortfall(&record).unwrap();
        assert!(two.contains("stay degraded"), "{two}");
        assert_eq!(shape(&["a", "b", "c"], 3).shortfall(&record), None);
    }

    /// Goal: the defaults of replicated and erasure-coded pools (one place for both).
    #[test]
    fn defaults_of_replicated_and_erasure_coded_pools() {
        let any = shape(&["a", "b", "c"], 6);
        let ec = PoolRequest {
            name: "cold".into(),
            ec: Some(EcProfile { k: 4, m: 2 }),
            ..PoolRequest::default()
        }
        .record(&any);
        assert_eq!(
            (ec.size, ec.min_size, ec.object_size),
            (6, 5, 4 * (128 << 10))
        );
        let single = PoolRequest {
            name: "one".into(),
            size: Some(1),
            ..PoolRequest::default()
        }
        .record(&any);
        assert_eq!((single.size, single.min_size, single.pg_count), (1, 1, 64));
    }

    /// Goal: rack and zone domains count the racks and zones of the OSDs' locations (OSDs
    /// without one do not count, and the reason says so), and a device class counts only
    /// its OSDs; one no OSD has is named with the classes there are.
    #[test]
    fn racks_zones_and_device_classes_count_as_placement_does() {
        let located = |id: u32, rack: &str, zone: &str, class: &str| OsdInfo {
            id,
            host: format!("h{id}"),
            location: [("rack", rack), ("zone", zone)]
                .into_iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            class: class.into(),
            ..OsdInfo::default()
        };
        let shape = ClusterShape {
            osds: vec![
                located(0, "r1", "z1", "nvme"),
                located(1, "r2", "z1", "nvme"),
                located(2, "r3", "z2", "hdd"),
                located(3, "", "", "nvme"),
            ],
        };
        let pool = |fd: &str, class: Option<&str>| {
            PoolRequest {
                name: "p".into(),
                failure_domain: Some(fd.into()),
                device_class: class.map(str::to_string),
                ..PoolRequest::default()
            }
            .record(&shape)
        };
        assert_eq!(shape.shortfall(&pool("rack", None)), None);
        let why = shape.shortfall(&pool("zone", None)).unwrap();
        assert!(
            why.contains("needs 3 zones") && why.contains("has 2"),
            "{why}"
        );
        assert!(why.contains("1 OSDs have no zone"), "{why}");
        let why = shape.shortfall(&pool("rack", Some("nvme"))).unwrap();
        assert!(
            why.contains("of device class nvme") && why.contains("has 2"),
            "{why}"
        );
        assert_eq!(shape.shortfall(&pool("host", Some("nvme"))), None);
        let why = shape.shortfall(&pool("host", Some("ssd"))).unwrap();
        assert!(
            why.contains("no OSD has it") && why.contains("hdd: 1 OSD, nvme: 3 OSDs"),
            "{why}"
        );
    }
}
