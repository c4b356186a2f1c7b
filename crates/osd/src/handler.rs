//! Serving one data-plane connection: decode requests, run them, send replies.

use crate::daemon::Osd;
use basalt_client::frame_io::{read_frame, write_frames};
use basalt_client::{LocalHandler, ReplySink};
use basalt_proto::{Flags, Header, Opcode, Status, Version, MAX_PAYLOAD_BYTES};
use basalt_store::StoreError;
use bytes::{Bytes, BytesMut};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// Requests one connection may have in progress; the reader stops reading past this.
const MAX_IN_FLIGHT_PER_CONN: usize = 1024;

/// Longest wait for a replica's acknowledgement before the write is failed.
const REPLICA_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// Serve requests on `stream` until it closes or sends a malformed frame.
pub async fn serve_connection(osd: Arc<Osd>, stream: TcpStream, peer: SocketAddr) {
    let (rd, wr) = stream.into_split();
    let mut rd = tokio::io::BufReader::with_capacity(basalt_client::conn::READ_BUFFER_BYTES, rd);
    let (tx, rx) = mpsc::unbounded_channel();
    let writer = tokio::spawn(write_frames(wr, rx));
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONN));
    loop {
        let (header, payload) = match read_frame(&mut rd).await {
            Ok(Some(frame)) => frame,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(osd = osd.id, %peer, "closing connection: {e}");
                break;
            }
        };
        if header.flags.has(Flags::REPLY) {
            tracing::warn!(osd = osd.id, %peer, "closing connection: reply frame sent to a server");
            break;
        }
        let permit = match in_flight.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => break,
        };
        dispatch(
            &osd,
            header,
            payload,
            ReplySink::Stream(tx.clone()),
            Some(permit),
        );
    }
    drop(tx);
    let _ = writer.await;
}

/// Run one request. Replica mutations are applied here, in arrival order, so replicas apply a
/// PG's mutations in the order their primary assigned versions; everything that may wait runs
/// in its own task. `permit` (TCP connections) bounds the requests in progress per connection.
pub(crate) fn dispatch(
    osd: &Arc<Osd>,
    h: Header,
    payload: Bytes,
    sink: ReplySink,
    permit: Option<OwnedSemaphorePermit>,
) {
    let mutation = matches!(h.opcode, Opcode::Write | Opcode::Trim | Opcode::Delete);
    match h.opcode {
        Opcode::Ping => sink.send(h.reply(Status::Ok), Bytes::new()),
        Opcode::Read => {
            let (status, data) = read(osd, &h);
            if status == Status::Io && !h.flags.has(Flags::REPLICA) {
                // Our copy is damaged (or unreadable): serve a replica's copy instead of an
                // error when one is good. Never serve the damaged bytes.
                let osd = osd.clone();
                tokio::spawn(async move {
                    let (status, data) = read_from_replicas(&osd, h).await;
                    sink.send(h.reply(status), data);
                    drop(permit);
                });
                return;
            }
            sink.send(h.reply(status), data);
        }
        Opcode::Allocation => {
            let (status, data) = allocation(osd, &h);
            sink.send(h.reply(status), data);
        }
        Opcode::Stat => {
            let st = osd.store.stats();
            let mut out = BytesMut::with_capacity(40);
            for v in [
                st.capacity_bytes,
                st.used_bytes,
                st.slots_total,
                st.slots_free,
                st.objects,
            ] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            sink.send(h.reply(Status::Ok), out.freeze());
        }
        _ if mutation && h.flags.has(Flags::REPLICA) => {
            let status = apply(osd, &h, &payload, h.version);
            if status == Status::Ok && h.flags.has(Flags::FUA) {
                let osd = osd.clone();
                tokio::spawn(async move {
                    let status = flush(&osd).await;
                    sink.send(h.reply(status), Bytes::new());
                    drop(permit);
                });
            } else {
                sink.send(h.reply(status), Bytes::new());
            }
        }
        Opcode::Purge => {
            let osd = osd.clone();
            tokio::spawn(async move {
                let status = purge(&osd, h).await;
                sink.send(h.reply(status), Bytes::new());
                drop(permit);
            });
        }
        Opcode::Flush => {
            let osd = osd.clone();
            tokio::spawn(async move {
                let status = flush(&osd).await;
                sink.send(h.reply(status), Bytes::new());
                drop(permit);
            });
        }
        _ => {
            let osd = osd.clone();
            tokio::spawn(async move {
                let status = primary_mutation(&osd, h, payload).await;
                sink.send(h.reply(status), Bytes::new());
                drop(permit);
            });
        }
    }
}

