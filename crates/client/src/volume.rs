//! Byte-range I/O on one volume, split into object requests.

use crate::cluster::{is_retryable, reply_result, Cluster};
use crate::conn::Pending;
use crate::error::ClientError;
use crate::object::{fua_flags, object_header};
use crate::volumes::VolumeInfo;
use basalt_placement::{ClusterMap, PoolSpec};
use basalt_proto::{Flags, Header, InodeId, ObjectId, Opcode, PgId, Status};
use bytes::{Bytes, BytesMut};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Granularity of allocation reporting.
pub const BLOCK_BYTES: u64 = 4096;
/// Most object requests one volume call keeps in flight (bounds fan-out of huge I/O).
const MAX_FANOUT: usize = 64;
/// After this long with a frozen head the record does not move past, a handle finishes the
/// snapshot itself (its command may have died between freezing and moving the head).
const FINISH_SNAPSHOT_AFTER_MS: u64 = 2_000;
/// Longest a request waits for a frozen head to be replaced before it fails.
const FROZEN_WAIT_MS: u64 = 60_000;
/// A shared buffer of zeros for WRITE_ZEROES without trimming (largest object size).
static ZEROS: [u8; 4 << 20] = [0; 4 << 20];

/// A run of the volume that is either allocated or a hole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub length: u64,
    pub allocated: bool,
}

/// What every open handle of one volume in this process shares: its current size, whether
/// it was removed, and a gate that resize and remove close while they change those.
pub struct VolumeState {
    size: AtomicU64,
    /// The layer I/O goes to; it only moves forward (a snapshot moves it to a newer layer).
    head: AtomicU64,
    removed: AtomicBool,
    /// I/O holds it shared; resize and remove hold it exclusively, so no I/O checked against
    /// the old size can land after a shrink discarded the data past the new end.
    gate: tokio::sync::RwLock<()>,
}

impl VolumeState {
    pub(crate) fn new(size: u64, head: InodeId) -> Self {
        Self {
            size: AtomicU64::new(size),
            head: AtomicU64::new(head),
            removed: AtomicBool::new(false),
            gate: tokio::sync::RwLock::new(()),
        }
    }

    /// Take `size` from the volume's record (only while no handle has the volume open).
    pub(crate) fn adopt_size(&self, size: u64) {
        self.size.store(size, Ordering::Release);
    }
}

/// An open volume. Cheap to clone-by-Arc; all methods take `&self`.
pub struct Volume {
    cluster: Arc<Cluster>,
    info: VolumeInfo,
    pool: PoolSpec,
    state: Arc<VolumeState>,
    /// A read-only view of a snapshot (its frozen layer), not the volume's head.
    snapshot: Option<String>,
    /// The writer lock this handle writes under, if it took one (gateways do).
    lock: Option<Arc<crate::locks::WriterLock>>,
}

/// The first attempt of an object request, in flight.
struct Started {
    conn: Arc<crate::Connection>,
    pending: Pending,
    /// The OSD asked: the primary, or (`local`) a member on this gateway's host.
    primary: basalt_proto::OsdId,
    /// A LOCAL_READ to a member ([`Cluster::local_member`]) under map epoch `epoch`.
    local: Option<u32>,
}

/// One object-sized piece of a byte range.
#[derive(Clone, Copy, Debug)]
struct Piece {
    obj: ObjectId,
    /// Offset inside the object.
    offset: u32,
    len: u32,
    /// Offset of this piece inside the caller's buffer.
    buf_offset: usize,
}

impl Volume {
    /// A volume handle; fails if its pool is not in the map.
    pub fn new(cluster: Arc<Cluster>, info: VolumeInfo) -> Result<Self, ClientError> {
        let pool = Self::pool_of(&cluster, &info)?;
        let state = cluster.volume_state(info.origin(), false, info.size);
        // Another handle may know an older head; the newest layer is the head.
        state.head.fetch_max(info.id, Ordering::AcqRel);
        Ok(Self {
            cluster,
            info,
            pool,
            state,
            snapshot: None,
            lock: None,
        })
    }

    /// Write under `lock`: once it is lost (broken, or taken over after this gateway's
    /// lease expired), every I/O of this handle fails and it never follows the volume to
    /// the head a fence made.
    pub fn with_lock(mut self, lock: Arc<crate::locks::WriterLock>) -> Self {
        self.lock = Some(lock);
        self
    }

