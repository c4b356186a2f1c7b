//! Requests on single cluster objects, for clients that lay out their own data (the S3
//! gateway): plain object reads and writes, and the KV table object class.
//!
//! Each request goes to the primary of the object's PG through [`Cluster::object_request`],
//! so it is retried across failovers like volume I/O. The object's pool is the one its inode
//! names (`basalt_proto::inode_pool`).

use crate::cluster::Cluster;
use crate::error::ClientError;
use basalt_placement::{ClusterMap, MapError};
use basalt_proto::kv::{
    KvDecodeError, KvEdit, KvGet, KvList, KvMethod, KvPage, KvStat, KvUpdate, KvValues,
};
use basalt_proto::{inode_pool, Flags, Header, ObjectId, Opcode, PgId, MAX_PAYLOAD_BYTES};
use bytes::Bytes;

/// A request header for one object; the PG and map epoch are set per attempt.
pub(crate) fn object_header(
    opcode: Opcode,
    obj: ObjectId,
    offset: u32,
    length: u32,
    flags: u16,
) -> Header {
    let mut h = Header::request(opcode, 0, obj);
    h.offset = offset;
    h.length = length;
    h.flags = Flags(flags);
    h
}

/// The header flags of a mutation with or without FUA.
pub(crate) fn fua_flags(fua: bool) -> u16 {
    if fua {
        Flags::FUA
    } else {
        0
    }
}

fn payload_fits(len: usize, what: &str) -> Result<u32, ClientError> {
    if len > MAX_PAYLOAD_BYTES as usize {
        return Err(ClientError::Invalid {
            reason: format!("{what} of {len} bytes exceeds one request ({MAX_PAYLOAD_BYTES})"),
        });
    }
    Ok(len as u32)
}

fn invalid_args(e: KvDecodeError) -> ClientError {
    ClientError::Invalid {
        reason: format!("KV arguments: {e}"),
    }
}

fn bad_result(e: KvDecodeError) -> ClientError {
    ClientError::BadReply {
        reason: format!("KV result: {e}"),
    }
}

impl Cluster {
    /// The PG of `obj` under the current map (its pool is the one its inode names).
    pub fn pg_of(&self, obj: ObjectId) -> Result<PgId, ClientError> {
        let map = self.map();
        let pool = inode_pool(obj.inode);
        let spec = map.pools.get(&pool).ok_or(MapError::NoSuchPool { pool })?;
        Ok(ClusterMap::pg_of(spec, obj))
    }

    /// Send one request on `obj` to its primary (retried across map changes); the reply's
    /// payload.
    async fn on_object(&self, header: Header, payload: Bytes) -> Result<Bytes, ClientError> {
        let pg = self.pg_of(header.object)?;
        Ok(self.object_request(pg, header, payload).await?.payload)
    }

    /// Write `data` at `offset` of `obj`; with `fua` it is durable when this returns. The
    /// range must lie inside one object (the pool's object size) and `data` fit in one
    /// request.
    pub async fn write_object(
        &self,
        obj: ObjectId,
        offset: u32,
        data: Bytes,
        fua: bool,
    ) -> Result<(), ClientError> {
        let len = payload_fits(data.len(), "object write")?;
        let h = object_header(Opcode::Write, obj, offset, len, fua_flags(fua));
        self.on_object(h, data).await?;
        Ok(())
    }

    /// Read `len` bytes at `offset` of `obj`; an absent object or a hole reads as zeros.
    pub async fn read_object(
        &self,
        obj: ObjectId,
        offset: u32,
        len: u32,
    ) -> Result<Bytes, ClientError> {
        payload_fits(len as usize, "object read")?;
        let data = self
            .on_object(
                object_header(Opcode::Read, obj, offset, len, 0),
                Bytes::new(),
            )
            .await?;
        if data.len() != len as usize {
            return Err(ClientError::BadReply {
                reason: format!("read of {len} bytes returned {}", data.len()),
            });
        }
        Ok(data)
    }

