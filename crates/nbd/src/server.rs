//! [`Server`]: accepts connections on TCP or unix sockets, runs the handshake and then the
//! transmission phase for each, and shuts down gracefully on request.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::error::NbdError;
use crate::export::Exports;
use crate::handshake::{self, Outcome};
use crate::transmission;

/// Tunables of a [`Server`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once; further ones are closed right after accept.
    pub max_connections: usize,
    /// How long in-flight requests get to finish once shutdown starts.
    pub shutdown_grace: Duration,
    /// Longest a client may take from connecting to entering transmission.
    pub handshake_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

/// An NBD server over a catalogue of exports. Cheap to share (`Arc`); one server may listen
/// on several sockets at once.
pub struct Server {
    exports: Arc<dyn Exports>,
    config: ServerConfig,
    shutdown_tx: watch::Sender<bool>,
    connections: Arc<Semaphore>,
}

/// Back-off after a failed `accept` (e.g. out of file descriptors), so the loop cannot spin.
const ACCEPT_RETRY_DELAY: Duration = Duration::from_millis(50);

impl Server {
    /// A server with the default [`ServerConfig`].
    pub fn new(exports: Arc<dyn Exports>) -> Arc<Self> {
        Self::with_config(exports, ServerConfig::default())
    }

    /// A server with explicit tunables.
    pub fn with_config(exports: Arc<dyn Exports>, config: ServerConfig) -> Arc<Self> {
        let (shutdown_tx, _) = watch::channel(false);
        let connections = Arc::new(Semaphore::new(config.max_connections));
        Arc::new(Self {
            exports,
            config,
            shutdown_tx,
            connections,
        })
    }

    /// Begin a graceful shutdown: listeners stop accepting, negotiating clients are dropped,
    /// and connections close once their in-flight requests finish (at most
    /// [`ServerConfig::shutdown_grace`] later).
    pub fn shutdown(&self) {
        self.shutdown_tx.send_replace(true);
    }

    /// Whether [`Server::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        *self.shutdown_tx.borrow()
    }

    /// Number of connections being served right now.
    pub fn active_connections(&self) -> usize {
        self.config.max_connections - self.connections.available_permits()
    }

    /// Accept and serve TCP clients until shutdown, then wait for the connections to close.
    pub async fn serve_tcp(self: Arc<Self>, listener: TcpListener) -> std::io::Result<()> {
        let mut shutdown = self.shutdown_tx.subscribe();
        loop {
            let accepted = tokio::select! {
                biased;
                _ = wait_for_shutdown(&mut shutdown) => break,
                a = listener.accept() => a,
            };
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("nbd accept: {e}");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            };
            // Replies are small and latency-bound; the protocol recommends TCP_NODELAY.
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            self.spawn_connection(peer.to_string(), async move {
                server.run(stream, |s| s.into_split()).await
            });
        }
        drop(listener);
        self.drain().await;
        Ok(())
    }

    /// Accept and serve unix-socket clients until shutdown, then wait for the connections.
    pub async fn serve_unix(self: Arc<Self>, listener: UnixListener) -> std::io::Result<()> {
        let mut shutdown = self.shutdown_tx.subscribe();
        loop {
            let accepted = tokio::select! {
                biased;
                _ = wait_for_shutdown(&mut shutdown) => break,
                a = listener.accept() => a,
            };
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("nbd accept: {e}");
                    tokio::time::sleep(ACCEPT_RETRY_DELAY).await;
                    continue;
                }
            };
            let server = self.clone();
            self.spawn_connection("unix".into(), async move {
                server.run(stream, |s| s.into_split()).await
            });
        }
        drop(listener);
        self.drain().await;
        Ok(())
    }

    /// Serve one already-connected client (any byte stream) to the end of its session.
    /// Not counted against [`ServerConfig::max_connections`].
    pub async fn serve_connection<S>(&self, stream: S) -> Result<(), NbdError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        self.run(stream, tokio::io::split).await
    }

    /// Run `serve` as its own task if the connection bound allows; close it otherwise.
    fn spawn_connection<F>(&self, peer: String, serve: F)
    where
        F: std::future::Future<Output = Result<(), NbdError>> + Send + 'static,
    {
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "nbd connection refused: {} connections open", self.config.max_connections);
            return;
        };
        tokio::spawn(async move {
            match serve.await {
                Ok(()) => tracing::debug!(%peer, "nbd connection closed"),
                Err(NbdError::Io(e)) => tracing::debug!(%peer, "nbd connection lost: {e}"),
                Err(e) => tracing::info!(%peer, "nbd connection dropped: {e}"),
            }
            drop(permit);
        });
    }

    /// Handshake on the whole stream, then split it for the transmission phase.
    async fn run<S, R, W>(
        &self,
        mut stream: S,
        split: impl FnOnce(S) -> (R, W),
    ) -> Result<(), NbdError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let mut shutdown = self.shutdown_tx.subscribe();
        let grace = self.config.shutdown_grace;
        let limit = self.config.handshake_timeout;
        let mut stop = self.shutdown_tx.subscribe();
        // Negotiation is bounded in time, and by the grace period once shutdown starts, so a
        // client stalled mid-option cannot pin a connection slot.
        let outcome = tokio::select! {
            r = tokio::time::timeout(limit, handshake::negotiate(&mut stream, &*self.exports, &mut shutdown)) => {
                r.map_err(|_| NbdError::HandshakeTimeout { limit })??
            }
            _ = async { wait_for_shutdown(&mut stop).await; tokio::time::sleep(grace).await } => Outcome::Closed,
        };
        let Outcome::Transmission(negotiated) = outcome else {
            return Ok(());
        };
        tracing::debug!(export = %negotiated.name, "nbd transmission starts");
        let (reader, writer) = split(stream);
        transmission::serve(reader, writer, negotiated, shutdown, grace).await
    }

    /// Wait until every counted connection has closed, bounded by the grace period plus a
    /// margin for the close itself.
    async fn drain(&self) {
        let all = self.config.max_connections.min(u32::MAX as usize) as u32;
        let bound = self.config.shutdown_grace + Duration::from_secs(1);
        let waited = tokio::time::timeout(bound, self.connections.acquire_many(all)).await;
        if waited.is_err() {
            tracing::warn!("nbd shutdown: connections still open after the grace period");
        }
    }
}

/// Resolve once shutdown has been requested (never, if the server is gone).
pub(crate) async fn wait_for_shutdown(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|down| *down).await.is_err() {
        std::future::pending::<()>().await;
    }
}