    /// A read-only handle on snapshot `name` of the volume `info`.
    pub fn snapshot(
        cluster: Arc<Cluster>,
        info: VolumeInfo,
        name: &str,
    ) -> Result<Self, ClientError> {
        let snap = info.live_snapshot(name)?;
        let pool = Self::pool_of(&cluster, &info)?;
        let state = cluster.volume_state(snap.inode, true, snap.size);
        Ok(Self {
            cluster,
            info,
            pool,
            state,
            snapshot: Some(snap.name),
            lock: None,
        })
    }

    fn pool_of(cluster: &Cluster, info: &VolumeInfo) -> Result<PoolSpec, ClientError> {
        if info.format_version < crate::volumes::VOLUME_FORMAT_OLDEST
            || basalt_proto::inode_pool(info.id) != info.pool
        {
            return Err(ClientError::Invalid {
                reason: format!(
                    "volume \"{}\" was created by an older Basalt (record format {}, id {:#x}); \
                     this version cannot place its data: copy it out with the old version",
                    info.name, info.format_version, info.id
                ),
            });
        }
        Ok(cluster
            .map()
            .pools
            .get(&info.pool)
            .cloned()
            .ok_or(basalt_placement::MapError::NoSuchPool { pool: info.pool })?)
    }

    pub fn info(&self) -> &VolumeInfo {
        &self.info
    }

    /// Is this a read-only snapshot view?
    pub fn read_only(&self) -> bool {
        self.snapshot.is_some()
    }

    /// The current size (it follows resizes made through this process).
    pub fn size(&self) -> u64 {
        self.state.size.load(Ordering::Acquire)
    }

    /// The layer I/O goes to now.
    pub fn head(&self) -> InodeId {
        self.state.head.load(Ordering::Acquire)
    }

