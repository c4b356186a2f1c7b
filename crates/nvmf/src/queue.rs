//! One connection = one queue (admin or I/O). A reader task decodes PDUs, gathers each
//! command's host data (in-capsule, or asked for with R2T and received as H2CData) and
//! spawns the command as its own task; commands complete in any order. One writer task
//! owns the socket's write half and sends responses, C2HData and R2Ts, batching what is
//! ready into one flush.
//!
//! Bounds: commands in flight per queue ≤ the queue size the host connected with (at most
//! [`identify::MAX_QUEUE_ENTRIES`]; a host that sends more gets a TermReq); one PDU ≤
//! [`pdu::MAX_PDU_LEN`]; one command's data ≤ [`identify::MAX_TRANSFER_BYTES`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};

use crate::command::*;
use crate::controller::Controller;
use crate::error::NvmfError;
use crate::identify::{self, MAX_TRANSFER_BYTES};
use crate::pdu::{self, CommonHeader, Digests, Pdu, PduError, TermReq};
use crate::target::Target;

/// Most data bytes the host may put in one H2CData PDU (ICResp MAXH2CDATA).
pub const MAX_H2C_DATA_BYTES: u32 = 128 << 10;
/// Most in-capsule data on the admin queue (the Linux host sends up to 8 KiB there).
pub const IN_CAPSULE_ADMIN_BYTES: u32 = 8192;
/// Outgoing messages queued for the writer; senders wait when it is full.
const WRITER_QUEUE: usize = 2 * identify::MAX_QUEUE_ENTRIES as usize;
/// Bytes the writer buffers before it writes to the socket.
const WRITE_BUFFER_BYTES: usize = 256 << 10;
/// Smallest keep-alive allowance: an admin queue silent for twice its KATO, and at least
/// this, is torn down.
const MIN_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(2);

/// What a command produced.
pub(crate) enum Reply {
    /// A completion with this status and result.
    Done {
        /// Status.
        status: Status,
        /// CQE dwords 0-1.
        result: u64,
    },
    /// Data for the host, then a successful completion.
    Data(Vec<Bytes>),
    /// No completion now (a held Asynchronous Event Request).
    Held,
}

impl Reply {
    /// Did the command succeed (for the metrics)?
    pub(crate) fn is_success(&self) -> bool {
        match self {
            Reply::Done { status, .. } => *status == Status::SUCCESS,
            Reply::Data(_) | Reply::Held => true,
        }
    }

    /// A completion with `status` and no result.
    pub(crate) fn status(status: Status) -> Self {
        Reply::Done { status, result: 0 }
    }

    /// A successful completion with `result`.
    pub(crate) fn result(result: u64) -> Self {
        Reply::Done {
            status: Status::SUCCESS,
            result,
        }
    }

    /// Data then success.
    pub(crate) fn data(data: Vec<u8>) -> Self {
        Reply::Data(vec![Bytes::from(data)])
    }
}

/// What the writer sends.
pub(crate) enum Outgoing {
    /// A response capsule.
    Response(Cqe),
    /// C2HData for command `cqe.cid`, then its response (or the SUCCESS flag instead).
    Data {
        /// Data, sent in order without joining.
        pieces: Vec<Bytes>,
        /// The completion.
        cqe: Cqe,
    },
    /// Ask the host for a command's data.
    R2t(pdu::R2t),
    /// Tell the host why the connection closes, then close.
    Term(TermReq),
    /// Close the connection once everything before this is sent.
    Close,
}

/// A write (or other host-data command) waiting for its H2CData.
struct Pending {
    sqe: Sqe,
    buf: BytesMut,
    len: usize,
    /// The command's slot in the queue (none for a Connect, which precedes the queue).
    permit: Option<OwnedSemaphorePermit>,
}

/// What a queue is bound to once Connect succeeded.
struct Bound {
    ctrl: Arc<Controller>,
    qid: u16,
    /// Commands in flight (queue size permits).
    slots: Arc<Semaphore>,
    depth: u32,
}

/// Per-connection state of the reader.
struct Queue<'t> {
    target: &'t Arc<Target>,
    tx: mpsc::Sender<Outgoing>,
    bound: Option<Bound>,
    pending: HashMap<u16, Pending>,
    next_ttag: u16,
    /// Commands received (SQ head pointer = this modulo the queue size).
    received: Arc<AtomicU32>,
    /// Set by an I/O queue's Disconnect: stop reading once it is answered.
    disconnecting: bool,
    local_addr: Option<std::net::SocketAddr>,
}

