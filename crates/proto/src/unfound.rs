//! The MARK_UNFOUND_LOST reply (docs/design.md, "Unfound stripes"): what a PG's primary did
//! with each unfound stripe it gave up. The OSD encodes it; the client decodes it.

use crate::ids::{ObjectId, Version};
use bytes::{Buf, BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Most stripes one MARK_UNFOUND_LOST request gives up (each is read and rewritten whole:
/// the request stays well inside a client's timeout).
pub const GIVE_UP_BATCH_STRIPES: usize = 256;
/// Bytes of one entry: seven little-endian u64.
pub const GIVEN_UP_BYTES: usize = 56;
/// Bytes before the entries: u32 entries, u32 stripes still unfound.
const HEADER_BYTES: usize = 8;

/// What became of one unfound stripe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Outcome {
    /// Rewritten with the contents of the kept version.
    Kept = 0,
    /// No version decodes: rewritten with the nearest ancestor layer's data (a clone).
    Ancestor = 1,
    /// No version decodes and nothing beneath it: rewritten as zeros.
    Zeros = 2,
    /// It decodes again (an OSD holding it answered): nothing was lost.
    Found = 3,
}

impl Outcome {
    fn from_u64(v: u64) -> Option<Self> {
        Some(match v {
            0 => Self::Kept,
            1 => Self::Ancestor,
            2 => Self::Zeros,
            3 => Self::Found,
            _ => return None,
        })
    }
}

/// One stripe given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GivenUp {
    pub stripe: ObjectId,
    /// The newest committed version, abandoned (with every version above `kept`).
    pub lost: Version,
    /// The version whose contents the stripe keeps (None: none decoded).
    pub kept: Option<Version>,
    pub outcome: Outcome,
}

/// A whole MARK_UNFOUND_LOST reply.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GiveUpReply {
    pub stripes: Vec<GivenUp>,
    /// Stripes of the PG still unfound after this request (failed, or past the batch).
    pub still_unfound: u32,
}

/// A reply that does not decode.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum GiveUpDecodeError {
    #[error("MARK_UNFOUND_LOST reply of {len} bytes, expected {expected}")]
    Length { len: usize, expected: usize },
    #[error("MARK_UNFOUND_LOST reply names unknown outcome {value}")]
    Outcome { value: u64 },
}

impl GiveUpReply {
    /// The reply payload.
    pub fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(HEADER_BYTES + self.stripes.len() * GIVEN_UP_BYTES);
        out.put_u32_le(self.stripes.len() as u32);
        out.put_u32_le(self.still_unfound);
        for g in &self.stripes {
            let kept = g.kept.unwrap_or(Version::ZERO);
            for v in [
                g.stripe.inode,
                g.stripe.index,
                g.lost.epoch,
                g.lost.counter,
                kept.epoch,
                kept.counter,
                g.outcome as u64,
            ] {
                out.put_u64_le(v);
            }
        }
        out.freeze()
    }

    /// Decode a reply payload (checked: length and outcomes).
    pub fn decode(mut payload: &[u8]) -> Result<Self, GiveUpDecodeError> {
        if payload.len() < HEADER_BYTES {
            return Err(GiveUpDecodeError::Length {
                len: payload.len(),
                expected: HEADER_BYTES,
            });
        }
        let n = payload.get_u32_le() as usize;
        let still_unfound = payload.get_u32_le();
        let expected = HEADER_BYTES + n.saturating_mul(GIVEN_UP_BYTES);
        if payload.len() != n.saturating_mul(GIVEN_UP_BYTES) {
            return Err(GiveUpDecodeError::Length {
                len: payload.len() + HEADER_BYTES,
                expected,
            });
        }
        let mut stripes = Vec::with_capacity(n);
        for _ in 0..n {
            let stripe = ObjectId::new(payload.get_u64_le(), payload.get_u64_le());
            let lost = Version::new(payload.get_u64_le(), payload.get_u64_le());
            let kept = Version::new(payload.get_u64_le(), payload.get_u64_le());
            let value = payload.get_u64_le();
            let outcome = Outcome::from_u64(value).ok_or(GiveUpDecodeError::Outcome { value })?;
            stripes.push(GivenUp {
                stripe,
                lost,
                kept: (kept != Version::ZERO).then_some(kept),
                outcome,
            });
        }
        Ok(Self {
            stripes,
            still_unfound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: a reply survives encode → decode; truncated or padded payloads and unknown
    /// outcomes are refused, never misread.
    #[test]
    fn reply_roundtrips_and_bad_payloads_are_refused() {
        let reply = GiveUpReply {
            stripes: vec![
                GivenUp {
                    stripe: ObjectId::new(7, 3),
                    lost: Version::new(9, 2),
                    kept: Some(Version::new(4, 11)),
                    outcome: Outcome::Kept,
                },
                GivenUp {
                    stripe: ObjectId::new(7, 4),
                    lost: Version::new(9, 5),
                    kept: None,
                    outcome: Outcome::Zeros,
                },
            ],
            still_unfound: 3,
        };
        let bytes = reply.encode();
        assert_eq!(bytes.len(), 8 + 2 * GIVEN_UP_BYTES);
        assert_eq!(GiveUpReply::decode(&bytes), Ok(reply));
        assert!(GiveUpReply::decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(GiveUpReply::decode(&bytes[..4]).is_err());
        let mut padded = bytes.to_vec();
        padded.push(0);
        assert!(GiveUpReply::decode(&padded).is_err());
        let mut bad = bytes.to_vec();
        let at = 8 + GIVEN_UP_BYTES - 8;
        bad[at] = 9;
        assert_eq!(
            GiveUpReply::decode(&bad),
            Err(GiveUpDecodeError::Outcome { value: 9 })
        );
        // A huge count with a short payload is a length error, not an allocation.
        let mut huge = vec![0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        huge.extend_from_slice(&[0; 56]);
        assert!(GiveUpReply::decode(&huge).is_err());
    }
}
