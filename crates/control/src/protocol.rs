//! The wire format of the control API: one JSON request per line, one JSON reply per line
//! (after any progress lines of a long operation).
//!
//! Requests are `{"op":"create","name":N,"size":BYTES}`, `{"op":"ls"}`,
//! `{"op":"info","name":N}`, `{"op":"resize","name":N,"size":BYTES}`, `{"op":"rm","name":N}`,
//! `{"op":"status"}`, `{"op":"iostat"}`, `{"op":"snapshot","name":N,"snapshot":S}`,
//! `{"op":"clone","name":N,"snapshot":S,"new":M}`, `{"op":"rollback","name":N,"snapshot":S}`,
//! `{"op":"snapshot_rm","name":N,"snapshot":S}`, `{"op":"flatten","name":N}`,
//! `{"op":"s3_key_create","user":U}`, `{"op":"s3_key_ls"}`, `{"op":"s3_key_rm","access_key":K}`,
//! `{"op":"pool_create","pool":REQUEST,"wait_ms":MS}`, `{"op":"pool_ls"}`, ... (every variant
//! of [`Request`]); replies are `{"ok":true,...}` or `{"ok":false,"error":MESSAGE,"kind":KIND}`
//! (KIND: not_found, exists, conflict, invalid, timeout, other; absent from older servers).
//! Long operations first send progress lines, `{"ok":true,"progress":{"done":D,"total":T}}`.

use crate::client::ControlError;
use basalt_client::VolumeInfo;
use serde::{Deserialize, Serialize};

