//! The transmission phase: one reader loop, a task per request that has to wait, one writer.
//!
//! The reader decodes a header, reads a write's payload, validates, and polls the request
//! once; a request that cannot finish at once (the usual case for networked storage) becomes
//! a task of its own, so requests run concurrently and finish in any order. Every reply frame goes through a
//! bounded channel to the single writer task, so frames never interleave and no lock is held
//! across an `.await`. Two semaphores bound what one connection can hold: request slots
//! ([`MAX_IN_FLIGHT_REQUESTS`]) and payload bytes ([`MAX_IN_FLIGHT_BYTES`]); a request keeps
//! its permits until its reply has been handed to the socket, so a client that stops reading
//! replies stops having its requests read (TCP backpressure) instead of growing memory.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::error::NbdError;
use crate::export::{BlockDevice, DeviceError};
use crate::handshake::Negotiated;
use crate::reply::{encode_extents, Frame};
use crate::request::{Command, Rejection, Request, RequestError, Session, REQUEST_HEADER_LEN};
use crate::server::wait_for_shutdown;
use crate::wire::{self, MAX_BLOCK_BYTES};
use basalt_metrics::frontend::{Op, Recorder};

/// Requests of one connection being served at once (queued replies included).
pub const MAX_IN_FLIGHT_REQUESTS: usize = 128;
/// Read and write payload bytes one connection may hold at once.
pub const MAX_IN_FLIGHT_BYTES: usize = 64 << 20;
/// Granularity of the byte budget.
const BYTE_PERMIT_BYTES: usize = 4096;
/// Socket read buffer: several pipelined small requests arrive in one read.
const READ_BUFFER_BYTES: usize = 128 << 10;
/// Socket write buffer: queued replies leave in one write.
const WRITE_BUFFER_BYTES: usize = 128 << 10;
/// Replies gathered before one flush, so a flood of replies cannot starve the flush.
const MAX_FRAMES_PER_FLUSH: usize = 64;
/// Largest read polled on the reader's own task before it becomes a task of its own. A
/// device may serve a read synchronously inside that first poll (an in-process store), and
/// the reader reads no further request meanwhile: right for a 4 KiB read (no spawn, no
/// wake-up), wrong for 1 MiB (reads of one connection would run one at a time, on one core).
const INLINE_POLL_MAX_BYTES: u32 = 64 << 10;

/// A reply on its way to the socket, with the permits it releases once written.
struct Outgoing {
    frame: Frame,
    _slot: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
}

/// What every request task of a connection shares.
struct Conn {
    device: Arc<dyn BlockDevice>,
    structured: bool,
    /// Counts the connection's requests (None: the server keeps no metrics).
    recorder: Option<Recorder>,
}

/// A request read off the socket, with its payload and permits.
struct Incoming {
    req: Request,
    payload: Bytes,
    slot: OwnedSemaphorePermit,
    bytes: Option<OwnedSemaphorePermit>,
}

enum Next {
    Request(Incoming),
    /// A write whose payload is too large to read: answer, then stop reading.
    TooLarge(Request, OwnedSemaphorePermit),
    Eof,
}

enum End {
    Disconnect,
    Eof,
    WriterGone,
    Shutdown,
    Fatal(NbdError),
}

