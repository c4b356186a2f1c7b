//! The cluster as a client sees it: the current map, metadata, and a connection per OSD.

use crate::conn::{Connection, Reply};
use crate::error::ClientError;
use crate::pool::ConnPool;
use crate::volume::VolumeState;
use basalt_meta::MetaStore;
use basalt_placement::ClusterMap;
use basalt_proto::{Header, InodeId, ObjectId, Opcode, OsdId, PgId, Status};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// What an OSD reports about its store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OsdStats {
    pub capacity_bytes: u64,
    /// Bytes in allocated 4 KiB blocks.
    pub used_bytes: u64,
    pub slots_total: u64,
    pub slots_free: u64,
    pub objects: u64,
    /// Counters since the OSD started (0 from an OSD that does not report them).
    #[serde(default)]
    pub reads: u64,
    #[serde(default)]
    pub writes: u64,
    #[serde(default)]
    pub read_bytes: u64,
    #[serde(default)]
    pub write_bytes: u64,
    /// Objects and bytes pushed to replicas (recovery).
    #[serde(default)]
    pub pushed_objects: u64,
    #[serde(default)]
    pub pushed_bytes: u64,
}

/// Bytes of the STAT reply's eleven counter words, before its slow-op list.
const STAT_WORDS_BYTES: usize = 88;

/// Longest time one object request may take before the client gives up on it.
pub const REQUEST_TIMEOUT_MS: u64 = 30_000;
/// Longest time one request keeps being retried across map changes (primary failover,
/// peering, a replica being marked down) before its error reaches the caller, unless the
/// client was given another I/O timeout ([`Cluster::set_io_timeout`]: gateways wait for
/// ever by default, like a hard-mounted disk).
pub const RETRY_DEADLINE_MS: u64 = 120_000;
/// First and largest pause between retries when no new map arrives meanwhile.
const RETRY_BACKOFF_MIN_MS: u64 = 20;
const RETRY_BACKOFF_MAX_MS: u64 = 1_000;
/// Largest pause while the primary answers that its PG is peering or that it cannot serve
/// yet: it activates within moments of a failover, and the first write after it should not
/// wait out a long backoff.
const RETRY_BACKOFF_PEERING_MAX_MS: u64 = 100;
/// How often a request that keeps being retried says so (warn), while it waits.
const RETRY_WARN_EVERY: Duration = Duration::from_secs(30);

/// Is this failure one that may go away by itself (the cluster is changing), so the request
/// should be retried rather than reported?
pub fn is_retryable(e: &ClientError) -> bool {
    match e {
        ClientError::Connect { .. }
        | ClientError::Closed { .. }
        | ClientError::Timeout { .. }
        | ClientError::NoPrimary { .. } => true,
        ClientError::Status { status } => status.is_retryable(),
        _ => false,
    }
}

/// Counters of one client process (a gateway), for `/metrics`.
#[derive(Default, Debug)]
pub struct ClientCounters {
    /// Object requests retried after a failover, peering or a lost connection.
    pub retries: std::sync::atomic::AtomicU64,
    /// Object requests that failed for good (the error reached the caller).
    pub failures: std::sync::atomic::AtomicU64,
    /// Reads served by a replica on this gateway's host ([`ReadPolicy::Localize`]).
    pub local_reads: std::sync::atomic::AtomicU64,
    /// Reads a local replica declined (not complete, its interval moving): sent to the
    /// primary instead.
    pub local_read_fallbacks: std::sync::atomic::AtomicU64,
}

/// Where a gateway's reads of replicated PGs go.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ReadPolicy {
    /// Always to the PG's primary.
    #[default]
    Primary,
    /// To a member of the PG on this host (the OSDs whose map entry names it) when the
    /// primary is elsewhere; that member serves only while it is provably current, else the
    /// read goes to the primary (docs/design.md, "Reads from a local replica").
    Localize { host: String },
}

/// How long a PG whose local replica declined a read sends its reads to the primary before
/// trying the replica again (a new map also ends it).
const LOCAL_RETRY_AFTER: Duration = Duration::from_secs(1);