/// One request to the control API.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    Create {
        name: String,
        /// Ignored with `from_image` (the clone has the image's size).
        #[serde(default)]
        size: u64,
        /// The pool, by name (default: the server's pool).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
        /// Make the volume as a clone of this image.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_image: Option<String>,
    },
    Ls,
    Info {
        name: String,
    },
    Resize {
        name: String,
        size: u64,
        /// A smaller size is refused unless this is set (the data past it is discarded).
        #[serde(default)]
        allow_shrink: bool,
    },
    Rm {
        name: String,
        /// Remove it even while gateways have it open (their I/O then fails).
        #[serde(default)]
        force: bool,
    },
    /// Take snapshot `snapshot` of volume `name`; replies with the volume.
    Snapshot {
        name: String,
        snapshot: String,
    },
    /// Clone `name@snapshot` into the new volume `new`; replies with the new volume.
    Clone {
        name: String,
        snapshot: String,
        new: String,
    },
    /// Roll volume `name` back to its snapshot `snapshot`; replies with the volume.
    Rollback {
        name: String,
        snapshot: String,
    },
    /// Remove snapshot `name@snapshot` (copying what later layers still read into them).
    #[serde(rename = "snapshot_rm")]
    SnapshotRm {
        name: String,
        snapshot: String,
    },
    /// Copy into clone `name` everything it reads from its parent, then drop the link.
    Flatten {
        name: String,
    },
    /// Show (`show`), open a handover window of `secs` seconds in (`handover`), or break
    /// (`break`) the writer lock of volume `name`; replies with `lock`.
    Lock {
        name: String,
        action: LockAction,
        #[serde(default)]
        secs: u64,
    },
    /// Add NVMe host NQNs to (`allow`) or drop them from (`deny`) volume `name`'s access
    /// list; replies with `access` (both empty: just show it).
    Access {
        name: String,
        #[serde(default)]
        allow: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
    },
    /// Start importing image `name`; replies with the image and, when this process serves
    /// NBD, the URI to write its data to.
    #[serde(rename = "image_begin")]
    ImageBegin {
        name: String,
        size: u64,
        source: String,
    },
    /// End an import: durable, frozen, ready.
    #[serde(rename = "image_finish")]
    ImageFinish {
        name: String,
    },
    #[serde(rename = "image_ls")]
    ImageLs,
    #[serde(rename = "image_info")]
    ImageInfo {
        name: String,
    },
    /// Remove an image (refused while volumes are clones of it); also aborts an import.
    #[serde(rename = "image_rm")]
    ImageRm {
        name: String,
    },
    /// Build objvol `name` over `bucket`/`prefix` of `endpoint` (default: this cluster's
    /// S3 gateway) read with the key in `credentials` (default: this cluster's own).
    #[serde(rename = "objvol_create")]
    ObjvolCreate {
        name: String,
        bucket: String,
        #[serde(default)]
        prefix: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        endpoint: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        credentials: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ca_file: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        region: Option<String>,
    },
    /// Rebuild objvol `name`'s index from its bucket as it is now.
    #[serde(rename = "objvol_refresh")]
    ObjvolRefresh {
        name: String,
    },
    #[serde(rename = "objvol_ls")]
    ObjvolLs,
    #[serde(rename = "objvol_info")]
    ObjvolInfo {
        name: String,
    },
    #[serde(rename = "objvol_rm")]
    ObjvolRm {
        name: String,
    },
    /// Create a pool (its `id` is allocated, its defaults filled in to fit the cluster, and
    /// refused when the cluster cannot place it unless it allows that); with `wait_ms`, reply once the pool is in the
    /// cluster map, or with a `timeout` error after that long.
    #[serde(rename = "pool_create")]
    PoolCreate {
        pool: basalt_client::PoolRequest,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Every pool record.
    #[serde(rename = "pool_ls")]
    PoolLs,
    /// Change one setting of a pool (`basalt pool set`): `key` size, min-size,
    /// failure-domain or pgs; with `wait_ms`, reply once the map shows it.
    #[serde(rename = "pool_set")]
    PoolSet {
        name: String,
        key: String,
        value: String,
        #[serde(default)]
        allow_unplaceable: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Remove an empty pool; with `wait_ms`, reply once it is out of the cluster map.
    #[serde(rename = "pool_rm")]
    PoolRm {
        name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// The I/O counters of every volume this process serves (`basalt volume iostat`).
    Iostat,
    /// The cluster settings (`basalt cluster get/set`, `basalt health mute`); with `put`,
    /// replace them with those (checked first) and reply with what is stored.
    Settings {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        put: Option<basalt_meta::schema::ClusterSettings>,
    },
    /// `interval_ms` > 0 samples counters twice that far apart to report rates.
    Status {
        #[serde(default)]
        interval_ms: u64,
    },
    /// Scrub every PG (of `pool` when given): compare every copy or chunk, repair.
    Scrub {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pool: Option<String>,
    },
    /// A new S3 access key for `user`; the reply carries its secret, once.
    #[serde(rename = "s3_key_create")]
    S3KeyCreate {
        user: String,
    },
    /// Every S3 access key (never a secret).
    #[serde(rename = "s3_key_ls")]
    S3KeyLs,
    /// Remove an S3 access key.
    #[serde(rename = "s3_key_rm")]
    S3KeyRm {
        access_key: String,
    },
}

/// An S3 access key as the control API shows it: the secret only in the reply that
/// created it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct S3Key {
    pub access_key: String,
    pub user: String,
    /// Seconds since the Unix epoch.
    pub created: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
}

impl S3Key {
    pub(crate) fn of(record: basalt_s3::keys::KeyRecord, secret: Option<String>) -> Self {
        Self {
            access_key: record.access_key,
            user: record.user,
            created: record.created,
            secret,
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What kind of failure `error` is (the CLI's exit code follows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<basalt_client::ErrorKind>,
    /// `pool_create`: the new pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<basalt_meta::schema::PoolRecord>,
    /// `pool_ls`: every pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pools: Option<Vec<basalt_meta::schema::PoolRecord>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume: Option<VolumeInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<VolumeInfo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<basalt_client::status::StatusReport>,
    /// `settings`: the cluster settings in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<basalt_meta::schema::ClusterSettings>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scrub: Option<basalt_client::ScrubReport>,
    /// `info`: what each of the volume's layers holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<basalt_client::VolumeUsage>,
    /// `ls`: the same for each volume, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usages: Option<Vec<basalt_client::VolumeUsage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<basalt_client::ImageInfo>,
    /// `image_ls`: bytes each image holds (one copy), in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_bytes: Option<Vec<u64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<basalt_client::ImageInfo>>,
    /// Where to write an image's data (image_begin, when this process serves NBD).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbd_uri: Option<String>,
    /// `s3_key_create`: the new key, with its secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_key: Option<S3Key>,
    /// `s3_key_ls`: every key, without secrets, by access key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_keys: Option<Vec<S3Key>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objvol: Option<basalt_objvol::ObjvolInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objvols: Option<Vec<basalt_objvol::ObjvolInfo>>,
    /// `iostat`: each volume's counters, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iostat: Option<Vec<VolumeIo>>,
    /// A progress line of a long operation (not its final reply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressLine>,
    /// `lock`: the writer lock after the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<LockReport>,
    /// `access`: the volume's NVMe host access list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<basalt_client::access::AccessRecord>,
}

/// What a `lock` request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LockAction {
    Show,
    Handover,
    Break,
}

/// A volume's writer lock: its record, whether each holder's gateway is alive, and the
/// holders a break removed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockReport {
    pub record: basalt_client::locks::LockRecord,
    pub alive: Vec<bool>,
    #[serde(default)]
    pub broken: Vec<basalt_client::locks::LockHolder>,
}

/// Cumulative I/O of one volume on the frontends (NBD, NVMe/TCP) of the serving process:
/// `basalt volume iostat` takes rates between two of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumeIo {
    pub volume: String,
    pub reads: u64,
    pub writes: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Time spent serving them (sums of their latencies).
    pub read_seconds: f64,
    pub write_seconds: f64,
}

/// How far a long operation got.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ProgressLine {
    pub done: u64,
    pub total: u64,
}

impl Response {
    /// A failed reply saying `message` (of no particular kind).
    pub fn error(message: String) -> Self {
        Self {
            ok: false,
            error: Some(message),
            ..Self::default()
        }
    }

    /// The reply to a request that failed with `e`: its message and kind.
    pub fn failed(e: basalt_client::ClientError) -> Self {
        Self {
            kind: Some(e.kind()),
            ..Self::error(e.to_string())
        }
    }

    /// The error of a failed reply, with its kind when the server said it.
    pub fn into_error(self) -> ControlError {
        ControlError::Failed {
            kind: self.kind,
            message: self.error.unwrap_or_else(|| "unknown error".into()),
        }
    }

    /// A successful reply carrying nothing more.
    pub(crate) fn done() -> Self {
        Self {
            ok: true,
            ..Self::default()
        }
    }

    pub(crate) fn pool(pool: basalt_meta::schema::PoolRecord) -> Self {
        Self {
            ok: true,
            pool: Some(pool),
            ..Self::default()
        }
    }

    pub(crate) fn image(image: basalt_client::ImageInfo) -> Self {
        Self {
            ok: true,
            image: Some(image),
            ..Self::default()
        }
    }

    pub(crate) fn volume(v: VolumeInfo) -> Self {
        Self {
            ok: true,
            volume: Some(v),
            ..Self::default()
        }
    }
}
