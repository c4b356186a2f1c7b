//! One multiplexed connection to an OSD: many requests in flight, replies matched by id.

use crate::error::ClientError;
use crate::frame_io::{read_frame, write_frames, OutFrame};
use basalt_auth::{AuthError, Credentials, HANDSHAKE_TIMEOUT};
use basalt_proto::Header;
use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// A reply frame.
#[derive(Debug)]
pub struct Reply {
    pub header: Header,
    pub payload: Bytes,
}

/// The sending half of a request's reply channel.
pub type Waiter = oneshot::Sender<Result<Reply, ClientError>>;

/// Read buffer of a connection: many small replies are taken in one syscall.
pub const READ_BUFFER_BYTES: usize = 256 << 10;

/// How long to wait for a TCP connect.
const CONNECT_TIMEOUT_MS: u64 = 5_000;

struct Shared {
    addr: String,
    pending: Mutex<HashMap<u64, Waiter>>,
    dead: AtomicBool,
}

impl Shared {
    /// Fail every waiting request and refuse new ones.
    fn kill(&self, reason: &str) {
        self.dead.store(true, Ordering::SeqCst);
        let mut waiters: Vec<(u64, Waiter)> = {
            let mut p = self.pending.lock().expect("pending lock");
            p.drain().collect()
        };
        // Oldest request first, whatever the map's order: runs replay the same way.
        waiters.sort_unstable_by_key(|(id, _)| *id);
        let waiters = waiters.into_iter().map(|(_, w)| w);
        for w in waiters {
            let _ = w.send(Err(ClientError::Closed {
                addr: self.addr.clone(),
                reason: reason.to_string(),
            }));
        }
    }
}

/// Where a reply goes: back over a stream as a frame, or straight to an in-process caller.
pub enum ReplySink {
    /// Encode the reply as a frame on a connection's writer queue.
    Stream(mpsc::UnboundedSender<OutFrame>),
    /// Hand the reply to an in-process caller (see [`LocalHandler`]).
    Direct(Waiter),
}

impl ReplySink {
    /// Deliver the reply. A vanished receiver means the caller went away; nothing to do.
    pub fn send(self, header: Header, payload: Bytes) {
        match self {
            ReplySink::Stream(tx) => {
                let _ = tx.send(OutFrame::new(header, payload));
            }
            ReplySink::Direct(w) => {
                let _ = w.send(Ok(Reply { header, payload }));
            }
        }
    }
}

/// An OSD in the same process, called without a socket: the request runs through the OSD's
/// normal request handler, only the framing and the loopback TCP hop are skipped.
pub trait LocalHandler: Send + Sync + 'static {
    /// Handle one request and eventually call `reply.send` exactly once.
    fn handle(&self, header: Header, payload: Bytes, reply: ReplySink);
}

enum Transport {
    Tcp {
        shared: Arc<Shared>,
        tx: mpsc::UnboundedSender<OutFrame>,
    },
    /// Called synchronously by the requester (see [`Connection::local`]).
    Local {
        handler: Arc<dyn LocalHandler>,
        addr: String,
    },
    /// Handed in order to a task of its own (see [`Connection::queued`]).
    Queued {
        tx: mpsc::UnboundedSender<(Header, Bytes, Waiter)>,
        addr: String,
    },
}

/// How connections to OSDs are opened: TCP in production ([`TcpDialer`]), in-process links
/// with injected faults in the simulator.
pub trait Dialer: Send + Sync + 'static {
    /// Open a connection to the OSD listening at `addr`.
    fn dial<'a>(
        &'a self,
        addr: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Connection, ClientError>> + Send + 'a>>;
}