/// Longest the rest of a PDU may take to arrive once its header did.
const PDU_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve one connection to its end: ICReq/ICResp, then PDUs until the host closes, a fatal
/// protocol error (answered with a C2HTermReq), keep-alive expiry or shutdown. Commands in
/// flight finish (bounded by the shutdown grace) before the socket closes.
pub(crate) async fn serve<R, W>(
    target: &Arc<Target>,
    mut reader: R,
    mut writer: W,
    local_addr: Option<std::net::SocketAddr>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), NvmfError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let limit = target.config().handshake_timeout;
    let (digests, hpda) =
        match tokio::time::timeout(limit, initialize(&mut reader, &mut writer)).await {
            Ok(r) => r?,
            Err(_) => return Err(NvmfError::HandshakeTimeout { limit }),
        };
    let (tx, rx) = mpsc::channel(WRITER_QUEUE);
    let writer_task = tokio::spawn(write_loop(writer, rx, digests, hpda));
    let mut queue = Queue {
        target,
        tx,
        bound: None,
        pending: HashMap::new(),
        next_ttag: 0,
        received: Arc::new(AtomicU32::new(0)),
        disconnecting: false,
        local_addr,
    };
    let result = queue.read_loop(&mut reader, digests, &mut shutdown).await;
    // Data of writes never completed by the host is dropped with their commands.
    queue.pending.clear();
    let grace = target.config().shutdown_grace;
    if let Some(b) = &queue.bound {
        let all = b.depth;
        if tokio::time::timeout(grace, b.slots.acquire_many(all))
            .await
            .is_err()
        {
            tracing::warn!(qid = b.qid, "nvmf queue closes with commands still running");
        }
        if b.qid == 0 {
            target.remove_controller(&b.ctrl);
        } else {
            b.ctrl.detach_io_queue(b.qid);
        }
    }
    // Everything queued so far is sent before the socket closes.
    let _ = queue.tx.send(Outgoing::Close).await;
    drop(queue);
    match tokio::time::timeout(grace, writer_task).await {
        Ok(Ok(Err(e))) if result.is_ok() => return Err(NvmfError::Io(e)),
        Ok(_) => {}
        Err(_) => tracing::warn!("nvmf writer did not finish within the grace period"),
    }
    result
}

/// ICReq → ICResp: the digests and the host's data alignment.
async fn initialize<R, W>(reader: &mut R, writer: &mut W) -> Result<(Digests, u8), NvmfError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut chb = [0u8; pdu::COMMON_LEN];
    reader.read_exact(&mut chb).await?;
    let ch = CommonHeader::parse(&chb);
    if ch.pdu_type != pdu::TYPE_IC_REQ {
        let e = PduError::InvalidField {
            offset: 0,
            what: "the first PDU must be an ICReq",
        };
        return Err(terminate_now(writer, &e, &chb).await);
    }
    if let Err(e) = pdu::check_header(&ch, Digests::default()) {
        return Err(terminate_now(writer, &e, &chb).await);
    }
    let mut buf = vec![0u8; ch.plen as usize];
    buf[..pdu::COMMON_LEN].copy_from_slice(&chb);
    reader.read_exact(&mut buf[pdu::COMMON_LEN..]).await?;
    let req = match pdu::decode(Bytes::from(buf), Digests::default()) {
        Ok(Pdu::IcReq(r)) => r,
        Ok(_) => {
            let e = PduError::InvalidField {
                offset: 0,
                what: "the first PDU must be an ICReq",
            };
            return Err(terminate_now(writer, &e, &chb).await);
        }
        Err(e) => return Err(terminate_now(writer, &e, &chb).await),
    };
    if req.pfv != 0 {
        let e = PduError::InvalidField {
            offset: 8,
            what: "unsupported PDU format version",
        };
        return Err(terminate_with(writer, pdu::FES_UNSUPPORTED_PARAMETER, &e, &chb).await);
    }
    if req.hpda > 31 {
        let e = PduError::InvalidField {
            offset: 10,
            what: "host PDU data alignment over 31",
        };
        return Err(terminate_now(writer, &e, &chb).await);
    }
    let resp = Pdu::IcResp(pdu::IcResp {
        pfv: 0,
        cpda: 0,
        digests: req.digests,
        maxh2cdata: MAX_H2C_DATA_BYTES,
    });
    writer
        .write_all(&pdu::encode(&resp, Digests::default(), 0))
        .await?;
    writer.flush().await?;
    Ok((req.digests, req.hpda))
}