    /// Run `op` on the current head; when the head turns out frozen (a snapshot took it),
    /// follow the volume record to its new head and run it again there.
    async fn on_head<T, F, Fut>(&self, op: F) -> Result<T, ClientError>
    where
        F: Fn(InodeId) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClientError>>,
    {
        let started = Instant::now();
        let mut attempt = 0u32;
        // Bound: FROZEN_WAIT_MS (follow_head fails past it).
        loop {
            let head = self.head();
            match op(head).await {
                Err(ClientError::Status {
                    status: Status::Frozen,
                }) if self.snapshot.is_none() => {
                    if let Some(lock) = &self.lock {
                        lock.check().await?;
                    }
                    self.follow_head(head, started, attempt).await?;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// The head `stale` is frozen: learn the new head from the volume record. While the
    /// record still names `stale`, the snapshot is in progress: wait, and after a while
    /// finish it (its command may have died half-way; finishing is idempotent).
    async fn follow_head(
        &self,
        stale: InodeId,
        started: Instant,
        attempt: u32,
    ) -> Result<(), ClientError> {
        let info = self.cluster.volume_info(&self.info.name).await?;
        if info.origin() != self.info.origin() {
            return Err(ClientError::NoSuchVolume {
                name: self.info.name.clone(),
            });
        }
        if info.id != stale {
            tracing::debug!(volume = %self.info.name, head = info.id, "following a snapshot to the new head");
            self.state.head.fetch_max(info.id, Ordering::AcqRel);
            // A rollback may have changed the size too.
            self.state.size.store(info.size, Ordering::Release);
            return Ok(());
        }
        let waited = started.elapsed();
        if waited > Duration::from_millis(FROZEN_WAIT_MS) {
            return Err(ClientError::Invalid {
                reason: format!(
                    "the head of volume \"{}\" is frozen and no snapshot moved it on within {} s",
                    self.info.name,
                    FROZEN_WAIT_MS / 1000
                ),
            });
        }
        if waited > Duration::from_millis(FINISH_SNAPSHOT_AFTER_MS) {
            self.cluster.finish_snapshot(stale).await?;
        }
        tokio::time::sleep(crate::cluster::backoff(attempt)).await;
        Ok(())
    }

    /// Enter the I/O gate and check the range against the current size.
    async fn enter(
        &self,
        offset: u64,
        len: u64,
    ) -> Result<tokio::sync::RwLockReadGuard<'_, ()>, ClientError> {
        let guard = self.state.gate.read().await;
        if let Some(lock) = self.lock.as_ref().filter(|l| l.lost()) {
            return Err(lock.lost_error());
        }
        if self.state.removed.load(Ordering::Acquire) {
            return Err(ClientError::NoSuchVolume {
                name: self.info.name.clone(),
            });
        }
        let size = self.size();
        match offset.checked_add(len) {
            Some(end) if end <= size => Ok(guard),
            _ => Err(ClientError::OutOfRange { offset, len, size }),
        }
    }

    /// Split [offset, offset+len) of layer `head` at object boundaries.
    fn pieces(&self, head: InodeId, offset: u64, len: u64) -> impl Iterator<Item = Piece> + '_ {
        let os = self.info.object_size as u64;
        let end = offset + len;
        let mut pos = offset;
        std::iter::from_fn(move || {
            if pos >= end {
                return None;
            }
            let index = pos / os;
            let in_obj = pos % os;
            let n = (os - in_obj).min(end - pos);
            let piece = Piece {
                obj: ObjectId::new(head, index),
                offset: in_obj as u32,
                len: n as u32,
                buf_offset: (pos - offset) as usize,
            };
            pos += n;
            Some(piece)
        })
    }

    fn pg(&self, obj: ObjectId) -> PgId {
        ClusterMap::pg_of(&self.pool, obj)
    }

    /// The request header for one piece (the map epoch is set per attempt).
    fn header(&self, opcode: Opcode, piece: Piece, flags: u16) -> Header {
        let flags = if self.snapshot.is_some() {
            flags | Flags::SNAPSHOT
        } else {
            flags
        };
        let mut h = object_header(opcode, piece.obj, piece.offset, piece.len, flags);
        h.pg = self.pg(piece.obj);
        h
    }

    /// Start the first attempt of one object request at its primary. Queueing is
    /// synchronous once connected, so a caller keeps many requests in flight.
    async fn start(&self, mut h: Header, payload: Bytes) -> Result<Started, ClientError> {
        let map = self.cluster.map();
        h.pg = map.routed_pg(h.pg, h.opcode, h.object);
        if h.opcode == Opcode::Read {
            if let Some(member) = self.cluster.local_member(&map, h.pg) {
                if let Ok(conn) = self.cluster.connection(member).await {
                    h.map_epoch = map.epoch;
                    h.flags.0 |= Flags::LOCAL_READ;
                    let pending = conn.start(h, payload);
                    return Ok(Started {
                        conn,
                        pending,
                        primary: member,
                        local: Some(map.epoch),
                    });
                }
            }
        }
        let primary = *map
            .acting(h.pg)?
            .first()
            .ok_or(ClientError::NoPrimary { pg: h.pg })?;
        let conn = self.cluster.connection(primary).await?;
        h.map_epoch = map.epoch;
        let pending = conn.start(h, payload);
        Ok(Started {
            conn,
            pending,
            primary,
            local: None,
        })
    }

    /// Wait for the first attempt; when it failed in a way a changing cluster explains
    /// (failover, peering, a dead connection), retry through the cluster's retry loop.
    async fn finish(
        &self,
        h: Header,
        payload: Bytes,
        first: Result<Started, ClientError>,
    ) -> Result<Bytes, ClientError> {
        let result = match first {
            Ok(Started {
                conn,
                pending,
                primary: member,
                local: Some(epoch),
            }) => {
                let local = self
                    .cluster
                    .await_local(&conn, pending, h.pg, member, epoch)
                    .await;
                if let Some(reply) = local {
                    return Ok(reply.payload);
                }
                // Declined (or unanswered): the primary answers instead.
                let mut h = h;
                h.flags.0 &= !Flags::LOCAL_READ;
                let reply = self.cluster.object_request(h.pg, h, payload).await?;
                return Ok(reply.payload);
            }
            Ok(s) => self
                .cluster
                .await_primary(&s.conn, s.pending, h.pg, s.primary)
                .await
                .and_then(reply_result)
                .map(|reply| reply.payload),
            Err(e) => Err(e),
        };
        match result {
            Err(e) if is_retryable(&e) => {
                self.cluster
                    .counters
                    .retries
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::debug!(object = %h.object, "retrying {:?} after: {e}", h.opcode);
                let reply = self.cluster.object_request(h.pg, h, payload).await?;
                Ok(reply.payload)
            }
            other => other,
        }
    }

    /// Run `op` on every piece, at most MAX_FANOUT in flight; results in piece order.
    async fn each_piece(
        &self,
        pieces: Vec<Piece>,
        mut op: impl FnMut(Piece) -> (Opcode, u16, Bytes),
    ) -> Result<Vec<(Piece, Bytes)>, ClientError> {
        let mut out = Vec::with_capacity(pieces.len());
        for chunk in pieces.chunks(MAX_FANOUT) {
            let mut started = Vec::with_capacity(chunk.len());
            for &piece in chunk {
                let (opcode, flags, payload) = op(piece);
                let h = self.header(opcode, piece, flags);
                let first = self.start(h, payload.clone()).await;
                started.push((piece, h, payload, first));
            }
            for (piece, h, payload, first) in started {
                out.push((piece, self.finish(h, payload, first).await?));
            }
        }
        Ok(out)
    }

    /// Read `len` bytes at `offset`.
    pub async fn read(&self, offset: u64, len: u32) -> Result<Bytes, ClientError> {
        let pieces = self.read_pieces(offset, len).await?;
        if pieces.len() == 1 {
            return Ok(pieces.into_iter().next().unwrap_or_default());
        }
        let mut buf = BytesMut::with_capacity(len as usize);
        for piece in &pieces {
            buf.extend_from_slice(piece);
        }
        Ok(buf.freeze())
    }

    /// Read `len` bytes at `offset` as consecutive pieces, one per object the range touches
    /// (no copy to join them: a frontend sends them out as they are).
    pub async fn read_pieces(&self, offset: u64, len: u32) -> Result<Vec<Bytes>, ClientError> {
        let _gate = self.enter(offset, len as u64).await?;
        self.on_head(|head| self.read_at(head, offset, len)).await
    }

    async fn read_at(
        &self,
        head: InodeId,
        offset: u64,
        len: u32,
    ) -> Result<Vec<Bytes>, ClientError> {
        let pieces: Vec<Piece> = self.pieces(head, offset, len as u64).collect();
        if pieces.len() == 1 {
            let h = self.header(Opcode::Read, pieces[0], 0);
            let first = self.start(h, Bytes::new()).await;
            return Ok(vec![self.finish(h, Bytes::new(), first).await?]);
        }
        let results = self
            .each_piece(pieces, |_| (Opcode::Read, 0, Bytes::new()))
            .await?;
        let mut out = Vec::with_capacity(results.len());
        for (piece, data) in results {
            if data.len() != piece.len as usize {
                return Err(ClientError::Status { status: Status::Io });
            }
            out.push(data);
        }
        Ok(out)
    }

    /// Refuse mutations of a snapshot view.
    fn writable(&self) -> Result<(), ClientError> {
        match &self.snapshot {
            Some(snapshot) => Err(ClientError::ReadOnly {
                what: format!("snapshot {}@{snapshot}", self.info.name),
            }),
            None => Ok(()),
        }
    }

    /// Write `data` at `offset`; with `fua` it is durable when this returns.
    pub async fn write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), ClientError> {
        self.writable()?;
        let _gate = self.enter(offset, data.len() as u64).await?;
        let flags = fua_flags(fua);
        self.on_head(|head| {
            let pieces: Vec<Piece> = self.pieces(head, offset, data.len() as u64).collect();
            async {
                self.each_piece(pieces, |p| {
                    let slice = data.slice(p.buf_offset..p.buf_offset + p.len as usize);
                    (Opcode::Write, flags, slice)
                })
                .await
                .map(drop)
            }
        })
        .await
    }

    /// Deallocate a range: it reads back as zeros. Whole objects are deleted.
    pub async fn trim(&self, offset: u64, len: u64, fua: bool) -> Result<(), ClientError> {
        self.writable()?;
        let _gate = self.enter(offset, len).await?;
        self.on_head(|head| self.trim_unchecked(head, offset, len, fua))
            .await
    }

    async fn trim_unchecked(
        &self,
        head: InodeId,
        offset: u64,
        len: u64,
        fua: bool,
    ) -> Result<(), ClientError> {
        let flags = fua_flags(fua);
        let os = self.info.object_size;
        let pieces: Vec<Piece> = self.pieces(head, offset, len).collect();
        self.each_piece(pieces, |p| {
            let op = if p.offset == 0 && p.len == os {
                Opcode::Delete
            } else {
                Opcode::Trim
            };
            (op, flags, Bytes::new())
        })
        .await?;
        Ok(())
    }

    /// Write zeros; with `may_trim` the range may be deallocated instead.
    pub async fn write_zeroes(
        &self,
        offset: u64,
        len: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ClientError> {
        self.writable()?;
        let _gate = self.enter(offset, len).await?;
        if may_trim {
            return self
                .on_head(|head| self.trim_unchecked(head, offset, len, fua))
                .await;
        }
        let flags = fua_flags(fua);
        self.on_head(|head| {
            let pieces: Vec<Piece> = self.pieces(head, offset, len).collect();
            async {
                self.each_piece(pieces, |p| {
                    let zeros = Bytes::from_static(&ZEROS[..p.len as usize]);
                    (Opcode::Write, flags, zeros)
                })
                .await
                .map(drop)
            }
        })
        .await
    }

    /// Make every acknowledged write durable.
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.cluster.flush().await
    }

    /// Allocation of [offset, offset+len) in runs, at 4 KiB granularity.
    pub async fn allocation(&self, offset: u64, len: u64) -> Result<Vec<Extent>, ClientError> {
        let _gate = self.enter(offset, len).await?;
        let results = self
            .on_head(|head| {
                let pieces: Vec<Piece> = self.pieces(head, offset, len).collect();
                self.each_piece(pieces, |_| (Opcode::Allocation, 0, Bytes::new()))
            })
            .await?;
        let mut extents: Vec<Extent> = Vec::new();
        let mut push = |length: u64, allocated: bool| match extents.last_mut() {
            Some(last) if last.allocated == allocated => last.length += length,
            _ => extents.push(Extent { length, allocated }),
        };
        for (piece, bitmap) in results {
            let mut pos = piece.offset as u64;
            let end = pos + piece.len as u64;
            while pos < end {
                let block = pos / BLOCK_BYTES;
                let block_end = ((block + 1) * BLOCK_BYTES).min(end);
                push(block_end - pos, bit(&bitmap, block));
                pos = block_end;
            }
        }
        Ok(extents)
    }

    /// Shrink or grow to `size` bytes. `commit` records the new size durably (in metadata);
    /// it runs with I/O paused, after the data past a new, smaller end is gone.
    pub(crate) async fn resize<F, Fut>(&self, size: u64, commit: F) -> Result<(), ClientError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(), ClientError>>,
    {
        let _gate = self.state.gate.write().await;
        let old = self.size();
        if size < old {
            self.discard_unchecked(size, old).await?;
        }
        commit().await?;
        self.state.size.store(size, Ordering::Release);
        Ok(())
    }

    /// Refuse all further I/O on every handle and delete all data (the head's, then that of
    /// the volume's `snapshots` layers). `commit` removes the record; it runs after the data
    /// is gone, so a crash part-way leaves a record to retry.
    pub(crate) async fn remove<F, Fut>(
        &self,
        snapshots: &[InodeId],
        commit: F,
    ) -> Result<(), ClientError>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<(), ClientError>>,
    {
        let _gate = self.state.gate.write().await;
        self.state.removed.store(true, Ordering::Release);
        self.cluster.purge(self.head(), 0).await?;
        for &layer in snapshots {
            self.cluster.purge(layer, 0).await?;
        }
        self.cluster.flush().await?;
        commit().await
    }

    /// Delete the data in [from, old_end): trim the partial object at `from`, purge the rest.
    async fn discard_unchecked(&self, from: u64, old_end: u64) -> Result<(), ClientError> {
        let os = self.info.object_size as u64;
        let first_whole = from.div_ceil(os);
        let partial_end = (first_whole * os).min(old_end);
        let head = self.head();
        if from < partial_end {
            self.trim_unchecked(head, from, partial_end - from, false)
                .await?;
        }
        self.cluster.purge(head, first_whole).await?;
        self.cluster.flush().await
    }
}

/// Bit `i` of a little-endian bitmap (u64 words, LSB first, as bytes).
fn bit(bitmap: &[u8], i: u64) -> bool {
    let byte = (i / 8) as usize;
    byte < bitmap.len() && bitmap[byte] & (1 << (i % 8)) != 0
}