/// The in-process entry point: a client in the same process calls the OSD's request handler
/// directly (no socket, no framing); replication to peers still goes over the data plane.
pub struct LocalOsd(pub Arc<Osd>);

impl LocalHandler for LocalOsd {
    fn handle(&self, header: Header, payload: Bytes, reply: ReplySink) {
        dispatch(&self.0, header, payload, reply, None);
    }
}

fn status_of(e: &StoreError) -> Status {
    match e {
        StoreError::NoSpace => Status::NoSpace,
        StoreError::Failed => Status::Failed,
        StoreError::OutOfRange { .. } | StoreError::BadOptions { .. } => Status::Invalid,
        _ => Status::Io,
    }
}

fn in_object(osd: &Osd, h: &Header) -> bool {
    let os = osd.store.object_size() as u64;
    h.offset as u64 + h.length as u64 <= os
}

fn read(osd: &Osd, h: &Header) -> (Status, Bytes) {
    if !in_object(osd, h) || h.length > MAX_PAYLOAD_BYTES {
        return (Status::Invalid, Bytes::new());
    }
    let mut buf = BytesMut::zeroed(h.length as usize);
    match osd.store.read(h.object, h.offset, &mut buf) {
        Ok(()) => (Status::Ok, buf.freeze()),
        Err(e) => {
            tracing::error!(osd = osd.id, object = %h.object, "read failed: {e}");
            (status_of(&e), Bytes::new())
        }
    }
}

/// Read the range from the other OSDs of the acting set, first good copy wins. Each copy is
/// checksummed by its own store, so a copy that arrives is one its store verified.
async fn read_from_replicas(osd: &Arc<Osd>, h: Header) -> (Status, Bytes) {
    let map = osd.map();
    let acting = match map.acting(h.pg) {
        Ok(a) => a.to_vec(),
        Err(_) => return (Status::Io, Bytes::new()),
    };
    for &peer in acting.iter().filter(|&&p| p != osd.id) {
        let Ok(info) = map.osd(peer) else { continue };
        let Ok(conn) = osd.peers.get(peer, &info.addr).await else {
            continue;
        };
        let mut req = h;
        req.flags = Flags(Flags::REPLICA);
        match tokio::time::timeout(REPLICA_TIMEOUT, conn.start(req, Bytes::new())).await {
            Ok(Ok(r)) if r.header.status == Status::Ok && r.payload.len() == h.length as usize => {
                tracing::warn!(
                    osd = osd.id, peer, object = %h.object,
                    "served a damaged read from a replica; the local copy needs repair"
                );
                return (Status::Ok, r.payload);
            }
            _ => continue,
        }
    }
    (Status::Io, Bytes::new())
}

fn allocation(osd: &Osd, h: &Header) -> (Status, Bytes) {
    match osd.store.allocation(h.object) {
        Ok(words) => {
            let mut out = BytesMut::with_capacity(words.len() * 8);
            for w in words {
                out.extend_from_slice(&w.to_le_bytes());
            }
            (Status::Ok, out.freeze())
        }
        Err(e) => (status_of(&e), Bytes::new()),
    }
}

async fn flush(osd: &Arc<Osd>) -> Status {
    let store = osd.store.clone();
    match tokio::task::spawn_blocking(move || store.flush()).await {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => {
            tracing::error!(osd = osd.id, "flush failed: {e}");
            status_of(&e)
        }
        Err(_) => Status::Io,
    }
}

