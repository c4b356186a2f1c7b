//! Which OSD a data directory belongs to: its identity file (`osd.json`), written once when
//! the directory is first used, with an id allocated from the cluster metadata.

use basalt_meta::schema::{NEXT_OSD_ID_KEY, OSDS_PREFIX};
use basalt_meta::{MetaError, MetaStore};
use basalt_proto::OsdId;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

/// Version of the identity file format.
const IDENTITY_FORMAT_VERSION: u32 = 1;
/// Name of the identity file in an OSD's data directory.
pub const IDENTITY_FILE: &str = "osd.json";

/// Name of the file binding an OSD's data directory to the store on its `--device`.
pub const DEVICE_STORE_FILE: &str = "store.json";

/// Which store the OSD of a data directory keeps on a block device: device names can change
/// across reboots (`/dev/sdb` becomes `/dev/sdc`), store ids do not.
#[derive(Serialize, Deserialize)]
struct DeviceStoreRecord {
    format_version: u32,
    /// The store id, 16 hex digits (as `basalt disk ls` prints it).
    store_id: String,
    /// The device path it was first opened at (for the operator; not checked).
    device: PathBuf,
}

/// The identity file of an OSD's data directory.
#[derive(Serialize, Deserialize)]
struct OsdIdentity {
    format_version: u32,
    id: OsdId,
}

/// Why a data directory's identity could not be read or made.
#[derive(Debug, Error)]
pub enum IdentityError {
    #[error("{path} is unreadable: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error("{dir} belongs to osd.{found}, not osd.{wanted} (drop --id, or use another --data)")]
    OtherOsd {
        dir: PathBuf,
        found: OsdId,
        wanted: OsdId,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{device} holds store {found}, but {dir} belongs to the OSD of store {recorded} \
         (first opened at {recorded_device}); device names can change across reboots: give \
         --device as /dev/disk/by-id/..."
    )]
    OtherStore {
        dir: PathBuf,
        device: PathBuf,
        found: String,
        recorded: String,
        recorded_device: String,
    },
    #[error(
        "the cluster map in the metadata (epoch {found}) is older than osd.{id} has seen \
         (epoch {seen}, in {dir}): the metadata was restored from a backup taken while the \
         cluster ran, and its PG records may name copies that are no longer current. \
         Refusing to start rather than serve stale data: restore a backup taken with every \
         Basalt daemon stopped (docs/operations.md, \"Backing up etcd\")"
    )]
    MetadataBehind {
        id: OsdId,
        dir: PathBuf,
        seen: u32,
        found: u32,
    },
    #[error("could not allocate an OSD id: {0}")]
    Allocate(String),
    #[error("cluster metadata: {0}")]
    Meta(#[from] MetaError),
}

/// Allocate the next free OSD id (compare-and-swap on a counter; skips registered ids).
pub async fn allocate_osd_id(meta: &dyn MetaStore) -> Result<OsdId, IdentityError> {
    let taken: Vec<OsdId> = meta
        .list(OSDS_PREFIX)
        .await?
        .iter()
        .filter_map(|(k, _, _)| k[OSDS_PREFIX.len()..].parse().ok())
        .collect();
    // Bound: ids already taken are skipped, at most one attempt each (plus one).
    for _ in 0..=taken.len() {
        let Some(id) = basalt_meta::next_counter(meta, NEXT_OSD_ID_KEY, 0).await? else {
            return Err(IdentityError::Allocate("too much contention".into()));
        };
        let id = OsdId::try_from(id).map_err(|_| IdentityError::Allocate("no ids left".into()))?;
        if !taken.contains(&id) {
            return Ok(id);
        }
    }
    Err(IdentityError::Allocate("every id tried is taken".into()))
}

