//! The data-plane frame: a fixed 96-byte little-endian header, then `length` payload bytes.
//!
//! Requests and replies share the header. A request carries its payload when it is a WRITE,
//! PUSH or CALL; a reply carries one when it answers a READ, ALLOCATION, STAT, LIST, PULL or
//! CALL (a CALL's Conflict reply too). Both checksums are crc32c: the header's covers bytes
//! 0..92, the payload's covers the payload (0 when there is none). The byte layout is in
//! `docs/design.md`.

use crate::ids::{ObjectId, PgId, Version};
use thiserror::Error;

/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 96;
/// "BSLT" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"BSLT");
/// Version of the wire format; bumped on any incompatible change.
pub const WIRE_VERSION: u8 = 2;
/// Largest payload a frame may carry. Objects are at most 4 MiB; keep headroom for metadata.
pub const MAX_PAYLOAD_BYTES: u32 = 8 << 20;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Liveness and version check; no object.
    Ping = 1,
    /// Read `length` bytes at `offset` of the object.
    Read = 2,
    /// Write the payload at `offset` of the object.
    Write = 3,
    /// Deallocate `length` bytes at `offset` (reads back as zeros).
    Trim = 4,
    /// Remove the whole object.
    Delete = 5,
    /// Make every write this OSD acknowledged durable.
    Flush = 6,
    /// Which 4 KiB blocks of the object hold data: reply payload is a bitmap, LSB first.
    Allocation = 7,
    /// Delete, on this OSD only, every local object of `object.inode` whose index is at least
    /// `object.index`. Sent to every OSD to remove or shrink a volume in time proportional to
    /// the data it holds, not to its nominal size.
    Purge = 8,
    /// Space and object counts of the OSD's store: reply payload is five little-endian u64
    /// (capacity bytes, used bytes, total slots, free slots, objects).
    Stat = 9,
    /// Every object of the PG `pg` held by this OSD with its version, from `object` on (a
    /// cursor: entries are sorted by object id). Reply payload: entries of four little-endian
    /// u64 (inode, index, version epoch, version counter), at most [`LIST_MAX_ENTRIES`]; a
    /// full reply means "ask again from the last object + 1". With `map_epoch` E it also
    /// *seals* the PG below E on this OSD: replica mutations from an older interval are
    /// refused from then on, so a new primary that read this list misses no acknowledged write.
    /// `version.epoch` names the incarnation the sender expects of this OSD (0: any); another
    /// incarnation (a restarted process, which may have lost unflushed writes) answers
    /// Unavailable instead of a list that would be taken for the old process's.
    List = 10,
    /// The whole object (REPLICA flag, between OSDs): reply payload is an object image (see
    /// [`crate::image`]) and the reply's `version` is the object's version; an absent object
    /// answers Ok with an empty payload and version zero. `version.epoch` names the expected
    /// incarnation, as for LIST.
    Pull = 11,
    /// Replace the whole object with the payload's object image at `version` (an empty
    /// payload deletes it). Sent by a primary to bring a replica's copy up to date.
    Push = 12,
    /// Run a method of an object class on `object` at its PG's primary: `offset` names the
    /// method (see [`crate::kv::KvMethod`]), the payload carries its arguments and the reply
    /// payload its result. Client requests only; a table edit reaches the replicas as an
    /// ordinary WRITE of the object.
    Call = 13,
    /// Freeze the layer `object.inode` on this OSD (client → every OSD, before a snapshot
    /// moves a volume's head): from the reply on, client mutations of that inode, and client
    /// reads without [`Flags::SNAPSHOT`], answer [`Status::Frozen`]. The OSD replies once every
    /// mutation that passed its frozen check before has finished.
    Fence = 14,
    /// If layer `object.inode` lacks object `object.index` and one of its ancestors holds
    /// it, copy the nearest such ancestor's object into the layer, whole (client → the PG's
    /// primary, replicated like a write). Allowed on frozen layers: what the layer reads does
    /// not change. Used to flatten a clone and to merge a removed snapshot into its children.
    CopyUp = 15,
    /// How much of some layers this OSD stores (every copy it holds, primary or not):
    /// request payload u32 count (1..=[`USAGE_MAX_INODES`]) then that many u64 inodes;
    /// reply payload per inode two u64: objects, allocated bytes. Little endian.
    Usage = 16,
    /// Erasure-coded PGs (REPLICA flag, primary → member): make the stash `object` (a chunk
    /// key with the stash bit, see [`crate::ObjectId::chunk`]) at `version` the committed
    /// chunk of its position, in one store record. Answers Ok when already done (the chunk
    /// is at `version` and no stash is left), Stale when the stash is at another version.
    Promote = 17,
    /// Scrub a batch of PG `pg`'s objects from `object` on (client → the PG's primary): read
    /// every copy (or every chunk) of each, compare, repair what disagrees. Reply payload:
    /// six little-endian u64 — objects checked, inconsistent, repaired, done (1 when the PG
    /// has no objects past this batch), then the cursor (inode, index) to send next.
    Scrub = 18,
    /// Erasure-coded PGs (REPLICA flag, primary → member): store the payload as the
    /// *partial stash* `object` ([`crate::ObjectId::partial_stash`]: a header block naming
    /// the base version, then the blocks that change) at `version`, if the member's
    /// committed chunk is at `prev_version` (else Stale); FUA makes it durable first.
    Stash = 19,
    /// Give up the unfound stripes of the erasure-coded PG `pg` (client → the PG's
    /// primary, no payload): each is rewritten at a new version with the newest contents
    /// that still decode. Reply payload: [`crate::unfound`]. Invalid when the PG has none.
    MarkUnfoundLost = 20,
    /// Replicated PGs (REPLICA flag, primary → member): the member's copy of PG `pg` is
    /// complete in the interval that began at `map_epoch` (the primary activated it with this
    /// copy complete, or finished recovering it). `version.epoch` names the incarnation the
    /// primary expects of the member, as for LIST. Lets the member serve
    /// [`Flags::LOCAL_READ`] reads until its interval changes; answers Stale when the
    /// member's PG is no longer at that interval (nothing changes then).
    Complete = 21,
}

