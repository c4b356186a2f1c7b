//! One multiplexed connection to an OSD: many requests in flight, replies matched by id.

use crate::error::ClientError;
use crate::frame_io::{read_frame, write_frames, OutFrame};
use basalt_proto::Header;
use bytes::Bytes;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// A reply frame.
#[derive(Debug)]
pub struct Reply {
    pub header: Header,
    pub payload: Bytes,
}

type Waiter = oneshot::Sender<Result<Reply, ClientError>>;

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
        let waiters: Vec<Waiter> = {
            let mut p = self.pending.lock().expect("pending lock");
            p.drain().map(|(_, w)| w).collect()
        };
        for w in waiters {
            let _ = w.send(Err(ClientError::Closed {
                addr: self.addr.clone(),
                reason: reason.to_string(),
            }));
        }
    }
}

/// A connection to one OSD. Cheap to share (`Arc`); safe to use from many tasks.
pub struct Connection {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<OutFrame>,
    next_id: AtomicU64,
}

impl Connection {
    /// Connect to `addr` and start the reader and writer tasks.
    pub async fn connect(addr: &str) -> Result<Connection, ClientError> {
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
        let (mut rd, wr) = stream.into_split();
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
        Ok(Connection {
            shared,
            tx,
            next_id: AtomicU64::new(1),
        })
    }

    /// The peer's address.
    pub fn addr(&self) -> &str {
        &self.shared.addr
    }

    /// Is the connection unusable (closed or failed)?
    pub fn is_dead(&self) -> bool {
        self.shared.dead.load(Ordering::SeqCst)
    }

    /// Queue a request now and return a future for its reply. Queueing is synchronous, so a
    /// caller can start many requests (or keep an order between them) before awaiting any.
    pub fn start(&self, mut header: Header, payload: Bytes) -> Pending {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        header.request_id = id;
        let (wtx, wrx) = oneshot::channel();
        let closed = |reason: &str| ClientError::Closed {
            addr: self.shared.addr.clone(),
            reason: reason.to_string(),
        };
        if self.is_dead() {
            let _ = wtx.send(Err(closed("connection is down")));
            return Pending { rx: wrx };
        }
        self.shared
            .pending
            .lock()
            .expect("pending lock")
            .insert(id, wtx);
        let sent = self.tx.send(OutFrame::new(header, payload)).is_ok();
        // The reader may have failed between our check and insert: make sure we are not left
        // waiting for a reply that will never come.
        if !sent || self.is_dead() {
            if let Some(w) = self
                .shared
                .pending
                .lock()
                .expect("pending lock")
                .remove(&id)
            {
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
        self.shared.kill("connection dropped");
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