/// The id of the OSD whose data directory is `dir`: read from its identity file, or (first
/// use) `wanted` or a newly allocated id, written durably. Returns (id, is_new).
pub async fn identity(
    dir: &Path,
    wanted: Option<OsdId>,
    meta: &dyn MetaStore,
) -> Result<(OsdId, bool), IdentityError> {
    let path = dir.join(IDENTITY_FILE);
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| IdentityError::Io { op, path, source }
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let ident: OsdIdentity =
                serde_json::from_slice(&bytes).map_err(|e| IdentityError::Unreadable {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            match wanted {
                Some(w) if w != ident.id => Err(IdentityError::OtherOsd {
                    dir: dir.to_path_buf(),
                    found: ident.id,
                    wanted: w,
                }),
                _ => Ok((ident.id, false)),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = match wanted {
                Some(id) => id,
                None => allocate_osd_id(meta).await?,
            };
            let ident = OsdIdentity {
                format_version: IDENTITY_FORMAT_VERSION,
                id,
            };
            let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
            let bytes = serde_json::to_vec(&ident).expect("an identity serialises");
            std::fs::write(&tmp, bytes).map_err(io("write", &tmp))?;
            // Durable before it names the directory's OSD: file, rename, directory.
            std::fs::File::open(&tmp)
                .and_then(|f| f.sync_all())
                .map_err(io("fsync", &tmp))?;
            std::fs::rename(&tmp, &path).map_err(io("rename to", &path))?;
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io("fsync", dir))?;
            Ok((id, true))
        }
        Err(e) => Err(io("read", &path)(e)),
    }
}