/// Most inodes one USAGE request may name.
pub const USAGE_MAX_INODES: usize = 4096;

/// Most objects one SCRUB request checks (a request stays well inside a client timeout).
pub const SCRUB_BATCH_OBJECTS: usize = 64;

/// Most entries in one LIST reply (32 bytes each: 2 MiB).
pub const LIST_MAX_ENTRIES: usize = 65536;
/// Bytes of one LIST entry.
pub const LIST_ENTRY_BYTES: usize = 32;

impl Opcode {
    /// A client request about one object (its PG follows from the object: a PG count
    /// change moves it), rather than one addressed to a PG or an OSD.
    pub fn addresses_object(self) -> bool {
        matches!(
            self,
            Self::Read
                | Self::Write
                | Self::Trim
                | Self::Delete
                | Self::Allocation
                | Self::Call
                | Self::CopyUp
        )
    }

    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::Ping,
            2 => Self::Read,
            3 => Self::Write,
            4 => Self::Trim,
            5 => Self::Delete,
            6 => Self::Flush,
            7 => Self::Allocation,
            8 => Self::Purge,
            9 => Self::Stat,
            10 => Self::List,
            11 => Self::Pull,
            12 => Self::Push,
            13 => Self::Call,
            14 => Self::Fence,
            15 => Self::CopyUp,
            16 => Self::Usage,
            17 => Self::Promote,
            18 => Self::Scrub,
            19 => Self::Stash,
            20 => Self::MarkUnfoundLost,
            21 => Self::Complete,
            _ => return None,
        })
    }
}

/// Header flag bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags(pub u16);

impl Flags {
    /// The frame is a reply.
    pub const REPLY: u16 = 1 << 0;
    /// A primary forwards this mutation to a replica: apply it, do not forward it again.
    pub const REPLICA: u16 = 1 << 1;
    /// Make this write durable before replying (NBD FUA).
    pub const FUA: u16 = 1 << 2;
    /// A READ or ALLOCATION meant for a frozen layer (a snapshot export, a copy job): served
    /// even though the inode is frozen. Without it such reads answer [`Status::Frozen`].
    pub const SNAPSHOT: u16 = 1 << 3;
    /// A READ from a gateway to a member of the PG that is not its primary (a replica on the
    /// gateway's host): served from that copy only when it is complete in its current
    /// interval and holds peer leases from every other member, else answered
    /// [`Status::NotPrimary`] (the gateway then asks the primary). See docs/design.md,
    /// "Reads from a local replica".
    pub const LOCAL_READ: u16 = 1 << 4;
    /// Local to a receiver, never acted on as sent: the frame was read from a connection and
    /// its payload matched `payload_crc`, so the crc may be reused for the same bytes (a
    /// primary forwarding a write unchanged). Receivers set or clear it themselves.
    pub const CRC_CHECKED: u16 = 1 << 15;

