//! Object data: streamed into cluster objects in chunks, read back as a stream.
//!
//! Every stored piece of data (a PUT body, a multipart part) gets a fresh *data id*; its
//! chunk `n` is the cluster object `(bucket inode, data << 16 | n)`, so consecutive chunks
//! land in different PGs and a large object's throughput scales with the OSDs. Data is never
//! overwritten in place: a new PUT writes a new data id and switches the index entry, then
//! the old data is deleted. Memory per transfer is bounded by a few chunks in flight.

use crate::buckets::BucketRecord;
use crate::sse::PieceKey;
use basalt_client::{ClientError, Cluster};
use basalt_proto::ObjectId;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use md5::{Digest, Md5};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::{mpsc, Mutex};

/// Chunks of one stored piece: the chunk number takes the low 16 bits of the object index
/// (65,536 chunks: 8 GiB at the 128 KiB object size of `basalt up`).
pub const CHUNK_BITS: u32 = 16;
/// Largest data id: chunk indexes stay below bit 56, so they are valid stripe indexes of an
/// erasure-coded pool (bits 56..=61 name chunks in OSD stores; bit 63 marks table objects).
pub const MAX_DATA_ID: u64 = (1 << (56 - CHUNK_BITS)) - 1;
/// Bytes of chunk writes (or reads) of one transfer in flight at once.
const WINDOW_BYTES: usize = 16 << 20;
/// Pieces of at most this many chunks are written with FUA chunk by chunk; longer ones
/// without, then made durable by one FLUSH of every OSD (one fdatasync each instead of one
/// per chunk).
const FUA_CHUNKS: u64 = 4;
/// Metadata key of the data-id block counter.
pub const DATA_BLOCK_KEY: &str = "/basalt/s3/next_data_block";
/// Data ids a gateway takes from the counter at once.
const DATA_BLOCK: u64 = 1024;

/// Data failures.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{0}")]
    Client(#[from] ClientError),
    #[error("{0}")]
    Meta(#[from] basalt_meta::MetaError),
    #[error("request body: {0}")]
    Body(String),
    #[error("object too large: at most {max} bytes per part")]
    TooLarge { max: u64 },
    #[error("the body is {got} bytes, but Content-Length said {expected}")]
    Length { got: u64, expected: u64 },
    #[error("no data id left")]
    Exhausted,
}

/// The cluster object holding chunk `n` of data `data`.
pub fn chunk_object(bucket: &BucketRecord, data: u64, n: u64) -> ObjectId {
    ObjectId {
        inode: bucket.data_inode(),
        index: (data << CHUNK_BITS) | n,
    }
}

/// Largest piece one data id can hold.
pub fn max_piece_bytes(bucket: &BucketRecord) -> u64 {
    (1u64 << CHUNK_BITS) * bucket.chunk_bytes as u64
}

/// Chunks of one transfer in flight at once.
fn window(bucket: &BucketRecord) -> usize {
    (WINDOW_BYTES / bucket.chunk_bytes.max(4096) as usize).clamp(2, 64)
}

/// Hands out data ids, a block at a time from a counter in metadata.
#[derive(Default)]
pub struct DataIds {
    range: Mutex<(u64, u64)>,
}

impl DataIds {
    pub async fn next(&self, cluster: &Cluster) -> Result<u64, DataError> {
        let mut range = self.range.lock().await;
        if range.0 >= range.1 {
            let block = basalt_meta::next_counter(cluster.meta().as_ref(), DATA_BLOCK_KEY, 1)
                .await?
                .ok_or(DataError::Exhausted)?;
            let start = block.checked_mul(DATA_BLOCK).ok_or(DataError::Exhausted)?;
            if start + DATA_BLOCK > MAX_DATA_ID {
                return Err(DataError::Exhausted);
            }
            *range = (start, start + DATA_BLOCK);
        }
        let id = range.0;
        range.0 += 1;
        Ok(id)
    }
}

/// What storing a body produced.
#[derive(Clone, Debug)]
pub struct Stored {
    pub size: u64,
    /// MD5 of the body.
    pub md5: [u8; 16],
}

/// Store `body` as data `data`, every chunk durable (FUA) before returning; with `key`, the
/// bytes are encrypted (the MD5 is of the plain body). On any error the chunks started so far
/// are deleted (best effort; the intent record covers the rest).
pub async fn store<S, E>(
    cluster: &Arc<Cluster>,
    bucket: &BucketRecord,
    data: u64,
    body: S,
    (expected_len, max_len): (Option<u64>, u64),
    key: Option<&PieceKey>,
) -> Result<Stored, DataError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut started = 0u64;
    let result = store_inner(
        cluster,
        bucket,
        data,
        body,
        (expected_len, max_len),
        key,
        &mut started,
    )
    .await;
    if result.is_err() {
        let _ = delete_chunks(cluster, bucket, data, started).await;
    }
    result
}

