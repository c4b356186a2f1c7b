//! The KV table object class: CALL requests that read or edit a sorted key → value table
//! kept in one object (the S3 gateway's bucket index shards).
//!
//! Only the PG's active primary serves them. An update runs under the PG lock like any
//! mutation (see [`replicate`]): it takes the table from the local store (read ahead,
//! awaited, and used if no writer came in between; else read again under the lock),
//! checks every condition against it (all or nothing), applies the edits, and writes the
//! new body at offset 0, padded with zeros to whole 4 KiB blocks, as an ordinary WRITE,
//! which is what the replicas receive. Gets and lists read the local copy, awaited. Formats and rules: `docs/design.md`, "Object classes: KV tables".

use crate::daemon::Osd;
use crate::handler::{apply, primary_gate, replicate, status_of};
use crate::metrics::OsdCounters;
use basalt_placement::ClusterMap;
use basalt_proto::kv::{
    KvDecodeError, KvEdit, KvGet, KvList, KvMethod, KvPage, KvPrevious, KvStat, KvTable, KvUpdate,
    KvValues, KV_PAGE_ENTRY_OVERHEAD_BYTES, KV_PAGE_HEADER_BYTES,
};
use basalt_proto::{inode_pool, Header, ObjectId, Opcode, Status, MAX_PAYLOAD_BYTES};
use basalt_store::StoreError;
use bytes::{Bytes, BytesMut};
use std::ops::Bound;
use std::sync::Arc;

/// Bytes read from the object before its body length is known: small tables take one read.
const FIRST_READ_BYTES: usize = 4096;
/// The store's block: a body is written padded to a whole number of them.
const BLOCK_BYTES: usize = 4096;

/// Run one CALL (client request, no REPLICA flag) and return the reply's status and payload.
pub(crate) async fn call(osd: &Arc<Osd>, h: Header, args: Bytes) -> (Status, Bytes) {
    OsdCounters::add(&osd.counters.kv_calls, 1);
    let (status, data) = match KvMethod::from_u32(h.offset) {
        None => (Status::Invalid, Bytes::new()),
        Some(_) if !object_in_pg(osd, &h) => (Status::Invalid, Bytes::new()),
        Some(KvMethod::Update) => update(osd, h, args).await,
        Some(KvMethod::Get) => read_call(osd, &h, get(osd, &h, args)).await,
        Some(KvMethod::List) => read_call(osd, &h, list(osd, &h, args)).await,
        Some(KvMethod::Stat) => read_call(osd, &h, stat(osd, &h, args)).await,
    };
    match status {
        Status::Ok => {}
        Status::Conflict => OsdCounters::add(&osd.counters.kv_conflicts, 1),
        _ => osd.counters.error(status),
    }
    (status, data)
}

/// Does the request's PG hold its object? Updates are serialized by the PG lock, so a client
/// that computed another PG must not get in.
fn object_in_pg(osd: &Osd, h: &Header) -> bool {
    let map = osd.map();
    let pool = inode_pool(h.object.inode);
    pool == h.pg.pool
        && map
            .pools
            .get(&pool)
            .is_some_and(|spec| ClusterMap::pg_of(spec, h.object) == h.pg)
}

/// A read-only method: only as the active primary.
async fn read_call(
    osd: &Osd,
    h: &Header,
    run: impl std::future::Future<Output = Result<Bytes, Status>>,
) -> (Status, Bytes) {
    if let Err(status) = primary_gate(osd, h) {
        return (status, Bytes::new());
    }
    match run.await {
        Ok(data) => (Status::Ok, data),
        Err(status) => (status, Bytes::new()),
    }
}

async fn get(osd: &Osd, h: &Header, args: Bytes) -> Result<Bytes, Status> {
    let args = KvGet::decode_bytes(args).map_err(|e| bad_args(osd, h, e))?;
    let table = read_table_consistent(osd, h).await?;
    let values = lookup(&table, &args.keys);
    fits_in_reply(values.encoded_len())?;
    Ok(values.encode())
}

async fn list(osd: &Osd, h: &Header, args: Bytes) -> Result<Bytes, Status> {
    let args = KvList::decode_bytes(args).map_err(|e| bad_args(osd, h, e))?;
    if args.max_entries == 0 {
        return Err(Status::Invalid);
    }
    let table = read_table_consistent(osd, h).await?;
    Ok(page(&table, &args).encode())
}

