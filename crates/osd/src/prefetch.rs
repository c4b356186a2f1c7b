//! What a mutation reads, read before its PG lock.
//!
//! A primary applies a mutation under the PG lock, on a runtime thread: whatever it reads
//! there, it waits for the device to read. So the reads are made first, awaited with no lock
//! held, and used under the lock only if they are still current; otherwise (another writer
//! got in between, rare) they are made again under the lock, as before:
//! - the partial blocks of a write or trim ([`basalt_store::EdgeBlocks`]; the store tells
//!   whether they are current). The primary forwards such a write widened to whole blocks,
//!   as it wrote them, so its replicas read nothing either;
//! - the ancestor's object a copy-up copies, the object a recovery push sends, the KV table
//!   an update edits (crates/osd/src/kv.rs): current if no writer of the object's store
//!   stripe finished since the read began ([`basalt_store::WriteToken`]).

use crate::daemon::Osd;
use crate::handler::Forward;
use basalt_proto::{Header, ObjectId, Opcode};
use basalt_store::{EdgeBlocks, WriteToken};
use bytes::{Bytes, BytesMut};

/// The partial blocks of `h` (a write of `payload`, or a trim), read ahead.
pub(crate) async fn edges(osd: &Osd, h: &Header, payload: &[u8]) -> EdgeBlocks {
    let len = match h.opcode {
        Opcode::Write => payload.len() as u32,
        Opcode::Trim => h.length,
        _ => return EdgeBlocks::default(),
    };
    match osd.store.prefetch_edges(h.object, h.offset, len).await {
        Ok(edges) => edges,
        Err(e) => {
            // Read again under the lock, where a failure answers the request.
            tracing::warn!(osd = osd.id, object = %h.object, "reading partial blocks ahead failed: {e}");
            EdgeBlocks::default()
        }
    }
}

/// What a primary forwards for the mutation `h` it applied with `edges`: a write with
/// partial blocks widened to whole blocks as written (the replica's copy is at the same
/// version, so it ends identical, without reading), anything else as it came.
pub(crate) fn forwarded(h: &Header, payload: &Bytes, edges: &EdgeBlocks) -> Forward {
    if h.opcode == Opcode::Write {
        if let Some((offset, data)) = edges.aligned_write(h.offset, payload) {
            let widened = Header {
                offset,
                length: data.len() as u32,
                ..*h
            };
            return (widened, Bytes::from(data));
        }
    }
    (*h, payload.clone())
}

/// An object read ahead.
pub(crate) struct ReadAhead {
    obj: ObjectId,
    token: WriteToken,
    data: BytesMut,
}

/// Read all of `obj` ahead; None when the store reads inline anyway, the object is absent,
/// or the read failed (it is made again under the lock).
pub(crate) async fn object(osd: &Osd, obj: ObjectId) -> Option<ReadAhead> {
    if !osd.store.awaits_io() {
        return None;
    }
    let token = osd.store.write_token(obj);
    osd.store.version(obj)?;
    let mut data = BytesMut::zeroed(osd.store.object_size() as usize);
    osd.store.read_async(obj, 0, &mut data).await.ok()?;
    Some(ReadAhead { obj, token, data })
}

/// Read `obj` whole into `buf`: from `ahead` when it is that object, still current, else
/// from the store now.
pub(crate) fn read_object(
    osd: &Osd,
    obj: ObjectId,
    ahead: &mut Option<ReadAhead>,
    buf: &mut BytesMut,
) -> Result<(), basalt_store::StoreError> {
    match ahead.take() {
        Some(a) if a.obj == obj && osd.store.unchanged_since(obj, a.token) => {
            *buf = a.data;
            Ok(())
        }
        _ => osd.store.read(obj, 0, buf),
    }
}

/// The ancestor a copy-up of `obj` in a layer with ancestors `chain` would copy (the nearest
/// holder), read ahead; None when nothing is to be copied.
pub(crate) async fn copy_up_source(
    osd: &Osd,
    obj: ObjectId,
    chain: &[basalt_proto::InodeId],
) -> Option<ReadAhead> {
    let holds = |o: ObjectId| osd.store.version(o).is_some();
    let (&nearest, rest) = chain.split_first()?;
    if holds(obj) {
        return None;
    }
    let ancestor = crate::layers::first_holder(ObjectId::new(nearest, obj.index), rest, holds)?;
    object(osd, ancestor).await
}