/// Run the authentication handshake on a fresh connection to `addr`.
async fn prove<R, W>(
    rd: &mut R,
    wr: &mut W,
    creds: &Credentials,
    addr: &str,
) -> Result<(), ClientError>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    basalt_auth::connect(rd, wr, creds, addr)
        .await
        .map(|_| ())
        .map_err(|e| {
            let (addr, reason) = (addr.to_string(), e.to_string());
            match e {
                AuthError::Denied { .. }
                | AuthError::ServerProof { .. }
                | AuthError::TlsRequired { .. } => ClientError::Auth { addr, reason },
                // The OSD's metadata may come back, the network may heal.
                _ => ClientError::Connect { addr, reason },
            }
        })
}

/// Dials OSDs over TCP (inside TLS when the credentials carry data-plane TLS), proving `credentials` in the handshake when there are some (an OSD
/// of a cluster with authentication refuses connections without).
#[derive(Default)]
pub struct TcpDialer {
    pub credentials: Option<Credentials>,
}

impl Dialer for TcpDialer {
    fn dial<'a>(
        &'a self,
        addr: &'a str,
    ) -> Pin<Box<dyn Future<Output = Result<Connection, ClientError>> + Send + 'a>> {
        Box::pin(Connection::connect_as(addr, self.credentials.as_ref()))
    }
}

/// A connection to one OSD. Cheap to share (`Arc`); safe to use from many tasks.
pub struct Connection {
    transport: Transport,
    next_id: AtomicU64,
}

impl Connection {
    /// Connect to `addr` over TCP (no handshake) and start the reader and writer tasks.
    pub async fn connect(addr: &str) -> Result<Connection, ClientError> {
        Connection::connect_as(addr, None).await
    }

    /// Connect to `addr` over TCP, prove `credentials` (when given) in the handshake, then
    /// start the reader and writer tasks.
    pub async fn connect_as(
        addr: &str,
        credentials: Option<&Credentials>,
    ) -> Result<Connection, ClientError> {
        let connect = TcpStream::connect(addr);
        let stream = tokio::time::timeout(Duration::from_millis(CONNECT_TIMEOUT_MS), connect)
            .await
            .map_err(|_| ClientError::Connect {
                addr: addr.to_string(),
                reason: format!("timed out after {CONNECT_TIMEOUT_MS} ms"),
            })?
            .map_err(|e| ClientError::Connect {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        stream.set_nodelay(true).ok();
        let Some(creds) = credentials else {
            let (rd, wr) = stream.into_split();
            return Ok(Connection::over(rd, wr, addr));
        };
        match &creds.tls {
            None => {
                let (mut rd, mut wr) = stream.into_split();
                prove(&mut rd, &mut wr, creds, addr).await?;
                Ok(Connection::over(rd, wr, addr))
            }
            Some(tls) => {
                // A failed TLS session is a configuration error (another CA, a plaintext
                // OSD): reported at once, not retried until the request deadline.
                let failed = |reason: String| ClientError::Auth {
                    addr: addr.to_string(),
                    reason: basalt_auth::AuthError::TlsHandshake {
                        addr: addr.to_string(),
                        reason,
                    }
                    .to_string(),
                };
                let session = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.connect(stream))
                    .await
                    .map_err(|_| failed(format!("no answer within {HANDSHAKE_TIMEOUT:?}")))?
                    .map_err(|e| {
                        failed(format!(
                            "{e} (does the OSD run with data-plane TLS of the same CA?)"
                        ))
                    })?;
                let (mut rd, mut wr) = tokio::io::split(session);
                prove(&mut rd, &mut wr, creds, addr).await?;
                Ok(Connection::over(rd, wr, addr))
            }
        }
    }

    /// A connection over an already open byte stream to the OSD at `addr` (the simulator's
    /// in-process links; TCP goes through [`Connection::connect`]).
    pub fn over_stream<S>(stream: S, addr: &str) -> Connection
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (rd, wr) = tokio::io::split(stream);
        Connection::over(rd, wr, addr)
    }