    pub fn has(self, bit: u16) -> bool {
        self.0 & bit != 0
    }
}

/// Result code carried in replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Status {
    Ok = 0,
    /// Data could not be read or written (checksum mismatch, disk error).
    Io = 1,
    /// The store is full.
    NoSpace = 2,
    /// The request is malformed or out of range.
    Invalid = 3,
    /// This OSD is not the primary of the object's PG in the caller's map epoch.
    NotPrimary = 4,
    /// The store has stopped accepting writes after an I/O or fsync failure.
    Failed = 5,
    /// A replica could not be reached, or this OSD cannot serve right now (fenced from the
    /// cluster metadata, map behind the caller's); nothing was acknowledged. Retry.
    Unavailable = 6,
    /// The PG is peering or recovering on this OSD (or incomplete: no copy known to be
    /// complete is reachable); retry later.
    Peering = 7,
    /// A replica's copy of the object is not at the version the primary expected
    /// (`prev_version`); nothing was applied. The primary pushes the whole object instead.
    Stale = 8,
    /// A condition of a CALL did not hold; nothing was applied. The reply payload is a u32
    /// naming the failing part (for a KV update: the index of the first failing edit).
    Conflict = 9,
    /// The object's layer is frozen (a snapshot took it): the sender's view of the volume
    /// is stale. Re-read the volume record and retry on its current head.
    Frozen = 10,
    /// The connection's entity lacks the capability for this request (see "Data-plane
    /// authentication"); nothing was done.
    Denied = 11,
}

impl Status {
    /// Should a client retry the request (after refreshing its map)? These mean "not now,
    /// not here", never that the request itself was wrong.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Status::NotPrimary | Status::Unavailable | Status::Peering
        )
    }
}

impl Status {
    pub fn from_u32(v: u32) -> Self {
        match v {
            0 => Self::Ok,
            1 => Self::Io,
            2 => Self::NoSpace,
            3 => Self::Invalid,
            4 => Self::NotPrimary,
            5 => Self::Failed,
            6 => Self::Unavailable,
            7 => Self::Peering,
            8 => Self::Stale,
            9 => Self::Conflict,
            10 => Self::Frozen,
            11 => Self::Denied,
            // Unknown codes from a newer peer: treat as an I/O failure, never as success.
            _ => Self::Io,
        }
    }
}

/// A decoded frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub opcode: Opcode,
    pub flags: Flags,
    pub request_id: u64,
    pub object: ObjectId,
    pub offset: u32,
    /// Payload length for frames with a payload; requested length for READ/TRIM.
    pub length: u32,
    pub version: Version,
    /// Replica mutations: the version the primary's copy had before this mutation; the
    /// replica applies it only if its own copy is at exactly that version.
    pub prev_version: Version,
    pub map_epoch: u32,
    pub status: Status,
    /// The placement group the sender computed for the object; the OSD checks it is primary.
    pub pg: PgId,
    pub payload_crc: u32,
}

/// Why a header could not be decoded. Any of these is a framing error: the connection
/// must be closed, because the stream position can no longer be trusted.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("bad magic {found:#010x}")]
    BadMagic { found: u32 },
    #[error("unsupported wire version {found}")]
    BadVersion { found: u8 },
    #[error("header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderChecksum { stored: u32, computed: u32 },
    #[error("unknown opcode {found}")]
    BadOpcode { found: u8 },
    #[error("payload of {length} bytes exceeds the limit of {MAX_PAYLOAD_BYTES}")]
    PayloadTooLarge { length: u32 },
}

impl Header {
    /// A request header with no version, epoch or status.
    pub fn request(opcode: Opcode, request_id: u64, object: ObjectId) -> Self {
        Self {
            opcode,
            flags: Flags::default(),
            request_id,
            object,
            offset: 0,
            length: 0,
            version: Version::ZERO,
            prev_version: Version::ZERO,
            map_epoch: 0,
            status: Status::Ok,
            pg: PgId { pool: 0, index: 0 },
            payload_crc: 0,
        }
    }

