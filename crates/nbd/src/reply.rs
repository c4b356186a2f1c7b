//! Transmission replies: simple replies and structured reply chunks, encoded into a
//! [`Frame`] (an inline header plus a shared payload) so the hot path copies no data.

use bytes::{BufMut, Bytes, BytesMut};

use crate::export::Extent;
use crate::wire::{self, MAX_STATUS_EXTENTS};

/// Largest frame header: structured chunk header (20) plus a chunk's fixed fields (≤ 8).
const MAX_HEAD_BYTES: usize = 32;

/// One reply message ready for the wire: `head()` then `payload()`, then `more()`.
#[derive(Debug, Clone)]
pub struct Frame {
    head: [u8; MAX_HEAD_BYTES],
    head_len: u8,
    payload: Bytes,
    /// Further payload pieces, sent after `payload` (a read whose data came in pieces).
    more: Vec<Bytes>,
}

impl Frame {
    /// Does this reply report an error (a simple reply with a nonzero error, or an error
    /// chunk, whose types have the high bit set)? For the metrics.
    pub fn is_error(&self) -> bool {
        if self.head[..4] == wire::SIMPLE_REPLY_MAGIC.to_be_bytes() {
            self.head[4..8] != [0; 4]
        } else {
            self.head[6] & 0x80 != 0
        }
    }

    /// The fixed bytes (reply header and any fixed chunk fields).
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len as usize]
    }

    /// The variable bytes (read data, message, descriptors); may be empty.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// Payload pieces that follow [`Frame::payload`] on the wire (usually none).
    pub fn more(&self) -> &[Bytes] {
        &self.more
    }

    /// Payload bytes, all pieces together.
    pub fn payload_len(&self) -> usize {
        self.payload.len() + self.more.iter().map(Bytes::len).sum::<usize>()
    }

    /// Total bytes on the wire.
    pub fn wire_len(&self) -> usize {
        self.head_len as usize + self.payload_len()
    }

    fn build(fill: impl FnOnce(&mut &mut [u8]), payload: Bytes) -> Frame {
        let mut head = [0u8; MAX_HEAD_BYTES];
        let mut cursor: &mut [u8] = &mut head[..];
        fill(&mut cursor);
        let head_len = (MAX_HEAD_BYTES - cursor.len()) as u8;
        Frame {
            head,
            head_len,
            payload,
            more: Vec::new(),
        }
    }

    /// A read's reply whose data is `pieces` in order: a simple reply, or one final
    /// `OFFSET_DATA` chunk at `offset` when structured replies were negotiated. `pieces`
    /// must hold at least one byte in all.
    pub fn read_data(handle: u64, structured: bool, offset: u64, pieces: Vec<Bytes>) -> Frame {
        let mut pieces = pieces.into_iter().filter(|p| !p.is_empty());
        let first = pieces.next().unwrap_or_default();
        let mut frame = if structured {
            Frame::offset_data(handle, offset, first)
        } else {
            Frame::simple(handle, 0, first)
        };
        frame.more = pieces.collect();
        if structured {
            // The chunk length covers every piece.
            let len = 8 + frame.payload_len() as u32;
            frame.head[16..20].copy_from_slice(&len.to_be_bytes());
        }
        frame
    }

    /// A simple reply: magic, error, handle; `data` follows only for a successful read.
    pub fn simple(handle: u64, errno: u32, data: Bytes) -> Frame {
        debug_assert!(
            errno == 0 || data.is_empty(),
            "an error reply carries no data"
        );
        Frame::build(
            |b| {
                b.put_u32(wire::SIMPLE_REPLY_MAGIC);
                b.put_u32(errno);
                b.put_u64(handle);
            },
            data,
        )
    }

    /// The final `OFFSET_DATA` chunk of a structured read: all of `data` at `offset`.
    pub fn offset_data(handle: u64, offset: u64, data: Bytes) -> Frame {
        debug_assert!(!data.is_empty(), "OFFSET_DATA must carry at least one byte");
        let len = 8 + data.len() as u32;
        Frame::build(
            |b| {
                chunk_header(b, wire::REPLY_TYPE_OFFSET_DATA, handle, len);
                b.put_u64(offset);
            },
            data,
        )
    }

    /// The empty final chunk (`NONE`): success without content.
    pub fn none(handle: u64) -> Frame {
        Frame::build(
            |b| chunk_header(b, wire::REPLY_TYPE_NONE, handle, 0),
            Bytes::new(),
        )
    }

    /// A final `ERROR` chunk with a message for humans (cut to the 4096-byte string limit).
    pub fn error(handle: u64, errno: u32, message: Bytes) -> Frame {
        debug_assert!(errno != 0, "an error chunk needs a nonzero error");
        let message = message.slice(..message.len().min(wire::MAX_STRING_BYTES));
        let msg_len = message.len() as u16;
        Frame::build(
            |b| {
                chunk_header(b, wire::REPLY_TYPE_ERROR, handle, 6 + msg_len as u32);
                b.put_u32(errno);
                b.put_u16(msg_len);
            },
            message,
        )
    }

    /// A final `BLOCK_STATUS` chunk for context `context_id`; `descriptors` comes from
    /// [`encode_extents`].
    pub fn block_status(handle: u64, context_id: u32, descriptors: Bytes) -> Frame {
        debug_assert!(!descriptors.is_empty() && descriptors.len() & 7 == 0);
        let len = 4 + descriptors.len() as u32;
        Frame::build(
            |b| {
                chunk_header(b, wire::REPLY_TYPE_BLOCK_STATUS, handle, len);
                b.put_u32(context_id);
            },
            descriptors,
        )
    }
}

