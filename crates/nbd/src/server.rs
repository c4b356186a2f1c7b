//! [`Server`]: accepts connections on TCP or unix sockets, runs the handshake and then the
//! transmission phase for each, and shuts down gracefully on request.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::{watch, Semaphore};

use crate::error::NbdError;
use crate::export::Exports;
use crate::handshake::{self, Negotiated, Outcome};
use crate::option::TlsMode;
use crate::tls::{TlsConfig, TlsStream};
use crate::transmission;

/// Who a client on the gateway's own machine is: its unix-socket and loopback connections
/// are one client to a writer lock (QEMU, qemu-io and nbdfuse on a hypervisor mix them).
const LOCAL_CLIENT: &str = "nbd client on the gateway's host";

/// The writer-lock identity of a TCP client at `ip` (see [`LOCAL_CLIENT`]).
fn client_name(ip: std::net::IpAddr) -> String {
    if ip.is_loopback() {
        LOCAL_CLIENT.to_string()
    } else {
        format!("nbd client {ip}")
    }
}

/// Who can reach a listener. A unix socket is guarded by its file permissions: TLS is
/// offered there but never required, so local tools (`basalt image import`) keep working
/// on a server that requires TLS on TCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// TCP, or a stream handed to [`Server::serve_connection`].
    Network,
    /// A unix socket of this host.
    Local,
}

/// How the handshake left a connection.
enum Ready<S> {
    /// Transmission in plaintext, on the original stream.
    Plain(S, Negotiated),
    /// Transmission inside TLS.
    Tls(TlsStream, Negotiated),
    /// No transmission: the client left or the server is shutting down.
    Closed,
}

/// Tunables of a [`Server`].
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connections served at once; further ones are closed right after accept.
    pub max_connections: usize,
    /// How long in-flight requests get to finish once shutdown starts.
    pub shutdown_grace: Duration,
    /// Longest a client may take from connecting to entering transmission (the TLS
    /// handshake included).
    pub handshake_timeout: Duration,
    /// TLS credentials and mode; `None` serves plaintext only (NOTLS). Unix sockets offer
    /// TLS but never require it (their file permissions guard them).
    pub tls: Option<Arc<TlsConfig>>,
    /// Where requests are counted (`/metrics`); `None` counts nothing.
    pub stats: Option<Arc<basalt_metrics::frontend::FrontendStats>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_connections: 1024,
            shutdown_grace: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(30),
            tls: None,
            stats: None,
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

/// Longest wait for a TLS client to take the server's `close_notify` after `OPT_ABORT`.
const TLS_CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

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
            let client = client_name(peer.ip());
            self.spawn_connection(peer.to_string(), async move {
                server
                    .run(stream, Reach::Network, client, |s| s.into_split())
                    .await
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
                let client = LOCAL_CLIENT.to_string();
                server
                    .run(stream, Reach::Local, client, |s| s.into_split())
                    .await
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
        S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
    {
        let client = "nbd client on a passed-in stream".to_string();
        self.run(stream, Reach::Network, client, tokio::io::split)
            .await
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

    /// Handshake on the whole stream, then split it for the transmission phase: a plain
    /// stream with `split` (a TCP socket's own halves, no lock), a TLS session with
    /// `tokio::io::split`.
    async fn run<S, R, W>(
        &self,
        stream: S,
        reach: Reach,
        client: String,
        split: impl FnOnce(S) -> (R, W),
    ) -> Result<(), NbdError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let mut shutdown = self.shutdown_tx.subscribe();
        let grace = self.config.shutdown_grace;
        let limit = self.config.handshake_timeout;
        let mut stop = self.shutdown_tx.subscribe();
        // Negotiation is bounded in time, and by the grace period once shutdown starts, so a
        // client stalled mid-option (or mid-TLS-handshake) cannot pin a connection slot.
        let ready = tokio::select! {
            r = tokio::time::timeout(limit, self.handshake(stream, reach, &client, &mut shutdown)) => {
                r.map_err(|_| NbdError::HandshakeTimeout { limit })??
            }
            _ = async { wait_for_shutdown(&mut stop).await; tokio::time::sleep(grace).await } => Ready::Closed,
        };
        let recorder = |n: &mut crate::handshake::Negotiated| {
            n.recorder = self.config.stats.as_ref().map(|s| s.connection(&n.name));
        };
        match ready {
            Ready::Plain(stream, mut negotiated) => {
                recorder(&mut negotiated);
                tracing::debug!(export = %negotiated.name, "nbd transmission starts");
                let (reader, writer) = split(stream);
                transmission::serve(reader, writer, negotiated, shutdown, grace).await
            }
            Ready::Tls(stream, mut negotiated) => {
                recorder(&mut negotiated);
                tracing::debug!(export = %negotiated.name, "nbd transmission starts (TLS)");
                let (reader, writer) = tokio::io::split(stream);
                transmission::serve(reader, writer, negotiated, shutdown, grace).await
            }
            Ready::Closed => Ok(()),
        }
    }

    /// Greeting and option haggling, with the TLS upgrade when the client asks for it.
    async fn handshake<S>(
        &self,
        mut stream: S,
        reach: Reach,
        client: &str,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<Ready<S>, NbdError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static,
    {
        let exports = &*self.exports;
        let tls = self.config.tls.as_deref();
        let mode = match (tls.map_or(TlsMode::Off, TlsConfig::mode), reach) {
            (TlsMode::Required, Reach::Local) => TlsMode::Offered,
            (mode, _) => mode,
        };
        let Some(mut progress) = handshake::greet(&mut stream, shutdown).await? else {
            return Ok(Ready::Closed);
        };
        let outcome =
            handshake::haggle(&mut stream, exports, client, shutdown, mode, &mut progress);
        match (outcome.await?, tls) {
            (Outcome::Transmission(negotiated), _) => Ok(Ready::Plain(stream, negotiated)),
            (Outcome::Closed, _) => Ok(Ready::Closed),
            (Outcome::StartTls, Some(tls)) => {
                let mut secure = tls.accept(stream).await?;
                progress.tls_active = true;
                let outcome =
                    handshake::haggle(&mut secure, exports, client, shutdown, mode, &mut progress);
                match outcome.await? {
                    Outcome::Transmission(negotiated) => Ok(Ready::Tls(secure, negotiated)),
                    Outcome::Closed => {
                        // Close the TLS session properly (close_notify); best effort.
                        let bye = tokio::time::timeout(TLS_CLOSE_TIMEOUT, secure.shutdown());
                        let _ = bye.await;
                        Ok(Ready::Closed)
                    }
                    // tls_gate never allows a second upgrade.
                    Outcome::StartTls => Err(NbdError::TlsHandshake {
                        reason: "STARTTLS inside TLS".into(),
                    }),
                }
            }
            // tls_gate only upgrades when the server has credentials.
            (Outcome::StartTls, None) => Err(NbdError::TlsHandshake {
                reason: "STARTTLS acknowledged without credentials".into(),
            }),
        }
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
