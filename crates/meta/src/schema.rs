//! The cluster's metadata schema: every key Basalt keeps in the metadata store and the JSON
//! records under them. One place, so the monitor, the OSDs, the gateways and the tools agree.
//!
//! | key | value | written by |
//! |---|---|---|
//! | `/basalt/map` | the cluster map (JSON, `basalt_placement::ClusterMap`) | the monitor (CAS) |
//! | `/basalt/monitor` | [`MonitorRecord`], under the monitor's lease | the monitor |
//! | `/basalt/osds/ID` | [`OsdRecord`] (static: host, weight, admin `out`) | the OSD at start, `basalt osd out/in` |
//! | `/basalt/alive/ID` | [`AliveRecord`], under the OSD's lease | the OSD |
//! | `/basalt/failures/TARGET/REPORTER` | [`FailureReport`]: REPORTER cannot reach OSD TARGET, under the reporter's lease | the reporting OSD |
//! | `/basalt/next_osd_id` | decimal counter | `basalt osd` when allocating an id |
//! | `/basalt/removed_osds/ID` | [`RemovedOsdRecord`]: a removed OSD, whose id is never used again | `basalt osd rm`, `basalt host rm` |
//! | `/basalt/pools/NAME` | [`PoolRecord`] | `basalt pool create` |
//! | `/basalt/next_pool_id` | decimal counter of pool ids | `basalt pool create` |
//! | `/basalt/removed_pools/ID` | [`RemovedPoolRecord`]: a removed pool, whose objects OSDs delete | `basalt pool rm` |
//! | `/basalt/pgs/POOL.INDEX` | [`PgRecord`] | the PG's primary (CAS) |
//! | `/basalt/volumes/NAME` | volume record (`basalt_client::VolumeInfo`) | volume tools |
//! | `/basalt/next_inode` | decimal counter of volume families | volume tools |
//! | `/basalt/images/NAME` | image record (`basalt_client::ImageInfo`) | `basalt image` |
//! | `/basalt/objvols/NAME` | objvol record (`basalt_objvol::ObjvolInfo`) | `basalt objvol` |
//! | `/basalt/s3/...` | buckets, access keys, the data-block counter (`basalt_s3`) | the S3 gateway |
//! | `/basalt/layers/INODE` | [`LayerRecord`] (INODE in 16 hex digits) | volume tools, when a layer is made |
//! | `/basalt/frozen/INODE` | [`FrozenRecord`]: the layer is frozen (and the snapshot intent) | `basalt volume snapshot` |
//! | `/basalt/families/FAMILY/next_layer` | decimal counter of a family's layers (FAMILY = inode >> 16, hex) | volume tools |
//! | `/basalt/auth/verifier` | hex MAC recognising the cluster secret (never the secret) | `basalt cluster init`, first `basalt up` |
//! | `/basalt/auth/entities/NAME` | an entity's capabilities and key generation (never a key) | `basalt auth add` |
//! | `/basalt/watchers/VOLUME/ID` | a gateway that has the volume open, under its lease (`basalt_client::watchers`) | NBD/NVMe gateways |

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const MAP_KEY: &str = "/basalt/map";
pub const MONITOR_KEY: &str = "/basalt/monitor";
pub const OSDS_PREFIX: &str = "/basalt/osds/";
pub const ALIVE_PREFIX: &str = "/basalt/alive/";
pub const FAILURES_PREFIX: &str = "/basalt/failures/";
pub const NEXT_OSD_ID_KEY: &str = "/basalt/next_osd_id";
pub const REMOVED_OSDS_PREFIX: &str = "/basalt/removed_osds/";
pub const POOLS_PREFIX: &str = "/basalt/pools/";
pub const NEXT_POOL_ID_KEY: &str = "/basalt/next_pool_id";
pub const REMOVED_POOLS_PREFIX: &str = "/basalt/removed_pools/";
pub const VOLUMES_PREFIX: &str = "/basalt/volumes/";
pub const NEXT_INODE_KEY: &str = "/basalt/next_inode";
pub const IMAGES_PREFIX: &str = "/basalt/images/";
pub const OBJVOLS_PREFIX: &str = "/basalt/objvols/";
pub const PGS_PREFIX: &str = "/basalt/pgs/";
pub const LAYERS_PREFIX: &str = "/basalt/layers/";
pub const FROZEN_PREFIX: &str = "/basalt/frozen/";
pub const FAMILIES_PREFIX: &str = "/basalt/families/";
pub const AUTH_VERIFIER_KEY: &str = "/basalt/auth/verifier";
/// Cluster-wide settings an operator changes (`basalt cluster set`, `basalt health mute`).
pub const SETTINGS_KEY: &str = "/basalt/settings";
pub const AUTH_ENTITIES_PREFIX: &str = "/basalt/auth/entities/";
/// S3 bucket records (`basalt_s3::buckets::BucketRecord`); here because a pool removal
/// must see every bucket in the pool.
pub const S3_BUCKETS_PREFIX: &str = "/basalt/s3/buckets/";