/// Delete every local object of an inode from an index on (volume removal or shrink).
async fn purge(osd: &Arc<Osd>, h: Header) -> Status {
    let store = osd.store.clone();
    let (inode, from) = (h.object.inode, h.object.index);
    let version = basalt_proto::Version::new(osd.map().epoch as u64, 0);
    let result = tokio::task::spawn_blocking(move || {
        for (obj, _) in store.objects() {
            if obj.inode == inode && obj.index >= from {
                store.delete(obj, version)?;
            }
        }
        Ok::<(), StoreError>(())
    })
    .await;
    match result {
        Ok(Ok(())) => Status::Ok,
        Ok(Err(e)) => {
            tracing::error!(osd = osd.id, inode, "purge failed: {e}");
            status_of(&e)
        }
        Err(_) => Status::Io,
    }
}

/// Apply a mutation to the local store.
fn apply(osd: &Osd, h: &Header, payload: &[u8], version: Version) -> Status {
    let length = if h.opcode == Opcode::Write {
        payload.len() as u32
    } else {
        h.length
    };
    if h.opcode != Opcode::Delete
        && h.offset as u64 + length as u64 > osd.store.object_size() as u64
    {
        return Status::Invalid;
    }
    let result = match h.opcode {
        Opcode::Write => osd.store.write(h.object, h.offset, payload, version),
        Opcode::Trim => osd.store.trim(h.object, h.offset, h.length, version),
        Opcode::Delete => osd.store.delete(h.object, version),
        _ => unreachable!("apply is only called for mutations"),
    };
    match result {
        Ok(()) => Status::Ok,
        Err(e) => {
            if !matches!(e, StoreError::NoSpace) {
                tracing::error!(osd = osd.id, object = %h.object, "{:?} failed: {e}", h.opcode);
            }
            status_of(&e)
        }
    }
}

/// As primary: order the mutation, apply it locally, replicate it, and wait for every replica.
async fn primary_mutation(osd: &Arc<Osd>, h: Header, payload: Bytes) -> Status {
    let map = osd.map();
    let acting = match map.acting(h.pg) {
        Ok(a) => a.to_vec(),
        Err(_) => return Status::Invalid,
    };
    if acting.first() != Some(&osd.id) {
        return Status::NotPrimary;
    }
    // Connect to the replicas before taking the PG lock (connecting may wait).
    let mut replicas = Vec::with_capacity(acting.len().saturating_sub(1));
    for &peer in &acting[1..] {
        let addr = match map.osd(peer) {
            Ok(info) => info.addr.clone(),
            Err(_) => return Status::Unavailable,
        };
        match osd.peers.get(peer, &addr).await {
            Ok(conn) => replicas.push(conn),
            Err(e) => {
                tracing::warn!(osd = osd.id, peer, "replica unreachable: {e}");
                return Status::Unavailable;
            }
        }
    }
    // Under the PG lock: assign the version, apply locally and queue to every replica, so
    // the replicas receive this PG's mutations in version order.
    let pending = {
        let mut counters = osd.pg_shard(h.pg).lock().expect("pg lock");
        let counter = counters.entry(h.pg).or_insert(0);
        *counter += 1;
        let version = Version::new(map.epoch as u64, *counter);
        let status = apply(osd, &h, &payload, version);
        if status != Status::Ok {
            return status;
        }
        let mut fwd = h;
        fwd.version = version;
        fwd.flags = Flags(h.flags.0 | Flags::REPLICA);
        replicas
            .iter()
            .map(|c| c.start(fwd, payload.clone()))
            .collect::<Vec<_>>()
    };
    let mut status = Status::Ok;
    for p in pending {
        match tokio::time::timeout(REPLICA_TIMEOUT, p).await {
            Ok(Ok(r)) if r.header.status == Status::Ok => {}
            Ok(Ok(r)) => status = r.header.status,
            Ok(Err(e)) => {
                tracing::warn!(osd = osd.id, "replication failed: {e}");
                status = Status::Unavailable;
            }
            Err(_) => {
                tracing::warn!(
                    osd = osd.id,
                    "replica did not answer in {REPLICA_TIMEOUT:?}"
                );
                status = Status::Unavailable;
            }
        }
    }
    if status == Status::Ok && h.flags.has(Flags::FUA) {
        status = flush(osd).await;
    }
    status
}