/// The table's entry count and encoded size (an S3 gateway splits a table that grows large
/// before it fills its object).
async fn stat(osd: &Osd, h: &Header, args: Bytes) -> Result<Bytes, Status> {
    if !args.is_empty() {
        return Err(bad_args(
            osd,
            h,
            KvDecodeError::Trailing { extra: args.len() },
        ));
    }
    let table = read_table_consistent(osd, h).await?;
    Ok(KvStat {
        entries: table.entries.len() as u32,
        body_bytes: table.encoded_len() as u32,
    }
    .encode())
}

/// What an update did: its result, or the index of the first edit whose condition failed.
enum Outcome {
    Done(KvPrevious),
    Conflict(u32),
}

/// Apply a batch of edits atomically and replicate the new body. The body is rewritten even
/// when the edits leave it unchanged: a retry of an update whose replication failed (a
/// retried put-if-absent, say) must not be acknowledged before every replica holds it.
async fn update(osd: &Arc<Osd>, h: Header, args: Bytes) -> (Status, Bytes) {
    let args = match KvUpdate::decode_bytes(args) {
        Ok(u) => u,
        Err(e) => return (bad_args(osd, &h, e), Bytes::new()),
    };
    let object_size = osd.store.object_size() as usize;
    // Read ahead, awaited; used under the PG lock if no writer came in between, else read
    // again there.
    let token = osd.store.write_token(h.object);
    let ahead = match osd.store.awaits_io() {
        true => read_table_async(osd, h.object).await.ok(),
        false => None,
    };
    let result = replicate(osd, &h, true, None, move |version| {
        let mut table = match ahead {
            Some(table) if osd.store.unchanged_since(h.object, token) => table,
            _ => read_table(osd, h.object).map_err(|e| table_status(osd, h.object, &e))?,
        };
        let previous = lookup(&table, args.edits.iter().map(|e| &e.key));
        fits_in_reply(previous.encoded_len())?;
        if args.edits.is_empty() {
            return Ok((Outcome::Done(previous), None));
        }
        if let Some(index) = first_conflict(&table, &args.edits) {
            return Ok((Outcome::Conflict(index), None));
        }
        apply_edits(&mut table, args.edits);
        let body = table.encode();
        if body.len() > object_size {
            // The shard is full: its user splits it (nothing was written).
            return Err(Status::NoSpace);
        }
        // Zeros to the end of its last block: the write has no partial block to read (the
        // body carries its length, so what follows it is never read).
        let mut padded = BytesMut::from(&body[..]);
        padded.resize(body.len().next_multiple_of(BLOCK_BYTES).min(object_size), 0);
        let body = padded.freeze();
        let write = Header {
            opcode: Opcode::Write,
            offset: 0,
            length: body.len() as u32,
            ..h
        };
        match apply(osd, &write, &body, version) {
            Status::Ok => Ok((Outcome::Done(previous), Some((write, body)))),
            status => Err(status),
        }
    })
    .await;
    match result {
        Ok(Outcome::Done(previous)) => (Status::Ok, previous.encode()),
        Ok(Outcome::Conflict(index)) => (
            Status::Conflict,
            Bytes::copy_from_slice(&index.to_le_bytes()),
        ),
        Err(status) => (status, Bytes::new()),
    }
}

fn bad_args(osd: &Osd, h: &Header, e: KvDecodeError) -> Status {
    tracing::debug!(osd = osd.id, object = %h.object, method = h.offset, "bad KV arguments: {e}");
    Status::Invalid
}

/// A result must fit in one reply frame (a get may name the same large value many times).
fn fits_in_reply(len: usize) -> Result<(), Status> {
    if len > MAX_PAYLOAD_BYTES as usize {
        return Err(Status::Invalid);
    }
    Ok(())
}

/// Why the table could not be read.
enum TableError {
    Store(StoreError),
    Corrupt(KvDecodeError),
}

impl From<StoreError> for TableError {
    fn from(e: StoreError) -> Self {
        TableError::Store(e)
    }
}

impl From<KvDecodeError> for TableError {
    fn from(e: KvDecodeError) -> Self {
        TableError::Corrupt(e)
    }
}

/// The reply status for a table that could not be read; a corrupt body answers Io (it is
/// never served nor rewritten).
fn table_status(osd: &Osd, obj: ObjectId, e: &TableError) -> Status {
    match e {
        TableError::Store(e) => {
            tracing::error!(osd = osd.id, object = %obj, "KV table read failed: {e}");
            status_of(e)
        }
        TableError::Corrupt(e) => {
            tracing::error!(osd = osd.id, object = %obj, "KV table is corrupt: {e}");
            Status::Io
        }
    }
}

