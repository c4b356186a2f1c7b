//! The NBD gateway of a Basalt cluster: exports every volume of the cluster under its name,
//! every snapshot read-only as `VOLUME@SNAPSHOT`, every ready image as `image:NAME` and
//! every ready object-backed volume as `objvol:NAME`, through the client library. `basalt up`, `basalt nbd`, `basalt image import` and the
//! benchmark's private gateway all serve this catalogue.

use crate::{BlockDevice, DeviceError, ExportInfo, Exports, Extent};
use async_trait::async_trait;
use basalt_client::{ClientError, Cluster, Volume};
use basalt_objvol::reader::{Reader, SourceError};
use basalt_proto::Status;
use bytes::Bytes;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Every volume of the cluster, by name; `""` opens the default volume.
pub struct VolumeExports {
    cluster: Arc<Cluster>,
    default_volume: Option<String>,
    /// When set, the one volume exported (the benchmark's private gateway).
    only: Option<String>,
    /// Credentials for objvols whose record names none (`basalt up`'s own S3 key).
    objvol_credentials: Mutex<Option<PathBuf>>,
    /// Objvols opened, by name, with the layer of the index they read (an objvol's extent
    /// map is read once, not per connection; a refresh makes a new layer).
    objvols: Mutex<HashMap<String, (u64, Arc<Reader>)>>,
    /// Where this gateway records the volumes it has open (None: it does not).
    watchers: Option<Arc<basalt_client::watchers::Watchers>>,
}

impl VolumeExports {
    /// Every volume of `cluster`; the export name `""` opens `default_volume`, if any.
    pub fn new(cluster: Arc<Cluster>, default_volume: Option<String>) -> Self {
        Self {
            cluster,
            default_volume,
            only: None,
            objvol_credentials: Mutex::new(None),
            objvols: Mutex::new(HashMap::new()),
            watchers: None,
        }
    }

    /// Record every writable volume this gateway has open in `watchers`, so that `volume
    /// rm` refuses (and names this gateway) while a client uses it.
    pub fn with_watchers(mut self, watchers: Arc<basalt_client::watchers::Watchers>) -> Self {
        self.watchers = Some(watchers);
        self
    }

    /// Objvols that name no credentials read their bucket with the key in `path` (set once
    /// the process's S3 gateway is up).
    pub fn set_objvol_credentials(&self, path: Option<PathBuf>) {
        *self.objvol_credentials.lock().expect("objvol credentials") = path;
    }

    /// The reader of ready objvol `name` (None: there is none).
    async fn objvol(&self, name: &str) -> Result<Option<Arc<Reader>>, DeviceError> {
        let info = match basalt_objvol::catalog::info(&self.cluster, name).await {
            Ok(i) if i.state == basalt_objvol::ObjvolState::Ready => i,
            Ok(_) => return Ok(None),
            Err(ClientError::Invalid { .. } | ClientError::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(device_error(e)),
        };
        if let Some((inode, r)) = self.objvols.lock().expect("objvol cache").get(name) {
            if *inode == info.inode {
                return Ok(Some(r.clone()));
            }
        }
        let path = info
            .source
            .credentials
            .clone()
            .map(PathBuf::from)
            .or_else(|| {
                self.objvol_credentials
                    .lock()
                    .expect("objvol credentials")
                    .clone()
            })
            .ok_or_else(|| {
                DeviceError::Io(format!(
                    "objvol \"{name}\" names no credentials and this gateway has none for it"
                ))
            })?;
        let open = async {
            let credentials = basalt_objvol::s3::Credentials::load(&path)?;
            info.source.open(&credentials)
        };
        let source = open.await.map_err(source_error)?;
        let (_, reader) = basalt_objvol::catalog::open(&self.cluster, name, Arc::new(source))
            .await
            .map_err(device_error)?;
        // Clients open several connections at once (nbdfuse: four): the first reader
        // stored serves them all, so one cache and one readahead see every read and no
        // byte is fetched twice.
        let mut objvols = self.objvols.lock().expect("objvol cache");
        if let Some((inode, r)) = objvols.get(name) {
            if *inode == info.inode {
                return Ok(Some(r.clone()));
            }
        }
        let reader = Arc::new(reader);
        objvols.insert(name.to_string(), (info.inode, reader.clone()));
        Ok(Some(reader))
    }

    /// Export volume `name` alone, under its name (and as the default export).
    pub fn only(cluster: Arc<Cluster>, name: &str) -> Self {
        Self {
            cluster,
            default_volume: Some(name.to_string()),
            only: Some(name.to_string()),
            objvol_credentials: Mutex::new(None),
            objvols: Mutex::new(HashMap::new()),
            watchers: None,
        }
    }

    fn exported(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|only| only == name)
    }
}

