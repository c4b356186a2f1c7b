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
use basalt_placement::{ClusterMap, FailureDomain, PoolSpec};
use basalt_proto::EcProfile;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

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
    /// "host" or "osd" [default: "osd" when every OSD is on one host, else "host"].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_domain: Option<String>,
    /// [default: 128K, K × 128K for `ec`]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_size: Option<u32>,
    /// Create the pool even when the cluster cannot place it now (`status` says why).
    #[serde(default)]
    pub allow_unplaceable: bool,
}

/// The failure domains a cluster offers: its hosts and OSDs counted in placement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterShape {
    pub hosts: BTreeSet<String>,
    pub osds: usize,
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
                shape.hosts.insert(record.host);
                shape.osds += 1;
            }
        }
        Ok(shape)
    }

    /// The OSDs of `map` counted in placement.
    pub fn of_map(map: &ClusterMap) -> Self {
        let counted = map.osds.values().filter(|o| o.is_in);
        Self {
            hosts: counted.clone().map(|o| o.host.clone()).collect(),
            osds: counted.count(),
        }
    }

    /// The failure domain a pool gets when none is asked for: "osd" on a one-host cluster
    /// (there is no second host to keep a copy on), else "host".
    pub fn default_failure_domain(&self) -> &'static str {
        if self.osds > 0 && self.hosts.len() <= 1 {
            "osd"
        } else {
            "host"
        }
    }

    /// How many distinct `failure_domain`s ("host" or "osd") the cluster has.
    fn domains(&self, failure_domain: &str) -> usize {
        match failure_domain {
            "osd" => self.osds,
            _ => self.hosts.len(),
        }
    }

    /// Why `pool` cannot be placed on this cluster (fewer failure domains than members per
    /// PG), or None when it can.
    pub fn shortfall(&self, pool: &PoolRecord) -> Option<String> {
        let fd = pool.failure_domain.as_str();
        self.shortfall_of(&pool.name, (pool.size, pool.min_size), fd, pool.ec)
    }

    /// [`Self::shortfall`] of a pool in the map (as `basalt status` explains it).
    pub fn map_shortfall(&self, pool: &PoolSpec) -> Option<String> {
        let fd = match pool.failure_domain {
            FailureDomain::Osd => "osd",
            FailureDomain::Host => "host",
        };
        self.shortfall_of(&pool.name, (pool.size, pool.min_size), fd, pool.ec)
    }

    fn shortfall_of(
        &self,
        name: &str,
        (size, min_size): (u32, u32),
        fd: &str,
        ec: Option<EcProfile>,
    ) -> Option<String> {
        let have = self.domains(fd);
        let need = size as usize;
        if have >= need {
            return None;
        }
        let unit = if fd == "osd" { "OSD" } else { "host" };
        let members = match ec {
            Some(ec) => format!("the {need} chunks of its {ec} code"),
            None => format!("its {need} replicas"),
        };
        let effect = if have < min_size as usize {
            "its PGs cannot become active (every I/O to it would wait)"
        } else {
            "its PGs stay degraded"
        };
        Some(format!(
            "pool \"{name}\" needs {need} {unit}s (failure domain {fd}) for {members}, and the \
             cluster has {have}: {effect}"
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
            let fix = if record.failure_domain == "host" && shape.osds >= record.size as usize {
                "--failure-domain osd, "
            } else {
                ""
            };
            let more = if record.failure_domain == "host" {
                "hosts"
            } else {
                "OSDs"
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

    fn shape(hosts: &[&str], osds: usize) -> ClusterShape {
        ClusterShape {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            osds,
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
}