    /// Start the reader and writer tasks of a connection on its two halves.
    fn over<R, W>(rd: R, wr: W, addr: &str) -> Connection
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let mut rd = tokio::io::BufReader::with_capacity(READ_BUFFER_BYTES, rd);
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            addr: addr.to_string(),
            pending: Mutex::new(HashMap::new()),
            dead: AtomicBool::new(false),
        });
        let writer_shared = shared.clone();
        tokio::spawn(async move {
            if let Err(e) = write_frames(wr, rx).await {
                writer_shared.kill(&format!("write failed: {e}"));
            }
        });
        let reader_shared = shared.clone();
        tokio::spawn(async move {
            let reason = loop {
                match read_frame(&mut rd).await {
                    Ok(Some((header, payload))) => {
                        let waiter = reader_shared
                            .pending
                            .lock()
                            .expect("pending lock")
                            .remove(&header.request_id);
                        if let Some(w) = waiter {
                            let _ = w.send(Ok(Reply { header, payload }));
                        }
                    }
                    Ok(None) => break "closed by peer".to_string(),
                    Err(e) => break format!("read failed: {e}"),
                }
            };
            reader_shared.kill(&reason);
        });
        Connection {
            transport: Transport::Tcp { shared, tx },
            next_id: AtomicU64::new(1),
        }
    }

    /// A connection to an OSD in this process; `addr` is its data-plane address (for
    /// matching against the map and for messages).
    pub fn local(handler: Arc<dyn LocalHandler>, addr: &str) -> Connection {
        Connection {
            transport: Transport::Local {
                handler,
                addr: addr.to_string(),
            },
            next_id: AtomicU64::new(1),
        }
    }

    /// A connection to an OSD in this process that behaves like a stream without one: each
    /// request is handed, in the order started, to one task that runs the OSD's request
    /// handler. Unlike [`Connection::local`], the requester never runs the handler itself,
    /// so it may start requests while holding its own locks (an OSD replicating to a peer
    /// OSD under its PG lock), and requests arrive in the order they were started, as on a
    /// socket. No framing, no checksum, no copy: nothing crosses a disk or a network.
    pub fn queued(handler: Arc<dyn LocalHandler>, addr: &str) -> Connection {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Header, Bytes, Waiter)>();
        tokio::spawn(async move {
            while let Some((header, payload, waiter)) = rx.recv().await {
                handler.handle(header, payload, ReplySink::Direct(waiter));
            }
        });
        Connection {
            transport: Transport::Queued {
                tx,
                addr: addr.to_string(),
            },
            next_id: AtomicU64::new(1),
        }
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        match &self.transport {
            Transport::Tcp { shared, .. } => &shared.addr,
            Transport::Local { addr, .. } | Transport::Queued { addr, .. } => addr,
        }
    }

    /// Do requests cross a byte stream as checksummed frames (not an in-process call)?
    pub fn is_framed(&self) -> bool {
        matches!(self.transport, Transport::Tcp { .. })
    }

    /// Is the connection unusable (closed or failed)?
    pub fn is_dead(&self) -> bool {
        match &self.transport {
            Transport::Tcp { shared, .. } => shared.dead.load(Ordering::SeqCst),
            Transport::Local { .. } => false,
            Transport::Queued { tx, .. } => tx.is_closed(),
        }
    }

    /// Queue a request now and return a future for its reply. Queueing is synchronous, so a
    /// caller can start many requests (or keep an order between them) before awaiting any.
    pub fn start(&self, header: Header, payload: Bytes) -> Pending {
        self.start_inner(header, payload, None)
    }

    /// [`Connection::start`] with the payload's crc32c already computed (`payload_crc`), for
    /// a payload sent to several OSDs.
    pub fn start_with_crc(&self, header: Header, payload: Bytes, payload_crc: u32) -> Pending {
        self.start_inner(header, payload, Some(payload_crc))
    }

    fn start_inner(&self, mut header: Header, payload: Bytes, crc: Option<u32>) -> Pending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        header.request_id = id;
        let (wtx, wrx) = oneshot::channel();
        let (shared, tx) = match &self.transport {
            Transport::Local { handler, .. } => {
                handler.handle(header, payload, ReplySink::Direct(wtx));
                return Pending { rx: wrx };
            }
            Transport::Queued { tx, addr } => {
                if let Err(mpsc::error::SendError((_, _, wtx))) = tx.send((header, payload, wtx)) {
                    let _ = wtx.send(Err(ClientError::Closed {
                        addr: addr.clone(),
                        reason: "in-process OSD stopped".into(),
                    }));
                }
                return Pending { rx: wrx };
            }
            Transport::Tcp { shared, tx } => (shared, tx),
        };
        let closed = |reason: &str| ClientError::Closed {
            addr: shared.addr.clone(),
            reason: reason.to_string(),
        };
        if self.is_dead() {
            let _ = wtx.send(Err(closed("connection is down")));
            return Pending { rx: wrx };
        }
        shared.pending.lock().expect("pending lock").insert(id, wtx);
        let frame = match crc {
            Some(crc) => OutFrame::with_crc(header, payload, crc),
            None => OutFrame::new(header, payload),
        };
        let sent = tx.send(frame).is_ok();
        // The reader may have failed between our check and insert: make sure we are not left
        // waiting for a reply that will never come.
        if !sent || self.is_dead() {
            if let Some(w) = shared.pending.lock().expect("pending lock").remove(&id) {
                let _ = w.send(Err(closed("connection is down")));
            }
        }
        Pending { rx: wrx }
    }

    /// Send a request and wait for its reply.
    pub async fn call(&self, header: Header, payload: Bytes) -> Result<Reply, ClientError> {
        self.start(header, payload).await
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Transport::Tcp { shared, .. } = &self.transport {
            shared.kill("connection dropped");
        }
    }
}