/// The NBD error a client library error becomes (logged when it is an I/O failure).
fn device_error(e: ClientError) -> DeviceError {
    match e {
        ClientError::Status {
            status: Status::NoSpace,
        } => DeviceError::NoSpace,
        ClientError::Status {
            status: Status::Invalid,
        }
        | ClientError::OutOfRange { .. }
        | ClientError::Invalid { .. } => DeviceError::Invalid(e.to_string()),
        ClientError::ReadOnly { .. } => DeviceError::ReadOnly,
        ClientError::Locked { .. } => {
            tracing::info!("volume open refused: {e}");
            DeviceError::Locked(e.to_string())
        }
        other => {
            tracing::error!("volume I/O failed: {other}");
            DeviceError::Io(other.to_string())
        }
    }
}

#[async_trait]
impl Exports for VolumeExports {
    async fn list(&self) -> Result<Vec<ExportInfo>, DeviceError> {
        let volumes = self.cluster.list_volumes().await.map_err(device_error)?;
        let mut exports = Vec::new();
        for v in volumes.into_iter().filter(|v| self.exported(&v.name)) {
            let listed = |s: &&basalt_client::SnapshotInfo| {
                !s.removing && !basalt_client::is_fence_snapshot(&s.name)
            };
            for s in v.snapshots.iter().filter(listed) {
                exports.push(ExportInfo {
                    name: format!("{}@{}", v.name, s.name),
                    description: format!(
                        "Basalt snapshot of {}, {} bytes, read-only",
                        v.name, s.size
                    ),
                });
            }
            exports.push(ExportInfo {
                description: format!("Basalt volume, {} bytes, pool {}", v.size, v.pool),
                name: v.name,
            });
        }
        if self.only.is_none() {
            let images = self.cluster.list_images().await.map_err(device_error)?;
            for i in images
                .iter()
                .filter(|i| i.state == basalt_client::ImageState::Ready)
            {
                exports.push(ExportInfo {
                    name: format!("image:{}", i.name),
                    description: format!("Basalt image, {} bytes, read-only", i.size),
                });
            }
            let objvols = basalt_objvol::catalog::list(&self.cluster)
                .await
                .map_err(device_error)?;
            for o in objvols
                .iter()
                .filter(|o| o.state == basalt_objvol::ObjvolState::Ready)
            {
                exports.push(ExportInfo {
                    name: format!("objvol:{}", o.name),
                    description: format!(
                        "Basalt object-backed volume (EROFS over s3://{}/{}), {} bytes, read-only",
                        o.source.bucket,
                        o.source.prefix,
                        o.size()
                    ),
                });
            }
        }
        exports.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(exports)
    }

    async fn open(&self, name: &str) -> Result<Option<Arc<dyn BlockDevice>>, DeviceError> {
        self.open_as(name, "a client of unknown address").await
    }

    async fn admits_nvme_host(&self, name: &str, hostnqn: &str) -> Result<bool, DeviceError> {
        // Snapshots and images follow their volume's list; objvols have none.
        let volume = name.split('@').next().unwrap_or(name);
        let record = basalt_client::access::get(self.cluster.meta().as_ref(), volume)
            .await
            .map_err(device_error)?;
        Ok(record.admits_nvme_host(hostnqn))
    }

    async fn open_as(
        &self,
        name: &str,
        client: &str,
    ) -> Result<Option<Arc<dyn BlockDevice>>, DeviceError> {
        let name = match (name, &self.default_volume) {
            ("", Some(default)) => default.as_str(),
            ("", None) => return Ok(None),
            (n, _) => n,
        };
        if let Some(image) = name.strip_prefix("image:") {
            // An import writes here; a ready image is served read-only.
            let opened = match self.cluster.image_info(image).await {
                Ok(i) if i.state == basalt_client::ImageState::Importing => {
                    self.cluster.open_image_for_import(image).await
                }
                Ok(_) => self.cluster.open_image(image).await,
                Err(_) => return Ok(None),
            };
            return match opened {
                Ok(v) => Ok(Some(Arc::new(VolumeDevice(v, None)))),
                Err(
                    ClientError::ReadOnly { .. }
                    | ClientError::Invalid { .. }
                    | ClientError::NoSuchImage { .. },
                ) => Ok(None),
                Err(e) => Err(device_error(e)),
            };
        }
        if let Some(objvol) = name.strip_prefix("objvol:") {
            if self.only.is_some() {
                return Ok(None);
            }
            return Ok(self
                .objvol(objvol)
                .await?
                .map(|r| Arc::new(ObjvolDevice(r)) as Arc<dyn BlockDevice>));
        }
        if let Some((volume, snapshot)) = name.split_once('@') {
            if !self.exported(volume) {
                return Ok(None);
            }
            return match self.cluster.open_snapshot(volume, snapshot).await {
                Ok(v) => Ok(Some(Arc::new(VolumeDevice(v, None)))),
                Err(ClientError::NoSuchVolume { .. } | ClientError::NoSuchSnapshot { .. }) => {
                    Ok(None)
                }
                Err(e) => Err(device_error(e)),
            };
        }
        if !self.exported(name) {
            return Ok(None);
        }
        let volume = match self.cluster.open_volume(name).await {
            Ok(v) => v,
            Err(ClientError::NoSuchVolume { .. }) => return Ok(None),
            Err(e) => return Err(device_error(e)),
        };
        // A gateway that records its clients writes under the volume's writer lock (its
        // watcher record comes with it): a second client is refused, naming the holder.
        let volume = match &self.watchers {
            Some(w) => {
                let lock = w.lock(&self.cluster, name, client).await;
                volume.with_lock(lock.map_err(device_error)?)
            }
            None => volume,
        };
        Ok(Some(Arc::new(VolumeDevice(volume, None))))
    }
}

