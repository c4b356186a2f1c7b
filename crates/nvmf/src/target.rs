//! [`Target`]: accepts NVMe/TCP connections, keeps the registry of controllers (a Connect
//! on the admin queue makes one; I/O queues join it by controller id), and shuts down
//! gracefully on request.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use basalt_nbd::{DeviceError, Exports};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};

use crate::command::{Sqe, Status};
use crate::controller::{Controller, Kind};
use crate::error::NvmfError;
use crate::identify::{self, DISCOVERY_NQN, NQN_PREFIX};
use crate::queue::{self, Outgoing};

/// Tunables of a [`Target`].
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Connections (queues) served at once; further ones are closed right after accept.
    pub max_connections: usize,
    /// I/O queues one controller may have.
    pub max_io_queues: u16,
    /// How long in-flight commands get to finish once shutdown starts.
    pub shutdown_grace: Duration,
    /// Longest a host may take from connecting to sending its ICReq.
    pub handshake_timeout: Duration,
    /// How often each volume controller looks at its volume's size (a change raises a
    /// namespace-changed event).
    pub size_poll: Duration,
    /// Where I/O commands are counted (`/metrics`); `None` counts nothing.
    pub stats: Option<Arc<basalt_metrics::frontend::FrontendStats>>,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            max_io_queues: 16,
            shutdown_grace: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(30),
            size_poll: Duration::from_secs(1),
            stats: None,
        }
    }
}

/// Controller ids handed out: 1..=0xffef (the rest are reserved by the spec).
const MAX_CNTLID: u16 = 0xffef;
/// Connect's controller id asking for a dynamic controller.
const CNTLID_DYNAMIC: u16 = 0xffff;
/// Back-off after a failed `accept` (e.g. out of file descriptors).
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);
/// Largest queue an admin queue may be created with (entries).
const MAX_ADMIN_ENTRIES: u16 = 32;

/// A queue bound to its controller by Connect.
pub(crate) struct Connected {
    pub ctrl: Arc<Controller>,
    pub qid: u16,
    pub depth: u32,
}

/// An NVMe/TCP target over a catalogue of volumes. Cheap to share (`Arc`).
pub struct Target {
    exports: Arc<dyn Exports>,
    config: TargetConfig,
    controllers: Mutex<HashMap<u16, Arc<Controller>>>,
    next_cntlid: Mutex<u16>,
    shutdown_tx: watch::Sender<bool>,
    connections: Arc<Semaphore>,
}

/// Connect's failure: status and the CQE result (which field was invalid).
type ConnectError = (Status, u64);

/// Connect Invalid Parameters pointing at byte `offset` of the SQE (`in_data` false) or of
/// the Connect data (true).
fn invalid_parameter(offset: u16, in_data: bool) -> ConnectError {
    (
        Status::CONNECT_INVALID_PARAMETERS,
        u64::from(offset) | (u64::from(in_data) << 16),
    )
}

/// The NUL-terminated string in a 256-byte Connect field (None: not terminated, or not
/// UTF-8, or empty).
fn nqn_field(field: &[u8]) -> Option<String> {
    let end = field.iter().position(|b| *b == 0)?;
    let s = std::str::from_utf8(&field[..end]).ok()?;
    (!s.is_empty()).then(|| s.to_string())
}

impl Target {
    /// A target with the default [`TargetConfig`].
    pub fn new(exports: Arc<dyn Exports>) -> Arc<Self> {
        Self::with_config(exports, TargetConfig::default())
    }

    /// A target with explicit tunables.
    pub fn with_config(exports: Arc<dyn Exports>, config: TargetConfig) -> Arc<Self> {
        let (shutdown_tx, _) = watch::channel(false);
        let connections = Arc::new(Semaphore::new(config.max_connections));
        Arc::new(Self {
            exports,
            config,
            controllers: Mutex::new(HashMap::new()),
            next_cntlid: Mutex::new(1),
            shutdown_tx,
            connections,
        })
    }

    /// Its tunables.
    pub fn config(&self) -> &TargetConfig {
        &self.config
    }

    /// Begin a graceful shutdown: listeners stop, queues stop reading and close once their
    /// commands finish (at most [`TargetConfig::shutdown_grace`] later).
    pub fn shutdown(&self) {
        self.shutdown_tx.send_replace(true);
    }