/// The table in the local copy of `obj`; an absent object is an empty table.
fn read_table(osd: &Osd, obj: ObjectId) -> Result<KvTable, TableError> {
    if osd.store.version(obj).is_none() {
        return Ok(KvTable::default());
    }
    let object_size = osd.store.object_size() as usize;
    let first = FIRST_READ_BYTES.min(object_size);
    let mut buf = BytesMut::zeroed(first);
    osd.store.read(obj, 0, &mut buf)?;
    let body_len = KvTable::body_len(&buf, object_size)?;
    if body_len > first {
        buf.resize(body_len, 0);
        osd.store.read(obj, first as u32, &mut buf[first..])?;
    } else {
        buf.truncate(body_len);
    }
    Ok(KvTable::decode_bytes(buf.freeze())?)
}

/// [`read_table`] awaited.
async fn read_table_async(osd: &Osd, obj: ObjectId) -> Result<KvTable, TableError> {
    if osd.store.version(obj).is_none() {
        return Ok(KvTable::default());
    }
    let object_size = osd.store.object_size() as usize;
    let first = FIRST_READ_BYTES.min(object_size);
    let mut buf = BytesMut::zeroed(first);
    osd.store.read_async(obj, 0, &mut buf).await?;
    let body_len = KvTable::body_len(&buf, object_size)?;
    if body_len > first {
        buf.resize(body_len, 0);
        osd.store
            .read_async(obj, first as u32, &mut buf[first..])
            .await?;
    } else {
        buf.truncate(body_len);
    }
    Ok(KvTable::decode_bytes(buf.freeze())?)
}

/// The table for a read-only method. Reads do not take the PG lock, so one that overlaps an
/// update may see parts of two bodies (the crc catches it): a body that does not decode is
/// read again under the lock, where no update is in progress, before it is called corrupt.
async fn read_table_consistent(osd: &Osd, h: &Header) -> Result<KvTable, Status> {
    match read_table_async(osd, h.object).await {
        Ok(table) => Ok(table),
        Err(TableError::Corrupt(_)) => {
            let _pg = osd.pgs.shard(h.pg).lock().expect("pg shard lock");
            read_table(osd, h.object).map_err(|e| table_status(osd, h.object, &e))
        }
        Err(e) => Err(table_status(osd, h.object, &e)),
    }
}

/// The value of each key, in order.
fn lookup<'a>(table: &KvTable, keys: impl IntoIterator<Item = &'a Bytes>) -> KvValues {
    KvValues {
        values: keys
            .into_iter()
            .map(|k| table.entries.get(k).cloned())
            .collect(),
    }
}

/// The index of the first edit whose condition does not hold against `table` (all are
/// checked against the table as it is before the batch).
fn first_conflict(table: &KvTable, edits: &[KvEdit]) -> Option<u32> {
    edits
        .iter()
        .position(|e| !e.cond.holds(table.entries.get(&e.key), e.value.as_ref()))
        .map(|i| i as u32)
}

/// Apply edits in order (a later edit of the same key wins).
fn apply_edits(table: &mut KvTable, edits: impl IntoIterator<Item = KvEdit>) {
    for e in edits {
        match e.value {
            Some(v) => table.entries.insert(e.key, v),
            None => table.entries.remove(&e.key),
        };
    }
}