    /// Remove `obj` (nothing happens when it is absent).
    pub async fn delete_object(&self, obj: ObjectId) -> Result<(), ClientError> {
        self.on_object(object_header(Opcode::Delete, obj, 0, 0, 0), Bytes::new())
            .await?;
        Ok(())
    }

    /// Call a KV table method on `obj` with encoded arguments; the encoded result.
    async fn kv_call(
        &self,
        obj: ObjectId,
        method: KvMethod,
        args: Bytes,
        flags: u16,
    ) -> Result<Bytes, ClientError> {
        payload_fits(args.len(), "KV arguments")?;
        let h = object_header(Opcode::Call, obj, method as u32, 0, flags);
        self.on_object(h, args).await
    }

    /// Apply `edits` to the KV table in `obj` atomically, in order, if every condition holds
    /// against the table as it was before the batch; returns the value each edit's key held
    /// before the batch. A failing condition applies nothing and returns
    /// [`ClientError::KvConflict`] with the index of the first failing edit. A table that
    /// would outgrow the object answers `Status::NoSpace`. With `fua` the new table is
    /// durable when this returns.
    ///
    /// Requests are retried after failovers, so an update may be applied twice: `Absent`
    /// conditions are retry-safe (they also hold when the key already holds the new value,
    /// so two writers of the same value both succeed), `Equals` conditions are not (the retry
    /// conflicts with the first attempt's value).
    pub async fn kv_update(
        &self,
        obj: ObjectId,
        edits: Vec<KvEdit>,
        fua: bool,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        let args = KvUpdate { edits };
        args.validate().map_err(invalid_args)?;
        let count = args.edits.len();
        let reply = self
            .kv_call(obj, KvMethod::Update, args.encode(), fua_flags(fua))
            .await?;
        let previous = KvValues::decode_bytes(reply).map_err(bad_result)?;
        check_count(previous.values.len(), count)?;
        Ok(previous.values)
    }

    /// The value of each key in the KV table in `obj` (None: absent), in order.
    pub async fn kv_get(
        &self,
        obj: ObjectId,
        keys: Vec<Bytes>,
    ) -> Result<Vec<Option<Bytes>>, ClientError> {
        let args = KvGet { keys };
        args.validate().map_err(invalid_args)?;
        let reply = self.kv_call(obj, KvMethod::Get, args.encode(), 0).await?;
        let values = KvValues::decode_bytes(reply).map_err(bad_result)?;
        check_count(values.values.len(), args.keys.len())?;
        Ok(values.values)
    }

    /// How many entries the KV table in `obj` holds and the bytes of its body.
    pub async fn kv_stat(&self, obj: ObjectId) -> Result<KvStat, ClientError> {
        let reply = self.kv_call(obj, KvMethod::Stat, Bytes::new(), 0).await?;
        KvStat::decode(&reply).map_err(bad_result)
    }

    /// One page of the KV table in `obj`: keys after `args.start_after` that start with
    /// `args.prefix`, ascending, at most `args.max_entries` (at least 1) and `args.max_bytes`
    /// of keys and values (but at least one entry). Continue from the last key while the page
    /// says `truncated`.
    pub async fn kv_list(&self, obj: ObjectId, args: KvList) -> Result<KvPage, ClientError> {
        args.validate().map_err(invalid_args)?;
        if args.max_entries == 0 {
            return Err(ClientError::Invalid {
                reason: "KV list with max_entries 0".into(),
            });
        }
        let reply = self.kv_call(obj, KvMethod::List, args.encode(), 0).await?;
        KvPage::decode_bytes(reply).map_err(bad_result)
    }
}

fn check_count(got: usize, expected: usize) -> Result<(), ClientError> {
    if got != expected {
        return Err(ClientError::BadReply {
            reason: format!("KV result holds {got} values for {expected} keys"),
        });
    }
    Ok(())
}
