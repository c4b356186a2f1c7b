//! Objvols in the cluster: the record under `/basalt/objvols/NAME` and the index stored in
//! a sealed layer of its own (docs/design.md, "Object-backed volumes"). The layer holds the
//! index bytes (the superblock block, then the metadata region) and, from the next 4 KiB
//! boundary, the extent map. A create writes the record first (state `building`), so an
//! interrupted build is listed and `rm` reclaims its layer.

use crate::build::Built;
use crate::extents::ExtentMap;
use crate::reader::{IndexSource, ObjectSource, Reader, SourceError};
use async_trait::async_trait;
use basalt_client::{ClientError, Cluster, SealedLayer, Volume};
use basalt_meta::schema::OBJVOLS_PREFIX;
use basalt_meta::Revision;
use basalt_proto::{InodeId, PoolId};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::sync::Arc;

/// Version of the objvol record format.
pub const OBJVOL_FORMAT_VERSION: u32 = 1;
/// Skipped keys kept in the record by name (more are counted).
pub const SKIPPED_IN_RECORD: usize = 100;
/// Bytes written to the layer per request while storing an index.
const WRITE_CHUNK: usize = 1 << 20;
const BLOCK: u64 = crate::erofs::BLOCK_BYTES;

/// Where an objvol's objects come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    /// `http://HOST:PORT` or `https://HOST[:PORT]` of the S3 endpoint.
    pub endpoint: String,
    pub bucket: String,
    /// Keys under it are the filesystem (empty, or ending in `/`).
    pub prefix: String,
    /// A credentials file the serving hosts read (AWS format, or `ACCESS:SECRET`); None:
    /// `basalt up`'s own S3 credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials: Option<String>,
    /// A CA certificate file (PEM) the serving hosts check an https endpoint against;
    /// None: the system's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// The region requests are signed for; None: us-east-1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

impl Source {
    /// The bucket as an object source and lister, read with `credentials`.
    pub fn open(
        &self,
        credentials: &crate::s3::Credentials,
    ) -> Result<crate::s3::S3Source, crate::reader::SourceError> {
        crate::s3::S3Source::with_options(
            &self.endpoint,
            &self.bucket,
            credentials,
            self.ca_file.as_deref().map(std::path::Path::new),
            self.region.as_deref().unwrap_or(crate::s3::DEFAULT_REGION),
        )
    }
}

/// `building` until the index is stored and sealed, then `ready`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ObjvolState {
    Building,
    Ready,
}

/// An objvol as stored in metadata (JSON, versioned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjvolInfo {
    pub format_version: u32,
    pub name: String,
    pub source: Source,
    /// The sealed layer holding the index and the extent map.
    pub inode: InodeId,
    pub pool: PoolId,
    pub object_size: u32,
    pub layer_bytes: u64,
    /// Bytes of the index (superblock block and metadata region) at the layer's start.
    pub index_bytes: u64,
    /// Where the extent map starts in the layer, and its bytes.
    pub extents_at: u64,
    pub extents_bytes: u64,
    /// The device: its metadata region's first block and its size in blocks.
    pub meta_block: u64,
    pub total_blocks: u64,
    pub files: u64,
    pub directories: u64,
    /// Bytes of the objects in the filesystem.
    pub data_bytes: u64,
    pub skipped_count: u64,
    /// The first skipped keys with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<(String, String)>,
    /// Seconds since the Unix epoch.
    pub created: u64,
    /// Time spent listing, and building in all (milliseconds).
    pub listing_ms: u64,
    pub build_ms: u64,
    pub state: ObjvolState,
}

impl ObjvolInfo {
    /// The device's size in bytes.
    pub fn size(&self) -> u64 {
        self.total_blocks * BLOCK
    }

    fn layer(&self) -> SealedLayer {
        SealedLayer {
            inode: self.inode,
            pool: self.pool,
            object_size: self.object_size,
            size: self.layer_bytes,
        }
    }
}