/// One page of a listing: keys after `start_after` with `prefix`, ascending, at most
/// `max_entries`, at most `max_bytes` of keys and values unless one entry alone is larger
/// (a page is never empty while entries remain), and never more than one reply frame holds.
fn page(table: &KvTable, args: &KvList) -> KvPage {
    // Keys with the prefix are one contiguous run; start at the later of the two bounds.
    let lower = if args.prefix > args.start_after {
        Bound::Included(&args.prefix[..])
    } else {
        Bound::Excluded(&args.start_after[..])
    };
    let mut matching = table
        .entries
        .range::<[u8], _>((lower, Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(&args.prefix));
    let mut out = KvPage::default();
    let (mut data_bytes, mut frame_bytes) = (0usize, KV_PAGE_HEADER_BYTES);
    for (k, v) in matching.by_ref() {
        let size = k.len() + v.len();
        let over_bytes = data_bytes + size > args.max_bytes as usize
            || frame_bytes + KV_PAGE_ENTRY_OVERHEAD_BYTES + size > MAX_PAYLOAD_BYTES as usize;
        let full = out.entries.len() >= args.max_entries as usize
            || (over_bytes && !out.entries.is_empty());
        if full {
            out.truncated = true;
            break;
        }
        data_bytes += size;
        frame_bytes += KV_PAGE_ENTRY_OVERHEAD_BYTES + size;
        out.entries.push((k.clone(), v.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use basalt_proto::kv::KvCond;

    fn table(keys: &[&str]) -> KvTable {
        KvTable {
            entries: keys
                .iter()
                .map(|k| (Bytes::from(k.to_string()), Bytes::from(format!("v-{k}"))))
                .collect(),
        }
    }

    fn list(start_after: &str, prefix: &str, max_entries: u32, max_bytes: u32) -> KvList {
        KvList {
            start_after: Bytes::from(start_after.to_string()),
            prefix: Bytes::from(prefix.to_string()),
            max_entries,
            max_bytes,
        }
    }

    fn keys(p: &KvPage) -> Vec<&[u8]> {
        p.entries.iter().map(|(k, _)| &k[..]).collect()
    }

    /// Goal: a listing honours start_after and prefix in every order of the two bounds.
    #[test]
    fn page_bounds() {
        let t = table(&["a", "b/1", "b/2", "b/3", "c"]);
        let p = page(&t, &list("", "", 100, u32::MAX));
        assert_eq!(keys(&p), vec![&b"a"[..], b"b/1", b"b/2", b"b/3", b"c"]);
        assert!(!p.truncated);
        let p = page(&t, &list("", "b/", 100, u32::MAX));
        assert_eq!(keys(&p), vec![&b"b/1"[..], b"b/2", b"b/3"]);
        let p = page(&t, &list("b/1", "b/", 100, u32::MAX));
        assert_eq!(keys(&p), vec![&b"b/2"[..], b"b/3"]);
        let p = page(&t, &list("a", "b/", 100, u32::MAX));
        assert_eq!(keys(&p), vec![&b"b/1"[..], b"b/2", b"b/3"]);
        let p = page(&t, &list("b/3", "b/", 100, u32::MAX));
        assert!(p.entries.is_empty() && !p.truncated);
        let p = page(&t, &list("c", "b/", 100, u32::MAX));
        assert!(p.entries.is_empty() && !p.truncated);
        let p = page(&t, &list("", "z", 100, u32::MAX));
        assert!(p.entries.is_empty() && !p.truncated);
    }

    /// Goal: max_entries and max_bytes cut a page and set truncated only when more match; a
    /// page holds one entry even when it alone is over max_bytes.
    #[test]
    fn page_limits() {
        let t = table(&["a", "b", "c"]);
        let p = page(&t, &list("", "", 2, u32::MAX));
        assert_eq!(keys(&p), vec![&b"a"[..], b"b"]);
        assert!(p.truncated);
        let p = page(&t, &list("b", "", 1, u32::MAX));
        assert_eq!(keys(&p), vec![&b"c"[..]]);
        assert!(!p.truncated, "nothing follows c");
        // Each entry is 1 + 3 bytes of key and value.
        let p = page(&t, &list("", "", 100, 8));
        assert_eq!(keys(&p), vec![&b"a"[..], b"b"]);
        assert!(p.truncated);
        let p = page(&t, &list("", "", 100, 0));
        assert_eq!(keys(&p), vec![&b"a"[..]]);
        assert!(p.truncated);
    }

    /// Goal: conditions are all-or-nothing against the table before the batch, previous
    /// values are those before the batch, and edits apply in order.
    #[test]
    fn edits_and_conditions() {
        let mut t = table(&["a"]);
        let put = |k: &'static str, v: &'static str| KvEdit::put(k, v);
        let edits = vec![
            put("b", "1").when(KvCond::Absent),
            put("a", "x").when(KvCond::Equals(Bytes::from_static(b"v-a"))),
            put("b", "2"),
            KvEdit::delete("zz"),
        ];
        assert_eq!(first_conflict(&t, &edits), None);
        let prev = lookup(&t, edits.iter().map(|e| &e.key));
        assert_eq!(
            prev.values,
            vec![None, Some(Bytes::from_static(b"v-a")), None, None]
        );
        apply_edits(&mut t, edits);
        assert_eq!(t.entries.len(), 2);
        assert_eq!(t.entries[&b"b"[..]], Bytes::from_static(b"2"));
        assert_eq!(t.entries[&b"a"[..]], Bytes::from_static(b"x"));
        // The second edit fails: index 1, and the caller applies nothing.
        let edits = vec![put("c", "1"), put("a", "y").when(KvCond::Absent)];
        assert_eq!(first_conflict(&t, &edits), Some(1));
        // A retried put-if-absent of the value already there holds.
        let edits = vec![put("a", "x").when(KvCond::Absent)];
        assert_eq!(first_conflict(&t, &edits), None);
    }
}