/// Key of a removed pool's record (pool ids are never reused: the counter only grows).
pub fn removed_pool_key(id: u32) -> String {
    format!("{REMOVED_POOLS_PREFIX}{id}")
}

/// A pool `basalt pool rm` removed once nothing was left in it and the cluster map had
/// dropped it. Objects OSDs still hold of it (a volume removal cut short before) are
/// garbage: the stray scan deletes them. Written only after the removal is settled, never
/// for `--no-wait` (a volume made from an older map could still land in the pool then).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedPoolRecord {
    pub id: u32,
    pub name: String,
    pub removed_unix: u64,
}

/// Key of a removed OSD's record.
pub fn removed_osd_key(id: u32) -> String {
    format!("{REMOVED_OSDS_PREFIX}{id}")
}

/// An OSD `basalt osd rm` removed. Kept for good: an OSD process started again with that
/// id (its old data directory, or `--id`) is refused instead of re-registering, since the
/// cluster already gave up its data and placed its PGs elsewhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedOsdRecord {
    pub id: u32,
    pub host: String,
    /// Its store's id, when its record had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
    /// Seconds since the Unix epoch.
    pub removed_unix: u64,
    /// Removed with `--force` while some PG still needed it.
    #[serde(default)]
    pub forced: bool,
}

/// Key of a layer's record.
pub fn layer_key(inode: u64) -> String {
    format!("{LAYERS_PREFIX}{inode:016x}")
}

/// Key of a frozen layer's record.
pub fn frozen_key(inode: u64) -> String {
    format!("{FROZEN_PREFIX}{inode:016x}")
}

/// The inode a key under [`FROZEN_PREFIX`] or [`LAYERS_PREFIX`] names.
pub fn inode_of_key(key: &str) -> Option<u64> {
    let hex = key.rsplit('/').next()?;
    (hex.len() == 16).then(|| u64::from_str_radix(hex, 16).ok())?
}

/// Key of the layer counter of the family of `inode`.
pub fn next_layer_key(inode: u64) -> String {
    format!("{FAMILIES_PREFIX}{:012x}/next_layer", inode >> 16)
}

/// Key of OSD `id`'s static record.
pub fn osd_key(id: u32) -> String {
    format!("{OSDS_PREFIX}{id}")
}

/// Key of OSD `id`'s liveness record.
pub fn alive_key(id: u32) -> String {
    format!("{ALIVE_PREFIX}{id}")
}

/// Key of `reporter`'s report that it cannot reach OSD `target`.
pub fn failure_key(target: u32, reporter: u32) -> String {
    format!("{FAILURES_PREFIX}{target}/{reporter}")
}

/// (target, reporter) of a key under [`FAILURES_PREFIX`]; None for any other key.
pub fn parse_failure_key(key: &str) -> Option<(u32, u32)> {
    let (target, reporter) = key.strip_prefix(FAILURES_PREFIX)?.split_once('/')?;
    Some((target.parse().ok()?, reporter.parse().ok()?))
}

/// An OSD's report that a heartbeat peer stopped answering (or refused its connection).
/// Written under the reporter's liveness lease, so it vanishes with the reporter; deleted
/// by the reporter when the peer answers again. The monitor marks the peer down when
/// enough reporters agree (docs/design.md, "Failure detection by peers").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureReport {
    /// The run of the target the reporter could not reach (a report of an earlier run
    /// counts for nothing against a restarted OSD).
    pub target_incarnation: u64,
    /// The run of the reporter that wrote it (0: an older OSD that did not say). A report
    /// lives under its reporter's lease, which outlives a crash by up to its TTL: a restarted
    /// reporter's earlier reports count for nothing.
    #[serde(default)]
    pub reporter_incarnation: u64,
    /// Why: "no answer for 1.0 s", "connection refused", ...
    pub reason: String,
    /// Seconds since the Unix epoch when the reporter last heard the target (or began
    /// trying).
    pub since: u64,
}

/// Key of a pool's record.
pub fn pool_key(name: &str) -> String {
    format!("{POOLS_PREFIX}{name}")
}

/// Key of a PG's record.
pub fn pg_key(pool: u32, index: u32) -> String {
    format!("{PGS_PREFIX}{pool}.{index}")
}

