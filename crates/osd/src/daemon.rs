//! Starting, serving and stopping an OSD.

use crate::pg::PgTable;
use crate::recovery::RecoveryConfig;
use basalt_client::{ConnPool, Dialer};
use basalt_meta::MetaStore;
use basalt_placement::ClusterMap;
use basalt_proto::OsdId;
use basalt_store::{Disk, IoOptions, Store, StoreError, StoreOptions};
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Where an OSD's store lives.
#[derive(Clone)]
pub enum StoreLocation {
    /// A data file (production), fully allocated at create.
    File(PathBuf),
    /// A data file whose slot region stays sparse: its capacity is a ceiling, not a
    /// reservation (`basalt up`, test clusters).
    SparseFile(PathBuf),
    /// A block device holding a store made by `basalt disk prepare` (never created here).
    Device(PathBuf),
    /// A disk the caller hands over (the simulator's `MemDisk`).
    Disk(Arc<dyn Disk>),
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::File(path)
            | StoreLocation::SparseFile(path)
            | StoreLocation::Device(path) => write!(f, "{}", path.display()),
            StoreLocation::Disk(_) => f.write_str("(in-memory disk)"),
        }
    }
}

/// A byte stream a data-plane connection runs on.
pub trait ConnStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> ConnStream for T {}

/// A connection that arrived, and the address of its other end.
pub type Accepted = (Box<dyn ConnStream>, String);

/// Where an in-process OSD's connections come from (the simulator's network).
pub trait Listener: Send + Sync + 'static {
    /// The next connection and the address of its other end; None once the listener closed.
    fn accept(&self) -> Pin<Box<dyn Future<Output = Option<Accepted>> + Send + '_>>;
}

/// How an OSD meets clients and peers.
#[derive(Clone)]
pub enum Network {
    /// Listen on `OsdConfig::listen` and dial peers over TCP.
    Tcp,
    /// As `Tcp`, every connection inside TLS (both ways; plaintext peers are refused).
    /// Needs `OsdConfig::auth`: the handshake inside the session proves who is there.
    Tls(Arc<basalt_auth::DataTls>),
    /// The simulator: connections arrive from `listener`, peers are dialled with `dialer`,
    /// `OsdConfig::listen` is only the address the map advertises, and store calls that
    /// would go to the blocking pool run inline (one thread: a run replays exactly).
    InProcess {
        listener: Arc<dyn Listener>,
        dialer: Arc<dyn Dialer>,
    },
}

/// What an OSD needs to start.
#[derive(Clone)]
pub struct OsdConfig {
    pub id: OsdId,
    /// The store; created with `store_options` when missing (see `create_if_missing`).
    pub store: StoreLocation,
    pub store_options: StoreOptions,
    /// How a store file's I/O runs (engine, direct or buffered); not used for a `Disk`.
    pub io: IoOptions,
    /// Data-plane listen address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// TCP, or the simulator's in-process links.
    pub network: Network,
    /// Create the store when its file is missing. False for an OSD the cluster already
    /// knows: an empty store would serve holes where its data was.
    pub create_if_missing: bool,
    /// This run's incarnation (see `OsdInfo::incarnation`); None picks a random one.
    pub incarnation: Option<u64>,
    /// Pace of background recovery.
    pub recovery: RecoveryConfig,
    /// How often to look for stray copies (of PGs this OSD left) to remove; None: never.
    pub stray_scan: Option<std::time::Duration>,
    /// Authenticate every TCP connection against this authority (and prove this OSD's own
    /// key to its peers); None: no handshake (tests, the simulator's in-process links).
    pub auth: Option<Arc<basalt_auth::Authority>>,
    /// Heartbeats with the peers of its PGs, failure reports and peer leases; None: none
    /// (the OSDs of one process, which cannot fail apart).
    pub heartbeat: Option<crate::heartbeat::HeartbeatConfig>,
}

/// Run `f` on the blocking pool, or inline when `inline`. A panic in `f` is a bug: it is
/// propagated.
async fn run_blocking<T, F>(inline: bool, f: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    if inline {
        return f();
    }
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(StoreError::Io {
            op: "store call",
            source: std::io::Error::other("cancelled: the runtime is shutting down"),
        }),
    }
}

/// A random u64 from the standard library's per-process random hasher keys.
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish() | 1
}

