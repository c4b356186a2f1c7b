//! The model of acknowledged data a simulated run is checked against.
//!
//! Every 4 KiB block of the volume has one writer, so its history is a sequence: each write
//! (or trim) appends a value. A read may return the newest acknowledged value or any value
//! written after it (a write still in flight, or one that failed and may or may not have
//! landed), never an older one and never anything else.
//!
//! What Basalt promises (docs/design.md, "What survives"): a value acknowledged before a
//! successful flush (or with FUA) is never lost. An acknowledged value not yet flushed lives
//! in the memory of the OSDs that applied it: it survives as long as one of those that were
//! complete copies (or holders) of its PG keeps running and stays in the PG's acting set. Once every
//! such *holder* crashed (kill or power cut) or left the acting set, reads may go back to the
//! newest durable value, no further.

use bytes::{Bytes, BytesMut};

/// Block size of the model.
pub const BLOCK: usize = 4096;

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    Zero,
    /// The data of the write with this sequence number (unique per block).
    Data(u64),
}

/// One block's history.
#[derive(Debug)]
struct BlockHistory {
    values: Vec<Value>,
    /// Index of the newest acknowledged value (the oldest value a read may return).
    acked: usize,
    /// Index of the newest value known durable.
    durable: usize,
    /// OSDs holding the acknowledged value in memory (bit per OSD id).
    holders: u64,
}

/// A set of OSDs, one bit per id (ids below 64).
pub type OsdSet = u64;

/// Every block of the volume.
pub struct Model {
    blocks: Vec<BlockHistory>,
    next_seq: u64,
}

