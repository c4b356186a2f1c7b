//! Slow operations as an OSD reports them at the end of its STAT reply (docs/design.md,
//! "Data-plane wire format"): which operation, on what, where it is stuck and for how long.
//! The OSD detects them (`basalt_osd::slow`); `basalt status` decodes them from here.

use crate::ids::{ObjectId, OsdId, PgId};
use crate::Opcode;
use bytes::{BufMut, BytesMut};
use thiserror::Error;

/// Bytes of one encoded slow operation.
pub const SLOW_OP_BYTES: usize = 48;
/// Most slow operations one STAT reply carries (the oldest first are kept).
pub const SLOW_OPS_MAX: usize = 32;
/// `peer` value meaning "no peer" on the wire.
const NO_PEER: u32 = u32::MAX;
/// Flag bits of an entry.
const FLAG_IN_FLIGHT: u8 = 1;
const FLAG_REPLICA: u8 = 2;

/// Where an operation is: the stage it entered last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SlowStage {
    /// Received, its task not running yet (runtime queue).
    Queued = 1,
    /// Running, in no stage below (gates, locks, bookkeeping).
    Running = 2,
    /// Reading the volume's layer chain from the metadata store.
    LayerChain = 3,
    /// Connecting to a replica (`peer`).
    Connect = 4,
    /// Reading the local store.
    StoreRead = 5,
    /// Applying a mutation to the local store.
    StoreWrite = 6,
    /// Making the store durable: the WAL group commit and its fdatasync.
    WalFlush = 7,
    /// Waiting for a replica's acknowledgement (`peer`).
    Replica = 8,
    /// Pushing the whole object to a replica whose copy was stale (`peer`).
    Push = 9,
    /// Erasure-coded stripe I/O: reading or writing chunks at the PG's members.
    Chunks = 10,
}

impl SlowStage {
    pub fn from_u8(v: u8) -> Option<Self> {
        use SlowStage::*;
        Some(match v {
            1 => Queued,
            2 => Running,
            3 => LayerChain,
            4 => Connect,
            5 => StoreRead,
            6 => StoreWrite,
            7 => WalFlush,
            8 => Replica,
            9 => Push,
            10 => Chunks,
            _ => return None,
        })
    }

    /// The stage's name in logs, status reports and events.
    pub fn label(self) -> &'static str {
        match self {
            SlowStage::Queued => "queued",
            SlowStage::Running => "running",
            SlowStage::LayerChain => "layer chain",
            SlowStage::Connect => "connect",
            SlowStage::StoreRead => "store read",
            SlowStage::StoreWrite => "store write",
            SlowStage::WalFlush => "wal flush",
            SlowStage::Replica => "replica",
            SlowStage::Push => "push",
            SlowStage::Chunks => "chunks",
        }
    }
}

/// One slow operation of an OSD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowOp {
    /// Unique per OSD run: tells a report of the same operation from a new one.
    pub id: u64,
    pub object: ObjectId,
    pub pg: PgId,
    pub opcode: Opcode,
    /// A replica applying its primary's mutation (not a client request).
    pub replica: bool,
    pub stage: SlowStage,
    /// The OSD the stage waits on (replica, connect, push), when there is one.
    pub peer: Option<OsdId>,
    /// Time in flight: until now, or until it finished.
    pub age_ms: u64,
    /// Still in flight (false: it finished since it was found slow).
    pub in_flight: bool,
}

/// A slow-op entry that does not decode.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SlowOpError {
    #[error("slow-op list of {len} bytes: expected a count and {SLOW_OP_BYTES}-byte entries")]
    Length { len: usize },
    #[error("slow-op list of {count} entries exceeds {SLOW_OPS_MAX}")]
    TooMany { count: u32 },
    #[error("slow-op entry with unknown opcode {found}")]
    Opcode { found: u8 },
    #[error("slow-op entry with unknown stage {found}")]
    Stage { found: u8 },
}

impl SlowOp {
    /// Append the 48-byte entry: id, inode, index (u64), pool, PG index (u32), opcode,
    /// flags (bit 0 in flight, bit 1 replica), stage, a zero byte, peer (u32, all ones:
    /// none), age in ms (u64); little-endian.
    pub fn encode(&self, out: &mut BytesMut) {
        out.put_u64_le(self.id);
        out.put_u64_le(self.object.inode);
        out.put_u64_le(self.object.index);
        out.put_u32_le(self.pg.pool);
        out.put_u32_le(self.pg.index);
        out.put_u8(self.opcode as u8);
        let flags = if self.in_flight { FLAG_IN_FLIGHT } else { 0 }
            | if self.replica { FLAG_REPLICA } else { 0 };
        out.put_u8(flags);
        out.put_u8(self.stage as u8);
        out.put_u8(0);
        out.put_u32_le(self.peer.unwrap_or(NO_PEER));
        out.put_u64_le(self.age_ms);
    }