/// Check that the store on `device` (id `store_id`) is the one of the OSD whose data
/// directory is `dir`, recording it there (`store.json`) on first use: an OSD never starts
/// on another OSD's disk.
pub fn bind_device_store(dir: &Path, device: &Path, store_id: u64) -> Result<(), IdentityError> {
    let path = dir.join(DEVICE_STORE_FILE);
    let found = format!("{store_id:016x}");
    match std::fs::read(&path) {
        Ok(bytes) => {
            let record: DeviceStoreRecord =
                serde_json::from_slice(&bytes).map_err(|e| IdentityError::Unreadable {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            if record.store_id != found {
                return Err(IdentityError::OtherStore {
                    dir: dir.to_path_buf(),
                    device: device.to_path_buf(),
                    found,
                    recorded: record.store_id,
                    recorded_device: record.device.display().to_string(),
                });
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let record = DeviceStoreRecord {
                format_version: IDENTITY_FORMAT_VERSION,
                store_id: found,
                device: device.to_path_buf(),
            };
            let bytes = serde_json::to_vec(&record).expect("a record serialises");
            write_durably(dir, &path, &bytes)
        }
        Err(e) => Err(IdentityError::Io {
            op: "read",
            path,
            source: e,
        }),
    }
}

/// Name of the file in an OSD's data directory holding the newest cluster map epoch the
/// OSD has seen (decimal).
pub const MAP_EPOCH_FILE: &str = "map-epoch";

/// Refuse to start osd `id` of data directory `dir` on metadata whose cluster map (epoch
/// `epoch`) is older than one this directory's OSD has seen: epochs only grow, so the
/// metadata went back in time (restored from a backup), and its PG records may name as
/// complete copies that later intervals left behind. A directory that never recorded an
/// epoch passes.
pub fn check_map_epoch(dir: &Path, id: OsdId, epoch: u32) -> Result<(), IdentityError> {
    let path = dir.join(MAP_EPOCH_FILE);
    let seen = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map_err(|e| IdentityError::Unreadable {
                path: path.clone(),
                reason: e.to_string(),
            })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(IdentityError::Io {
                op: "read",
                path,
                source: e,
            })
        }
    };
    if epoch < seen {
        return Err(IdentityError::MetadataBehind {
            id,
            dir: dir.to_path_buf(),
            seen,
            found: epoch,
        });
    }
    Ok(())
}

/// Record in `dir` the newest map epoch `maps` shows, at each change, until the sender
/// goes away (for [`check_map_epoch`] at the next start). A failed write is logged
/// and tried again at the next map: the record is a floor, an older one stays safe.
pub async fn record_map_epochs(
    dir: PathBuf,
    mut maps: tokio::sync::watch::Receiver<std::sync::Arc<basalt_placement::ClusterMap>>,
) {
    let mut written = 0u32;
    // Bound: one round per map change; ends when the map follower stops.
    loop {
        let epoch = maps.borrow_and_update().epoch;
        if epoch > written {
            let path = dir.join(MAP_EPOCH_FILE);
            let write_dir = dir.clone();
            let text = format!("{epoch}\n");
            let wrote = tokio::task::spawn_blocking(move || {
                write_durably(&write_dir, &path, text.as_bytes())
            })
            .await;
            match wrote {
                Ok(Ok(())) => written = epoch,
                Ok(Err(e)) => tracing::warn!("record the map epoch: {e}"),
                Err(e) => tracing::warn!("record the map epoch: {e}"),
            }
        }
        // No rate limit: a cluster that lived a second (restored, started, stopped) must
        // leave its newest epoch here, or a stale backup of it would pass the check (seen:
        // a one-per-second record kept the epoch of the restore, not the three after it).
        // Map changes come a few at a time; each is one small durable write.
        if maps.changed().await.is_err() {
            return;
        }
    }
}

/// Write `bytes` to `path` in `dir` through a temporary file: file, rename, directory.
fn write_durably(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| IdentityError::Io { op, path, source }
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(io("write", &tmp))?;
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(io("fsync", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("rename to", path))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_meta::EmbeddedMeta;

    /// Goal: a directory that saw map epoch 40 starts on metadata at 40 or later, and
    /// refuses (naming both epochs and the procedure) metadata at 39: restored from an
    /// older backup. A directory without the record starts.
    #[test]
    fn an_older_map_than_seen_is_refused() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        check_map_epoch(dir.path(), 3, 1).expect("no record yet");
        let path = dir.path().join(MAP_EPOCH_FILE);
        write_durably(dir.path(), &path, b"40\n").expect("write");
        check_map_epoch(dir.path(), 3, 40).expect("the same epoch");
        check_map_epoch(dir.path(), 3, 41).expect("a newer one");
        let err = check_map_epoch(dir.path(), 3, 39).unwrap_err().to_string();
        assert!(
            err.contains("epoch 39") && err.contains("epoch 40") && err.contains("osd.3"),
            "{err}"
        );
        assert!(err.contains("Backing up etcd"), "{err}");
        std::fs::write(&path, "forty").expect("write");
        assert!(
            check_map_epoch(dir.path(), 3, 50).is_err(),
            "unreadable record"
        );
    }

    /// Goal: the first use allocates and records an id, later uses read it back, and a
    /// directory of another OSD is refused by name.
    #[tokio::test]
    async fn identity_is_allocated_once_and_checked() {
        let meta = EmbeddedMeta::in_memory();
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (id, new) = identity(dir.path(), None, &meta).await.expect("first use");
        assert!(new);
        let (again, new) = identity(dir.path(), None, &meta).await.expect("second use");
        assert_eq!((again, new), (id, false));
        let other = identity(dir.path(), Some(id + 5), &meta).await;
        assert!(
            matches!(other, Err(IdentityError::OtherOsd { .. })),
            "{other:?}"
        );
        let second = tempfile::tempdir().expect("a temporary directory");
        let (next, _) = identity(second.path(), None, &meta)
            .await
            .expect("another OSD");
        assert_ne!(next, id, "two directories got one id");
    }

    /// Goal: a data directory is bound to the store of its first device, and another
    /// store (a renamed device) is refused naming both.
    #[test]
    fn a_device_store_is_bound_to_its_data_directory() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let sdb = Path::new("/dev/sdb");
        bind_device_store(dir.path(), sdb, 0xabc).expect("first use");
        bind_device_store(dir.path(), Path::new("/dev/sdc"), 0xabc).expect("same store");
        let err = bind_device_store(dir.path(), sdb, 0xdef).expect_err("another store");
        assert_eq!(
            err.to_string(),
            format!(
                "/dev/sdb holds store 0000000000000def, but {} belongs to the OSD of store \
                 0000000000000abc (first opened at /dev/sdb); device names can change across \
                 reboots: give --device as /dev/disk/by-id/...",
                dir.path().display()
            )
        );
    }
}