/// OSD start-up failures.
#[derive(Debug, Error)]
pub enum OsdError {
    #[error("open store {location}")]
    Store {
        location: String,
        source: StoreError,
    },
    #[error(
        "the store of osd.{id} is missing at {path}; the cluster already holds data on it, \
         so it will not start with an empty one (restore the file, or remove the whole data \
         directory to start a new cluster)"
    )]
    StoreMissing { id: OsdId, path: PathBuf },
    #[error("listen on {addr}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("close store")]
    Close(#[source] StoreError),
    #[error("read the frozen layers from the cluster metadata")]
    Meta(#[source] basalt_meta::MetaError),
    #[error("register with the cluster")]
    Register(#[source] basalt_meta::MetaError),
    #[error(
        "osd.{id} was removed from the cluster (`basalt osd rm`); its id is never used again \
         and its data was given up. Wipe this OSD's data directory (and its device, if any) \
         and start it as a new OSD: it gets a new id"
    )]
    Removed { id: OsdId },
}

/// The state shared by every connection of one OSD.
pub struct Osd {
    pub id: OsdId,
    /// This run of the OSD (random per start).
    pub incarnation: u64,
    pub store: Arc<Store>,
    map: watch::Receiver<Arc<ClusterMap>>,
    /// Cluster metadata: PG records live there.
    pub(crate) meta: Arc<dyn MetaStore>,
    /// Connections to the replicas this OSD forwards to.
    pub(crate) peers: ConnPool,
    /// Connections of the heartbeats (their own, so a ping never waits behind data).
    pub(crate) heartbeat_conns: ConnPool,
    /// Peer leases held (as primary) and promised (as member).
    pub leases: crate::heartbeat::PeerLeases,
    /// The liveness lease the OSD's records live under (0: not registered).
    liveness_lease: std::sync::atomic::AtomicI64,
    /// `up_from` of the last time down (while running) whose flush has begun (0: none).
    pub(crate) flushed_down_from: std::sync::atomic::AtomicU32,
    /// Interval, role and version counter of every PG; a shard's lock orders its PGs'
    /// mutations.
    pub pgs: PgTable,
    /// Layer chains, frozen layers and the fence gate.
    pub layers: crate::layers::Layers,
    /// Locks of erasure-coded stripes: a stripe's writes, reads and repairs run one at a time.
    pub(crate) stripes: crate::ec::StripeLocks,
    pub(crate) recovery: RecoveryConfig,
    /// Operation counters (STAT replies, `/metrics`).
    pub counters: crate::metrics::OsdCounters,
    /// Operations in flight, for slow-op detection.
    pub slow: Arc<crate::slow::InFlight>,
    started: Instant,
    /// Milliseconds since `started` of the last client request (recovery yields to them).
    last_client_op_ms: AtomicU64,
    /// Milliseconds since `started` of the last successful lease renewal.
    lease_renewed_ms: AtomicU64,
    /// Stop serving as primary when the lease was not renewed for this long (0: never; an
    /// OSD of the one-process cluster has no lease to lose).
    fence_after_ms: AtomicU64,
    /// Run store calls inline instead of on the blocking pool (the simulator).
    inline_store_calls: bool,
    /// Woken when enough is unflushed that the background flusher should not wait for its
    /// tick (writers must not meet the store's inline flush on a runtime thread).
    pub(crate) flush_wanted: tokio::sync::Notify,
    /// Becomes true (or its sender goes away) when the OSD stops: retry loops end then.
    stop: watch::Receiver<bool>,
    /// Authentication of TCP connections (None: none).
    pub(crate) auth: Option<Arc<crate::auth::OsdAuth>>,
    /// Handshake and capability counters.
    pub auth_counters: crate::auth::AuthCounters,
}