/// The bytes a write of `seq` puts in `block`: its identity, then a pattern of both.
pub fn block_data(block: u64, seq: u64) -> Bytes {
    let mut b = BytesMut::with_capacity(BLOCK);
    b.extend_from_slice(&block.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    let mut x = block.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq;
    while b.len() < BLOCK {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        b.extend_from_slice(&x.to_le_bytes());
    }
    b.freeze()
}

/// What a read of `block` returned: a value, or bytes no write ever put there.
pub fn decode_block(block: u64, data: &[u8]) -> Result<Value, String> {
    if data.iter().all(|&b| b == 0) {
        return Ok(Value::Zero);
    }
    let id = u64::from_le_bytes(data[0..8].try_into().expect("8 bytes"));
    let seq = u64::from_le_bytes(data[8..16].try_into().expect("8 bytes"));
    if id == block && data == &block_data(block, seq)[..] {
        return Ok(Value::Data(seq));
    }
    Err(format!(
        "block {block} holds bytes no write produced (header says block {id}, write {seq})"
    ))
}

impl BlockHistory {
    /// With no holder left, the acknowledged value may be lost: back to the durable one.
    fn relax_if_unheld(&mut self) {
        if self.holders == 0 && self.acked > self.durable {
            self.acked = self.durable;
        }
    }
}

impl Model {
    /// A volume of `blocks` zero blocks.
    pub fn new(blocks: u64) -> Model {
        Model {
            blocks: (0..blocks)
                .map(|_| BlockHistory {
                    values: vec![Value::Zero],
                    acked: 0,
                    durable: 0,
                    holders: 0,
                })
                .collect(),
            next_seq: 1,
        }
    }

    /// Number of blocks.
    pub fn len(&self) -> u64 {
        self.blocks.len() as u64
    }

    /// Is the volume empty?
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// A write (or a trim, `zero`) of `blocks` is about to be sent: record its values and
    /// return them with their history positions.
    pub fn begin_write(
        &mut self,
        blocks: std::ops::Range<u64>,
        zero: bool,
    ) -> Vec<(u64, usize, Value)> {
        let mut out = Vec::new();
        for b in blocks {
            let value = if zero {
                Value::Zero
            } else {
                let s = self.next_seq;
                self.next_seq += 1;
                Value::Data(s)
            };
            let h = &mut self.blocks[b as usize];
            h.values.push(value);
            out.push((b, h.values.len() - 1, value));
        }
        out
    }

    /// The write was acknowledged (durable too when `fua`); `holders` applied it.
    pub fn acked(&mut self, written: &[(u64, usize, Value)], fua: bool, holders: OsdSet) {
        for &(b, at, _) in written {
            let h = &mut self.blocks[b as usize];
            if at > h.acked {
                h.acked = at;
                h.holders = holders;
            }
            if fua {
                h.durable = h.durable.max(at);
            }
            h.relax_if_unheld();
        }
    }

    /// `osd` crashed (process killed or power cut): it no longer holds anything unflushed.
    pub fn crashed(&mut self, osd: u32) {
        for h in &mut self.blocks {
            h.holders &= !(1u64 << osd);
            h.relax_if_unheld();
        }
    }

    /// Only `acting` serve the PG of `blocks` now: an OSD that left stops counting as a
    /// holder (the cluster may move on without its copy).
    pub fn only_held_by(&mut self, blocks: impl Iterator<Item = u64>, acting: OsdSet) {
        for b in blocks {
            let h = &mut self.blocks[b as usize];
            h.holders &= acting;
            h.relax_if_unheld();
        }
    }

    /// Positions acknowledged now, for a flush about to be sent.
    pub fn acked_positions(&self) -> Vec<usize> {
        self.blocks.iter().map(|h| h.acked).collect()
    }

    /// A flush sent when `positions` were acknowledged succeeded.
    pub fn flushed(&mut self, positions: &[usize]) {
        for (h, &p) in self.blocks.iter_mut().zip(positions) {
            h.durable = h.durable.max(p);
        }
    }

    /// Check a read of `block` that returned `value`.
    pub fn check_read(&self, block: u64, value: Value) -> Result<(), String> {
        let h = &self.blocks[block as usize];
        if h.values[h.acked..].contains(&value) {
            return Ok(());
        }
        let older = h.values[..h.acked].contains(&value);
        Err(format!(
            "block {block}: read {value:?}, but the newest acknowledged value is {:?} \
             (position {} of {}){}",
            h.values[h.acked],
            h.acked,
            h.values.len() - 1,
            if older {
                ": an acknowledged write was lost (an older value came back)"
            } else {
                ": a value never written"
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a read may return the acknowledged value or a later one, never an older one
    /// while a holder of it runs; once every holder crashed or left, back to the durable one
    /// and no further.
    #[test]
    fn reads_are_checked_against_acknowledged_and_durable_values() {
        let mut m = Model::new(2);
        let w1 = m.begin_write(0..1, false);
        m.acked(&w1, false, 0b111);
        let flush = m.acked_positions();
        m.flushed(&flush);
        let w2 = m.begin_write(0..1, false);
        m.acked(&w2, false, 0b111);
        let w3 = m.begin_write(0..1, false);
        assert!(m.check_read(0, w2[0].2).is_ok());
        assert!(
            m.check_read(0, w3[0].2).is_ok(),
            "an in-flight write may show"
        );
        assert!(
            m.check_read(0, w1[0].2).is_err(),
            "a lost acknowledged write passed"
        );
        assert!(m.check_read(0, Value::Data(999)).is_err());
        m.crashed(0);
        m.crashed(1);
        assert!(
            m.check_read(0, w1[0].2).is_err(),
            "osd.2 still holds w2: w1 must not show"
        );
        m.only_held_by(0..1, 0b011);
        assert!(
            m.check_read(0, w1[0].2).is_ok(),
            "no holder left: the durable value may show"
        );
        assert!(
            m.check_read(0, Value::Zero).is_err(),
            "flushed data lost passed"
        );
        assert!(m.check_read(1, Value::Zero).is_ok());
    }

    /// Goal: the block pattern names its block and write, and nothing else decodes.
    #[test]
    fn block_data_round_trips() {
        let d = block_data(5, 77);
        assert_eq!(decode_block(5, &d), Ok(Value::Data(77)));
        assert!(decode_block(6, &d).is_err());
        let mut torn = d.to_vec();
        torn[100] ^= 1;
        assert!(decode_block(5, &torn).is_err());
        assert_eq!(decode_block(5, &[0; BLOCK]), Ok(Value::Zero));
    }
}
