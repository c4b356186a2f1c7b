//! Transmission requests: pure decoding of the 28-byte header and validation against what
//! was negotiated, yielding either a typed [`Command`] or the error code to answer with.

use thiserror::Error;

use crate::wire;

/// Bytes of a request header: magic 4, flags 2, type 2, handle 8, offset 8, length 4.
pub const REQUEST_HEADER_LEN: usize = 28;

/// A request header as sent by the client, not yet validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags (`CMD_FLAG_*`).
    pub flags: u16,
    /// Command type (`CMD_*`).
    pub kind: u16,
    /// Opaque cookie echoed in the reply.
    pub handle: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Byte length (of the payload too, for a write).
    pub length: u32,
}

/// Why a header could not be decoded; fatal, since the stream can no longer be framed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RequestError {
    /// The header did not start with `NBD_REQUEST_MAGIC`.
    #[error("bad request magic {0:#x}")]
    BadMagic(u32),
}

/// What was negotiated for this connection; requests are checked against it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    /// Export size in bytes.
    pub size: u64,
    /// Transmission flags sent to the client.
    pub flags: u16,
    /// Structured replies were negotiated.
    pub structured: bool,
    /// `base:allocation` was selected for this export.
    pub block_status: bool,
    /// The device can honour `FAST_ZERO` (otherwise such requests get `ENOTSUP`).
    pub fast_zero: bool,
}

/// A validated request. Ranges (`offset`, `len` in bytes) lie inside the export; `fua`
/// asks for the data to be durable before the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)] // fields are described once, above
pub enum Command {
    /// Read `len` bytes at `offset`.
    Read { offset: u64, len: u32 },
    /// Write the `len`-byte payload at `offset`.
    Write { offset: u64, len: u32, fua: bool },
    /// Finish in-flight requests and close.
    Disconnect,
    /// Make acknowledged writes durable.
    Flush,
    /// Discard a range.
    Trim { offset: u64, len: u32, fua: bool },
    /// Prefetch hint.
    Cache { offset: u64, len: u32 },
    /// Zero a range; `may_trim` is false under `NO_HOLE`.
    WriteZeroes {
        offset: u64,
        len: u32,
        may_trim: bool,
        fua: bool,
    },
    /// Report `base:allocation` status; `req_one` limits the reply to one extent.
    BlockStatus {
        offset: u64,
        len: u32,
        req_one: bool,
    },
}

/// A request refused before reaching the device: the error code and a reason for humans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejection {
    /// NBD error code (`EINVAL`, `ENOSPC`, `EPERM`, `ENOTSUP`).
    pub errno: u32,
    /// Message for the structured error chunk.
    pub reason: &'static str,
}

const fn reject(errno: u32, reason: &'static str) -> Rejection {
    Rejection { errno, reason }
}