/// Serve requests until the client disconnects, the socket fails or the server shuts down.
/// On shutdown the reader stops at once and in-flight requests get `grace` to finish.
pub(crate) async fn serve<R, W>(
    reader: R,
    writer: W,
    neg: Negotiated,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) -> Result<(), NbdError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Outgoing>(MAX_IN_FLIGHT_REQUESTS);
    let mut writer_task = tokio::spawn(write_loop(writer, rx));
    let session = neg.session;
    let conn = Arc::new(Conn {
        device: neg.device,
        structured: session.structured,
        recorder: neg.recorder,
    });
    let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);

    // One select for the whole session: the reader loop is simply dropped when the server
    // shuts down or the writer dies, so the per-request path creates no extra futures.
    let end = {
        let stop = async {
            tokio::select! {
                _ = wait_for_shutdown(&mut shutdown) => End::Shutdown,
                _ = tx.closed() => End::WriterGone,
            }
        };
        tokio::select! {
            biased;
            end = stop => end,
            end = read_loop(&mut reader, &tx, &conn, &session) => end,
        }
    };
    drop(reader);
    drop(tx);

    // Let in-flight requests finish and their replies leave: without a bound on a client's
    // disconnect (the protocol requires serving outstanding requests), within `grace` once
    // the server is shutting down.
    let drained = match end {
        End::Shutdown => tokio::time::timeout(grace, &mut writer_task).await.ok(),
        _ => tokio::select! {
            r = &mut writer_task => Some(r),
            _ = async { wait_for_shutdown(&mut shutdown).await; tokio::time::sleep(grace).await } => None,
        },
    };
    match drained {
        Some(Ok(Err(e))) => tracing::debug!(export = %neg.name, "reply writer: {e}"),
        Some(_) => {}
        None => {
            tracing::info!(export = %neg.name, "in-flight requests did not finish in time");
            writer_task.abort();
        }
    }
    match end {
        End::Fatal(e) => Err(e),
        End::Disconnect | End::Eof | End::WriterGone | End::Shutdown => Ok(()),
    }
}

/// Read, validate and dispatch requests until the client leaves or breaks the protocol.
async fn read_loop<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    tx: &mpsc::Sender<Outgoing>,
    conn: &Arc<Conn>,
    session: &Session,
) -> End {
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT_REQUESTS));
    let budget = Arc::new(Semaphore::new(MAX_IN_FLIGHT_BYTES / BYTE_PERMIT_BYTES));
    loop {
        let next = read_request(reader, &slots, &budget).await;
        let incoming = match next {
            Ok(Next::Request(i)) => i,
            Ok(Next::TooLarge(req, slot)) => {
                let rej = Rejection {
                    errno: wire::EINVAL,
                    reason: "write larger than the maximum block size",
                };
                let frame = conn.rejection(req.handle, rej);
                let _ = tx
                    .send(Outgoing {
                        frame,
                        _slot: slot,
                        _bytes: None,
                    })
                    .await;
                break End::Fatal(NbdError::WriteTooLarge {
                    length: req.length,
                    limit: MAX_BLOCK_BYTES,
                });
            }
            Ok(Next::Eof) => break End::Eof,
            Err(e) => break End::Fatal(e),
        };
        let Incoming {
            req,
            payload,
            slot,
            bytes,
        } = incoming;
        match req.check(session) {
            Ok(Command::Disconnect) => break End::Disconnect,
            Ok(cmd) => {
                // Poll the request once right here: a device that answers without waiting
                // (a cache hit, memory) costs no task spawn and no cross-thread wakeup. Only
                // a request that has to wait becomes a task of its own.
                let c = conn.clone();
                let mut work = Box::pin(async move { c.execute(req.handle, cmd, payload).await });
                let inline =
                    !matches!(cmd, Command::Read { len, .. } if len > INLINE_POLL_MAX_BYTES);
                let polled = if inline {
                    std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
                } else {
                    Poll::Pending
                };
                match polled {
                    Poll::Ready(frame) => {
                        let out = Outgoing {
                            frame,
                            _slot: slot,
                            _bytes: bytes,
                        };
                        if tx.send(out).await.is_err() {
                            break End::WriterGone;
                        }
                    }
                    Poll::Pending => {
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            let frame = work.await;
                            // Fails only when the writer is gone: the connection is closing.
                            let _ = tx
                                .send(Outgoing {
                                    frame,
                                    _slot: slot,
                                    _bytes: bytes,
                                })
                                .await;
                        });
                    }
                }
            }
            Err(rej) => {
                let frame = conn.rejection(req.handle, rej);
                let out = Outgoing {
                    frame,
                    _slot: slot,
                    _bytes: bytes,
                };
                if tx.send(out).await.is_err() {
                    break End::WriterGone;
                }
            }
        }
    }
}