async fn store_inner<S, E>(
    cluster: &Arc<Cluster>,
    bucket: &BucketRecord,
    data: u64,
    mut body: S,
    (expected_len, max_len): (Option<u64>, u64),
    key: Option<&PieceKey>,
    started: &mut u64,
) -> Result<Stored, DataError>
where
    S: Stream<Item = Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let chunk = bucket.chunk_bytes as usize;
    let window = window(bucket);
    let fua = expected_len.is_some_and(|l| l <= FUA_CHUNKS * chunk as u64);
    let max_len = max_len.min(max_piece_bytes(bucket));
    let mut md5 = Md5::new();
    let mut size = 0u64;
    let mut buf = BytesMut::with_capacity(chunk);
    let mut writes = tokio::task::JoinSet::new();
    let flush_chunk = |buf: &mut BytesMut, n: &mut u64, writes: &mut tokio::task::JoinSet<_>| {
        let bytes = buf.split().freeze();
        let obj = chunk_object(bucket, data, *n);
        let cluster = cluster.clone();
        writes.spawn(async move { cluster.write_object(obj, 0, bytes, fua).await });
        *n += 1;
    };
    while let Some(piece) = body.next().await {
        let mut piece = piece.map_err(|e| DataError::Body(e.to_string()))?;
        let offset = size;
        size += piece.len() as u64;
        if size > max_len {
            return Err(DataError::TooLarge { max: max_len });
        }
        md5.update(&piece);
        if let Some(key) = key {
            let mut sealed = BytesMut::from(&piece[..]);
            key.apply(data, offset, &mut sealed);
            piece = sealed.freeze();
        }
        while !piece.is_empty() {
            let take = (chunk - buf.len()).min(piece.len());
            buf.extend_from_slice(&piece.split_to(take));
            if buf.len() == chunk {
                if writes.len() >= window {
                    writes
                        .join_next()
                        .await
                        .expect("a write in flight")
                        .expect("write task")?;
                }
                flush_chunk(&mut buf, started, &mut writes);
                buf.reserve(chunk);
            }
        }
    }
    if let Some(expected) = expected_len {
        if expected != size {
            return Err(DataError::Length {
                got: size,
                expected,
            });
        }
    }
    if !buf.is_empty() {
        flush_chunk(&mut buf, started, &mut writes);
    }
    while let Some(done) = writes.join_next().await {
        done.expect("write task")?;
    }
    if !fua {
        cluster.flush().await?;
    }
    Ok(Stored {
        size,
        md5: md5.finalize().into(),
    })
}

/// Delete chunks `0..chunks` of data `data`.
pub async fn delete_chunks(
    cluster: &Arc<Cluster>,
    bucket: &BucketRecord,
    data: u64,
    chunks: u64,
) -> Result<(), DataError> {
    let objs: Vec<ObjectId> = (0..chunks).map(|n| chunk_object(bucket, data, n)).collect();
    let mut results = futures::stream::iter(objs)
        .map(|obj| {
            let cluster = cluster.clone();
            async move { cluster.delete_object(obj).await }
        })
        .buffer_unordered(window(bucket));
    while let Some(r) = results.next().await {
        r?;
    }
    Ok(())
}

/// Delete the data of a piece of known size.
pub async fn delete_piece(
    cluster: &Arc<Cluster>,
    bucket: &BucketRecord,
    data: u64,
    size: u64,
) -> Result<(), DataError> {
    let chunks = size.div_ceil(bucket.chunk_bytes as u64).max(1);
    delete_chunks(cluster, bucket, data, chunks).await
}

/// One range of one piece to read.
#[derive(Clone, Copy, Debug)]
pub struct PieceRange {
    pub data: u64,
    pub start: u64,
    pub end: u64,
}

/// The byte stream of a GET: chunks read ahead by a task, at most a window buffered.
pub struct BodyStream {
    rx: mpsc::Receiver<Result<Bytes, BodyError>>,
    remaining: u64,
}

/// A failed read while streaming a body (the response is cut short).
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl Stream for BodyStream {
    type Item = Result<Bytes, BodyError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.rx.poll_recv(cx);
        if let Poll::Ready(Some(Ok(b))) = &polled {
            self.remaining = self.remaining.saturating_sub(b.len() as u64);
        }
        polled
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining as usize, Some(self.remaining as usize))
    }
}

impl s3s::stream::ByteStream for BodyStream {
    fn remaining_length(&self) -> s3s::stream::RemainingLength {
        s3s::stream::RemainingLength::new_exact(self.remaining as usize)
    }
}

/// Stream the given ranges of pieces, in order; with `key`, decrypted.
pub fn read_stream(
    cluster: Arc<Cluster>,
    bucket: BucketRecord,
    ranges: Vec<PieceRange>,
    key: Option<PieceKey>,
) -> BodyStream {
    let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
    let (tx, rx) = mpsc::channel(window(&bucket));
    tokio::spawn(async move {
        let chunk = bucket.chunk_bytes as u64;
        let mut reads = Vec::new();
        for r in ranges {
            let mut at = r.start;
            while at < r.end {
                let n = at / chunk;
                let off = at % chunk;
                let len = (chunk - off).min(r.end - at);
                reads.push((
                    r.data,
                    at,
                    chunk_object(&bucket, r.data, n),
                    off as u32,
                    len as u32,
                ));
                at += len;
            }
        }
        let mut chunks = futures::stream::iter(reads)
            .map(|(data, at, obj, off, len)| {
                let cluster = cluster.clone();
                let key = key.clone();
                async move {
                    let bytes = cluster.read_object(obj, off, len).await?;
                    Ok::<Bytes, ClientError>(match key {
                        Some(key) => {
                            let mut plain = BytesMut::from(&bytes[..]);
                            key.apply(data, at, &mut plain);
                            plain.freeze()
                        }
                        None => bytes,
                    })
                }
            })
            .buffered(window(&bucket));
        while let Some(r) = chunks.next().await {
            let item = r.map_err(|e| -> BodyError {
                tracing::error!(object = %bucket.name, "reading object data: {e}");
                Box::new(e)
            });
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return; // The client went away, or the read failed (the body is cut short).
            }
        }
    });
    BodyStream {
        rx,
        remaining: total,
    }
}