    /// The reply to this request with the given status and no payload.
    pub fn reply(&self, status: Status) -> Self {
        Self {
            flags: Flags(Flags::REPLY),
            status,
            length: 0,
            payload_crc: 0,
            ..*self
        }
    }

    /// Does a frame with this header carry `length` payload bytes after it?
    pub fn has_payload(&self) -> bool {
        let reply = self.flags.has(Flags::REPLY);
        match self.opcode {
            Opcode::Write | Opcode::Push | Opcode::Stash => !reply,
            Opcode::Read | Opcode::Allocation | Opcode::Stat | Opcode::List | Opcode::Pull => {
                reply && self.status == Status::Ok
            }
            Opcode::Call => !reply || matches!(self.status, Status::Ok | Status::Conflict),
            Opcode::Usage => !reply || self.status == Status::Ok,
            Opcode::Scrub | Opcode::MarkUnfoundLost => reply && self.status == Status::Ok,
            _ => false,
        }
    }

    /// Encode into exactly `HEADER_LEN` bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        b[4] = WIRE_VERSION;
        b[5] = self.opcode as u8;
        b[6..8].copy_from_slice(&self.flags.0.to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..24].copy_from_slice(&self.object.inode.to_le_bytes());
        b[24..32].copy_from_slice(&self.object.index.to_le_bytes());
        b[32..36].copy_from_slice(&self.offset.to_le_bytes());
        b[36..40].copy_from_slice(&self.length.to_le_bytes());
        b[40..48].copy_from_slice(&self.version.epoch.to_le_bytes());
        b[48..56].copy_from_slice(&self.version.counter.to_le_bytes());
        b[56..60].copy_from_slice(&self.map_epoch.to_le_bytes());
        b[60..64].copy_from_slice(&(self.status as u32).to_le_bytes());
        b[64..68].copy_from_slice(&self.pg.pool.to_le_bytes());
        b[68..72].copy_from_slice(&self.pg.index.to_le_bytes());
        b[72..76].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[76..84].copy_from_slice(&self.prev_version.epoch.to_le_bytes());
        b[84..92].copy_from_slice(&self.prev_version.counter.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..92]);
        b[92..96].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and validate a header.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, DecodeError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(x)
        };
        let magic = u32_at(0);
        if magic != MAGIC {
            return Err(DecodeError::BadMagic { found: magic });
        }
        if b[4] != WIRE_VERSION {
            return Err(DecodeError::BadVersion { found: b[4] });
        }
        let stored = u32_at(92);
        let computed = crc32c::crc32c(&b[0..92]);
        if stored != computed {
            return Err(DecodeError::HeaderChecksum { stored, computed });
        }
        let opcode = Opcode::from_u8(b[5]).ok_or(DecodeError::BadOpcode { found: b[5] })?;
        let header = Header {
            opcode,
            flags: Flags(u16::from_le_bytes([b[6], b[7]])),
            request_id: u64_at(8),
            object: ObjectId::new(u64_at(16), u64_at(24)),
            offset: u32_at(32),
            length: u32_at(36),
            version: Version::new(u64_at(40), u64_at(48)),
            map_epoch: u32_at(56),
            status: Status::from_u32(u32_at(60)),
            pg: PgId {
                pool: u32_at(64),
                index: u32_at(68),
            },
            payload_crc: u32_at(72),
            prev_version: Version::new(u64_at(76), u64_at(84)),
        };
        if header.has_payload() && header.length > MAX_PAYLOAD_BYTES {
            return Err(DecodeError::PayloadTooLarge {
                length: header.length,
            });
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_header() -> impl Strategy<Value = Header> {
        (
            1u8..=21,
            any::<u16>(),
            any::<u64>(),
            any::<(u64, u64)>(),
            any::<(u32, u32)>(),
            any::<(u64, u64)>(),
            any::<u32>(),
            0u32..=10,
            any::<(u32, u32, u32)>(),
            any::<(u64, u64)>(),
        )
            .prop_map(
                |(op, flags, id, obj, (offset, length), ver, epoch, st, (pool, pg, pcrc), prev)| {
                    Header {
                        opcode: Opcode::from_u8(op).unwrap(),
                        flags: Flags(flags),
                        request_id: id,
                        object: ObjectId::new(obj.0, obj.1),
                        offset,
                        length: length % (MAX_PAYLOAD_BYTES + 1),
                        version: Version::new(ver.0, ver.1),
                        map_epoch: epoch,
                        status: Status::from_u32(st),
                        pg: PgId { pool, index: pg },
                        payload_crc: pcrc,
                        prev_version: Version::new(prev.0, prev.1),
                    }
                },
            )
    }

    /// Goal: CALL frames carry their payload both ways (a Conflict reply too, for the failing
    /// index), other error replies carry none, and status codes past Frozen read as Io.
    #[test]
    fn call_payloads_and_statuses() {
        let req = Header::request(Opcode::Call, 1, ObjectId::new(1, 2));
        assert!(req.has_payload());
        assert!(req.reply(Status::Ok).has_payload());
        assert!(req.reply(Status::Conflict).has_payload());
        assert!(!req.reply(Status::Invalid).has_payload());
        assert!(!Header::request(Opcode::Write, 1, ObjectId::new(1, 2))
            .reply(Status::Conflict)
            .has_payload());
        assert_eq!(Status::from_u32(9), Status::Conflict);
        assert_eq!(Status::from_u32(10), Status::Frozen);
        assert_eq!(Status::from_u32(11), Status::Denied);
        assert_eq!(Status::from_u32(12), Status::Io);
        assert!(!Status::Conflict.is_retryable());
        assert!(
            !Status::Frozen.is_retryable(),
            "Frozen needs a new volume record, not a map"
        );
        assert_eq!(Opcode::from_u8(13), Some(Opcode::Call));
        assert_eq!(Opcode::from_u8(14), Some(Opcode::Fence));
        assert!(!Header::request(Opcode::Fence, 1, ObjectId::new(1, 0)).has_payload());
        assert_eq!(Opcode::from_u8(15), Some(Opcode::CopyUp));
        assert!(!Header::request(Opcode::CopyUp, 1, ObjectId::new(1, 0)).has_payload());
        assert_eq!(Opcode::from_u8(16), Some(Opcode::Usage));
        let usage = Header::request(Opcode::Usage, 1, ObjectId::new(0, 0));
        assert!(usage.has_payload() && usage.reply(Status::Ok).has_payload());
        assert!(!usage.reply(Status::Invalid).has_payload());
        assert_eq!(Opcode::from_u8(17), Some(Opcode::Promote));
        let promote = Header::request(Opcode::Promote, 1, ObjectId::new(1, 0).chunk(0, true));
        assert!(!promote.has_payload() && !promote.reply(Status::Ok).has_payload());
        assert_eq!(Opcode::from_u8(18), Some(Opcode::Scrub));
        let scrub = Header::request(Opcode::Scrub, 1, ObjectId::new(0, 0));
        assert!(!scrub.has_payload() && scrub.reply(Status::Ok).has_payload());
        assert_eq!(Opcode::from_u8(19), Some(Opcode::Stash));
        let stash = Header::request(Opcode::Stash, 1, ObjectId::new(1, 0).partial_stash(2));
        assert!(stash.has_payload() && !stash.reply(Status::Ok).has_payload());
        assert_eq!(Opcode::from_u8(20), Some(Opcode::MarkUnfoundLost));
        let lost = Header::request(Opcode::MarkUnfoundLost, 1, ObjectId::new(0, 0));
        assert!(!lost.has_payload() && lost.reply(Status::Ok).has_payload());
        assert!(!lost.reply(Status::Invalid).has_payload());
        assert_eq!(Opcode::from_u8(21), Some(Opcode::Complete));
        let complete = Header::request(Opcode::Complete, 1, ObjectId::new(0, 0));
        assert!(!complete.has_payload() && !complete.reply(Status::Ok).has_payload());
        assert_eq!(Opcode::from_u8(22), None);
    }

    proptest! {
        /// Goal: every header survives encode → decode unchanged.
        #[test]
        fn roundtrip(h in any_header()) {
            prop_assert_eq!(Header::decode(&h.encode()), Ok(h));
        }

        /// Goal: any single flipped bit is detected, never decoded as a different header.
        #[test]
        fn bit_flip_detected(h in any_header(), bit in 0usize..HEADER_LEN * 8) {
            let mut b = h.encode();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Header::decode(&b).is_err());
        }

        /// Goal: arbitrary bytes never panic the decoder.
        #[test]
        fn garbage_never_panics(v in proptest::collection::vec(any::<u8>(), HEADER_LEN)) {
            let b: [u8; HEADER_LEN] = v.try_into().unwrap();
            let _ = Header::decode(&b);
        }
    }
}