/// A request in flight.
pub struct Pending {
    rx: oneshot::Receiver<Result<Reply, ClientError>>,
}

impl Future for Pending {
    type Output = Result<Reply, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| {
            r.unwrap_or_else(|_| {
                Err(ClientError::Closed {
                    addr: String::new(),
                    reason: "reply channel dropped".into(),
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_proto::{ObjectId, Opcode, Status};

    /// Records the request ids it sees and answers each with its payload.
    struct Recorder {
        seen: Mutex<Vec<u64>>,
        /// The thread that ran each request must not be the requester's stack frame: the
        /// handler checks that the requester's lock is free.
        requester_lock: Arc<Mutex<()>>,
    }

    impl LocalHandler for Recorder {
        fn handle(&self, header: Header, payload: Bytes, reply: ReplySink) {
            assert!(
                self.requester_lock.try_lock().is_ok(),
                "a queued request ran inside the requester's critical section"
            );
            self.seen.lock().expect("seen").push(header.request_id);
            reply.send(header.reply(Status::Ok), payload);
        }
    }

    #[tokio::test]
    async fn queued_requests_run_in_order_outside_the_requester() {
        // Goal: an in-process queued connection delivers requests in the order they were
        // started, runs them on its own task (so a requester may start them under a lock the
        // handler's side also takes), and answers each with its own reply.
        let requester_lock = Arc::new(Mutex::new(()));
        let handler = Arc::new(Recorder {
            seen: Mutex::new(Vec::new()),
            requester_lock: requester_lock.clone(),
        });
        let conn = Connection::queued(handler.clone(), "127.0.0.1:1");
        let pending: Vec<Pending> = {
            let _held = requester_lock.lock().expect("lock");
            (0..100u8)
                .map(|i| {
                    let h = Header::request(Opcode::Write, 0, ObjectId::new(1, i as u64));
                    conn.start(h, Bytes::from(vec![i; 3]))
                })
                .collect()
        };
        for (i, p) in pending.into_iter().enumerate() {
            let reply = p.await.expect("reply");
            assert_eq!(reply.payload, Bytes::from(vec![i as u8; 3]));
            assert_eq!(reply.header.object.index, i as u64);
        }
        let seen = handler.seen.lock().expect("seen").clone();
        assert_eq!(seen, (1..=100).collect::<Vec<u64>>());
        assert!(!conn.is_dead());
    }
}