/// A handle on the cluster shared by every volume of one process.
pub struct Cluster {
    /// Retry and failure counters.
    pub counters: ClientCounters,
    meta: Arc<dyn MetaStore>,
    map: watch::Receiver<Arc<ClusterMap>>,
    conns: ConnPool,
    /// Shared state of every volume opened in this process, by inode.
    volumes: Mutex<HashMap<(InodeId, bool), Arc<VolumeState>>>,
    /// How long a request is retried before its error reaches the caller, in ms (0: for
    /// ever).
    io_timeout_ms: std::sync::atomic::AtomicU64,
    /// Where reads go.
    read_policy: std::sync::RwLock<ReadPolicy>,
    /// PGs whose local replica declined a read: the map epoch and when (reads go to the
    /// primary until the map changes or [`LOCAL_RETRY_AFTER`] passes).
    local_declined: Mutex<HashMap<PgId, (u32, Instant)>>,
}

impl Cluster {
    /// A client that routes with the maps published on `map`.
    pub fn new(meta: Arc<dyn MetaStore>, map: watch::Receiver<Arc<ClusterMap>>) -> Arc<Self> {
        Self::with_conns(meta, map, ConnPool::new())
    }

    /// [`Cluster::new`], proving `credentials` to every OSD (None: no handshake).
    pub fn new_as(
        meta: Arc<dyn MetaStore>,
        map: watch::Receiver<Arc<ClusterMap>>,
        credentials: Option<basalt_auth::Credentials>,
    ) -> Arc<Self> {
        Self::with_conns(meta, map, ConnPool::authenticated(credentials))
    }

    /// A client of the cluster whose metadata is `meta`: reads the map, then follows it.
    pub async fn connect(meta: Arc<dyn MetaStore>) -> Result<Arc<Self>, basalt_meta::MetaError> {
        Self::connect_as(meta, None).await
    }

    /// [`Cluster::connect`], proving `credentials` to every OSD (None: no handshake).
    pub async fn connect_as(
        meta: Arc<dyn MetaStore>,
        credentials: Option<basalt_auth::Credentials>,
    ) -> Result<Arc<Self>, basalt_meta::MetaError> {
        let map = crate::follow_map(meta.clone()).await?;
        Ok(Self::new_as(meta, map, credentials))
    }

    /// A client whose connections to OSDs come from `conns` (the simulator's links).
    pub fn with_conns(
        meta: Arc<dyn MetaStore>,
        map: watch::Receiver<Arc<ClusterMap>>,
        conns: ConnPool,
    ) -> Arc<Self> {
        Arc::new(Self {
            counters: ClientCounters::default(),
            meta,
            map,
            conns,
            volumes: Mutex::new(HashMap::new()),
            io_timeout_ms: std::sync::atomic::AtomicU64::new(RETRY_DEADLINE_MS),
            read_policy: std::sync::RwLock::new(ReadPolicy::Primary),
            local_declined: Mutex::new(HashMap::new()),
        })
    }

    /// Send reads as `policy` says (default: to the primary).
    pub fn set_read_policy(&self, policy: ReadPolicy) {
        *self.read_policy.write().expect("read policy lock") = policy;
    }

    /// How long a request is retried across failovers, peering and PGs below min_size
    /// before its error reaches the caller (default [`RETRY_DEADLINE_MS`]); None: for ever,
    /// as a hard-mounted disk waits for its server (the NBD and NVMe/TCP gateways' default:
    /// a VM's disk stalls rather than fails while a PG cannot serve).
    pub fn set_io_timeout(&self, timeout: Option<Duration>) {
        let ms = timeout.map_or(0, |t| (t.as_millis() as u64).max(1));
        self.io_timeout_ms
            .store(ms, std::sync::atomic::Ordering::Relaxed);
    }