/// Who holds the monitor role.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MonitorRecord {
    /// Free text naming the process ("osd.3 on host1", "mon on host2").
    pub holder: String,
    /// Seconds since the Unix epoch when it took the role.
    pub since: u64,
}

/// Cluster-wide settings (`SETTINGS_KEY`): what `basalt cluster set` and `basalt health
/// mute` change. An absent record, or an absent field, means the default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClusterSettings {
    /// An OSD this full (fraction of its object slots in use) is a warning.
    #[serde(default = "default_nearfull_ratio")]
    pub nearfull_ratio: f64,
    /// An OSD this full is an error: writes needing new objects are about to fail.
    #[serde(default = "default_full_ratio")]
    pub full_ratio: f64,
    /// Maintenance: the monitor marks no down OSD out, however long it stays down (its
    /// data is not re-replicated; a host can reboot without data moving).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub noout: bool,
    /// Health checks an operator muted: they show, but do not count toward the health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutes: Vec<HealthMute>,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        Self {
            nearfull_ratio: default_nearfull_ratio(),
            full_ratio: default_full_ratio(),
            noout: false,
            mutes: Vec::new(),
        }
    }
}

/// Ceph's defaults (`mon_osd_nearfull_ratio`, `mon_osd_full_ratio`).
fn default_nearfull_ratio() -> f64 {
    0.85
}

fn default_full_ratio() -> f64 {
    0.95
}

/// One muted health check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthMute {
    /// The check's code (`OSD_DOWN`, `OSD_NEARFULL`, ...).
    pub code: String,
    /// Seconds since the Unix epoch when the mute ends (None: until unmuted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
}

/// What the cluster knows of an OSD whether it runs or not.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsdRecord {
    pub id: u32,
    /// Failure-domain name of its machine.
    pub host: String,
    /// Capacity of its store in bytes (its placement weight is derived from it).
    pub capacity_bytes: u64,
    /// Set by an operator (`basalt osd out`): keep it out of placement even while up.
    #[serde(default)]
    pub admin_out: bool,
    /// Id of its store (16 hex digits, as in the store's superblock): lets `basalt disk ls`
    /// name the OSD of a device. Absent in records of older OSDs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_id: Option<String>,
    /// Where it stands above its host (`zone`, `rack`), as its `--location` said.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub location: BTreeMap<String, String>,
    /// Its device class (`nvme`, `ssd`, `hdd`: detected, or its `--device-class`); empty in
    /// records of older OSDs.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub class: String,
}

/// Written by a running OSD under its lease: vanishes when the OSD stops renewing it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AliveRecord {
    /// Data-plane address, "IP:PORT".
    pub addr: String,
    /// Random per process start (see `OsdInfo::incarnation`).
    pub incarnation: u64,
    /// Seconds since the Unix epoch when this process started.
    pub started: u64,
    /// Prometheus endpoint, when the OSD serves one.
    #[serde(default)]
    pub metrics_addr: Option<String>,
    /// How its store's I/O runs (`direct uring`, `buffered threads`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub io: String,
    /// The epoch of a map that showed this run down, written once its store was flushed
    /// after seeing it (0: never). Newer than the OSD's `up_from`, it tells the monitor an
    /// OSD marked down while running holds no acknowledged write that is not durable.
    #[serde(default, skip_serializing_if = "is_zero_epoch")]
    pub flushed_down: u32,
    /// The release and commit of the OSD's binary (`0.1.0 (1a2b3c4d5e)`); empty from an
    /// older OSD.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The data-plane frame version and the store format it speaks (0: an older OSD).
    #[serde(default)]
    pub wire: u8,
    #[serde(default)]
    pub store_format: u32,
}

/// A pool as `basalt pool create` defines it. The monitor gives it an id and puts it in the map.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub id: u32,
    pub name: String,
    pub size: u32,
    pub min_size: u32,
    pub pg_count: u32,
    /// "host" or "osd".
    pub failure_domain: String,
    /// Bytes per object of volumes in the pool (for an erasure-coded pool: per stripe,
    /// `k` chunks of `object_size / k` bytes).
    pub object_size: u32,
    /// The erasure code of an erasure-coded pool (then `size` is `k + m`); absent for a
    /// replicated pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ec: Option<basalt_proto::EcProfile>,
    /// Only OSDs of this device class hold the pool's PGs (None: any).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_class: Option<String>,
}

/// One copy of a PG known to hold its complete, current contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteCopy {
    pub osd: u32,
    pub incarnation: u64,
}