/// Structured chunk header; every chunk this server sends is the final one of its reply.
fn chunk_header(b: &mut &mut [u8], kind: u16, handle: u64, len: u32) {
    b.put_u32(wire::STRUCTURED_REPLY_MAGIC);
    b.put_u16(wire::REPLY_FLAG_DONE);
    b.put_u16(kind);
    b.put_u64(handle);
    b.put_u32(len);
}

/// Encode `base:allocation` descriptors for a request of `len` bytes from a device's extents.
///
/// The result obeys the protocol whatever the device returned: zero-length extents are
/// dropped, neighbours with the same status are merged, the total never exceeds `len`, at
/// most [`MAX_STATUS_EXTENTS`] descriptors (one with `req_one`) are sent, and at least one
/// is: a device that described nothing gets one descriptor of status 0 ("allocated,
/// contents unknown"), which is always safe to report.
pub fn encode_extents(extents: &[Extent], len: u32, req_one: bool) -> Bytes {
    let limit = if req_one { 1 } else { MAX_STATUS_EXTENTS };
    let mut out = BytesMut::with_capacity(8 * extents.len().clamp(1, limit));
    let mut left = len as u64;
    let mut pending: Option<(u64, u32)> = None;
    let mut count = 0;
    for e in extents {
        if left == 0 {
            break;
        }
        let n = e.length.min(left);
        if n == 0 {
            continue;
        }
        let status = (e.hole as u32 * wire::STATE_HOLE) | (e.zero as u32 * wire::STATE_ZERO);
        match pending {
            Some((plen, pstatus)) if pstatus == status => pending = Some((plen + n, status)),
            Some((plen, pstatus)) => {
                out.put_u32(plen as u32);
                out.put_u32(pstatus);
                count += 1;
                if count == limit {
                    pending = None;
                    break;
                }
                pending = Some((n, status));
            }
            None => pending = Some((n, status)),
        }
        left -= n;
    }
    if let Some((plen, pstatus)) = pending {
        out.put_u32(plen as u32);
        out.put_u32(pstatus);
    }
    if out.is_empty() {
        out.put_u32(len);
        out.put_u32(0);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(frame: &Frame) -> Vec<u8> {
        let mut out = frame.head().to_vec();
        out.extend_from_slice(frame.payload());
        for piece in frame.more() {
            out.extend_from_slice(piece);
        }
        out
    }

    #[test]
    fn read_data_in_pieces_is_one_reply() {
        // Goal: a read whose data comes in pieces goes out as exactly the bytes of one
        // reply holding all of it, structured (chunk length covers every piece) or simple.
        let pieces = vec![
            Bytes::from_static(b"abc"),
            Bytes::new(),
            Bytes::from_static(b"defgh"),
        ];
        let joined = Frame::offset_data(7, 4096, Bytes::from_static(b"abcdefgh"));
        let split = Frame::read_data(7, true, 4096, pieces.clone());
        assert_eq!(wire(&split), wire(&joined));
        assert_eq!(split.wire_len(), joined.wire_len());
        assert_eq!(split.payload_len(), 8);
        let simple = Frame::read_data(9, false, 4096, pieces);
        assert_eq!(
            wire(&simple),
            wire(&Frame::simple(9, 0, Bytes::from_static(b"abcdefgh")))
        );
    }

    fn ext(length: u64, hole: bool, zero: bool) -> Extent {
        Extent { length, hole, zero }
    }

    fn decode(b: &[u8]) -> Vec<(u32, u32)> {
        b.chunks(8)
            .map(|c| {
                let l = u32::from_be_bytes(c[0..4].try_into().unwrap());
                let s = u32::from_be_bytes(c[4..8].try_into().unwrap());
                (l, s)
            })
            .collect()
    }

    #[test]
    fn frames_have_the_documented_layout() {
        // Goal: header bytes match the protocol layout for each frame kind.
        let f = Frame::simple(0x1122, 22, Bytes::new());
        assert_eq!(
            f.head(),
            &[0x67, 0x44, 0x66, 0x98, 0, 0, 0, 22, 0, 0, 0, 0, 0, 0, 0x11, 0x22]
        );
        let f = Frame::offset_data(9, 4096, Bytes::from_static(b"abc"));
        assert_eq!(f.head().len(), 28);
        assert_eq!(&f.head()[0..8], &[0x66, 0x8e, 0x33, 0xef, 0, 1, 0, 1]);
        assert_eq!(&f.head()[16..20], &11u32.to_be_bytes());
        assert_eq!(f.wire_len(), 31);
        let f = Frame::error(9, 5, Bytes::from_static(b"boom"));
        assert_eq!(&f.head()[6..8], &0x8001u16.to_be_bytes());
        assert_eq!(&f.head()[16..20], &10u32.to_be_bytes());
        assert_eq!(&f.head()[20..26], &[0, 0, 0, 5, 0, 4]);
        assert_eq!(Frame::none(1).head().len(), 20);
    }

    #[test]
    fn extents_are_merged_clipped_and_never_empty() {
        // Goal: descriptors obey the protocol whatever the device returns.
        let e = [
            ext(10, true, true),
            ext(0, false, false),
            ext(5, true, true),
            ext(100, false, false),
        ];
        assert_eq!(
            decode(&encode_extents(&e, 50, false)),
            vec![(15, 3), (35, 0)]
        );
        assert_eq!(decode(&encode_extents(&e, 50, true)), vec![(15, 3)]);
        assert_eq!(decode(&encode_extents(&[], 512, false)), vec![(512, 0)]);
        assert_eq!(
            decode(&encode_extents(&[ext(1 << 40, false, true)], 7, true)),
            vec![(7, 2)]
        );
    }

    #[test]
    fn extent_count_is_bounded() {
        // Goal: a device returning a million alternating extents yields at most the cap.
        let many: Vec<_> = (0..1_000_000).map(|i| ext(1, i % 2 == 0, false)).collect();
        let d = decode(&encode_extents(&many, u32::MAX, false));
        assert_eq!(d.len(), MAX_STATUS_EXTENTS);
        assert!(d.iter().all(|&(l, _)| l == 1));
    }
}
