//! Reading and writing whole frames on a byte stream; shared by clients and OSDs.

use basalt_proto::{DecodeError, Header, HEADER_LEN};
use bytes::{Bytes, BytesMut};
use std::io;
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter,
};
use tokio::sync::mpsc;

/// Why a frame could not be read. All are fatal for the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("payload checksum mismatch")]
    PayloadChecksum,
}

/// Read one frame: header, then its payload when it has one (checksum verified).
/// Returns Ok(None) on a clean end of stream at a frame boundary.
///
/// A payload takes what the buffer already holds and reads the rest straight from the
/// stream into its own allocation: an object-sized payload is copied once, not twice.
pub async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut BufReader<R>,
) -> Result<Option<(Header, Bytes)>, FrameError> {
    let mut hb = [0u8; HEADER_LEN];
    match r.read_exact(&mut hb).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let header = Header::decode(&hb)?;
    if !header.has_payload() || header.length == 0 {
        return Ok(Some((header, Bytes::new())));
    }
    let mut payload = BytesMut::zeroed(header.length as usize);
    let buffered = r.buffer();
    let n = buffered.len().min(payload.len());
    payload[..n].copy_from_slice(&buffered[..n]);
    r.consume(n);
    if n < payload.len() {
        r.get_mut().read_exact(&mut payload[n..]).await?;
    }
    if crc32c::crc32c(&payload) != header.payload_crc {
        return Err(FrameError::PayloadChecksum);
    }
    Ok(Some((header, payload.freeze())))
}

/// One frame queued for sending. The header is encoded by the writer task, after the payload
/// checksum is set.
pub struct OutFrame {
    pub header: Header,
    pub payload: Bytes,
}

impl OutFrame {
    /// A frame whose header carries the payload's length and checksum.
    pub fn new(mut header: Header, payload: Bytes) -> Self {
        if header.has_payload() {
            header.length = payload.len() as u32;
            header.payload_crc = crc32c::crc32c(&payload);
        }
        Self { header, payload }
    }

    /// A frame whose payload checksum the caller already computed (`crc` must be the
    /// crc32c of `payload`): a payload sent to several peers is checksummed once.
    pub fn with_crc(mut header: Header, payload: Bytes, crc: u32) -> Self {
        debug_assert_eq!(crc, crc32c::crc32c(&payload), "a precomputed payload crc");
        if header.has_payload() {
            header.length = payload.len() as u32;
            header.payload_crc = crc;
        }
        Self { header, payload }
    }
}

/// Payloads at least this large skip the writer's buffer (written from their own memory).
const DIRECT_PAYLOAD_BYTES: usize = 64 << 10;

/// Buffer size of the writer; frames are coalesced up to this before a syscall.
const WRITE_BUFFER_BYTES: usize = 256 << 10;

/// Drain `rx` onto `w`, coalescing frames that are queued together into one write.
/// Returns when the channel closes or the stream fails.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    w: W,
    mut rx: mpsc::UnboundedReceiver<OutFrame>,
) -> io::Result<()> {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, w);
    while let Some(frame) = rx.recv().await {
        write_one(&mut w, &frame).await?;
        // Coalesce whatever else is already queued, then push it out in one go.
        while let Ok(frame) = rx.try_recv() {
            write_one(&mut w, &frame).await?;
        }
        w.flush().await?;
    }
    w.flush().await?;
    w.shutdown().await
}

async fn write_one<W: AsyncWrite + Unpin>(w: &mut BufWriter<W>, f: &OutFrame) -> io::Result<()> {
    w.write_all(&f.header.encode()).await?;
    if f.payload.len() >= DIRECT_PAYLOAD_BYTES {
        // An object-sized payload: out after the buffered frames, without a copy into the
        // buffer.
        w.flush().await?;
        w.get_mut().write_all(&f.payload).await?;
    } else if !f.payload.is_empty() {
        w.write_all(&f.payload).await?;
    }
    Ok(())
}