async fn terminate_now<W: AsyncWrite + Unpin>(
    writer: &mut W,
    e: &PduError,
    quote: &[u8],
) -> NvmfError {
    terminate_with(writer, e.fes(), e, quote).await
}

/// Send a C2HTermReq straight to the socket (before the writer task exists).
async fn terminate_with<W: AsyncWrite + Unpin>(
    writer: &mut W,
    fes: u16,
    e: &PduError,
    quote: &[u8],
) -> NvmfError {
    let term = Pdu::C2hTermReq(TermReq {
        fes,
        fei: e.fei(),
        quote: Bytes::copy_from_slice(quote),
    });
    let _ = writer
        .write_all(&pdu::encode(&term, Digests::default(), 0))
        .await;
    let _ = writer.shutdown().await;
    NvmfError::Protocol(e.clone())
}

/// Resolve once shutdown was requested (never, if the target is gone).
pub(crate) async fn wait_for_shutdown(rx: &mut watch::Receiver<bool>) {
    if rx.wait_for(|down| *down).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Queue<'_> {
    async fn read_loop<R: AsyncRead + Unpin>(
        &mut self,
        reader: &mut R,
        digests: Digests,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), NvmfError> {
        // Loop bound: one PDU per turn; ends with the connection.
        loop {
            if self.disconnecting {
                return Ok(());
            }
            let keep_alive = self.keep_alive_timeout();
            let mut chb = [0u8; pdu::COMMON_LEN];
            let read = async {
                match keep_alive {
                    Some(t) => tokio::time::timeout(t, reader.read_exact(&mut chb))
                        .await
                        .map_err(|_| NvmfError::KeepAliveExpired { timeout: t })?,
                    None => reader.read_exact(&mut chb).await,
                }
                .map_err(NvmfError::Io)
            };
            tokio::select! {
                biased;
                _ = wait_for_shutdown(shutdown) => return Ok(()),
                r = read => match r {
                    Ok(_) => {}
                    Err(NvmfError::Io(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                    Err(e) => return Err(e),
                },
            }
            let ch = CommonHeader::parse(&chb);
            if let Err(e) = pdu::check_header(&ch, digests) {
                return Err(self.fatal(e, &chb).await);
            }
            let mut buf = BytesMut::zeroed(ch.plen as usize);
            buf[..pdu::COMMON_LEN].copy_from_slice(&chb);
            tokio::time::timeout(
                PDU_BODY_TIMEOUT,
                reader.read_exact(&mut buf[pdu::COMMON_LEN..]),
            )
            .await
            .map_err(|_| NvmfError::Stalled)??;
            let bytes = buf.freeze();
            match pdu::decode(bytes.clone(), digests) {
                Ok(p) => self.handle(p, &bytes).await?,
                Err(PduError::DataDigest { cccid }) => self.data_digest_error(&ch, cccid).await?,
                Err(e) => return Err(self.fatal(e, &bytes).await),
            }
        }
    }

    fn keep_alive_timeout(&self) -> Option<Duration> {
        let b = self.bound.as_ref()?;
        if b.qid != 0 {
            return None;
        }
        match b.ctrl.kato_ms() {
            0 => None,
            ms => Some((2 * Duration::from_millis(u64::from(ms))).max(MIN_KEEP_ALIVE_TIMEOUT)),
        }
    }

    /// Queue a TermReq for `e` quoting the offending header; the connection then closes.
    async fn fatal(&self, e: PduError, quote: &[u8]) -> NvmfError {
        let q = &quote[..quote.len().min(pdu::TERM_MAX_QUOTE)];
        let _ = self
            .tx
            .send(Outgoing::Term(TermReq {
                fes: e.fes(),
                fei: e.fei(),
                quote: Bytes::copy_from_slice(q),
            }))
            .await;
        NvmfError::Protocol(e)
    }

    fn sqhd(&self) -> u16 {
        let depth = self
            .bound
            .as_ref()
            .map_or(u32::from(identify::MAX_QUEUE_ENTRIES), |b| b.depth);
        (self.received.load(Ordering::Relaxed) % depth) as u16
    }

    fn qid(&self) -> u16 {
        self.bound.as_ref().map_or(0, |b| b.qid)
    }

    async fn respond(&self, cid: u16, status: Status, result: u64) {
        let cqe = Cqe {
            result,
            sqhd: self.sqhd(),
            sqid: self.qid(),
            cid,
            status,
        };
        let _ = self.tx.send(Outgoing::Response(cqe)).await;
    }

    async fn handle(&mut self, p: Pdu, raw: &Bytes) -> Result<(), NvmfError> {
        match p {
            Pdu::CapsuleCmd { sqe, data } => self.command(sqe, data, raw).await,
            Pdu::H2cData(d) => self.h2c_data(d, raw).await,
            Pdu::H2cTermReq(t) => Err(NvmfError::HostTerminated { fes: t.fes }),
            _ => {
                let e = PduError::InvalidField {
                    offset: 0,
                    what: "a PDU type hosts do not send",
                };
                Err(self.fatal(e, raw).await)
            }
        }
    }

    /// A data digest mismatch: the command fails with a transient transport error (the host
    /// may retry it); the connection stays.
    async fn data_digest_error(&mut self, ch: &CommonHeader, cccid: u16) -> Result<(), NvmfError> {
        tracing::warn!(cccid, "nvmf data digest mismatch");
        if ch.pdu_type == pdu::TYPE_CAPSULE_CMD {
            self.received.fetch_add(1, Ordering::Relaxed);
        } else {
            let ttag = self
                .pending
                .iter()
                .find(|(_, p)| p.sqe.cid() == cccid)
                .map(|(t, _)| *t);
            match ttag {
                Some(t) => {
                    self.pending.remove(&t);
                }
                None => return Ok(()),
            }
        }
        self.respond(cccid, Status::TRANSIENT_TRANSPORT, 0).await;
        Ok(())
    }

    async fn command(&mut self, sqe: Sqe, data: Bytes, raw: &Bytes) -> Result<(), NvmfError> {
        self.received.fetch_add(1, Ordering::Relaxed);
        let cid = sqe.cid();
        let is_connect = sqe.opcode() == FABRICS && sqe.fctype() == FCTYPE_CONNECT;
        let in_capsule_max = match &self.bound {
            Some(b) if b.qid > 0 => identify::IN_CAPSULE_IO_BYTES,
            _ => IN_CAPSULE_ADMIN_BYTES,
        };
        if data.len() > in_capsule_max as usize {
            let e = PduError::TooLong {
                plen: raw.len() as u32,
            };
            return Err(self.fatal(e, raw).await);
        }
        let permit = match &self.bound {
            None if !is_connect => {
                self.respond(cid, Status::COMMAND_SEQUENCE, 0).await;
                return Ok(());
            }
            None => None,
            Some(b) => match b.slots.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let e = PduError::InvalidField {
                        offset: 0,
                        what: "more commands in flight than the queue holds",
                    };
                    tracing::warn!(qid = b.qid, depth = b.depth, "nvmf host overran its queue");
                    return Err(self.fatal(e, raw).await);
                }
            },
        };
        let len = sqe.sgl_len();
        match Direction::of(&sqe) {
            Direction::HostToController if len > 0 => match sqe.sgl_type() {
                SGL_DATA_OFFSET => {
                    let start = sqe.sgl_addr();
                    let end = start.saturating_add(u64::from(len));
                    if end > data.len() as u64 {
                        self.respond(cid, Status::SGL_LENGTH_INVALID, 0).await;
                        return Ok(());
                    }
                    let data = data.slice(start as usize..end as usize);
                    self.dispatch(sqe, data, permit).await
                }
                SGL_TRANSPORT => {
                    if !data.is_empty() {
                        self.respond(cid, Status::INVALID_FIELD, 0).await;
                        return Ok(());
                    }
                    if len > MAX_TRANSFER_BYTES {
                        self.respond(cid, Status::SGL_LENGTH_INVALID, 0).await;
                        return Ok(());
                    }
                    self.ask_for_data(sqe, len, permit).await;
                    Ok(())
                }
                _ => {
                    self.respond(cid, Status::SGL_TYPE_INVALID, 0).await;
                    Ok(())
                }
            },
            Direction::ControllerToHost if len > 0 && sqe.sgl_type() != SGL_TRANSPORT => {
                self.respond(cid, Status::SGL_TYPE_INVALID, 0).await;
                Ok(())
            }
            Direction::ControllerToHost if len > MAX_TRANSFER_BYTES => {
                self.respond(cid, Status::SGL_LENGTH_INVALID, 0).await;
                Ok(())
            }
            _ => self.dispatch(sqe, data, permit).await,
        }
    }

    /// Send an R2T for all of a command's data (the host splits it into H2CData PDUs of at
    /// most [`MAX_H2C_DATA_BYTES`]).
    async fn ask_for_data(&mut self, sqe: Sqe, len: u32, permit: Option<OwnedSemaphorePermit>) {
        // Loop bound: at most MAX_QUEUE_ENTRIES tags are in use.
        while self.pending.contains_key(&self.next_ttag) {
            self.next_ttag = self.next_ttag.wrapping_add(1);
        }
        let ttag = self.next_ttag;
        self.next_ttag = self.next_ttag.wrapping_add(1);
        self.pending.insert(
            ttag,
            Pending {
                sqe,
                buf: BytesMut::new(),
                len: len as usize,
                permit,
            },
        );
        let r2t = pdu::R2t {
            cccid: sqe.cid(),
            ttag,
            offset: 0,
            len,
        };
        let _ = self.tx.send(Outgoing::R2t(r2t)).await;
    }

    async fn h2c_data(&mut self, d: pdu::DataPdu, raw: &Bytes) -> Result<(), NvmfError> {
        let Some(p) = self.pending.get_mut(&d.ttag) else {
            let e = PduError::InvalidField {
                offset: 10,
                what: "H2CData for an unknown transfer tag",
            };
            return Err(self.fatal(e, raw).await);
        };
        let problem = if p.sqe.cid() != d.cccid {
            Some((8, "H2CData command id differs from its R2T's"))
        } else if d.offset as usize != p.buf.len() {
            Some((12, "H2CData out of order"))
        } else if p.buf.len() + d.data.len() > p.len {
            Some((16, "H2CData beyond the command's data"))
        } else if d.data.len() > MAX_H2C_DATA_BYTES as usize {
            Some((16, "H2CData over MAXH2CDATA"))
        } else {
            None
        };
        if let Some((offset, what)) = problem {
            let e = PduError::InvalidField { offset, what };
            let fes = if offset == 8 {
                pdu::FES_INVALID_HEADER_FIELD
            } else {
                pdu::FES_DATA_OUT_OF_RANGE
            };
            let q = &raw[..raw.len().min(pdu::TERM_MAX_QUOTE)];
            let _ = self
                .tx
                .send(Outgoing::Term(TermReq {
                    fes,
                    fei: offset,
                    quote: Bytes::copy_from_slice(q),
                }))
                .await;
            return Err(NvmfError::Protocol(e));
        }
        let complete = p.buf.len() + d.data.len() == p.len;
        let data = if complete && p.buf.is_empty() {
            // The usual case: one H2CData with all the data, kept without a copy.
            d.data
        } else {
            p.buf.extend_from_slice(&d.data);
            if !complete {
                return Ok(());
            }
            std::mem::take(&mut p.buf).freeze()
        };
        let Some(p) = self.pending.remove(&d.ttag) else {
            return Ok(());
        };
        self.dispatch(p.sqe, data, p.permit).await
    }

    /// Run a command whose data is all here: Connect inline (it binds the queue), every
    /// other command as its own task.
    async fn dispatch(
        &mut self,
        sqe: Sqe,
        data: Bytes,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), NvmfError> {
        let cid = sqe.cid();
        let Some(b) = &self.bound else {
            match self
                .target
                .connect(&sqe, &data, self.tx.clone(), self.local_addr)
                .await
            {
                Ok(c) => {
                    let result = u64::from(c.ctrl.cntlid);
                    tracing::debug!(cntlid = c.ctrl.cntlid, qid = c.qid, subnqn = %c.ctrl.subnqn, "nvmf queue connected");
                    self.bound = Some(Bound {
                        ctrl: c.ctrl,
                        qid: c.qid,
                        slots: Arc::new(Semaphore::new(c.depth as usize)),
                        depth: c.depth,
                    });
                    self.respond(cid, Status::SUCCESS, result).await;
                }
                Err((status, result)) => self.respond(cid, status, result).await,
            }
            return Ok(());
        };
        if b.qid > 0 && sqe.opcode() == FABRICS && sqe.fctype() == FCTYPE_DISCONNECT {
            self.respond(cid, Status::SUCCESS, 0).await;
            self.disconnecting = true;
            return Ok(());
        }
        let ctrl = b.ctrl.clone();
        let qid = b.qid;
        let depth = b.depth;
        let tx = self.tx.clone();
        let received = self.received.clone();
        tokio::spawn(async move {
            let reply = if qid == 0 {
                ctrl.admin(&sqe, data).await
            } else {
                match (ctrl.device(), ctrl.namespace()) {
                    (Some(device), Some(ns)) => match &ctrl.recorder {
                        Some(recorder) => {
                            let start = basalt_metrics::now();
                            let (op, bytes) = crate::io::op_class(&sqe, &data);
                            let reply = crate::io::execute(device, &ns, &sqe, data).await;
                            recorder.record(op, bytes, start, reply.is_success());
                            reply
                        }
                        None => crate::io::execute(device, &ns, &sqe, data).await,
                    },
                    _ => Reply::status(Status::INTERNAL),
                }
            };
            let cqe = |status, result| Cqe {
                result,
                sqhd: (received.load(Ordering::Relaxed) % depth) as u16,
                sqid: qid,
                cid,
                status,
            };
            let msg = match reply {
                Reply::Done { status, result } => Outgoing::Response(cqe(status, result)),
                Reply::Data(pieces) => Outgoing::Data {
                    pieces: truncate(pieces, sqe.sgl_len() as usize),
                    cqe: cqe(Status::SUCCESS, 0),
                },
                Reply::Held => return,
            };
            let _ = tx.send(msg).await;
            drop(permit);
        });
        Ok(())
    }
}