/// An objvol's read failure as NBD answers it: EIO (logged: an object that changed since
/// the index was built, or an endpoint that failed).
fn source_error(e: SourceError) -> DeviceError {
    tracing::warn!("objvol read failed: {e}");
    DeviceError::Io(e.to_string())
}

/// An object-backed volume as a read-only NBD block device.
pub struct ObjvolDevice(Arc<Reader>);

#[async_trait]
impl BlockDevice for ObjvolDevice {
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError> {
        let pieces = self.read_pieces(offset, len).await?;
        Ok(match pieces.len() {
            1 => pieces.into_iter().next().unwrap_or_default(),
            _ => Bytes::from(pieces.concat()),
        })
    }

    async fn read_pieces(&self, offset: u64, len: u32) -> Result<Vec<Bytes>, DeviceError> {
        self.0
            .read(offset, u64::from(len))
            .await
            .map_err(source_error)
    }

    async fn write(&self, _offset: u64, _data: Bytes, _fua: bool) -> Result<(), DeviceError> {
        Err(DeviceError::ReadOnly)
    }

    async fn flush(&self) -> Result<(), DeviceError> {
        // Nothing is ever written: there is nothing to make durable.
        Ok(())
    }

    async fn trim(&self, _offset: u64, _len: u32, _fua: bool) -> Result<(), DeviceError> {
        Err(DeviceError::ReadOnly)
    }

    async fn write_zeroes(
        &self,
        _offset: u64,
        _len: u32,
        _may_trim: bool,
        _fua: bool,
    ) -> Result<(), DeviceError> {
        Err(DeviceError::ReadOnly)
    }

    async fn block_status(&self, _offset: u64, len: u32) -> Result<Vec<Extent>, DeviceError> {
        Ok(vec![Extent {
            length: u64::from(len),
            hole: false,
            zero: false,
        }])
    }
}

/// A volume as an NBD block device, with its watcher record while open (see
/// [`VolumeExports::with_watchers`]).
pub struct VolumeDevice(
    Volume,
    // Held for its Drop: the watcher record goes when the device does.
    #[allow(dead_code)] Option<basalt_client::watchers::WatchGuard>,
);

#[async_trait]
impl BlockDevice for VolumeDevice {
    fn size(&self) -> u64 {
        self.0.size()
    }

    fn read_only(&self) -> bool {
        self.0.read_only()
    }

    fn identity(&self) -> Option<u64> {
        // A snapshot view is another device: it goes by its export name instead.
        (!self.0.read_only()).then(|| self.0.info().origin())
    }

    fn trim_zeroes(&self) -> bool {
        // A trim deallocates, and on a clone writes zeros over the parent's data (design.md,
        // "Layers"): either way it reads back as zeroes.
        true
    }

    async fn read(&self, offset: u64, len: u32) -> Result<Bytes, DeviceError> {
        self.0.read(offset, len).await.map_err(device_error)
    }

    async fn read_pieces(&self, offset: u64, len: u32) -> Result<Vec<Bytes>, DeviceError> {
        self.0.read_pieces(offset, len).await.map_err(device_error)
    }

    async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DeviceError> {
        self.0.write(offset, data, fua).await.map_err(device_error)
    }

    async fn flush(&self) -> Result<(), DeviceError> {
        self.0.flush().await.map_err(device_error)
    }

    async fn trim(&self, offset: u64, len: u32, fua: bool) -> Result<(), DeviceError> {
        self.0
            .trim(offset, len as u64, fua)
            .await
            .map_err(device_error)
    }

    async fn write_zeroes(
        &self,
        offset: u64,
        len: u32,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), DeviceError> {
        self.0
            .write_zeroes(offset, len as u64, may_trim, fua)
            .await
            .map_err(device_error)
    }

    async fn block_status(&self, offset: u64, len: u32) -> Result<Vec<Extent>, DeviceError> {
        let extents = self
            .0
            .allocation(offset, len as u64)
            .await
            .map_err(device_error)?;
        Ok(extents
            .into_iter()
            .map(|e| Extent {
                length: e.length,
                hole: !e.allocated,
                zero: !e.allocated,
            })
            .collect())
    }
}