/// Read one request: header, permits, then a write's payload.
async fn read_request<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    slots: &Arc<Semaphore>,
    budget: &Arc<Semaphore>,
) -> Result<Next, NbdError> {
    let mut hdr = [0u8; REQUEST_HEADER_LEN];
    match reader.read_exact(&mut hdr).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(Next::Eof),
        Err(e) => return Err(e.into()),
    }
    let req = Request::decode(&hdr).map_err(|e| match e {
        RequestError::BadMagic(magic) => NbdError::RequestMagic { magic },
    })?;
    let slot = acquire(slots.clone(), 1).await?;
    let payload_len = req.payload_len();
    if payload_len > MAX_BLOCK_BYTES {
        return Ok(Next::TooLarge(req, slot));
    }
    // Reads hold budget for the data they will send back, writes for what they carry.
    let cost = match req.kind {
        wire::CMD_READ | wire::CMD_WRITE if req.length <= MAX_BLOCK_BYTES => req.length as usize,
        _ => 0,
    };
    let bytes = if cost > 0 {
        let permits = cost.div_ceil(BYTE_PERMIT_BYTES) as u32;
        Some(acquire(budget.clone(), permits).await?)
    } else {
        None
    };
    let payload = if payload_len > 0 {
        let mut buf = BytesMut::with_capacity(payload_len as usize);
        let mut rest = (&mut *reader).take(payload_len as u64);
        while buf.len() < payload_len as usize {
            if rest.read_buf(&mut buf).await? == 0 {
                return Ok(Next::Eof); // client went away mid-payload
            }
        }
        buf.freeze()
    } else {
        Bytes::new()
    };
    Ok(Next::Request(Incoming {
        req,
        payload,
        slot,
        bytes,
    }))
}

async fn acquire(sem: Arc<Semaphore>, n: u32) -> Result<OwnedSemaphorePermit, NbdError> {
    // The semaphores are never closed; the error arm only keeps this free of panics.
    sem.acquire_many_owned(n)
        .await
        .map_err(|_| NbdError::Io(std::io::Error::other("request budget closed")))
}

/// Write replies in arrival order, batching whatever is queued into one flush.
async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::Receiver<Outgoing>,
) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    while let Some(first) = rx.recv().await {
        put(&mut w, first).await?;
        for _ in 1..MAX_FRAMES_PER_FLUSH {
            match rx.try_recv() {
                Ok(next) => put(&mut w, next).await?,
                Err(_) => break,
            }
        }
        w.flush().await?;
    }
    w.shutdown().await
}

async fn put<W: AsyncWrite + Unpin>(w: &mut BufWriter<W>, out: Outgoing) -> std::io::Result<()> {
    let frame = &out.frame;
    if frame.payload_len() < WRITE_BUFFER_BYTES {
        w.write_all(frame.head()).await?;
        for piece in std::iter::once(frame.payload()).chain(frame.more()) {
            w.write_all(piece).await?;
        }
        return Ok(());
    }
    // A large reply (a big read): out of the buffer in vectored writes, no copy into it.
    w.flush().await?;
    let mut parts: Vec<&[u8]> = Vec::with_capacity(2 + frame.more().len());
    parts.push(frame.head());
    parts.push(frame.payload());
    parts.extend(frame.more().iter().map(|b| &b[..]));
    write_all_vectored(w.get_mut(), &mut parts).await
}

/// Write every byte of `parts`, in order, with as few (vectored) writes as the socket takes.
async fn write_all_vectored<W: AsyncWrite + Unpin>(
    w: &mut W,
    parts: &mut [&[u8]],
) -> std::io::Result<()> {
    /// Slices per write (below every platform's IOV_MAX).
    const MAX_SLICES: usize = 64;
    let mut first = 0;
    while first < parts.len() {
        if parts[first].is_empty() {
            first += 1;
            continue;
        }
        let end = (first + MAX_SLICES).min(parts.len());
        let slices: Vec<std::io::IoSlice<'_>> = parts[first..end]
            .iter()
            .map(|p| std::io::IoSlice::new(p))
            .collect();
        let mut n = w.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 {
            let take = n.min(parts[first].len());
            parts[first] = &parts[first][take..];
            n -= take;
            if parts[first].is_empty() {
                first += 1;
            }
        }
    }
    Ok(())
}

