//! NBD wire constants (all big-endian on the wire) and the limits this server enforces.
//!
//! Names follow the protocol document (`doc/proto.md` of the reference implementation) with
//! the `NBD_` prefix dropped, so `OPT_GO` here is `NBD_OPT_GO` there.

/// "NBDMAGIC": first 8 bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle magic, sent by the server once and by the client before every option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Magic of every transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Magic of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can omit the 124 zero bytes after `OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks fixed newstyle.
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: omit the 124 zero bytes after `OPT_EXPORT_NAME`.
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Transmission flag: always set.
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
/// Transmission flag: the export refuses writes.
pub const FLAG_READ_ONLY: u16 = 1 << 1;
/// Transmission flag: `CMD_FLUSH` is understood.
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
/// Transmission flag: `CMD_FLAG_FUA` is understood.
pub const FLAG_SEND_FUA: u16 = 1 << 3;
/// Transmission flag: `CMD_TRIM` is understood.
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
/// Transmission flag: `CMD_WRITE_ZEROES` and `CMD_FLAG_NO_HOLE` are understood.
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Transmission flag: `CMD_FLAG_DF` is understood (only with structured replies).
pub const FLAG_SEND_DF: u16 = 1 << 7;
/// Transmission flag: flush and FUA are visible across every connection to the export.
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
/// Transmission flag: `CMD_CACHE` is understood.
pub const FLAG_SEND_CACHE: u16 = 1 << 10;
/// Transmission flag: `CMD_FLAG_FAST_ZERO` is understood.
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

/// Option: choose an export and enter transmission (no error reply possible).
pub const OPT_EXPORT_NAME: u32 = 1;
/// Option: end the negotiation.
pub const OPT_ABORT: u32 = 2;
/// Option: list exports.
pub const OPT_LIST: u32 = 3;
/// Option: start TLS (answered per the server's [`crate::option::TlsMode`]).
pub const OPT_STARTTLS: u32 = 5;
/// Option: describe an export.
pub const OPT_INFO: u32 = 6;
/// Option: describe an export and enter transmission.
pub const OPT_GO: u32 = 7;
/// Option: use structured replies.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Option: list metadata contexts.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Option: select metadata contexts.
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option reply: success / end of a list.
pub const REP_ACK: u32 = 1;
/// Option reply: one export of `OPT_LIST`.
pub const REP_SERVER: u32 = 2;
/// Option reply: one information item of `OPT_INFO`/`OPT_GO`.
pub const REP_INFO: u32 = 3;
/// Option reply: one metadata context.
pub const REP_META_CONTEXT: u32 = 4;
/// Option error: unknown option.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// Option error: forbidden by policy.
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// Option error: syntactically or semantically invalid.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// Option error: the server refuses this option until TLS is initiated (FORCEDTLS mode).
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// Option error: no such export.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
/// Option error: the server is shutting down.
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
/// Option error: request or reply too large.
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

/// Information item: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// Information item: canonical name.
pub const INFO_NAME: u16 = 1;
/// Information item: human description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Information item: block size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Command: read.
pub const CMD_READ: u16 = 0;
/// Command: write (payload follows the header).
pub const CMD_WRITE: u16 = 1;
/// Command: disconnect (no reply).
pub const CMD_DISC: u16 = 2;
/// Command: flush.
pub const CMD_FLUSH: u16 = 3;
/// Command: trim (discard).
pub const CMD_TRIM: u16 = 4;
/// Command: prefetch hint.
pub const CMD_CACHE: u16 = 5;
/// Command: write zeroes.
pub const CMD_WRITE_ZEROES: u16 = 6;
/// Command: block status.
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Command flag: force unit access.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (`WRITE_ZEROES`): do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag (`READ`): reply with at most one content chunk.
pub const CMD_FLAG_DF: u16 = 1 << 2;
/// Command flag (`BLOCK_STATUS`): one extent per context.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// Command flag (`WRITE_ZEROES`): fail with `ENOTSUP` unless zeroing is fast.
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

/// Structured reply flag: last chunk of the reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Structured chunk: empty final chunk.
pub const REPLY_TYPE_NONE: u16 = 0;
/// Structured chunk: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Structured chunk: block status descriptors for one context.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Structured chunk: error with a message.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

/// `base:allocation` status bit: the extent is a hole.
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation` status bit: the extent reads as zeroes.
pub const STATE_ZERO: u32 = 1 << 1;

/// The only metadata context this server knows.
pub const BASE_ALLOCATION: &str = "base:allocation";
/// Context id handed out for `base:allocation` (ids are opaque to clients; 0 is avoided).
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Error code: operation not permitted (write to a read-only export).
pub const EPERM: u32 = 1;
/// Error code: I/O error.
pub const EIO: u32 = 5;
/// Error code: invalid argument.
pub const EINVAL: u32 = 22;
/// Error code: no space (write past the end).
pub const ENOSPC: u32 = 28;
/// Error code: value too large.
pub const EOVERFLOW: u32 = 75;
/// Error code: operation not supported (fast zero refused).
pub const ENOTSUP: u32 = 95;
/// Error code: the server is shutting down.
pub const ESHUTDOWN: u32 = 108;

/// Advertised minimum block size. 1, the protocol default: the device interface is
/// byte-addressed, and a larger minimum would make the server reject unaligned requests from
/// clients that never asked for block sizes (e.g. `OPT_EXPORT_NAME` users).
pub const MIN_BLOCK_BYTES: u32 = 1;
/// Advertised preferred block size: the size below which devices do read-modify-write.
pub const PREFERRED_BLOCK_BYTES: u32 = 4096;
/// Advertised maximum block size and the largest READ/WRITE/CACHE this server accepts: 32 MiB,
/// the size the protocol says no client should exceed and no server should treat as abuse.
pub const MAX_BLOCK_BYTES: u32 = 32 << 20;

/// Largest option payload read into memory. Covers a 4096-byte name plus metadata queries.
pub const MAX_OPTION_BYTES: u32 = 64 << 10;
/// Largest oversized option payload skipped (and answered `ERR_TOO_BIG`) rather than ending
/// the session; anything larger is treated as abuse and the connection is dropped.
pub const MAX_OPTION_SKIP_BYTES: u32 = 1 << 20;
/// Options accepted on one connection before it is dropped (bounds handshake work).
pub const MAX_OPTIONS_PER_CONNECTION: u32 = 16 << 10;
/// Longest string (export name, query, message) the protocol allows.
pub const MAX_STRING_BYTES: usize = 4096;
/// Metadata queries accepted in one `LIST/SET_META_CONTEXT`.
pub const MAX_META_QUERIES: u32 = 64;
/// Block status descriptors sent in one reply (the protocol lets a server send fewer).
pub const MAX_STATUS_EXTENTS: usize = 1024;