/// At most `len` bytes of `pieces` (the host's buffer bounds what is sent).
fn truncate(mut pieces: Vec<Bytes>, len: usize) -> Vec<Bytes> {
    let mut left = len;
    for p in pieces.iter_mut() {
        if p.len() > left {
            p.truncate(left);
        }
        left -= p.len();
    }
    pieces.retain(|p| !p.is_empty());
    pieces
}

/// The writer task: encode and send what the queue's tasks produce, flushing when nothing
/// more is ready.
async fn write_loop<W: AsyncWrite + Unpin>(
    writer: W,
    mut rx: mpsc::Receiver<Outgoing>,
    digests: Digests,
    hpda: u8,
) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, writer);
    // Loop bound: one message per turn; ends when every sender is gone or on Close/Term.
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            if !send(&mut w, msg, digests, hpda).await? {
                w.flush().await?;
                let _ = w.shutdown().await;
                return Ok(());
            }
            next = rx.try_recv().ok();
        }
        w.flush().await?;
    }
    w.flush().await
}

/// Send one message; false when the connection is to close after it.
async fn send<W: AsyncWrite + Unpin>(
    w: &mut W,
    msg: Outgoing,
    digests: Digests,
    hpda: u8,
) -> std::io::Result<bool> {
    match msg {
        Outgoing::Response(cqe) => {
            let h = pdu::encode_header(pdu::TYPE_CAPSULE_RESP, 0, &cqe.encode(), 0, digests, hpda);
            w.write_all(&h).await?;
        }
        Outgoing::Data { pieces, cqe } => {
            let total: usize = pieces.iter().map(|p| p.len()).sum();
            if total > 0 {
                let specific = pdu::data_specific(cqe.cid, 0, 0, total as u32);
                let h = pdu::encode_header(
                    pdu::TYPE_C2H_DATA,
                    pdu::FLAG_LAST_PDU,
                    &specific,
                    total,
                    digests,
                    hpda,
                );
                w.write_all(&h).await?;
                let mut crc = 0;
                for p in &pieces {
                    w.write_all(p).await?;
                    if digests.data {
                        crc = crc32c::crc32c_append(crc, p);
                    }
                }
                if digests.data {
                    w.write_all(&crc.to_le_bytes()).await?;
                }
            }
            let h = pdu::encode_header(pdu::TYPE_CAPSULE_RESP, 0, &cqe.encode(), 0, digests, hpda);
            w.write_all(&h).await?;
        }
        Outgoing::R2t(r) => {
            w.write_all(&pdu::encode(&Pdu::R2t(r), digests, hpda))
                .await?
        }
        Outgoing::Term(t) => {
            tracing::info!(fes = t.fes, fei = t.fei, "nvmf: terminating connection");
            w.write_all(&pdu::encode(&Pdu::C2hTermReq(t), digests, 0))
                .await?;
            return Ok(false);
        }
        Outgoing::Close => return Ok(false),
    }
    Ok(true)
}