    /// When a request started now stops being retried (None: never).
    fn retry_deadline(&self) -> Option<Instant> {
        match self
            .io_timeout_ms
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            0 => None,
            ms => Some(Instant::now() + Duration::from_millis(ms)),
        }
    }

    /// The metadata store.
    pub fn meta(&self) -> &Arc<dyn MetaStore> {
        &self.meta
    }

    /// The newest map.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.borrow().clone()
    }

    /// A receiver of the maps this client routes with (to wait for a change to show).
    pub fn map_watch(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.map.clone()
    }

    /// The live connection to `osd`, opening one if needed.
    pub async fn connection(&self, osd: OsdId) -> Result<Arc<Connection>, ClientError> {
        // Keep the map alive instead of cloning the address: this runs once per request.
        let map = self.map();
        self.conns.get(osd, &map.osd(osd)?.addr).await
    }

    /// Send requests for `osd` (at `addr`) to an OSD in this process without a socket.
    pub fn add_local_osd(
        &self,
        osd: OsdId,
        addr: &str,
        handler: Arc<dyn crate::conn::LocalHandler>,
    ) {
        self.conns.add_local(osd, addr, handler);
    }

    /// The primary of `pg` under the current map.
    pub fn primary(&self, pg: PgId) -> Result<OsdId, ClientError> {
        let map = self.map();
        map.acting(pg)?
            .first()
            .copied()
            .ok_or(ClientError::NoPrimary { pg })
    }

    /// Send one object request to the primary of its PG and wait for a successful reply,
    /// retrying across map changes (failover, peering) for up to [`RETRY_DEADLINE_MS`].
    pub async fn object_request(
        &self,
        pg: PgId,
        header: Header,
        payload: Bytes,
    ) -> Result<Reply, ClientError> {
        let deadline = self.retry_deadline();
        let started = Instant::now();
        let mut warned = started;
        let mut attempt = 0u32;
        let mut epoch = 0u32;
        // Bound: the I/O timeout (a gateway without one waits for ever, by design, and says
        // so every RETRY_WARN_EVERY).
        if header.opcode == Opcode::Read {
            if let Some(reply) = self.try_local(pg, header).await {
                return Ok(reply);
            }
        }
        loop {
            let map = self.map();
            if map.epoch != epoch {
                // A new map is a new situation (the PG is peering under it now): retry soon
                // again rather than at the backoff reached while waiting for it.
                epoch = map.epoch;
                attempt = 0;
            }
            let result = self.try_primary(&map, pg, header, payload.clone()).await;
            match result {
                Err(e) if is_retryable(&e) && deadline.is_none_or(|d| Instant::now() < d) => {
                    self.counters
                        .retries
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if attempt == 0 {
                        tracing::debug!(%pg, "retrying {:?}: {e}", header.opcode);
                    }
                    if warned.elapsed() >= RETRY_WARN_EVERY {
                        warned = Instant::now();
                        tracing::warn!(
                            %pg,
                            "{:?} waiting for {:.0} s: {e} (`basalt status` says why the PG \
                             cannot serve)",
                            header.opcode,
                            started.elapsed().as_secs_f64()
                        );
                    }
                    self.wait_for_map(map.epoch, retry_pause(&e, attempt)).await;
                    attempt += 1;
                }
                Err(e) => {
                    self.counters
                        .failures
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    return Err(e);
                }
                ok => return ok,
            }
        }
    }

    /// What exports this client's metrics on a process's registry (holds the cluster
    /// weakly: a registry never keeps a cluster, and so its OSDs, alive).
    pub fn collector(self: &Arc<Self>) -> ClientCollector {
        ClientCollector(Arc::downgrade(self))
    }

    /// The member of `pg` this client reads from instead of its primary, under
    /// [`ReadPolicy::Localize`]: one on this gateway's host, when the primary is on another
    /// host, the pool is replicated, and that member has not declined a read of this PG
    /// under this map in the last [`LOCAL_RETRY_AFTER`].
    pub(crate) fn local_member(&self, map: &ClusterMap, pg: PgId) -> Option<OsdId> {
        let ReadPolicy::Localize { host } = &*self.read_policy.read().expect("read policy lock")
        else {
            return None;
        };
        if map.pools.get(&pg.pool).is_none_or(|p| p.ec.is_some()) {
            return None;
        }
        let on_host = |id: &OsdId| map.osds.get(id).is_some_and(|o| &o.host == host && o.up);
        let acting = map.acting(pg).ok()?;
        if acting.first().is_none_or(on_host) {
            return None;
        }
        let member = acting[1..].iter().copied().find(on_host)?;
        let declined = self.local_declined.lock().expect("declined lock");
        match declined.get(&pg) {
            Some(&(epoch, when)) if epoch == map.epoch && when.elapsed() < LOCAL_RETRY_AFTER => {
                None
            }
            _ => Some(member),
        }
    }

    /// Await a LOCAL_READ's reply from `member`: Ok only for an Ok answer. Anything else
    /// (a refusal, an error, the member leaving the PG in a new map) counts as a fallback
    /// and keeps the PG's reads on its primary for a while; the caller then asks it.
    pub(crate) async fn await_local(
        &self,
        conn: &Connection,
        pending: crate::conn::Pending,
        pg: PgId,
        member: OsdId,
        epoch: u32,
    ) -> Option<Reply> {
        let mut maps = self.map.clone();
        let moved = maps.wait_for(|m| m.acting(pg).map_or(true, |a| !a[1..].contains(&member)));
        let reply = tokio::select! {
            biased;
            reply = timed(conn, pending) => reply.ok(),
            _ = moved => None,
        };
        use std::sync::atomic::Ordering::Relaxed;
        match reply {
            Some(r) if r.header.status == Status::Ok => {
                self.counters.local_reads.fetch_add(1, Relaxed);
                Some(r)
            }
            _ => {
                self.counters.local_read_fallbacks.fetch_add(1, Relaxed);
                self.local_declined
                    .lock()
                    .expect("declined lock")
                    .insert(pg, (epoch, Instant::now()));
                None
            }
        }
    }

    /// A READ sent to [`Cluster::local_member`] of `pg`, if there is one; None when there
    /// is not or it did not answer Ok (the caller then asks the primary).
    async fn try_local(&self, pg: PgId, mut header: Header) -> Option<Reply> {
        let map = self.map();
        let pg = map.routed_pg(pg, header.opcode, header.object);
        let member = self.local_member(&map, pg)?;
        header.pg = pg;
        header.map_epoch = map.epoch;
        header.flags.0 |= basalt_proto::Flags::LOCAL_READ;
        let conn = self
            .conns
            .get(member, &map.osd(member).ok()?.addr)
            .await
            .ok()?;
        let pending = conn.start(header, Bytes::new());
        self.await_local(&conn, pending, pg, member, map.epoch)
            .await
    }

    /// One attempt at the PG's primary under `map`.
    async fn try_primary(
        &self,
        map: &ClusterMap,
        pg: PgId,
        mut header: Header,
        payload: Bytes,
    ) -> Result<Reply, ClientError> {
        let pg = map.routed_pg(pg, header.opcode, header.object);
        let primary = *map
            .acting(pg)?
            .first()
            .ok_or(ClientError::NoPrimary { pg })?;
        header.pg = pg;
        header.map_epoch = map.epoch;
        let conn = self.conns.get(primary, &map.osd(primary)?.addr).await?;
        let pending = conn.start(header, payload);
        let reply = self.await_primary(&conn, pending, pg, primary).await?;
        reply_result(reply)
    }

    /// Await a reply from the primary of `pg`, giving up early (as `NotPrimary`, which is
    /// retried) when a new map names another primary: a stopped or cut-off primary must not
    /// hold I/O for the whole request timeout once the cluster has moved on.
    pub(crate) async fn await_primary(
        &self,
        conn: &Connection,
        pending: crate::conn::Pending,
        pg: PgId,
        primary: OsdId,
    ) -> Result<Reply, ClientError> {
        let mut maps = self.map.clone();
        let moved =
            maps.wait_for(|m| m.acting(pg).ok().and_then(|a| a.first().copied()) != Some(primary));
        tokio::select! {
            biased;
            reply = timed(conn, pending) => reply,
            _ = moved => Err(ClientError::Status { status: Status::NotPrimary }),
        }
    }

    /// Wait until a map newer than `epoch` arrives, or `wait` passes.
    pub async fn wait_for_map(&self, epoch: u32, wait: Duration) {
        let mut maps = self.map.clone();
        let _ = tokio::time::timeout(wait, maps.wait_for(|m| m.epoch > epoch)).await;
    }

    /// The state shared by every handle of volume `info` in this process.
    /// The state every handle of one volume (or one snapshot view) in this process shares,
    /// keyed by the volume's origin layer, or for a snapshot view by its layer (`snapshot`).
    pub(crate) fn volume_state(
        &self,
        layer: InodeId,
        snapshot: bool,
        size: u64,
    ) -> Arc<VolumeState> {
        let mut volumes = self.volumes.lock().expect("volumes lock");
        let state = volumes
            .entry((layer, snapshot))
            .or_insert_with(|| Arc::new(VolumeState::new(size, layer)));
        // No handle of this process has it open (handles are only made here, under the
        // lock), so no I/O was checked against its size: take the size just read from the
        // record, which another process may have changed since (a resize through another
        // gateway or `basalt volume resize --meta`).
        if Arc::strong_count(state) == 1 {
            state.adopt_size(size);
        }
        state.clone()
    }

    /// Delete every object of `inode` with index ≥ `from` on every OSD.
    pub async fn purge(&self, inode: InodeId, from: u64) -> Result<(), ClientError> {
        self.broadcast(Opcode::Purge, ObjectId::new(inode, from))
            .await
    }

    /// Make every write acknowledged to this client durable on every OSD that may hold it.
    pub async fn flush(&self) -> Result<(), ClientError> {
        self.broadcast(Opcode::Flush, ObjectId::new(0, 0)).await
    }

    /// Space and object counts of one OSD's store, its counters, and the slow operations it
    /// reports (in flight, or finished lately).
    pub async fn osd_stats(
        &self,
        osd: OsdId,
    ) -> Result<(OsdStats, Vec<basalt_proto::slowop::SlowOp>), ClientError> {
        let conn = self.connection(osd).await?;
        let header = Header::request(Opcode::Stat, 0, ObjectId::new(0, 0));
        let reply = timed(&conn, conn.start(header, Bytes::new())).await?;
        if reply.header.status != Status::Ok || reply.payload.len() < 40 {
            return Err(ClientError::Status {
                status: reply.header.status,
            });
        }
        let word = |i: usize| {
            let Some(w) = reply.payload.get(i * 8..i * 8 + 8) else {
                return 0;
            };
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            u64::from_le_bytes(b)
        };
        // After the eleven counter words: the slow-op list (absent from older OSDs).
        let slow = reply.payload.get(STAT_WORDS_BYTES..).unwrap_or_default();
        let slow_ops =
            basalt_proto::slowop::decode_list(slow).map_err(|e| ClientError::BadReply {
                reason: format!("STAT reply of osd.{osd}: {e}"),
            })?;
        let stats = OsdStats {
            capacity_bytes: word(0),
            used_bytes: word(1),
            slots_total: word(2),
            slots_free: word(3),
            objects: word(4),
            reads: word(5),
            writes: word(6),
            read_bytes: word(7),
            write_bytes: word(8),
            pushed_objects: word(9),
            pushed_bytes: word(10),
        };
        Ok((stats, slow_ops))
    }

    /// Send one request to every OSD that is up and wait for all to succeed; when one fails
    /// in a way the cluster may heal (it went down, its map is behind), wait for a new map
    /// and send to the OSDs of that map, for up to [`RETRY_DEADLINE_MS`].
    pub(crate) async fn broadcast(
        &self,
        opcode: Opcode,
        object: ObjectId,
    ) -> Result<(), ClientError> {
        let deadline = self.retry_deadline();
        let mut attempt = 0u32;
        // Bound: the I/O timeout (none: for ever, as for object requests).
        loop {
            let map = self.map();
            match self.broadcast_once(&map, opcode, object).await {
                Err(e) if is_retryable(&e) && deadline.is_none_or(|d| Instant::now() < d) => {
                    tracing::debug!("retrying {opcode:?} broadcast: {e}");
                    self.wait_for_map(map.epoch, backoff(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn broadcast_once(
        &self,
        map: &ClusterMap,
        opcode: Opcode,
        object: ObjectId,
    ) -> Result<(), ClientError> {
        let request = |osd: &basalt_placement::OsdInfo| {
            let (id, addr) = (osd.id, osd.addr.clone());
            async move {
                let conn = self.conns.get(id, &addr).await?;
                let mut header = Header::request(opcode, 0, object);
                header.map_epoch = map.epoch;
                let reply = timed(&conn, conn.start(header, Bytes::new())).await?;
                match reply.header.status {
                    Status::Ok => Ok(()),
                    status => Err(ClientError::Status { status }),
                }
            }
        };
        let up = map.osds.values().filter(|o| o.up).map(request);
        futures::future::try_join_all(up).await?;
        if opcode != Opcode::Flush {
            return Ok(());
        }
        // An OSD marked down while running may hold the only copies of acknowledged writes
        // not yet durable: a FLUSH reaches it too, or waits until it says it flushed.
        for osd in map.osds.values().filter(|o| o.unflushed) {
            tokio::select! {
                done = request(osd) => done?,
                () = self.no_longer_unflushed(osd.id) => {
                    if self.map().osds.get(&osd.id).is_some_and(|o| o.up) {
                        // Up again: flushed with the others on the retry, under the new map.
                        return Err(ClientError::Closed {
                            addr: osd.addr.clone(),
                            reason: format!("osd.{} came up during a FLUSH", osd.id),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Resolves once a map no longer shows `osd` unflushed (it flushed, came back up, or
    /// its liveness record lapsed).
    async fn no_longer_unflushed(&self, osd: OsdId) {
        let mut maps = self.map.clone();
        // Bound: one iteration per map; pending for ever if the map source ends.
        loop {
            if !maps
                .borrow_and_update()
                .osds
                .get(&osd)
                .is_some_and(|o| o.unflushed)
            {
                return;
            }
            if maps.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

/// A primary's reply as a result: Ok passes; Conflict (a CALL's condition failed) carries
/// the index in its payload; any other status is an error.
pub(crate) fn reply_result(reply: Reply) -> Result<Reply, ClientError> {
    match reply.header.status {
        Status::Ok => Ok(reply),
        Status::Conflict => match <[u8; 4]>::try_from(&reply.payload[..]) {
            Ok(index) => Err(ClientError::KvConflict {
                index: u32::from_le_bytes(index),
            }),
            Err(_) => Err(ClientError::BadReply {
                reason: format!("Conflict reply of {} bytes", reply.payload.len()),
            }),
        },
        status => Err(ClientError::Status { status }),
    }
}

/// Pause before retry number `attempt` (0-based) when no new map arrives.
pub(crate) fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((RETRY_BACKOFF_MIN_MS << attempt.min(10)).min(RETRY_BACKOFF_MAX_MS))
}

/// [`backoff`], shorter while the primary says its PG is about to serve (peering, or
/// waiting for its peers' leases).
fn retry_pause(e: &ClientError, attempt: u32) -> Duration {
    match e {
        ClientError::Status {
            status: Status::Peering | Status::Unavailable,
        } => backoff(attempt).min(Duration::from_millis(RETRY_BACKOFF_PEERING_MAX_MS)),
        _ => backoff(attempt),
    }
}

/// Await a reply with the request timeout.
pub(crate) async fn timed(
    conn: &Connection,
    pending: crate::conn::Pending,
) -> Result<Reply, ClientError> {
    tokio::time::timeout(Duration::from_millis(REQUEST_TIMEOUT_MS), pending)
        .await
        .map_err(|_| ClientError::Timeout {
            addr: conn.addr().to_string(),
            timeout_ms: REQUEST_TIMEOUT_MS,
        })?
}

/// Exports a [`Cluster`] client's counters: `basalt_client_*` (docs/metrics.md).
#[derive(Debug)]
pub struct ClientCollector(std::sync::Weak<Cluster>);

impl basalt_metrics::prometheus_client::collector::Collector for ClientCollector {
    fn encode(
        &self,
        mut enc: basalt_metrics::prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use basalt_metrics::{counter, family, gauge, Kind};
        use std::sync::atomic::Ordering::Relaxed;
        let Some(cluster) = self.0.upgrade() else {
            return Ok(());
        };
        let map = cluster.map();
        let up = map.osds.values().filter(|o| o.up).count();
        let c = &cluster.counters;
        family(
            &mut enc,
            "basalt_client_retries",
            "Object requests retried (failover, peering, lost connections)",
            Kind::Counter,
            [(basalt_metrics::NO_LABELS, counter(c.retries.load(Relaxed)))],
        )?;
        family(
            &mut enc,
            "basalt_client_failures",
            "Object requests that failed for good",
            Kind::Counter,
            [(basalt_metrics::NO_LABELS, counter(c.failures.load(Relaxed)))],
        )?;
        family(
            &mut enc,
            "basalt_client_local_reads",
            "Reads served by a replica on this gateway's host (--read-policy localize)",
            Kind::Counter,
            [(
                basalt_metrics::NO_LABELS,
                counter(c.local_reads.load(Relaxed)),
            )],
        )?;
        family(
            &mut enc,
            "basalt_client_local_read_fallbacks",
            "Reads a local replica declined, sent to the primary instead",
            Kind::Counter,
            [(
                basalt_metrics::NO_LABELS,
                counter(c.local_read_fallbacks.load(Relaxed)),
            )],
        )?;
        family(
            &mut enc,
            "basalt_client_map_epoch",
            "Epoch of the newest cluster map",
            Kind::Gauge,
            [(basalt_metrics::NO_LABELS, gauge(map.epoch.into()))],
        )?;
        family(
            &mut enc,
            "basalt_client_osds_up",
            "OSDs up in the map",
            Kind::Gauge,
            [(basalt_metrics::NO_LABELS, gauge(up as i64))],
        )
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster").finish_non_exhaustive()
    }
}