impl Osd {
    /// The newest map this OSD has seen.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.borrow().clone()
    }

    /// A receiver of every new map.
    pub fn maps(&self) -> watch::Receiver<Arc<ClusterMap>> {
        self.map.clone()
    }

    /// Run a store call that may block (fsync, a scan): on the blocking pool, or inline in
    /// the simulator.
    pub(crate) async fn store_call<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: FnOnce() -> Result<T, StoreError> + Send + 'static,
        T: Send + 'static,
    {
        run_blocking(self.inline_store_calls, f).await
    }

    /// Is the OSD stopping (shut down, or its handle dropped as a crash)? Peering and recovery
    /// retry loops end when it is.
    pub(crate) fn stopping(&self) -> bool {
        *self.stop.borrow() || self.stop.has_changed().is_err()
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The liveness lease, once registered: failure reports live under it.
    pub fn liveness_lease(&self) -> Option<basalt_meta::LeaseId> {
        Some(self.liveness_lease.load(Ordering::Acquire)).filter(|l| *l != 0)
    }

    pub(crate) fn set_liveness_lease(&self, lease: basalt_meta::LeaseId) {
        self.liveness_lease.store(lease, Ordering::Release);
    }

    /// Record that the liveness lease was just renewed.
    pub fn note_lease_renewed(&self) {
        self.lease_renewed_ms
            .store(self.now_ms(), Ordering::Release);
    }

    /// From now on, stop serving as primary whenever the lease has not been renewed for
    /// `fence_after_ms` (half the lease TTL: a new primary can only be chosen once the whole
    /// TTL passed, so the old one has stopped by then: no split brain).
    pub fn set_fence_after(&self, fence_after_ms: u64) {
        self.note_lease_renewed();
        self.fence_after_ms.store(fence_after_ms, Ordering::Release);
    }

    /// Is this OSD cut off from the cluster metadata for too long to act as a primary?
    pub fn fenced(&self) -> bool {
        let after = self.fence_after_ms.load(Ordering::Acquire);
        after > 0
            && self
                .now_ms()
                .saturating_sub(self.lease_renewed_ms.load(Ordering::Acquire))
                > after
    }

    pub(crate) fn note_client_op(&self) {
        self.last_client_op_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// Milliseconds since the last client request.
    pub(crate) fn client_idle_ms(&self) -> u64 {
        self.now_ms()
            .saturating_sub(self.last_client_op_ms.load(Ordering::Relaxed))
    }

    /// Open the store, bind the listener and start serving.
    pub async fn start(
        config: OsdConfig,
        map: watch::Receiver<Arc<ClusterMap>>,
        meta: Arc<dyn MetaStore>,
    ) -> Result<OsdHandle, OsdError> {
        let inline = matches!(config.network, Network::InProcess { .. });
        let options = config.store_options.clone();
        let io = config.io;
        let location = config.store.clone();
        let store = match location.clone() {
            StoreLocation::File(path) => {
                if !config.create_if_missing && !path.exists() {
                    return Err(OsdError::StoreMissing {
                        id: config.id,
                        path: path.clone(),
                    });
                }
                run_blocking(inline, move || {
                    Store::open_or_create_with(&path, &options, &io)
                })
                .await
            }
            StoreLocation::SparseFile(path) => {
                if !config.create_if_missing && !path.exists() {
                    return Err(OsdError::StoreMissing {
                        id: config.id,
                        path: path.clone(),
                    });
                }
                run_blocking(inline, move || match path.exists() {
                    true => Store::open_sparse(&path, &io),
                    false => Store::create_sparse(&path, &options, &io),
                })
                .await
            }
            StoreLocation::Device(path) => {
                run_blocking(inline, move || Store::open_device(&path, &io)).await
            }
            StoreLocation::Disk(disk) => {
                let create = config.create_if_missing;
                run_blocking(inline, move || match create {
                    true => Store::create_on(disk, &options),
                    false => Store::open_on(disk),
                })
                .await
            }
        }
        .map_err(|source| OsdError::Store {
            location: location.to_string(),
            source,
        })?;
        let (incoming, peers, heartbeat_conns, addr) = match &config.network {
            Network::Tcp | Network::Tls(_) => {
                let tls = match &config.network {
                    Network::Tls(tls) => Some(tls.clone()),
                    _ => None,
                };
                if tls.is_some() && config.auth.is_none() {
                    return Err(OsdError::Listen {
                        addr: config.listen,
                        source: std::io::Error::other(
                            "data-plane TLS needs authentication (a keyring)",
                        ),
                    });
                }
                let listener =
                    TcpListener::bind(config.listen)
                        .await
                        .map_err(|source| OsdError::Listen {
                            addr: config.listen,
                            source,
                        })?;
                let addr = listener.local_addr().map_err(|source| OsdError::Listen {
                    addr: config.listen,
                    source,
                })?;
                let creds = config
                    .auth
                    .as_ref()
                    .map(|a| a.daemon_credentials(config.id).with_tls(tls.clone()));
                (
                    Incoming::Tcp(listener, tls),
                    ConnPool::authenticated(creds.clone()),
                    ConnPool::authenticated(creds),
                    addr,
                )
            }
            Network::InProcess { listener, dialer } => (
                Incoming::InProcess(listener.clone()),
                ConnPool::with_dialer(dialer.clone()),
                ConnPool::with_dialer(dialer.clone()),
                config.listen,
            ),
        };
        let (stop_tx, stop_rx) = watch::channel(false);
        let osd = Arc::new(Osd {
            id: config.id,
            incarnation: config.incarnation.unwrap_or_else(random_u64),
            store: Arc::new(store),
            map,
            meta,
            peers,
            heartbeat_conns,
            leases: crate::heartbeat::PeerLeases::new(config.heartbeat.map(|h| h.peer_lease)),
            liveness_lease: std::sync::atomic::AtomicI64::new(0),
            flushed_down_from: std::sync::atomic::AtomicU32::new(0),
            pgs: PgTable::default(),
            layers: Default::default(),
            stripes: Default::default(),
            recovery: config.recovery,
            counters: Default::default(),
            slow: Default::default(),
            started: Instant::now(),
            last_client_op_ms: AtomicU64::new(0),
            lease_renewed_ms: AtomicU64::new(0),
            fence_after_ms: AtomicU64::new(0),
            inline_store_calls: inline,
            flush_wanted: tokio::sync::Notify::new(),
            stop: stop_rx.clone(),
            auth: config
                .auth
                .clone()
                .map(|a| Arc::new(crate::auth::OsdAuth::new(a))),
            auth_counters: Default::default(),
        });
        if let Some(auth) = osd.auth.clone() {
            tokio::spawn(crate::auth::watch_revocations(auth, stop_rx.clone()));
        }
        // Before serving: a snapshot frozen while this process was not running is refused
        // from the first request on.
        osd.layers
            .reload_frozen(osd.meta.as_ref(), Instant::now())
            .await
            .map_err(OsdError::Meta)?;
        let flusher = tokio::spawn(background_flush(osd.clone(), stop_rx.clone()));
        let slow_ops = tokio::spawn(crate::slow::watch_slow_ops(osd.clone(), stop_rx.clone()));
        let intervals = tokio::spawn(crate::peering::follow_intervals(
            osd.clone(),
            stop_rx.clone(),
        ));
        if let Some(every) = config.stray_scan {
            tokio::spawn(crate::stray::remove_strays(
                osd.clone(),
                every,
                stop_rx.clone(),
            ));
        }
        if let Some(heartbeat) = config.heartbeat {
            tokio::spawn(crate::heartbeat::run(
                osd.clone(),
                heartbeat,
                stop_rx.clone(),
            ));
        }
        let task = tokio::spawn(accept_loop(osd.clone(), incoming, stop_rx));
        tracing::info!(osd = config.id, %addr, "osd serving");
        Ok(OsdHandle {
            addr,
            osd,
            stop_tx,
            task,
            flusher,
            intervals,
            slow_ops,
        })
    }
}

/// How often the background flusher looks at the store.
const BACKGROUND_FLUSH_INTERVAL_MS: u64 = 20;
/// Unflushed bytes above which the background flusher flushes (well below the store's own
/// bound, past which the OSD flushes, awaited, before it applies a write).
pub(crate) const BACKGROUND_FLUSH_BYTES: u64 = 1 << 20;

/// Run the store's due checkpoint off the runtime threads.
async fn background_checkpoint(osd: Arc<Osd>) {
    let store = osd.store.clone();
    if let Err(e) = osd.store_call(move || store.checkpoint_due()).await {
        // The store is fail-stop now; requests will report it.
        tracing::error!(osd = osd.id, "background checkpoint failed: {e}");
    }
}

/// Flush the store off the runtime threads (on the blocking pool) once enough is unflushed,
/// so writers rarely meet the store's inline flush; and, while rewrites and deletes left
/// freed slots awaiting confirmation, at every tick, so those slots are reused within a few
/// ticks. (Without that, whole-object rewrites with no flush from the client would walk
/// through every free slot of the file first: on tmpfs, memory grows to the store's whole
/// capacity; on a disk, the working set spreads over it.)
async fn background_flush(osd: Arc<Osd>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(
        BACKGROUND_FLUSH_INTERVAL_MS,
    ));
    let mut checkpoint: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => return,
            _ = osd.flush_wanted.notified() => {}
            _ = tick.tick() => {}
        }
        // A due checkpoint runs beside the flushes, not in one of them: batches go on
        // committing while it writes the table.
        if checkpoint.as_ref().is_none_or(|t| t.is_finished()) && osd.store.checkpoint_wanted() {
            checkpoint = Some(tokio::spawn(background_checkpoint(osd.clone())));
        }
        let unflushed = osd.store.unflushed_bytes();
        if unflushed < BACKGROUND_FLUSH_BYTES && osd.store.pending_freed_slots() == 0 {
            continue;
        }
        let store = osd.store.clone();
        let work = move || {
            if unflushed == 0 {
                // Idle since the last batch: confirm its frees with a small batch of its own.
                store.confirm_freed_slots()
            } else {
                // A batch makes the newest frees durable and confirms the previous batch's.
                store.flush()
            }
        };
        let start = basalt_metrics::now();
        let result = osd.store_call(work).await;
        if unflushed > 0 {
            osd.counters.latency.store_flush.observe_since(start);
        }
        if let Err(e) = result {
            // The store is fail-stop now; requests will report it. Nothing more to do here.
            tracing::error!(osd = osd.id, "background flush failed: {e}");
            return;
        }
    }
}

