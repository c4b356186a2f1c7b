//! Which NVMe/TCP hosts may attach a volume: a list of host NQNs per volume (`basalt volume
//! allow`). An empty list lets any host attach (how every volume starts); once a host is
//! named, the NVMe/TCP gateway refuses every other host's connect to the volume.

use crate::error::ClientError;
use basalt_meta::MetaStore;
use serde::{Deserialize, Serialize};

/// Where access records live: `/basalt/access/VOLUME`.
pub const ACCESS_PREFIX: &str = "/basalt/access/";

/// Longest NQN the NVMe base specification allows (bytes).
const MAX_NQN_BYTES: usize = 223;

/// Most hosts one volume's list names.
const MAX_HOSTS: usize = 64;

/// Format version of [`AccessRecord`].
const RECORD_VERSION: u32 = 1;

/// A volume's access list.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccessRecord {
    pub format_version: u32,
    /// NVMe host NQNs allowed to connect (empty: any host).
    pub nvme_hosts: Vec<String>,
}

impl AccessRecord {
    /// May host `hostnqn` attach the volume over NVMe/TCP?
    pub fn admits_nvme_host(&self, hostnqn: &str) -> bool {
        self.nvme_hosts.is_empty() || self.nvme_hosts.iter().any(|h| h == hostnqn)
    }
}

fn key(volume: &str) -> String {
    format!("{ACCESS_PREFIX}{volume}")
}

/// Is `nqn` a host NQN as the NVMe base specification writes them?
pub fn check_nqn(nqn: &str) -> Result<(), ClientError> {
    let ok = nqn.starts_with("nqn.")
        && nqn.len() <= MAX_NQN_BYTES
        && nqn.len() > 4
        && nqn.chars().all(|c| c.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(ClientError::Invalid {
            reason: format!(
                "\"{nqn}\" is not a host NQN (nqn.YYYY-MM.reverse.domain:name, at most \
                 {MAX_NQN_BYTES} bytes, no spaces; a host's is in /etc/nvme/hostnqn)"
            ),
        })
    }
}

/// The access list of `volume` (empty when none was set).
pub async fn get(meta: &dyn MetaStore, volume: &str) -> Result<AccessRecord, ClientError> {
    match meta.get(&key(volume)).await? {
        Some((v, _)) => decode(volume, &v),
        None => Ok(AccessRecord::default()),
    }
}

/// An access record; an unreadable one is an error, never an empty (open) list.
fn decode(volume: &str, value: &[u8]) -> Result<AccessRecord, ClientError> {
    serde_json::from_slice(value).map_err(|e| ClientError::Invalid {
        reason: format!("the access record of volume \"{volume}\" is unreadable: {e}"),
    })
}

/// Add the hosts in `allow` to the list of `volume` and drop those in `deny`; returns the
/// list afterwards. The volume must exist.
pub async fn change(
    cluster: &crate::Cluster,
    volume: &str,
    allow: &[String],
    deny: &[String],
) -> Result<AccessRecord, ClientError> {
    for nqn in allow.iter().chain(deny) {
        check_nqn(nqn)?;
    }
    cluster.volume_info(volume).await?;
    let meta = cluster.meta().as_ref();
    // Bound: each lost round means another command changed the list meanwhile.
    for _ in 0..16 {
        let (mut record, rev) = match meta.get(&key(volume)).await? {
            Some((v, rev)) => (decode(volume, &v)?, rev),
            None => (AccessRecord::default(), 0),
        };
        for nqn in allow {
            if !record.nvme_hosts.contains(nqn) {
                record.nvme_hosts.push(nqn.clone());
            }
        }
        record.nvme_hosts.retain(|h| !deny.contains(h));
        if record.nvme_hosts.len() > MAX_HOSTS {
            return Err(ClientError::Invalid {
                reason: format!("a volume's access list names at most {MAX_HOSTS} hosts"),
            });
        }
        record.format_version = RECORD_VERSION;
        let done = if record.nvme_hosts.is_empty() {
            rev == 0 || meta.compare_and_delete(&key(volume), rev).await?
        } else {
            let value = serde_json::to_vec(&record).expect("an access record serialises");
            meta.compare_and_swap(&key(volume), rev, value)
                .await?
                .is_some()
        };
        if done {
            return Ok(record);
        }
    }
    Err(ClientError::Invalid {
        reason: format!("the access list of volume \"{volume}\" changed concurrently; try again"),
    })
}

/// Forget the access list of a removed volume.
pub async fn forget(meta: &dyn MetaStore, volume: &str) -> Result<(), ClientError> {
    if let Some((_, rev)) = meta.get(&key(volume)).await? {
        meta.compare_and_delete(&key(volume), rev).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_nqns_are_checked_and_an_empty_list_admits_anyone() {
        // Goal: malformed NQNs are refused with the expected form; the list decides.
        assert!(check_nqn("nqn.2014-08.org.nvmexpress:uuid:1b4e28ba-2fa1-11d2").is_ok());
        assert!(check_nqn("host1").is_err());
        assert!(check_nqn("nqn.").is_err());
        assert!(check_nqn("nqn.2014-08.org.example:has space").is_err());
        assert!(check_nqn(&format!("nqn.{}", "a".repeat(MAX_NQN_BYTES))).is_err());
        let open = AccessRecord::default();
        assert!(open.admits_nvme_host("nqn.2014-08.org.example:h1"));
        let closed = AccessRecord {
            format_version: 1,
            nvme_hosts: vec!["nqn.2014-08.org.example:h1".into()],
        };
        assert!(closed.admits_nvme_host("nqn.2014-08.org.example:h1"));
        assert!(!closed.admits_nvme_host("nqn.2014-08.org.example:h2"));
    }
}