    /// Controllers alive now.
    pub fn controllers(&self) -> usize {
        self.registry().len()
    }

    // Plain map operations under this lock: a panic cannot leave it half-updated.
    fn registry(&self) -> MutexGuard<'_, HashMap<u16, Arc<Controller>>> {
        self.controllers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Accept and serve TCP hosts until shutdown, then wait for the connections to close.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        let mut shutdown = self.shutdown_tx.subscribe();
        loop {
            let accepted = tokio::select! {
                biased;
                _ = queue::wait_for_shutdown(&mut shutdown) => break,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("nvmf accept: {e}");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            };
            // Completions are small and latency-bound.
            let _ = stream.set_nodelay(true);
            let Ok(permit) = self.connections.clone().try_acquire_owned() else {
                tracing::warn!(%peer, "nvmf connection refused: {} connections open", self.config.max_connections);
                continue;
            };
            let target = self.clone();
            tokio::spawn(async move {
                let local = stream.local_addr().ok();
                let (r, w) = stream.into_split();
                match target.serve_halves(r, w, local).await {
                    Ok(()) => tracing::debug!(%peer, "nvmf connection closed"),
                    Err(NvmfError::Io(e)) => tracing::debug!(%peer, "nvmf connection lost: {e}"),
                    Err(e) => tracing::info!(%peer, "nvmf connection dropped: {e}"),
                }
                drop(permit);
            });
        }
        drop(listener);
        let all = self.config.max_connections.min(u32::MAX as usize) as u32;
        let bound = self.config.shutdown_grace + Duration::from_secs(1);
        if tokio::time::timeout(bound, self.connections.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!("nvmf shutdown: connections still open after the grace period");
        }
        Ok(())
    }

    /// Serve one already-connected host (any byte stream) to the end of its connection;
    /// `local` is the address the host reached (the discovery log reports it).
    pub async fn serve_connection<S>(
        self: &Arc<Self>,
        stream: S,
        local: Option<SocketAddr>,
    ) -> Result<(), NvmfError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (r, w) = tokio::io::split(stream);
        self.serve_halves(r, w, local).await
    }

    async fn serve_halves<R, W>(
        self: &Arc<Self>,
        r: R,
        w: W,
        local: Option<SocketAddr>,
    ) -> Result<(), NvmfError>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        queue::serve(self, r, w, local, self.shutdown_tx.subscribe()).await
    }

    /// Fabrics Connect: create a controller (admin queue) or join one (I/O queue).
    pub(crate) async fn connect(
        self: &Arc<Self>,
        sqe: &Sqe,
        data: &[u8],
        tx: mpsc::Sender<Outgoing>,
        local_addr: Option<SocketAddr>,
    ) -> Result<Connected, ConnectError> {
        if sqe.word(40) != 0 {
            // Record format 0 is the only one.
            return Err((Status::new(1, 0x80, true), 0));
        }
        let qid = sqe.word(42);
        let sqsize = sqe.word(44);
        let kato_ms = sqe.cdw(12);
        if data.len() != 1024 {
            return Err((Status::SGL_LENGTH_INVALID, 0));
        }
        let cntlid = u16::from_le_bytes([data[16], data[17]]);
        let Some(subnqn) = nqn_field(&data[256..512]) else {
            return Err(invalid_parameter(256, true));
        };
        let Some(hostnqn) = nqn_field(&data[512..768]) else {
            return Err((Status::CONNECT_INVALID_HOST, 0));
        };
        if !hostnqn.starts_with("nqn.") {
            return Err((Status::CONNECT_INVALID_HOST, 0));
        }
        let max_entries = if qid == 0 {
            MAX_ADMIN_ENTRIES
        } else {
            identify::MAX_QUEUE_ENTRIES
        };
        if sqsize == 0 || sqsize >= max_entries {
            return Err(invalid_parameter(44, false));
        }
        let depth = u32::from(sqsize) + 1;
        if qid == 0 {
            if cntlid != CNTLID_DYNAMIC {
                return Err(invalid_parameter(16, true));
            }
            let ctrl = self
                .new_controller(subnqn, hostnqn, kato_ms, tx, local_addr)
                .await?;
            return Ok(Connected { ctrl, qid, depth });
        }
        let Some(ctrl) = self.registry().get(&cntlid).cloned() else {
            return Err(invalid_parameter(16, true));
        };
        if ctrl.subnqn != subnqn {
            return Err(invalid_parameter(256, true));
        }
        if ctrl.hostnqn != hostnqn {
            return Err((Status::CONNECT_INVALID_HOST, 0));
        }
        if ctrl.device().is_none() || !ctrl.ready() || !ctrl.attach_io_queue(qid) {
            return Err(invalid_parameter(42, false));
        }
        Ok(Connected { ctrl, qid, depth })
    }

    async fn new_controller(
        self: &Arc<Self>,
        subnqn: String,
        hostnqn: String,
        kato_ms: u32,
        tx: mpsc::Sender<Outgoing>,
        local_addr: Option<SocketAddr>,
    ) -> Result<Arc<Controller>, ConnectError> {
        let kind = if subnqn == DISCOVERY_NQN {
            Kind::Discovery {
                exports: self.exports.clone(),
            }
        } else if let Some(name) = subnqn.strip_prefix(NQN_PREFIX) {
            match self.exports.admits_nvme_host(name, &hostnqn).await {
                Ok(true) => {}
                Ok(false) => {
                    tracing::warn!(subnqn, hostnqn, "nvmf connect refused: the host is not on the volume's access list (basalt volume allow)");
                    return Err((Status::CONNECT_INVALID_HOST, 0));
                }
                Err(e) => {
                    tracing::warn!(subnqn, "nvmf connect: read the access list: {e}");
                    return Err((Status::NAMESPACE_NOT_READY, 0));
                }
            }
            match self
                .exports
                .open_as(name, &format!("nvme host {hostnqn}"))
                .await
            {
                Ok(Some(device)) => Kind::Volume {
                    name: name.to_string(),
                    device,
                },
                Ok(None) => return Err(invalid_parameter(256, true)),
                Err(e @ DeviceError::Locked(_)) => {
                    tracing::warn!(subnqn, hostnqn, "nvmf connect refused: {e}");
                    return Err((Status::CONNECT_INVALID_HOST, 0));
                }
                Err(e) => {
                    tracing::warn!(subnqn, "nvmf connect: open volume: {e}");
                    return Err((Status::NAMESPACE_NOT_READY, 0));
                }
            }
        } else {
            return Err(invalid_parameter(256, true));
        };
        let mut registry = self.registry();
        let cntlid = {
            let mut next = self.next_cntlid.lock().unwrap_or_else(|e| e.into_inner());
            // Loop bound: MAX_CNTLID ids; all taken means every id is in use.
            let mut found = None;
            for _ in 0..MAX_CNTLID {
                let id = *next;
                *next = if id >= MAX_CNTLID { 1 } else { id + 1 };
                if !registry.contains_key(&id) {
                    found = Some(id);
                    break;
                }
            }
            found.ok_or((Status::CONNECT_CTRL_BUSY, 0))?
        };
        let recorder = match (&self.config.stats, &kind) {
            (Some(stats), Kind::Volume { name, .. }) => Some(stats.connection(name)),
            _ => None,
        };
        let ctrl = Arc::new(Controller::new(
            cntlid,
            kind,
            subnqn,
            hostnqn,
            kato_ms,
            tx,
            local_addr,
            self.config.max_io_queues,
            recorder,
        ));
        registry.insert(cntlid, ctrl.clone());
        drop(registry);
        if ctrl.device().is_some() {
            let weak = Arc::downgrade(&ctrl);
            let every = self.config.size_poll;
            tokio::spawn(async move {
                // Loop bound: ends once the controller is gone or closed.
                loop {
                    tokio::time::sleep(every).await;
                    let Some(c) = weak.upgrade() else { return };
                    if c.closed.load(std::sync::atomic::Ordering::Acquire) {
                        return;
                    }
                    c.poll_size();
                }
            });
        }
        Ok(ctrl)
    }

    /// The admin queue of `ctrl` ended: the controller goes (its I/O queues end with their
    /// connections).
    pub(crate) fn remove_controller(&self, ctrl: &Arc<Controller>) {
        ctrl.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.registry().remove(&ctrl.cntlid);
    }
}