    fn decode(b: &[u8; SLOW_OP_BYTES]) -> Result<SlowOp, SlowOpError> {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let opcode = Opcode::from_u8(b[32]).ok_or(SlowOpError::Opcode { found: b[32] })?;
        let stage = SlowStage::from_u8(b[34]).ok_or(SlowOpError::Stage { found: b[34] })?;
        let peer = u32_at(36);
        Ok(SlowOp {
            id: u64_at(0),
            object: ObjectId::new(u64_at(8), u64_at(16)),
            pg: PgId {
                pool: u32_at(24),
                index: u32_at(28),
            },
            opcode,
            replica: b[33] & FLAG_REPLICA != 0,
            stage,
            peer: (peer != NO_PEER).then_some(peer),
            age_ms: u64_at(40),
            in_flight: b[33] & FLAG_IN_FLIGHT != 0,
        })
    }

    /// Where the operation is, for people: `replica osd.3`, `store write`.
    pub fn stage_text(&self) -> String {
        match self.peer {
            Some(peer) => format!("{} osd.{peer}", self.stage.label()),
            None => self.stage.label().to_string(),
        }
    }
}

/// Encode a list: a u32 count, then the entries (at most [`SLOW_OPS_MAX`]).
pub fn encode_list(ops: &[SlowOp], out: &mut BytesMut) {
    let ops = &ops[..ops.len().min(SLOW_OPS_MAX)];
    out.put_u32_le(ops.len() as u32);
    for op in ops {
        op.encode(out);
    }
}

/// Decode a list written by [`encode_list`]; an empty input is an empty list (an OSD that
/// reports none, or an older one).
pub fn decode_list(b: &[u8]) -> Result<Vec<SlowOp>, SlowOpError> {
    if b.is_empty() {
        return Ok(Vec::new());
    }
    let Some((count, rest)) = b.split_first_chunk::<4>() else {
        return Err(SlowOpError::Length { len: b.len() });
    };
    let count = u32::from_le_bytes(*count);
    if count as usize > SLOW_OPS_MAX {
        return Err(SlowOpError::TooMany { count });
    }
    if rest.len() != count as usize * SLOW_OP_BYTES {
        return Err(SlowOpError::Length { len: b.len() });
    }
    rest.chunks_exact(SLOW_OP_BYTES)
        .map(|c| SlowOp::decode(c.try_into().expect("exact chunk")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(i: u64) -> SlowOp {
        SlowOp {
            id: i,
            object: ObjectId::new(0x1234_0000_0000_0001, i),
            pg: PgId { pool: 1, index: 7 },
            opcode: Opcode::Write,
            replica: !i.is_multiple_of(2),
            stage: SlowStage::Replica,
            peer: (!i.is_multiple_of(3)).then_some(4),
            age_ms: 6_200 + i,
            in_flight: i.is_multiple_of(2),
        }
    }

    #[test]
    fn lists_round_trip() {
        // Goal: what the OSD encodes, the client decodes unchanged, for 0..=MAX entries.
        for n in [0, 1, 5, SLOW_OPS_MAX as u64] {
            let ops: Vec<_> = (0..n).map(op).collect();
            let mut out = BytesMut::new();
            encode_list(&ops, &mut out);
            assert_eq!(out.len(), 4 + ops.len() * SLOW_OP_BYTES);
            assert_eq!(decode_list(&out), Ok(ops));
        }
        assert_eq!(decode_list(&[]), Ok(Vec::new()));
    }

    #[test]
    fn bad_lists_are_refused() {
        // Goal: truncated, oversized or unknown-valued lists are errors, never a panic.
        let mut out = BytesMut::new();
        encode_list(&[op(1), op(2)], &mut out);
        assert!(matches!(
            decode_list(&out[..out.len() - 1]),
            Err(SlowOpError::Length { .. })
        ));
        assert!(matches!(
            decode_list(&out[..3]),
            Err(SlowOpError::Length { .. })
        ));
        let mut big = out.clone();
        big[..4].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(decode_list(&big), Err(SlowOpError::TooMany { count: 1000 }));
        let mut bad = out.clone();
        bad[4 + 34] = 99;
        assert_eq!(decode_list(&bad), Err(SlowOpError::Stage { found: 99 }));
        let mut bad = out;
        bad[4 + 32] = 0;
        assert_eq!(decode_list(&bad), Err(SlowOpError::Opcode { found: 0 }));
    }

    #[test]
    fn stage_text_names_the_peer() {
        assert_eq!(op(1).stage_text(), "replica osd.4");
        assert_eq!(op(3).stage_text(), "replica");
    }
}