/// The metrics class of a command and the bytes it moves.
fn op_class(cmd: &Command) -> (Op, u64) {
    match *cmd {
        Command::Read { len, .. } => (Op::Read, len.into()),
        Command::Write { len, .. } => (Op::Write, len.into()),
        Command::Flush => (Op::Flush, 0),
        // Trims move no data: their bytes are not counted.
        Command::Trim { .. } | Command::WriteZeroes { .. } => (Op::Trim, 0),
        Command::Cache { .. } | Command::BlockStatus { .. } | Command::Disconnect => (Op::Other, 0),
    }
}

impl Conn {
    /// Run a validated command on the device and build its reply, counting it.
    async fn execute(&self, handle: u64, cmd: Command, payload: Bytes) -> Frame {
        let Some(recorder) = &self.recorder else {
            return self.run(handle, cmd, payload).await;
        };
        let start = basalt_metrics::now();
        let frame = self.run(handle, cmd, payload).await;
        let (op, bytes) = op_class(&cmd);
        recorder.record(op, bytes, start, !frame.is_error());
        frame
    }

    /// Run a validated command on the device and build its reply.
    async fn run(&self, handle: u64, cmd: Command, payload: Bytes) -> Frame {
        let dev = &*self.device;
        let result = match cmd {
            Command::Read { offset, len } => return self.read(handle, offset, len).await,
            Command::BlockStatus {
                offset,
                len,
                req_one,
            } => match dev.block_status(offset, len).await {
                Ok(extents) => {
                    let descriptors = encode_extents(&extents, len, req_one);
                    return Frame::block_status(handle, wire::BASE_ALLOCATION_ID, descriptors);
                }
                Err(e) => Err(e),
            },
            Command::Write { offset, len, fua } => {
                debug_assert_eq!(payload.len(), len as usize);
                if len == 0 {
                    Ok(())
                } else {
                    dev.write(offset, payload, fua).await
                }
            }
            Command::Flush => dev.flush().await,
            Command::Trim { len: 0, .. } | Command::Cache { len: 0, .. } => Ok(()),
            Command::WriteZeroes { len: 0, .. } => Ok(()),
            Command::Trim { offset, len, fua } => dev.trim(offset, len, fua).await,
            Command::Cache { offset, len } => dev.cache(offset, len).await,
            Command::WriteZeroes {
                offset,
                len,
                may_trim,
                fua,
            } => dev.write_zeroes(offset, len, may_trim, fua).await,
            Command::Disconnect => Ok(()), // handled by the reader; never spawned
        };
        match result {
            Ok(()) => Frame::simple(handle, 0, Bytes::new()),
            Err(e) => self.device_error(handle, &e),
        }
    }

    async fn read(&self, handle: u64, offset: u64, len: u32) -> Frame {
        if len == 0 {
            return if self.structured {
                Frame::none(handle)
            } else {
                Frame::simple(handle, 0, Bytes::new())
            };
        }
        match self.device.read_pieces(offset, len).await {
            Ok(pieces) if pieces.iter().map(Bytes::len).sum::<usize>() == len as usize => {
                Frame::read_data(handle, self.structured, offset, pieces)
            }
            Ok(pieces) => {
                let got: usize = pieces.iter().map(Bytes::len).sum();
                let msg = format!("device returned {got} bytes for a {len}-byte read");
                tracing::warn!("{msg}");
                self.error(handle, wire::EIO, Bytes::from(msg))
            }
            Err(e) => self.device_error(handle, &e),
        }
    }

    fn device_error(&self, handle: u64, e: &DeviceError) -> Frame {
        tracing::debug!("request failed: {e}");
        let msg = if self.structured {
            Bytes::from(e.to_string())
        } else {
            Bytes::new()
        };
        self.error(handle, e.errno(), msg)
    }

    fn rejection(&self, handle: u64, rej: Rejection) -> Frame {
        self.error(handle, rej.errno, Bytes::from_static(rej.reason.as_bytes()))
    }

    /// An error reply: a structured `ERROR` chunk when negotiated (it carries a message and is
    /// mandatory for reads), a simple reply otherwise.
    fn error(&self, handle: u64, errno: u32, message: Bytes) -> Frame {
        if self.structured {
            Frame::error(handle, errno, message)
        } else {
            Frame::simple(handle, errno, Bytes::new())
        }
    }
}