fn key(name: &str) -> String {
    format!("{OBJVOLS_PREFIX}{name}")
}

fn invalid(reason: String) -> ClientError {
    ClientError::Invalid { reason }
}

fn decode(bytes: &[u8]) -> Result<ObjvolInfo, ClientError> {
    serde_json::from_slice(bytes).map_err(|e| invalid(format!("objvol record is unreadable: {e}")))
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn record(cluster: &Cluster, name: &str) -> Result<(ObjvolInfo, Revision), ClientError> {
    match cluster.meta().get(&key(name)).await? {
        Some((v, rev)) => Ok((decode(&v)?, rev)),
        None => Err(ClientError::NotFound {
            what: format!("objvol \"{name}\""),
        }),
    }
}

async fn put(cluster: &Cluster, info: &ObjvolInfo, rev: Revision) -> Result<Revision, ClientError> {
    let value = serde_json::to_vec(info).expect("objvol record serialises");
    cluster
        .meta()
        .compare_and_swap(&key(&info.name), rev, value)
        .await?
        .ok_or_else(|| {
            invalid(format!(
                "objvol \"{}\" changed concurrently; try again",
                info.name
            ))
        })
}

/// One objvol's record.
pub async fn info(cluster: &Cluster, name: &str) -> Result<ObjvolInfo, ClientError> {
    Ok(record(cluster, name).await?.0)
}

/// Every objvol, by name.
pub async fn list(cluster: &Cluster) -> Result<Vec<ObjvolInfo>, ClientError> {
    let entries = cluster.meta().list(OBJVOLS_PREFIX).await?;
    entries.iter().map(|(_, v, _)| decode(v)).collect()
}

/// Why an objvol could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ObjvolError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Build(#[from] crate::build::BuildError),
    #[error(transparent)]
    Source(#[from] SourceError),
}

/// How a build or refresh is going: objects listed (`total` 0), then bytes of the index
/// stored out of `total`.
pub type BuildProgress<'a> = &'a (dyn Fn(u64, u64) + Send + Sync);

/// The prefix as the index uses it: empty, or ending in `/`.
pub fn normal_prefix(prefix: &str) -> String {
    let p = prefix.trim_start_matches('/');
    if p.is_empty() || p.ends_with('/') {
        p.to_string()
    } else {
        format!("{p}/")
    }
}

/// The error of a name that is taken (exit code 4 in the CLI).
fn exists(name: &str) -> ClientError {
    ClientError::Exists {
        what: format!("objvol \"{name}\""),
    }
}

/// Make objvol `name` over `source` (read with `credentials`), its index in `pool`:
/// list and build in `tmp`, then store it.
pub async fn create(
    cluster: &Arc<Cluster>,
    name: &str,
    mut source: Source,
    credentials: &crate::s3::Credentials,
    pool: PoolId,
    tmp: &std::path::Path,
    progress: BuildProgress<'_>,
) -> Result<ObjvolInfo, ObjvolError> {
    basalt_client::volumes::check_name(name).map_err(|_| {
        invalid(format!(
            "objvol name \"{name}\" must be 1 to 128 letters, digits, '.', '_' or '-', not \
             starting with '.' or '-'"
        ))
    })?;
    if cluster
        .meta()
        .get(&key(name))
        .await
        .map_err(ClientError::from)?
        .is_some()
    {
        return Err(exists(name).into());
    }
    source.prefix = normal_prefix(&source.prefix);
    let built = build_from(&source, credentials, tmp, progress).await?;
    let layer = new_layer(cluster, pool, &built).await?;
    let mut info = describe(name, source, &layer, &built);
    let rev = put(cluster, &info, 0).await.map_err(|_| exists(name))?;
    let stored = match write_layer(cluster, &layer, name, built, progress).await {
        Ok(()) => {
            info.state = ObjvolState::Ready;
            put(cluster, &info, rev).await.map(drop)
        }
        Err(e) => Err(e),
    };
    if let Err(e) = stored {
        // Leave nothing half built behind (a failure here leaves it listed as building,
        // for `basalt objvol rm`).
        let _ = remove(cluster, name).await;
        return Err(e.into());
    }
    Ok(info)
}

/// Build a new index of objvol `name` from its bucket as it is now and switch to it; the
/// old index is removed (clients reading it get errors and reconnect to the new one).
pub async fn refresh(
    cluster: &Arc<Cluster>,
    name: &str,
    credentials: &crate::s3::Credentials,
    tmp: &std::path::Path,
    progress: BuildProgress<'_>,
) -> Result<ObjvolInfo, ObjvolError> {
    let (old, rev) = record(cluster, name).await?;
    let built = build_from(&old.source, credentials, tmp, progress).await?;
    let layer = new_layer(cluster, old.pool, &built).await?;
    let mut info = describe(name, old.source.clone(), &layer, &built);
    info.state = ObjvolState::Ready;
    let stored = match write_layer(cluster, &layer, name, built, progress).await {
        Ok(()) => put(cluster, &info, rev).await.map(drop),
        Err(e) => Err(e),
    };
    if let Err(e) = stored {
        // Nothing names the new layer: reclaim it, the old index stays in use.
        let _ = cluster.purge(layer.inode, 0).await;
        return Err(e.into());
    }
    cluster.purge(old.inode, 0).await?;
    cluster.flush().await?;
    Ok(info)
}

async fn build_from(
    source: &Source,
    credentials: &crate::s3::Credentials,
    tmp: &std::path::Path,
    progress: BuildProgress<'_>,
) -> Result<Built, ObjvolError> {
    let s3 = source.open(credentials)?;
    let listed = move |n: u64| progress(n, 0);
    Ok(crate::build::build(Arc::new(s3), &source.prefix, tmp, unix_now(), &listed).await?)
}

/// Where a built index goes in its layer: (index bytes, extents offset, layer bytes).
fn placement(built: &Built) -> (u64, u64, u64) {
    let index_bytes = BLOCK + built.summary.meta_bytes;
    let extents_at = index_bytes.div_ceil(BLOCK) * BLOCK;
    let layer_bytes = (extents_at + built.extents_bytes).div_ceil(BLOCK) * BLOCK;
    (index_bytes, extents_at, layer_bytes)
}

async fn new_layer(
    cluster: &Cluster,
    pool: PoolId,
    built: &Built,
) -> Result<SealedLayer, ClientError> {
    cluster.new_sealed_layer(pool, placement(built).2).await
}

/// The record of objvol `name` whose index `built` is in `layer` (state building).
fn describe(name: &str, source: Source, layer: &SealedLayer, built: &Built) -> ObjvolInfo {
    let (index_bytes, extents_at, layer_bytes) = placement(built);
    let s = &built.summary;
    ObjvolInfo {
        format_version: OBJVOL_FORMAT_VERSION,
        name: name.to_string(),
        source,
        inode: layer.inode,
        pool: layer.pool,
        object_size: layer.object_size,
        layer_bytes,
        index_bytes,
        extents_at,
        extents_bytes: built.extents_bytes,
        meta_block: s.meta_block,
        total_blocks: s.total_blocks,
        files: s.files,
        directories: s.directories,
        data_bytes: built.data_bytes,
        skipped_count: s.skipped_count,
        skipped: s
            .skipped
            .iter()
            .take(SKIPPED_IN_RECORD)
            .map(|(k, why)| (k.clone(), why.describe().to_string()))
            .collect(),
        created: unix_now(),
        listing_ms: built.listing.as_millis() as u64,
        build_ms: built.total.as_millis() as u64,
        state: ObjvolState::Building,
    }
}

/// Write the index and the extent map into `layer`, then seal it.
async fn write_layer(
    cluster: &Arc<Cluster>,
    layer: &SealedLayer,
    name: &str,
    mut built: Built,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<(), ClientError> {
    let (_, extents_at, layer_bytes) = placement(&built);
    let volume = cluster.open_layer_for_writing(layer, &format!("objvol:{name}"))?;
    let superblock = std::mem::take(&mut built.summary.superblock);
    let mut index = std::io::Cursor::new(superblock).chain(&mut built.meta);
    write_all(&volume, 0, &mut index, layer_bytes, progress).await?;
    let header = std::mem::take(&mut built.extents_header);
    let mut extents = std::io::Cursor::new(header)
        .chain(&mut built.extent_records)
        .chain(&mut built.extent_heap);
    write_all(&volume, extents_at, &mut extents, layer_bytes, progress).await?;
    cluster.seal_layer(layer).await
}

/// Copy `from` into the layer from `at`, in chunks (the last one padded to a block).
async fn write_all(
    volume: &Volume,
    mut at: u64,
    from: &mut (dyn Read + Send),
    total: u64,
    progress: &(dyn Fn(u64, u64) + Send + Sync),
) -> Result<(), ClientError> {
    let mut buf = vec![0u8; WRITE_CHUNK];
    // Bound: the source is a finite file; each round consumes up to WRITE_CHUNK of it.
    loop {
        let mut n = 0;
        while n < buf.len() {
            let got = from
                .read(&mut buf[n..])
                .map_err(|e| invalid(format!("reading the built index: {e}")))?;
            if got == 0 {
                break;
            }
            n += got;
        }
        if n == 0 {
            return Ok(());
        }
        let len = (n as u64).div_ceil(BLOCK) * BLOCK;
        let mut chunk = buf[..n].to_vec();
        chunk.resize(len as usize, 0);
        volume.write(at, Bytes::from(chunk), false).await?;
        at += n as u64;
        progress(at, total);
        if n < buf.len() {
            return Ok(());
        }
    }
}

/// Remove objvol `name` and its index (also one whose build was interrupted).
pub async fn remove(cluster: &Cluster, name: &str) -> Result<(), ClientError> {
    let (info, rev) = record(cluster, name).await?;
    cluster.purge(info.inode, 0).await?;
    cluster.flush().await?;
    if !cluster.meta().compare_and_delete(&key(name), rev).await? {
        return Err(invalid(format!(
            "objvol \"{name}\" changed concurrently; try again"
        )));
    }
    Ok(())
}

/// The index bytes of a sealed layer, for a [`Reader`].
struct LayerIndex(Volume);

#[async_trait]
impl IndexSource for LayerIndex {
    async fn read(&self, offset: u64, len: u64) -> Result<Bytes, SourceError> {
        let len = u32::try_from(len)
            .map_err(|_| SourceError::Failed(format!("index read of {len} bytes")))?;
        self.0
            .read(offset, len)
            .await
            .map_err(|e| SourceError::Failed(format!("reading the index: {e}")))
    }
}

/// A reader of ready objvol `name`, its objects fetched from `objects`.
pub async fn open(
    cluster: &Arc<Cluster>,
    name: &str,
    objects: Arc<dyn ObjectSource>,
) -> Result<(ObjvolInfo, Reader), ClientError> {
    let (info, _) = record(cluster, name).await?;
    if info.state != ObjvolState::Ready {
        return Err(invalid(format!("objvol \"{name}\" is still being built (or its build was interrupted: `basalt objvol rm {name}`)")));
    }
    let volume =
        cluster.open_sealed_layer(&info.layer(), &format!("objvol:{name}"), info.created)?;
    let mut map = Vec::with_capacity(info.extents_bytes as usize);
    let mut at = info.extents_at;
    let end = info.extents_at + info.extents_bytes;
    while at < end {
        let n = (end - at).min(WRITE_CHUNK as u64) as u32;
        map.extend_from_slice(&volume.read(at, n).await?);
        at += u64::from(n);
    }
    let map = ExtentMap::parse(&map).map_err(|e| invalid(format!("objvol \"{name}\": {e}")))?;
    let reader = Reader::new(
        info.meta_block,
        info.total_blocks,
        map,
        Arc::new(LayerIndex(volume)),
        objects,
    );
    Ok((info, reader))
}
