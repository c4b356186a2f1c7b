//! Starting, serving and stopping an OSD.

use crate::handler::serve_connection;
use basalt_client::ConnPool;
use basalt_placement::ClusterMap;
use basalt_proto::{OsdId, PgId};
use basalt_store::{Store, StoreError, StoreOptions};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use thiserror::Error;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Number of lock shards ordering writes per PG.
const PG_LOCK_SHARDS: usize = 64;

/// What an OSD needs to start.
#[derive(Clone, Debug)]
pub struct OsdConfig {
    pub id: OsdId,
    /// The store's data file; created with `store_options` when missing.
    pub store_path: PathBuf,
    pub store_options: StoreOptions,
    /// Data-plane listen address (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Create the store when its file is missing. False for an OSD the cluster already
    /// knows: an empty store would serve holes where its data was.
    pub create_if_missing: bool,
}

/// OSD start-up failures.
#[derive(Debug, Error)]
pub enum OsdError {
    #[error("open store {path}")]
    Store { path: PathBuf, source: StoreError },
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
}

/// The state shared by every connection of one OSD.
pub struct Osd {
    pub id: OsdId,
    pub store: Arc<Store>,
    map: watch::Receiver<Arc<ClusterMap>>,
    /// Connections to the replicas this OSD forwards to.
    pub(crate) peers: ConnPool,
    /// Per-PG write counters, sharded; the lock also orders a PG's writes to its replicas.
    pub(crate) pg_counters: Box<[Mutex<HashMap<PgId, u64>>]>,
}

impl Osd {
    /// The newest map this OSD has seen.
    pub fn map(&self) -> Arc<ClusterMap> {
        self.map.borrow().clone()
    }

    pub(crate) fn pg_shard(&self, pg: PgId) -> &Mutex<HashMap<PgId, u64>> {
        let h = (pg.pool as usize).wrapping_mul(31) ^ pg.index as usize;
        &self.pg_counters[h % PG_LOCK_SHARDS]
    }

    /// Open the store, bind the listener and start serving.
    pub async fn start(
        config: OsdConfig,
        map: watch::Receiver<Arc<ClusterMap>>,
    ) -> Result<OsdHandle, OsdError> {
        if !config.create_if_missing && !config.store_path.exists() {
            return Err(OsdError::StoreMissing {
                id: config.id,
                path: config.store_path.clone(),
            });
        }
        let path = config.store_path.clone();
        let options = config.store_options.clone();
        let store = tokio::task::spawn_blocking(move || Store::open_or_create(&path, &options))
            .await
            .expect("store open task")
            .map_err(|source| OsdError::Store {
                path: config.store_path.clone(),
                source,
            })?;
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
        let osd = Arc::new(Osd {
            id: config.id,
            store: Arc::new(store),
            map,
            peers: ConnPool::new(),
            pg_counters: (0..PG_LOCK_SHARDS)
                .map(|_| Mutex::new(HashMap::new()))
                .collect(),
        });
        let (stop_tx, stop_rx) = watch::channel(false);
        let flusher = tokio::spawn(background_flush(osd.clone(), stop_rx.clone()));
        let task = tokio::spawn(accept_loop(osd.clone(), listener, stop_rx));
        tracing::info!(osd = config.id, %addr, "osd serving");
        Ok(OsdHandle {
            addr,
            osd,
            stop_tx,
            task,
            flusher,
        })
    }
}

/// How often the background flusher looks at the store.
const BACKGROUND_FLUSH_INTERVAL_MS: u64 = 20;
/// Unflushed bytes above which the background flusher flushes (well below the store's own
/// bound, at which `Store::write` flushes inline on the caller's runtime thread).
const BACKGROUND_FLUSH_BYTES: u64 = 1 << 20;

/// Flush the store off the runtime threads (on the blocking pool) once enough is unflushed,
/// so writers rarely meet the store's inline flush.
async fn background_flush(osd: Arc<Osd>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(
        BACKGROUND_FLUSH_INTERVAL_MS,
    ));
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        if osd.store.unflushed_bytes() < BACKGROUND_FLUSH_BYTES {
            continue;
        }
        let store = osd.store.clone();
        match tokio::task::spawn_blocking(move || store.flush()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                // The store is fail-stop now; requests will report it. Nothing more to do here.
                tracing::error!(osd = osd.id, "background flush failed: {e}");
                return;
            }
            Err(_) => return,
        }
    }
}

async fn accept_loop(osd: Arc<Osd>, listener: TcpListener, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    stream.set_nodelay(true).ok();
                    conns.spawn(serve_connection(osd.clone(), stream, peer));
                }
                Err(e) => {
                    tracing::warn!(osd = osd.id, "accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.shutdown().await;
}

/// A running OSD.
pub struct OsdHandle {
    /// The address it actually listens on.
    pub addr: SocketAddr,
    pub osd: Arc<Osd>,
    stop_tx: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
    flusher: tokio::task::JoinHandle<()>,
}

impl OsdHandle {
    /// Stop serving, then checkpoint and close the store.
    pub async fn shutdown(self) -> Result<(), OsdError> {
        let _ = self.stop_tx.send(true);
        let _ = self.task.await;
        let _ = self.flusher.await;
        self.osd.peers.clear();
        let osd = self.osd;
        let store = osd.store.clone();
        drop(osd);
        tokio::task::spawn_blocking(move || match Arc::try_unwrap(store) {
            Ok(store) => store.close(),
            // Someone still holds the store (a request finishing): make it durable instead.
            Err(store) => store.flush(),
        })
        .await
        .expect("store close task")
        .map_err(OsdError::Close)
    }
}