/// Where an OSD's connections come from.
enum Incoming {
    /// TCP, inside TLS when it has credentials.
    Tcp(TcpListener, Option<Arc<basalt_auth::DataTls>>),
    InProcess(Arc<dyn Listener>),
}

async fn accept_loop(osd: Arc<Osd>, incoming: Incoming, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = accept(&incoming) => match accepted {
                Ok(Some(Arrived::Split(rd, wr, peer))) => {
                    conns.spawn(crate::auth::serve_tcp(osd.clone(), rd, wr, peer));
                }
                Ok(Some(Arrived::Tls(stream, tls, peer))) => {
                    conns.spawn(crate::auth::serve_tls(osd.clone(), stream, tls, peer));
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(osd = osd.id, "accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    conns.shutdown().await;
}

type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// A connection that arrived.
enum Arrived {
    /// Split into its halves (TCP's own halves need no lock).
    Split(ReadHalf, WriteHalf, String),
    /// TCP whose TLS handshake is still to run (in the connection's own task).
    Tls(tokio::net::TcpStream, Arc<basalt_auth::DataTls>, String),
}

/// The next connection.
async fn accept(incoming: &Incoming) -> std::io::Result<Option<Arrived>> {
    match incoming {
        Incoming::Tcp(listener, tls) => {
            let (stream, peer) = listener.accept().await?;
            stream.set_nodelay(true).ok();
            if let Some(tls) = tls {
                return Ok(Some(Arrived::Tls(stream, tls.clone(), peer.to_string())));
            }
            let (rd, wr) = stream.into_split();
            Ok(Some(Arrived::Split(
                Box::new(rd),
                Box::new(wr),
                peer.to_string(),
            )))
        }
        Incoming::InProcess(listener) => Ok(listener.accept().await.map(|(stream, peer)| {
            let (rd, wr) = tokio::io::split(stream);
            Arrived::Split(Box::new(rd) as ReadHalf, Box::new(wr) as WriteHalf, peer)
        })),
    }
}

/// A running OSD.
pub struct OsdHandle {
    /// The address it actually listens on.
    pub addr: SocketAddr,
    pub osd: Arc<Osd>,
    stop_tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    flusher: tokio::task::JoinHandle<()>,
    intervals: tokio::task::JoinHandle<()>,
    /// The slow-op scanner (it holds the OSD, hence the store, until it ends).
    slow_ops: tokio::task::JoinHandle<()>,
}

impl OsdHandle {
    /// Stop serving, then checkpoint and close the store.
    pub async fn shutdown(self) -> Result<(), OsdError> {
        let _ = self.stop_tx.send(true);
        let _ = self.task.await;
        let _ = self.flusher.await;
        let _ = self.intervals.await;
        let _ = self.slow_ops.await;
        self.osd.peers.clear();
        let osd = self.osd;
        let store = osd.store.clone();
        let inline = osd.inline_store_calls;
        drop(osd);
        run_blocking(inline, move || match Arc::try_unwrap(store) {
            Ok(store) => store.close(),
            // Someone still holds the store (a request finishing): make it durable instead.
            Err(store) => store.flush(),
        })
        .await
        .map_err(OsdError::Close)
    }
}