impl Request {
    /// Decode a header. Never panics; only the magic can make it fail.
    pub fn decode(buf: &[u8; REQUEST_HEADER_LEN]) -> Result<Self, RequestError> {
        let magic = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if magic != wire::REQUEST_MAGIC {
            return Err(RequestError::BadMagic(magic));
        }
        let mut handle = [0u8; 8];
        handle.copy_from_slice(&buf[8..16]);
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&buf[16..24]);
        Ok(Self {
            flags: u16::from_be_bytes([buf[4], buf[5]]),
            kind: u16::from_be_bytes([buf[6], buf[7]]),
            handle: u64::from_be_bytes(handle),
            offset: u64::from_be_bytes(offset),
            length: u32::from_be_bytes([buf[24], buf[25], buf[26], buf[27]]),
        })
    }

    /// Encode a header (used by tests and tools that act as clients).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN] {
        let mut b = [0u8; REQUEST_HEADER_LEN];
        b[0..4].copy_from_slice(&wire::REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.handle.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Bytes of payload that follow this header on the wire (a write's data), whatever the
    /// outcome of [`Request::check`]: the stream stays framed only if they are consumed.
    pub fn payload_len(&self) -> u32 {
        if self.kind == wire::CMD_WRITE {
            self.length
        } else {
            0
        }
    }

    /// Validate against the session: flags, bounds, read-only, size limits.
    ///
    /// Error codes follow the protocol: `ENOSPC` for writes past the end, `EINVAL` for other
    /// ranges past the end, unknown commands and flags, `EPERM` for writes to a read-only
    /// export. Zero-length requests are accepted as no-ops except `BLOCK_STATUS`, which must
    /// describe at least one byte.
    pub fn check(&self, s: &Session) -> Result<Command, Rejection> {
        use wire::*;
        let fua_ok = if s.flags & FLAG_SEND_FUA != 0 {
            CMD_FLAG_FUA
        } else {
            0
        };
        let allowed = fua_ok
            | match self.kind {
                CMD_READ if s.flags & FLAG_SEND_DF != 0 => CMD_FLAG_DF,
                CMD_WRITE_ZEROES if s.flags & FLAG_SEND_FAST_ZERO != 0 => {
                    CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO
                }
                CMD_WRITE_ZEROES => CMD_FLAG_NO_HOLE,
                CMD_BLOCK_STATUS => CMD_FLAG_REQ_ONE,
                _ => 0,
            };
        let (offset, len) = (self.offset, self.length);
        let fua = self.flags & CMD_FLAG_FUA != 0;
        if self.kind == CMD_DISC {
            return Ok(Command::Disconnect); // no reply exists to carry an error
        }
        if !matches!(self.kind, CMD_READ..=CMD_BLOCK_STATUS) {
            return Err(reject(EINVAL, "unknown command"));
        }
        if self.flags & !allowed != 0 {
            return Err(reject(EINVAL, "command flag not valid for this command"));
        }
        let writes = matches!(self.kind, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
        if writes && s.flags & FLAG_READ_ONLY != 0 {
            return Err(reject(EPERM, "export is read-only"));
        }
        if matches!(self.kind, CMD_READ | CMD_WRITE | CMD_CACHE) && len > MAX_BLOCK_BYTES {
            return Err(reject(EINVAL, "request larger than the maximum block size"));
        }
        let in_range = offset
            .checked_add(len as u64)
            .is_some_and(|end| end <= s.size);
        if !in_range && self.kind != CMD_FLUSH {
            return Err(match self.kind {
                CMD_WRITE | CMD_WRITE_ZEROES => reject(ENOSPC, "write past the end of the export"),
                _ => reject(EINVAL, "request past the end of the export"),
            });
        }
        Ok(match self.kind {
            CMD_READ => Command::Read { offset, len },
            CMD_WRITE => Command::Write { offset, len, fua },
            CMD_FLUSH if offset != 0 || len != 0 => {
                return Err(reject(EINVAL, "flush offset and length must be zero"))
            }
            CMD_FLUSH => Command::Flush,
            CMD_TRIM => Command::Trim { offset, len, fua },
            CMD_CACHE => Command::Cache { offset, len },
            CMD_WRITE_ZEROES => {
                if self.flags & CMD_FLAG_FAST_ZERO != 0 && !s.fast_zero {
                    return Err(reject(ENOTSUP, "fast zeroing not supported by this export"));
                }
                let may_trim = self.flags & CMD_FLAG_NO_HOLE == 0;
                Command::WriteZeroes {
                    offset,
                    len,
                    may_trim,
                    fua,
                }
            }
            CMD_BLOCK_STATUS if !s.block_status => {
                return Err(reject(EINVAL, "no metadata context was negotiated"))
            }
            CMD_BLOCK_STATUS if len == 0 => {
                return Err(reject(EINVAL, "block status of zero bytes"))
            }
            CMD_BLOCK_STATUS => Command::BlockStatus {
                offset,
                len,
                req_one: self.flags & CMD_FLAG_REQ_ONE != 0,
            },
            _ => return Err(reject(EINVAL, "unknown command")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::*;
    use proptest::prelude::*;

    const RW_FLAGS: u16 = FLAG_HAS_FLAGS
        | FLAG_SEND_FLUSH
        | FLAG_SEND_FUA
        | FLAG_SEND_TRIM
        | FLAG_SEND_WRITE_ZEROES
        | FLAG_SEND_FAST_ZERO
        | FLAG_SEND_DF;

    fn session() -> Session {
        Session {
            size: 1 << 20,
            flags: RW_FLAGS,
            structured: true,
            block_status: true,
            fast_zero: false,
        }
    }

    fn req(kind: u16, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            kind,
            handle: 7,
            offset,
            length,
        }
    }

    #[test]
    fn encode_decode_roundtrip() {
        // Goal: decode(encode(r)) == r, and a wrong magic is refused.
        let r = req(CMD_WRITE, CMD_FLAG_FUA, 4096, 512);
        assert_eq!(Request::decode(&r.encode()), Ok(r));
        let mut b = r.encode();
        b[3] ^= 0xff;
        assert!(Request::decode(&b).is_err());
    }

    #[test]
    fn range_errors_follow_the_protocol() {
        // Goal: past-end writes are ENOSPC, past-end reads/trims EINVAL, overflow too.
        let s = session();
        let e = |r: Request| r.check(&s).unwrap_err().errno;
        assert_eq!(e(req(CMD_WRITE, 0, (1 << 20) - 1, 2)), ENOSPC);
        assert_eq!(e(req(CMD_WRITE_ZEROES, 0, 1 << 20, 1)), ENOSPC);
        assert_eq!(e(req(CMD_READ, 0, 1 << 20, 1)), EINVAL);
        assert_eq!(e(req(CMD_TRIM, 0, u64::MAX, 2)), EINVAL);
        assert_eq!(e(req(CMD_BLOCK_STATUS, 0, 1 << 20, 1)), EINVAL);
        assert!(req(CMD_READ, 0, (1 << 20) - 1, 1).check(&s).is_ok());
        assert!(
            req(CMD_READ, 0, 1 << 20, 0).check(&s).is_ok(),
            "zero length at end is a no-op"
        );
    }

    #[test]
    fn flags_must_be_negotiated_and_apply() {
        // Goal: unknown flags, flags of another command, and unnegotiated flags are EINVAL.
        let mut s = session();
        let e = |s: &Session, r: Request| r.check(s).unwrap_err().errno;
        assert_eq!(e(&s, req(CMD_READ, CMD_FLAG_REQ_ONE, 0, 1)), EINVAL);
        assert_eq!(e(&s, req(CMD_READ, 1 << 9, 0, 1)), EINVAL);
        assert!(req(CMD_READ, CMD_FLAG_DF, 0, 1).check(&s).is_ok());
        s.flags &= !FLAG_SEND_DF;
        assert_eq!(e(&s, req(CMD_READ, CMD_FLAG_DF, 0, 1)), EINVAL);
        assert_eq!(
            e(&s, req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 1)),
            ENOTSUP
        );
        s.flags &= !FLAG_SEND_FAST_ZERO;
        assert_eq!(
            e(&s, req(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 1)),
            EINVAL
        );
        let z = req(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE | CMD_FLAG_FUA, 0, 8);
        let want = Command::WriteZeroes {
            offset: 0,
            len: 8,
            may_trim: false,
            fua: true,
        };
        assert_eq!(z.check(&s), Ok(want));
    }

    #[test]
    fn size_limits_and_special_commands() {
        // Goal: >32 MiB reads/writes are EINVAL but large trims pass; unknown command EINVAL;
        // block status needs a context and a nonzero length; read-only refuses writes.
        let mut s = session();
        s.size = 1 << 40;
        let e = |s: &Session, r: Request| r.check(s).unwrap_err().errno;
        assert_eq!(e(&s, req(CMD_READ, 0, 0, MAX_BLOCK_BYTES + 1)), EINVAL);
        assert_eq!(e(&s, req(CMD_WRITE, 0, 0, u32::MAX)), EINVAL);
        assert!(req(CMD_TRIM, 0, 0, u32::MAX).check(&s).is_ok());
        assert_eq!(e(&s, req(99, 0, 0, 0)), EINVAL);
        assert_eq!(e(&s, req(CMD_FLUSH, 0, 1, 0)), EINVAL);
        assert_eq!(e(&s, req(CMD_BLOCK_STATUS, 0, 0, 0)), EINVAL);
        s.block_status = false;
        assert_eq!(e(&s, req(CMD_BLOCK_STATUS, 0, 0, 1)), EINVAL);
        s.flags |= FLAG_READ_ONLY;
        assert_eq!(e(&s, req(CMD_WRITE, 0, 0, 1)), EPERM);
        assert_eq!(e(&s, req(CMD_TRIM, 0, 0, 1)), EPERM);
        assert_eq!(
            req(CMD_DISC, 0xffff, 5, 5).check(&s),
            Ok(Command::Disconnect)
        );
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            // Goal: arbitrary bytes never panic the header decoder, the validator or the
            // option decoders (CI's stand-in for the cargo-fuzz targets).
            let mut hdr = [0u8; REQUEST_HEADER_LEN];
            let n = bytes.len().min(REQUEST_HEADER_LEN);
            hdr[..n].copy_from_slice(&bytes[..n]);
            hdr[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
            let r = Request::decode(&hdr).unwrap();
            let _ = r.check(&session());
            let _ = Request::decode(&[0u8; REQUEST_HEADER_LEN]);
            for code in 0..12 {
                let _ = crate::option::parse_option(code, &bytes);
            }
            if bytes.len() >= 16 {
                let h: [u8; 16] = bytes[..16].try_into().unwrap();
                let _ = crate::option::OptionHeader::decode(&h);
            }
        }

        #[test]
        fn accepted_ranges_stay_inside_the_export(
            kind in 0u16..10, flags in any::<u16>(), offset in any::<u64>(), len in any::<u32>()
        ) {
            // Goal: whatever passes validation addresses only bytes inside the export.
            let s = session();
            if let Ok(cmd) = req(kind, flags, offset, len).check(&s) {
                let range = match cmd {
                    Command::Read { offset, len } | Command::Cache { offset, len } => Some((offset, len)),
                    Command::Write { offset, len, .. } | Command::Trim { offset, len, .. } => Some((offset, len)),
                    Command::WriteZeroes { offset, len, .. } => Some((offset, len)),
                    Command::BlockStatus { offset, len, .. } => Some((offset, len)),
                    Command::Flush | Command::Disconnect => None,
                };
                if let Some((o, l)) = range {
                    prop_assert!(o + l as u64 <= s.size);
                }
            }
        }
    }
}