/// What a PG's primary records when it activates the PG for an interval, and again whenever
/// a replica finishes recovery. The next primary reads it to know where the authoritative
/// contents are: any copy listed in `complete` of the last activated interval holds every
/// write acknowledged so far (writes are acknowledged only once every member applied them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PgRecord {
    /// Map epoch at which the interval began (the primary's version epoch).
    pub epoch: u32,
    /// The primary of that interval.
    pub primary: u32,
    /// The acting set of that interval.
    pub acting: Vec<u32>,
    /// Members known complete (the primary, and replicas that finished recovery).
    pub complete: Vec<CompleteCopy>,
    /// Objects the primary still has to recover onto some member (0 = clean).
    #[serde(default)]
    pub degraded_objects: u64,
    /// Members not (yet) known complete that still hold every acknowledged write: complete
    /// or holders in the previous activated interval, as this same run. Every write
    /// acknowledged since needed them too. When every complete copy restarted (and lost
    /// what it had not flushed), a holder that kept running is the better authority.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<CompleteCopy>,
    /// Erasure-coded PGs: stripes whose newest committed version fewer than k positions
    /// hold (I/O to them waits rather than return older data, until the OSDs holding them
    /// return or an operator gives them up).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unfound_objects: u64,
    /// Erasure-coded PGs: the OSDs that may hold the unfound stripes' missing chunks and did
    /// not answer peering (empty with unfound stripes: none is known to hold them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfound_waiting: Vec<u32>,
    /// Erasure-coded PGs: for each position, the OSDs that may hold its chunks — its
    /// holder, then holders of earlier intervals while the position is not yet rebuilt — so
    /// the next primary finds chunks a placement change left elsewhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ec_sources: Vec<Vec<u32>>,
    /// The pool's PG count changed at this epoch and a PG of the new count took its
    /// contents from this record (docs/design.md, "PG split and merge"): a primary of an
    /// interval below it must not activate (0: never fenced).
    #[serde(default, skip_serializing_if = "is_zero_epoch")]
    pub fence: u32,
    /// A split child's record copied from its parent's last record before the split at
    /// this epoch: the child's objects are on the parent's copies (0: the PG's own record).
    #[serde(default, skip_serializing_if = "is_zero_epoch")]
    pub inherited: u32,
}

impl PgRecord {
    /// Written in the era of the pool's PG count that began at `since` (by the PG's own
    /// primary at or after it, or inherited from a split parent at it).
    pub fn of_era(&self, since: u32) -> bool {
        self.epoch >= since || self.inherited >= since
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_epoch(n: &u32) -> bool {
    *n == 0
}

/// A layer of a volume family (see docs/design.md, "Layers"). Written once when the layer is
/// made; `parent` only ever changes to a layer further down the same chain, after the data
/// in between was copied up, so a cached chain stays correct for reads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    pub inode: u64,
    /// The layer reads fall through to when this one lacks an object.
    pub parent: Option<u64>,
    /// The volume (or image) this layer belongs to, for messages and `volume info`.
    pub owner: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
}

/// A frozen layer: client writes to it are refused (status Frozen). Written before a
/// snapshot fences the layer; it is also the snapshot's intent, so whoever meets the frozen
/// head (the command's rerun, a gateway) can finish the snapshot. Never deleted: a stale
/// writer must stay refused for as long as it may exist.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenRecord {
    pub inode: u64,
    /// The volume whose head this layer was.
    pub volume: String,
    /// The snapshot the layer becomes.
    pub snapshot: String,
    /// The volume's next head (its parent is this layer); 0 for an image's layer, which is
    /// frozen for good with nothing to finish (`volume` and `snapshot` are then empty).
    pub next_head: u64,
    /// Size of the volume when frozen (for a rollback: the snapshot's size, the volume's
    /// size afterwards).
    pub size: u64,
    /// A rollback, not a snapshot: the new head's parent is this snapshot layer, `snapshot`
    /// names it, and the frozen layer (the old head) is deleted instead of kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_to: Option<u64>,
    /// Seconds since the Unix epoch.
    pub created: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: layer keys round-trip to their inode and sort by inode.
    #[test]
    fn layer_keys() {
        let inode = 0x0001_0000_0042_0003;
        assert_eq!(layer_key(inode), "/basalt/layers/0001000000420003");
        assert_eq!(inode_of_key(&layer_key(inode)), Some(inode));
        assert_eq!(inode_of_key(&frozen_key(inode)), Some(inode));
        assert_eq!(inode_of_key("/basalt/frozen/xyz"), None);
        assert_eq!(
            next_layer_key(inode),
            "/basalt/families/000100000042/next_layer"
        );
        assert!(layer_key(1) < layer_key(2));
    }
}
